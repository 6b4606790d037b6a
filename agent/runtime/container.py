"""The CRI ``ContainerConfig`` for one container of a pod, and the facts the agent
records on it.

:func:`build_container_config` is what the runtime manager calls right before
CreateContainer. Besides the config it has the small host-side effects
upstream has at that moment: the container's log directory, the ``/etc/hosts``
file of the pod, the termination-message file (a fresh empty file per
container instance, mounted at ``terminationMessagePath``; its host path is
returned so the caller can read the message when the container exits), and the
directories of a volume ``subPath``.

What the agent records on the container (labels and annotations,
names.CRI_LABEL_* / names.CRI_ANNOTATION_*) is what it needs after a restart,
when the pod spec may be gone: who the container belongs to, the hash of the
spec it was made from (a different hash means "restart it"), the restart
count, where its termination message is, the grace period and the preStop hook
to stop it with, and its ports.

``runAsNonRoot`` without ``runAsUser``: upstream checks the image's user. The
builder does the same when the caller passes the image's user from
ImageStatus (``image_uid`` / ``image_username``); without them it can only
refuse an explicit ``runAsUser: 0``, and the image's user is not verified.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from agent import pods as podutil
from agent.logging import get_logger
from apiserver_min.api import names
from apiserver_min.api.quantity import Quantity, QuantityError, parse_quantity
from cri import api_pb2 as pb

from ..cm.devicemanager.options import DeviceRunOptions
from ..cm.qos import pod_qos_class
from .context import NodeContext
from .env import ObjectGetter, expand, expand_strict, make_environment, node_memory_capacity
from .errors import REASON_CREATE_CONTAINER_CONFIG, PodConfigError
from .sandbox import namespace_options, pod_hostname_and_domain, supplemental_groups

__all__ = [
    "ContainerSetup",
    "build_container_config",
    "container_hash",
    "read_termination_message",
    "container_labels",
    "container_annotations",
    "linux_resources",
    "pod_qos_class",
    "oom_score_adj",
    "pod_memory_limit",
    "milli_cpu_to_shares",
    "milli_cpu_to_quota",
    "security_context",
    "verify_run_as_non_root",
    "log_path",
    "MAX_TERMINATION_MESSAGE_LENGTH",
]

log = get_logger(__name__)

MAX_TERMINATION_MESSAGE_LENGTH = 4096

# Kernel limits on CFS shares and quota.
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MIN_QUOTA_PERIOD_US = 1000

GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
_CRITICAL_PRIORITY = 2_000_000_000
_NODE_CRITICAL_CLASS = "system-node-critical"

# What every container gets masked / read-only in /proc and /sys unless procMount is Unmasked.
DEFAULT_MASKED_PATHS = (
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
)
DEFAULT_READONLY_PATHS = (
    "/proc/asound",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)

# Volumes the container may never write to (upstream mounts them read-only whatever the mount says).
_READ_ONLY_VOLUME_TYPES = ("configMap", "secret", "downwardAPI", "projected")
_ETC_HOSTS = "/etc/hosts"
_PROPAGATION = {
    None: pb.PROPAGATION_PRIVATE,
    "None": pb.PROPAGATION_PRIVATE,
    "HostToContainer": pb.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": pb.PROPAGATION_BIDIRECTIONAL,
}


@dataclasses.dataclass
class ContainerSetup:
    """A container config and the host file its termination message will be written to
    (empty when the container has no terminationMessagePath)."""

    config: pb.ContainerConfig
    termination_message_host_path: str


def _config_error(message: str) -> PodConfigError:
    return PodConfigError(REASON_CREATE_CONTAINER_CONFIG, message)


def _format_pod(pod: dict) -> str:
    return f"{podutil.name(pod)}_{podutil.namespace(pod)}({podutil.uid(pod)})"


# --- the config -------------------------------------------------------------------------------


def build_container_config(
    pod: dict,
    container: dict,
    ctx: NodeContext,
    *,
    restart_count: int,
    pod_ip: str,
    pod_ips: Sequence[str] = (),
    volume_paths: Mapping[str, str],
    objects: ObjectGetter | None = None,
    service_env: Mapping[str, str] | None = None,
    image_uid: int | None = None,
    image_username: str = "",
    device_options: DeviceRunOptions | None = None,
    target_id: str = "",
) -> ContainerSetup:
    """The config for (re)creating ``container`` of ``pod`` for the ``restart_count``-th time.

    ``volume_paths`` maps the pod's volume names to their host paths (from
    VolumeManager.setup). ``image_uid``/``image_username`` are the image's user
    from ImageStatus, when known (runAsNonRoot checks and the default user).
    ``service_env`` holds the pod's service variables (:func:`~.env.service_environment`).
    ``device_options`` are what the device plugins' Allocate answered for the container:
    their variables come before the container's own (which win), their mounts before the
    volumes, their annotations under the agent's.
    ``target_id``: the runtime id of the container whose process namespace an ephemeral
    container joins (its ``targetContainerName``).
    Raises PodConfigError(CreateContainerConfigError).
    """
    name = container.get("name") or ""
    env = make_environment(
        pod, container, ctx, pod_ip=pod_ip, pod_ips=pod_ips, objects=objects, service_env=service_env
    )
    env_map = dict(env)
    verify_run_as_non_root(pod, container, image_uid, image_username)

    log_dir = os.path.join(ctx.pod_log_dir(podutil.namespace(pod), podutil.name(pod), podutil.uid(pod)), name)
    try:
        os.makedirs(log_dir, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise _config_error(f"create container log directory for container {name} failed: {exc}") from None

    image = container.get("image") or ""
    dev = device_options or DeviceRunOptions()
    annotations = dict(dev.annotations)
    annotations.update(container_annotations(pod, container, restart_count))
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=restart_count),
        image=pb.ImageSpec(image=image, user_specified_image=image),
        command=[expand(str(c), env_map) for c in container.get("command") or []],
        args=[expand(str(a), env_map) for a in container.get("args") or []],
        working_dir=container.get("workingDir") or "",
        envs=[pb.KeyValue(key=k, value=v) for k, v in [*dev.envs, *env]],
        labels=container_labels(pod, container),
        annotations=annotations,
        log_path=log_path(name, restart_count),
        stdin=bool(container.get("stdin")),
        stdin_once=bool(container.get("stdinOnce")),
        tty=bool(container.get("tty")),
    )
    config.mounts.extend(
        pb.Mount(container_path=m.container_path, host_path=m.host_path, readonly=m.read_only) for m in dev.mounts
    )
    config.mounts.extend(_volume_mounts(pod, container, ctx, volume_paths, env_map, pod_ip=pod_ip, pod_ips=pod_ips))
    config.devices.extend(
        pb.Device(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
        for d in dev.devices
    )
    config.CDI_devices.extend(pb.CDIDevice(name=n) for n in dev.cdi_devices)
    termination_path = ""
    message_path = container.get("terminationMessagePath") or ""
    if message_path:
        termination_path = _make_termination_message_file(pod, container, ctx)
        if termination_path:
            config.mounts.append(pb.Mount(host_path=termination_path, container_path=_absolute(message_path)))
    config.linux.resources.CopyFrom(linux_resources(pod, container, ctx))
    config.linux.security_context.CopyFrom(
        security_context(pod, container, ctx, image_uid=image_uid, image_username=image_username)
    )
    namespaces = config.linux.security_context.namespace_options
    if target_id and namespaces.pid == pb.CONTAINER:
        # A pod that shares one process namespace (or the node's) already shows it all.
        namespaces.pid = pb.TARGET
        namespaces.target_id = target_id
    return ContainerSetup(config=config, termination_message_host_path=termination_path)


def log_path(container_name: str, restart_count: int) -> str:
    """The container's log file, relative to the sandbox's log directory."""
    return f"{container_name}/{restart_count}.log"


def container_labels(pod: dict, container: dict) -> dict[str, str]:
    return {
        names.CRI_LABEL_POD_NAME: podutil.name(pod),
        names.CRI_LABEL_POD_NAMESPACE: podutil.namespace(pod),
        names.CRI_LABEL_POD_UID: podutil.uid(pod),
        names.CRI_LABEL_CONTAINER_NAME: container.get("name") or "",
        names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE,
    }


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def container_annotations(pod: dict, container: dict, restart_count: int) -> dict[str, str]:
    annotations = {
        names.CRI_ANNOTATION_CONTAINER_HASH: container_hash(container),
        names.CRI_ANNOTATION_CONTAINER_RESTART_COUNT: str(restart_count),
        names.CRI_ANNOTATION_TERMINATION_MESSAGE_PATH: container.get("terminationMessagePath") or "",
        names.CRI_ANNOTATION_TERMINATION_MESSAGE_POLICY: container.get("terminationMessagePolicy") or "File",
    }
    meta = pod.get("metadata") or {}
    if meta.get("deletionGracePeriodSeconds") is not None:
        annotations[names.CRI_ANNOTATION_POD_DELETION_GRACE_PERIOD] = str(int(meta["deletionGracePeriodSeconds"]))
    grace = podutil.spec(pod).get("terminationGracePeriodSeconds")
    if grace is not None:
        annotations[names.CRI_ANNOTATION_POD_TERMINATION_GRACE_PERIOD] = str(int(grace))
    pre_stop = (container.get("lifecycle") or {}).get("preStop")
    if pre_stop:
        annotations[names.CRI_ANNOTATION_PRESTOP_HANDLER] = _json(pre_stop)
    if container.get("ports"):
        annotations[names.CRI_ANNOTATION_CONTAINER_PORTS] = _json(container["ports"])
    return annotations


# --- hash -------------------------------------------------------------------------------------


def _normalize(value: Any, path: tuple[str, ...] = ()) -> Any:
    """Drop what a typed encoder would omit (null, empty string/list/map) and write
    quantities canonically, so equal specs hash equally however they were spelled."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _normalize(item, path + (key,))
            if item is None or item == "" or item == [] or item == {}:
                continue
            out[key] = item
        return out
    if isinstance(value, list):
        return [_normalize(item, path) for item in value]
    if len(path) >= 3 and path[-3:-1] in (("resources", "limits"), ("resources", "requests")):
        try:
            return parse_quantity(value).canonical()
        except QuantityError:
            return value
    return value


