"""What admission expressions read about a request, shared by validating admission
policies and webhooks' match conditions: the ``request`` variable, the ``authorizer``
variable (with ``authorizer.requestResource``) and the check its ``check(verb)`` runs
against the server's authorizer for the requesting user."""

from __future__ import annotations

from typing import Any, Callable

from .. import cel
from ..api import names
from ..api.user import UserInfo
from ..authz.authorizer import AuthzAttributes, Decision
from ..cel.library import AuthorizerCheck
from .chain import Attributes
from .equivalence import Equivalent, kind_as, request_kind


def _user_info(user: UserInfo) -> dict:
    return {
        "username": user.name,
        "uid": user.uid,
        "groups": list(user.groups),
        "extra": {k: list(v) for k, v in user.extra.items()},
    }


def request_value(attrs: Attributes, target: Equivalent | None = None) -> dict:
    """The ``request`` variable: the admission request's fields. With TARGET (the
    equivalent resource a rule matched the request as), ``kind`` and ``resource`` are
    TARGET's; ``requestKind`` and ``requestResource`` stay the request's own."""
    kind = attrs.kind
    gvk = request_kind(attrs)
    gvr = {"group": kind.group, "version": kind.version, "resource": kind.resource}
    return {
        "kind": gvk if target is None else kind_as(attrs, target),
        "resource": gvr if target is None else target.gvr(),
        "subResource": attrs.subresource,
        "requestKind": gvk,
        "requestResource": gvr,
        "requestSubResource": attrs.subresource,
        "name": attrs.name,
        "namespace": attrs.namespace,
        "operation": attrs.operation,
        "userInfo": _user_info(attrs.user or UserInfo("")),
        "dryRun": bool(attrs.dry_run),
        "options": dict(attrs.options or {}),
    }


def authorizer_value(attrs: Attributes) -> dict:
    """The ``authorizer`` variable, with ``requestResource``: a resource check of the
    request's group, resource, sub-resource, namespace and name."""
    kind = attrs.kind
    request_resource = {
        cel.TYPE_KEY: "ResourceCheck",
        "group": kind.group,
        "resource": kind.resource,
        "subresource": attrs.subresource,
        "namespace": attrs.namespace,
        "name": attrs.name,
    }
    return dict(cel.authorizer_value(), requestResource=request_resource)


def _service_account_user(spec: str) -> UserInfo:
    _, _, rest = spec.partition("system:serviceaccount:")
    namespace = rest.split(":", 1)[0]
    return UserInfo(
        spec,
        groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", names.GROUP_AUTHENTICATED),
    )


def authorizer_check(authorizer: Callable[[], Any], user: UserInfo) -> AuthorizerCheck:
    """The check ``authorizer...check(verb)`` runs for ``user`` (or the service account
    ``authorizer.serviceAccount(ns, name)`` names): set it as ``cel.CURRENT_AUTHORIZER``
    around an evaluation. ``authorizer()`` gives the server's authorizer (None: none)."""

    def check(request: dict[str, str]) -> tuple[bool, str, str]:
        found = authorizer()
        if found is None:
            return False, "", "no authorizer is configured"
        who = _service_account_user(request["user"]) if request.get("user") else user
        if "path" in request:
            attrs = AuthzAttributes(who, request["verb"], False, path=request["path"])
        else:
            attrs = AuthzAttributes(
                who,
                request["verb"],
                True,
                namespace=request.get("namespace", ""),
                api_group=names.GROUP_ALIASES.get(request.get("group", ""), request.get("group", "")),
                resource=request.get("resource", ""),
                subresource=request.get("subresource", ""),
                name=request.get("name", ""),
            )
        try:
            decision, reason = found.authorize(attrs)
        except Exception as exc:  # noqa: BLE001 - an authorizer failure is the decision's error()
            return False, "", str(exc)
        return decision == Decision.ALLOW, reason or "", ""

    return check
