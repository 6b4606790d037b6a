"""PersistentVolumeClaimResize: a claim may ask for more storage only where that can happen."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from ...api import names
from ...api import persistentvolumes as pvs
from ...api import status as st
from ...api.helpers import dict_at
from ..chain import Attributes

if TYPE_CHECKING:
    from ...registry.store import Store

MSG_NOT_BOUND = "Only bound persistent volume claims can be expanded"
MSG_NO_RESIZE = (
    "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
)


class PersistentVolumeClaimResize:
    """An update raising a claim's ``storage`` request is refused unless the claim is
    bound and its StorageClass says ``allowVolumeExpansion: true`` (upstream's rule).
    The bundled local-path class does not: its volumes are plain directories."""

    name = "PersistentVolumeClaimResize"
    resources = frozenset({("", "persistentvolumeclaims")})

    def __init__(self, store: "Store", registry):
        self.store = store
        self.class_kind = registry.by_resource(names.STORAGE_GROUP, "v1", "storageclasses")

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.operation != "UPDATE" or attrs.subresource or k.group != "" or k.resource != "persistentvolumeclaims":
            return
        new, old = attrs.obj or {}, attrs.old or {}
        new_request = pvs.storage_quantity(dict_at(dict_at(dict_at(new, "spec"), "resources"), "requests"))
        old_request = pvs.storage_quantity(dict_at(dict_at(dict_at(old, "spec"), "resources"), "requests"))
        if new_request is None or old_request is None or new_request.as_fraction() <= old_request.as_fraction():
            return
        if dict_at(old, "status").get("phase") != pvs.CLAIM_BOUND:
            raise st.forbidden(k.resource, attrs.name, k.group, MSG_NOT_BOUND)
        if not await self._class_allows_expansion(pvs.claim_class(new)):
            raise st.forbidden(k.resource, attrs.name, k.group, MSG_NO_RESIZE)

    async def _class_allows_expansion(self, class_name: str) -> bool:
        if not class_name or self.class_kind is None:
            return False
        try:
            raw, _rev = await self.store.get(self.class_kind, "", class_name)
        except st.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return orjson.loads(raw).get("allowVolumeExpansion") is True
