"""The ClusterRole aggregation controller: aggregated roles carry the union of the roles they select."""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING

from ..api import names
from ..api import status as st
from ..api.user import SYSTEM_USER
from ..authz.rbac import RbacIndex
from .queue import KeyQueue

if TYPE_CHECKING:
    from ..registry.store import Store

log = logging.getLogger("orch-apiserver.rbac")

AGGREGATOR_FIELD_MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER
RBAC = names.RBAC_GROUP


def aggregate_rules(index: RbacIndex, name: str) -> list[dict] | None:
    """The rules an aggregated ClusterRole should carry (None: not aggregated or gone):
    for each selector in order, the rules of the matching roles by name, each rule once."""
    target = index.cluster_roles.get(name)
    if target is None or target.selectors is None:
        return None
    out: list[dict] = []
    others = sorted((cr for cr in index.cluster_roles.values() if cr.name != name), key=lambda cr: cr.name)
    for sel in target.selectors:
        for cr in others:
            if sel.matches(cr.labels):
                for r in cr.rules_raw:
                    if r not in out:
                        out.append(r)
    return out


class ClusterRoleAggregator:
    """Keeps every aggregated ClusterRole's rules the union of the roles it selects."""

    RETRY_DELAY = 1.0

    def __init__(self, store: "Store", index: RbacIndex):
        self.store = store
        self.index = index
        self.queue = KeyQueue()
        self.kind = store.registry.by_resource(RBAC, "v1", "clusterroles")
        index.listeners.append(self.changed)

    def changed(self, _name: str | None) -> None:
        # Any ClusterRole may be selected by any aggregated one (labels can change):
        # look at every aggregated role again; a sync that changes nothing writes nothing.
        for cr in self.index.cluster_roles.values():
            if cr.selectors is not None:
                self.queue.add(cr.name)

    async def run(self) -> None:
        self.changed(None)
        while True:
            name = await self.queue.get()
            try:
                await self.sync(name)
            except st.ApiError as exc:
                log.warning("clusterrole aggregation %s: %s", name, exc.message)
                self.queue.add_after(name, self.RETRY_DELAY)
            except Exception:  # noqa: BLE001 - keep aggregating the others
                log.exception("clusterrole aggregation %s failed", name)
                self.queue.add_after(name, self.RETRY_DELAY)

    async def sync(self, name: str) -> bool:
        """True if the role was rewritten."""
        rules = aggregate_rules(self.index, name)
        if rules is None or rules == self.index.cluster_roles[name].rules_raw:
            return False

        changed = False

        def compute(old: dict) -> dict:
            nonlocal changed
            changed = old.get("rules") != rules
            old["rules"] = copy.deepcopy(rules)
            return old

        try:
            await self.store.update(self.kind, "", name, compute, SYSTEM_USER, field_manager=AGGREGATOR_FIELD_MANAGER)
        except st.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        if changed:
            log.info("clusterrole %s aggregated %d rules", name, len(rules))
        return changed
