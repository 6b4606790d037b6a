"""PersistentVolumeClaimResize: a claim's storage request may grow only when the claim
is bound and its StorageClass allows volume expansion.

As upstream (v1.27), on claim updates (not sub-resources): a request that does not
grow passes; a growing one of a claim whose stored phase is not ``Bound`` is 403
``Only bound persistent volume claims can be expanded``; one whose class (the beta
class annotation, else ``spec.storageClassName``) is unset, changed, unknown or does
not set ``allowVolumeExpansion: true`` is 403 ``only dynamically provisioned pvc can
be resized and the storageclass that provisions the pvc must support resize``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...api import names
from ...api import status as st
from ...api.quantity import QuantityError, parse_quantity
from ...storage.keys import key_prefix, object_key
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import Registry
    from ...storage.cacher import WatchCache

NOT_BOUND = "Only bound persistent volume claims can be expanded"
NOT_EXPANDABLE = (
    "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
)


def claim_class(pvc: dict) -> str:
    """The claim's class: the beta annotation wins over ``spec.storageClassName``."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    if names.ANNOTATION_BETA_STORAGE_CLASS in annotations:
        return str(annotations[names.ANNOTATION_BETA_STORAGE_CLASS])
    return str((pvc.get("spec") or {}).get("storageClassName") or "")


def requested_storage(pvc: dict | None) -> Any:
    value = (((pvc or {}).get("spec") or {}).get("resources") or {}).get("requests", {}) or {}
    try:
        return parse_quantity(value.get("storage", "0"))
    except QuantityError:
        return None


class PersistentVolumeClaimResize:
    name = "PersistentVolumeClaimResize"
    resources = frozenset({("", "persistentvolumeclaims")})

    def __init__(self, cache: "WatchCache", registry: "Registry"):
        self.cache = cache
        kind = registry.by_resource(names.STORAGE_GROUP, "v1", "storageclasses")
        if kind is None:
            raise LookupError("no kind serves storageclasses")
        self.kind = kind

    async def admit(self, attrs: Attributes) -> None:
        return None

    def _allows_expansion(self, pvc: dict, old: dict) -> bool:
        name, old_name = claim_class(pvc), claim_class(old)
        if not name or not old_name or name != old_name:
            return False
        entry = self.cache.cache(key_prefix(self.kind)).items.get(object_key(self.kind, "", name))
        return entry is not None and entry.object().get("allowVolumeExpansion") is True

    async def validate(self, attrs: Attributes) -> None:
        if attrs.subresource or attrs.operation != "UPDATE":
            return
        pvc, old = attrs.obj, attrs.old
        if not isinstance(pvc, dict) or not isinstance(old, dict):
            return
        new_size, old_size = requested_storage(pvc), requested_storage(old)
        if new_size is None or old_size is None or not old_size < new_size:
            return
        if ((old.get("status") or {}).get("phase")) != "Bound":
            raise self._forbidden(attrs, NOT_BOUND)
        if not self._allows_expansion(pvc, old):
            raise self._forbidden(attrs, NOT_EXPANDABLE)

    @staticmethod
    def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
        return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, message)


def plugin(server: Any) -> PersistentVolumeClaimResize:
    return PersistentVolumeClaimResize(server.cache, server.registry)
