"""Whether a pod fits a node beyond its resources: node selector and required node
affinity, host ports, taints. The scheduler filters nodes with these, and the node
agent's own admission checks a pod bound to it with the same rules (as upstream's
node agent runs the scheduler's general predicates)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from . import names
from .helpers import _dig, _list, tolerates
from .selectors import DOES_NOT_EXIST, EXISTS, GREATER_THAN, IN, LESS_THAN, NOT_IN, SelectorError, new_requirement

__all__ = [
    "NO_SCHEDULE_EFFECTS",
    "first_untolerated_taint",
    "host_ports",
    "node_matches_pod",
    "ports_conflict",
    "term_matches",
]

NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")

_OPERATORS = {
    "In": IN,
    "NotIn": NOT_IN,
    "Exists": EXISTS,
    "DoesNotExist": DOES_NOT_EXIST,
    "Gt": GREATER_THAN,
    "Lt": LESS_THAN,
}


# --- host ports ---------------------------------------------------------------------------


def host_ports(pod: Mapping) -> tuple[tuple[str, str, int], ...]:
    """(hostIP, protocol, hostPort) the pod's containers claim on their node."""
    out = []
    for c in _list(_dig(pod, "spec", "containers")):
        for p in _list(c.get("ports") if isinstance(c, dict) else None):
            if isinstance(p, dict) and isinstance(p.get("hostPort"), int) and p["hostPort"] > 0:
                out.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", p["hostPort"]))
    return tuple(out)


def ports_conflict(wanted: Iterable[tuple[str, str, int]], used: Iterable[tuple[str, str, int]]) -> bool:
    """Upstream's HostPortInfo check: the same protocol and port conflict when either
    side binds 0.0.0.0 or both bind the same address."""
    used_set = set(used)
    for ip, proto, port in wanted:
        for uip, uproto, uport in used_set:
            if uproto == proto and uport == port and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


# --- taints and tolerations --------------------------------------------------------------


def first_untolerated_taint(
    taints: Iterable[Mapping], tolerations: Sequence[Mapping], effects: tuple[str, ...] = NO_SCHEDULE_EFFECTS
) -> Mapping | None:
    for taint in taints:
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


# --- node affinity --------------------------------------------------------------------


def term_matches(term: Any, labels: Mapping[str, str], node_name: str) -> bool:
    """One nodeSelectorTerm: all its expressions and fields hold. An empty or
    malformed term matches nothing, as upstream."""
    if not isinstance(term, dict):
        return False
    exprs, fields = _list(term.get("matchExpressions")), _list(term.get("matchFields"))
    if not exprs and not fields:
        return False
    try:
        for e in exprs:
            op = _OPERATORS.get(str(e.get("operator"))) if isinstance(e, dict) else None
            if op is None:
                return False
            if not new_requirement(e.get("key") or "", op, [str(v) for v in _list(e.get("values"))]).matches(labels):
                return False
        for f in fields:
            if not isinstance(f, dict) or f.get("key") != "metadata.name" or f.get("operator") not in ("In", "NotIn"):
                return False
            if not new_requirement(
                names.LABEL_METADATA_NAME, _OPERATORS[f["operator"]], [str(v) for v in _list(f.get("values"))]
            ).matches({names.LABEL_METADATA_NAME: node_name}):
                return False
    except SelectorError:
        return False
    return True


def node_matches_pod(pod: Mapping, node: Mapping) -> bool:
    """``spec.nodeSelector`` (every pair) and the required node affinity (any term)."""
    labels = _dig(node, "metadata", "labels") or {}
    for k, v in (_dig(pod, "spec", "nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = _dig(pod, "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        name = _dig(node, "metadata", "name") or ""
        return any(term_matches(t, labels, name) for t in _list(required.get("nodeSelectorTerms")))
    return True
