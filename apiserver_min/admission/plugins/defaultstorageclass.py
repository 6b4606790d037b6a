"""DefaultStorageClass: a new claim that asks for no class gets the default one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from ...api import names
from ...api import persistentvolumes as pvs
from ..chain import Attributes

if TYPE_CHECKING:
    from ...registry.store import Store


class DefaultStorageClass:
    """On create, a PersistentVolumeClaim without ``spec.storageClassName`` (and without
    the legacy class annotation) gets the default StorageClass: the one annotated
    ``storageclass.orch.io/is-default-class: "true"``, the newest when several are (as
    upstream 1.27). With no default class the claim is left alone; an explicit ``""``
    (no class) is kept."""

    name = "DefaultStorageClass"
    resources = frozenset({("", "persistentvolumeclaims")})
    operations = frozenset({"CREATE"})
    complete = True  # one scalar field; nothing the strategy derives from it

    def __init__(self, store: "Store", registry):
        self.store = store
        self.class_kind = registry.by_resource(names.STORAGE_GROUP, "v1", "storageclasses")

    async def default_class(self) -> str:
        if self.class_kind is None:
            return ""
        listed = await self.store.list(self.class_kind, None, None, None, "0", None, 0, None)
        classes = [orjson.loads(raw) for raw, _rev in listed.items]
        found = pvs.default_storage_class(classes)
        return str(found["metadata"]["name"]) if found is not None else ""

    async def admit(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.operation != "CREATE" or attrs.subresource or k.group != "" or k.resource != "persistentvolumeclaims":
            return
        claim = attrs.obj
        if not isinstance(claim, dict) or not isinstance(claim.get("spec"), dict):
            return
        if not pvs.claim_class_unset(claim):
            return
        default = await self.default_class()
        if default:
            claim["spec"]["storageClassName"] = default

    async def validate(self, attrs: Attributes) -> None:
        return None
