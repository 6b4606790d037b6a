"""Bundled controllers: namespace finalization and garbage collection.

Both are driven by watch-cache events in the same process and write through
the generic store as the system user, exactly as an outside client would, their
updates recorded in managedFields as the controller manager's (``FIELD_MANAGER``).
Work is queued by object key and done by one task per controller; a failed
item is retried after a short delay.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from .admission import SYSTEM_USER
from .store import DeleteOptions, key_prefix
from .watchcache import CacheEvent, Entry, ResourceCache

if TYPE_CHECKING:
    from .app import ApiServer

log = logging.getLogger("orch-apiserver.controllers")

RETRY_DELAY = 1.0
# Writes are recorded in managedFields under the controller manager's name (upstream:
# the user agent's product name, kube-controller-manager); deletes record nothing.
FIELD_MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER


class KeyQueue:
    """A de-duplicating work queue with delayed re-adds."""

    def __init__(self):
        self._pending: dict = {}
        self._event = asyncio.Event()

    def add(self, item) -> None:
        if item not in self._pending:
            self._pending[item] = None
            self._event.set()

    def add_after(self, item, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, item)

    async def get(self):
        while not self._pending:
            self._event.clear()
            await self._event.wait()
        item = next(iter(self._pending))
        del self._pending[item]
        return item


class NamespaceController:
    """Empties a terminating namespace, then removes its ``orch`` finalizer."""

    def __init__(self, server: "ApiServer"):
        self.server = server
        self.store = server.store
        self.kind = server.registry.by_resource("", "v1", "namespaces")
        self.prefix = key_prefix(self.kind)
        self.queue = KeyQueue()

    def on_event(self, cache: ResourceCache | None, ev: CacheEvent | None) -> None:
        if cache is None:
            for e in self.server.cache.cache(self.prefix).items.values():
                if e.deleting:
                    self.queue.add(e.name)
            return
        if cache.prefix == self.prefix and ev.type != "DELETED" and ev.entry.deleting:
            self.queue.add(ev.entry.name)

    async def run(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                done = await self.sync(name)
            except st.ApiError as exc:
                log.warning("namespace %s: %s", name, exc.message)
                done = False
            except Exception:  # noqa: BLE001
                log.exception("namespace %s: sync failed", name)
                done = False
            if not done:
                self.queue.add_after(name, RETRY_DELAY)

    async def sync(self, name: str) -> bool:
        entry = self.server.cache.cache(self.prefix).items.get(f"{self.prefix}{name}")
        if entry is None or not entry.deleting:
            return True
        remaining = 0
        for kind in self.server.registry.kinds:
            if not kind.namespaced or "delete" not in kind.verbs:
                continue
            cache = self.server.cache.cache(key_prefix(kind))
            for e in cache.sorted_entries(name):
                remaining += 1
                if e.deleting:
                    continue
                try:
                    await self.store.delete(kind, name, e.name, DeleteOptions(propagation_policy="Background"),
                                            SYSTEM_USER)
                except st.ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
        if remaining:
            return False

        def drop_finalizer(obj: dict) -> dict:
            spec = obj.setdefault("spec", {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != names.FINALIZER_NAMESPACE]
            return obj

        try:
            await self.store.update(self.kind, "", name, drop_finalizer, SYSTEM_USER, subresource="finalize",
                                    field_manager=FIELD_MANAGER)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
        log.info("namespace %s is empty and finalized", name)
        return True


class GarbageCollector:
    """Deletes dependents whose owners are gone; honours Orphan and Foreground deletion."""

    def __init__(self, server: "ApiServer"):
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
        if live and foreground and any(not (o[1].deleting and names.FINALIZER_FOREGROUND in o[1].finalizers)
                                       for o in live):
            return True
        policy = "Foreground" if foreground else "Background"
        log.info("garbage collector: deleting %s (owners %s)", key,
                 "being deleted in the foreground" if foreground else "are gone")
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
                    await self.store.update(dkind, de.namespace, de.name, drop_ref, SYSTEM_USER,
                                            field_manager=FIELD_MANAGER)
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


class Controllers:
    def __init__(self, server: "ApiServer"):
        self.server = server
        self.namespaces = NamespaceController(server)
        self.gc = GarbageCollector(server)
        self._tasks: list[asyncio.Task] = []
        # CSR approver/signer/cleaner; constructing it also installs the CSR strategy's
        # admission hook, which must be in place before the first request.
        from .csrcontrollers import CsrControllers
        from .bootstrapcontrollers import BootstrapControllers
        self.csr = CsrControllers(server)
        self.bootstrap = BootstrapControllers(server)
        self.elector = None
        self._elector_task: asyncio.Task | None = None
        self._listeners: list = []

    async def start(self) -> None:
        """The default RBAC policy (every server reconciles it at start, as upstream's
        bootstrap-roles hook), then the controllers: at once with SQLite or without
        --leader-elect, else whenever this server holds the controllers' Lease."""
        from ..auth.policy import reconcile_default_policy
        await reconcile_default_policy(self.server)
        opts = self.server.opts
        if getattr(opts, "leader_elect", False) and getattr(opts, "storage_backend", "sqlite") == "etcd3":
            from .leaderelection import LeaderElector
            self.elector = LeaderElector(
                self.server, lease_duration=opts.leader_elect_lease_duration,
                renew_deadline=opts.leader_elect_renew_deadline, retry_period=opts.leader_elect_retry_period,
                on_started=self._start_controllers, on_stopped=self._stop_controllers)
            self._elector_task = asyncio.create_task(self.elector.run(), name="leader-election")
        else:
            await self._start_controllers()

    @property
    def leading(self) -> bool:
        """Whether this server runs the controllers now."""
        return self.elector.leading if self.elector is not None else bool(self._tasks)

    async def _start_controllers(self) -> None:
        for c in (self.namespaces, self.gc):
            self._listen(c.on_event)
        self._tasks = [asyncio.create_task(self.namespaces.run(), name="namespace-controller"),
                       asyncio.create_task(self.gc.run(), name="garbage-collector")]
        # The ClusterRole aggregation controller that fills admin/edit/view.
        from ..auth.policy import ClusterRoleAggregator
        self.aggregator = ClusterRoleAggregator(self.server, self.server.rbac_index)
        self._tasks.append(asyncio.create_task(self.aggregator.run(), name="clusterrole-aggregator"))
        # Every active namespace's default ServiceAccount and orch-root-ca.crt ConfigMap.
        from ..auth.serviceaccount import ServiceAccountsController
        self.serviceaccounts = ServiceAccountsController(self.server)
        self._listen(self.serviceaccounts.on_event)
        self._tasks.append(asyncio.create_task(self.serviceaccounts.run(), name="serviceaccounts-controller"))
        # Certificate requests, then bootstrap tokens (bootstrap signer and token cleaner).
        # (Their start() subscribes their listeners itself.)
        self._tasks += self.csr.start()
        self._tasks += self.bootstrap.start()
        self._listeners += [self.csr.on_event, self.bootstrap.on_event]
        # Node heartbeats, condition taints and NoExecute evictions; then the scheduler
        # (--enable-scheduler), which places pods on the nodes that controller keeps honest.
        from .nodelifecycle import NodeLifecycleController
        self.nodelifecycle = NodeLifecycleController(self.server)
        self._listen(self.nodelifecycle.on_event)
        self._tasks.append(asyncio.create_task(self.nodelifecycle.run(), name="node-lifecycle-controller"))
        if getattr(self.server.opts, "enable_scheduler", True):
            from .scheduler import Scheduler
            self.scheduler = Scheduler(self.server)
            self._listen(self.scheduler.on_event)
            self._tasks.append(asyncio.create_task(self.scheduler.run(), name="scheduler"))

    def _listen(self, on_event) -> None:
        """Subscribe a fresh controller to the watch cache, then replay what it holds."""
        self.server.cache.listeners.append(on_event)
        self._listeners.append(on_event)
        on_event(None, None)

    async def _stop_controllers(self) -> None:
        self.bootstrap.stop()
        for fn in self._listeners:
            try:
                self.server.cache.listeners.remove(fn)
            except ValueError:
                pass
        self._listeners = []
        for t in reversed(self._tasks):
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks = []

    async def stop(self) -> None:
        if self._elector_task is not None:
            self._elector_task.cancel()
            try:
                await self._elector_task
            except (asyncio.CancelledError, Exception):
                pass
            self._elector_task = None
        await self._stop_controllers()
