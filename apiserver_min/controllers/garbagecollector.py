"""The garbage collector: dependents whose owners are gone are deleted; Orphan and Foreground deletion."""

from __future__ import annotations

import functools
import logging

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from ..client.informer import Informer, InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent, Entry
from .queue import RETRY_DELAY, KeyQueue

log = logging.getLogger("orch-apiserver.controllers")


class GarbageCollector:
    """Deletes dependents whose owners are gone; honours Orphan and Foreground deletion."""

    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.informers = informers
        self.by_prefix: dict[str, Informer] = {}
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

    def start(self) -> None:
        """Watch every kind (owners and dependents may be of any)."""
        for inf in self.informers.all():
            self.by_prefix[inf.prefix] = inf
        for inf in self.by_prefix.values():
            inf.add_handler(functools.partial(self.on_event, inf))
        # Kinds served later (custom resources) are watched from their first event.
        self.informers.on_new_kind(self._watch_new_kind)

    def _watch_new_kind(self, inf: Informer) -> None:
        if inf.prefix not in self.by_prefix:
            self.by_prefix[inf.prefix] = inf
            inf.add_handler(functools.partial(self.on_event, inf))

    def _replay(self, inf: Informer) -> None:
        """Index one kind afresh and look at each of its objects again."""
        prefix = inf.prefix
        for uid in [u for u, loc in self.uids.items() if loc[0] == prefix]:
            del self.uids[uid]
        for owner in list(self.dependents):
            deps = {d for d in self.dependents[owner] if d[0] != prefix}
            if deps:
                self.dependents[owner] = deps
            else:
                del self.dependents[owner]
        entries = inf.list()
        for e in entries:
            self._index(prefix, e)
        for e in entries:
            if e.owners:
                self.queue.add(("dependent", prefix, e.key))
            if e.deleting and self._gc_finalizers(e):
                self.queue.add(("owner", prefix, e.key))

    def on_event(self, inf: Informer, ev: CacheEvent | None) -> None:
        if ev is None:
            self._replay(inf)
            return
        prefix = inf.prefix
        e, prev = ev.entry, ev.prev
        if prev is not None:
            self._unindex(prefix, prev)
        if ev.type == "DELETED":
            self._unindex(prefix, e)
            for dep in self.dependents.get(e.uid, ()):
                self.queue.add(("dependent",) + dep)
            # An owner waiting in foreground for this dependent may now be done.
            for owner in e.owners:
                loc = self.uids.get(owner[0])
                if loc is not None:
                    self.queue.add(("owner",) + loc)
            return
        self._index(prefix, e)
        if e.owners:
            self.queue.add(("dependent", prefix, e.key))
        if e.deleting and self._gc_finalizers(e):
            self.queue.add(("owner", prefix, e.key))

    @staticmethod
    def _gc_finalizers(e: Entry) -> bool:
        return names.FINALIZER_ORPHAN in e.finalizers or names.FINALIZER_FOREGROUND in e.finalizers

    def _entry(self, prefix: str, key: str) -> tuple[KindInfo, Entry] | None:
        inf = self.by_prefix.get(prefix)
        if inf is None:
            return None
        e = inf.get_by_key(key)
        return (inf.kind, e) if e is not None else None

    async def run(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                done = await (self.sync_owner(*item[1:]) if item[0] == "owner" else self.sync_dependent(*item[1:]))
            except st.ApiError as exc:
                log.warning("garbage collector: %s: %s", item[2], exc.message)
                done = False
            except Exception:  # noqa: BLE001 - one bad item is retried; the queue goes on
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
            await self.client.delete(kind, e.namespace, e.name, DeleteOptions(propagation_policy=policy))
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
        # Looked up once: a dependent may go while the loop below awaits.
        deps = [(d, found) for d in self.dependents.get(e.uid, ()) if (found := self._entry(*d)) is not None]
        if names.FINALIZER_ORPHAN in e.finalizers:
            for _, (dkind, de) in deps:

                def drop_ref(obj: dict, uid=e.uid) -> dict:
                    md = obj["metadata"]
                    refs = [r for r in md.get("ownerReferences") or [] if r.get("uid") != uid]
                    if refs:
                        md["ownerReferences"] = refs
                    else:
                        md.pop("ownerReferences", None)
                    return obj

                try:
                    await self.client.update(dkind, de.namespace, de.name, drop_ref)
                except st.ApiError as exc:
                    if exc.code != 404:
                        raise
            await self._remove_finalizer(kind, e, names.FINALIZER_ORPHAN)
            return True
        if names.FINALIZER_FOREGROUND in e.finalizers:
            pending = False
            for d, (_, de) in deps:
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
            await self.client.update(kind, e.namespace, e.name, drop)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
