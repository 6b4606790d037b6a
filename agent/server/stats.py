"""``/stats/summary``: CPU, memory, file systems and processes of the node and its pods.

The shape is upstream's Summary API (``stats/v1alpha1``): ``node`` (name, system
containers, cpu, memory, network, fs, runtime.imageFs, rlimit) and ``pods`` (podRef,
startTime, containers, cpu, memory, volume, ephemeral-storage, process_stats).

Where the figures come from, as upstream's CRI stats provider takes them:

* the node: ``/proc/stat``; memory from the root memory cgroup (``/proc/meminfo``
  on cgroup v2, whose root has no usage file); ``statvfs`` of
  ``--root-dir`` for ``fs``, the runtime's ``ImageFsInfo`` for ``imageFs``;
* a pod: its cgroup, which :mod:`agent.cm` made (``cpuacct.usage`` / ``cpu.stat``,
  ``memory.usage_in_bytes`` / ``memory.current`` and ``memory.stat``,
  ``pids.current``); without per-QoS cgroups, the sum of its containers;
* a container: the runtime's ``ListContainerStats`` (cpu, working set, writable
  layer) and the size of its log files.

``usageNanoCores`` is a rate: the change of the cumulative CPU time since the
previous sample of the same cgroup or container. The first request samples twice,
a moment apart, so that even it gets rates.

Memory follows upstream's definitions: ``workingSetBytes`` is usage minus
inactive file pages (what eviction watches), ``availableBytes`` is the limit minus
the working set (the node's capacity for the node; absent for a pod or container
without a memory limit).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import time
from typing import Any, Callable, Iterable, Mapping

import psutil

from apiserver_min.api import names, timeutil

from .. import logging as agent_logging
from .. import pods as podutil

__all__ = ["StatsProvider", "read_cgroup_usage", "CgroupUsage", "fs_stats"]

log = agent_logging.get_logger("stats")

WARMUP_INTERVAL = 0.1  # seconds between the two samples of the first request
RATE_WINDOW_MAX = 600.0  # older samples do not make a meaningful rate
_UNLIMITED = 1 << 62  # cgroup v1 "no limit" is 2^63 rounded to pages


def _now_rfc3339(ns: int | None = None) -> str:
    ns = time.time_ns() if ns is None else ns
    return timeutil.format_rfc3339(_dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _kv(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


class CgroupUsage:
    """One reading of a cgroup: cumulative CPU (ns), memory figures (bytes), processes."""

    __slots__ = (
        "timestamp",
        "cpu_ns",
        "usage",
        "working_set",
        "rss",
        "page_faults",
        "major_page_faults",
        "limit",
        "pids",
    )

    def __init__(self) -> None:
        self.timestamp = time.time_ns()
        self.cpu_ns: int | None = None
        self.usage: int | None = None
        self.working_set: int | None = None
        self.rss: int | None = None
        self.page_faults: int | None = None
        self.major_page_faults: int | None = None
        self.limit: int | None = None
        self.pids: int | None = None


def read_cgroup_usage(dirs: Mapping[str, str]) -> CgroupUsage | None:
    """Usage of the cgroup whose directories (controller or ``unified`` -> dir) are
    given, read from v1 controllers when the memory controller is mounted as v1,
    else from the unified hierarchy; None when the cgroup does not exist."""
    u = CgroupUsage()
    if "memory" in dirs:
        mem, cpu = dirs["memory"], dirs.get("cpuacct") or dirs.get("cpu")
        if not os.path.isdir(mem):
            return None
        if cpu:
            u.cpu_ns = _read_int(os.path.join(cpu, "cpuacct.usage"))
        u.usage = _read_int(os.path.join(mem, "memory.usage_in_bytes"))
        stat = _kv(_read(os.path.join(mem, "memory.stat")))
        inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
        u.rss = stat.get("total_rss", stat.get("rss"))
        u.page_faults = stat.get("total_pgfault", stat.get("pgfault"))
        u.major_page_faults = stat.get("total_pgmajfault", stat.get("pgmajfault"))
        limit = _read_int(os.path.join(mem, "memory.limit_in_bytes"))
        u.limit = limit if limit is not None and limit < _UNLIMITED else None
        pids_dir = dirs.get("pids")
        if pids_dir:
            u.pids = _read_int(os.path.join(pids_dir, "pids.current"))
    elif "unified" in dirs:
        d = dirs["unified"]
        if not os.path.isdir(d):
            return None
        cpu_stat = _kv(_read(os.path.join(d, "cpu.stat")))
        if "usage_usec" in cpu_stat:
            u.cpu_ns = cpu_stat["usage_usec"] * 1000
        u.usage = _read_int(os.path.join(d, "memory.current"))
        stat = _kv(_read(os.path.join(d, "memory.stat")))
        inactive = stat.get("inactive_file", 0)
        u.rss = stat.get("anon")
        u.page_faults = stat.get("pgfault")
        u.major_page_faults = stat.get("pgmajfault")
        u.limit = _read_int(os.path.join(d, "memory.max"))
        u.pids = _read_int(os.path.join(d, "pids.current"))
    else:
        return None
    if u.usage is not None:
        u.working_set = max(0, u.usage - inactive)
    return u


def fs_stats(
    path: str, used_bytes: int | None = None, inodes_used: int | None = None, timestamp_ns: int | None = None
) -> dict | None:
    """FsStats of the file system holding ``path`` (capacity and free from statvfs;
    ``used*`` from the caller when it knows what belongs to whom)."""
    # A mount point the runtime names but has not created yet lives on its parent's file system.
    while path and not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    out: dict[str, Any] = {
        "time": _now_rfc3339(timestamp_ns),
        "availableBytes": st.f_bavail * st.f_frsize,
        "capacityBytes": st.f_blocks * st.f_frsize,
        "usedBytes": used_bytes if used_bytes is not None else (st.f_blocks - st.f_bfree) * st.f_frsize,
    }
    if st.f_files:
        out["inodesFree"] = st.f_ffree
        out["inodes"] = st.f_files
        out["inodesUsed"] = inodes_used if inodes_used is not None else st.f_files - st.f_ffree
    return out


def _du(path: str) -> tuple[int, int]:
    """Bytes (allocated blocks) and inodes under ``path``, not following links or mounts."""
    total = inodes = 0
    try:
        dev = os.lstat(path).st_dev
    except OSError:
        return 0, 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    inodes += 1
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False) and st.st_dev == dev:
                        stack.append(e.path)
        except OSError:
            continue
    return total, inodes + 1


def _log_files(log_path: str) -> list[str]:
    """A container's log file and its rotated siblings (``0.log.<stamp>[.gz]``)."""
    d, base = os.path.split(log_path)
    try:
        return [os.path.join(d, n) for n in os.listdir(d) if n == base or n.startswith(base + ".")]
    except OSError:
        return []


