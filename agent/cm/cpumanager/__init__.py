"""The CPU manager (``--cpu-manager-policy``): exclusive CPUs for Guaranteed containers."""

from .allocation import AllocationError, take_by_topology, take_distributed
from .manager import STATE_FILE, CpuManager, CpuManagerError, container_cpus, pod_cpus
from .topology import CpuInfo, CpuTopology, TopologyError, discover

__all__ = [
    "AllocationError",
    "CpuInfo",
    "CpuManager",
    "CpuManagerError",
    "CpuTopology",
    "STATE_FILE",
    "TopologyError",
    "container_cpus",
    "discover",
    "pod_cpus",
    "take_by_topology",
    "take_distributed",
]
