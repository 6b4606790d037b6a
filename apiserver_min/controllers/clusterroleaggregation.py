"""The ClusterRole aggregation controller: aggregated roles carry the union of the roles they select."""

from __future__ import annotations

import copy
import logging
from typing import Mapping

from ..api import names
from ..api import status as st
from ..authz.rbac import ClusterRole, RbacIndex, parse_cluster_role
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .queue import KeyQueue

log = logging.getLogger("orch-apiserver.rbac")

AGGREGATOR_FIELD_MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER
RBAC = names.RBAC_GROUP


def aggregate_role_rules(roles: Mapping[str, ClusterRole], name: str) -> list[dict] | None:
    """The rules an aggregated ClusterRole should carry (None: not aggregated or gone):
    for each selector in order, the rules of the matching roles by name, each rule once."""
    target = roles.get(name)
    if target is None or target.selectors is None:
        return None
    out: list[dict] = []
    others = sorted((cr for cr in roles.values() if cr.name != name), key=lambda cr: cr.name)
    for sel in target.selectors:
        for cr in others:
            if sel.matches(cr.labels):
                for r in cr.rules_raw:
                    if r not in out:
                        out.append(r)
    return out


def aggregate_rules(index: RbacIndex, name: str) -> list[dict] | None:
    """:func:`aggregate_role_rules` over the authorizer's index."""
    return aggregate_role_rules(index.cluster_roles, name)


class ClusterRoleAggregator:
    """Keeps every aggregated ClusterRole's rules the union of the roles it selects,
    reading ClusterRoles through their informer."""

    RETRY_DELAY = 1.0

    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.kind = informers.kind(RBAC, "v1", "clusterroles")
        self.cluster_roles = informers.for_kind(self.kind)
        self.queue = KeyQueue()
        self._parsed: dict[str, tuple[int, ClusterRole]] = {}  # name -> (rv, parsed), parsed once per version

    def start(self) -> None:
        self.cluster_roles.add_handler(self.on_event)

    def roles(self) -> dict[str, ClusterRole]:
        out: dict[str, ClusterRole] = {}
        for e in self.cluster_roles.list():
            hit = self._parsed.get(e.name)
            if hit is None or hit[0] != e.rv:
                hit = self._parsed[e.name] = (e.rv, parse_cluster_role(e.object()))
            out[e.name] = hit[1]
        for gone in set(self._parsed) - set(out):
            del self._parsed[gone]
        return out

    def on_event(self, _ev: CacheEvent | None) -> None:
        # Any ClusterRole may be selected by any aggregated one (labels can change):
        # look at every aggregated role again; a sync that changes nothing writes nothing.
        for cr in self.roles().values():
            if cr.selectors is not None:
                self.queue.add(cr.name)

    async def run(self) -> None:
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
        roles = self.roles()
        rules = aggregate_role_rules(roles, name)
        if rules is None or rules == roles[name].rules_raw:
            return False

        changed = False

        def compute(old: dict) -> dict:
            nonlocal changed
            changed = old.get("rules") != rules
            old["rules"] = copy.deepcopy(rules)
            return old

        try:
            await self.client.update(self.kind, "", name, compute)
        except st.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        if changed:
            log.info("clusterrole %s aggregated %d rules", name, len(rules))
        return changed
