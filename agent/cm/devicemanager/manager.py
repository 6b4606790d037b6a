"""The device manager (see the package docstring): registrations, devices, allocations."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import stat
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import grpc

from apiserver_min.api import names
from cri.deviceplugin import api_pb2 as pb
from cri.deviceplugin import api_pb2_grpc as pb_grpc

from ..admission import AdmitResult
from ..qos import resource_value
from ..topology import Hints, TopologyHint
from .checkpoint import NO_NUMA, Checkpoint, CheckpointError, PodDeviceEntry
from .endpoint import EndpointError, PluginEndpoint
from .options import DeviceMount, DeviceNode, DeviceRunOptions
from .validation import is_extended_resource_name, registration_error

__all__ = ["DeviceManager", "DeviceAllocationError", "ENDPOINT_STOP_GRACE", "HEALTHY", "UNHEALTHY", "serve_unix"]

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# How long the devices of a plugin that went away stay in the node's capacity (upstream's 5 minutes).
ENDPOINT_STOP_GRACE = 300.0
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


# sockaddr_un.sun_path holds 108 bytes, the terminating NUL included.
UNIX_PATH_MAX = 107


async def serve_unix(server: grpc.aio.Server, path: str, what: str) -> None:
    """Start ``server`` on the unix socket ``path``; OSError with a clear message when it cannot."""
    if len(path.encode()) > UNIX_PATH_MAX:
        raise OSError(
            f"{what} unavailable: the socket path {path} is longer than the {UNIX_PATH_MAX} bytes "
            f"a unix socket path may have (choose a shorter --root-dir)"
        )
    try:
        port = server.add_insecure_port(f"unix://{path}")
    except RuntimeError as exc:
        raise OSError(f"{what} unavailable: cannot listen on {path}: {exc}") from None
    if port == 0:
        raise OSError(f"{what} unavailable: cannot listen on {path}")
    await server.start()


class DeviceAllocationError(Exception):
    """A container's devices could not be allocated; the message is upstream's."""


@dataclass
class _Allocation:
    devices: dict[int, list[str]]  # NUMA node (or NO_NUMA) -> device ids
    response: bytes  # the serialized ContainerAllocateResponse

    def ids(self) -> set[str]:
        return {i for ids in self.devices.values() for i in ids}


def _uid(pod: Mapping) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _containers(pod: Mapping) -> tuple[list[Mapping], list[Mapping]]:
    spec = pod.get("spec") or {}
    init = [c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    app = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    return init, app


def _device_limits(container: Mapping) -> dict[str, int]:
    """The extended resources a container asks for (upstream reads the limits)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    out = {}
    for name, value in limits.items():
        if is_extended_resource_name(str(name)):
            out[str(name)] = resource_value(str(name), value, where=f"resources.limits.{name}")
    return out


def _numa_nodes(device: pb.Device | None) -> list[int]:
    if device is None or not device.HasField("topology"):
        return []
    return sorted({int(n.ID) for n in device.topology.nodes})


class _RegistrationService(pb_grpc.RegistrationServicer):
    def __init__(self, manager: "DeviceManager") -> None:
        self.manager = manager

    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext) -> pb.Empty:
        error = registration_error(request.version, request.resource_name, request.endpoint)
        if error:
            log.error("Refused a device plugin registration: %s", error)
            await context.abort(grpc.StatusCode.UNKNOWN, error)
        self.manager.add_endpoint(request)
        return pb.Empty()


