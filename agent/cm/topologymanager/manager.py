"""The topology manager's admission of a pod on this node.

For each container (``--topology-manager-scope=container``) or once for the whole
pod (``pod``), the hint providers (CPU manager, memory manager, device manager) are
asked where the request could be met; their answers are merged under
``--topology-manager-policy``; a pod the policy cannot admit is refused with
upstream's ``TopologyAffinityError``. Then every provider allocates, aligned to the
merged hint. Under ``none`` no hints are asked for and every provider allocates
without an affinity (so devices are still handed out).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Mapping

from ..admission import AdmitResult
from ..allocerror import AllocationFailure
from ..topology import HintProvider, Hints, TopologyHint
from .merge import merge_hints

__all__ = [
    "POLICIES",
    "SCOPES",
    "TOPOLOGY_AFFINITY_ERROR",
    "TOPOLOGY_AFFINITY_MESSAGE",
    "UNEXPECTED_ADMISSION_ERROR",
    "TopologyManager",
    "TopologyManagerError",
]

log = logging.getLogger(__name__)

POLICY_NONE = "none"
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")
TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
MAX_NUMA_NODES = 8
_GATE = "TopologyManager"


class TopologyManagerError(RuntimeError):
    """The topology manager cannot run with this configuration on this machine."""


def _containers(pod: Mapping) -> list[Mapping]:
    spec = pod.get("spec") or {}
    return [c for c in (spec.get("initContainers") or []) + (spec.get("containers") or []) if isinstance(c, Mapping)]


def _uid(pod: Mapping) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class TopologyManager:
    def __init__(self, cfg: Any, numa_nodes: Iterable[int], *, numa_reported: bool = True) -> None:
        """``numa_nodes``: the machine's NUMA node ids; ``numa_reported`` False when the kernel
        shows none (policies other than none are then refused)."""
        self.policy = str(getattr(cfg, "topology_manager_policy", POLICY_NONE) or POLICY_NONE)
        self.scope = str(getattr(cfg, "topology_manager_scope", "container") or "container")
        if self.policy not in POLICIES:
            raise TopologyManagerError(
                f'unknown topology manager policy "{self.policy}" (--topology-manager-policy): '
                f"expected one of {', '.join(POLICIES)}"
            )
        if self.scope not in SCOPES:
            raise TopologyManagerError(
                f'unknown topology manager scope "{self.scope}" (--topology-manager-scope): expected container or pod'
            )
        self.numa_nodes = sorted(set(numa_nodes)) or [0]
        if self.policy == POLICY_NONE and self.scope == "pod":
            raise TopologyManagerError(
                '--topology-manager-scope "pod" is not supported on this node with --topology-manager-policy '
                '"none": no hints are merged, so the scope would change nothing'
            )
        if self.policy != POLICY_NONE:
            try:
                gate_on = bool(cfg.feature(_GATE))
            except Exception:
                gate_on = True
            if not gate_on:
                raise TopologyManagerError(
                    f'--topology-manager-policy "{self.policy}" needs the feature gate {_GATE}, which is disabled'
                )
            if not numa_reported:
                raise TopologyManagerError(
                    f'--topology-manager-policy "{self.policy}" is not supported on this node: the kernel reports '
                    "no NUMA node (/sys/devices/system/node)"
                )
            if len(self.numa_nodes) > MAX_NUMA_NODES:
                raise TopologyManagerError(
                    f"the topology manager is unsupported on machines with more than {MAX_NUMA_NODES} NUMA nodes "
                    f"(this one has {len(self.numa_nodes)})"
                )
        self.providers: list[HintProvider] = []
        self._affinity: dict[tuple[str, str], TopologyHint] = {}
        self._lock = threading.RLock()

    def add_hint_provider(self, provider: HintProvider) -> None:
        self.providers.append(provider)

    # --- admission ------------------------------------------------------------------

    def admit(self, pod: Mapping) -> AdmitResult:
        with self._lock:
            uid = _uid(pod)
            if self.scope == "pod":
                best = self._best(pod, None)
                if best is None:
                    return self._refuse(pod)
                for c in _containers(pod):
                    self._affinity[(uid, str(c.get("name") or ""))] = best
                    failure = self._allocate(pod, c, best)
                    if failure is not None:
                        return failure
                return AdmitResult(True)
            for c in _containers(pod):
                best = self._best(pod, c)
                if best is None:
                    return self._refuse(pod, c)
                self._affinity[(uid, str(c.get("name") or ""))] = best
                failure = self._allocate(pod, c, best)
                if failure is not None:
                    return failure
            return AdmitResult(True)

    def _best(self, pod: Mapping, container: Mapping | None) -> TopologyHint | None:
        """The merged hint, or None when the policy refuses it."""
        if self.policy == POLICY_NONE:
            return TopologyHint(None, True)
        answers: list[Hints] = []
        for p in self.providers:
            answers.append(p.get_pod_topology_hints(pod) if container is None else p.get_topology_hints(pod, container))
        best, admit = merge_hints(self.policy, self.numa_nodes, answers)
        log.debug("topology manager: pod %s %s: best hint %s, admit %s", _uid(pod), container, best, admit)
        return best if admit else None

    def _refuse(self, pod: Mapping, container: Mapping | None = None) -> AdmitResult:
        what = f" container {container.get('name')}" if container is not None else ""
        log.info(
            "topology manager: refusing pod %s%s under policy %s (scope %s): no aligned placement",
            _uid(pod),
            what,
            self.policy,
            self.scope,
        )
        return AdmitResult(False, TOPOLOGY_AFFINITY_ERROR, TOPOLOGY_AFFINITY_MESSAGE)

    def _allocate(self, pod: Mapping, container: Mapping, best: TopologyHint) -> AdmitResult | None:
        affinity = best if best.numa_affinity is not None else None
        for p in self.providers:
            try:
                p.allocate(pod, container, affinity)
            except AllocationFailure as exc:
                return AdmitResult(False, exc.reason, exc.message)
            except Exception as exc:
                return AdmitResult(
                    False, UNEXPECTED_ADMISSION_ERROR, f"Allocate failed due to {exc}, which is unexpected"
                )
        return None

    def affinity(self, pod_uid: str, container_name: str) -> TopologyHint | None:
        with self._lock:
            return self._affinity.get((pod_uid, container_name))

    def remove_pod(self, pod_uid: str) -> None:
        with self._lock:
            for key in [k for k in self._affinity if k[0] == pod_uid]:
                del self._affinity[key]
