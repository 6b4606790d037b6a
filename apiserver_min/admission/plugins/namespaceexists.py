"""NamespaceExists: requests naming a namespace that does not exist are refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...api import status as st
from ..chain import Attributes

if TYPE_CHECKING:
    from ...registry.store import Store


class NamespaceExists:
    name = "NamespaceExists"
    resources = None

    def __init__(self, store: "Store"):
        self.store = store

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.operation not in ("CREATE", "UPDATE", "DELETE") or not attrs.namespace or not k.namespaced:
            return
        if k.group == "" and k.resource == "namespaces":
            return
        if await self.store.namespace_state(attrs.namespace) is None:
            raise st.not_found("namespaces", attrs.namespace)
