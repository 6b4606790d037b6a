"""Resource admission of a pod on this node, as upstream's node agent decides it.

A pod bound to the node (or read from a manifest) still has to fit: the node
counts the pods it runs and their requests against its allocatable and
rejects the newcomer otherwise, with the same reason (``OutOfcpu``,
``OutOfmemory``, ``OutOfpods``, ``OutOfephemeral-storage``,
``OutOf<extended resource>``) and message that upstream writes into the
rejected pod's status, so tooling that matches on them keeps working.

Order, as upstream: the pod count first, then cpu, memory, ephemeral-storage,
then the other resources (huge pages, extended resources); only the first
failure is reported. A pod requesting nothing is checked for the count only.
Extended resources the node does not advertise at all are ignored (upstream
does so, so pods are not rejected while a device plugin is still starting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .qos import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, is_extended_resource, pod_requests

__all__ = ["AdmitResult", "admit", "insufficient_message"]


@dataclass(frozen=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


def insufficient_message(resource: str, requested: int, used: int, capacity: int) -> str:
    """Upstream's InsufficientResourceError text."""
    return f"Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"


def _uid(pod: Mapping) -> str:
    return (pod.get("metadata") or {}).get("uid") or ""


def admit(pod: Mapping, active_pods: Iterable[Mapping], allocatable: Mapping[str, int]) -> AdmitResult:
    """Whether ``pod`` fits next to ``active_pods`` (the pod itself is not counted twice)."""
    me = _uid(pod)
    others = [p for p in active_pods if not me or _uid(p) != me]

    used: dict[str, int] = {}
    for p in others:
        for k, v in pod_requests(p).items():
            used[k] = used.get(k, 0) + v

    failures: list[tuple[str, int, int, int]] = []
    allowed_pods = allocatable.get(PODS, 0)
    if len(others) + 1 > allowed_pods:
        failures.append((PODS, 1, len(others), allowed_pods))

    req = {k: v for k, v in pod_requests(pod).items() if not (is_extended_resource(k) and k not in allocatable)}
    scalar = {k: v for k, v in req.items() if k not in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)}
    if req.get(CPU, 0) or req.get(MEMORY, 0) or req.get(EPHEMERAL_STORAGE, 0) or scalar:
        for name in (CPU, MEMORY):
            r = req.get(name, 0)
            if r > allocatable.get(name, 0) - used.get(name, 0):
                failures.append((name, r, used.get(name, 0), allocatable.get(name, 0)))
        r = req.get(EPHEMERAL_STORAGE, 0)
        if r > 0 and r > allocatable.get(EPHEMERAL_STORAGE, 0) - used.get(EPHEMERAL_STORAGE, 0):
            failures.append(
                (EPHEMERAL_STORAGE, r, used.get(EPHEMERAL_STORAGE, 0), allocatable.get(EPHEMERAL_STORAGE, 0))
            )
        for name in sorted(scalar):
            r = scalar[name]
            if r == 0:
                continue
            if r > allocatable.get(name, 0) - used.get(name, 0):
                failures.append((name, r, used.get(name, 0), allocatable.get(name, 0)))

    if not failures:
        return AdmitResult(True)
    name, requested, in_use, capacity = failures[0]
    return AdmitResult(False, f"OutOf{name}", insufficient_message(name, requested, in_use, capacity))
