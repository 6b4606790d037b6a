"""Observations of the eviction signals, and the ranking of pods to evict.

Observations come from the agent's own summary (:mod:`agent.server.stats`), as
upstream takes them from its Summary API:

* ``memory.available``: the node's ``availableBytes`` (capacity minus the root
  cgroup's working set, usage minus inactive file pages); capacity is available
  plus working set;
* ``allocatableMemory.available``: the same for the ``pods`` system container
  (the cgroup all pods live under);
* ``nodefs.*``: ``node.fs`` (the file system of ``--root-dir``); ``imagefs.*``:
  ``node.runtime.imageFs`` (the runtime's image file system);
* ``pid.available``: ``rlimit.maxpid - rlimit.curproc``.

Ranking is upstream's, a stable multi-key sort:

* memory: pods whose working set exceeds their memory request first, then lower
  priority first, then the larger usage above the request first;
* disk (bytes or inodes): pods whose usage exceeds their ephemeral-storage
  request first, then lower priority, then the larger usage above the request.
  Usage counts the containers' writable layers, logs and the pod's local volumes
  (emptyDir, hostPath) when nodefs and imagefs share a device; with a dedicated
  image file system, nodefs counts logs and volumes and imagefs writable layers;
* PIDs: lower priority first, then more processes first.

A pod without stats is ranked first (it cannot be shown to be innocent).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

from apiserver_min.api.quantity import Format, Quantity

from ..cm.qos import pod_requests
from ..pods import spec as pod_spec
from .thresholds import (
    RESOURCE_INODES,
    RESOURCE_MEMORY,
    RESOURCE_PIDS,
    RESOURCE_STORAGE,
    SIGNAL_ALLOCATABLE_MEMORY,
    SIGNAL_IMAGEFS,
    SIGNAL_IMAGEFS_INODES,
    SIGNAL_MEMORY,
    SIGNAL_NODEFS,
    SIGNAL_NODEFS_INODES,
    SIGNAL_PID,
)

__all__ = [
    "Observation",
    "observe",
    "pod_stats_by_uid",
    "rank_pods",
    "pod_disk_usage",
    "FS_ROOT",
    "FS_LOGS",
    "FS_VOLUMES",
]

FS_ROOT, FS_LOGS, FS_VOLUMES = "root", "logs", "volumes"
PODS_SYSTEM_CONTAINER = "pods"  # upstream's statsapi.SystemContainerPods

PodStats = Mapping[str, Any]
StatsOf = Callable[[dict], "PodStats | None"]


@dataclasses.dataclass(frozen=True)
class Observation:
    available: int
    capacity: int
    time: str = ""


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def observe(summary: Mapping[str, Any]) -> dict[str, Observation]:
    """The signals the summary's node part shows (a missing figure leaves its signal out)."""
    node = summary.get("node") or {}
    out: dict[str, Observation] = {}
    mem = node.get("memory") or {}
    avail, ws = _int(mem.get("availableBytes")), _int(mem.get("workingSetBytes"))
    if avail is not None and ws is not None:
        out[SIGNAL_MEMORY] = Observation(avail, avail + ws, mem.get("time", ""))
    for sc in node.get("systemContainers") or []:
        if sc.get("name") == PODS_SYSTEM_CONTAINER:
            m = sc.get("memory") or {}
            avail, ws = _int(m.get("availableBytes")), _int(m.get("workingSetBytes"))
            if avail is not None and ws is not None:
                out[SIGNAL_ALLOCATABLE_MEMORY] = Observation(avail, avail + ws, m.get("time", ""))
    for fs, bytes_signal, inodes_signal in (
        (node.get("fs"), SIGNAL_NODEFS, SIGNAL_NODEFS_INODES),
        ((node.get("runtime") or {}).get("imageFs"), SIGNAL_IMAGEFS, SIGNAL_IMAGEFS_INODES),
    ):
        if not fs:
            continue
        avail, cap = _int(fs.get("availableBytes")), _int(fs.get("capacityBytes"))
        if avail is not None and cap is not None:
            out[bytes_signal] = Observation(avail, cap, fs.get("time", ""))
        free, inodes = _int(fs.get("inodesFree")), _int(fs.get("inodes"))
        if free is not None and inodes is not None:
            out[inodes_signal] = Observation(free, inodes, fs.get("time", ""))
    rl = node.get("rlimit") or {}
    maxpid, cur = _int(rl.get("maxpid")), _int(rl.get("curproc"))
    if maxpid is not None and cur is not None:
        out[SIGNAL_PID] = Observation(maxpid - cur, maxpid, rl.get("time", ""))
    return out


def pod_stats_by_uid(summary: Mapping[str, Any]) -> dict[str, PodStats]:
    return {(p.get("podRef") or {}).get("uid", ""): p for p in summary.get("pods") or []}


# --- usage ----------------------------------------------------------------------------


def _used(fs: Any, key: str) -> int:
    if not isinstance(fs, Mapping):
        return 0
    return _int(fs.get(key)) or 0


def _local_volume_names(pod: dict) -> set[str]:
    """The volumes upstream counts as the pod's local storage: hostPath, gitRepo,
    configMap, and emptyDir on the node's disk (not ``medium: Memory``)."""
    out = set()
    for v in pod_spec(pod).get("volumes") or []:
        empty = v.get("emptyDir")
        on_disk = isinstance(empty, Mapping) and not empty.get("medium")
        if on_disk or any(k in v for k in ("hostPath", "gitRepo", "configMap")):
            out.add(v.get("name", ""))
    return out


