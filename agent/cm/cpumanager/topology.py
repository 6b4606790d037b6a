"""The machine's CPU topology, read from sysfs: sockets, cores, hardware threads, NUMA nodes.

A core is named by the lowest CPU id among its thread siblings (core ids in sysfs
repeat across sockets). A machine whose kernel shows no NUMA node directory is
one NUMA node (0) holding every CPU.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable

from ..cpuset import CpuSetError, parse_cpuset

__all__ = ["CpuInfo", "CpuTopology", "TopologyError", "discover", "numbered_entries", "SYS_CPU", "SYS_NODE"]

SYS_CPU = "/sys/devices/system/cpu"
SYS_NODE = "/sys/devices/system/node"


class TopologyError(RuntimeError):
    """The CPU topology cannot be read."""


@dataclass(frozen=True)
class CpuInfo:
    numa: int
    socket: int
    core: int


@dataclass(frozen=True)
class CpuTopology:
    cpus: dict[int, CpuInfo] = field(default_factory=dict)
    # The kernel showed NUMA node directories (False: every CPU was put on node 0).
    numa_reported: bool = True

    # --- counts -------------------------------------------------------------------

    @property
    def num_cpus(self) -> int:
        return len(self.cpus)

    @property
    def num_cores(self) -> int:
        return len({c.core for c in self.cpus.values()})

    @property
    def num_sockets(self) -> int:
        return len({c.socket for c in self.cpus.values()})

    @property
    def num_numa_nodes(self) -> int:
        return len({c.numa for c in self.cpus.values()})

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def cpus_per_numa(self) -> int:
        return self.num_cpus // self.num_numa_nodes if self.num_numa_nodes else 0

    # --- sets ---------------------------------------------------------------------

    def all_cpus(self) -> frozenset[int]:
        return frozenset(self.cpus)

    def numa_nodes(self) -> list[int]:
        return sorted(self._by_numa)

    def sockets(self) -> list[int]:
        return sorted(self._by_socket)

    @cached_property
    def _by_numa(self) -> dict[int, frozenset[int]]:
        return _group(self.cpus, lambda c: c.numa)

    @cached_property
    def _by_socket(self) -> dict[int, frozenset[int]]:
        return _group(self.cpus, lambda c: c.socket)

    @cached_property
    def _by_core(self) -> dict[int, frozenset[int]]:
        return _group(self.cpus, lambda c: c.core)

    def cpus_in_numa(self, nodes: Iterable[int]) -> frozenset[int]:
        return _union(self._by_numa, nodes)

    def cpus_in_sockets(self, sockets: Iterable[int]) -> frozenset[int]:
        return _union(self._by_socket, sockets)

    def cpus_in_cores(self, cores: Iterable[int]) -> frozenset[int]:
        return _union(self._by_core, cores)

    def sockets_of_numa(self, nodes: Iterable[int]) -> frozenset[int]:
        return frozenset(self.cpus[c].socket for c in self.cpus_in_numa(nodes))

    def numa_of_sockets(self, sockets: Iterable[int]) -> frozenset[int]:
        want = set(sockets)
        return frozenset(c.numa for c in self.cpus.values() if c.socket in want)

    def numa_of_cpus(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(self.cpus[i].numa for i in cpus if i in self.cpus)

    def numa_per_socket_aligned(self) -> bool:
        """Every NUMA node lies within one socket (needed by align-by-socket)."""
        seen: dict[int, int] = {}
        for c in self.cpus.values():
            if seen.setdefault(c.numa, c.socket) != c.socket:
                return False
        return True


def _group(cpus: dict[int, CpuInfo], key) -> dict[int, frozenset[int]]:
    out: dict[int, set[int]] = {}
    for i, c in cpus.items():
        out.setdefault(key(c), set()).add(i)
    return {k: frozenset(v) for k, v in out.items()}


def _union(groups: dict[int, frozenset[int]], ids: Iterable[int]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for i in set(ids):
        out = out | groups.get(i, frozenset())
    return out


def numbered_entries(directory: str, pattern: str) -> list[tuple[int, str]]:
    """(number, name) of the entries of ``directory`` matching ``pattern`` (one group: the
    number), sorted; [] when the directory cannot be read."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        m = re.fullmatch(pattern, name)
        if m:
            out.append((int(m.group(1)), name))
    return sorted(out)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def discover(sys_cpu: str = SYS_CPU, sys_node: str = SYS_NODE) -> CpuTopology:
    """Read the online CPUs' packages, thread siblings and NUMA nodes."""
    try:
        online = parse_cpuset(_read(os.path.join(sys_cpu, "online")))
    except (OSError, CpuSetError) as exc:
        raise TopologyError(f"cannot read the online CPUs from {sys_cpu}/online: {exc}") from None
    if not online:
        raise TopologyError(f"{sys_cpu}/online lists no CPU")
    numa_of: dict[int, int] = {}
    for node, entry in numbered_entries(sys_node, r"node(\d+)"):
        try:
            cpus = parse_cpuset(_read(os.path.join(sys_node, entry, "cpulist")))
        except (OSError, CpuSetError) as exc:
            raise TopologyError(f"cannot read {sys_node}/{entry}/cpulist: {exc}") from None
        for cpu in cpus:
            numa_of[cpu] = node
    out: dict[int, CpuInfo] = {}
    for cpu in sorted(online):
        topo = os.path.join(sys_cpu, f"cpu{cpu}", "topology")
        try:
            socket = int(_read(os.path.join(topo, "physical_package_id")))
            siblings = parse_cpuset(_read(os.path.join(topo, "thread_siblings_list")))
        except (OSError, ValueError) as exc:
            raise TopologyError(f"cannot read the topology of cpu{cpu} under {topo}: {exc}") from None
        core = min(siblings & online or {cpu})
        out[cpu] = CpuInfo(numa=numa_of.get(cpu, 0), socket=max(socket, 0), core=core)
    return CpuTopology(out, numa_reported=bool(numa_of))
