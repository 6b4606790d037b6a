"""StorageObjectInUseProtection: new claims and volumes carry their protection finalizer."""

from __future__ import annotations

from ...api import names
from ..chain import Attributes

_FINALIZERS = {
    "persistentvolumeclaims": names.FINALIZER_PVC_PROTECTION,
    "persistentvolumes": names.FINALIZER_PV_PROTECTION,
}


class StorageObjectInUseProtection:
    """On create, a PersistentVolumeClaim gets ``orch.io/pvc-protection`` and a
    PersistentVolume ``orch.io/pv-protection`` (upstream's ``kubernetes.io/...``): the
    protection controllers (``controllers/protection.py``) remove them only once no pod
    uses the claim, or no claim is bound to the volume, so deleting storage in use
    waits (the object stays, terminating) instead of losing data."""

    name = "StorageObjectInUseProtection"
    resources = frozenset({("", "persistentvolumeclaims"), ("", "persistentvolumes")})
    operations = frozenset({"CREATE"})
    complete = True  # one finalizer; nothing the strategy derives from it

    async def admit(self, attrs: Attributes) -> None:
        k = attrs.kind
        finalizer = _FINALIZERS.get(k.resource) if k.group == "" else None
        if attrs.operation != "CREATE" or attrs.subresource or finalizer is None:
            return
        obj = attrs.obj
        if not isinstance(obj, dict):
            return
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            return
        finalizers = md.get("finalizers")
        if finalizers is None:
            md["finalizers"] = [finalizer]
        elif isinstance(finalizers, list) and finalizer not in finalizers:
            finalizers.append(finalizer)

    async def validate(self, attrs: Attributes) -> None:
        return None
