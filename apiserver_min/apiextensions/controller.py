"""The definitions controller: every API server runs one, watching the definitions
through its watch cache.

For each definition it works out which names can be accepted (none another
definition of the group, nor a built-in kind of the group, holds already), serves
the defined kinds once the names are accepted (a watch cache for their storage
prefix, the store's strategy, the sub-resources, then the kind registry, which
discovery, routing and OpenAPI read), and writes the conditions ``NamesAccepted``
and ``Established``. A definition being deleted has its objects deleted first; then
its cleanup finalizer is removed and, once it is gone, its kinds are no longer
served. Several servers sharing one store each serve what the definitions say; the
status they write is the same, so they agree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from ..api import names
from ..api import status as st
from ..api.codec import decode_stored
from ..api.kinds import KindInfo, Registry
from ..api.timeutil import format_rfc3339, now
from ..api.user import SYSTEM_USER
from ..registry.families import STORE_SUBRESOURCE
from ..registry.rest import DeleteOptions, RestTable
from ..registry.store import Store
from ..storage.cacher import CacheEvent, ResourceCache, WatchCache
from ..storage.keys import key_prefix, object_key
from .resource import CustomResourceStrategy, CustomScaleREST, Definition

log = logging.getLogger("orch-apiserver.apiextensions")

NAMES_ACCEPTED = "NamesAccepted"
ESTABLISHED = "Established"
TERMINATING = "Terminating"
RETRY_SECONDS = 1.0


def condition(crd: dict, ctype: str) -> dict | None:
    for c in (crd.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def is_established(crd: dict) -> bool:
    c = condition(crd, ESTABLISHED)
    return c is not None and c.get("status") == "True"


def _set_condition(status: dict, ctype: str, value: str, reason: str, message: str) -> None:
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    for c in conditions:
        if c.get("type") == ctype:
            if c.get("status") != value:
                c["lastTransitionTime"] = format_rfc3339(now())
            c["status"], c["reason"], c["message"] = value, reason, message
            break
    else:
        conditions.append(
            {
                "type": ctype,
                "status": value,
                "lastTransitionTime": format_rfc3339(now()),
                "reason": reason,
                "message": message,
            }
        )
    status["conditions"] = conditions


class DefinitionController:
    def __init__(self, store: Store, cache: WatchCache, registry: Registry, rest: RestTable):
        self.store = store
        self.cache = cache
        self.registry = registry
        self.rest = rest
        crd_kind = registry.by_resource(names.APIEXTENSIONS_GROUP, "v1", "customresourcedefinitions")
        assert crd_kind is not None
        self.crd_kind: KindInfo = crd_kind
        self.prefix = key_prefix(crd_kind)
        # Definition name -> what this server serves for it.
        self.served: dict[str, tuple[Definition, list[KindInfo]]] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._task: asyncio.Task | None = None
        self._retries: set[asyncio.TimerHandle] = set()
        cache.listeners.append(self._on_event)

    # --- events -------------------------------------------------------------------------
    def _on_event(self, c: ResourceCache | None, ev: CacheEvent | None) -> None:
        if c is None:  # a (re)list: look at every definition again
            for name in self._names():
                self.enqueue(name)
            for name in list(self.served):
                self.enqueue(name)
        elif c.prefix == self.prefix and ev is not None:
            self.enqueue(ev.entry.name)

    def _names(self) -> list[str]:
        c = self.cache.caches.get(self.prefix)
        return [e.name for e in c.items.values()] if c is not None else []

    def enqueue(self, name: str) -> None:
        if name not in self._queued:
            self._queued.add(name)
            self._queue.put_nowait(name)

    def _retry_later(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._retries.discard(handle)
            self.enqueue(name)

        handle = loop.call_later(RETRY_SECONDS, fire)
        self._retries.add(handle)

    # --- life ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Serve the definitions stored now (before the server answers), then follow changes."""
        while not self._queue.empty():
            name = self._queue.get_nowait()
            self._queued.discard(name)
            await self._sync_logged(name)
        self._task = asyncio.create_task(self._run(), name="crd-controller")

    async def stop(self) -> None:
        for h in self._retries:
            h.cancel()
        self._retries.clear()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            name = await self._queue.get()
            self._queued.discard(name)
            await self._sync_logged(name)

    async def _sync_logged(self, name: str) -> None:
        try:
            again = await self.sync(name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one definition's failure must not stop the others; retried
            log.warning("custom resource definition %s: %s (retrying)", name, exc)
            again = True
        if again:
            self._retry_later(name)

    # --- one definition ---------------------------------------------------------------------
    async def sync(self, name: str) -> bool:
        """Bring one definition's serving and status in line; True to look again later."""
        entry = self.cache.cache(self.prefix).items.get(object_key(self.crd_kind, "", name))
        if entry is None:
            await self.unserve(name)
            return False
        crd = entry.object()
        if (crd.get("metadata") or {}).get("deletionTimestamp"):
            return await self._clean_up(crd)
        accepted, names_status = self._names_status(crd)
        if accepted:
            await self.serve(crd, names_status)
        elif not is_established(crd):
            await self.unserve(name)
        if self._status_differs(crd, names_status, accepted):
            await self._write_status(name, accepted)
        return False

    def _names_status(self, crd: dict) -> tuple[bool, dict]:
        """Which of the requested names can be accepted: (all accepted, the status to write)."""
        spec = crd.get("spec") or {}
        group = spec.get("group", "")
        requested = spec.get("names") or {}
        status = crd.get("status") or {}
        accepted = dict(status.get("acceptedNames") or {})
        resources: set[str] = set()
        kinds: set[str] = set()
        me = (crd.get("metadata") or {}).get("name")
        for e in self.cache.cache(self.prefix).items.values():
            if e.name == me:
                continue
            other = e.object()
            if (other.get("spec") or {}).get("group") != group:
                continue
            on = (other.get("status") or {}).get("acceptedNames") or {}
            resources.update(x for x in (on.get("plural"), on.get("singular"), *(on.get("shortNames") or ())) if x)
            kinds.update(x for x in (on.get("kind"), on.get("listKind")) if x)
        served_here = self.served.get(me or "")
        mine = {(k.group, k.version, k.resource) for k in served_here[1]} if served_here else set()
        for k in self.registry.kinds:
            if k.group == group and (k.group, k.version, k.resource) not in mine:
                resources.update(x for x in (k.resource, k.singular_name, *k.short_names) if x)
                kinds.update((k.kind, k.list_kind))
        problems: list[tuple[str, str]] = []
        new = dict(accepted)

        def check(field: str, reason: str, pool: set[str]) -> None:
            want = requested.get(field)
            if want and want != accepted.get(field) and want in pool:
                problems.append((reason, f"{want!r} is already in use".replace("'", '"')))
            else:
                new[field] = want or ""

        check("plural", "PluralConflict", resources)
        check("singular", "SingularConflict", resources)
        shorts = list(requested.get("shortNames") or ())
        taken = [s for s in shorts if s in resources and s not in (accepted.get("shortNames") or ())]
        if taken:
            problems.append(("ShortNamesConflict", f'"{taken[0]}" is already in use'))
        else:
            new["shortNames"] = shorts
        check("kind", "KindConflict", kinds)
        check("listKind", "ListKindConflict", kinds)
        new["categories"] = list(requested.get("categories") or ())
        for key in ("shortNames", "categories", "singular", "listKind"):
            if not new.get(key):
                new.pop(key, None)
        out = {"acceptedNames": new}
        if problems:
            out["reason"], out["message"] = problems[0]
        return not problems, out

    def _status_differs(self, crd: dict, names_status: dict, accepted: bool) -> bool:
        status = crd.get("status") or {}
        if status.get("acceptedNames") != names_status["acceptedNames"]:
            return True
        na = condition(crd, NAMES_ACCEPTED)
        want = "True" if accepted else "False"
        if (
            na is None
            or na.get("status") != want
            or (not accepted and na.get("message") != names_status.get("message"))
        ):
            return True
        return accepted and not is_established(crd)

    async def _write_status(self, name: str, accepted_now: bool) -> None:
        def compute(old: dict) -> dict:
            accepted, names_status = self._names_status(old)
            status = old.setdefault("status", {})
            status["acceptedNames"] = names_status["acceptedNames"]
            if accepted:
                _set_condition(status, NAMES_ACCEPTED, "True", "NoConflicts", "no conflicts found")
                if (old.get("spec") or {}).get("group") and name in self.served:
                    _set_condition(
                        status, ESTABLISHED, "True", "InitialNamesAccepted", "the initial names have been accepted"
                    )
            else:
                _set_condition(status, NAMES_ACCEPTED, "False", names_status["reason"], names_status["message"])
                if not is_established(old):
                    _set_condition(status, ESTABLISHED, "False", "NotAccepted", "not all names are accepted")
            old["metadata"].pop("resourceVersion", None)
            return old

        try:
            await self.store.update(self.crd_kind, "", name, compute, SYSTEM_USER, subresource="status")
        except st.ApiError as exc:
            if exc.code != 404:
                raise

    # --- serving ------------------------------------------------------------------------------
    async def serve(self, crd: dict, names_status: dict) -> None:
        view = dict(crd)
        view["status"] = {**(crd.get("status") or {}), "acceptedNames": names_status["acceptedNames"]}
        d = Definition.from_object(view)
        name = d.name
        prev = self.served.get(name)
        if prev is not None and prev[0] == d:
            return
        kinds = d.kinds()
        if not kinds:
            await self.unserve(name)
            return
        base = kinds[0]
        if prev is not None and key_prefix(prev[1][0]) != key_prefix(base):
            await self.unserve(name)
            prev = None
        await self.cache.add_kind(base)
        self.store.set_strategy(base, CustomResourceStrategy(base, d))
        old_kinds = prev[1] if prev is not None else []
        for k in old_kinds:
            for sub in ("status", "scale"):
                self.rest.subresources.pop((k.group, k.resource, sub), None)
        for k, served in zip(kinds, d.versions):
            if served.status:
                self.rest.subresources[(k.group, k.resource, "status")] = STORE_SUBRESOURCE
            if served.scale is not None:
                self.rest.subresources[(k.group, k.resource, "scale")] = CustomScaleREST(self.store, k, served.scale)
        keep = {(k.group, k.version, k.resource) for k in kinds}
        self.registry.replace(add=kinds, remove=[k for k in old_kinds if (k.group, k.version, k.resource) not in keep])
        self.served[name] = (d, kinds)
        log.info("serving %s (%s)", name, ", ".join(k.api_version for k in kinds))

    async def unserve(self, name: str) -> None:
        prev = self.served.pop(name, None)
        if prev is None:
            return
        kinds = prev[1]
        self.registry.replace(remove=kinds)
        for k in kinds:
            for sub in ("status", "scale"):
                self.rest.subresources.pop((k.group, k.resource, sub), None)
        self.store.remove_strategy(kinds[0])
        self.cache.remove_kind(kinds[0])
        log.info("no longer serving %s", name)

    # --- deletion -----------------------------------------------------------------------------
    async def _clean_up(self, crd: dict) -> bool:
        md = crd.get("metadata") or {}
        name = md.get("name", "")
        if names.CRD_CLEANUP_FINALIZER not in (md.get("finalizers") or ()):
            return False
        prev = self.served.get(name)
        if prev is not None:
            kind = prev[1][0]
            if not prev[0].terminating:  # no object is created from now on
                d = dataclasses.replace(prev[0], terminating=True)
                self.store.set_strategy(kind, CustomResourceStrategy(kind, d))
                self.served[name] = (d, prev[1])
            remaining = await self._delete_instances(kind)
            if remaining:
                await self._terminating(name, "InstanceDeletionInProgress", "CustomResource deletion is in progress")
                return True
        await self._remove_finalizer(name)
        return False

    async def _delete_instances(self, kind: KindInfo) -> int:
        """Delete every object of the kind; the number still stored."""
        c = self.cache.cache(key_prefix(kind))
        entries = list(c.items.values())
        for e in entries:
            if e.deleting:
                continue
            try:
                await self.store.delete(kind, e.namespace, e.name, DeleteOptions(), SYSTEM_USER)
            except st.ApiError as exc:
                if exc.code not in (404, 409):
                    raise
        res = await self.store.backend.list(key_prefix(kind), limit=1)
        return len(res.items)

    async def _terminating(self, name: str, reason: str, message: str) -> None:
        def compute(old: dict) -> dict:
            _set_condition(old.setdefault("status", {}), TERMINATING, "True", reason, message)
            old["metadata"].pop("resourceVersion", None)
            return old

        entry = self.cache.cache(self.prefix).items.get(object_key(self.crd_kind, "", name))
        if entry is not None:
            c = condition(decode_stored(entry.raw, entry.rv), TERMINATING)
            if c is not None and c.get("reason") == reason:
                return
        try:
            await self.store.update(self.crd_kind, "", name, compute, SYSTEM_USER, subresource="status")
        except st.ApiError as exc:
            if exc.code != 404:
                raise

    async def _remove_finalizer(self, name: str) -> None:
        def compute(old: dict) -> dict:
            md = old["metadata"]
            md["finalizers"] = [f for f in md.get("finalizers") or () if f != names.CRD_CLEANUP_FINALIZER]
            md.pop("resourceVersion", None)
            return old

        try:
            await self.store.update(self.crd_kind, "", name, compute, SYSTEM_USER)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
