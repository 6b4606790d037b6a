"""The bootstrap configuration of API priority and fairness: upstream's (v1.27) mandatory
and suggested priority levels and flow schemas (names translated by the naming rule),
and the ensurer that creates and reconciles them at start and periodically.

Mandatory objects (``exempt``, ``catch-all``) always get their spec back. A suggested
object's spec is brought up to date while its ``apf.orch.io/autoupdate-spec`` annotation
says ``true``, or, without a boolean there, while its generation is still 1 (no one has
changed it); an operator who sets the annotation to ``false`` keeps their changes.
"""

from __future__ import annotations

import copy
import logging

from ...api import names
from ...api import status as st
from ...api.kinds import KindInfo, Registry
from ...client.interface import Client

log = logging.getLogger("orch-apiserver.flowcontrol")

_ALL = ["*"]
_ALL_RESOURCES = {"verbs": _ALL, "apiGroups": _ALL, "resources": _ALL, "clusterScope": True, "namespaces": _ALL}
_ALL_NON_RESOURCES = {"verbs": _ALL, "nonResourceURLs": _ALL}


def _queuing(queues: int, hand: int, limit: int) -> dict:
    return {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": limit}}


def _limited(shares: int, lendable: int, response: dict) -> dict:
    return {
        "type": "Limited",
        "limited": {"nominalConcurrencyShares": shares, "lendablePercent": lendable, "limitResponse": response},
    }


def _user(name: str) -> dict:
    return {"kind": "User", "user": {"name": name}}


def _group(name: str) -> dict:
    return {"kind": "Group", "group": {"name": name}}


def _service_account(namespace: str, name: str) -> dict:
    return {"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}}


def _flow_schema(
    pl: str,
    precedence: int,
    distinguisher: str | None,
    subjects: list[dict],
    resource_rules: list[dict] | None = None,
    non_resource_rules: list[dict] | None = None,
) -> dict:
    rule: dict = {"subjects": subjects}
    if resource_rules:
        rule["resourceRules"] = resource_rules
    if non_resource_rules:
        rule["nonResourceRules"] = non_resource_rules
    spec: dict = {"priorityLevelConfiguration": {"name": pl}, "matchingPrecedence": precedence, "rules": [rule]}
    if distinguisher is not None:
        spec["distinguisherMethod"] = {"type": distinguisher}
    return spec


def _leases(verbs: list[str]) -> dict:
    return {
        "verbs": verbs,
        "apiGroups": [names.COORDINATION_GROUP],
        "resources": ["leases"],
        "namespaces": _ALL,
    }


_AUTHENTICATED = [_group(names.GROUP_UNAUTHENTICATED), _group(names.GROUP_AUTHENTICATED)]
_SYSTEM_ACCOUNTS = _service_account(names.NS_SYSTEM, "*")

MANDATORY_PRIORITY_LEVELS: dict[str, dict] = {
    names.APF_EXEMPT: {"type": "Exempt"},
    names.APF_CATCH_ALL: _limited(5, 0, {"type": "Reject"}),
}
MANDATORY_FLOW_SCHEMAS: dict[str, dict] = {
    names.APF_EXEMPT: _flow_schema(
        names.APF_EXEMPT, 1, None, [_group(names.GROUP_MASTERS)], [_ALL_RESOURCES], [_ALL_NON_RESOURCES]
    ),
    names.APF_CATCH_ALL: _flow_schema(
        names.APF_CATCH_ALL, 10000, "ByUser", _AUTHENTICATED, [_ALL_RESOURCES], [_ALL_NON_RESOURCES]
    ),
}
SUGGESTED_PRIORITY_LEVELS: dict[str, dict] = {
    names.APF_PL_SYSTEM: _limited(30, 33, _queuing(64, 6, 50)),
    names.APF_PL_NODE_HIGH: _limited(40, 25, _queuing(64, 6, 50)),
    names.APF_PL_LEADER_ELECTION: _limited(10, 0, _queuing(16, 4, 50)),
    names.APF_PL_WORKLOAD_HIGH: _limited(40, 50, _queuing(128, 6, 50)),
    names.APF_PL_WORKLOAD_LOW: _limited(100, 90, _queuing(128, 6, 50)),
    names.APF_PL_GLOBAL_DEFAULT: _limited(20, 50, _queuing(128, 6, 50)),
}
SUGGESTED_FLOW_SCHEMAS: dict[str, dict] = {
    names.APF_FS_SYSTEM_NODES: _flow_schema(
        names.APF_PL_SYSTEM, 500, "ByUser", [_group(names.GROUP_NODES)], [_ALL_RESOURCES], [_ALL_NON_RESOURCES]
    ),
    names.APF_FS_SYSTEM_NODE_HIGH: _flow_schema(
        names.APF_PL_NODE_HIGH,
        400,
        "ByUser",
        [_group(names.GROUP_NODES)],
        [
            {
                "verbs": _ALL,
                "apiGroups": [""],
                "resources": ["nodes", "nodes/status"],
                "clusterScope": True,
                "namespaces": _ALL,
            },
            {"verbs": _ALL, "apiGroups": [names.COORDINATION_GROUP], "resources": ["leases"], "namespaces": _ALL},
        ],
    ),
    names.APF_FS_PROBES: _flow_schema(
        names.APF_EXEMPT,
        2,
        None,
        _AUTHENTICATED,
        non_resource_rules=[{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}],
    ),
    names.APF_FS_SYSTEM_LEADER_ELECTION: _flow_schema(
        names.APF_PL_LEADER_ELECTION,
        100,
        "ByUser",
        [_user(names.CONTROLLER_MANAGER_USER), _user(names.SCHEDULER_USER), _SYSTEM_ACCOUNTS],
        [_leases(["get", "create", "update"])],
    ),
    names.APF_FS_WORKLOAD_LEADER_ELECTION: _flow_schema(
        names.APF_PL_LEADER_ELECTION,
        200,
        "ByUser",
        [_SYSTEM_ACCOUNTS],
        [
            {
                "verbs": ["get", "create", "update"],
                "apiGroups": [""],
                "resources": ["endpoints", "configmaps"],
                "namespaces": _ALL,
            },
            _leases(["get", "create", "update"]),
        ],
    ),
    names.APF_FS_ENDPOINT_CONTROLLER: _flow_schema(
        names.APF_PL_WORKLOAD_HIGH,
        150,
        "ByUser",
        [_user(names.CONTROLLER_MANAGER_USER)]
        + [_service_account(names.NS_SYSTEM, n) for n in names.APF_ENDPOINT_CONTROLLER_ACCOUNTS],
        [{"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints"], "namespaces": _ALL}],
    ),
    names.APF_FS_CONTROLLER_MANAGER: _flow_schema(
        names.APF_PL_WORKLOAD_HIGH,
        800,
        "ByNamespace",
        [_user(names.CONTROLLER_MANAGER_USER)],
        [_ALL_RESOURCES],
        [_ALL_NON_RESOURCES],
    ),
    names.APF_FS_SCHEDULER: _flow_schema(
        names.APF_PL_WORKLOAD_HIGH,
        800,
        "ByNamespace",
        [_user(names.SCHEDULER_USER)],
        [_ALL_RESOURCES],
        [_ALL_NON_RESOURCES],
    ),
    names.APF_FS_SYSTEM_SERVICE_ACCOUNTS: _flow_schema(
        names.APF_PL_WORKLOAD_HIGH, 900, "ByNamespace", [_SYSTEM_ACCOUNTS], [_ALL_RESOURCES], [_ALL_NON_RESOURCES]
    ),
    names.APF_FS_SERVICE_ACCOUNTS: _flow_schema(
        names.APF_PL_WORKLOAD_LOW,
        9000,
        "ByUser",
        [_group(names.GROUP_SERVICEACCOUNTS)],
        [_ALL_RESOURCES],
        [_ALL_NON_RESOURCES],
    ),
    names.APF_FS_GLOBAL_DEFAULT: _flow_schema(
        names.APF_PL_GLOBAL_DEFAULT, 9900, "ByUser", _AUTHENTICATED, [_ALL_RESOURCES], [_ALL_NON_RESOURCES]
    ),
}


def auto_update(obj: dict) -> bool:
    """Whether the server may bring a suggested object's spec up to date."""
    md = obj.get("metadata") or {}
    value = str((md.get("annotations") or {}).get(names.APF_AUTOUPDATE_ANNOTATION, "")).strip().lower()
    if value in ("true", "1", "t"):
        return True
    if value in ("false", "0", "f"):
        return False
    return int(md.get("generation") or 0) == 1


def _fresh(kind: KindInfo, name: str, spec: dict) -> dict:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": name, "annotations": {names.APF_AUTOUPDATE_ANNOTATION: "true"}},
        "spec": copy.deepcopy(spec),
    }


