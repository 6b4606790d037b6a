"""Node capacity, reservations and allocatable, with upstream's arithmetic.

Capacity is what the machine has; allocatable is what pods may request:
capacity minus ``--orch-reserved``, ``--system-reserved`` and the hard
eviction thresholds (``memory.available`` for memory, ``nodefs.available``
for ephemeral-storage), never below zero, and with the memory held in huge
pages also taken out of allocatable memory. The node status and pod admission
use that figure.

Enforcement on the ``orchpods`` cgroup uses a different one (upstream's
"absolute" allocatable): capacity minus the two reservations only. The
eviction threshold is left out on purpose - pods may use that memory until the
eviction manager reclaims it; the cgroup limit is the hard stop behind it.

All values are integers: cpu in millicores, the rest in bytes or counts.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Mapping

import psutil

from apiserver_min.api.quantity import Quantity, parse_quantity

from .cgroupfs import CgroupError, hugepage_sizes
from .qos import CPU, EPHEMERAL_STORAGE, HUGEPAGES_PREFIX, MEMORY, PODS, is_hugepages, resource_value

__all__ = [
    "PID",
    "machine_capacity",
    "hugepage_capacity",
    "hugepage_resource_name",
    "hugepage_size_of",
    "parse_reserved",
    "cpuset_size",
    "hard_eviction_reservation",
    "node_reservation",
    "node_allocatable",
    "allocatable_absolute",
    "pid_max",
    "pods_capacity",
]

# The reserved resource name for process ids (``--system-reserved=pid=1000``).
PID = "pid"


def hugepage_resource_name(size_bytes: int) -> str:
    """``hugepages-2Mi`` for 2 MiB pages (the size in its canonical binary quantity)."""
    return HUGEPAGES_PREFIX + Quantity(size_bytes, "BinarySI").canonical()


def hugepage_size_of(resource: str) -> int:
    """Page size in bytes of a ``hugepages-<size>`` resource name."""
    try:
        return parse_quantity(resource[len(HUGEPAGES_PREFIX) :]).value()
    except Exception:
        raise ValueError(f"invalid huge page resource name {resource!r}") from None


def hugepage_capacity(hugepages_dir: str = "/sys/kernel/mm/hugepages") -> dict[str, int]:
    """``hugepages-<size>`` -> bytes of pre-allocated pages, for every size the kernel offers."""
    return {hugepage_resource_name(size): size * count for size, count in sorted(hugepage_sizes(hugepages_dir).items())}


def pods_capacity(max_pods: int, pods_per_core: int, cores: int) -> int:
    """``--max-pods``, or ``--pods-per-core`` x cores when that is set and smaller."""
    if pods_per_core > 0:
        return min(pods_per_core * cores, max_pods)
    return max_pods


def _filesystem_size(path: str) -> int:
    # The root dir may not exist yet on a fresh node: measure what will hold it.
    p = os.path.abspath(path)
    while not os.path.exists(p) and p != "/":
        p = os.path.dirname(p)
    st = os.statvfs(p)
    return st.f_blocks * st.f_frsize


def machine_capacity(cfg: Any, *, hugepages_dir: str = "/sys/kernel/mm/hugepages") -> dict[str, int]:
    """What this machine has: logical cpus, total memory, the root dir's filesystem, pods, huge pages."""
    cores = os.cpu_count() or 1
    cap = {
        CPU: cores * 1000,
        MEMORY: int(psutil.virtual_memory().total),
        PODS: pods_capacity(int(cfg.max_pods), int(cfg.pods_per_core), cores),
    }
    if getattr(cfg, "local_storage_capacity_isolation", True):
        cap[EPHEMERAL_STORAGE] = _filesystem_size(cfg.root_dir)
    cap.update(hugepage_capacity(hugepages_dir))
    return cap


