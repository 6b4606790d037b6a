"""The resource quota controller: every quota's ``status.hard`` follows ``spec.hard``
and its ``status.used`` is the namespace's true usage.

As upstream's: a quota is recounted from the informers when it is created, when
its spec changes or its status disagrees with the spec, when an object it counts
is deleted or stops counting (a pod turning terminal, a service or claim using
less), on every relist of the watch cache, and all quotas every
``--resource-quota-sync-period``. The recount replaces what admission charged, so
charges of writes that later failed are given back. The status is written with
the quota's resourceVersion as read: an admission charge that lands meanwhile
makes the write fail and the quota is recounted again.
"""

from __future__ import annotations

import asyncio
import logging

from ..api import quota as q
from ..api import status as st
from ..api.kinds import KindInfo
from ..client.informer import Informer, InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.resourcequota")

# The kinds with a legacy count name or compute usage are always watched.
_BUILTIN_TRACKED = (
    ("", "pods"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    ("", "configmaps"),
    ("", "secrets"),
    ("", "replicationcontrollers"),
    ("", "resourcequotas"),
)


def _hard(obj: dict, where: str) -> q.ResourceList:
    part = obj.get(where)
    return q.parse_list(part.get("hard") if isinstance(part, dict) else None)


class ResourceQuotaController:
    """Recounts quotas from the informers and writes their status as the
    resourcequota-controller; ``sync_period`` is --resource-quota-sync-period."""

    def __init__(self, client: Client, informers: InformerFactory, *, sync_period: float = 300.0):
        self.client = client
        self.informers = informers
        self.registry = informers.registry
        self.quota_kind = informers.kind("", "v1", "resourcequotas")
        self.quotas = informers.for_kind(self.quota_kind)
        self.sync_period = sync_period
        self.queue = RateLimitedQueue()
        self._tracked: dict[tuple[str, str], Informer] = {}

    # --- informers ----------------------------------------------------------------
    def start(self) -> None:
        self.quotas.add_handler(self.on_quota)
        for gr in _BUILTIN_TRACKED:
            self._track(gr)

    def _kind_for(self, group: str, resource: str) -> KindInfo | None:
        for k in self.registry.kinds:
            if k.group == group and k.resource == resource and k.namespaced:
                return k
        return None

    def _track(self, gr: tuple[str, str]) -> Informer | None:
        inf = self._tracked.get(gr)
        if inf is not None:
            return inf
        kind = self._kind_for(*gr)
        if kind is None:
            return None
        inf = self._tracked[gr] = self.informers.for_kind(kind)
        group, resource = gr
        if gr == ("", "resourcequotas"):
            return inf  # on_quota handles quota changes

        def handler(ev: CacheEvent | None) -> None:
            self.on_tracked(group, resource, ev)

        inf.add_handler(handler)
        return inf

    def on_quota(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.quotas.list():
                self.queue.add(e.key)
            return
        if ev.type == "DELETED":
            self.on_tracked("", "resourcequotas", ev)
            return
        obj = ev.entry.object()
        spec_changed = True
        if ev.prev is not None:
            spec_changed = ev.prev.object().get("spec") != obj.get("spec")
        if ev.type == "ADDED" or spec_changed or not q.equal(_hard(obj, "spec"), _hard(obj, "status")):
            self.queue.add(ev.entry.key)

    def on_tracked(self, group: str, resource: str, ev: CacheEvent | None) -> None:
        if ev is None:
            return  # the quotas' own replay recounts everything
        ns = ev.entry.namespace
        quotas = self.quotas.list(ns)
        if not quotas:
            return
        if ev.type == "DELETED":
            changed = True
        elif ev.type == "MODIFIED" and ev.prev is not None:
            # Replenish when an object uses less now (a pod turned terminal, a smaller service).
            before = q.usage(group, resource, ev.prev.object())
            after = q.usage(group, resource, ev.entry.object())
            changed = any(name not in after or after[name] < v for name, v in before.items())
        else:
            changed = False
        if changed:
            for e in quotas:
                self.queue.add(e.key)

    # --- work -----------------------------------------------------------------------
    async def run(self) -> None:
        resync = asyncio.create_task(self._resync(), name="resourcequota-resync")
        try:
            await run_worker(self.queue, self.sync, log, "quota")
        finally:
            resync.cancel()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.sync_period)
            for e in self.quotas.list():
                self.queue.add(e.key)

    def usage_of(self, quota: dict) -> q.ResourceList:
        """The quota's usage recounted from the informers."""
        ns = quota["metadata"].get("namespace", "")
        hard = _hard(quota, "spec")
        objects: dict[tuple[str, str], list[dict]] = {}
        for gr in q.tracked_kinds(hard):
            inf = self._track(gr)
            if inf is None:
                continue
            objects[gr] = [e.object() for e in inf.list(ns)]
        return q.namespace_usage(quota, objects)

    async def sync(self, key: str) -> None:
        """Write the quota's recounted status if it changed. A conflict (admission charged
        the quota meanwhile) raises: the item comes back once the informer has caught up."""
        entry = self.quotas.get_by_key(key)
        if entry is None:
            return
        quota = entry.object()
        hard = _hard(quota, "spec")
        status = quota.get("status") if isinstance(quota.get("status"), dict) else {}
        old_used = q.parse_list((status or {}).get("used"))
        # Every hard resource is recounted; used values of resources no longer limited go.
        used = q.mask(self.usage_of(quota), hard)
        if q.equal(hard, _hard(quota, "status")) and q.equal(used, old_used):
            return
        quota["status"] = {"hard": q.format_list(hard), "used": q.format_list(used)}
        try:
            await self.client.update(self.quota_kind, entry.namespace, entry.name, quota, subresource="status")
        except st.ApiError as exc:
            if exc.code != 404:
                raise
