"""The garbage collector: dependents whose owners are gone are deleted; Orphan and Foreground deletion."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from ..api.user import SYSTEM_USER
from ..registry.store import DeleteOptions
from ..storage.cacher import CacheEvent, Entry, ResourceCache
from .queue import FIELD_MANAGER, RETRY_DELAY, KeyQueue

if TYPE_CHECKING:
    from ..client.host import ControllerHost

log = logging.getLogger("orch-apiserver.controllers")


class GarbageCollector:
    """Deletes dependents whose owners are gone; honours Orphan and Foreground deletion."""

    def __init__(self, server: "ControllerHost"):
        self.server = server
        self.store = server.store
        self.uids: dict[str, tuple[str, str]] = {}  # uid -> (cache prefix, key)
        self.dependents: dict[str, set[tuple[str, str]]] = {}  # owner uid -> {(prefix, key)}
        self.queue = KeyQueue()

    def _index(self, prefix: str, e: Entry) -> None:
        if e.uid:
            self.uids[e.uid] = (prefix, e.key)
        for owner in e.owners:
            self.dependents.setdefault(owner[0], set()).add((prefix, e.key))

    def _unindex(self, prefix: str, e: Entry) -> None:
        if e.uid and self.uids.get(e.uid) == (prefix, e.key):
            del self.uids[e.uid]
        for owner in e.owners:
            deps = self.dependents.get(owner[0])
            if deps is not None:
                deps.discard((prefix, e.key))
                if not deps:
                    del self.dependents[owner[0]]

    def on_event(self, cache: ResourceCache | None, ev: CacheEvent | None) -> None:
        if cache is None:
            self.uids.clear()
            self.dependents.clear()
            for c in self.server.cache.caches.values():
                for e in c.items.values():
                    self._index(c.prefix, e)
            for c in self.server.cache.caches.values():
                for e in c.items.values():
                    if e.owners:
                        self.queue.add(("dependent", c.prefix, e.key))
                    if e.deleting and self._gc_finalizers(e):
                        self.queue.add(("owner", c.prefix, e.key))
            return
        e, prev = ev.entry, ev.prev
        if prev is not None:
            self._unindex(cache.prefix, prev)
        if ev.type == "DELETED":
            self._unindex(cache.prefix, e)
            for dep in self.dependents.get(e.uid, ()):
                self.queue.add(("dependent",) + dep)
            # An owner waiting in foreground for this dependent may now be done.
            for owner in e.owners:
                loc = self.uids.get(owner[0])
                if loc is not None:
                    self.queue.add(("owner",) + loc)
            return
        self._index(cache.prefix, e)
        if e.owners:
            self.queue.add(("dependent", cache.prefix, e.key))
        if e.deleting and self._gc_finalizers(e):
            self.queue.add(("owner", cache.prefix, e.key))

    @staticmethod
    def _gc_finalizers(e: Entry) -> bool:
        return names.FINALIZER_ORPHAN in e.finalizers or names.FINALIZER_FOREGROUND in e.finalizers

    def _entry(self, prefix: str, key: str) -> tuple[KindInfo, Entry] | None:
        cache = self.server.cache.caches.get(prefix)
        if cache is None:
            return None
        e = cache.items.get(key)
        return (cache.kind, e) if e is not None else None

    async def run(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                done = await (self.sync_owner(*item[1:]) if item[0] == "owner" else self.sync_dependent(*item[1:]))
            except st.ApiError as exc:
                log.warning("garbage collector: %s: %s", item[2], exc.message)
                done = False
            except Exception:  # noqa: BLE001
                log.exception("garbage collector: %s failed", item[2])
                done = False
            if not done:
                self.queue.add_after(item, RETRY_DELAY)

    async def sync_dependent(self, prefix: str, key: str) -> bool:
        found = self._entry(prefix, key)
        if found is None:
            return True
        kind, e = found
        if e.deleting or not e.owners:
            return True
        live = []
        foreground = False
        for uid, _api_version, _kind, _name in e.owners:
            loc = self.uids.get(uid)
            if loc is None:
                continue
            owner = self._entry(*loc)
            if owner is None:
                continue
            live.append(owner)
            if owner[1].deleting and names.FINALIZER_FOREGROUND in owner[1].finalizers:
                foreground = True
        if live and not foreground:
            return True
        if (
            live
            and foreground
            and any(not (o[1].deleting and names.FINALIZER_FOREGROUND in o[1].finalizers) for o in live)
        ):
            return True
        policy = "Foreground" if foreground else "Background"
        log.info(
            "garbage collector: deleting %s (owners %s)",
            key,
            "being deleted in the foreground" if foreground else "are gone",
        )
        try:
            await self.store.delete(kind, e.namespace, e.name, DeleteOptions(propagation_policy=policy), SYSTEM_USER)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
        return True

    async def sync_owner(self, prefix: str, key: str) -> bool:
        found = self._entry(prefix, key)
        if found is None:
            return True
        kind, e = found
        if not e.deleting:
            return True
        deps = [d for d in self.dependents.get(e.uid, ()) if self._entry(*d) is not None]
        if names.FINALIZER_ORPHAN in e.finalizers:
            for d in deps:
                dkind, de = self._entry(*d)

                def drop_ref(obj: dict, uid=e.uid) -> dict:
                    md = obj["metadata"]
                    refs = [r for r in md.get("ownerReferences") or [] if r.get("uid") != uid]
                    if refs:
                        md["ownerReferences"] = refs
                    else:
                        md.pop("ownerReferences", None)
                    return obj

                try:
                    await self.store.update(
                        dkind, de.namespace, de.name, drop_ref, SYSTEM_USER, field_manager=FIELD_MANAGER
                    )
                except st.ApiError as exc:
                    if exc.code != 404:
                        raise
            await self._remove_finalizer(kind, e, names.FINALIZER_ORPHAN)
            return True
        if names.FINALIZER_FOREGROUND in e.finalizers:
            pending = False
            for d in deps:
                dkind, de = self._entry(*d)
                pending = True
                if not de.deleting:
                    self.queue.add(("dependent",) + d)
            if pending:
                return False
            await self._remove_finalizer(kind, e, names.FINALIZER_FOREGROUND)
        return True

    async def _remove_finalizer(self, kind: KindInfo, e: Entry, finalizer: str) -> None:
        def drop(obj: dict) -> dict:
            md = obj["metadata"]
            md["finalizers"] = [f for f in md.get("finalizers") or [] if f != finalizer]
            if not md["finalizers"]:
                del md["finalizers"]
            return obj

        try:
            await self.store.update(kind, e.namespace, e.name, drop, SYSTEM_USER, field_manager=FIELD_MANAGER)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
