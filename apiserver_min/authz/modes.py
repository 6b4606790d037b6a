"""The authorizer chain for ``--authorization-mode``."""

from __future__ import annotations

from typing import Iterable

from .abac import AbacAuthorizer, Policy
from .authorizer import AlwaysAllow, AlwaysDeny, Authorizer, PrivilegedGroups, Union
from .node import NodeAuthorizer
from .rbac import RbacAuthorizer, RbacIndex
from .webhook import WebhookAuthorizer


def build_authorizer(
    modes: Iterable[str],
    cache,
    registry,
    rbac_index=None,
    abac_policies: Iterable[Policy] = (),
    webhook: WebhookAuthorizer | None = None,
) -> Union:
    """The chain for ``--authorization-mode``, the privileged groups first.

    RBAC and Node read the watch cache; they register as its listeners here, so
    this must run before the cache's first list. ``rbac_index`` shares one index
    with the RBAC write checks (made here when not given). ABAC uses the policies
    read from its file, Webhook the authorizer made from its flags (the options
    refuse either mode without them)."""

    chain: list[Authorizer] = [PrivilegedGroups()]
    for mode in modes:
        if mode == "AlwaysAllow":
            chain.append(AlwaysAllow())
        elif mode == "AlwaysDeny":
            chain.append(AlwaysDeny())
        elif mode == "RBAC":
            chain.append(RbacAuthorizer(rbac_index if rbac_index is not None else RbacIndex.attach(cache, registry)))
        elif mode == "Node":
            chain.append(NodeAuthorizer.from_cache(cache, registry))
        elif mode == "ABAC":
            chain.append(AbacAuthorizer(list(abac_policies)))
        elif mode == "Webhook":
            if webhook is None:
                raise ValueError("authorization-mode Webhook's authorization config file not passed")
            chain.append(webhook)
        else:
            raise ValueError(f"unknown authorization mode {mode!r}")
    return Union(chain)


def find(union: Union, kind: type) -> object | None:
    """The authorizer of a type in the chain (the escalation checks need the RBAC rule resolver)."""
    for a in union.authorizers:
        if isinstance(a, kind):
            return a
    return None