def pod_disk_usage(stats: PodStats, pod: dict, measure: tuple[str, ...]) -> tuple[int, int]:
    """(bytes, inodes) the pod uses on the measured file systems."""
    disk = inodes = 0
    for c in stats.get("containers") or []:
        if FS_ROOT in measure:
            disk += _used(c.get("rootfs"), "usedBytes")
            inodes += _used(c.get("rootfs"), "inodesUsed")
        if FS_LOGS in measure:
            disk += _used(c.get("logs"), "usedBytes")
            inodes += _used(c.get("logs"), "inodesUsed")
    if FS_VOLUMES in measure:
        local = _local_volume_names(pod)
        for v in stats.get("volume") or []:
            if v.get("name") in local:
                disk += _used(v, "usedBytes")
                inodes += _used(v, "inodesUsed")
    return disk, inodes


def memory_usage(stats: PodStats) -> int:
    return _used(stats.get("memory"), "workingSetBytes")


def process_usage(stats: PodStats) -> int:
    return _used(stats.get("process_stats"), "process_count")


def pod_priority(pod: dict) -> int:
    p = pod_spec(pod).get("priority")
    return int(p) if isinstance(p, int) and not isinstance(p, bool) else 0


def _request(pod: dict, resource: str) -> int:
    return int(pod_requests(pod).get(resource, 0))


# --- ranking --------------------------------------------------------------------------

Cmp = Callable[[dict, dict], int]


def _cmp_bool(a: bool, b: bool) -> int:
    """True before False."""
    if a == b:
        return 0
    return -1 if not b else 1


def _with_stats(stats_of: StatsOf, inner: Callable[[dict, PodStats, dict, PodStats], int]) -> Cmp:
    def cmp(p1: dict, p2: dict) -> int:
        s1, s2 = stats_of(p1), stats_of(p2)
        if s1 is None or s2 is None:
            return _cmp_bool(s1 is None, s2 is None)
        return inner(p1, s1, p2, s2)

    return cmp


def _priority(p1: dict, p2: dict) -> int:
    a, b = pod_priority(p1), pod_priority(p2)
    return 0 if a == b else (1 if a > b else -1)


def _exceed_memory(p1: dict, s1: PodStats, p2: dict, s2: PodStats) -> int:
    return _cmp_bool(memory_usage(s1) > _request(p1, RESOURCE_MEMORY), memory_usage(s2) > _request(p2, RESOURCE_MEMORY))


def _memory(p1: dict, s1: PodStats, p2: dict, s2: PodStats) -> int:
    a = memory_usage(s1) - _request(p1, RESOURCE_MEMORY)
    b = memory_usage(s2) - _request(p2, RESOURCE_MEMORY)
    return (b > a) - (b < a)


def _process(p1: dict, s1: PodStats, p2: dict, s2: PodStats) -> int:
    a, b = process_usage(s1), process_usage(s2)
    return (b > a) - (b < a)


def _disk_cmps(stats_of: StatsOf, measure: tuple[str, ...], resource: str) -> tuple[Cmp, Cmp]:
    index = 0 if resource == RESOURCE_STORAGE else 1

    def exceed(p1: dict, s1: PodStats, p2: dict, s2: PodStats) -> int:
        u1 = pod_disk_usage(s1, p1, measure)[index]
        u2 = pod_disk_usage(s2, p2, measure)[index]
        # The request of "inodes" is always 0 (no such resource in a pod spec).
        return _cmp_bool(u1 > _request(p1, resource), u2 > _request(p2, resource))

    def usage(p1: dict, s1: PodStats, p2: dict, s2: PodStats) -> int:
        a = pod_disk_usage(s1, p1, measure)[index] - _request(p1, RESOURCE_STORAGE)
        b = pod_disk_usage(s2, p2, measure)[index] - _request(p2, RESOURCE_STORAGE)
        return (b > a) - (b < a)

    return _with_stats(stats_of, exceed), _with_stats(stats_of, usage)


def disk_measure(signal: str, dedicated_image_fs: bool) -> tuple[str, ...]:
    if not dedicated_image_fs:
        return (FS_ROOT, FS_LOGS, FS_VOLUMES)
    if signal in (SIGNAL_NODEFS, SIGNAL_NODEFS_INODES):
        return (FS_LOGS, FS_VOLUMES)
    return (FS_ROOT,)


def _ordered(pods: list[dict], cmps: list[Cmp]) -> list[dict]:
    def key(p1: dict, p2: dict) -> int:
        for c in cmps:
            r = c(p1, p2)
            if r:
                return r
        return 0

    return sorted(pods, key=functools.cmp_to_key(key))


def rank_pods(signal: str, pods: list[dict], stats_of: StatsOf, dedicated_image_fs: bool) -> list[dict]:
    """``pods`` in eviction order for a threshold of ``signal`` (see the module docstring)."""
    if signal in (SIGNAL_MEMORY, SIGNAL_ALLOCATABLE_MEMORY):
        cmps = [_with_stats(stats_of, _exceed_memory), _priority, _with_stats(stats_of, _memory)]
    elif signal == SIGNAL_PID:
        cmps = [_priority, _with_stats(stats_of, _process)]
    else:
        resource = RESOURCE_INODES if signal in (SIGNAL_NODEFS_INODES, SIGNAL_IMAGEFS_INODES) else RESOURCE_STORAGE
        exceed, usage = _disk_cmps(stats_of, disk_measure(signal, dedicated_image_fs), resource)
        cmps = [exceed, _priority, usage]
    return _ordered(pods, cmps)


def binary(amount: int) -> str:
    return Quantity(int(amount), Format.BINARY_SI).canonical()


__all__ += ["binary", "disk_measure", "memory_usage", "pod_priority", "RESOURCE_PIDS"]