def pid_max(path: str = "/proc/sys/kernel/pid_max") -> int:
    """The process-id capacity, reserved from with ``pid=<n>``."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0


def cpuset_size(text: str) -> int:
    """Number of cpus in a cpuset list such as ``0-3,8``."""
    total = 0
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"invalid cpuset {text!r}: {part!r} is not a cpu or a range") from None
        if b < a:
            raise ValueError(f"invalid cpuset {text!r}: range {part!r} ends before it starts")
        total += b - a + 1
    return total


def parse_reserved(mapping: Mapping[str, Any] | None, flag: str) -> dict[str, int]:
    """A ``--*-reserved`` map (name -> Quantity or quantity string) in this package's units."""
    out: dict[str, int] = {}
    for name, value in (mapping or {}).items():
        try:
            v = resource_value(name, value, where=f"{flag} {name}")
        except ValueError as exc:
            raise CgroupError(str(exc)) from None
        if v < 0:
            raise CgroupError(f"{flag} {name}: must not be negative, got {value}")
        out[name] = v
    return out


def _float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _threshold_amount(text: str, capacity: int, signal: str) -> int | None:
    """A threshold as bytes: a quantity, or a percentage of capacity computed as upstream does.

    Upstream keeps the percentage as a float32 fraction and truncates the
    product; "0%" and "100%" disable a threshold.
    """
    t = str(text).strip()
    if t.endswith("%"):
        if t in ("0%", "100%"):
            return None
        try:
            pct = _float32(_float32(float(t[:-1])) / 100)
        except ValueError:
            raise CgroupError(f"--eviction-hard {signal}: invalid percentage {t!r}") from None
        return int(float(capacity) * pct)
    try:
        return parse_quantity(t).value()
    except Exception as exc:
        raise CgroupError(f"--eviction-hard {signal}: {exc}") from None


def hard_eviction_reservation(eviction_hard: Mapping[str, str] | None, capacity: Mapping[str, int]) -> dict[str, int]:
    """What the hard thresholds hold back: memory.available -> memory, nodefs.available -> storage."""
    out: dict[str, int] = {}
    for signal, resource in (("memory.available", MEMORY), ("nodefs.available", EPHEMERAL_STORAGE)):
        value = (eviction_hard or {}).get(signal)
        if value is None:
            continue
        amount = _threshold_amount(value, capacity.get(resource, 0), signal)
        if amount is not None:
            out[resource] = amount
    return out


def reserved_levels(cfg: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(system-reserved, orch-reserved); ``--reserved-cpus`` replaces their cpu."""
    system = parse_reserved(cfg.system_reserved, "--system-reserved")
    orch = parse_reserved(cfg.orch_reserved, "--orch-reserved")
    cpus = getattr(cfg, "reserved_cpus", "") or ""
    if cpus:
        try:
            n = cpuset_size(cpus)
        except ValueError as exc:
            raise CgroupError(f"--reserved-cpus: {exc}") from None
        if n:
            # Upstream: the explicit cpu list is the whole cpu reservation.
            system[CPU] = n * 1000
            orch.pop(CPU, None)
    return system, orch


def node_reservation(cfg: Any, capacity: Mapping[str, int]) -> dict[str, int]:
    """Reserved + hard eviction thresholds, per capacity resource (zero entries dropped)."""
    system, orch = reserved_levels(cfg)
    eviction = (
        {}
        if getattr(cfg, "experimental_allocatable_ignore_eviction", False)
        else hard_eviction_reservation(cfg.eviction_hard, capacity)
    )
    out: dict[str, int] = {}
    for k in capacity:
        v = system.get(k, 0) + orch.get(k, 0) + eviction.get(k, 0)
        if v:
            out[k] = v
    return out


def node_allocatable(capacity: Mapping[str, int], reservation: Mapping[str, int]) -> dict[str, int]:
    """The node status's allocatable: capacity - reservation, huge pages out of memory too."""
    out: dict[str, int] = {}
    for k, v in capacity.items():
        if is_hugepages(k):
            continue
        out[k] = max(0, v - reservation.get(k, 0))
    for k, v in capacity.items():
        if not is_hugepages(k):
            continue
        if MEMORY in out:
            out[MEMORY] = max(0, out[MEMORY] - v)
        out[k] = max(0, v - reservation.get(k, 0))
    return out


def allocatable_absolute(
    capacity: Mapping[str, int], system: Mapping[str, int], orch: Mapping[str, int]
) -> dict[str, int]:
    """capacity - system-reserved - orch-reserved (no eviction thresholds): what orchpods may use."""
    return {k: max(0, v - system.get(k, 0) - orch.get(k, 0)) for k, v in capacity.items()}


__all__ += ["reserved_levels"]
