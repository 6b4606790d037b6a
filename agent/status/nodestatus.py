"""The agent's Node object: registration, and the status it keeps posting.

Registration (``--register-node``) creates the Node named after the node with
upstream's default labels (host name, os, arch and their legacy beta keys), the
``--node-labels``, the ``--register-with-taints``, ``--provider-id`` and a first
status. A Node that already exists with that name is taken over: the labels and
annotation the agent owns and an empty ``spec.providerID`` are reconciled, and
huge page sizes the machine no longer has are dropped from its capacity, as
upstream does. Taints are not reconciled: they are set at creation only
(upstream's rule, and NodeRestriction refuses taint changes from a node).

The status loop runs every ``--node-status-update-frequency``: it reads the
Node, applies the status "setters" (addresses, capacity and allocatable,
versions, daemon endpoints, images, the pressure and Ready conditions) and
patches ``nodes/<name>/status`` when something other than a heartbeat changed,
or at least every ``nodeStatusReportFrequency``. The patch is a JSON merge patch
of what changed, carrying the ``resourceVersion`` read, so a concurrent writer
(the node lifecycle controller) makes it fail with 409 and the loop retries on
a fresh read instead of overwriting. Heartbeats bypass the client's rate limit
(the spec excludes them from ``--orch-api-qps``). When the Node is gone (404)
the agent registers it again. Condition transitions become node events
(``NodeReady``, ``NodeHasSufficientMemory``...) once the patch that made them
has been accepted, so a retried patch does not repeat them.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import ipaddress
import platform
import random
import socket
import time
from fractions import Fraction
from typing import Any, Awaitable, Callable, Iterable, Mapping

from apiserver_min.api import names
from apiserver_min.api.quantity import Format, Quantity
from apiserver_min.api.timeutil import format_rfc3339
from apiserver_min.api.timeutil import now as utc_now

from .. import logging as agent_logging
from ..events import EventRecorder

__all__ = [
    "NodeStatusManager",
    "HostFiles",
    "go_arch",
    "os_image",
    "detect_node_ip",
    "node_addresses",
    "resource_quantity",
    "resource_list",
    "node_images",
    "status_changed",
    "merge_patch",
    "runtime_version_from",
    "MAX_NAMES_PER_IMAGE",
    "node_hostname",
    "node_labels",
    "node_taints",
]

log = agent_logging.get_logger("nodestatus")

# Condition types and the node event reasons (upstream's, no product name in them).
READY = "Ready"
MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
EVENT_NODE_READY = "NodeReady"
EVENT_NODE_NOT_READY = "NodeNotReady"
EVENT_STARTING = "Starting"

# (type, reason and message under pressure, reason and message without, events) per
# pressure condition, in upstream's setter order (Ready comes last).
_PRESSURE = (
    (
        MEMORY_PRESSURE,
        (names.NODE_REASON_INSUFFICIENT_MEMORY, f"{names.AGENT_NAME} has insufficient memory available"),
        (names.NODE_REASON_SUFFICIENT_MEMORY, f"{names.AGENT_NAME} has sufficient memory available"),
        ("NodeHasInsufficientMemory", "NodeHasSufficientMemory"),
    ),
    (
        DISK_PRESSURE,
        (names.NODE_REASON_DISK_PRESSURE, f"{names.AGENT_NAME} has disk pressure"),
        (names.NODE_REASON_NO_DISK_PRESSURE, f"{names.AGENT_NAME} has no disk pressure"),
        ("NodeHasDiskPressure", "NodeHasNoDiskPressure"),
    ),
    (
        PID_PRESSURE,
        (names.NODE_REASON_INSUFFICIENT_PID, f"{names.AGENT_NAME} has insufficient PID available"),
        (names.NODE_REASON_SUFFICIENT_PID, f"{names.AGENT_NAME} has sufficient PID available"),
        ("NodeHasInsufficientPID", "NodeHasSufficientPID"),
    ),
)
READY_MESSAGE = f"{names.AGENT_NAME} is posting ready status"
RUNTIME_DOWN_MESSAGE = "container runtime is down"

NODE_STATUS_UPDATE_RETRY = 5  # attempts per tick, as upstream
REGISTER_BACKOFF_START = 0.1  # upstream: 100 ms doubling ...
REGISTER_BACKOFF_MAX = 7.0  # ... to 7 s
STATUS_JITTER = 0.04  # upstream's JitterUntil factor
STARTUP_READY_POLL = 0.5  # local readiness check until the node is first Ready
MAX_NAMES_PER_IMAGE = 5  # upstream's MaxNamesPerImageInNodeStatus

# The labels reconciled on an existing Node when the agent has a value for them
# (upstream's updateDefaultLabels list, renamed).
DEFAULT_LABEL_KEYS = (
    names.LABEL_HOSTNAME,
    names.LABEL_ZONE,
    names.LABEL_REGION,
    names.LABEL_ZONE_FAILURE_DOMAIN,
    names.LABEL_REGION_FAILURE_DOMAIN,
    names.LABEL_INSTANCE_TYPE,
    names.LABEL_INSTANCE_TYPE_BETA,
    names.LABEL_OS,
    names.LABEL_ARCH,
    names.LABEL_OS_BETA,
    names.LABEL_ARCH_BETA,
)

CPU, MEMORY, PODS, EPHEMERAL_STORAGE = "cpu", "memory", "pods", "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"
_BINARY_RESOURCES = (MEMORY, EPHEMERAL_STORAGE)

_GO_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "mips64": "mips64",
    "loongarch64": "loong64",
}


# --- host facts ---------------------------------------------------------------------------


def go_arch(machine: str | None = None) -> str:
    """``platform.machine()`` in the spelling the ``arch`` label and nodeInfo use (amd64, arm64)."""
    m = (machine if machine is not None else platform.machine()).lower()
    return _GO_ARCH.get(m, m)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def os_image(path: str = "/etc/os-release") -> str:
    """``PRETTY_NAME`` of os-release, unquoted; "Linux" when the file says nothing (as upstream)."""
    for line in _read(path).splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PRETTY_NAME":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            return value or "Linux"
    return "Linux"


@dataclasses.dataclass(frozen=True)
class HostFiles:
    """Where the machine's identity is read from (tests point these at their own files)."""

    machine_id: tuple[str, ...] = ("/etc/machine-id", "/var/lib/dbus/machine-id")
    product_uuid: str = "/sys/class/dmi/id/product_uuid"
    boot_id: str = "/proc/sys/kernel/random/boot_id"
    os_release: str = "/etc/os-release"

    def system_info(self) -> dict[str, str]:
        """The nodeInfo fields that come from the host (not the versions)."""
        machine_id = next((v for v in (_read(p) for p in self.machine_id) if v), "")
        return {
            "machineID": machine_id,
            # No DMI table (virtual machines, containers): upstream's cadvisor leaves it
            # empty; the machine id is a stable stand-in that keeps the field useful.
            "systemUUID": _read(self.product_uuid) or machine_id,
            "bootID": _read(self.boot_id),
            "kernelVersion": platform.release(),
            "osImage": os_image(self.os_release),
            "operatingSystem": "linux",
            "architecture": go_arch(),
        }


