"""NamespaceLifecycle: no new objects in missing or terminating namespaces."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...api import names
from ...api import status as st
from ..chain import Attributes

if TYPE_CHECKING:
    from ...registry.store import Store


class NamespaceLifecycle:
    """No objects in missing or terminating namespaces; the reserved three stay."""

    name = "NamespaceLifecycle"
    resources = None  # namespaces themselves, and everything namespaced

    def __init__(self, store: "Store"):
        self.store = store

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if k.group == "" and k.resource == "namespaces":
            if attrs.operation == "DELETE" and attrs.name in names.UNDELETABLE_NAMESPACES:
                raise st.forbidden("namespaces", attrs.name, "", "this namespace may not be deleted")
            return
        if not k.namespaced or not attrs.namespace:
            return
        if attrs.operation != "CREATE":
            return
        ns = await self.store.namespace_state(attrs.namespace)
        if ns is None:
            raise st.not_found("namespaces", attrs.namespace)
        if ns == "Terminating":
            raise st.forbidden(
                k.resource,
                attrs.name,
                k.group,
                f"unable to create new content in namespace {attrs.namespace} because it is being terminated",
            )
