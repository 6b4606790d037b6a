"""Choosing exclusive CPUs, in upstream's order: whole NUMA nodes or sockets, whole
cores, then single threads filling partly used cores first.

Between candidates of the same kind the best fit wins: sockets (and NUMA nodes,
cores) with fewer free CPUs come first, so that large free blocks stay whole for
later requests; ties go to the lower id.

``distribute`` spreads a request that no single NUMA node can hold evenly over
the fewest NUMA nodes (the ``distribute-cpus-across-numa`` policy option).
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterable

from .topology import CpuTopology

__all__ = ["AllocationError", "take_by_topology", "take_distributed"]

NOT_ENOUGH = "not enough cpus available to satisfy request"


class AllocationError(RuntimeError):
    pass


class _Accumulator:
    def __init__(self, topo: CpuTopology, available: frozenset[int], n: int) -> None:
        self.topo = topo
        self.free = set(available)
        self.needed = n
        self.result: set[int] = set()

    def take(self, cpus: Iterable[int]) -> None:
        cpus = set(cpus)
        self.result |= cpus
        self.free -= cpus
        self.needed -= len(cpus)

    def satisfied(self) -> bool:
        return self.needed <= 0

    def _count(self, key: Callable[[int], int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in self.free:
            k = key(c)
            out[k] = out.get(k, 0) + 1
        return out

    def _socket_order(self) -> list[int]:
        free = self._count(lambda c: self.topo.cpus[c].socket)
        return sorted(free, key=lambda s: (free[s], s))

    def _take_whole(self, size: int, ids: list[int], cpus_of: Callable[[list[int]], frozenset[int]]) -> None:
        """Whole free groups (sockets, NUMA nodes) of ``size`` CPUs, lowest id first, while needed."""
        for ident in ids:
            if self.needed < size or size == 0:
                return
            cpus = cpus_of([ident])
            if cpus <= self.free:
                self.take(cpus)

    def take_full_sockets(self) -> None:
        self._take_whole(self.topo.cpus_per_socket(), self.topo.sockets(), self.topo.cpus_in_sockets)

    def take_full_numa(self) -> None:
        self._take_whole(self.topo.cpus_per_numa(), self.topo.numa_nodes(), self.topo.cpus_in_numa)

    def take_full_cores(self) -> None:
        size = self.topo.cpus_per_core()
        socket_rank = {s: i for i, s in enumerate(self._socket_order())}
        cores = sorted(
            {self.topo.cpus[c].core for c in self.free},
            key=lambda core: (socket_rank.get(self.topo.cpus[core].socket, 0), core),
        )
        for core in cores:
            if self.needed < size or size == 0:
                return
            cpus = self.topo.cpus_in_cores([core])
            if cpus <= self.free:
                self.take(cpus)

    def take_remaining(self) -> None:
        socket_rank = {s: i for i, s in enumerate(self._socket_order())}
        core_free: dict[int, int] = {}
        for c in self.free:
            core = self.topo.cpus[c].core
            core_free[core] = core_free.get(core, 0) + 1
        # Sockets already used by this allocation first, then the best-fit order.
        used_sockets = {self.topo.cpus[c].socket for c in self.result}
        order = sorted(
            self.free,
            key=lambda c: (
                self.topo.cpus[c].socket not in used_sockets,
                socket_rank[self.topo.cpus[c].socket],
                core_free[self.topo.cpus[c].core],
                self.topo.cpus[c].core,
                c,
            ),
        )
        for c in order:
            if self.satisfied():
                return
            self.take([c])


def take_by_topology(topo: CpuTopology, available: Iterable[int], n: int) -> frozenset[int]:
    """``n`` CPUs out of ``available``, packed as tightly as the topology allows."""
    avail = frozenset(available)
    if n <= 0:
        return frozenset()
    if n > len(avail):
        raise AllocationError(NOT_ENOUGH)
    acc = _Accumulator(topo, avail, n)
    if n == len(avail):
        return avail
    # Several NUMA nodes per socket: NUMA nodes are the first level, else sockets are.
    if topo.num_numa_nodes > topo.num_sockets:
        acc.take_full_numa()
        acc.take_full_sockets()
    else:
        acc.take_full_sockets()
        acc.take_full_numa()
    if not acc.satisfied():
        acc.take_full_cores()
    if not acc.satisfied():
        acc.take_remaining()
    if not acc.satisfied():
        raise AllocationError(NOT_ENOUGH)
    return frozenset(acc.result)


def _split(n: int, parts: int, group: int) -> list[int] | None:
    """``n`` CPUs in ``parts`` shares as equal as possible, each a multiple of ``group``."""
    if n % group:
        return None
    groups = n // group
    base, extra = divmod(groups, parts)
    return [(base + (1 if i < extra else 0)) * group for i in range(parts)]


def take_distributed(topo: CpuTopology, available: Iterable[int], n: int, group: int = 1) -> frozenset[int]:
    """``n`` CPUs spread evenly over the fewest NUMA nodes that can hold them.

    A request one NUMA node can hold is packed as :func:`take_by_topology` does.
    Shares are multiples of ``group`` (the CPUs of a core with ``full-pcpus-only``).
    Among the node combinations that fit, the one leaving the free CPUs most even wins.
    """
    avail = frozenset(available)
    if n <= 0:
        return frozenset()
    if n > len(avail):
        raise AllocationError(NOT_ENOUGH)
    nodes = topo.numa_nodes()
    free_in = {node: avail & topo.cpus_in_numa([node]) for node in nodes}
    for node in nodes:
        if len(free_in[node]) >= n:
            return take_by_topology(topo, avail, n)
    for k in range(2, len(nodes) + 1):
        shares = _split(n, k, group)
        if shares is None:
            continue
        best: tuple[float, tuple[int, ...]] | None = None
        for combo in itertools.combinations(nodes, k):
            # The largest share goes to the node with the most free CPUs.
            ranked = sorted(combo, key=lambda x: (-len(free_in[x]), x))
            if any(len(free_in[node]) < share for node, share in zip(ranked, shares)):
                continue
            left = [len(free_in[node]) - share for node, share in zip(ranked, shares)]
            mean = sum(left) / len(left)
            spread = sum((x - mean) ** 2 for x in left)
            if best is None or spread < best[0]:
                best = (spread, tuple(ranked))
        if best is not None:
            out: set[int] = set()
            for node, share in zip(best[1], shares):
                out |= take_by_topology(topo, free_in[node], share)
            return frozenset(out)
    return take_by_topology(topo, avail, n)