def _route_source(dst: str) -> str:
    """The source address the kernel would use towards ``dst`` (RTA_PREFSRC), or "".

    pyroute2 is loaded here, when a node address is detected, and used when present:
    its 160 modules (about 6 MB) stay out of an agent that never asks."""
    try:
        from pyroute2 import IPRoute
    except ImportError:
        return ""
    try:
        with IPRoute() as ipr:
            for msg in ipr.route("get", dst=dst):
                src = msg.get_attr("RTA_PREFSRC")
                if src:
                    return str(src)
    except Exception:  # no route, no netlink permission: the caller falls back
        return ""
    return ""


def _connect_source(family: int, target: tuple[str, int]) -> str:
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(target)  # no packet is sent: this only picks the route
            return s.getsockname()[0]
    except OSError:
        return ""


def detect_node_ip(prefer_ipv6: bool = False) -> str:
    """The address of the interface holding the default route (IPv4 first unless asked).

    Asks the kernel through netlink (pyroute2) for the preferred source towards a
    public address; falls back to the connected-UDP-socket trick, then loopback.
    """
    order = [
        ("1.1.1.1", socket.AF_INET, ("192.0.2.1", 9)),
        ("2606:4700:4700::1111", socket.AF_INET6, ("2001:db8::1", 9)),
    ]
    if prefer_ipv6:
        order.reverse()
    for dst, _, _ in order:
        if ip := _route_source(dst):
            return ip
    for _, family, target in order:
        if ip := _connect_source(family, target):
            return ip
    return "::1" if prefer_ipv6 else "127.0.0.1"


