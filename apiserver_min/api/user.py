"""Who makes a request: the user an authenticator found, as every later step sees it."""

from __future__ import annotations

import dataclasses

from . import names
from .validation import is_dns1123_label, is_dns1123_subdomain


@dataclasses.dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


SYSTEM_USER = UserInfo("system:apiserver", groups=(names.GROUP_MASTERS, names.GROUP_AUTHENTICATED))


def node_identity(user: UserInfo) -> tuple[str, bool]:
    """(node name, is a node): upstream's NodeIdentity. A node user without a name
    is still a node (and is refused everything node-specific)."""
    if not user.name.startswith(names.NODE_USER_PREFIX) or names.GROUP_NODES not in user.groups:
        return "", False
    return user.name[len(names.NODE_USER_PREFIX) :], True


# --- service accounts: one spelling of their users ------------------------------------------


def service_account_username(namespace: str, name: str) -> str:
    """``system:serviceaccount:<namespace>:<name>``."""
    return f"{names.SERVICEACCOUNT_USER_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, str]:
    """The groups every service account's user has (``system:authenticated`` comes on top)."""
    return names.GROUP_SERVICEACCOUNTS, names.GROUP_SERVICEACCOUNTS_PREFIX + namespace


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of a valid ``system:serviceaccount:NS:NAME``; None otherwise."""
    if not username.startswith(names.SERVICEACCOUNT_USER_PREFIX):
        return None
    parts = username[len(names.SERVICEACCOUNT_USER_PREFIX) :].split(":")
    if len(parts) != 2 or is_dns1123_label(parts[0]) or is_dns1123_subdomain(parts[1]):
        return None
    return parts[0], parts[1]
