"""OwnerReferencesPermissionEnforcement: who may change an object's owner references.

As upstream (v1.27), on create and update (pods' ``status`` sub-resource excepted):

- an update that changes ``metadata.ownerReferences`` needs ``delete`` on the object
  itself (a create needs nothing more: its writer could as well not have created it);
- a reference that newly sets ``blockOwnerDeletion: true`` needs ``update`` on the
  owner's ``finalizers`` sub-resource (checked on the owner's resource, in the
  object's namespace for namespaced owners), unless the user may update every
  resource's finalizers. A reference to a kind this server does not serve cannot
  block deletion.

Refusals are 403 with upstream's wording."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ...api import status as st
from ...authz.authorizer import AuthzAttributes, Decision, Union
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import Registry

# (resource, sub-resource) pairs whose writes are never checked.
EXEMPT = frozenset({("pods", "status")})


def _refs(obj: dict | None) -> list:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences")
    return refs if isinstance(refs, list) else []


def changes_owner_references(new: dict | None, old: dict | None) -> bool:
    if old is None:
        return bool(_refs(new))
    return _refs(new) != _refs(old)


def new_blocking_refs(new: dict | None, old: dict | None) -> list[dict]:
    """References of NEW that block owner deletion where OLD's of the same uid did not."""
    blocking_before = {r.get("uid") for r in _refs(old) if isinstance(r, dict) and r.get("blockOwnerDeletion") is True}
    return [
        r
        for r in _refs(new)
        if isinstance(r, dict) and r.get("blockOwnerDeletion") is True and r.get("uid") not in blocking_before
    ]


def _go_reason(reason: str) -> str:
    # Upstream prints the authorizer's reason and a nil error: "<reason>, <nil>".
    return f"{reason}, <nil>"


class OwnerReferencesPermissionEnforcement:
    name = "OwnerReferencesPermissionEnforcement"

    def __init__(self, authorizer: Callable[[], Union], registry: "Registry"):
        self._authorizer = authorizer
        self.registry = registry

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if attrs.operation not in ("CREATE", "UPDATE") or (attrs.kind.resource, attrs.subresource) in EXEMPT:
            return
        if not changes_owner_references(attrs.obj, attrs.old):
            return
        authorizer = self._authorizer()
        if attrs.operation != "CREATE":
            decision, reason, _ = await authorizer.decide(
                AuthzAttributes(
                    attrs.user,
                    "delete",
                    True,
                    namespace=attrs.namespace,
                    api_group=attrs.kind.group,
                    api_version=attrs.kind.version,
                    resource=attrs.kind.resource,
                    subresource=attrs.subresource,
                    name=attrs.name,
                )
            )
            if decision is not Decision.ALLOW:
                raise self._forbidden(
                    attrs, f"cannot set an ownerRef on a resource you can't delete: {_go_reason(reason)}"
                )
        blocking = new_blocking_refs(attrs.obj, attrs.old)
        if not blocking:
            return
        finalize_anything = AuthzAttributes(
            attrs.user, "update", True, api_group="*", api_version="*", resource="*", subresource="finalizers", name="*"
        )
        if (await authorizer.decide(finalize_anything))[0] is Decision.ALLOW:
            return
        for ref in blocking:
            api_version, kind_name = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
            owner_kind = self.registry.by_api_version_kind(api_version, kind_name)
            if owner_kind is None:
                raise self._forbidden(
                    attrs,
                    f"cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion "
                    f'{api_version} Kind {kind_name}: no matches for kind "{kind_name}" in version "{api_version}"',
                )
            decision, reason, _ = await authorizer.decide(
                AuthzAttributes(
                    attrs.user,
                    "update",
                    True,
                    namespace=attrs.namespace if owner_kind.namespaced else "",
                    api_group=owner_kind.group,
                    api_version=owner_kind.version,
                    resource=owner_kind.resource,
                    subresource="finalizers",
                    name=str(ref.get("name") or ""),
                )
            )
            if decision is not Decision.ALLOW:
                raise self._forbidden(
                    attrs,
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set "
                    f"finalizers on: {_go_reason(reason)}",
                )

    @staticmethod
    def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
        return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, message)


def plugin(server: Any) -> OwnerReferencesPermissionEnforcement:
    return OwnerReferencesPermissionEnforcement(lambda: server.authorizer, server.registry)