def node_addresses(
    node_ip: str, host_ip: str, hostname: str, detect: Callable[[bool], str] = detect_node_ip
) -> list[dict]:
    """InternalIP(s) and Hostname, as upstream's NodeAddress setter without a cloud provider.

    ``--node-ip`` wins (one address or a dual-stack pair); ``0.0.0.0``/``::`` or
    nothing means the default-route address (``::`` preferring IPv6), for which a
    ``host_ip`` computed by the caller is used when given.
    """
    ips: list[str] = []
    prefer_v6 = False
    for i, part in enumerate(p.strip() for p in (node_ip or "").split(",") if p.strip()):
        try:
            addr = ipaddress.ip_address(part)
        except ValueError:
            raise ValueError(f"--node-ip: {part!r} is not an IP address") from None
        if addr.is_unspecified:
            if i == 0:
                prefer_v6 = addr.version == 6
            continue
        ips.append(str(addr))
    if not ips:
        ips = [host_ip if host_ip and not prefer_v6 else detect(prefer_v6)]
    out = [{"type": "InternalIP", "address": ip} for ip in ips[:2]]
    if hostname:
        out.append({"type": "Hostname", "address": hostname})
    return out


# --- resources and images -----------------------------------------------------------------


def _reported(name: str) -> bool:
    return name in (CPU, MEMORY, PODS, EPHEMERAL_STORAGE) or name.startswith(HUGEPAGES_PREFIX)


def resource_quantity(name: str, value: int) -> str:
    """One container-manager figure (cpu in millicores, the rest in bytes or counts) as a quantity.

    Formats follow upstream: cpu and pods in decimal (``2``, ``1500m``, ``110``),
    memory, ephemeral storage and huge pages in binary (``16323588Ki``).
    """
    value = max(0, int(value))
    if name == CPU:
        return Quantity(Fraction(value, 1000), Format.DECIMAL_SI).canonical()
    if name in _BINARY_RESOURCES or name.startswith(HUGEPAGES_PREFIX):
        return Quantity(value, Format.BINARY_SI).canonical()
    return Quantity(value, Format.DECIMAL_SI).canonical()


def resource_list(values: Mapping[str, int]) -> dict[str, str]:
    """The node-status resources of a container-manager map (``pid`` and the like left out)."""
    return {k: resource_quantity(k, v) for k, v in sorted(values.items()) if _reported(k)}


def _image_field(image: Any, attr: str, key: str, default: Any) -> Any:
    if isinstance(image, Mapping):
        return image.get(key, default)
    return getattr(image, attr, default)


def node_images(images: Iterable[Any], max_images: int) -> list[dict]:
    """``status.images``: largest first, at most ``max_images`` (-1: all), digests then tags.

    Accepts CRI ``Image`` messages or dicts (``id``, ``repoTags``, ``repoDigests``,
    ``size``). Each entry keeps at most five names, as upstream. An image with no
    name at all is left out: nothing could refer to it.
    """
    items = []
    for img in images:
        size = int(_image_field(img, "size", "size", 0) or 0)
        ident = str(_image_field(img, "id", "id", "") or "")
        names_ = list(_image_field(img, "repo_digests", "repoDigests", ()) or ())
        names_ += list(_image_field(img, "repo_tags", "repoTags", ()) or ())
        items.append((size, ident, names_))
    # Upstream's ByImageSize: bigger first, equal sizes by descending id.
    items.sort(key=lambda t: (t[0], t[1]), reverse=True)
    if max_images > -1:
        items = items[:max_images]
    return [{"names": n[:MAX_NAMES_PER_IMAGE], "sizeBytes": size} for size, _, n in items if n]


# --- comparing and patching ---------------------------------------------------------------


