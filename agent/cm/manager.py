"""The container manager: the node's cgroup tree, node allocatable and pod admission.

Layout (upstream's, with the project's names), under ``--cgroup-root``::

    orchpods/                  Guaranteed pods directly here; limited to node allocatable
    orchpods/burstable/        cpu.shares = the burstable pods' cpu requests
    orchpods/besteffort/       cpu.shares = 2
    .../pod<uid>/              the pod: shares from requests, quota and memory from limits

With ``--cgroups-per-qos=false`` there is no such tree: pods go straight under
the cgroup root and the manager creates nothing.

The manager is synchronous (plain file writes, milliseconds); asyncio owners
call it directly or through ``asyncio.to_thread`` when removal may wait for
processes to die. It is safe to call from several threads.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Iterable, Mapping, Protocol

from apiserver_min.api import names

from .admission import AdmitResult, admit
from .allocatable import (
    PID,
    allocatable_absolute,
    hugepage_size_of,
    machine_capacity,
    node_allocatable,
    node_reservation,
    pid_max,
    reserved_levels,
)
from .cgroupfs import (
    HUGEPAGE_UNBOUNDED,
    MIN_SHARES,
    QUOTA_PERIOD_US,
    CgroupError,
    CgroupfsDriver,
    CgroupName,
    ResourceConfig,
    detect_layout,
    fs_for_layout,
    hugepage_sizes,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from .cpumanager import CpuManager, CpuManagerError, CpuTopology
from .cpumanager import TopologyError as CpuTopologyError
from .cpumanager import discover as discover_cpu_topology
from .cpuset import format_cpuset, parse_cpuset
from .memorymanager import MemoryManager, MemoryManagerError, NumaMemoryError, read_numa_memory
from .qos import (
    BEST_EFFORT,
    BURSTABLE,
    CPU,
    GUARANTEED,
    MEMORY,
    is_hugepages,
    pod_limits,
    pod_qos_class,
    pod_requests,
)
from .systemd import SYSTEMD_RUN_DIR, SystemdBus, SystemdDriver
from .topology import HintProvider
from .topologymanager import TopologyManager, TopologyManagerError

__all__ = ["ContainerManager", "resource_config_for_pod", "POD_CGROUP_PREFIX"]

log = logging.getLogger(__name__)

POD_CGROUP_PREFIX = "pod"
BURSTABLE_CGROUP = "burstable"
BEST_EFFORT_CGROUP = "besteffort"
_CUSTOM_PERIOD_GATE = "CustomCPUCFSQuotaPeriod"
_QOS_RESERVED_GATE = "QOSReserved"


def _uid(pod: Mapping) -> str:
    return (pod.get("metadata") or {}).get("uid") or ""


def _period_us(cfg: Any) -> int:
    period = getattr(cfg, "cpu_cfs_quota_period", None)
    if period is None:
        return QUOTA_PERIOD_US
    return int(round(period.total_seconds() * 1_000_000))


def _feature(cfg: Any, gate: str) -> bool:
    try:
        return bool(cfg.feature(gate))
    except Exception:
        return False


class DeviceProvider(HintProvider, Protocol):
    """The device manager, as admission sees it: a hint provider whose pods' devices can be freed."""

    def free_pod(self, pod_uid: str) -> None: ...


def _source(cfg: Any, attr: str) -> str:
    """Where a setting came from (flag, file or default); "default" for plain test configs."""
    try:
        return str(cfg.source(attr))
    except Exception:
        return "default"


def _hugepage_limits(resources: Mapping[str, int]) -> dict[int, int]:
    return {hugepage_size_of(k): v for k, v in resources.items() if is_hugepages(k)}


