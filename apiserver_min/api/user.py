"""Who makes a request: the user an authenticator found, as every later step sees it."""

from __future__ import annotations

import dataclasses

from . import names


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
