"""QoS class, requests and limits of a pod, as the node agent computes them.

The node agent sizes cgroups and admits pods from three numbers per pod: its
QoS class, its effective requests and its effective limits. Upstream defines
them precisely and the scheduler, the eviction manager and the cgroup layout
all depend on the same answer, so they are computed here once:

* requests and limits per resource = max(sum over app containers, max over
  any single init container) - init containers run one at a time before the
  app containers, so the pod needs the larger of the two - plus the pod
  overhead (``spec.overhead``; for limits only where a limit exists);
* a container's requests default to its limits where a request is absent
  (upstream's API defaulting; repeating it here is harmless for defaulted
  pods and keeps static pods from files classified the same way);
* the QoS class is the shared contract's (:mod:`apiserver_min.api.qos`), so
  the cgroup tier a pod lands in is the class the API server stores for it;
  it is re-exported here for the agent's modules.

Units everywhere in this package: cpu in millicores, every other resource in
its plain unit (bytes for memory, ephemeral-storage and hugepages, a count
for pods and extended resources).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from apiserver_min.api import names
from apiserver_min.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, pod_qos_class
from apiserver_min.api.quantity import QuantityError, parse_quantity

__all__ = [
    "GUARANTEED",
    "BURSTABLE",
    "BEST_EFFORT",
    "CPU",
    "MEMORY",
    "EPHEMERAL_STORAGE",
    "PODS",
    "HUGEPAGES_PREFIX",
    "PodLimits",
    "pod_qos_class",
    "pod_requests",
    "pod_limits",
    "resource_value",
    "is_extended_resource",
    "is_hugepages",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"


def resource_value(resource: str, quantity: object, *, where: str = "") -> int:
    """A quantity in this package's units: millicores for cpu, plain units otherwise.

    ``where`` names the field for the error message.
    """
    try:
        q = parse_quantity(quantity)
    except (QuantityError, TypeError) as exc:
        raise ValueError(f"{where or resource}: {exc}") from None
    return q.milli_value() if resource == CPU else q.value()


def is_hugepages(resource: str) -> bool:
    return resource.startswith(HUGEPAGES_PREFIX)


def is_extended_resource(resource: str) -> bool:
    """True for vendor resources (``example.com/gpu``), as upstream's IsExtendedResourceName.

    Native resources have no domain or the project's own domain; ``requests.``
    names are quota keys, not resources.
    """
    if "/" not in resource:
        return False
    if resource.startswith(f"{names.DOMAIN}/") or resource.startswith("requests."):
        return False
    return True


def _pod_label(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f'pod "{meta.get("namespace") or "default"}/{meta.get("name") or "?"}"'


def _containers(pod: Mapping) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    spec = pod.get("spec") or {}
    app = [(f"spec.containers[{i}]", c) for i, c in enumerate(spec.get("containers") or []) if isinstance(c, Mapping)]
    init = [
        (f"spec.initContainers[{i}]", c)
        for i, c in enumerate(spec.get("initContainers") or [])
        if isinstance(c, Mapping)
    ]
    return app, init


def _resource_map(pod: Mapping, where: str, raw: object) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{_pod_label(pod)}: {where}: expected a map of resource names to quantities")
    return {str(k): resource_value(str(k), v, where=f"{_pod_label(pod)}: {where}.{k}") for k, v in raw.items()}


def _container_requests_limits(pod: Mapping, where: str, c: Mapping) -> tuple[dict[str, int], dict[str, int]]:
    res = c.get("resources") or {}
    limits = _resource_map(pod, f"{where}.resources.limits", res.get("limits"))
    requests = _resource_map(pod, f"{where}.resources.requests", res.get("requests"))
    for k, v in limits.items():
        requests.setdefault(k, v)  # upstream defaulting: a missing request equals the limit
    return requests, limits


def _overhead(pod: Mapping) -> dict[str, int]:
    return _resource_map(pod, "spec.overhead", (pod.get("spec") or {}).get("overhead"))


def pod_requests(pod: Mapping) -> dict[str, int]:
    """Effective requests per resource: max(sum of app containers, any init container) + overhead."""
    app, init = _containers(pod)
    total: dict[str, int] = {}
    for where, c in app:
        req, _ = _container_requests_limits(pod, where, c)
        for k, v in req.items():
            total[k] = total.get(k, 0) + v
    for where, c in init:
        req, _ = _container_requests_limits(pod, where, c)
        for k, v in req.items():
            total[k] = max(v, total.get(k, 0))
    for k, v in _overhead(pod).items():
        total[k] = total.get(k, 0) + v
    return total


@dataclass(frozen=True)
class PodLimits:
    """Effective limits plus whether every container (init included) declared cpu / memory.

    Upstream sets a pod-level CFS quota or memory limit only when *all*
    containers declare one; one unlimited container makes the pod unlimited.
    """

    limits: dict[str, int]
    cpu_declared: bool
    memory_declared: bool


def pod_limits(pod: Mapping) -> PodLimits:
    """Effective limits: max(sum of app containers, any init container), overhead where limited."""
    app, init = _containers(pod)
    total: dict[str, int] = {}
    cpu_declared = memory_declared = True
    for where, c in app:
        _, lim = _container_requests_limits(pod, where, c)
        if not lim.get(CPU):
            cpu_declared = False
        if not lim.get(MEMORY):
            memory_declared = False
        for k, v in lim.items():
            total[k] = total.get(k, 0) + v
    for where, c in init:
        _, lim = _container_requests_limits(pod, where, c)
        if not lim.get(CPU):
            cpu_declared = False
        if not lim.get(MEMORY):
            memory_declared = False
        for k, v in lim.items():
            total[k] = max(v, total.get(k, 0))
    for k, v in _overhead(pod).items():
        if k in total:
            total[k] += v
    return PodLimits(total, cpu_declared, memory_declared)


def sum_requests(pods: Iterable[Mapping]) -> dict[str, int]:
    """Requests of several pods added up (what they hold of the node)."""
    total: dict[str, int] = {}
    for p in pods:
        for k, v in pod_requests(p).items():
            total[k] = total.get(k, 0) + v
    return total


__all__ += ["sum_requests"]