def resource_config_for_pod(
    pod: Mapping,
    *,
    cfs_quota: bool = True,
    period_us: int = QUOTA_PERIOD_US,
    custom_period: bool = False,
    pod_pids_limit: int = -1,
) -> ResourceConfig:
    """The pod cgroup's limits, as upstream's ResourceConfigForPod.

    Shares follow the requests for every class but BestEffort (2). The CFS
    quota and the memory limit are set for Guaranteed pods, and for Burstable
    pods only when every container (init included) limits that resource. With
    ``--cpu-cfs-quota=false`` the quota is -1 (none). The quota is computed
    over the default 100 ms period unless the CustomCPUCFSQuotaPeriod gate is
    on, as upstream does.
    """
    reqs = pod_requests(pod)
    lim = pod_limits(pod)
    qos = pod_qos_class(pod)
    shares = milli_cpu_to_shares(reqs.get(CPU, 0))
    quota = milli_cpu_to_quota(lim.limits.get(CPU, 0), period_us if custom_period else QUOTA_PERIOD_US)
    if not cfs_quota:
        quota = -1
    memory = lim.limits.get(MEMORY, 0)
    hugepages = _hugepage_limits(reqs)
    pids = pod_pids_limit if pod_pids_limit > 0 else None
    if qos == GUARANTEED:
        return ResourceConfig(
            cpu_shares=shares, cpu_quota=quota, cpu_period=period_us, memory=memory, pids=pids, hugepages=hugepages
        )
    if qos == BURSTABLE:
        return ResourceConfig(
            cpu_shares=shares,
            cpu_quota=quota if lim.cpu_declared else None,
            cpu_period=period_us if lim.cpu_declared else None,
            memory=memory if lim.memory_declared else None,
            pids=pids,
            hugepages=hugepages,
        )
    return ResourceConfig(cpu_shares=MIN_SHARES, pids=pids, hugepages=hugepages)