class DeviceManager:
    """Devices of the registered plugins and the containers holding them.

    ``active_pods`` answers the pods the node still runs (their devices stay taken);
    ``sources_ready`` whether every pod source has been seen (before that no allocation
    is released: a restarted agent does not know its pods yet); ``on_change`` is called
    when the node's extended resources change.
    """

    def __init__(
        self,
        root_dir: str,
        *,
        active_pods: Callable[[], Iterable[Mapping]] = lambda: (),
        sources_ready: Callable[[], bool] = lambda: True,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        stop_grace: float = ENDPOINT_STOP_GRACE,
    ) -> None:
        self.socket_dir = os.path.join(root_dir, names.DEVICE_PLUGIN_DIR)
        self.socket_path = os.path.join(self.socket_dir, names.DEVICE_PLUGIN_AGENT_SOCKET)
        self.checkpoint_path = os.path.join(self.socket_dir, names.DEVICE_PLUGIN_CHECKPOINT)
        self.active_pods = active_pods
        self.sources_ready = sources_ready
        self.on_change = on_change
        self.clock = clock
        self.stop_grace = stop_grace
        self.healthy: dict[str, set[str]] = {}
        self.unhealthy: dict[str, set[str]] = {}
        self.all_devices: dict[str, dict[str, pb.Device]] = {}
        self.endpoints: dict[str, PluginEndpoint] = {}
        self.removed: set[str] = set()  # resources whose plugin is gone for good: capacity 0
        # pod uid -> container name -> resource -> allocation
        self.pod_devices: dict[str, dict[str, dict[str, _Allocation]]] = {}
        self._watchers: dict[str, asyncio.Task] = {}

    # --- checkpoint -------------------------------------------------------------------------

    def load_checkpoint(self) -> None:
        """Restore the allocations and the registered resources (whose plugins must register again)."""
        try:
            cp = Checkpoint.read(self.checkpoint_path)
        except CheckpointError as exc:
            log.error("Continuing without the device checkpoint; allocations may not be up to date: %s", exc)
            return
        if cp is None:
            return
        now = self.clock()
        for e in cp.entries:
            self.pod_devices.setdefault(e.pod_uid, {}).setdefault(e.container_name, {})[e.resource_name] = _Allocation(
                {k: list(v) for k, v in e.device_ids.items()}, e.alloc_resp
            )
        for resource in cp.registered:
            self.healthy.setdefault(resource, set())
            self.unhealthy.setdefault(resource, set())
            self.endpoints[resource] = PluginEndpoint.stopped(resource, now)
        log.info(
            "Read the device checkpoint: %d allocations, resources %s",
            len(cp.entries),
            ",".join(sorted(cp.registered)) or "none",
        )

    def _checkpoint(self) -> Checkpoint:
        entries = [
            PodDeviceEntry(uid, container, resource, alloc.devices, alloc.response)
            for uid, containers in sorted(self.pod_devices.items())
            for container, resources in sorted(containers.items())
            for resource, alloc in sorted(resources.items())
        ]
        registered = {r: sorted(self.healthy.get(r, set()) | self.unhealthy.get(r, set())) for r in self.endpoints}
        return Checkpoint(entries, registered)

    def write_checkpoint(self) -> None:
        try:
            os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
            self._checkpoint().write(self.checkpoint_path)
        except OSError as exc:
            log.error("Cannot write the device checkpoint %s: %s", self.checkpoint_path, exc)

    # --- registration and devices ---------------------------------------------------------

    async def run(self) -> None:
        """Serve the Registration service until cancelled."""
        os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
        self._remove_stale_sockets()
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_RegistrationService(self), server)
        await serve_unix(server, self.socket_path, "device plugin registration")
        log.info("Device plugin registration listening on %s", self.socket_path)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop(grace=None)
            for task in list(self._watchers.values()):
                task.cancel()
            await asyncio.gather(*self._watchers.values(), return_exceptions=True)
            for ep in self.endpoints.values():
                ep.close()
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass

    def _remove_stale_sockets(self) -> None:
        """Sockets left in the directory (the agent's own, plugins' of a previous run) go:
        a new agent socket is how plugins learn that they must register again."""
        try:
            entries = list(os.scandir(self.socket_dir))
        except OSError:
            return
        for entry in entries:
            try:
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    os.unlink(entry.path)
            except OSError as exc:
                log.warning("Cannot remove %s: %s", entry.path, exc)

    def add_endpoint(self, request: pb.RegisterRequest) -> None:
        """Start watching a plugin that just registered (a former one of its resource stops)."""
        resource = request.resource_name
        old_task = self._watchers.pop(resource, None)
        old = self.endpoints.get(resource)
        if old is not None:
            old.stop(self.clock())
        if old_task is not None:
            old_task.cancel()
        ep = PluginEndpoint(
            resource,
            os.path.join(self.socket_dir, request.endpoint),
            request.options if request.HasField("options") else None,
        )
        self.endpoints[resource] = ep
        self.removed.discard(resource)
        self.healthy.setdefault(resource, set())
        self.unhealthy.setdefault(resource, set())
        log.info(
            "Registered device plugin %s at %s (preStartRequired=%s, getPreferredAllocationAvailable=%s)",
            resource,
            ep.socket_path,
            ep.options.pre_start_required,
            ep.options.get_preferred_allocation_available,
        )
        self._watchers[resource] = asyncio.get_running_loop().create_task(
            self._watch(ep), name=f"device-plugin {resource}"
        )

    async def _watch(self, ep: PluginEndpoint) -> None:
        resource = ep.resource
        try:
            await ep.watch(lambda devices: self.update_devices(resource, devices))
            log.warning("Device plugin %s ended its ListAndWatch stream", resource)
        except grpc.aio.AioRpcError as exc:
            log.warning("Lost the device plugin %s: %s", resource, exc.details() or exc.code().name)
        finally:
            if self.endpoints.get(resource) is ep:
                self._plugin_disconnected(ep)
                if self._watchers.get(resource) is asyncio.current_task():
                    self._watchers.pop(resource, None)

    def _plugin_disconnected(self, ep: PluginEndpoint) -> None:
        """Every device of a plugin that went away is unhealthy at once (allocatable 0); its
        capacity stays for the grace period, in case the plugin comes back."""
        resource = ep.resource
        ep.stop(self.clock())
        self.unhealthy.setdefault(resource, set()).update(self.healthy.get(resource, set()))
        self.healthy[resource] = set()
        self.write_checkpoint()
        self.on_change()

    def update_devices(self, resource: str, devices: Sequence[pb.Device]) -> None:
        """A ListAndWatch answer: the plugin's whole device list."""
        known = {}
        for d in devices:
            if not d.ID:
                log.warning("Device plugin %s reported a device without an ID; ignored", resource)
                continue
            known[d.ID] = d
        self.all_devices[resource] = known
        self.healthy[resource] = {i for i, d in known.items() if d.health == HEALTHY}
        self.unhealthy[resource] = {i for i, d in known.items() if d.health != HEALTHY}
        log.info(
            "Device plugin %s: %d healthy, %d unhealthy",
            resource,
            len(self.healthy[resource]),
            len(self.unhealthy[resource]),
        )
        self.write_checkpoint()
        self.on_change()

    def capacity(self) -> tuple[dict[str, int], dict[str, int], set[str]]:
        """(capacity, allocatable, removed) of the device resources: capacity counts every
        device, allocatable the healthy ones; removed resources (their plugin gone past the
        grace period) are to be reported as 0."""
        now = self.clock()
        cap: dict[str, int] = {}
        alloc: dict[str, int] = {}
        changed = False
        for resource in sorted(set(self.healthy) | set(self.unhealthy)):
            ep = self.endpoints.get(resource)
            if ep is None or (ep.stopped_at is not None and now - ep.stopped_at > self.stop_grace):
                self.healthy.pop(resource, None)
                self.unhealthy.pop(resource, None)
                self.all_devices.pop(resource, None)
                self.endpoints.pop(resource, None)
                self.removed.add(resource)
                changed = True
                log.info("Device plugin %s gone for longer than %.0fs: resource removed", resource, self.stop_grace)
                continue
            healthy = len(self.healthy.get(resource, ()))
            cap[resource] = healthy + len(self.unhealthy.get(resource, ()))
            alloc[resource] = healthy
        if changed:
            self.write_checkpoint()
        return cap, alloc, set(self.removed)

    def is_device_resource(self, resource: str) -> bool:
        return resource in self.healthy or any(
            resource in resources for containers in self.pod_devices.values() for resources in containers.values()
        )

    # --- allocations ----------------------------------------------------------------------

    def allocated_ids(self, resource: str) -> set[str]:
        out: set[str] = set()
        for containers in self.pod_devices.values():
            for resources in containers.values():
                a = resources.get(resource)
                if a is not None:
                    out |= a.ids()
        return out

    def update_allocated(self, keep: str = "") -> None:
        """Free the devices of pods the node no longer runs (once every source has been seen);
        ``keep`` is the uid of a pod being admitted."""
        if not self.sources_ready():
            return
        active = {_uid(p) for p in self.active_pods()} | {keep}
        gone = [uid for uid in self.pod_devices if uid not in active]
        if not gone:
            return
        for uid in gone:
            log.info("Freeing the devices of pod %s", uid)
            del self.pod_devices[uid]
        self.write_checkpoint()

    def free_pod(self, pod_uid: str) -> None:
        if self.pod_devices.pop(pod_uid, None) is not None:
            log.info("Freed the devices of pod %s", pod_uid)
            self.write_checkpoint()

    def admit(self, pod: Mapping) -> AdmitResult:
        """Allocate the devices of every container of ``pod`` (init containers first), as
        upstream's resource allocation admit handler; on failure nothing stays allocated."""
        try:
            init, app = _containers(pod)
            if not any(self.is_device_resource(r) for c in init + app for r in _device_limits(c)):
                return AdmitResult(True)
            for container in init + app:
                self.allocate(pod, container, None)
        except (DeviceAllocationError, ValueError) as exc:
            self.free_pod(_uid(pod))
            return AdmitResult(False, UNEXPECTED_ADMISSION_ERROR, f"Allocate failed due to {exc}, which is unexpected")
        return AdmitResult(True)

    def allocate(self, pod: Mapping, container: Mapping, affinity: TopologyHint | None) -> None:
        """Reserve the container's devices (aligned to ``affinity`` when given) and call the
        plugins' Allocate. Raises DeviceAllocationError with upstream's message."""
        uid = _uid(pod)
        name = str(container.get("name") or "")
        init, _ = _containers(pod)
        is_init = any(c.get("name") == name for c in init)
        wanted = {r: n for r, n in _device_limits(container).items() if self.is_device_resource(r)}
        if wanted:
            self.update_allocated(keep=uid)
        changed = False
        for resource, needed in sorted(wanted.items()):
            reusable = self._reusable(pod, resource, name)
            chosen = self._devices_to_allocate(uid, name, resource, needed, reusable, affinity)
            if chosen is None:
                continue  # already allocated (a restarted agent re-admitting its pods)
            ep = self.endpoints.get(resource)
            if ep is None:
                raise DeviceAllocationError(f"unknown Device Plugin {resource}")
            by_numa = self._by_numa(resource, chosen)
            # Reserved before the call, so that a failing plugin cannot have them handed out twice.
            containers = self.pod_devices.setdefault(uid, {})
            containers.setdefault(name, {})[resource] = _Allocation(by_numa, b"")
            try:
                response = ep.allocate(sorted(chosen))
            except EndpointError as exc:
                del containers[name][resource]
                raise DeviceAllocationError(str(exc)) from None
            containers[name][resource] = _Allocation(by_numa, response.SerializeToString())
            changed = True
            log.info(
                "Allocated %s %s to container %s of pod %s%s",
                resource,
                ",".join(sorted(chosen)),
                name,
                uid,
                " (init container)" if is_init else "",
            )
        if changed:
            self.write_checkpoint()

    def _reusable(self, pod: Mapping, resource: str, container: str) -> set[str]:
        """Devices the pod's init containers hold (they run one after the other and have
        finished before the app containers start), less those an app container took."""
        init, _ = _containers(pod)
        init_names = {str(c.get("name") or "") for c in init}
        init_held: set[str] = set()
        app_held: set[str] = set()
        for c, rs in (self.pod_devices.get(_uid(pod)) or {}).items():
            if resource not in rs or c == container:
                continue
            (init_held if c in init_names else app_held).update(rs[resource].ids())
        return init_held if container in init_names else init_held - app_held

    def _by_numa(self, resource: str, ids: Iterable[str]) -> dict[int, list[str]]:
        devices = self.all_devices.get(resource) or {}
        out: dict[int, list[str]] = {}
        for i in sorted(ids):
            nodes = _numa_nodes(devices.get(i)) or [NO_NUMA]
            for n in nodes:
                out.setdefault(n, []).append(i)
        return out

    def _devices_to_allocate(
        self,
        uid: str,
        container: str,
        resource: str,
        needed: int,
        reusable: set[str],
        affinity: TopologyHint | None,
    ) -> set[str] | None:
        held = ((self.pod_devices.get(uid) or {}).get(container) or {}).get(resource)
        if held is not None:
            if len(held.ids()) != needed:
                raise DeviceAllocationError(
                    f'pod "{uid}" container "{container}" changed request for resource "{resource}" '
                    f"from {len(held.ids())} to {needed}"
                )
            return None
        if resource not in self.healthy:
            raise DeviceAllocationError(f"can't allocate unregistered device {resource}")
        chosen: set[str] = set()
        for i in sorted(reusable & self.healthy[resource]):
            if len(chosen) == needed:
                return chosen
            chosen.add(i)
        if len(chosen) == needed:
            return chosen
        remaining = needed - len(chosen)
        available = self.healthy[resource] - self.allocated_ids(resource) - chosen
        if len(available) < remaining:
            raise DeviceAllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {remaining}, Available: {len(available)}"
            )
        ep = self.endpoints.get(resource)
        if ep is not None and ep.live and ep.options.get_preferred_allocation_available:
            try:
                preferred = ep.preferred_allocation(sorted(available | chosen), sorted(chosen), needed)
            except EndpointError as exc:
                raise DeviceAllocationError(str(exc)) from None
            for i in preferred:
                if len(chosen) == needed:
                    break
                if i in available:
                    chosen.add(i)
                    available.discard(i)
        if len(chosen) < needed:
            devices = self.all_devices.get(resource) or {}
            aligned: list[str] = []
            rest: list[str] = []
            for i in sorted(available):
                nodes = set(_numa_nodes(devices.get(i)))
                if affinity is not None and affinity.numa_affinity is not None and nodes:
                    (aligned if nodes <= affinity.numa_affinity else rest).append(i)
                else:
                    rest.append(i)
            for i in aligned + rest:
                if len(chosen) == needed:
                    break
                chosen.add(i)
        return chosen

    # --- what a container gets ------------------------------------------------------------

    def container_devices(self, pod_uid: str, container: str) -> dict[str, dict[int, list[str]]]:
        """resource -> NUMA node -> device ids of one container."""
        resources = (self.pod_devices.get(pod_uid) or {}).get(container) or {}
        return {r: {k: list(v) for k, v in a.devices.items()} for r, a in sorted(resources.items())}

    def run_options(self, pod: Mapping, container: Mapping) -> DeviceRunOptions:
        """The merged Allocate answers of the container's devices, for its CRI config."""
        opts = DeviceRunOptions()
        resources = (self.pod_devices.get(_uid(pod)) or {}).get(str(container.get("name") or "")) or {}
        seen_mounts: set[str] = set()
        seen_devices: set[str] = set()
        for _resource, alloc in sorted(resources.items()):
            response = pb.ContainerAllocateResponse()
            response.ParseFromString(alloc.response)
            for k, v in sorted(response.envs.items()):
                opts.envs.append((k, v))
            for m in response.mounts:
                if m.container_path in seen_mounts:
                    continue
                seen_mounts.add(m.container_path)
                opts.mounts.append(DeviceMount(m.container_path, m.host_path, m.read_only))
            for d in response.devices:
                if d.container_path in seen_devices:
                    continue
                seen_devices.add(d.container_path)
                opts.devices.append(DeviceNode(d.container_path, d.host_path, d.permissions or "rwm"))
            opts.annotations.update(response.annotations)
            opts.cdi_devices.extend(c.name for c in response.cdi_devices)
        return opts

    async def pre_start(self, pod: Mapping, container: Mapping) -> None:
        """PreStartContainer for each of the container's resources whose plugin asked for it."""
        resources = (self.pod_devices.get(_uid(pod)) or {}).get(str(container.get("name") or "")) or {}
        for resource, alloc in sorted(resources.items()):
            ep = self.endpoints.get(resource)
            if ep is None or not ep.options.pre_start_required:
                continue
            try:
                await asyncio.to_thread(ep.pre_start_container, sorted(alloc.ids()))
            except EndpointError as exc:
                raise DeviceAllocationError(f"device plugin PreStartContainer rpc failed with err: {exc}") from None

    # --- the pod resources API ------------------------------------------------------------

    def allocatable_devices(self) -> dict[str, dict[str, list[int]]]:
        """resource -> healthy device id -> its NUMA nodes."""
        out: dict[str, dict[str, list[int]]] = {}
        for resource, ids in sorted(self.healthy.items()):
            devices = self.all_devices.get(resource) or {}
            out[resource] = {i: _numa_nodes(devices.get(i)) for i in sorted(ids)}
        return out

    # --- topology hints (agent.cm.topology.HintProvider) ----------------------------------

    def get_topology_hints(self, pod: Mapping, container: Mapping) -> Hints:
        uid = _uid(pod)
        name = str(container.get("name") or "")
        out: dict[str, list[TopologyHint] | None] = {}
        for resource, needed in sorted(_device_limits(container).items()):
            if not self.is_device_resource(resource):
                continue
            held = ((self.pod_devices.get(uid) or {}).get(name) or {}).get(resource)
            if held is not None:
                out[resource] = self._hints_for_held(resource, held, needed)
                continue
            reusable = self._reusable(pod, resource, name)
            out[resource] = self._hints(resource, needed, reusable)
        return out

    def get_pod_topology_hints(self, pod: Mapping) -> Hints:
        init, app = _containers(pod)
        wanted: dict[str, int] = {}
        for c in app:
            for r, n in _device_limits(c).items():
                wanted[r] = wanted.get(r, 0) + n
        for c in init:
            for r, n in _device_limits(c).items():
                wanted[r] = max(wanted.get(r, 0), n)
        uid = _uid(pod)
        out: dict[str, list[TopologyHint] | None] = {}
        for resource, needed in sorted(wanted.items()):
            if not self.is_device_resource(resource):
                continue
            held: set[str] = set()
            for rs in (self.pod_devices.get(uid) or {}).values():
                if resource in rs:
                    held |= rs[resource].ids()
            if held:
                out[resource] = self._hints_for_held(resource, _Allocation(self._by_numa(resource, held), b""), needed)
            else:
                out[resource] = self._hints(resource, needed, set())
        return out

    def _hints_for_held(self, resource: str, held: _Allocation, needed: int) -> list[TopologyHint] | None:
        if len(held.ids()) != needed:
            return []
        nodes = {n for n in held.devices if n != NO_NUMA}
        if not nodes:
            return None
        return [TopologyHint(frozenset(nodes), True)]

    def _hints(self, resource: str, needed: int, reusable: set[str]) -> list[TopologyHint] | None:
        devices = self.all_devices.get(resource) or {}
        healthy = self.healthy.get(resource, set())
        if not any(_numa_nodes(devices.get(i)) for i in healthy):
            return None  # no topology information: any NUMA node will do
        available = (healthy - self.allocated_ids(resource)) | (reusable & healthy)
        numa = sorted({n for i in healthy for n in _numa_nodes(devices.get(i))})
        hints: list[TopologyHint] = []
        minimal = len(numa)
        for size in range(1, len(numa) + 1):
            for mask in itertools.combinations(numa, size):
                within = set(mask)
                if sum(1 for i in healthy if set(_numa_nodes(devices.get(i))) & within) >= needed:
                    minimal = min(minimal, size)
        for size in range(1, len(numa) + 1):
            for mask in itertools.combinations(numa, size):
                within = set(mask)
                if sum(1 for i in available if set(_numa_nodes(devices.get(i))) & within) >= needed:
                    hints.append(TopologyHint(frozenset(mask), size == minimal))
        return hints
