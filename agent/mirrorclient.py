"""The mirror client: a static pod's copy in the API server (its mirror pod), created
and deleted for the pod manager (:mod:`agent.podmanager`), as upstream's mirror client.

Only cluster mode has one; a standalone node does not load the API client through it.
"""

from __future__ import annotations

import copy
from typing import Callable

from apiserver_min.api import names

from . import pods as podutil
from .client.interface import ApiInterface
from .client.rest import ApiError

__all__ = ["MirrorClient"]


class MirrorClient:
    """Creates a static pod's mirror pod and deletes mirror pods (upstream's mirror client)."""

    def __init__(self, client: ApiInterface, node_name: str, node_uid: Callable[[], str]) -> None:
        self.client = client
        self.node_name = node_name
        self.node_uid = node_uid

    def body(self, pod: dict) -> dict:
        meta = pod.get("metadata") or {}
        annotations = dict(meta.get("annotations") or {})
        annotations[names.ANNOTATION_CONFIG_MIRROR] = annotations.get(names.ANNOTATION_CONFIG_HASH, "")
        body_meta: dict = {
            "name": meta.get("name"),
            "namespace": podutil.namespace(pod),
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
        }
        uid = self.node_uid()
        if uid:
            body_meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid, "controller": True}
            ]
        spec = copy.deepcopy(pod.get("spec") or {})
        spec["nodeName"] = self.node_name
        return {"apiVersion": "v1", "kind": "Pod", "metadata": body_meta, "spec": spec}

    async def create(self, pod: dict) -> dict | None:
        """The created mirror pod; None when a pod of that name exists already (409)."""
        try:
            return await self.client.create(f"/api/v1/namespaces/{podutil.namespace(pod)}/pods", self.body(pod))
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    async def delete(self, mirror: dict) -> None:
        """Delete with grace period 0, only this very object (a UID precondition); gone already is fine."""
        body = podutil.delete_now_options(mirror)
        try:
            await self.client.delete(podutil.pod_path(podutil.namespace(mirror), podutil.name(mirror)), body=body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
