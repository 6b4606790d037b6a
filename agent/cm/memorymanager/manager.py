"""The memory manager (``--memory-manager-policy``): NUMA-placed memory for Guaranteed pods.

``None`` leaves memory placement to the kernel. ``Static`` keeps, per NUMA node and
per resource (``memory``, ``hugepages-<size>``), the total, what ``--reserved-memory``
keeps for the system, what is allocatable and what Guaranteed containers have
reserved; it answers the topology manager with the NUMA node sets that can hold a
container's requests (narrowest preferred) and reserves the memory on the merged
set. A container then runs with ``cpuset.mems`` of those nodes. A node that serves
a multi-node reservation is only used again together with the same nodes, as
upstream does. Init containers' memory is handed on to the app containers placed
on the same nodes.

The state lives in ``<root-dir>/memory_manager_state`` (upstream's JSON shape); a file
of another policy, or one written for other memory figures, stops the start.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..checkpoint import CheckpointError, restore_checkpoint, write_checkpoint
from ..cpumanager.manager import numa_masks
from ..cpuset import format_cpuset
from ..qos import GUARANTEED, MEMORY, is_hugepages, pod_qos_class, resource_value
from ..topology import Hints, TopologyHint

__all__ = ["MemoryManager", "MemoryManagerError", "STATE_FILE", "container_memory"]

log = logging.getLogger(__name__)

STATE_FILE = "memory_manager_state"
POLICY_NONE = "None"
POLICY_STATIC = "Static"
_GATE = "MemoryManager"
_FIELDS = ("total", "systemReserved", "allocatable", "reserved", "free")


class MemoryManagerError(RuntimeError):
    """The memory manager cannot start with this configuration or this checkpoint."""


def container_memory(pod: Mapping, container: Mapping) -> dict[str, int]:
    """The memory and huge pages a Guaranteed container asks for ({} for other pods)."""
    if pod_qos_class(pod) != GUARANTEED:
        return {}
    res = container.get("resources") or {}
    raw = dict(res.get("limits") or {})
    raw.update(res.get("requests") or {})
    out: dict[str, int] = {}
    for name, q in raw.items():
        name = str(name)
        if name == MEMORY or is_hugepages(name):
            v = resource_value(name, q)
            if v > 0:
                out[name] = v
    return out


def pod_memory(pod: Mapping) -> dict[str, int]:
    spec = pod.get("spec") or {}
    app: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in container_memory(pod, c).items():
            app[k] = app.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in container_memory(pod, c).items():
            app[k] = max(app.get(k, 0), v)
    return app


@dataclass
class _Block:
    numa: tuple[int, ...]
    type: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"numaAffinity": list(self.numa), "type": self.type, "size": self.size}


@dataclass
class _Node:
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    assignments: int = 0
    cells: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "numberOfAssignments": self.assignments,
            "memoryMap": {r: dict(v) for r, v in sorted(self.memory.items())},
            "cells": list(self.cells),
        }


def _uid(pod: Mapping) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class MemoryManager:
    """The node's memory manager (a topology hint provider)."""

    def __init__(
        self,
        cfg: Any,
        *,
        numa_memory: Mapping[int, Mapping[str, int]],
        reservation: Mapping[str, int],
        state_dir: str | None = None,
    ) -> None:
        """``numa_memory``: node -> resource -> bytes (see numa.read_numa_memory);
        ``reservation``: the node allocatable reservation (reserved + hard eviction)."""
        self.policy = str(getattr(cfg, "memory_manager_policy", POLICY_NONE) or POLICY_NONE)
        if self.policy not in (POLICY_NONE, POLICY_STATIC):
            raise MemoryManagerError(f'unknown memory manager policy "{self.policy}" (--memory-manager-policy)')
        root = state_dir or str(getattr(cfg, "root_dir", "") or "")
        self.state_path = os.path.join(root, STATE_FILE) if root else ""
        self._lock = threading.RLock()
        self.nodes: dict[int, _Node] = {}
        self.entries: dict[str, dict[str, list[_Block]]] = {}
        reserved_memory = tuple(getattr(cfg, "reserved_memory", ()) or ())
        if self.policy == POLICY_NONE:
            if reserved_memory:
                raise MemoryManagerError(
                    "--reserved-memory applies to the Static memory manager policy only; the policy is "
                    f'"{POLICY_NONE}" (--memory-manager-policy)'
                )
            return
        try:
            gate_on = bool(cfg.feature(_GATE))
        except Exception:
            gate_on = True
        if not gate_on:
            raise MemoryManagerError(f"--memory-manager-policy={POLICY_STATIC} needs the feature gate {_GATE}")
        self.fresh_nodes = self._machine_state(numa_memory, reserved_memory, reservation)

    @property
    def static(self) -> bool:
        return self.policy == POLICY_STATIC

    # --- configuration ------------------------------------------------------------

    @staticmethod
    def _machine_state(
        numa_memory: Mapping[int, Mapping[str, int]], reserved_memory: tuple, reservation: Mapping[str, int]
    ) -> dict[int, _Node]:
        reserved: dict[int, dict[str, int]] = {}
        for r in reserved_memory:
            node = int(r.numa_node)
            if node not in numa_memory:
                raise MemoryManagerError(
                    f"--reserved-memory names NUMA node {node}, which this machine does not have "
                    f"(nodes: {format_cpuset(numa_memory)})"
                )
            for name, q in r.limits.items():
                value = q.value() if hasattr(q, "value") else int(q)
                reserved.setdefault(node, {})[name] = reserved.get(node, {}).get(name, 0) + value
        resources = sorted({r for per in numa_memory.values() for r in per} | {MEMORY})
        for name in resources:
            total_reserved = sum(per.get(name, 0) for per in reserved.values())
            expected = reservation.get(name, 0)
            if total_reserved != expected:
                raise MemoryManagerError(
                    f'the total amount "{total_reserved}" of type "{name}" in --reserved-memory is not equal to '
                    f'the value "{expected}" determined by Node Allocatable (--system-reserved + --orch-reserved + '
                    "hard eviction thresholds)"
                )
        for name in {n for per in reserved.values() for n in per} - set(resources):
            raise MemoryManagerError(f'--reserved-memory reserves "{name}", which this machine does not have')
        out: dict[int, _Node] = {}
        for node, per in sorted(numa_memory.items()):
            mm: dict[str, dict[str, int]] = {}
            for name in resources:
                total = int(per.get(name, 0))
                sys_res = reserved.get(node, {}).get(name, 0)
                if sys_res > total:
                    raise MemoryManagerError(
                        f"--reserved-memory reserves {sys_res} bytes of {name} on NUMA node {node}, which has {total}"
                    )
                alloc = total - sys_res
                mm[name] = {
                    "total": total,
                    "systemReserved": sys_res,
                    "allocatable": alloc,
                    "reserved": 0,
                    "free": alloc,
                }
            out[node] = _Node(memory=mm, assignments=0, cells=(node,))
        return out

    # --- start and checkpoint -----------------------------------------------------

    def start(self) -> None:
        if not self.state_path:
            if self.static:
                raise MemoryManagerError("the Static memory manager policy needs a root directory (--root-dir)")
            return
        hint = f"; drain this node and delete the memory manager checkpoint file {self.state_path} before restarting"
        with self._lock:
            try:
                data = restore_checkpoint(self.state_path, self.policy)
            except CheckpointError as exc:
                raise MemoryManagerError(f"{exc}{hint}") from None
            if data is None:
                if self.static:
                    self.nodes = self.fresh_nodes
                    self.entries = {}
                    self._save()
                return
            if not self.static:
                return
            try:
                nodes = {
                    int(k): _Node(
                        memory={r: {f: int(v[f]) for f in _FIELDS} for r, v in (n.get("memoryMap") or {}).items()},
                        assignments=int(n.get("numberOfAssignments") or 0),
                        cells=tuple(int(c) for c in n.get("cells") or ()),
                    )
                    for k, n in (data.get("machineState") or {}).items()
                }
                entries = {
                    str(uid): {
                        str(name): [
                            _Block(tuple(int(x) for x in b["numaAffinity"]), str(b["type"]), int(b["size"]))
                            for b in blocks
                        ]
                        for name, blocks in (per or {}).items()
                    }
                    for uid, per in (data.get("entries") or {}).items()
                }
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise MemoryManagerError(
                    f"could not restore state from checkpoint {self.state_path}: {exc}{hint}"
                ) from None
            self._adopt_machine(nodes, hint)
            self.nodes, self.entries = nodes, entries
            log.info("memory manager: restored Static state from %s: %d pods placed", self.state_path, len(entries))

    def _adopt_machine(self, nodes: dict[int, _Node], hint: str) -> None:
        """Carry the checkpoint's reservations over to today's figures.

        The nodes, resources and ``--reserved-memory`` must be those of the checkpoint.
        A node's total may differ (memory added or taken away under a hypervisor):
        allocatable and free follow it, as long as what pods reserved still fits.
        """
        if sorted(nodes) != sorted(self.fresh_nodes):
            raise MemoryManagerError(
                f"the NUMA nodes in the checkpoint ({format_cpuset(nodes)}) are not this machine's "
                f"({format_cpuset(self.fresh_nodes)}){hint}"
            )
        for n, fresh in self.fresh_nodes.items():
            have = nodes[n]
            if sorted(have.memory) != sorted(fresh.memory):
                raise MemoryManagerError(
                    f"the resources of NUMA node {n} in the checkpoint ({', '.join(sorted(have.memory))}) are not "
                    f"this machine's ({', '.join(sorted(fresh.memory))}){hint}"
                )
            for r, now in fresh.memory.items():
                old = have.memory[r]
                if old["systemReserved"] != now["systemReserved"]:
                    raise MemoryManagerError(
                        f"the expected machine state is different from the one in the checkpoint: --reserved-memory "
                        f"for {r} on NUMA node {n} was {old['systemReserved']}, is {now['systemReserved']}{hint}"
                    )
                if old["reserved"] > now["allocatable"]:
                    raise MemoryManagerError(
                        f"NUMA node {n} has {now['allocatable']} bytes of {r} allocatable now, less than the "
                        f"{old['reserved']} its pods reserved{hint}"
                    )
                if old["total"] != now["total"]:
                    log.info(
                        "memory manager: NUMA node %d %s total changed from %d to %d", n, r, old["total"], now["total"]
                    )
                old.update(
                    total=now["total"], allocatable=now["allocatable"], free=now["allocatable"] - old["reserved"]
                )

    def _save(self) -> None:
        data: dict[str, Any] = {
            "policyName": self.policy,
            "machineState": {str(n): node.to_json() for n, node in sorted(self.nodes.items())},
        }
        if self.entries:
            data["entries"] = {
                uid: {name: [b.to_json() for b in blocks] for name, blocks in sorted(per.items())}
                for uid, per in sorted(self.entries.items())
            }
        try:
            write_checkpoint(self.state_path, data)
        except OSError as exc:
            log.error("memory manager: cannot write the checkpoint %s: %s", self.state_path, exc)

    # --- hints --------------------------------------------------------------------

    def _violates(self, mask: frozenset[int]) -> bool:
        nodes = sorted(mask)
        if len(nodes) == 1:
            return len(self.nodes[nodes[0]].cells) > 1
        for n in nodes:
            node = self.nodes[n]
            if node.assignments == 0:
                continue
            if len(node.cells) == 1 or tuple(sorted(node.cells)) != tuple(nodes):
                return True
        return False

    def _sum(self, mask: frozenset[int], resource: str, what: str) -> int:
        return sum(self.nodes[n].memory.get(resource, {}).get(what, 0) for n in mask)

    def _calculate(self, requests: Mapping[str, int]) -> list[TopologyHint]:
        masks = numa_masks(sorted(self.nodes))
        min_size = len(self.nodes)
        for mask in masks:
            if all(self._sum(mask, r, "allocatable") >= v for r, v in requests.items()):
                min_size = min(min_size, len(mask))
        hints = []
        for mask in masks:
            if self._violates(mask):
                continue
            if all(self._sum(mask, r, "free") >= v for r, v in requests.items()):
                hints.append(TopologyHint(mask, len(mask) == min_size))
        return hints

    def _answer(self, requests: Mapping[str, int], hints: list[TopologyHint]) -> Hints:
        return {r: list(hints) for r in requests}

    def get_topology_hints(self, pod: Mapping, container: Mapping) -> Hints:
        if not self.static:
            return {}
        requests = container_memory(pod, container)
        if not requests:
            return {}
        with self._lock:
            blocks = self.entries.get(_uid(pod), {}).get(str(container.get("name") or ""))
            if blocks:
                return {b.type: [TopologyHint(frozenset(b.numa), True)] for b in blocks}
            return self._answer(requests, self._calculate(requests))

    def get_pod_topology_hints(self, pod: Mapping) -> Hints:
        if not self.static:
            return {}
        requests = pod_memory(pod)
        if not requests:
            return {}
        with self._lock:
            per = self.entries.get(_uid(pod), {})
            if per:
                nodes: set[int] = set()
                for blocks in per.values():
                    for b in blocks:
                        nodes.update(b.numa)
                return {r: [TopologyHint(frozenset(nodes), True)] for r in requests}
            return self._answer(requests, self._calculate(requests))

    # --- allocation ---------------------------------------------------------------

    def _choose(self, requests: Mapping[str, int], affinity: TopologyHint | None) -> frozenset[int]:
        hints = self._calculate(requests)
        if affinity is not None and affinity.numa_affinity is not None:
            want = affinity.numa_affinity
            if (
                want <= set(self.nodes)
                and not self._violates(want)
                and all(self._sum(want, r, "free") >= v for r, v in requests.items())
            ):
                return want
            hints = [h for h in hints if h.numa_affinity is not None and want <= h.numa_affinity]
            if not hints:
                raise RuntimeError(
                    "[memorymanager] failed to find NUMA nodes to extend the current NUMA nodes affinity"
                )
        if not hints:
            raise RuntimeError(
                "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
            )
        preferred = [h for h in hints if h.preferred]
        best = (preferred or hints)[0]
        assert best.numa_affinity is not None
        return best.numa_affinity

    def allocate(self, pod: Mapping, container: Mapping, affinity: TopologyHint | None) -> None:
        if not self.static:
            return
        requests = container_memory(pod, container)
        if not requests:
            return
        uid = _uid(pod)
        name = str(container.get("name") or "")
        with self._lock:
            if name in self.entries.get(uid, {}):
                return
            mask = self._choose(requests, affinity)
            nodes = tuple(sorted(mask))
            inits = {str(c.get("name") or "") for c in (pod.get("spec") or {}).get("initContainers") or []}
            blocks = []
            for resource, size in sorted(requests.items()):
                charge = size
                if name not in inits:
                    # Memory of init containers on the same nodes passes to this container.
                    for init_name in inits:
                        for b in self.entries.get(uid, {}).get(init_name, []):
                            if charge and b.type == resource and b.numa == nodes and b.size:
                                reuse = min(b.size, charge)
                                b.size -= reuse
                                charge -= reuse
                left = charge
                for n in nodes:
                    mem = self.nodes[n].memory[resource]
                    take = min(mem["free"], left)
                    mem["free"] -= take
                    mem["reserved"] += take
                    left -= take
                blocks.append(_Block(nodes, resource, size))
            for n in nodes:
                self.nodes[n].assignments += 1
                self.nodes[n].cells = nodes
            self.entries.setdefault(uid, {})[name] = blocks
            self._save()
            log.info("memory manager: pod %s container %s placed on NUMA nodes %s", uid, name, format_cpuset(nodes))

    # --- for the pod resources API ---------------------------------------------------

    def allocatable_memory(self) -> list[tuple[str, int, tuple[int, ...]]]:
        """(resource, allocatable bytes, (NUMA node,)) per node and resource; [] under None."""
        with self._lock:
            return [
                (r, v["allocatable"], (n,))
                for n, node in sorted(self.nodes.items())
                for r, v in sorted(node.memory.items())
                if v["allocatable"]
            ]

    def container_blocks(self, pod_uid: str, container_name: str) -> list[tuple[str, int, tuple[int, ...]]]:
        """(resource, bytes, NUMA nodes) the container was given; [] when not placed."""
        with self._lock:
            return [(b.type, b.size, b.numa) for b in self.entries.get(pod_uid, {}).get(container_name, [])]

    def mems_for(self, pod_uid: str, container_name: str) -> str:
        """cpuset.mems for the container ("" when the memory manager does not place it)."""
        if not self.static:
            return ""
        with self._lock:
            nodes: set[int] = set()
            for b in self.entries.get(pod_uid, {}).get(container_name, []):
                nodes.update(b.numa)
            return format_cpuset(nodes)

    def remove_pod(self, pod_uid: str) -> None:
        if not self.static:
            return
        with self._lock:
            per = self.entries.pop(pod_uid, None)
            if not per:
                return
            for blocks in per.values():
                touched: set[int] = set()
                for b in blocks:
                    left = b.size
                    for n in b.numa:
                        mem = self.nodes[n].memory[b.type]
                        give = min(mem["reserved"], left)
                        mem["reserved"] -= give
                        mem["free"] += give
                        left -= give
                    touched.update(b.numa)
                for n in touched:
                    node = self.nodes[n]
                    node.assignments = max(0, node.assignments - 1)
                    if node.assignments == 0:
                        node.cells = (n,)
            self._save()
            log.info("memory manager: released the memory of pod %s", pod_uid)

    def active_pods(self, uids: set[str]) -> None:
        """Release the reservations of pods that are no longer active."""
        for uid in [u for u in self.entries if u not in uids]:
            self.remove_pod(uid)
