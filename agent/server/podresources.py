"""The pod resources API (``v1`` ``PodResourcesLister``) on ``<root-dir>/pod-resources/``.

Monitoring agents ask which devices (and exclusive CPUs and memory) each container of
each pod holds (``List``), and what the node could hand out (``GetAllocatableResources``,
feature gate ``KubeletPodResourcesGetAllocatable``). ``Get`` needs the alpha gate
``KubeletPodResourcesGet``, which this agent does not offer, so it answers that the
method is disabled, as upstream does with the gate off. The older ``v1alpha1`` lister
(``List`` with devices only) is served on the same socket. Calls are rate limited as
upstream's (100 per second, bursts of 10, for both versions together).

The CPU and memory figures come from optional providers (the CPU and memory managers
when they are on); without them the lists are empty, which is what upstream answers
with the ``none`` policies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import grpc

from agent.cm.devicemanager.manager import serve_unix
from apiserver_min.api import names
from cri.podresources import api_pb2 as pb
from cri.podresources import api_pb2_grpc as pb_grpc
from cri.podresources.v1alpha1 import api_pb2 as alpha
from cri.podresources.v1alpha1 import api_pb2_grpc as alpha_grpc

__all__ = ["PodResourcesServer", "ResourceProviders", "MemoryBlock", "RATE_QPS", "RATE_BURST"]

log = logging.getLogger(__name__)

RATE_QPS = 100.0
RATE_BURST = 10
GATE_GET_ALLOCATABLE = "KubeletPodResourcesGetAllocatable"
GATE_GET = "KubeletPodResourcesGet"


@dataclass(frozen=True)
class MemoryBlock:
    memory_type: str  # "memory" or "hugepages-<size>"
    size: int
    numa_nodes: tuple[int, ...] = ()


@dataclass
class ResourceProviders:
    """Where the answers come from. ``devices(pod_uid, container)`` gives resource ->
    NUMA node (-1: none) -> device ids; ``allocatable_devices()`` resource -> device id ->
    NUMA nodes. The CPU and memory hooks are for the CPU and memory managers."""

    pods: Callable[[], Iterable[Mapping]]
    devices: Callable[[str, str], Mapping[str, Mapping[int, Sequence[str]]]] = lambda uid, c: {}
    allocatable_devices: Callable[[], Mapping[str, Mapping[str, Sequence[int]]]] = lambda: {}
    update_devices: Callable[[], None] = lambda: None
    cpu_ids: Callable[[str, str], Sequence[int]] = lambda uid, c: ()
    allocatable_cpu_ids: Callable[[], Sequence[int]] = lambda: ()
    memory: Callable[[str, str], Sequence[MemoryBlock]] = lambda uid, c: ()
    allocatable_memory: Callable[[], Sequence[MemoryBlock]] = lambda: ()


def _topology(nodes: Iterable[int]) -> pb.TopologyInfo:
    return pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes])


def _container_devices_by_numa(resources: Mapping[str, Mapping[int, Sequence[str]]]) -> list[pb.ContainerDevices]:
    """One entry per device and NUMA node, as upstream lists them."""
    out = []
    for resource, by_numa in sorted(resources.items()):
        for node, ids in sorted(by_numa.items()):
            for i in ids:
                entry = pb.ContainerDevices(resource_name=resource, device_ids=[i])
                if node >= 0:
                    entry.topology.CopyFrom(_topology([node]))
                out.append(entry)
    return out


def _allocatable_devices(resources: Mapping[str, Mapping[str, Sequence[int]]]) -> list[pb.ContainerDevices]:
    out = []
    for resource, devices in sorted(resources.items()):
        for i, nodes in sorted(devices.items()):
            if not nodes:
                out.append(pb.ContainerDevices(resource_name=resource, device_ids=[i]))
            for n in nodes:
                out.append(pb.ContainerDevices(resource_name=resource, device_ids=[i], topology=_topology([n])))
    return out


def _memory(blocks: Sequence[MemoryBlock]) -> list[pb.ContainerMemory]:
    return [
        pb.ContainerMemory(memory_type=b.memory_type, size=b.size, topology=_topology(b.numa_nodes)) for b in blocks
    ]


class _TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps, self.burst, self.clock = qps, burst, clock
        self.tokens = float(burst)
        self.last = clock()

    def allow(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class _Lister(pb_grpc.PodResourcesListerServicer):
    def __init__(self, providers: ResourceProviders, feature: Callable[[str], bool], limiter: _TokenBucket) -> None:
        self.p = providers
        self.feature = feature
        self.limiter = limiter

    async def _admit(self, context: grpc.aio.ServicerContext) -> None:
        if not self.limiter.allow():
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def _pod(self, pod: Mapping) -> pb.PodResources:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        containers = []
        for c in (pod.get("spec") or {}).get("containers") or []:
            name = str(c.get("name") or "")
            containers.append(
                pb.ContainerResources(
                    name=name,
                    devices=_container_devices_by_numa(self.p.devices(uid, name)),
                    cpu_ids=list(self.p.cpu_ids(uid, name)),
                    memory=_memory(self.p.memory(uid, name)),
                )
            )
        return pb.PodResources(
            name=str(meta.get("name") or ""), namespace=str(meta.get("namespace") or "default"), containers=containers
        )

    async def List(self, request, context):
        await self._admit(context)
        self.p.update_devices()
        return pb.ListPodResourcesResponse(pod_resources=[self._pod(p) for p in self.p.pods()])

    async def GetAllocatableResources(self, request, context):
        await self._admit(context)
        if not self.feature(GATE_GET_ALLOCATABLE):
            await context.abort(grpc.StatusCode.UNKNOWN, "PodResources API GetAllocatableResources disabled")
        return pb.AllocatableResourcesResponse(
            devices=_allocatable_devices(self.p.allocatable_devices()),
            cpu_ids=list(self.p.allocatable_cpu_ids()),
            memory=_memory(self.p.allocatable_memory()),
        )

    async def Get(self, request, context):
        await self._admit(context)
        if not self.feature(GATE_GET):
            await context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self.p.pods():
            meta = pod.get("metadata") or {}
            if meta.get("name") == request.pod_name and (meta.get("namespace") or "default") == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=self._pod(pod))
        await context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} not found in {request.pod_namespace}")


class _AlphaLister(alpha_grpc.PodResourcesListerServicer):
    """v1alpha1: the same pods and devices, without topology, CPUs or memory."""

    def __init__(self, v1: _Lister) -> None:
        self.v1 = v1

    async def List(self, request, context):
        await self.v1._admit(context)
        self.v1.p.update_devices()
        out = []
        for pod in self.v1.p.pods():
            full = self.v1._pod(pod)
            containers = [
                alpha.ContainerResources(
                    name=c.name,
                    devices=[
                        alpha.ContainerDevices(resource_name=d.resource_name, device_ids=list(d.device_ids))
                        for d in c.devices
                    ],
                )
                for c in full.containers
            ]
            out.append(alpha.PodResources(name=full.name, namespace=full.namespace, containers=containers))
        return alpha.ListPodResourcesResponse(pod_resources=out)


class PodResourcesServer:
    def __init__(
        self,
        root_dir: str,
        providers: ResourceProviders,
        *,
        feature: Callable[[str], bool] = lambda gate: gate != GATE_GET,
        qps: float = RATE_QPS,
        burst: int = RATE_BURST,
    ) -> None:
        self.socket_dir = os.path.join(root_dir, names.POD_RESOURCES_DIR)
        self.socket_path = os.path.join(self.socket_dir, names.POD_RESOURCES_SOCKET)
        self.providers = providers
        self.feature = feature
        self.qps, self.burst = qps, burst

    async def run(self, started: asyncio.Future | None = None) -> None:
        os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        server = grpc.aio.server()
        v1 = _Lister(self.providers, self.feature, _TokenBucket(self.qps, self.burst))
        pb_grpc.add_PodResourcesListerServicer_to_server(v1, server)
        alpha_grpc.add_PodResourcesListerServicer_to_server(_AlphaLister(v1), server)
        await serve_unix(server, self.socket_path, "the pod resources API")
        log.info("Pod resources API listening on %s", self.socket_path)
        if started is not None and not started.done():
            started.set_result(None)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop(grace=None)
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
