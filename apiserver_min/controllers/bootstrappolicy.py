"""The default RBAC policy, created or completed by every server at start (upstream's bootstrap-roles hook)."""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING

from ..api import names
from ..api import status as st
from ..api.user import SYSTEM_USER
from ..authz.policy import (
    default_cluster_role_bindings,
    default_cluster_roles,
    default_role_bindings,
    default_roles,
    protected,
    reconcile_binding,
    reconcile_role,
)
from ..client.informer import served_kind
from ..registry.store import DeleteOptions

if TYPE_CHECKING:
    from ..registry.store import Store

log = logging.getLogger("orch-apiserver.rbac")

FIELD_MANAGER = names.APISERVER_FIELD_MANAGER
RBAC = names.RBAC_GROUP


async def _reconcile_one(store: "Store", resource: str, expected: dict) -> str:
    kind = served_kind(store.registry, RBAC, "v1", resource)
    md = expected["metadata"]
    ns, name = md.get("namespace", ""), md["name"]
    try:
        current = await store.get_object(kind, ns, name)
    except st.ApiError as exc:
        if exc.code != 404:
            raise
        try:
            await store.create(kind, ns, copy.deepcopy(expected), SYSTEM_USER, field_manager=FIELD_MANAGER)
        except st.ApiError as exc2:
            if exc2.code != 409:
                raise
            return "exists"
        return "created"
    if protected(current):
        return "protected"
    is_binding = resource.endswith("bindings")
    if is_binding and current.get("roleRef") != expected.get("roleRef"):
        # roleRef is immutable: recreate with the expected reference, keeping the subjects.
        new = copy.deepcopy(expected)
        new["subjects"] = list(current.get("subjects") or [])
        reconcile_binding(new, expected)
        await store.delete(kind, ns, name, DeleteOptions(), SYSTEM_USER)
        await store.create(kind, ns, new, SYSTEM_USER, field_manager=FIELD_MANAGER)
        return "recreated"
    probe = copy.deepcopy(current)
    if not (reconcile_binding(probe, expected) if is_binding else reconcile_role(probe, expected)):
        return "unchanged"

    def compute(old: dict) -> dict:
        if protected(old):
            return old
        if is_binding:
            reconcile_binding(old, expected)
        else:
            reconcile_role(old, expected)
        return old

    await store.update(kind, ns, name, compute, SYSTEM_USER, field_manager=FIELD_MANAGER)
    return "updated"


async def reconcile_default_policy(store: "Store") -> dict[str, int]:
    """Create or complete the default roles and bindings; returns counts by outcome."""
    counts: dict[str, int] = {}
    for resource, objs in (
        ("clusterroles", default_cluster_roles()),
        ("roles", default_roles()),
        ("clusterrolebindings", default_cluster_role_bindings()),
        ("rolebindings", default_role_bindings()),
    ):
        for obj in objs:
            outcome = await _reconcile_one(store, resource, obj)
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome not in ("unchanged", "exists"):
                log.debug("rbac default policy: %s %s %s", resource, obj["metadata"]["name"], outcome)
    log.info("rbac default policy reconciled: %s", ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())))
    return counts
