"""The pvc-protection and pv-protection controllers: they remove the protection
finalizers StorageObjectInUseProtection puts on claims and volumes once deleting them
is safe, as upstream's (v1.27).

- A PersistentVolumeClaim being deleted keeps ``orch.io/pvc-protection`` while a
  scheduled pod (``spec.nodeName`` set) in its namespace uses it: a volume naming the
  claim, or a generic ephemeral volume whose claim (``<pod>-<volume>``, owned by the
  pod) it is, unless that pod has shut down (deleted with a zero grace period).
  Before removing the finalizer the pods are listed again from the API, since the
  informer may not show a pod created a moment ago.
- A PersistentVolume being deleted keeps ``orch.io/pv-protection`` while it is
  ``Bound``.
"""

from __future__ import annotations

import logging
from typing import Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.volumeprotection")


def pod_is_shut_down(pod: Mapping) -> bool:
    """Deleted with a zero grace period: the agent is done with it, or it was force-deleted."""
    md = dict_at(pod, "metadata")
    return bool(md.get("deletionTimestamp")) and md.get("deletionGracePeriodSeconds") == 0


def _controlled_by(obj: Mapping, owner: Mapping) -> bool:
    uid = dict_at(owner, "metadata").get("uid")
    refs = dict_at(obj, "metadata").get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") is True and r.get("uid") == uid for r in refs)


def claim_names(pod: Mapping) -> set[str]:
    """The names of the claims the pod's volumes refer to (ephemeral ones included)."""
    pod_name = str(dict_at(pod, "metadata").get("name", ""))
    out: set[str] = set()
    for volume in dict_at(pod, "spec").get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and claim.get("claimName"):
            out.add(str(claim["claimName"]))
        if isinstance(volume.get("ephemeral"), dict):
            out.add(f"{pod_name}-{volume.get('name', '')}")
    return out


def pod_uses_claim(pod: Mapping, pvc: Mapping) -> bool:
    if not dict_at(pod, "spec").get("nodeName"):
        return False
    claim = dict_at(pvc, "metadata").get("name")
    pod_name = dict_at(pod, "metadata").get("name", "")
    for volume in dict_at(pod, "spec").get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        ref = volume.get("persistentVolumeClaim")
        if isinstance(ref, dict) and ref.get("claimName") == claim:
            return True
        if (
            isinstance(volume.get("ephemeral"), dict)
            and not pod_is_shut_down(pod)
            and f"{pod_name}-{volume.get('name', '')}" == claim
            and _controlled_by(pvc, pod)
        ):
            return True
    return False


def _needs_finalizer_removal(obj: Mapping, finalizer: str) -> bool:
    md = dict_at(obj, "metadata")
    return bool(md.get("deletionTimestamp")) and finalizer in (md.get("finalizers") or [])


def _without(finalizer: str):
    def mutate(obj: dict) -> dict:
        md = obj.setdefault("metadata", {})
        md["finalizers"] = [f for f in md.get("finalizers") or [] if f != finalizer]
        return obj

    return mutate


class PvcProtectionController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.pvc_kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.pod_kind = informers.kind("", "v1", "pods")
        self.pvcs = informers.for_kind(self.pvc_kind)
        self.pods = informers.for_kind(self.pod_kind)
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.pvcs.add_handler(self.on_pvc)
        self.pods.add_handler(self.on_pod)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "pvc-protection")

    def on_pvc(self, ev: CacheEvent | None) -> None:
        entries = self.pvcs.list() if ev is None else [] if ev.type == "DELETED" else [ev.entry]
        for e in entries:
            if e.deleting and names.FINALIZER_PVC_PROTECTION in e.finalizers:
                self.queue.add((e.namespace, e.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        # A pod that goes away, or changes, may free its claims.
        if ev is None:
            return
        for claim in claim_names(ev.entry.object()):
            self.queue.add((ev.entry.namespace, claim))

    def _in_use_cached(self, pvc: Mapping, namespace: str) -> bool:
        return any(pod_uses_claim(e.object(), pvc) for e in self.pods.list(namespace))

    async def sync(self, item: tuple[str, str]) -> None:
        namespace, name = item
        entry = self.pvcs.get(namespace, name)
        if entry is None:
            return
        pvc = entry.object()
        if not _needs_finalizer_removal(pvc, names.FINALIZER_PVC_PROTECTION):
            return
        if self._in_use_cached(pvc, namespace):
            return
        if any(pod_uses_claim(p, pvc) for p in await self.client.list(self.pod_kind, namespace)):
            return
        log.info("claim %s/%s is not used by any pod: removing its protection finalizer", namespace, name)
        try:
            await self.client.update(self.pvc_kind, namespace, name, _without(names.FINALIZER_PVC_PROTECTION))
        except st.ApiError as exc:
            if exc.code != 404:
                raise


class PvProtectionController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.pv_kind = informers.kind("", "v1", "persistentvolumes")
        self.pvs = informers.for_kind(self.pv_kind)
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.pvs.add_handler(self.on_pv)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "pv-protection")

    def on_pv(self, ev: CacheEvent | None) -> None:
        entries = self.pvs.list() if ev is None else [] if ev.type == "DELETED" else [ev.entry]
        for e in entries:
            if e.deleting and names.FINALIZER_PV_PROTECTION in e.finalizers:
                self.queue.add(e.name)

    async def sync(self, name: str) -> None:
        entry = self.pvs.get("", name)
        if entry is None:
            return
        pv = entry.object()
        if not _needs_finalizer_removal(pv, names.FINALIZER_PV_PROTECTION):
            return
        if dict_at(pv, "status").get("phase") == "Bound":
            return
        log.info("volume %s is not bound: removing its protection finalizer", name)
        try:
            await self.client.update(self.pv_kind, "", name, _without(names.FINALIZER_PV_PROTECTION))
        except st.ApiError as exc:
            if exc.code != 404:
                raise
