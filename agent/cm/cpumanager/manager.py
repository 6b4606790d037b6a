"""The CPU manager: exclusive CPUs for Guaranteed containers with integer CPU requests.

Policies, as upstream's ``--cpu-manager-policy``:

- ``none``: every container runs on all CPUs; the manager only keeps its checkpoint
  (so a later switch to ``static`` over a stale file is caught).
- ``static``: the *shared pool* (the checkpoint's ``defaultCpuSet``) starts as every
  online CPU. A Guaranteed container whose cpu request is a whole number gets that
  many CPUs taken out of the pool for itself (never one of the reserved CPUs, which
  stay in the pool for everyone else); every other container runs on the pool.
  Init containers' CPUs are handed on to the pod's app containers, as upstream does.

The reserved CPUs are ``--reserved-cpus`` or, without it, the cpu of
``--system-reserved`` + ``--orch-reserved`` rounded up, chosen by the allocator
(whole cores first).

Policy options (``--cpu-manager-policy-options``, static only): ``full-pcpus-only``
(beta: a request must fill whole cores, else ``SMTAlignmentError``),
``distribute-cpus-across-numa`` and ``align-by-socket`` (alpha).

The assignments live in ``<root-dir>/cpu_manager_state`` (upstream's JSON shape);
a file written under another policy stops the start, as upstream's does.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..allocerror import AllocationFailure
from ..checkpoint import CheckpointError, restore_checkpoint, write_checkpoint
from ..cpuset import CpuSetError, format_cpuset, parse_cpuset
from ..qos import CPU, GUARANTEED, pod_qos_class, resource_value
from ..topology import Hints, TopologyHint
from .allocation import AllocationError, take_by_topology, take_distributed
from .topology import CpuTopology, TopologyError, discover

__all__ = [
    "CpuManager",
    "CpuManagerError",
    "STATE_FILE",
    "OPT_FULL_PCPUS_ONLY",
    "OPT_DISTRIBUTE_ACROSS_NUMA",
    "OPT_ALIGN_BY_SOCKET",
    "container_cpus",
    "numa_masks",
    "pod_cpus",
]

log = logging.getLogger(__name__)

STATE_FILE = "cpu_manager_state"
POLICY_NONE = "none"
POLICY_STATIC = "static"
OPT_FULL_PCPUS_ONLY = "full-pcpus-only"
OPT_DISTRIBUTE_ACROSS_NUMA = "distribute-cpus-across-numa"
OPT_ALIGN_BY_SOCKET = "align-by-socket"
# Option -> the feature gate of its maturity level in 1.27.
_OPTION_GATES = {
    OPT_FULL_PCPUS_ONLY: ("CPUManagerPolicyBetaOptions", "Beta"),
    OPT_DISTRIBUTE_ACROSS_NUMA: ("CPUManagerPolicyAlphaOptions", "Alpha"),
    OPT_ALIGN_BY_SOCKET: ("CPUManagerPolicyAlphaOptions", "Alpha"),
}
SMT_ALIGNMENT_ERROR = "SMTAlignmentError"


class CpuManagerError(RuntimeError):
    """The CPU manager cannot start with this configuration or this checkpoint."""


def _parse_bool(key: str, value: str) -> bool:
    v = str(value).strip()
    if v in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if v in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise CpuManagerError(f'bad value for option "{key}": strconv.ParseBool: parsing "{v}": invalid syntax')


def container_cpus(pod: Mapping, container: Mapping) -> int:
    """Exclusive CPUs the container gets under the static policy (0: it runs on the shared pool)."""
    if pod_qos_class(pod) != GUARANTEED:
        return 0
    res = container.get("resources") or {}
    raw = (res.get("requests") or {}).get(CPU)
    if raw is None:
        raw = (res.get("limits") or {}).get(CPU)
    if raw is None:
        return 0
    milli = resource_value(CPU, raw)
    if milli <= 0 or milli % 1000:
        return 0
    return milli // 1000


def numa_masks(nodes: list[int]) -> list[frozenset[int]]:
    """Every non-empty subset of ``nodes``, smallest first (as upstream iterates bit masks)."""
    out: list[frozenset[int]] = []
    for bits in range(1, 1 << len(nodes)):
        out.append(frozenset(n for i, n in enumerate(nodes) if bits >> i & 1))
    return sorted(out, key=lambda m: (len(m), sorted(m)))


@dataclass
class _Options:
    full_pcpus_only: bool = False
    distribute_across_numa: bool = False
    align_by_socket: bool = False


class CpuManager:
    """The node's CPU manager (a topology hint provider)."""

    def __init__(
        self,
        cfg: Any,
        *,
        topology: CpuTopology | None = None,
        state_dir: str | None = None,
        sys_cpu: str = "/sys/devices/system/cpu",
        sys_node: str = "/sys/devices/system/node",
    ) -> None:
        self.policy = str(getattr(cfg, "cpu_manager_policy", POLICY_NONE) or POLICY_NONE)
        if self.policy not in (POLICY_NONE, POLICY_STATIC):
            raise CpuManagerError(f'unknown CPU manager policy "{self.policy}" (--cpu-manager-policy)')
        root = state_dir or str(getattr(cfg, "root_dir", "") or "")
        self.state_path = os.path.join(root, STATE_FILE) if root else ""
        self._lock = threading.RLock()
        self.default: frozenset[int] = frozenset()
        self.assignments: dict[str, dict[str, frozenset[int]]] = {}
        self._init_names: dict[str, set[str]] = {}  # pod uid -> init container names (for release)
        self._reuse: dict[str, frozenset[int]] = {}  # pod uid -> CPUs of its init containers, reusable
        self._applied: dict[str, str] = {}  # container id -> cpuset last given to the runtime
        self.options = _Options()
        raw_options = dict(getattr(cfg, "cpu_manager_policy_options", None) or {})
        if self.policy == POLICY_NONE:
            if raw_options:
                raise CpuManagerError(
                    "--cpu-manager-policy-options apply to the static CPU manager policy only; "
                    f'the policy is "{POLICY_NONE}" (--cpu-manager-policy)'
                )
            self.topology = topology or CpuTopology()
            self.reserved: frozenset[int] = frozenset()
            return
        try:
            self.topology = topology or discover(sys_cpu, sys_node)
        except TopologyError as exc:
            raise CpuManagerError(f"cannot discover the CPU topology: {exc}") from None
        self._parse_options(cfg, raw_options)
        self.reserved = self._reserved_cpus(cfg)

    # --- configuration ------------------------------------------------------------

    def _parse_options(self, cfg: Any, raw: Mapping[str, str]) -> None:
        def gate(name: str) -> bool:
            try:
                return bool(cfg.feature(name))
            except Exception:
                return False

        for key, value in sorted(raw.items()):
            if key not in _OPTION_GATES:
                raise CpuManagerError(f'unsupported cpumanager option: "{key}" ({value})')
            gate_name, level = _OPTION_GATES[key]
            if not gate(gate_name):
                raise CpuManagerError(
                    f'CPU Manager Policy {level}-level Options not enabled, but option "{key}" provided '
                    f"(feature gate {gate_name})"
                )
            enabled = _parse_bool(key, value)
            if key == OPT_FULL_PCPUS_ONLY:
                self.options.full_pcpus_only = enabled
            elif key == OPT_DISTRIBUTE_ACROSS_NUMA:
                self.options.distribute_across_numa = enabled
            else:
                self.options.align_by_socket = enabled
        if self.options.align_by_socket:
            policy = str(getattr(cfg, "topology_manager_policy", "none") or "none")
            if policy == "single-numa-node":
                raise CpuManagerError(
                    f"Topology manager {policy} policy is incompatible with CPUManager {OPT_ALIGN_BY_SOCKET} "
                    "policy option"
                )
            if not self.topology.numa_per_socket_aligned():
                raise CpuManagerError(
                    f"the {OPT_ALIGN_BY_SOCKET} policy option needs every NUMA node within one socket; "
                    "this machine has NUMA nodes spanning sockets"
                )

    def _reserved_cpus(self, cfg: Any) -> frozenset[int]:
        all_cpus = self.topology.all_cpus()
        text = str(getattr(cfg, "reserved_cpus", "") or "")
        if text:
            try:
                cpus = parse_cpuset(text)
            except CpuSetError as exc:
                raise CpuManagerError(f"--reserved-cpus: {exc}") from None
            missing = cpus - all_cpus
            if missing:
                raise CpuManagerError(
                    f'--reserved-cpus "{text}" names CPUs this machine does not have: {format_cpuset(missing)} '
                    f"(online: {format_cpuset(all_cpus)})"
                )
            return cpus
        milli = 0
        for attr in ("system_reserved", "orch_reserved"):
            q = (getattr(cfg, attr, None) or {}).get(CPU)
            if q is not None:
                milli += resource_value(CPU, q)
        count = math.ceil(milli / 1000)
        if count <= 0:
            raise CpuManagerError(
                "the static CPU manager policy needs reserved CPUs: set --reserved-cpus, or a cpu amount in "
                "--system-reserved or --orch-reserved"
            )
        try:
            return take_by_topology(self.topology, all_cpus, count)
        except AllocationError:
            raise CpuManagerError(
                f"cannot reserve {count} CPUs (from --system-reserved/--orch-reserved cpu): the machine has "
                f"{len(all_cpus)}"
            ) from None

    # --- start and checkpoint -----------------------------------------------------

    def start(self) -> None:
        """Restore the checkpoint (or write a fresh one); refuse a checkpoint of another policy."""
        if not self.state_path:
            if self.static:
                raise CpuManagerError("the static CPU manager policy needs a root directory (--root-dir) for its state")
            return
        with self._lock:
            try:
                data = restore_checkpoint(self.state_path, self.policy)
            except CheckpointError as exc:
                raise CpuManagerError(
                    f"{exc}; drain this node and delete the CPU manager checkpoint file {self.state_path} "
                    "before restarting the agent"
                ) from None
            if data is None:
                if self.static:
                    self._fresh()
                return
            try:
                self.default = parse_cpuset(str(data.get("defaultCpuSet") or ""))
                self.assignments = {
                    str(uid): {str(n): parse_cpuset(str(c)) for n, c in (entry or {}).items()}
                    for uid, entry in (data.get("entries") or {}).items()
                }
            except (CpuSetError, AttributeError) as exc:
                raise CpuManagerError(f"could not restore state from checkpoint {self.state_path}: {exc}") from None
            if self.policy == POLICY_STATIC:
                if not self.default and not self.assignments:
                    self._fresh()
                    return
                self._validate_state()
            log.info(
                "cpu manager: restored %s state from %s: shared pool %s, %d pods with exclusive CPUs",
                self.policy,
                self.state_path,
                format_cpuset(self.default) or "-",
                len(self.assignments),
            )

    def _fresh(self) -> None:
        self.default = self.topology.all_cpus() if self.policy == POLICY_STATIC else frozenset()
        self.assignments = {}
        self._save()
        if self.policy == POLICY_STATIC:
            log.info(
                "cpu manager: static policy, shared pool %s, reserved %s",
                format_cpuset(self.default),
                format_cpuset(self.reserved),
            )

    def _validate_state(self) -> None:
        hint = f"; drain this node and delete the CPU manager checkpoint file {self.state_path} before restarting"
        if not self.reserved <= self.default:
            raise CpuManagerError(
                f'not all reserved cpus: "{format_cpuset(self.reserved)}" are present in defaultCpuSet: '
                f'"{format_cpuset(self.default)}"{hint}'
            )
        assigned: set[int] = set()
        for uid, entry in self.assignments.items():
            for name, cpus in entry.items():
                if cpus & self.default:
                    raise CpuManagerError(
                        f'pod: {uid}, container: {name} cpuset: "{format_cpuset(cpus)}" overlaps with default '
                        f'cpuset "{format_cpuset(self.default)}"{hint}'
                    )
                assigned |= cpus
        have = self.topology.all_cpus()
        if have != self.default | assigned:
            raise CpuManagerError(
                f'current set of available CPUs "{format_cpuset(have)}" doesn\'t match with CPUs in state '
                f'"{format_cpuset(self.default | assigned)}"{hint}'
            )

    def _save(self) -> None:
        data: dict[str, Any] = {"policyName": self.policy, "defaultCpuSet": format_cpuset(self.default)}
        if self.assignments:
            data["entries"] = {
                uid: {n: format_cpuset(c) for n, c in sorted(entry.items())}
                for uid, entry in sorted(self.assignments.items())
            }
        try:
            write_checkpoint(self.state_path, data)
        except OSError as exc:
            log.error("cpu manager: cannot write the checkpoint %s: %s", self.state_path, exc)

    # --- what runs where ------------------------------------------------------------

    @property
    def static(self) -> bool:
        return self.policy == POLICY_STATIC

    def assignable(self) -> frozenset[int]:
        """The shared pool less the reserved CPUs: what exclusive allocations come from."""
        return self.default - self.reserved

    def cpuset_for(self, pod_uid: str, container_name: str) -> str:
        """The container's cpuset for the runtime ("" under the none policy: all CPUs)."""
        if not self.static:
            return ""
        with self._lock:
            cpus = self.assignments.get(pod_uid, {}).get(container_name)
            return _text(cpus if cpus is not None else self.default)

    # --- for the pod resources API ---------------------------------------------------

    def allocatable_cpus(self) -> frozenset[int]:
        """CPUs exclusive allocations may come from (all but the reserved); empty under none."""
        return self.topology.all_cpus() - self.reserved if self.static else frozenset()

    def exclusive_cpus(self, pod_uid: str, container_name: str) -> frozenset[int]:
        """The container's exclusive CPUs (empty when it runs on the shared pool)."""
        with self._lock:
            return self.assignments.get(pod_uid, {}).get(container_name, frozenset())

    def container_created(self, container_id: str, cpuset: str) -> None:
        """The runtime created the container with this cpuset."""
        if self.static and container_id:
            with self._lock:
                self._applied[container_id] = cpuset

    # --- topology hints -------------------------------------------------------------

    def _hints_for(self, request: int, available: frozenset[int]) -> list[TopologyHint]:
        topo = self.topology
        nodes = topo.numa_nodes()
        masks = numa_masks(nodes)
        min_size = len(nodes)
        hints: list[TopologyHint] = []
        for mask in masks:
            if len(topo.cpus_in_numa(mask)) >= request:
                min_size = min(min_size, len(mask))
        # align-by-socket: a set spanning no more sockets than the narrowest sets need is preferred too.
        numa_per_socket = topo.num_numa_nodes // topo.num_sockets if topo.num_sockets else 0
        min_sockets = -(-min_size // numa_per_socket) if numa_per_socket else 0
        for mask in masks:
            if len(available & topo.cpus_in_numa(mask)) < request:
                continue
            preferred = len(mask) == min_size
            if self.options.align_by_socket and not preferred and min_sockets:
                preferred = len(topo.sockets_of_numa(mask)) == min_sockets
            hints.append(TopologyHint(mask, preferred))
        return hints

    def _existing_hints(self, cpus: frozenset[int], request: int) -> list[TopologyHint] | None:
        if len(cpus) != request:
            log.error(
                "cpu manager: an existing assignment (%s) does not match the request (%d CPUs)",
                format_cpuset(cpus),
                request,
            )
            return []
        return [TopologyHint(self.topology.numa_of_cpus(cpus), True)]

    def get_topology_hints(self, pod: Mapping, container: Mapping) -> Hints:
        if not self.static:
            return {}
        request = container_cpus(pod, container)
        if request == 0:
            return {}
        uid = _uid(pod)
        with self._lock:
            existing = self.assignments.get(uid, {}).get(str(container.get("name") or ""))
            if existing is not None:
                return {CPU: self._existing_hints(existing, request)}
            available = self.assignable() | self._reuse.get(uid, frozenset())
            return {CPU: self._hints_for(request, available)}

    def get_pod_topology_hints(self, pod: Mapping) -> Hints:
        if not self.static:
            return {}
        request = pod_cpus(pod)
        if request == 0:
            return {}
        uid = _uid(pod)
        with self._lock:
            entry = self.assignments.get(uid, {})
            if entry:
                assigned: set[int] = set()
                for cpus in entry.values():
                    assigned |= cpus
                return {CPU: self._existing_hints(frozenset(assigned), request)}
            return {CPU: self._hints_for(request, self.assignable())}

    # --- allocation -----------------------------------------------------------------

    def allocate(self, pod: Mapping, container: Mapping, affinity: TopologyHint | None) -> None:
        if not self.static:
            return
        request = container_cpus(pod, container)
        if request == 0:
            return
        uid = _uid(pod)
        name = str(container.get("name") or "")
        with self._lock:
            if name in self.assignments.get(uid, {}):
                self._update_reuse(pod, name, self.assignments[uid][name])
                return
            per_core = self.topology.cpus_per_core()
            if self.options.full_pcpus_only and per_core and request % per_core:
                raise AllocationFailure(
                    SMT_ALIGNMENT_ERROR,
                    f"SMT Alignment Error: requested {request} cpus not multiple cpus per core = {per_core}",
                )
            available = self.assignable() | self._reuse.get(uid, frozenset())
            try:
                cpus = self._take(available, request, affinity)
            except AllocationError as exc:
                raise RuntimeError(str(exc)) from None
            self.assignments.setdefault(uid, {})[name] = cpus
            self.default = self.default - cpus
            self._update_reuse(pod, name, cpus)
            self._save()
            log.info(
                "cpu manager: pod %s container %s gets exclusive CPUs %s (shared pool now %s)",
                uid,
                name,
                format_cpuset(cpus),
                format_cpuset(self.default),
            )

    def _take(self, available: frozenset[int], n: int, affinity: TopologyHint | None) -> frozenset[int]:
        topo = self.topology
        group = topo.cpus_per_core() if self.options.full_pcpus_only else 1
        take = (
            (lambda avail, k: take_distributed(topo, avail, k, group))
            if self.options.distribute_across_numa
            else (lambda avail, k: take_by_topology(topo, avail, k))
        )
        result: frozenset[int] = frozenset()
        if affinity is not None and affinity.numa_affinity is not None:
            nodes = affinity.numa_affinity
            if self.options.align_by_socket:
                aligned_pool = topo.cpus_in_sockets(topo.sockets_of_numa(nodes))
            else:
                aligned_pool = topo.cpus_in_numa(nodes)
            aligned = available & aligned_pool
            k = min(len(aligned), n)
            if k:
                result = take(aligned, k)
        if len(result) < n:
            result = result | take(available - result, n - len(result))
        return result

    def _update_reuse(self, pod: Mapping, name: str, cpus: frozenset[int]) -> None:
        uid = _uid(pod)
        inits = {str(c.get("name") or "") for c in (pod.get("spec") or {}).get("initContainers") or []}
        self._init_names[uid] = inits
        reuse = self._reuse.get(uid, frozenset())
        if name in inits:
            self._reuse[uid] = reuse | cpus
        else:
            self._reuse[uid] = reuse - cpus

    # --- release and reconciliation -------------------------------------------------

    def remove_pod(self, pod_uid: str) -> None:
        """Give the pod's exclusive CPUs back to the shared pool."""
        if not self.static:
            return
        with self._lock:
            entry = self.assignments.pop(pod_uid, None)
            self._reuse.pop(pod_uid, None)
            self._init_names.pop(pod_uid, None)
            if not entry:
                return
            freed: set[int] = set()
            for cpus in entry.values():
                freed |= cpus
            self.default = self.default | freed
            self._save()
            log.info(
                "cpu manager: released CPUs %s of pod %s (shared pool now %s)",
                format_cpuset(freed),
                pod_uid,
                format_cpuset(self.default),
            )

    def reconcile(
        self,
        pods: Iterable[tuple[str, Iterable[tuple[str, str]]]],
        *,
        sources_ready: bool,
    ) -> list[tuple[str, str]]:
        """The (container id, cpuset) pairs the runtime must be told again.

        ``pods`` are the active pods (uid, running containers as (name, id)). With
        every source seen, assignments of pods no longer active are released first.
        Nothing is returned for containers whose cpuset is already in force, so an
        idle node costs a dict comparison per container.
        """
        if not self.static:
            return []
        pods = [(uid, list(containers)) for uid, containers in pods]
        with self._lock:
            if sources_ready:
                active = {uid for uid, _ in pods}
                for uid in [u for u in self.assignments if u not in active]:
                    log.info("cpu manager: pod %s is gone; releasing its CPUs", uid)
                    self.remove_pod(uid)
            out: list[tuple[str, str]] = []
            seen: set[str] = set()
            for uid, containers in pods:
                for name, cid in containers:
                    seen.add(cid)
                    want = self.cpuset_for(uid, name)
                    if self._applied.get(cid) != want:
                        out.append((cid, want))
            for cid in [c for c in self._applied if c not in seen]:
                del self._applied[cid]
            return out


_TEXT_CACHE: dict[frozenset[int], str] = {}


def _text(cpus: frozenset[int]) -> str:
    """format_cpuset, remembered: reconciliation asks for the same few sets over and over."""
    text = _TEXT_CACHE.get(cpus)
    if text is None:
        if len(_TEXT_CACHE) > 4096:
            _TEXT_CACHE.clear()
        text = _TEXT_CACHE[cpus] = format_cpuset(cpus)
    return text


def pod_cpus(pod: Mapping) -> int:
    """Exclusive CPUs of the whole pod: max(sum of app containers, largest init container)."""
    spec = pod.get("spec") or {}
    app = sum(container_cpus(pod, c) for c in spec.get("containers") or [])
    init = max((container_cpus(pod, c) for c in spec.get("initContainers") or []), default=0)
    return max(app, init)


def _uid(pod: Mapping) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")