def _without_heartbeats(status: Mapping | None) -> dict:
    out = copy.deepcopy(dict(status or {}))
    conds = out.get("conditions")
    if isinstance(conds, list):
        out["conditions"] = sorted(
            ({k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in conds if isinstance(c, dict)),
            key=lambda c: str(c.get("type", "")),
        )
    return out


def status_changed(old: Mapping | None, new: Mapping | None) -> bool:
    """Whether a status differs in more than the conditions' heartbeat times (upstream's rule)."""
    return _without_heartbeats(old) != _without_heartbeats(new)


_MISSING = object()


def merge_patch(old: Mapping, new: Mapping) -> dict:
    """The RFC 7386 merge patch turning ``old`` into ``new`` (lists are replaced whole)."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif before is _MISSING or before != value:
            patch[key] = copy.deepcopy(value)
    return patch


def _http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


async def runtime_version_from(cri) -> str:
    """``<runtime>://<version>`` (``containerd://1.6.20``) from a CRI client's Version call."""
    v = await cri.version()
    return f"{v.runtime_name}://{v.runtime_version}"


# --- the manager --------------------------------------------------------------------------


class NodeGone(Exception):
    """The Node object does not exist (404): it was deleted, or never registered."""


class NodeStatusManager:
    """Registers the node and keeps its status current; see the module docstring."""

    def __init__(
        self,
        cfg,
        client,
        *,
        node_name: str,
        cgroups,
        runtime_ready: Callable[[], bool | tuple[bool, str]],
        runtime_version: Callable[[], Awaitable[str]],
        list_images: Callable[[], Awaitable[list]],
        events: EventRecorder,
        version: str,
        host_ip: str,
        pressure: Callable[[], Mapping[str, bool]] | None = None,
        shutdown: Callable[[], str] | None = None,
        host_files: HostFiles | None = None,
        detect_ip: Callable[[bool], str] = detect_node_ip,
        extended_resources: Callable[[], tuple[Mapping[str, int], Mapping[str, int], Iterable[str]]] | None = None,
    ) -> None:
        """``runtime_ready`` answers True, False ("container runtime is down") or
        ``(False, reason)``; ``runtime_version`` answers ``containerd://1.6.20``;
        ``list_images`` answers CRI images. ``pressure`` (the eviction manager's, when
        there is one) maps MemoryPressure/DiskPressure/PIDPressure to True when under
        pressure; without it there is none. ``shutdown`` (the node shutdown manager's)
        answers why the node is not ready while it shuts down, "" otherwise."""
        self.cfg = cfg
        self.client = client
        self.node_name = node_name
        self.hostname = node_hostname(cfg)
        self.cgroups = cgroups
        self.runtime_ready = runtime_ready
        self.runtime_version = runtime_version
        self.list_images = list_images
        self.events = events
        self.version = version
        self.host_ip = host_ip
        self.pressure = pressure or (lambda: {})
        # The device plugins' resources: (capacity, allocatable, removed resources).
        self.extended_resources = extended_resources
        self.shutdown = shutdown or (lambda: "")
        self.host_files = host_files or HostFiles()
        self._detect_ip = detect_ip
        self.register_node = bool(getattr(cfg, "register_node", True))
        self.update_frequency = _seconds(getattr(cfg, "node_status_update_frequency", 10.0), 10.0)
        self.report_frequency = _seconds(getattr(cfg, "node_status_report_frequency", 300.0), 300.0)
        if (
            _source(cfg, "node_status_report_frequency") == "default"
            and _source(cfg, "node_status_update_frequency") != "default"
        ):
            # Upstream's documented compatibility rule: an explicit update frequency
            # also sets the report frequency unless that is given too.
            self.report_frequency = self.update_frequency
        self.max_images = int(getattr(cfg, "node_status_max_images", 50))
        self.node: dict | None = None
        self.registered = False
        self.registrations = 0  # successful registrations (a re-registration counts)
        self.last_report = 0.0  # monotonic time of the last accepted status patch
        self._system_info: dict[str, str] | None = None
        self._posted_ready: bool | None = None
        self._wake = asyncio.Event()

    # --- small accessors ------------------------------------------------------------------

    @property
    def node_uid(self) -> str:
        return ((self.node or {}).get("metadata") or {}).get("uid", "") or ""

    @property
    def _path(self) -> str:
        return f"/api/v1/nodes/{self.node_name}"

    def poke(self) -> None:
        """Compute and post the status now instead of at the next tick."""
        self._wake.set()

    # --- the node object ------------------------------------------------------------------

    def _labels(self) -> dict[str, str]:
        return node_labels(self.cfg, self.hostname)

    def _annotations(self) -> dict[str, str]:
        if getattr(self.cfg, "enable_controller_attach_detach", True):
            return {names.ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH: "true"}
        return {}

    def _taints(self) -> list[dict]:
        return node_taints(self.cfg)

    async def initial_node(self) -> tuple[dict, list[tuple[str, str, str]]]:
        """The Node to create, with its first status, and the events that status implies."""
        md: dict[str, Any] = {"name": self.node_name, "labels": self._labels()}
        if annotations := self._annotations():
            md["annotations"] = annotations
        spec: dict[str, Any] = {}
        if taints := self._taints():
            spec["taints"] = taints
        if not getattr(self.cfg, "register_schedulable", True):
            spec["unschedulable"] = True
        if provider_id := getattr(self.cfg, "provider_id", ""):
            spec["providerID"] = provider_id
        node = {"apiVersion": "v1", "kind": "Node", "metadata": md, "spec": spec, "status": {}}
        return await self.compute_status(node)

    async def register(self) -> dict:
        """Create (or take over) the Node, retrying with back-off until it works; returns it.

        With ``--register-node=false`` nothing is created: the Node is read (retrying
        transport errors) and ``{}`` returned when nobody has created it yet; the status
        loop keeps looking for it."""
        delay = REGISTER_BACKOFF_START
        while True:
            try:
                if not self.register_node:
                    return await self._find_existing()
                node = await self._try_register()
            except Exception as exc:
                log.warning("Unable to register node with API server", node=self.node_name, err=exc)
            else:
                self.node = node
                self.registered = True
                self.registrations += 1
                log.info("Successfully registered node", node=self.node_name, uid=self.node_uid)
                return node
            await asyncio.sleep(delay)
            delay = min(delay * 2, REGISTER_BACKOFF_MAX)

    async def _find_existing(self) -> dict:
        try:
            node = await self.client.get(self._path)
        except Exception as exc:
            if _http_status(exc) != 404:
                raise
            log.warning("Node not found and --register-node=false: waiting for it to be created", node=self.node_name)
            return {}
        self.node = node
        self.registered = True
        return node

    async def _try_register(self) -> dict:
        initial, pending = await self.initial_node()
        log.info("Attempting to register node", node=self.node_name)
        try:
            created = await self.client.create("/api/v1/nodes", initial)
        except Exception as exc:
            if _http_status(exc) != 409:
                raise
        else:
            self._emit(pending)
            self._note_posted(created)
            return created
        existing = await self.client.get(self._path)
        return await self._reconcile_existing(initial, existing)

    async def _reconcile_existing(self, initial: dict, existing: dict) -> dict:
        """Take over a Node of the same name: the agent's labels, annotation, providerID
        and huge page sizes are brought in line; everything else is left as found."""
        imd, emd = initial["metadata"], existing.get("metadata") or {}
        want_labels, have_labels = imd.get("labels") or {}, emd.get("labels") or {}
        owned = set(DEFAULT_LABEL_KEYS) | set((getattr(self.cfg, "node_labels", None) or {}))
        labels_patch = {k: v for k, v in want_labels.items() if k in owned and have_labels.get(k) != v}
        md_patch: dict[str, Any] = {}
        if labels_patch:
            md_patch["labels"] = labels_patch
        cmad = names.ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH
        have_ann = emd.get("annotations") or {}
        want_ann = (imd.get("annotations") or {}).get(cmad)
        if want_ann is not None and have_ann.get(cmad) != want_ann:
            md_patch["annotations"] = {cmad: want_ann}
        elif want_ann is None and cmad in have_ann:
            md_patch["annotations"] = {cmad: None}
        patch: dict[str, Any] = {}
        if md_patch:
            patch["metadata"] = md_patch
        provider_id = (initial.get("spec") or {}).get("providerID", "")
        if provider_id and not (existing.get("spec") or {}).get("providerID"):
            patch["spec"] = {"providerID": provider_id}
        node = existing
        if patch:
            log.info("Reconciling the existing node object", node=self.node_name, patch=patch)
            node = await self.client.patch(self._path, patch, patch_type="merge")
        # Huge page sizes the machine no longer offers leave capacity and allocatable.
        status = node.get("status") or {}
        ours = set((initial.get("status") or {}).get("capacity") or {})
        stale = {
            section: {k: None for k in (status.get(section) or {}) if k.startswith(HUGEPAGES_PREFIX) and k not in ours}
            for section in ("capacity", "allocatable")
        }
        stale = {s: v for s, v in stale.items() if v}
        if stale:
            node = await self.client.patch(
                f"{self._path}/status", {"status": stale}, patch_type="merge", rate_limited=False
            )
        return node

    # --- the status setters ---------------------------------------------------------------

    async def compute_status(self, node: dict) -> tuple[dict, list[tuple[str, str, str]]]:
        """A copy of ``node`` with the current status, and the (type, reason, message) node
        events its condition transitions call for. A setter that fails keeps the old value."""
        new = copy.deepcopy(node)
        status = new.setdefault("status", {})
        now = format_rfc3339(utc_now())
        pending: list[tuple[str, str, str]] = []
        try:
            status["addresses"] = await self._addresses()
        except Exception as exc:
            log.error("Failed to compute the node addresses", err=exc)
        self._set_resources(status)
        info = dict(status.get("nodeInfo") or {})
        if self._system_info is None:
            self._system_info = self.host_files.system_info()
        info.update(self._system_info)
        info.setdefault("containerRuntimeVersion", "")
        try:
            info["containerRuntimeVersion"] = await self.runtime_version()
        except Exception as exc:
            log.warning("Cannot read the container runtime version", err=exc)
        info[names.NODE_INFO_AGENT_VERSION_FIELD] = self.version
        info[names.NODE_INFO_PROXY_VERSION_FIELD] = self.version
        status["nodeInfo"] = info
        status["daemonEndpoints"] = {
            names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": int(getattr(self.cfg, "port", 10250))}
        }
        try:
            status["images"] = node_images(await self.list_images(), self.max_images)
        except Exception as exc:
            log.warning("Cannot list the images for the node status", err=exc)
        conditions = [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]
        pressure = dict(self.pressure() or {})
        for ctype, under, ok, (ev_under, ev_ok) in _PRESSURE:
            self._set_pressure(conditions, ctype, bool(pressure.get(ctype)), under, ok, ev_under, ev_ok, now, pending)
        self._set_ready(conditions, status, now, pending)
        status["conditions"] = conditions
        return new, pending

    async def _addresses(self) -> list[dict]:
        node_ip = getattr(self.cfg, "node_ip", "") or ""
        if self.host_ip or any(
            p.strip() and not ipaddress.ip_address(p.strip()).is_unspecified for p in node_ip.split(",")
        ):
            return node_addresses(node_ip, self.host_ip, self.hostname, self._detect_ip)
        # Only the default-route lookup talks to the kernel; keep it off the event loop.
        return await asyncio.to_thread(node_addresses, node_ip, self.host_ip, self.hostname, self._detect_ip)

    def _set_resources(self, status: dict) -> None:
        try:
            cap, alloc = self.cgroups.capacity(), self.cgroups.allocatable()
        except Exception as exc:
            log.error("Cannot read the node capacity", err=exc)
            return
        # Updated in place: extended resources someone else reports are kept, as upstream.
        capacity = dict(status.get("capacity") or {})
        allocatable = dict(status.get("allocatable") or {})
        capacity.update(resource_list(cap))
        ours = resource_list(alloc)
        allocatable.update(ours)
        plugin_allocatable: Mapping[str, int] = {}
        if self.extended_resources is not None:
            try:
                plugin_capacity, plugin_allocatable, removed = self.extended_resources()
            except Exception as exc:
                log.error("Cannot read the device plugin resources", err=exc)
            else:
                for name, count in plugin_capacity.items():
                    capacity[name] = str(count)
                for name in removed:  # a plugin gone for good: its resource drops to 0, as upstream
                    capacity[name] = "0"
        for name, value in capacity.items():
            if name not in ours:
                allocatable[name] = value
        for name, count in plugin_allocatable.items():
            allocatable[name] = str(count)  # the healthy devices only
        status["capacity"], status["allocatable"] = capacity, allocatable

    def _set_pressure(
        self,
        conditions: list[dict],
        ctype: str,
        under: bool,
        reason_under,
        reason_ok,
        event_under: str,
        event_ok: str,
        now: str,
        pending: list,
    ) -> None:
        """Upstream's pressure setter: a missing condition starts Unknown, so the first
        status records the "has sufficient" event."""
        cond = next((c for c in conditions if c.get("type") == ctype), None)
        if cond is None:
            cond = {"type": ctype, "status": "Unknown", "lastTransitionTime": now}
            conditions.append(cond)
        cond["lastHeartbeatTime"] = now
        want = "True" if under else "False"
        reason, message = reason_under if under else reason_ok
        if cond.get("status") != want:
            cond["lastTransitionTime"] = now
            pending.append(
                ("Normal", event_under if under else event_ok, self._event_message(event_under if under else event_ok))
            )
        cond.update(status=want, reason=reason, message=message)

    def _not_ready_reasons(self, status: dict) -> list[str]:
        errs: list[str] = []
        try:
            answer = self.runtime_ready()
        except Exception as exc:
            answer = (False, f"container runtime status check failed: {exc}")
        ready, why = answer if isinstance(answer, tuple) else (bool(answer), "")
        if not ready:
            errs.append(why or RUNTIME_DOWN_MESSAGE)
        shutting_down = self.shutdown()
        if shutting_down:
            errs.append(shutting_down)
        required = [CPU, MEMORY, PODS]
        if getattr(self.cfg, "local_storage_capacity_isolation", True):
            required.append(EPHEMERAL_STORAGE)
        capacity = status.get("capacity") or {}
        missing = [r for r in required if r not in capacity]
        if missing:
            errs.append(f"missing node capacity for resources: {', '.join(missing)}")
        return errs

    def _set_ready(self, conditions: list[dict], status: dict, now: str, pending: list) -> None:
        errs = self._not_ready_reasons(status)
        if errs:
            new = {"type": READY, "status": "False", "reason": names.NODE_REASON_NOT_READY, "message": ",".join(errs)}
        else:
            new = {"type": READY, "status": "True", "reason": names.NODE_REASON_READY, "message": READY_MESSAGE}
        new["lastHeartbeatTime"] = now
        for i, cond in enumerate(conditions):
            if cond.get("type") == READY:
                if cond.get("status") == new["status"]:
                    new["lastTransitionTime"] = cond.get("lastTransitionTime") or now
                else:
                    new["lastTransitionTime"] = now
                    reason = EVENT_NODE_READY if new["status"] == "True" else EVENT_NODE_NOT_READY
                    pending.append(("Normal", reason, self._event_message(reason)))
                conditions[i] = new
                return
        new["lastTransitionTime"] = now
        conditions.append(new)

    def _event_message(self, reason: str) -> str:
        return f"Node {self.node_name} status is now: {reason}"

    def _emit(self, pending: Iterable[tuple[str, str, str]]) -> None:
        for type_, reason, message in pending:
            self.events.record(None, type_, reason, message)

    def _note_posted(self, node: dict) -> None:
        self.node = node
        self.last_report = time.monotonic()
        ready = next(
            (
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if isinstance(c, dict) and c.get("type") == READY
            ),
            None,
        )
        self._posted_ready = ready is not None and ready.get("status") == "True"

    # --- the loop -------------------------------------------------------------------------

    async def sync_once(self) -> bool:
        """One tick: register if needed, then read, compute and (if due) patch the status.

        Returns True when a status was posted (a registration posts one)."""
        registered_now = False
        for attempt in range(NODE_STATUS_UPDATE_RETRY):
            if self.register_node and not self.registered:
                await self.register()
                registered_now = True
            try:
                return await self._try_update(attempt) or registered_now
            except NodeGone:
                self.registered = False
                self.node = None
                if not self.register_node:
                    log.error("Node not found and --register-node=false: cannot post its status", node=self.node_name)
                    return False
                log.warning("The node object is gone; registering it again", node=self.node_name)
            except Exception as exc:
                log.warning("Error updating node status, will retry", node=self.node_name, attempt=attempt + 1, err=exc)
        log.error("Update node status exceeds retry count", node=self.node_name)
        return False

    async def _try_update(self, attempt: int) -> bool:
        # The first read may come from the server's cache (upstream reads resourceVersion=0);
        # a stale copy only costs a 409 and a second, fresh read.
        params = {"resourceVersion": "0"} if attempt == 0 else None
        try:
            node = await self.client.get(self._path, params=params, rate_limited=False)
        except Exception as exc:
            if _http_status(exc) == 404:
                raise NodeGone() from None
            raise
        new, pending = await self.compute_status(node)
        due = time.monotonic() - self.last_report >= self.report_frequency or self.last_report == 0.0
        if not status_changed(node.get("status"), new["status"]) and not due:
            self.node = node
            return False
        patch = {
            "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion", "")},
            "status": merge_patch(node.get("status") or {}, new["status"]),
        }
        try:
            updated = await self.client.patch(f"{self._path}/status", patch, patch_type="merge", rate_limited=False)
        except Exception as exc:
            if _http_status(exc) == 404:
                raise NodeGone() from None
            raise
        self._emit(pending)
        self._note_posted(updated)
        return True

    async def run(self) -> None:
        """Post the status every ``--node-status-update-frequency`` forever."""
        self.events.record(None, "Normal", EVENT_STARTING, f"Starting {names.AGENT_NAME}.")
        while True:
            await self.sync_once()
            await self._wait_next()

    async def _wait_next(self) -> None:
        """Sleep until the next tick (with upstream's 4 % jitter), a :meth:`poke`, or - until
        the node was first posted Ready - the runtime becoming ready, so a new node turns
        Ready without waiting a whole period."""
        deadline = time.monotonic() + self.update_frequency * (1 + random.random() * STATUS_JITTER)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            step = left if self._posted_ready else min(left, STARTUP_READY_POLL)
            try:
                async with asyncio.timeout(step):
                    await self._wake.wait()
            except asyncio.TimeoutError:
                pass
            if self._wake.is_set():
                self._wake.clear()
                return
            if not self._posted_ready and self._locally_ready():
                return

    def _locally_ready(self) -> bool:
        try:
            answer = self.runtime_ready()
        except Exception:
            return False
        return bool(answer[0] if isinstance(answer, tuple) else answer)


