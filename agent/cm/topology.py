"""Topology hints: what a resource manager tells the topology manager about a container.

The CPU manager, the memory manager and the device manager are *hint providers*.
For each container (or each pod, with ``topologyManagerScope: pod``) a provider
answers, per resource it manages, the NUMA node sets on which the request could
be satisfied, and whether each set is a preferred (narrowest possible) one.
The topology manager merges the answers of all providers under its policy
(``none``, ``best-effort``, ``restricted``, ``single-numa-node``) and then asks
each provider to allocate with the merged affinity.

The shapes follow upstream's:

- a provider that has no opinion on a resource leaves it out of its answer;
- ``None`` as the list for a resource means "any NUMA node will do" (no preference);
- an empty list means "cannot be satisfied on any NUMA node set".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

__all__ = ["TopologyHint", "HintProvider", "Hints"]


@dataclass(frozen=True)
class TopologyHint:
    """One NUMA node set that could satisfy a request.

    ``numa_affinity`` is the set of NUMA node ids, or ``None`` for "any"; ``preferred``
    marks the narrowest sets (the ones the topology manager should choose when it can).
    """

    numa_affinity: frozenset[int] | None
    preferred: bool

    def narrower_than(self, other: "TopologyHint") -> bool:
        if self.numa_affinity is None:
            return False
        if other.numa_affinity is None:
            return True
        return len(self.numa_affinity) < len(other.numa_affinity)


# resource name -> hints (None: no preference; []: impossible)
Hints = Mapping[str, "list[TopologyHint] | None"]


class HintProvider(Protocol):
    """What the topology manager needs of a resource manager.

    ``pod`` and ``container`` are the API objects (plain mappings) of the pod and of one
    entry of its ``containers``/``initContainers``.
    """

    def get_topology_hints(self, pod: Mapping, container: Mapping) -> Hints: ...

    def get_pod_topology_hints(self, pod: Mapping) -> Hints: ...

    def allocate(self, pod: Mapping, container: Mapping, affinity: TopologyHint | None) -> None:
        """Reserve the container's resources, aligned to ``affinity`` when given.

        Raises an exception with a message for the pod's status when it cannot.
        """
        ...
