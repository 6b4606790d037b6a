"""The admission chain: mutating plugins, then validating plugins.

A plugin sees the request's attributes (operation, kind, namespace, name, the
new and old objects, the user, dry-run) and either passes, changes the object
(mutating phase only) or raises an ApiError. The security and admission work
adds plugins here; this module fixes the shape they plug into.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo

if TYPE_CHECKING:
    from .store import Store


@dataclasses.dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


SYSTEM_USER = UserInfo("system:apiserver", groups=(names.GROUP_MASTERS, names.GROUP_AUTHENTICATED))


@dataclasses.dataclass
class Attributes:
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    kind: KindInfo
    namespace: str
    name: str
    subresource: str
    obj: dict | None
    old: dict | None
    user: UserInfo
    dry_run: bool
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


class Plugin(Protocol):
    name: str

    async def admit(self, attrs: Attributes) -> None:
        """Mutating phase: may change ``attrs.obj``."""

    async def validate(self, attrs: Attributes) -> None:
        """Validating phase: may only reject."""


class Chain:
    def __init__(self, plugins: list[Plugin]):
        self.plugins = plugins

    async def run(self, attrs: Attributes) -> None:
        for p in self.plugins:
            await p.admit(attrs)
        for p in self.plugins:
            await p.validate(attrs)


class NamespaceLifecycle:
    """No objects in missing or terminating namespaces; the reserved three stay."""

    name = "NamespaceLifecycle"

    def __init__(self, store: "Store"):
        self.store = store

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if k.group == "" and k.resource == "namespaces":
            if attrs.operation == "DELETE" and attrs.name in names.UNDELETABLE_NAMESPACES:
                raise st.forbidden("namespaces", attrs.name, "",
                                   "this namespace may not be deleted")
            return
        if not k.namespaced or not attrs.namespace:
            return
        if attrs.operation != "CREATE":
            return
        ns = await self.store.namespace_state(attrs.namespace)
        if ns is None:
            raise st.not_found("namespaces", attrs.namespace)
        if ns == "Terminating":
            raise st.forbidden(k.resource, attrs.name, k.group,
                               f"unable to create new content in namespace {attrs.namespace} "
                               "because it is being terminated")