class Ensurer:
    """Creates the missing bootstrap objects and reconciles their specs (through
    ``client``, acting as the API server itself)."""

    def __init__(self, client: Client, registry: Registry):
        self.client = client
        fs = registry.by_resource(names.FLOWCONTROL_GROUP, names.FLOWCONTROL_VERSION, "flowschemas")
        pl = registry.by_resource(names.FLOWCONTROL_GROUP, names.FLOWCONTROL_VERSION, "prioritylevelconfigurations")
        assert fs is not None and pl is not None
        self.fs_kind, self.pl_kind = fs, pl

    async def ensure(self) -> list[str]:
        """One pass over every bootstrap object; returns what it created or updated."""
        changed: list[str] = []
        for kind, objects, mandatory in (
            (self.pl_kind, MANDATORY_PRIORITY_LEVELS, True),
            (self.pl_kind, SUGGESTED_PRIORITY_LEVELS, False),
            (self.fs_kind, MANDATORY_FLOW_SCHEMAS, True),
            (self.fs_kind, SUGGESTED_FLOW_SCHEMAS, False),
        ):
            for name, spec in objects.items():
                what = await self._ensure_one(kind, name, spec, mandatory)
                if what:
                    changed.append(f"{what} {kind.kind} {name}")
        return changed

    async def _ensure_one(self, kind: KindInfo, name: str, spec: dict, mandatory: bool) -> str:
        try:
            current = await self.client.get(kind, "", name)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
            try:
                await self.client.create(kind, "", _fresh(kind, name, spec))
            except st.ApiError as exc2:
                if exc2.code != 409:
                    raise
                return ""
            return "created"
        if not mandatory and not auto_update(current):
            return ""
        wanted = _fresh(kind, name, spec)
        # Compare after defaulting: what is stored carries the defaults of omitted fields.
        if (
            _covers(current.get("spec"), wanted["spec"])
            and ((current.get("metadata") or {}).get("annotations") or {}).get(names.APF_AUTOUPDATE_ANNOTATION)
            == "true"
        ):
            return ""

        def mutate(obj: dict) -> dict:
            obj["spec"] = copy.deepcopy(spec)
            md = obj.setdefault("metadata", {})
            md.setdefault("annotations", {})[names.APF_AUTOUPDATE_ANNOTATION] = "true"
            return obj

        await self.client.update(kind, "", name, mutate)
        return "updated"


def _covers(have, want) -> bool:
    """Whether ``have`` holds every value of ``want`` (extra defaulted fields allowed)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_covers(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(_covers(h, w) for h, w in zip(have, want))
    return have == want
