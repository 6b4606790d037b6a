"""Storage in-use protection: the claim and volume finalizers come off only when safe.

The StorageObjectInUseProtection admission plugin puts ``orch.io/pvc-protection`` on
every new claim and ``orch.io/pv-protection`` on every new volume. A claim being
deleted keeps its finalizer while a scheduled pod uses it (a ``persistentVolumeClaim``
volume naming it, or a generic ephemeral volume of a pod still running), as upstream's
pvc-protection controller: the pod's data stays until the pod is gone. A volume being
deleted keeps its finalizer while it is ``Bound`` (upstream's pv-protection controller).
"""

from __future__ import annotations

import logging
from typing import Mapping

from ..api import names
from ..api import persistentvolumes as pvs
from ..api import status as st
from ..api.helpers import dict_at
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers.protection")


def pod_uses_claim(pod: Mapping, claim_name: str) -> bool:
    """A scheduled pod naming the claim in a volume; an ephemeral volume's claim counts
    only while its pod has not finished."""
    spec = dict_at(pod, "spec")
    if not spec.get("nodeName"):
        return False  # the agent refuses to start a pod whose claim is terminating
    finished = dict_at(pod, "status").get("phase") in ("Succeeded", "Failed")
    pod_name = dict_at(pod, "metadata").get("name") or ""
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        if (vol.get("persistentVolumeClaim") or {}).get("claimName") == claim_name:
            return True
        if not finished and vol.get("ephemeral") is not None and f"{pod_name}-{vol.get('name')}" == claim_name:
            return True
    return False


async def remove_finalizer(client: Client, kind, namespace: str, name: str, uid: str, finalizer: str) -> None:
    def drop(obj: dict) -> dict:
        md = obj.get("metadata") or {}
        if md.get("uid") != uid:
            return obj  # another object of that name now
        md["finalizers"] = [f for f in md.get("finalizers") or [] if f != finalizer]
        return obj

    try:
        await client.update(kind, namespace, name, drop)
    except st.ApiError as exc:
        if exc.code != 404:
            raise


class PvcProtectionController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.claims = informers.for_kind(self.kind)
        self.pods = informers.for_resource("", "v1", "pods")
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.claims.add_handler(self.on_claim)
        self.pods.add_handler(self.on_pod)

    def on_claim(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.claims.list():
                if names.FINALIZER_PVC_PROTECTION in e.finalizers:
                    self.queue.add((e.namespace, e.name))
        elif ev.type != "DELETED" and names.FINALIZER_PVC_PROTECTION in ev.entry.finalizers:
            self.queue.add((ev.entry.namespace, ev.entry.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        # A pod that goes (or finishes) may free the claims it named.
        if ev is None:
            return
        e = ev.entry
        if not e.mentions("persistentVolumeClaim") and not e.mentions("ephemeral"):
            return  # names no claim (most pods): not decoded
        for name in pvs.pod_claim_names(e.object()):
            self.queue.add((ev.entry.namespace, name))

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "pvc protection")

    async def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        entry = self.claims.get(namespace, name)
        if entry is None or names.FINALIZER_PVC_PROTECTION not in entry.finalizers:
            return
        claim = entry.object()
        if not pvs.being_deleted(claim):
            return
        users = [e.name for e in self.pods.list(namespace) if pod_uses_claim(e.object(), name)]
        if users:
            log.info("claim %s/%s is being deleted but pods use it: %s", namespace, name, ", ".join(sorted(users)))
            return
        await remove_finalizer(self.client, self.kind, namespace, name, entry.uid, names.FINALIZER_PVC_PROTECTION)
        log.info("claim %s/%s is unused: its protection finalizer is removed", namespace, name)


class PvProtectionController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.kind = informers.kind("", "v1", "persistentvolumes")
        self.volumes = informers.for_kind(self.kind)
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.volumes.add_handler(self.on_volume)

    def on_volume(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.volumes.list():
                if names.FINALIZER_PV_PROTECTION in e.finalizers:
                    self.queue.add(e.name)
        elif ev.type != "DELETED" and names.FINALIZER_PV_PROTECTION in ev.entry.finalizers:
            self.queue.add(ev.entry.name)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "pv protection")

    async def sync(self, name: str) -> None:
        entry = self.volumes.get("", name)
        if entry is None or names.FINALIZER_PV_PROTECTION not in entry.finalizers:
            return
        volume = entry.object()
        if not pvs.being_deleted(volume) or dict_at(volume, "status").get("phase") == pvs.VOLUME_BOUND:
            return
        await remove_finalizer(self.client, self.kind, "", name, entry.uid, names.FINALIZER_PV_PROTECTION)
        log.info("volume %s is not bound: its protection finalizer is removed", name)