class ContainerManager:
    """cgroups, QoS tiers, node allocatable and admission for one node."""

    def __init__(
        self,
        cfg: Any,
        *,
        sysfs: str = "/sys/fs/cgroup",
        capacity: Mapping[str, int] | None = None,
        hugepages_dir: str = "/sys/kernel/mm/hugepages",
        mountinfo: str = "/proc/self/mountinfo",
        systemd_run_dir: str = SYSTEMD_RUN_DIR,
        bus: SystemdBus | None = None,
        pid_max_path: str = "/proc/sys/kernel/pid_max",
        cpu_topology: CpuTopology | None = None,
        sys_cpu: str = "/sys/devices/system/cpu",
        sys_node: str = "/sys/devices/system/node",
    ) -> None:
        """``capacity`` replaces the machine's figures (tests); the other keywords point
        at stand-ins for the host's files, the systemd bus and the CPU topology."""
        self.cfg = cfg
        self.sysfs = sysfs
        self._capacity_override = dict(capacity) if capacity is not None else None
        self._capacity: dict[str, int] | None = None
        self._hugepages_dir = hugepages_dir
        self._mountinfo = mountinfo
        self._systemd_run_dir = systemd_run_dir
        self._bus = bus
        self._pid_max_path = pid_max_path
        self._lock = threading.RLock()
        self._pods: dict[str, Mapping] = {}
        self._driver: CgroupfsDriver | None = None
        self.enforcement_error: str = ""
        self._cpu_topology = cpu_topology
        self._sys_cpu = sys_cpu
        self._sys_node = sys_node
        self.cpu_manager: CpuManager | None = None
        self.memory_manager: MemoryManager | None = None
        self.topology_manager: TopologyManager | None = None
        # UIDs of the pods the agent knows to be terminating, finished or rejected (the pod
        # pipeline sets it): their CPUs and memory go back before a newcomer is placed.
        self.inactive_pod_uids: Callable[[], Iterable[str]] = lambda: ()
        self.device_manager: DeviceProvider | None = None

        driver_name = getattr(cfg, "cgroup_driver", "cgroupfs") or "cgroupfs"
        if driver_name not in ("cgroupfs", "systemd"):
            raise CgroupError(
                f'unknown cgroup driver "{driver_name}" (--cgroup-driver): expected "cgroupfs" or "systemd"'
            )
        self._naming: type[CgroupfsDriver] = SystemdDriver if driver_name == "systemd" else CgroupfsDriver
        self.per_qos = bool(getattr(cfg, "cgroups_per_qos", True))
        self.root: CgroupName = self._naming.parse(getattr(cfg, "cgroup_root", "") or "/")
        self.pods_cgroup: CgroupName = self.root + (names.PODS_CGROUP,) if self.per_qos else self.root
        self._qos_parents: dict[str, CgroupName] = {
            GUARANTEED: self.pods_cgroup,
            BURSTABLE: self.pods_cgroup + (BURSTABLE_CGROUP,),
            BEST_EFFORT: self.pods_cgroup + (BEST_EFFORT_CGROUP,),
        }

    # --- names --------------------------------------------------------------------

    def pod_cgroup_name(self, pod: Mapping) -> CgroupName:
        uid = _uid(pod)
        if not uid:
            raise CgroupError("pod has no metadata.uid: cannot name its cgroup")
        return self._qos_parents[pod_qos_class(pod)] + (POD_CGROUP_PREFIX + uid,)

    def cgroup_parent(self, pod: dict) -> str:
        """The CRI sandbox's cgroup_parent: ``/<root>/orchpods/burstable/pod<uid>`` or the slice unit."""
        if not self.per_qos:
            return self._naming.runtime_name_of(self.root) if self.root else ""
        return self._naming.runtime_name_of(self.pod_cgroup_name(pod))

    # --- capacity -----------------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        with self._lock:
            if self._capacity is None:
                self._capacity = (
                    dict(self._capacity_override)
                    if self._capacity_override is not None
                    else machine_capacity(self.cfg, hugepages_dir=self._hugepages_dir)
                )
            return dict(self._capacity)

    def allocatable(self) -> dict[str, int]:
        cap = self.capacity()
        return node_allocatable(cap, node_reservation(self.cfg, cap))

    def _internal_capacity(self) -> dict[str, int]:
        cap = self.capacity()
        if PID not in cap:
            pm = pid_max(self._pid_max_path)
            if pm:
                cap[PID] = pm
        return cap

    def admit(self, pod: dict, active_pods: Iterable[dict]) -> AdmitResult:
        """Upstream's order: the resource allocation handler first (the topology manager has the
        CPU, memory and device managers allocate), then the resources against allocatable; a
        refused pod keeps nothing."""
        me = _uid(pod)
        if self.topology_manager is not None:
            for uid in self.inactive_pod_uids():
                if uid != me:
                    self._release_resources(uid, devices=False)
            try:
                result = self.topology_manager.admit(pod)
            except ValueError as exc:
                result = AdmitResult(False, "UnexpectedAdmissionError", str(exc))
            if not result.admit:
                self._release_resources(me)
                return result
        try:
            result = admit(pod, list(active_pods), self.allocatable())
        except ValueError as exc:  # a quantity that cannot be read
            result = AdmitResult(False, "UnexpectedAdmissionError", str(exc))
        if not result.admit:
            self._release_resources(me)
        return result

    # --- resource managers (CPU, memory, topology) ---------------------------------

    def _start_resource_managers(self) -> None:
        try:
            cpu = CpuManager(self.cfg, topology=self._cpu_topology, sys_cpu=self._sys_cpu, sys_node=self._sys_node)
            cpu.start()
            numa_memory: dict[int, dict[str, int]] = {}
            if getattr(self.cfg, "memory_manager_policy", "None") == "Static":
                numa_memory = read_numa_memory(self._sys_node, self.capacity())
            memory = MemoryManager(
                self.cfg, numa_memory=numa_memory, reservation=node_reservation(self.cfg, self.capacity())
            )
            memory.start()
            numa_nodes, numa_reported = self._numa_nodes(cpu)
            topo = TopologyManager(self.cfg, numa_nodes, numa_reported=numa_reported)
        except (CpuManagerError, MemoryManagerError, NumaMemoryError, TopologyManagerError) as exc:
            raise CgroupError(str(exc)) from None
        if not (cpu.static or memory.static) and _source(self.cfg, "cpu_manager_reconcile_period") != "default":
            raise CgroupError(
                "--cpu-manager-reconcile-period (cpuManagerReconcilePeriod) is not supported on this node without "
                "a static CPU manager (--cpu-manager-policy=static) or memory manager "
                "(--memory-manager-policy=Static): there is nothing to reconcile"
            )
        topo.add_hint_provider(cpu)
        topo.add_hint_provider(memory)
        self.cpu_manager = cpu
        self.memory_manager = memory
        self.topology_manager = topo

    def _numa_nodes(self, cpu: CpuManager) -> tuple[list[int], bool]:
        """The machine's NUMA node ids for the topology manager, and whether the kernel reported
        any (a machine without is node 0)."""
        if cpu.static:
            return cpu.topology.numa_nodes(), cpu.topology.numa_reported
        if getattr(self.cfg, "topology_manager_policy", "none") in (None, "", "none"):
            return [0], True
        try:
            topology = self._cpu_topology or discover_cpu_topology(self._sys_cpu, self._sys_node)
        except CpuTopologyError as exc:
            raise TopologyManagerError(f"the topology manager needs the machine's NUMA layout: {exc}") from None
        return topology.numa_nodes(), topology.numa_reported

    def add_hint_provider(self, provider: HintProvider) -> None:
        """Another topology hint provider."""
        if self.topology_manager is None:
            raise CgroupError("the container manager is not started (call start() first)")
        self.topology_manager.add_hint_provider(provider)

    def add_device_manager(self, devices: DeviceProvider) -> None:
        """The device manager allocates through the topology manager from now on (aligned
        with the CPUs and memory), and gives a refused pod's devices back."""
        self.add_hint_provider(devices)
        self.device_manager = devices

    @property
    def allocates_devices(self) -> bool:
        """Admission here allocates the devices (the pod pipeline then leaves them alone)."""
        return self.device_manager is not None

    # --- for the pod resources API ---------------------------------------------------

    def exclusive_cpus(self, pod_uid: str, container_name: str) -> list[int]:
        return sorted(self.cpu_manager.exclusive_cpus(pod_uid, container_name)) if self.cpu_manager else []

    def allocatable_cpus(self) -> list[int]:
        return sorted(self.cpu_manager.allocatable_cpus()) if self.cpu_manager else []

    def memory_blocks(self, pod_uid: str, container_name: str) -> list[tuple[str, int, tuple[int, ...]]]:
        """(resource, bytes, NUMA nodes) the memory manager gave the container."""
        return self.memory_manager.container_blocks(pod_uid, container_name) if self.memory_manager else []

    def allocatable_memory(self) -> list[tuple[str, int, tuple[int, ...]]]:
        return self.memory_manager.allocatable_memory() if self.memory_manager else []

    def _release_resources(self, pod_uid: str, *, devices: bool = True) -> None:
        if devices and self.device_manager is not None:
            self.device_manager.free_pod(pod_uid)
        if self.cpu_manager is not None:
            self.cpu_manager.remove_pod(pod_uid)
        if self.memory_manager is not None:
            self.memory_manager.remove_pod(pod_uid)
        if self.topology_manager is not None:
            self.topology_manager.remove_pod(pod_uid)

    def container_cpuset(self, pod: Mapping, container: Mapping) -> tuple[str, str]:
        """(cpuset.cpus, cpuset.mems) for a new container; "" leaves the runtime's default."""
        cpus = mems = ""
        name = str(container.get("name") or "")
        if self.cpu_manager is not None:
            cpus = self.cpu_manager.cpuset_for(_uid(pod), name)
        if self.memory_manager is not None:
            mems = self.memory_manager.mems_for(_uid(pod), name)
        return cpus, mems

    def _pod_mems(self, pod: Mapping) -> str:
        """cpuset.mems of a pod the memory manager placed: the NUMA nodes of all its containers."""
        if self.memory_manager is None or not self.memory_manager.static:
            return ""
        spec = pod.get("spec") or {}
        nodes: set[int] = set()
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            mems = self.memory_manager.mems_for(_uid(pod), str(c.get("name") or ""))
            if not mems:
                return ""  # a container the memory manager does not place keeps every node
            nodes |= parse_cpuset(mems)
        return format_cpuset(nodes)

    def container_created(self, container_id: str, cpus: str) -> None:
        if self.cpu_manager is not None:
            self.cpu_manager.container_created(container_id, cpus)

    @property
    def reconciles_cpusets(self) -> bool:
        """A static CPU or memory manager holds state that reconciliation keeps current."""
        return (self.cpu_manager is not None and self.cpu_manager.static) or (
            self.memory_manager is not None and self.memory_manager.static
        )

    def reconcile_cpusets(
        self, pods: Iterable[tuple[str, Iterable[tuple[str, str]]]], *, sources_ready: bool
    ) -> list[tuple[str, str]]:
        """(container id, cpuset) pairs to send to the runtime (see CpuManager.reconcile); with
        every source seen, the memory of pods no longer active is released too."""
        pods = [(uid, list(containers)) for uid, containers in pods]
        if sources_ready and self.memory_manager is not None:
            self.memory_manager.active_pods({uid for uid, _ in pods})
        if self.cpu_manager is None:
            return []
        return self.cpu_manager.reconcile(pods, sources_ready=sources_ready)

    # --- start --------------------------------------------------------------------

    @property
    def driver(self) -> CgroupfsDriver:
        if self._driver is None:
            raise CgroupError("the container manager is not started (call start() first)")
        return self._driver

    def start(self) -> None:
        """Detect the hierarchies, check the driver, build the QoS tree and enforce allocatable."""
        with self._lock:
            layout = detect_layout(self.sysfs, mountinfo=self._mountinfo)
            fs = fs_for_layout(layout, hugepages_dir=self._hugepages_dir)
            if self._naming is SystemdDriver:
                driver: CgroupfsDriver = SystemdDriver(
                    fs, self._bus or SystemdBus(cgroup_version=layout.version), run_dir=self._systemd_run_dir
                )
            else:
                driver = CgroupfsDriver(fs)
            driver.check()
            self._check_controllers(layout)
            self._driver = driver
            log.info(
                "cgroups: v%d%s, driver %s, pods under %s",
                layout.version,
                " (hybrid)" if layout.hybrid else "",
                driver.name,
                driver.fs_name(self.pods_cgroup),
            )

            system, orch = reserved_levels(self.cfg)
            if self.per_qos:
                missing = driver.missing(self.root)
                if missing:
                    where = ", ".join(f"{k} ({d})" for k, d in sorted(missing.items()))
                    raise CgroupError(
                        f'the cgroup root "{getattr(self.cfg, "cgroup_root", "") or "/"}" '
                        f"(--cgroup-root) does not exist in: {where}; create it first"
                    )
                if not driver.exists(self.pods_cgroup):
                    driver.create(self.pods_cgroup, self._resource_config(self._internal_capacity()))
                self._enforce_pods_cgroup(system, orch)
                self._write_qos_tiers()
            levels = tuple(getattr(self.cfg, "enforce_node_allocatable", ()) or ())
            if "system-reserved" in levels:
                self._enforce_existing("system-reserved", self.cfg.system_reserved_cgroup, system)
            if names.AGENT_RESERVED_LEVEL in levels:
                self._enforce_existing(names.AGENT_RESERVED_LEVEL, self.cfg.orch_reserved_cgroup, orch)
            self._start_resource_managers()

    @staticmethod
    def _check_controllers(layout) -> None:
        """Upstream's system validation: the controllers limits are written with must be there."""
        if layout.version == 2:
            have = layout.hierarchies[0].controllers
            expected = ("cpu", "cpuset", "memory")
        else:
            have = frozenset(layout.controller_mounts())
            expected = ("cpu", "cpuacct", "cpuset", "memory")
        missing = [c for c in expected if c not in have]
        if missing:
            where = f"{layout.sysfs}/cgroup.controllers" if layout.version == 2 else f"mounts under {layout.sysfs}"
            raise CgroupError(
                f"system validation failed - Following Cgroup subsystem not mounted: "
                f"[{' '.join(missing)}] (checked {where})"
            )

    def _resource_config(self, rl: Mapping[str, int]) -> ResourceConfig:
        """Upstream's getCgroupConfig: cpu -> shares, memory, pid -> pids.max, huge pages."""
        huge = _hugepage_limits(rl)
        return ResourceConfig(
            cpu_shares=milli_cpu_to_shares(rl[CPU]) if CPU in rl else None,
            memory=rl.get(MEMORY),
            pids=rl.get(PID),
            hugepages=huge or None,
        )

    def _enforce_pods_cgroup(self, system: Mapping[str, int], orch: Mapping[str, int]) -> None:
        """orchpods gets allocatable (with 'pods' enforced) or capacity; failures are retried later.

        Lowering the memory limit below what pods use already fails until the
        eviction manager frees memory: upstream keeps retrying instead of
        refusing to start, and so does this (on every :meth:`update_qos`).
        """
        levels = tuple(getattr(self.cfg, "enforce_node_allocatable", ()) or ())
        if "pods" in levels:
            limits = allocatable_absolute(self._internal_capacity(), system, orch)
        else:
            limits = self.capacity()
        try:
            self.driver.update(self.pods_cgroup, self._resource_config(limits))
            self.enforcement_error = ""
        except CgroupError as exc:
            self.enforcement_error = (
                f"cannot enforce node allocatable on {self.driver.fs_name(self.pods_cgroup)}: {exc}"
            )
            log.warning("%s (will retry)", self.enforcement_error)

    def _enforce_existing(self, level: str, cgroup: str, limits: Mapping[str, int]) -> None:
        flag = f"--{level}-cgroup"
        if not cgroup:
            raise CgroupError(f"{flag} must be set to enforce {level} (--enforce-node-allocatable)")
        cg = self.driver.parse(cgroup)
        missing = self.driver.missing(cg)
        if missing:
            where = ", ".join(f"{k} ({d})" for k, d in sorted(missing.items()))
            raise CgroupError(f'cannot enforce {level}: the cgroup "{cgroup}" ({flag}) does not exist in: {where}')
        res = self._resource_config(limits)
        try:
            self.driver.fs.update(
                self.driver.rel(cg), ResourceConfig(cpu_shares=res.cpu_shares, memory=res.memory, pids=res.pids)
            )
        except CgroupError as exc:
            raise CgroupError(f'cannot enforce {level} on "{cgroup}" ({flag}): {exc}') from None

    # --- QoS tiers ----------------------------------------------------------------

    def _write_qos_tiers(self) -> None:
        pods = list(self._pods.values())
        burst_cpu = 0
        mem_requests = {GUARANTEED: 0, BURSTABLE: 0, BEST_EFFORT: 0}
        for p in pods:
            q = pod_qos_class(p)
            req = pod_requests(p)
            mem_requests[q] += req.get(MEMORY, 0)
            if q == BURSTABLE:
                burst_cpu += req.get(CPU, 0)
        sizes = hugepage_sizes(self._hugepages_dir)
        unbounded = {s: HUGEPAGE_UNBOUNDED for s in sizes} or None
        burstable_mem = best_effort_mem = None
        pct = (getattr(self.cfg, "qos_reserved", None) or {}).get(MEMORY)
        if pct and _feature(self.cfg, _QOS_RESERVED_GATE):
            system, orch = reserved_levels(self.cfg)
            alloc = allocatable_absolute(self.capacity(), system, orch).get(MEMORY, 0)
            if alloc:
                burstable_mem = alloc - mem_requests[GUARANTEED] * int(pct) // 100
                best_effort_mem = burstable_mem - mem_requests[BURSTABLE] * int(pct) // 100
        tiers = {
            BURSTABLE: ResourceConfig(
                cpu_shares=milli_cpu_to_shares(burst_cpu), memory=burstable_mem, hugepages=unbounded
            ),
            BEST_EFFORT: ResourceConfig(cpu_shares=MIN_SHARES, memory=best_effort_mem, hugepages=unbounded),
        }
        for qos, res in tiers.items():
            cg = self._qos_parents[qos]
            if self.driver.exists(cg):
                self.driver.update(cg, res)
            else:
                self.driver.create(cg, res)

    def update_qos(self, pods: Iterable[dict]) -> None:
        """Make ``pods`` the set the QoS tiers are sized for, and rewrite the tiers."""
        with self._lock:
            self._pods = {u: p for p in pods if (u := _uid(p))}
            if not self.per_qos:
                return
            self.driver  # noqa: B018 - raises when not started
            if self.enforcement_error:
                system, orch = reserved_levels(self.cfg)
                self._enforce_pods_cgroup(system, orch)
            self._write_qos_tiers()

    # --- pods ---------------------------------------------------------------------

    def ensure_pod(self, pod: dict) -> str:
        """Create the pod's cgroup everywhere and write its limits; returns its cgroup parent."""
        with self._lock:
            parent = self.cgroup_parent(pod)
            if not self.per_qos:
                return parent
            cg = self.pod_cgroup_name(pod)
            res = resource_config_for_pod(
                pod,
                cfs_quota=bool(getattr(self.cfg, "cpu_cfs_quota", True)),
                period_us=_period_us(self.cfg),
                custom_period=_feature(self.cfg, _CUSTOM_PERIOD_GATE),
                pod_pids_limit=int(getattr(self.cfg, "pod_max_pids", -1) or -1),
            )
            mems = self._pod_mems(pod)
            if mems:
                res = dataclasses.replace(res, cpuset_mems=mems)
            driver = self.driver
            # The tier is resized first, with this pod counted, as upstream does
            # before it creates a new pod cgroup.
            self._pods[_uid(pod)] = pod
            self._write_qos_tiers()
            driver.create(cg, res)
            return parent

    def _existing_pod_cgroups(self, pod_uid: str) -> list[CgroupName]:
        leaf = POD_CGROUP_PREFIX + pod_uid
        found = []
        for parent in self._qos_parents.values():
            cg = parent + (leaf,)
            if leaf in self.driver.children(parent):
                found.append(cg)
        return found

    def remove_pod(self, pod_uid: str) -> bool:
        """Kill what is left in the pod's cgroup and remove it in every hierarchy; its
        exclusive CPUs go back to the shared pool."""
        with self._lock:
            self._pods.pop(pod_uid, None)
            self._release_resources(pod_uid)
            if not self.per_qos or not pod_uid:
                return False
            removed = False
            for cg in self._existing_pod_cgroups(pod_uid):
                removed = self.driver.destroy(cg) or removed
            try:
                self._write_qos_tiers()
            except CgroupError as exc:
                log.warning("cgroups: cannot resize the QoS tiers after removing pod %s: %s", pod_uid, exc)
            return removed

    def pod_uids(self) -> set[str]:
        """UIDs of the pod cgroups present now, in any hierarchy (orphans after a restart)."""
        with self._lock:
            if not self.per_qos:
                return set()
            out: set[str] = set()
            for parent in self._qos_parents.values():
                for child in self.driver.children(parent):
                    if child.startswith(POD_CGROUP_PREFIX) and len(child) > len(POD_CGROUP_PREFIX):
                        out.add(child[len(POD_CGROUP_PREFIX) :])
            return out

    def pod_cgroup_dirs(self, pod_uid: str) -> dict[str, str]:
        """Controller (or ``unified``) -> directory of the pod's cgroup; {} when it has none."""
        with self._lock:
            if not self.per_qos:
                return {}
            pod = self._pods.get(pod_uid)
            if pod is not None:
                return self.driver.dirs(self.pod_cgroup_name(pod))
            found = self._existing_pod_cgroups(pod_uid)
            return self.driver.dirs(found[0]) if found else {}

    def qos_cgroup_dirs(self, qos_class: str) -> dict[str, str]:
        """Directories of a QoS tier (``Guaranteed`` is orchpods itself)."""
        return self.driver.dirs(self._qos_parents[qos_class])
