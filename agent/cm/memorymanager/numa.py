"""Memory and huge pages per NUMA node, read from sysfs.

``/sys/devices/system/node/node<N>/meminfo`` gives each node's ``MemTotal``;
``node<N>/hugepages/hugepages-<kB>kB/nr_hugepages`` its pre-allocated huge pages.
A machine without node directories is one node (0) holding the machine's memory.
"""

from __future__ import annotations

import os
from typing import Mapping

from ..allocatable import hugepage_resource_name
from ..cpumanager.topology import numbered_entries
from ..qos import MEMORY

__all__ = ["NumaMemoryError", "read_numa_memory"]


class NumaMemoryError(RuntimeError):
    pass


def read_numa_memory(sys_node: str, machine: Mapping[str, int]) -> dict[int, dict[str, int]]:
    """NUMA node -> resource (``memory``, ``hugepages-<size>``) -> bytes.

    ``machine`` is the node's capacity (memory and huge pages), used when the kernel
    shows no NUMA node.
    """
    out: dict[int, dict[str, int]] = {}
    for node, entry in numbered_entries(sys_node, r"node(\d+)"):
        path = os.path.join(sys_node, entry, "meminfo")
        total = None
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 4 and parts[2] == "MemTotal:":
                        total = int(parts[3]) * 1024
                        break
        except (OSError, ValueError) as exc:
            raise NumaMemoryError(f"cannot read {path}: {exc}") from None
        if total is None:
            raise NumaMemoryError(f"{path} has no MemTotal line")
        resources = {MEMORY: total}
        huge_dir = os.path.join(sys_node, entry, "hugepages")
        for size_kb, size_dir in numbered_entries(huge_dir, r"hugepages-(\d+)kB"):
            try:
                with open(os.path.join(huge_dir, size_dir, "nr_hugepages")) as f:
                    count = int(f.read().strip() or 0)
            except (OSError, ValueError) as exc:
                raise NumaMemoryError(f"cannot read {huge_dir}/{size_dir}/nr_hugepages: {exc}") from None
            size = size_kb * 1024
            resources[hugepage_resource_name(size)] = size * count
        out[node] = resources
    if not out:
        out[0] = {k: v for k, v in machine.items() if k == MEMORY or k.startswith("hugepages-")}
    return out