class StatsProvider:
    """Builds the summary; keeps the previous CPU samples for rates."""

    def __init__(
        self,
        *,
        node_name: str,
        root_dir: str,
        cri: Any = None,
        cgroups: Any = None,
        pods: Callable[[], Iterable[tuple[dict, Any]]] = lambda: (),
        pods_dir: str | None = None,
        started_at: float | None = None,
        volume_stats_period: float = 60.0,
    ) -> None:
        self.node_name = node_name
        # --volume-stats-agg-period: a pod's volume usage is measured at most once per
        # period (walking a volume is costly); 0 or less leaves volume figures out.
        self.volume_stats_period = volume_stats_period
        self._volume_cache: dict[str, tuple[float, list[dict]]] = {}  # pod uid -> (measured at, volumes)
        self.root_dir = root_dir
        self.cri = cri
        self.cgroups = cgroups
        self._pods = pods
        self.pods_dir = pods_dir or os.path.join(root_dir, "pods")
        self._last: dict[str, tuple[int, int]] = {}  # key -> (timestamp ns, cumulative cpu ns)
        self._boot = psutil.boot_time()
        self._process = psutil.Process()
        self._started = started_at if started_at is not None else self._process.create_time()
        self._lock = asyncio.Lock()

    # --- rates ----------------------------------------------------------------------

    def _cpu(self, key: str, timestamp_ns: int, usage_ns: int | None, runtime_rate: int | None = None) -> dict:
        out: dict[str, Any] = {"time": _now_rfc3339(timestamp_ns)}
        if usage_ns is None:
            return out
        out["usageCoreNanoSeconds"] = usage_ns
        rate = runtime_rate or None
        prev = self._last.get(key)
        if rate is None and prev is not None:
            dt = timestamp_ns - prev[0]
            if 0 < dt <= RATE_WINDOW_MAX * 1e9 and usage_ns >= prev[1]:
                rate = int((usage_ns - prev[1]) * 1e9 / dt)
        self._last[key] = (timestamp_ns, usage_ns)
        out["usageNanoCores"] = rate if rate is not None else 0
        return out

    @staticmethod
    def _memory(u: CgroupUsage | None, capacity: int | None, timestamp_ns: int) -> dict:
        out: dict[str, Any] = {"time": _now_rfc3339(timestamp_ns)}
        if u is None:
            return out
        limit = u.limit or capacity
        if u.working_set is not None:
            if limit:
                out["availableBytes"] = max(0, limit - u.working_set)
            out["usageBytes"] = u.usage
            out["workingSetBytes"] = u.working_set
        if u.rss is not None:
            out["rssBytes"] = u.rss
        if u.page_faults is not None:
            out["pageFaults"] = u.page_faults
        if u.major_page_faults is not None:
            out["majorPageFaults"] = u.major_page_faults
        return out

    # --- node -----------------------------------------------------------------------

    def _node_cpu_ns(self) -> int:
        t = psutil.cpu_times()
        busy = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
        return int(busy * 1e9)

    def _root_cgroup_dirs(self) -> dict[str, str]:
        driver = getattr(self.cgroups, "driver", None) if self.cgroups is not None else None
        if driver is None:
            return {}
        try:
            return dict(driver.dirs(()))
        except Exception:  # noqa: BLE001 - not started: the node figures come from /proc/meminfo
            return {}

    def _node_memory(self, vm: Any = None, *, details: bool = True) -> CgroupUsage:
        """The root cgroup's usage and working set (usage minus inactive file pages), as
        upstream reads the node; /proc/meminfo where the root has no usage file (cgroup v2).
        ``vm`` is a ``psutil.virtual_memory()`` the caller read already; without
        ``details`` (the eviction manager's round) rss and page faults are left out."""
        vm = vm if vm is not None else psutil.virtual_memory()
        root = self._root_cgroup_dirs()
        cg = read_cgroup_usage({"memory": root["memory"]}) if "memory" in root else None
        u = CgroupUsage()
        meminfo: dict[str, int] | None = None

        def read_meminfo() -> dict[str, int]:
            return _kv((_read("/proc/meminfo") or "").replace(":", "").replace(" kB", ""))

        if cg is not None and cg.usage is not None and cg.working_set is not None:
            u.usage, u.working_set = cg.usage, cg.working_set
        else:
            meminfo = read_meminfo()
            u.usage = vm.total - vm.free
            inactive_file = meminfo.get("Inactive(file)", 0) * 1024
            unified = root.get("unified")
            if unified:
                # The v2 root has memory.stat (not memory.current): its inactive_file is the node's.
                inactive_file = _kv(_read(os.path.join(unified, "memory.stat"))).get("inactive_file", inactive_file)
            u.working_set = max(0, u.usage - inactive_file)
        u.limit = vm.total
        if details:
            meminfo = meminfo if meminfo is not None else read_meminfo()
            u.rss = meminfo.get("AnonPages", 0) * 1024 if "AnonPages" in meminfo else None
            vmstat = _kv(_read("/proc/vmstat"))
            u.page_faults = vmstat.get("pgfault")
            u.major_page_faults = vmstat.get("pgmajfault")
        return u

    @staticmethod
    def _network(timestamp_ns: int) -> dict | None:
        try:
            counters = psutil.net_io_counters(pernic=True)
        except OSError:
            return None
        interfaces = []
        for name, c in sorted(counters.items()):
            if name == "lo":
                continue
            interfaces.append(
                {
                    "name": name,
                    "rxBytes": c.bytes_recv,
                    "rxErrors": c.errin,
                    "txBytes": c.bytes_sent,
                    "txErrors": c.errout,
                }
            )
        if not interfaces:
            return None
        out: dict[str, Any] = {"time": _now_rfc3339(timestamp_ns), **interfaces[0], "interfaces": interfaces}
        return out

    async def _image_fs_info(self) -> Any:
        """The runtime's first image file system (ImageFsInfo), None without one."""
        if self.cri is None:
            return None
        try:
            info = await self.cri.image_fs_info()
        except Exception as exc:  # noqa: BLE001 - stats must not fail for one missing part
            log.v(4).info("ImageFsInfo failed", err=exc)
            return None
        return info.image_filesystems[0] if info.image_filesystems else None

    def _image_fs_stats(self, fs: Any) -> dict | None:
        if fs is None:
            return None
        return fs_stats(
            fs.fs_id.mountpoint or self.root_dir,
            fs.used_bytes.value,
            fs.inodes_used.value if fs.HasField("inodes_used") else None,
            fs.timestamp or None,
        )

    async def _image_fs(self) -> dict | None:
        fs = await self._image_fs_info()
        return None if fs is None else await asyncio.to_thread(self._image_fs_stats, fs)

    def _system_containers(self, capacity: int) -> list[dict]:
        out = []
        now = time.time_ns()
        try:
            times = self._process.cpu_times()
            mem = (
                self._process.memory_full_info()
                if hasattr(self._process, "memory_full_info")
                else self._process.memory_info()
            )
            u = CgroupUsage()
            u.usage = mem.rss
            u.working_set = getattr(mem, "uss", mem.rss)
            u.rss = mem.rss
            out.append(
                {
                    "name": names.AGENT_NAME,
                    "startTime": _now_rfc3339(int(self._started * 1e9)),
                    "cpu": self._cpu("sys:agent", now, int((times.user + times.system) * 1e9)),
                    "memory": self._memory(u, capacity, now),
                }
            )
        except (psutil.Error, OSError):
            pass
        pods = self._pods_container(capacity)
        if pods is not None:
            out.append(pods)
        return out

    def _pods_container(self, capacity: int, with_cpu: bool = True) -> dict | None:
        """The ``pods`` system container: the cgroup all pods live under (orchpods)."""
        if self.cgroups is None or not getattr(self.cgroups, "per_qos", False):
            return None
        try:
            dirs = self.cgroups.qos_cgroup_dirs("Guaranteed")
        except Exception:  # noqa: BLE001 - a cgroup that cannot be read leaves its figures out
            dirs = {}
        u = read_cgroup_usage(dirs) if dirs else None
        if u is None:
            return None
        out: dict[str, Any] = {"name": "pods", "startTime": _now_rfc3339(int(self._started * 1e9))}
        if with_cpu:
            out["cpu"] = self._cpu("sys:pods", u.timestamp, u.cpu_ns)
        out["memory"] = self._memory(u, capacity, u.timestamp)
        return out

    # --- pods -------------------------------------------------------------------------

    async def _container_stats(self) -> dict[str, Any]:
        if self.cri is None:
            return {}
        try:
            return {s.attributes.id: s for s in await self.cri.list_container_stats()}
        except Exception as exc:  # noqa: BLE001 - the runtime's stats are optional; the summary goes on without them
            log.v(4).info("ListContainerStats failed", err=exc)
            return {}

    def _container(self, info: Any, stats: Any, capacity: int) -> dict:
        now = time.time_ns()
        out: dict[str, Any] = {"name": info.name}
        if info.started_at:
            out["startTime"] = _now_rfc3339(info.started_at)
        if stats is not None:
            cpu = stats.cpu
            usage = cpu.usage_core_nano_seconds.value if cpu.HasField("usage_core_nano_seconds") else None
            runtime_rate = cpu.usage_nano_cores.value if cpu.HasField("usage_nano_cores") else None
            out["cpu"] = self._cpu(f"ctr:{info.id}", cpu.timestamp or now, usage, runtime_rate)
            m = stats.memory
            u = CgroupUsage()
            u.timestamp = m.timestamp or now
            if m.HasField("working_set_bytes"):
                u.working_set = m.working_set_bytes.value
                u.usage = m.usage_bytes.value if m.HasField("usage_bytes") else u.working_set
            if m.HasField("rss_bytes"):
                u.rss = m.rss_bytes.value
            if m.HasField("page_faults"):
                u.page_faults = m.page_faults.value
            if m.HasField("major_page_faults"):
                u.major_page_faults = m.major_page_faults.value
            if m.available_bytes.value and u.working_set is not None:  # 0: the container has no limit
                u.limit = m.available_bytes.value + u.working_set
            out["memory"] = self._memory(u, None, u.timestamp)
            wl = stats.writable_layer
            if wl.fs_id.mountpoint or wl.HasField("used_bytes"):
                rootfs = fs_stats(
                    wl.fs_id.mountpoint or self.root_dir,
                    wl.used_bytes.value,
                    wl.inodes_used.value if wl.HasField("inodes_used") else None,
                    wl.timestamp or now,
                )
                if rootfs is not None:
                    out["rootfs"] = rootfs
        if info.log_path:
            files = _log_files(info.log_path)
            used = 0
            for f in files:
                try:
                    used += os.stat(f).st_blocks * 512
                except OSError:
                    pass
            logs = fs_stats(os.path.dirname(info.log_path) or self.root_dir, used, len(files))
            if logs is not None:
                out["logs"] = logs
        return out

    def _volumes(self, uid: str) -> list[dict]:
        """The pod's volume figures, measured at most once per ``volume_stats_period``."""
        if self.volume_stats_period <= 0:
            return []
        now = time.monotonic()
        for gone in [k for k, (at, _) in self._volume_cache.items() if now - at >= self.volume_stats_period]:
            del self._volume_cache[gone]
        cached = self._volume_cache.get(uid)
        if cached is not None:
            return cached[1]
        volumes = self._measure_volumes(uid)
        self._volume_cache[uid] = (now, volumes)
        return volumes

    def _measure_volumes(self, uid: str) -> list[dict]:
        """Volumes the agent made on the node for the pod (``pods/<uid>/volumes/<plugin>/<name>``)."""
        base = os.path.join(self.pods_dir, uid, "volumes")
        out = []
        try:
            plugins = sorted(os.listdir(base))
        except OSError:
            return out
        for plugin in plugins:
            try:
                vols = sorted(os.listdir(os.path.join(base, plugin)))
            except OSError:
                continue
            for name in vols:
                path = os.path.join(base, plugin, name)
                used, inodes = _du(path)
                st = fs_stats(path, used, inodes)
                if st is not None:
                    st["name"] = name
                    out.append(st)
        return out

    def _pod(self, pod: dict, rp: Any, ctr_stats: Mapping[str, Any], capacity: int, only_cpu_and_memory: bool) -> dict:
        uid = podutil.uid(pod)
        out: dict[str, Any] = {"podRef": {"name": podutil.name(pod), "namespace": podutil.namespace(pod), "uid": uid}}
        sandbox = rp.sandboxes[0] if rp is not None and rp.sandboxes else None
        if sandbox is not None and sandbox.created_at:
            out["startTime"] = _now_rfc3339(sandbox.created_at)
        containers = []
        seen: set[str] = set()
        for info in rp.containers if rp is not None else []:
            if info.name in seen or not info.running:
                continue
            seen.add(info.name)
            c = self._container(info, ctr_stats.get(info.id), capacity)
            if only_cpu_and_memory:
                c = {k: v for k, v in c.items() if k in ("name", "startTime", "cpu", "memory")}
            containers.append(c)
        out["containers"] = containers
        dirs = {}
        if self.cgroups is not None and getattr(self.cgroups, "per_qos", False):
            try:
                dirs = self.cgroups.pod_cgroup_dirs(uid)
            except Exception:  # noqa: BLE001 - a cgroup that cannot be read leaves its figures out
                dirs = {}
        u = read_cgroup_usage(dirs) if dirs else None
        if u is not None:
            out["cpu"] = self._cpu(f"pod:{uid}", u.timestamp, u.cpu_ns)
            out["memory"] = self._memory(u, None, u.timestamp)  # availableBytes only under a limit
        elif containers:
            now = time.time_ns()
            cpu = {
                "time": _now_rfc3339(now),
                "usageCoreNanoSeconds": sum(c.get("cpu", {}).get("usageCoreNanoSeconds", 0) for c in containers),
                "usageNanoCores": sum(c.get("cpu", {}).get("usageNanoCores", 0) for c in containers),
            }
            mem: dict[str, Any] = {"time": _now_rfc3339(now)}
            for key in ("usageBytes", "workingSetBytes", "rssBytes", "pageFaults", "majorPageFaults"):
                mem[key] = sum(c.get("memory", {}).get(key, 0) for c in containers)
            out["cpu"], out["memory"] = cpu, mem
        if only_cpu_and_memory:
            return out
        volumes = self._volumes(uid)
        if volumes:
            out["volume"] = volumes
        ephemeral = sum(
            c.get("rootfs", {}).get("usedBytes", 0) + c.get("logs", {}).get("usedBytes", 0) for c in containers
        ) + sum(v.get("usedBytes", 0) for v in volumes)
        eph = fs_stats(self.root_dir, ephemeral)
        if eph is not None:
            eph.pop("inodesUsed", None)
            out["ephemeral-storage"] = eph
        if u is not None and u.pids is not None:
            out["process_stats"] = {"process_count": u.pids}
        return out

    # --- the summary ------------------------------------------------------------------

    async def summary(self, only_cpu_and_memory: bool = False) -> dict:
        """The Summary; ``only_cpu_and_memory`` as upstream's query parameter."""
        async with self._lock:
            if not self._last:
                await self._build(True)
                await asyncio.sleep(WARMUP_INTERVAL)
            return await self._build(only_cpu_and_memory)

    async def node_summary(self) -> dict:
        """The node figures the eviction manager watches, and nothing per pod: memory (the
        root cgroup), the ``pods`` system container's memory, ``fs`` (``--root-dir``), the
        runtime's ``imageFs`` and ``rlimit``. Cheap enough for every housekeeping round."""
        now = time.time_ns()
        vm = psutil.virtual_memory()
        capacity = vm.total
        node: dict[str, Any] = {
            "nodeName": self.node_name,
            "memory": self._memory(self._node_memory(vm, details=False), capacity, now),
        }
        pods = self._pods_container(capacity, with_cpu=False)
        node["systemContainers"] = [pods] if pods is not None else []
        image = await self._image_fs_info()
        # Both file systems in one trip to a thread (statvfs may block on a slow mount).
        fs, image_fs = await asyncio.to_thread(lambda: (fs_stats(self.root_dir), self._image_fs_stats(image)))
        if fs is not None:
            node["fs"] = fs
        node["runtime"] = {"imageFs": image_fs} if image_fs is not None else {}
        node["rlimit"] = self._rlimit(now)
        return {"node": node, "pods": []}

    @staticmethod
    def _rlimit(now: int) -> dict:
        """Upstream's process limits: the lower of ``pid_max`` and ``threads-max``, and the
        number of tasks (threads included) from ``/proc/loadavg``, which is what they bound."""
        limits = [v for v in (_read_int("/proc/sys/kernel/pid_max"), _read_int("/proc/sys/kernel/threads-max")) if v]
        out: dict[str, Any] = {"time": _now_rfc3339(now), "maxpid": min(limits) if limits else 0}
        fields = (_read("/proc/loadavg") or "").split()
        try:
            out["curproc"] = int(fields[3].split("/")[1])
        except (IndexError, ValueError):
            out["curproc"] = len(psutil.pids())
        return out

    async def _build(self, only_cpu_and_memory: bool) -> dict:
        now = time.time_ns()
        vm = psutil.virtual_memory()
        capacity = vm.total
        node: dict[str, Any] = {
            "nodeName": self.node_name,
            "systemContainers": self._system_containers(capacity),
            "startTime": _now_rfc3339(int(self._boot * 1e9)),
            "cpu": self._cpu("node", now, self._node_cpu_ns()),
            "memory": self._memory(self._node_memory(vm), capacity, now),
        }
        ctr_stats, image_fs = (
            await asyncio.gather(self._container_stats(), self._image_fs())
            if not only_cpu_and_memory
            else (await self._container_stats(), None)
        )
        if not only_cpu_and_memory:
            network = self._network(now)
            if network is not None:
                node["network"] = network
            fs = await asyncio.to_thread(fs_stats, self.root_dir)
            if fs is not None:
                node["fs"] = fs
            node["runtime"] = {"imageFs": image_fs} if image_fs is not None else {}
            node["rlimit"] = self._rlimit(now)
        pods = list(self._pods())
        built = await asyncio.to_thread(
            lambda: [self._pod(pod, rp, ctr_stats, capacity, only_cpu_and_memory) for pod, rp in pods]
        )
        live = (
            {"node", "sys:agent", "sys:pods"}
            | {f"pod:{podutil.uid(p)}" for p, _ in pods}
            | {f"ctr:{cid}" for cid in ctr_stats}
        )
        for key in [k for k in self._last if k not in live]:
            del self._last[key]
        return {"node": node, "pods": sorted(built, key=lambda p: (p["podRef"]["namespace"], p["podRef"]["name"]))}
