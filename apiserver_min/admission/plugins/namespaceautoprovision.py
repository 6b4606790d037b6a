"""NamespaceAutoProvision: creating an object in a namespace that does not exist
creates the namespace first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...api import names
from ...api import status as st
from ...api.kinds import Registry
from ...api.user import SYSTEM_USER
from ..chain import Attributes

if TYPE_CHECKING:
    from ...registry.store import Store


class NamespaceAutoProvision:
    name = "NamespaceAutoProvision"
    resources = None
    operations = frozenset({"CREATE"})
    complete = True  # changes nothing in the object itself

    def __init__(self, store: "Store", registry: Registry):
        self.store = store
        self.registry = registry

    async def admit(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.operation != "CREATE" or not attrs.namespace or not k.namespaced:
            return
        if k.group == "" and k.resource == "namespaces":
            return
        if await self.store.namespace_state(attrs.namespace) is not None:
            return
        if attrs.dry_run:
            # Creating the namespace is a side effect a dry run may not have.
            raise st.forbidden(
                k.resource,
                attrs.name,
                k.group,
                f'namespace "{attrs.namespace}" does not exist, and a dry run does not create it',
            )
        kind = self.registry.by_resource("", "v1", "namespaces")
        assert kind is not None  # a core kind every registry declares
        try:
            await self.store.create(
                kind,
                "",
                {"metadata": {"name": attrs.namespace}},
                SYSTEM_USER,
                field_manager=names.APISERVER_FIELD_MANAGER,
            )
        except st.ApiError as exc:
            if exc.code != 409:
                raise st.forbidden(k.resource, attrs.name, k.group, exc.message) from None

    async def validate(self, attrs: Attributes) -> None:
        return None
