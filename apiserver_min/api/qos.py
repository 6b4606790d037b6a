"""The quality-of-service class of a pod: one classifier for the server and the node agent.

The API server stores ``status.qosClass`` when a pod is created and the node
agent puts the pod's cgroup under the tier of the same name and derives its
OOM score from it. Two answers for one pod would place a pod the API reports
as Burstable into the Guaranteed cgroup, so both sides call this function.

It follows upstream's GetPodQOS (v1.27):

* only cpu and memory count; hugepages, ephemeral-storage and extended
  resources do not;
* app and init containers count alike (ephemeral containers cannot declare
  resources); the pod overhead (``spec.overhead``) does not count;
* quantities are compared by value (``1`` cpu equals ``1000m``, ``1Gi`` equals
  ``1024Mi``), summed over containers; zero quantities are ignored;
* a request missing where a limit is set defaults to that limit (upstream's
  API defaulting; repeated here so static pods read from files, which no
  server defaulted, get the same class);
* BestEffort when no container requests or limits any cpu or memory;
  Guaranteed when every container limits both cpu and memory and the summed
  requests equal the summed limits; Burstable otherwise.

A quantity that does not parse is ignored here: the server calls this before
validation, which reports the field.
"""

from __future__ import annotations

from typing import Mapping

from .quantity import Quantity, QuantityError, parse_quantity

__all__ = ["GUARANTEED", "BURSTABLE", "BEST_EFFORT", "QOS_COMPUTE_RESOURCES", "pod_qos_class"]

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

# Upstream's supportedQoSComputeResources.
QOS_COMPUTE_RESOURCES = ("cpu", "memory")


def _positive(raw: object) -> dict[str, Quantity]:
    """The QoS resources of a requests or limits map that are set above zero."""
    if not isinstance(raw, Mapping):
        return {}
    out = {}
    for name in QOS_COMPUTE_RESOURCES:
        value = raw.get(name)
        if value is None:
            continue
        try:
            q = parse_quantity(value)
        except (QuantityError, TypeError):
            continue
        if q.sign() > 0:
            out[name] = q
    return out


def _add(total: dict[str, Quantity], more: Mapping[str, Quantity]) -> None:
    for name, q in more.items():
        total[name] = total[name] + q if name in total else q


def pod_qos_class(pod: Mapping) -> str:
    """Guaranteed, Burstable or BestEffort for a pod object (a decoded manifest)."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    for c in containers:
        if not isinstance(c, Mapping):
            continue
        resources = c.get("resources")
        resources = resources if isinstance(resources, Mapping) else {}
        raw_limits = resources.get("limits")
        raw_requests = resources.get("requests")
        if isinstance(raw_limits, Mapping):
            defaulted = dict(raw_requests) if isinstance(raw_requests, Mapping) else {}
            for name, value in raw_limits.items():
                defaulted.setdefault(name, value)
            raw_requests = defaulted
        container_limits = _positive(raw_limits)
        _add(requests, _positive(raw_requests))
        _add(limits, container_limits)
        if len(container_limits) != len(QOS_COMPUTE_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and any(limits.get(name) != q for name, q in requests.items()):
        guaranteed = False
    if guaranteed and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE
