"""StorageObjectInUseProtection: every new PersistentVolumeClaim gets the finalizer
``orch.io/pvc-protection`` and every new PersistentVolume ``orch.io/pv-protection``
(upstream kubernetes.io/pvc-protection and kubernetes.io/pv-protection), so deleting
one waits until nothing uses it: the pvc-protection and pv-protection controllers
(``controllers/volumeprotection.py``) remove the finalizer once no scheduled pod uses
the claim, or the volume is no longer bound. As upstream (v1.27): creates only; a
finalizer already there is not added twice."""

from __future__ import annotations

from typing import Any

from ...api import names
from ..chain import Attributes

FINALIZERS = {
    "persistentvolumeclaims": names.FINALIZER_PVC_PROTECTION,
    "persistentvolumes": names.FINALIZER_PV_PROTECTION,
}


class StorageObjectInUseProtection:
    name = "StorageObjectInUseProtection"
    resources = frozenset({("", "persistentvolumeclaims"), ("", "persistentvolumes")})
    operations = frozenset({"CREATE"})
    complete = True  # a finalizer nothing derives from

    async def admit(self, attrs: Attributes) -> None:
        finalizer = FINALIZERS.get(attrs.kind.resource)
        if attrs.subresource or attrs.operation != "CREATE" or finalizer is None or not isinstance(attrs.obj, dict):
            return
        md = attrs.obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            return
        finalizers = md.get("finalizers")
        if not isinstance(finalizers, list):
            finalizers = []
        if finalizer not in finalizers:
            md["finalizers"] = [*finalizers, finalizer]

    async def validate(self, attrs: Attributes) -> None:
        return None


def plugin(server: Any) -> StorageObjectInUseProtection:
    return StorageObjectInUseProtection()
