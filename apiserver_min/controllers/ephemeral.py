"""The ephemeral volume controller: the claims of pods' generic ephemeral volumes.

For every volume ``v`` of pod ``p`` with an ``ephemeral.volumeClaimTemplate``, the claim
``p-v`` is created in the pod's namespace from the template (its labels, annotations
and spec), owned by the pod (controller, blocking its owner's deletion), so the garbage
collector deletes it with the pod. A claim of that name that the pod does not own is
left alone and reported (event ``FailedBinding`` on the pod); the scheduler and the
node agent refuse to use it, as upstream.
"""

from __future__ import annotations

import copy
import logging
from typing import Mapping

from ..api import persistentvolumes as pvs
from ..api import status as st
from ..api.helpers import dict_at, object_reference
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers.ephemeral")


def ephemeral_claims(pod: Mapping) -> list[tuple[str, dict]]:
    """(claim name, template) of the pod's generic ephemeral volumes."""
    out = []
    name = dict_at(pod, "metadata").get("name") or ""
    for vol in dict_at(pod, "spec").get("volumes") or []:
        if isinstance(vol, dict) and isinstance(vol.get("ephemeral"), dict):
            template = vol["ephemeral"].get("volumeClaimTemplate")
            out.append((f"{name}-{vol.get('name') or ''}", template if isinstance(template, dict) else {}))
    return out


def claim_for(pod: Mapping, claim_name: str, template: Mapping) -> dict:
    md = dict_at(pod, "metadata")
    tmd = dict_at(template, "metadata")
    meta: dict = {
        "name": claim_name,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": md.get("name", ""),
                "uid": md.get("uid", ""),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    for field in ("labels", "annotations"):
        if tmd.get(field):
            meta[field] = copy.deepcopy(tmd[field])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": copy.deepcopy(dict_at(template, "spec")),
    }


class EphemeralVolumeController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.pvc_kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.pods = informers.for_resource("", "v1", "pods")
        self.claims = informers.for_kind(self.pvc_kind)
        self.events = EventRecorder(client, informers.registry, "ephemeral_volume")
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.pods.add_handler(self.on_pod)
        self.claims.add_handler(self.on_claim)

    def on_pod(self, ev: CacheEvent | None) -> None:
        # Only pods with an ephemeral volume have anything to sync (most have none).
        if ev is None:
            for e in self.pods.list():
                if e.mentions("ephemeral"):
                    self.queue.add((e.namespace, e.name))
        elif ev.type != "DELETED" and ev.entry.mentions("ephemeral"):
            self.queue.add((ev.entry.namespace, ev.entry.name))

    def on_claim(self, ev: CacheEvent | None) -> None:
        # A claim of a pod's ephemeral volume deleted while the pod lives is made again.
        if ev is not None and ev.type == "DELETED":
            for _uid, _api_version, kind, name in ev.entry.owners:
                if kind == "Pod":
                    self.queue.add((ev.entry.namespace, name))

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "ephemeral volumes of pod")

    async def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        entry = self.pods.get(namespace, name)
        if entry is None:
            return
        pod = entry.object()
        if pvs.being_deleted(pod):
            return
        for claim_name, template in ephemeral_claims(pod):
            existing = self.claims.get(namespace, claim_name)
            if existing is not None:
                if not pvs.claim_controlled_by(existing.object(), entry.uid):
                    await self.events.record(
                        object_reference(pod, "Pod"),
                        "Warning",
                        "FailedBinding",
                        f"PVC {namespace}/{claim_name} was not created for pod {namespace}/{name} (pod is not owner)",
                    )
                continue
            try:
                await self.client.create(self.pvc_kind, namespace, claim_for(pod, claim_name, template))
                log.info("created claim %s/%s for pod %s", namespace, claim_name, name)
            except st.ApiError as exc:
                if exc.code == 409:
                    continue  # made meanwhile; the next sync checks its owner
                await self.events.record(
                    object_reference(pod, "Pod"),
                    "Warning",
                    "FailedBinding",
                    f"creating the claim {claim_name} of ephemeral volume failed: {exc.message}",
                )
                raise
