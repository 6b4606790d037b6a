"""Impersonation: acting as another user with the ``Impersonate-*`` headers
(``kubectl --as``, ``--as-group``, ``--as-uid``), as upstream's WithImpersonation filter.

It runs right after authentication. Each thing asked for is authorized for the
*authenticated* user as verb ``impersonate``:

| header | resource (API group) | name |
|---|---|---|
| ``Impersonate-User: system:serviceaccount:NS:NAME`` | ``serviceaccounts`` ("") in namespace NS | NAME |
| ``Impersonate-User: NAME`` (anyone else) | ``users`` ("") | NAME |
| ``Impersonate-Group: G`` (repeatable) | ``groups`` ("") | G |
| ``Impersonate-Uid: U`` | ``uids`` (authentication group) | U |
| ``Impersonate-Extra-KEY: V`` (repeatable) | ``userextras/KEY`` (authentication group) | V |

The first refusal is the usual 403 naming the impersonated resource. Groups, uid or
extras without a user are a 400. The impersonated identity gets
``system:authenticated`` (``system:unauthenticated`` for ``system:anonymous``) unless
one of them was asked for, and a service account without asked-for groups gets its
fixed ones. From then on that identity is the request's user (authorization,
admission, managedFields, SelfSubjectReview) and the headers are gone from the request.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any, Mapping
from urllib.parse import unquote

from multidict import CIMultiDict

from ..api import names
from ..api import status as st
from ..api.user import UserInfo, service_account_groups, service_account_username, split_service_account
from ..authz.authorizer import AuthzAttributes, Decision, decide, forbidden_error, user_or_anonymous

log = logging.getLogger("orch-apiserver.impersonation")

HEADER_USER = "Impersonate-User"
HEADER_GROUP = "Impersonate-Group"
HEADER_UID = "Impersonate-Uid"
HEADER_EXTRA_PREFIX = "Impersonate-Extra-"
_PREFIX = "impersonate-"
# The request key under which the authenticated (impersonating) user is kept, for logs
# and audit: the request's user from here on is the impersonated one.
IMPERSONATOR_KEY = "orch.impersonator"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclasses.dataclass(frozen=True)
class Impersonation:
    """One thing to impersonate (upstream builds an ObjectReference per header value)."""

    kind: str  # ServiceAccount | User | Group | UserExtra | UID
    name: str
    namespace: str = ""
    api_version: str = ""
    field_path: str = ""  # the extra's key

    def go_string(self) -> str:
        """As Go's ``%v`` prints the ObjectReference (upstream's 400 message lists them)."""
        return "{" + " ".join((self.kind, self.namespace, self.name, "", self.api_version, "", self.field_path)) + "}"


def wants_impersonation(headers: Mapping[str, str]) -> bool:
    """Whether any ``Impersonate-*`` header is present (the cheap test every request makes)."""
    for k in headers.keys():
        if k[:12].lower() == _PREFIX:
            return True
    return False


def extra_key(header_suffix: str) -> str:
    """The user-extra key of an ``Impersonate-Extra-`` header: lower-cased, then
    %-unescaped (kept as it is when the escapes are malformed), as upstream."""
    key = header_suffix.lower()
    if _BAD_ESCAPE.search(key):
        return key
    return unquote(key, errors="surrogateescape")


def requested(headers: Any) -> list[Impersonation]:
    """What the headers ask to impersonate, in upstream's order (user, groups, extras,
    uid); a 400 when groups, extras or a uid come without a user."""
    out: list[Impersonation] = []
    auth_version = f"{names.AUTHENTICATION_GROUP}/v1"
    user = headers.get(HEADER_USER, "")
    if user:
        sa = split_service_account(user)
        out.append(Impersonation("ServiceAccount", sa[1], sa[0]) if sa else Impersonation("User", user))
    groups = headers.getall(HEADER_GROUP, [])
    out += [Impersonation("Group", g) for g in groups]
    has_extra = False
    for header, value in headers.items():
        if header[: len(HEADER_EXTRA_PREFIX)].lower() == HEADER_EXTRA_PREFIX.lower():
            has_extra = True
            out.append(
                Impersonation(
                    "UserExtra",
                    value,
                    api_version=auth_version,
                    field_path=extra_key(header[len(HEADER_EXTRA_PREFIX) :]),
                )
            )
    uid = headers.get(HEADER_UID, "")
    if uid:
        out.append(Impersonation("UID", uid, api_version=auth_version))
    if (groups or has_extra or uid) and not user:
        raise st.bad_request(f"requested [{' '.join(i.go_string() for i in out)}] without impersonating a user")
    return out


def _attributes(requestor: UserInfo, imp: Impersonation) -> AuthzAttributes:
    if imp.kind == "ServiceAccount":
        return AuthzAttributes(
            requestor, "impersonate", True, namespace=imp.namespace, resource="serviceaccounts", name=imp.name
        )
    if imp.kind == "User":
        return AuthzAttributes(requestor, "impersonate", True, resource="users", name=imp.name)
    if imp.kind == "Group":
        return AuthzAttributes(requestor, "impersonate", True, resource="groups", name=imp.name)
    if imp.kind == "UserExtra":
        return AuthzAttributes(
            requestor,
            "impersonate",
            True,
            api_group=names.AUTHENTICATION_GROUP,
            api_version="v1",
            resource="userextras",
            subresource=imp.field_path,
            name=imp.name,
        )
    return AuthzAttributes(
        requestor,
        "impersonate",
        True,
        api_group=names.AUTHENTICATION_GROUP,
        api_version="v1",
        resource="uids",
        name=imp.name,
    )


async def impersonated_user(requestor: UserInfo, wanted: list[Impersonation], authorizer: Any) -> UserInfo:
    """The identity ``requestor`` may act as: every part authorized by every authorizer
    (the webhook too; the first refusal is a 403), groups completed as upstream completes
    them."""
    groups_given = any(i.kind == "Group" for i in wanted)
    username, uid = "", ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for imp in wanted:
        attrs = _attributes(requestor, imp)
        decision, reason, _ = await decide(authorizer, attrs)  # a failure is a 403 here, as upstream
        if decision is not Decision.ALLOW:
            raise forbidden_error(attrs, reason)
        if imp.kind == "ServiceAccount":
            username = service_account_username(imp.namespace, imp.name)
            if not groups_given:
                groups = list(service_account_groups(imp.namespace))
        elif imp.kind == "User":
            username = imp.name
        elif imp.kind == "Group":
            groups.append(imp.name)
        elif imp.kind == "UserExtra":
            extra.setdefault(imp.field_path, []).append(imp.name)
        else:
            uid = imp.name
    if username != names.USER_ANONYMOUS:
        if names.GROUP_AUTHENTICATED not in groups and names.GROUP_UNAUTHENTICATED not in groups:
            groups.append(names.GROUP_AUTHENTICATED)
    elif names.GROUP_UNAUTHENTICATED not in groups:
        groups.append(names.GROUP_UNAUTHENTICATED)
    return UserInfo(username, uid, tuple(groups), {k: tuple(v) for k, v in extra.items()})


def without_impersonation_headers(headers: Mapping[str, str]) -> CIMultiDict:
    return CIMultiDict((k, v) for k, v in headers.items() if k[:12].lower() != _PREFIX)


async def impersonate(request: Any, user: UserInfo | None, authorizer: Any) -> tuple[Any, UserInfo | None]:
    """(request, user) for the rest of the request path: unchanged without
    ``Impersonate-*`` headers; else the impersonated user and a copy of the request
    without those headers. ``user`` None is the anonymous user (who may impersonate
    only what the authorizer lets ``system:anonymous`` impersonate)."""
    if not wants_impersonation(request.headers):
        return request, user
    wanted = requested(request.headers)
    if not wanted:  # only empty Impersonate-User / -Uid headers: nothing asked for, as upstream
        return request, user
    requestor = user_or_anonymous(user)
    acting_as = await impersonated_user(requestor, wanted, authorizer)
    log.debug("%s is impersonating %s", requestor, acting_as)
    clone = request.clone(headers=without_impersonation_headers(request.headers))
    clone[IMPERSONATOR_KEY] = requestor
    return clone, acting_as