def container_hash(container: dict) -> str:
    """A stable hash (FNV-1a 32, hex, as upstream) of the container's whole spec.

    Every field of a running pod's container that can change at all (image,
    and for static pods anything) needs a restart to take effect, so the whole
    spec is hashed; key order and omitted-vs-empty fields do not matter.
    """
    data = json.dumps(_normalize(container), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return format(h, "x")


# --- termination messages ---------------------------------------------------------------------


def _absolute(path: str) -> str:
    return path if path.startswith("/") else "/" + path


def _make_termination_message_file(pod: dict, container: dict, ctx: NodeContext) -> str:
    """A new empty 0666 file under ``<pod dir>/containers/<name>/``; a random name
    keeps every instance of the container apart. Upstream goes on without the
    mount when the file cannot be made; so does this (with a log line)."""
    directory = os.path.join(ctx.pod_dir(podutil.uid(pod)), "containers", container.get("name") or "")
    try:
        os.makedirs(directory, mode=0o750, exist_ok=True)
        while True:
            path = os.path.join(directory, secrets.token_hex(4))
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                continue
            os.close(fd)
            os.chmod(path, 0o666)  # whatever the umask
            return path
    except OSError as exc:
        log.error(
            "Error on creating termination-log file", err=exc, pod=_format_pod(pod), container=container.get("name")
        )
        return ""


def read_termination_message(path: str, limit: int = MAX_TERMINATION_MESSAGE_LENGTH) -> str:
    """The last ``limit`` bytes of a termination-message file ("" when there is none)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read(limit)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"Error on reading termination log {path}: {exc}"
    return data.decode(errors="replace")


# --- mounts -----------------------------------------------------------------------------------


def _pod_volume(pod: dict, name: str) -> dict | None:
    for volume in podutil.spec(pod).get("volumes") or []:
        if volume.get("name") == name:
            return volume
    return None


def _no_backsteps(path: str) -> bool:
    return ".." not in path.split("/")


def _prepare_sub_path(volume_path: str, sub_path: str, mount_name: str, container_name: str) -> str:
    """``volume_path/sub_path``, created (directories with the volume's mode) when
    missing, and refused when it resolves outside the volume (a symlink planted by a
    container)."""
    root = os.path.realpath(volume_path)
    target = os.path.join(root, sub_path)
    try:
        mode = os.stat(root).st_mode & 0o7777
        if not os.path.lexists(target):
            current = root
            for part in [p for p in sub_path.split("/") if p and p != "."]:
                current = os.path.join(current, part)
                if os.path.islink(current):
                    current = os.path.realpath(current)
                if not _inside(current, root):
                    raise PermissionError(f"{current} is outside the volume")
                if not os.path.exists(current):
                    os.mkdir(current, mode)
                    os.chmod(current, mode)
    except OSError as exc:
        log.error(
            "Failed to create subPath directory for volumeMount of the container",
            err=exc,
            container=container_name,
            volume_mount=mount_name,
        )
        raise _config_error(
            f'failed to create subPath directory for volumeMount "{mount_name}" of container "{container_name}"'
        ) from None
    resolved = os.path.realpath(target)
    if not _inside(resolved, root):
        log.error(
            "Failed to prepare subPath for volumeMount of the container: it leaves the volume",
            container=container_name,
            volume_mount=mount_name,
            path=resolved,
        )
        raise _config_error(f'failed to prepare subPath for volumeMount "{mount_name}" of container "{container_name}"')
    return resolved


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _volume_mounts(
    pod: dict,
    container: dict,
    ctx: NodeContext,
    volume_paths: Mapping[str, str],
    env: Mapping[str, str],
    *,
    pod_ip: str,
    pod_ips: Sequence[str],
) -> list[pb.Mount]:
    container_name = container.get("name") or ""
    mounts: list[pb.Mount] = []
    ips = [ip for ip in pod_ips if ip] or ([pod_ip] if pod_ip else [])
    mount_hosts = bool(ips)
    for mount in container.get("volumeMounts") or []:
        volume_name = mount.get("name") or ""
        container_path = _absolute(mount.get("mountPath") or "")
        mount_hosts = mount_hosts and container_path != _ETC_HOSTS
        host_path = volume_paths.get(volume_name)
        if not host_path:
            raise _config_error(f'cannot find volume "{volume_name}" to mount into container "{container_name}"')
        sub_path = mount.get("subPath") or ""
        if mount.get("subPathExpr"):
            sub_path, missing = expand_strict(mount["subPathExpr"], env)
            if missing:
                raise _config_error(f"missing value for {', '.join(missing)}")
        if sub_path:
            if sub_path.startswith("/"):
                raise _config_error(f"error SubPath `{sub_path}` must not be an absolute path")
            if not _no_backsteps(sub_path):
                raise _config_error(f"unable to provision SubPath `{sub_path}`: must not contain '..'")
            host_path = _prepare_sub_path(host_path, sub_path, volume_name, container_name)
        propagation_mode = mount.get("mountPropagation")
        if propagation_mode not in _PROPAGATION:
            raise _config_error(f'invalid MountPropagation mode: "{propagation_mode}"')
        volume = _pod_volume(pod, volume_name) or {}
        forced_ro = any(volume.get(kind) is not None for kind in _READ_ONLY_VOLUME_TYPES) or bool(
            (volume.get("persistentVolumeClaim") or {}).get("readOnly")
        )
        mounts.append(
            pb.Mount(
                container_path=container_path,
                host_path=host_path,
                readonly=bool(mount.get("readOnly")) or forced_ro,
                propagation=_PROPAGATION[propagation_mode],
            )
        )
    if mount_hosts:
        mounts.append(pb.Mount(container_path=_ETC_HOSTS, host_path=_write_hosts_file(pod, ctx, ips)))
    return mounts


def _write_hosts_file(pod: dict, ctx: NodeContext, ips: Sequence[str]) -> str:
    """``<pod dir>/etc-hosts``: for the host network, the node's /etc/hosts; otherwise
    localhost entries and the pod's own name on each pod IP; then hostAliases."""
    spec = podutil.spec(pod)
    if spec.get("hostNetwork"):
        try:
            with open(_ETC_HOSTS, encoding="utf-8", errors="replace") as fh:
                node_hosts = fh.read()
        except OSError as exc:
            raise _config_error(f"cannot read the node's {_ETC_HOSTS}: {exc}") from None
        content = names.MANAGED_HOSTS_HEADER_HOST_NETWORK + node_hosts
    else:
        hostname, domain = pod_hostname_and_domain(pod, ctx)
        lines = [
            names.MANAGED_HOSTS_HEADER,
            "127.0.0.1\tlocalhost\n",
            "::1\tlocalhost ip6-localhost ip6-loopback\n",
            "fe00::0\tip6-localnet\n",
            "fe00::0\tip6-mcastprefix\n",
            "fe00::1\tip6-allnodes\n",
            "fe00::2\tip6-allrouters\n",
        ]
        for ip in ips:
            lines.append(f"{ip}\t{hostname}.{domain}\t{hostname}\n" if domain else f"{ip}\t{hostname}\n")
        content = "".join(lines)
    aliases = spec.get("hostAliases") or []
    if aliases:
        content += "\n# Entries added by HostAliases.\n" + "".join(
            f"{a.get('ip') or ''}\t{chr(9).join(a.get('hostnames') or [])}\n" for a in aliases
        )
    pod_dir = ctx.pod_dir(podutil.uid(pod))
    path = os.path.join(pod_dir, "etc-hosts")
    try:
        os.makedirs(pod_dir, mode=0o750, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        raise _config_error(f"cannot write {path}: {exc}") from None
    return path


# --- resources --------------------------------------------------------------------------------


def _quantities(container: dict, field: str) -> dict[str, Quantity]:
    raw = ((container.get("resources") or {}).get(field)) or {}
    result = {}
    for name, value in raw.items():
        try:
            result[name] = parse_quantity(value)
        except QuantityError as exc:
            raise _config_error(f"container {container.get('name')}: resources.{field}.{name}: {exc}") from None
    return result


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """CFS shares for a CPU request; zero means the kernel's minimum (2), not unset."""
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(milli_cpu: int, period: int) -> int:
    """CFS quota (µs per period) for a CPU limit; 0 (no limit) for none; at least 1 ms."""
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA_PERIOD_US, milli_cpu * period // 1000)


def _is_node_critical(pod: dict) -> bool:
    spec = podutil.spec(pod)
    if spec.get("priorityClassName") != _NODE_CRITICAL_CLASS:
        return False
    mirror = podutil.is_mirror(pod)
    priority = spec.get("priority")
    return podutil.is_static(pod) or mirror or (priority is not None and int(priority) >= _CRITICAL_PRIORITY)


def oom_score_adj(pod: dict, container: dict, memory_capacity: int) -> int:
    """Guaranteed (and node-critical) -997, BestEffort 1000, Burstable
    ``1000 - 1000*request/capacity`` kept within [3, 999] (upstream's bounds:
    above a Guaranteed container using all memory, below BestEffort)."""
    if _is_node_critical(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = pod_qos_class(pod)
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BESTEFFORT_OOM_SCORE_ADJ
    request = _quantities(container, "requests").get("memory", Quantity(0)).value()
    score = 1000 - (1000 * max(0, request)) // max(1, memory_capacity)
    if score < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if score == BESTEFFORT_OOM_SCORE_ADJ:
        return score - 1
    return score


def pod_memory_limit(pod: dict) -> int | None:
    """The pod-level memory limit its cgroup gets (bytes), or None when some app
    container has no memory limit: the larger of the app containers' sum and the
    largest init container's, plus the pod overhead."""
    total = 0
    for c in podutil.containers(pod):
        limit = _quantities(c, "limits").get("memory")
        if limit is None or limit.is_zero():
            return None
        total += limit.value()
    for c in podutil.init_containers(pod):
        limit = _quantities(c, "limits").get("memory")
        if limit is not None:
            total = max(total, limit.value())
    overhead = (podutil.spec(pod).get("overhead") or {}).get("memory")
    if overhead is not None:
        try:
            total += parse_quantity(overhead).value()
        except QuantityError:
            pass
    return total


@functools.lru_cache(maxsize=1)
def _cgroup2_unified() -> bool:
    return os.path.exists("/sys/fs/cgroup/cgroup.controllers")


@functools.lru_cache(maxsize=1)
def _huge_page_sizes() -> tuple[str, ...]:
    """The node's huge page sizes as the runtime names them ("2MB", "1GB")."""
    sizes = []
    try:
        entries = os.listdir("/sys/kernel/mm/hugepages")
    except OSError:
        return ()
    for entry in sorted(entries):
        m = re.fullmatch(r"hugepages-(\d+)kB", entry)
        if m:
            sizes.append(_page_size_name(int(m.group(1)) * 1024))
    return tuple(sizes)


def _page_size_name(size: int) -> str:
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    i = 0
    while size >= 1024 and size % 1024 == 0 and i < len(units) - 1:
        size //= 1024
        i += 1
    return f"{size}{units[i]}"


def linux_resources(pod: dict, container: dict, ctx: NodeContext) -> pb.LinuxContainerResources:
    """CPU shares from the request (a lone limit stands in for it), quota/period from
    the limit when CFS quota is enforced, the memory limit, the OOM score and
    huge page limits (0 for every size not asked for)."""
    requests = _quantities(container, "requests")
    limits = _quantities(container, "limits")
    cpu_limit = limits.get("cpu", Quantity(0))
    cpu_request = requests.get("cpu")
    resources = pb.LinuxContainerResources()
    if cpu_request is None and not cpu_limit.is_zero():
        resources.cpu_shares = milli_cpu_to_shares(cpu_limit.milli_value())
    else:
        resources.cpu_shares = milli_cpu_to_shares(cpu_request.milli_value() if cpu_request else 0)
    memory_limit = limits.get("memory", Quantity(0)).value()
    if memory_limit:
        resources.memory_limit_in_bytes = memory_limit
    if ctx.cpu_cfs_quota:
        period = ctx.cpu_cfs_quota_period_us
        resources.cpu_period = period
        resources.cpu_quota = milli_cpu_to_quota(cpu_limit.milli_value(), period)
    resources.oom_score_adj = oom_score_adj(pod, container, node_memory_capacity(ctx))
    wanted: dict[str, int] = {}
    for name, q in limits.items():
        if name.startswith("hugepages-"):
            try:
                size = parse_quantity(name.removeprefix("hugepages-")).value()
            except QuantityError:
                continue
            if size > 0:
                wanted[_page_size_name(size)] = q.value()
    for page_size in _huge_page_sizes():
        resources.hugepage_limits.append(pb.HugepageLimit(page_size=page_size, limit=wanted.get(page_size, 0)))
    if _cgroup2_unified():
        # Kill the whole container on OOM, not one process of it.
        resources.unified["memory.oom.group"] = "1"
    return resources


# --- security context -------------------------------------------------------------------------


def _effective_security_context(pod: dict, container: dict) -> dict:
    pod_sc = podutil.spec(pod).get("securityContext") or {}
    # The pod-level fields a container inherits (seccomp has its own precedence, see _seccomp).
    effective = {
        k: pod_sc[k] for k in ("seLinuxOptions", "runAsUser", "runAsGroup", "runAsNonRoot") if pod_sc.get(k) is not None
    }
    for key, value in (container.get("securityContext") or {}).items():
        if value is not None:
            effective[key] = value
    return effective


def verify_run_as_non_root(pod: dict, container: dict, image_uid: int | None, image_username: str) -> None:
    """Refuse a container with runAsNonRoot that would run as root (upstream's checks)."""
    sc = _effective_security_context(pod, container)
    if not sc.get("runAsNonRoot"):
        return
    name = container.get("name") or ""
    if sc.get("runAsUser") is not None:
        if int(sc["runAsUser"]) == 0:
            raise _config_error(
                f'container\'s runAsUser breaks non-root policy (pod: "{_format_pod(pod)}", container: {name})'
            )
        return
    if image_uid is not None and image_uid == 0:
        raise _config_error(
            f'container has runAsNonRoot and image will run as root (pod: "{_format_pod(pod)}", container: {name})'
        )
    if image_uid is None and image_username:
        raise _config_error(
            f"container has runAsNonRoot and image has non-numeric user "
            f"({image_username}), cannot verify user is non-root "
            f'(pod: "{_format_pod(pod)}", container: {name})'
        )


def _seccomp(pod: dict, container: dict, ctx: NodeContext) -> pb.SecurityProfile:
    """Container profile, else the pod's, else RuntimeDefault with --seccomp-default,
    else Unconfined. Localhost profiles are files under ``<root dir>/seccomp``."""
    profile = (container.get("securityContext") or {}).get("seccompProfile") or (
        podutil.spec(pod).get("securityContext") or {}
    ).get("seccompProfile")
    if profile is None:
        return pb.SecurityProfile(
            profile_type=pb.SecurityProfile.RuntimeDefault if ctx.seccomp_default else pb.SecurityProfile.Unconfined
        )
    kind = profile.get("type")
    if kind == "RuntimeDefault":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.RuntimeDefault)
    if kind == "Localhost":
        ref = profile.get("localhostProfile") or ""
        if not ref:
            raise _config_error("localhostProfile must be set if seccompProfile type is Localhost.")
        return pb.SecurityProfile(
            profile_type=pb.SecurityProfile.Localhost, localhost_ref=os.path.join(ctx.root_dir, "seccomp", ref)
        )
    return pb.SecurityProfile(profile_type=pb.SecurityProfile.Unconfined)


def security_context(
    pod: dict, container: dict, ctx: NodeContext, *, image_uid: int | None = None, image_username: str = ""
) -> pb.LinuxContainerSecurityContext:
    """The container's effective security context (pod settings, container overrides)."""
    sc = _effective_security_context(pod, container)
    out = pb.LinuxContainerSecurityContext()
    caps = sc.get("capabilities")
    if caps is not None:
        out.capabilities.add_capabilities.extend(str(c) for c in caps.get("add") or [])
        out.capabilities.drop_capabilities.extend(str(c) for c in caps.get("drop") or [])
    se = sc.get("seLinuxOptions")
    if se:
        out.selinux_options.CopyFrom(
            pb.SELinuxOption(
                user=se.get("user") or "",
                role=se.get("role") or "",
                type=se.get("type") or "",
                level=se.get("level") or "",
            )
        )
    if sc.get("runAsUser") is not None:
        out.run_as_user.value = int(sc["runAsUser"])
    else:
        if image_uid is not None:
            out.run_as_user.value = int(image_uid)
        out.run_as_username = image_username
    if sc.get("runAsGroup") is not None:
        out.run_as_group.value = int(sc["runAsGroup"])
    out.privileged = bool(sc.get("privileged"))
    out.readonly_rootfs = bool(sc.get("readOnlyRootFilesystem"))
    out.no_new_privs = sc.get("allowPrivilegeEscalation") is False
    out.seccomp.CopyFrom(_seccomp(pod, container, ctx))
    out.namespace_options.CopyFrom(namespace_options(pod))
    out.supplemental_groups.extend(supplemental_groups(pod))
    if sc.get("procMount") != "Unmasked":
        out.masked_paths.extend(DEFAULT_MASKED_PATHS)
        out.readonly_paths.extend(DEFAULT_READONLY_PATHS)
    return out