def node_hostname(cfg: Any) -> str:
    """The node's hostname label: ``--hostname-override`` or the machine's, lower case."""
    return (getattr(cfg, "hostname_override", "") or socket.gethostname()).strip().lower()


def node_labels(cfg: Any, hostname: str) -> dict[str, str]:
    """The labels the node registers with: hostname, OS and architecture, then ``--node-labels``."""
    arch = go_arch()
    labels = {
        names.LABEL_HOSTNAME: hostname,
        names.LABEL_OS: "linux",
        names.LABEL_ARCH: arch,
        names.LABEL_OS_BETA: "linux",
        names.LABEL_ARCH_BETA: arch,
    }
    for key, value in (getattr(cfg, "node_labels", None) or {}).items():
        labels[str(key)] = str(value)  # --node-labels override the defaults, as upstream
    return labels


def node_taints(cfg: Any) -> list[dict]:
    """The taints the node registers with: ``--register-with-taints``, and unschedulable."""
    out = []
    for t in getattr(cfg, "register_with_taints", ()) or ():
        key, value, effect = (
            (t.key, t.value, t.effect)
            if not isinstance(t, Mapping)
            else (t.get("key", ""), t.get("value", ""), t.get("effect", ""))
        )
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        out.append(taint)
    if not getattr(cfg, "register_schedulable", True):
        out.append({"key": names.TAINT_UNSCHEDULABLE, "effect": "NoSchedule"})
    return out


def _source(cfg: Any, attr: str) -> str:
    try:
        return str(cfg.source(attr))
    except Exception:
        return "default"


def _seconds(value: Any, default: float) -> float:
    if value is None:
        return default
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return float(value)
