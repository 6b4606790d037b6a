"""Pod volumes on this node: set up before the containers start, torn down after the pod.

Every volume becomes a host path that build_container_config mounts into
containers:

* ``emptyDir`` - ``<pod dir>/volumes/orch.io~empty-dir/<name>``, mode 0777; with
  ``medium: Memory`` a tmpfs is mounted there, sized like upstream (the node's
  allocatable memory, or the pod's memory limit, or ``sizeLimit``, whichever is
  smallest). A disk ``sizeLimit`` is not enforced by the file system: it is
  recorded (:meth:`VolumeManager.empty_dir_size_limits`) for eviction.
* ``hostPath`` - the path itself, after upstream's ``type`` check (the ``*OrCreate``
  types create what is missing).
* ``persistentVolumeClaim`` and ``ephemeral`` (the claim ``<pod>-<volume>`` the
  control plane makes for the pod, which the pod must own) - the path of the claim's
  bound volume, when that volume is a ``local`` one (the path must exist) or a
  ``hostPath`` one (its ``type`` check, as above; a directory the bundled local-path provisioner planned, annotated
  ``pv.orch.io/provisioned-by: orch.io/local-path``, is created mode 0777 here, on the
  node, as k3s's provisioner does). The claim and volume come from the object getter
  (cluster mode: the object cache reads them, as the Node authorizer allows). While the
  claim is missing, terminating or not yet bound the pod waits (``FailedMount``, retried);
  other volume sources, block volumes and ``mountOptions`` are refused naming what is
  not supported. The claim's ``readOnly`` makes every mount of it read-only
  (``container.py``).
* ``downwardAPI`` - files of pod fields and container resources, needing nothing
  but the pod, so it works in standalone mode too.
* ``configMap``, ``secret`` and ``projected`` (configMap, secret and downwardAPI
  sources) - files of objects from the :data:`~agent.runtime.env.ObjectGetter`;
  without one (standalone mode) such a volume is refused with ``FailedMount``.
  Projected ``serviceAccountToken`` sources need the TokenRequest API and are
  refused too.

Data volumes (configMap, secret, downwardAPI, projected) are written the way
upstream's atomic writer does it, so a container never sees half an update:
the files go to a new hidden directory ``..<timestamp>.<random>``, the
``..data`` symlink is swapped to it with one rename, and the user-visible
names are symlinks through ``..data``. Secret, downwardAPI and projected
volumes live on a tmpfs (never on disk), as upstream.

``setup`` is idempotent: the pod worker calls it on every sync, which also
refreshes the data volumes. File-system work runs in a worker thread (a hung
hostPath must not stall the event loop); the object getter is called on the
event loop beforehand.

Not done: fsGroup ownership of volume files, hugepage-backed emptyDirs, persistent
volume sources other than ``local`` and ``hostPath``, and the other in-tree volume
types (they are refused).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import dataclasses
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from agent import pods as podutil
from agent.logging import get_logger
from apiserver_min.api import names
from apiserver_min.api.persistentvolumes import claim_controlled_by, volume_sources
from apiserver_min.api.quantity import QuantityError, parse_quantity
from apiserver_min.api.validation import go_quote

from .container import pod_memory_limit
from .context import NodeContext
from .env import (
    ObjectGetter,
    configmap_data,
    container_resource_value,
    get_object,
    metadata_field_value,
    node_memory_capacity,
    secret_data,
)
from .errors import REASON_FAILED_MOUNT, PodConfigError

__all__ = ["VolumeManager", "atomic_write", "mount_points", "DATA_DIR_NAME"]

log = get_logger(__name__)

DATA_DIR_NAME = "..data"
_DATA_DIR_TMP = "..data_tmp"
_DEFAULT_MODE = 0o644
_EMPTY_DIR_MODE = 0o777
_MNT_DETACH = 2

# Volume source fields this manager understands, by the plugin directory they use.
_SUPPORTED = (
    "emptyDir",
    "hostPath",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
    "persistentVolumeClaim",
    "ephemeral",
)
# Persistent volume sources this agent mounts.
_PV_SOURCES = ("local", "hostPath")
_LOCAL_PATH_MODE = 0o777
KIND_CLAIM = "PersistentVolumeClaim"
KIND_VOLUME = "PersistentVolume"
# Volumes whose files the agent writes from API objects and the pod itself: kept up
# to date while the pod runs. Volume source key -> plugin directory name.
_DATA_VOLUME_KEYS = {
    "configMap": names.VOLUME_PLUGIN_CONFIGMAP,
    "secret": names.VOLUME_PLUGIN_SECRET,
    "downwardAPI": names.VOLUME_PLUGIN_DOWNWARD_API,
    "projected": names.VOLUME_PLUGIN_PROJECTED,
}


@dataclasses.dataclass(frozen=True)
class _Payload:
    """What to write into a data volume: relative path -> (content, mode)."""

    files: dict[str, tuple[bytes, int]]
    tmpfs: bool


class _MountFailed(Exception):
    """One volume's set-up failure, in upstream's words (wrapped with the volume name)."""


class _ClaimNotReady(Exception):
    """A claim the pod waits for (missing, terminating, unbound): retried on later syncs."""


@dataclasses.dataclass(frozen=True)
class _ClaimPath:
    """Where a claim's volume is on this node, and how to check or create it."""

    path: str
    host_path_type: str  # a hostPath type; "" for a local volume (the path must exist)
    local: bool
    create_mode: int  # the mode of a directory created for it (DirectoryOrCreate)


# --- mounts -------------------------------------------------------------------------------------


def _unescape_mount_path(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 3 < len(text) and text[i + 1 : i + 4].isdigit():
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def mount_points(under: str = "/") -> dict[str, str]:
    """Mount points at or below ``under`` -> their file-system type (from mountinfo)."""
    result: dict[str, str] = {}
    root = os.path.realpath(under).rstrip("/") or "/"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return result
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        point = _unescape_mount_path(fields[4])
        if root == "/" or point == root or point.startswith(root + "/"):
            result[point] = right.split()[0] if right.split() else ""
    return result


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _mount_tmpfs(target: str, size: int) -> None:
    """mount(2) a tmpfs of ``size`` bytes at ``target`` (no fork of a mount binary)."""
    data = f"size={size}".encode()
    if _c().mount(b"tmpfs", target.encode(), b"tmpfs", ctypes.c_ulong(0), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs at {target} (size={size}): {os.strerror(err)}")


def _unmount(target: str) -> None:
    """umount2(2); a busy mount is detached lazily so teardown can finish."""
    if _c().umount2(target.encode(), 0) == 0:
        return
    err = ctypes.get_errno()
    if err == errno.EBUSY and _c().umount2(target.encode(), _MNT_DETACH) == 0:
        log.warning("Volume mount was busy, detached it lazily", path=target)
        return
    if err in (errno.EINVAL, errno.ENOENT):  # not mounted (any more)
        return
    raise OSError(err, f"unmount {target}: {os.strerror(err)}")


# --- the atomic writer ----------------------------------------------------------------------------


def _check_payload_path(path: str) -> None:
    if not path:
        raise _MountFailed("invalid path: must not be empty")
    if path.startswith("/"):
        raise _MountFailed(f"invalid path {go_quote(path)}: must be relative path")
    parts = path.split("/")
    if ".." in parts:
        raise _MountFailed(f"invalid path {go_quote(path)}: must not contain '..'")
    if path.startswith(".."):
        raise _MountFailed(f"invalid path {go_quote(path)}: must not start with '..'")


def _read_current(data_dir: str, files: Mapping[str, tuple[bytes, int]]) -> bool:
    """Whether ``data_dir`` holds exactly ``files`` already."""
    present = set()
    for dirpath, _dirs, filenames in os.walk(data_dir):
        for filename in filenames:
            present.add(os.path.relpath(os.path.join(dirpath, filename), data_dir))
    if present != set(files):
        return False
    for rel, (content, mode) in files.items():
        full = os.path.join(data_dir, rel)
        try:
            if stat.S_IMODE(os.lstat(full).st_mode) != mode:
                return False
            with open(full, "rb") as fh:
                if fh.read() != content:
                    return False
        except OSError:
            return False
    return True


def atomic_write(target_dir: str, files: Mapping[str, tuple[bytes, int]]) -> bool:
    """Make ``target_dir`` show exactly ``files`` (path -> (content, mode)), switching
    from the old content to the new one with a single rename. Returns whether
    anything was written."""
    for rel in files:
        _check_payload_path(rel)
    files = {os.path.normpath(rel): value for rel, value in files.items()}
    data_link = os.path.join(target_dir, DATA_DIR_NAME)
    old_ts = os.readlink(data_link) if os.path.islink(data_link) else ""
    old_ts_path = os.path.join(target_dir, old_ts) if old_ts else ""
    visible = {rel.split("/", 1)[0] for rel in files}
    if old_ts_path and os.path.isdir(old_ts_path) and _read_current(old_ts_path, files):
        _link_visible(target_dir, visible)
        return False

    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    new_ts_path = tempfile.mkdtemp(prefix=stamp, dir=target_dir)
    try:
        os.chmod(new_ts_path, 0o755)
        for rel, (content, mode) in files.items():
            full = os.path.join(new_ts_path, rel)
            os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
            with open(full, "wb") as fh:
                fh.write(content)
            os.chmod(full, mode)
        tmp_link = os.path.join(target_dir, _DATA_DIR_TMP)
        if os.path.lexists(tmp_link):
            os.unlink(tmp_link)
        os.symlink(os.path.basename(new_ts_path), tmp_link)
        os.rename(tmp_link, data_link)
    except BaseException:
        shutil.rmtree(new_ts_path, ignore_errors=True)
        raise
    _link_visible(target_dir, visible)
    # Names of the old content that the new one lacks.
    for entry in os.listdir(target_dir):
        if entry.startswith(".."):
            continue
        full = os.path.join(target_dir, entry)
        if entry not in visible and os.path.islink(full):
            os.unlink(full)
    if old_ts_path and os.path.basename(old_ts_path) != os.path.basename(new_ts_path):
        shutil.rmtree(old_ts_path, ignore_errors=True)
    return True


def _link_visible(target_dir: str, visible: Iterable[str]) -> None:
    for name in visible:
        full = os.path.join(target_dir, name)
        want = os.path.join(DATA_DIR_NAME, name)
        if os.path.islink(full) and os.readlink(full) == want:
            continue
        if os.path.lexists(full):
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
        os.symlink(want, full)


# --- the manager ------------------------------------------------------------------------------------


class VolumeManager:
    """Sets up and tears down the volumes of the pods on this node."""

    def __init__(self, ctx: NodeContext, *, objects: ObjectGetter | None = None) -> None:
        self.ctx = ctx
        self.objects = objects
        # Cluster mode: fetch what a pod's volumes reference before set-up (async), and
        # answer serviceAccountToken projections from what was fetched (sync).
        self.prefetch: Callable[[dict], Awaitable[None]] | None = None
        self.tokens: Callable[[dict, Mapping[str, Any]], str | None] | None = None
        # Whether memory-backed volumes get a tmpfs. Only the hollow nodes of the scale
        # benchmark (tests/bench/hollow.py, many agents in one process, nothing running in
        # the "containers") turn it off: their volumes are plain directories.
        self.tmpfs = True
        self._locks: dict[str, asyncio.Lock] = {}
        self._size_limits: dict[str, dict[str, tuple[str, int]]] = {}

    # -- paths -----------------------------------------------------------------------------

    def pods_dir(self) -> str:
        return os.path.join(self.ctx.root_dir, "pods")

    def volume_dir(self, pod_uid: str, plugin: str, name: str) -> str:
        return os.path.join(self.ctx.pod_dir(pod_uid), "volumes", plugin, name)

    def empty_dir_size_limits(self, pod_uid: str) -> dict[str, tuple[str, int]]:
        """Disk-backed emptyDirs of the pod with a sizeLimit: name -> (path, bytes)."""
        return dict(self._size_limits.get(pod_uid, {}))

    def _lock(self, pod_uid: str) -> asyncio.Lock:
        return self._locks.setdefault(pod_uid, asyncio.Lock())

    # -- set-up ----------------------------------------------------------------------------

    async def setup(self, pod: dict) -> dict[str, str]:
        """Set up every volume of ``pod``; volume name -> host path.

        Raises PodConfigError(FailedMount) naming the first volume that failed,
        in upstream's words (``MountVolume.SetUp failed for volume "x" : ...``).
        """
        uid = podutil.uid(pod)
        if not uid:
            raise PodConfigError(REASON_FAILED_MOUNT, "pod has no metadata.uid")
        if self.prefetch is not None:
            await self.prefetch(pod)
        async with self._lock(uid):
            plans: list[tuple[dict, _Payload | _ClaimPath | None]] = []
            for volume in podutil.spec(pod).get("volumes") or []:
                try:
                    if volume.get("persistentVolumeClaim") is not None or volume.get("ephemeral") is not None:
                        plans.append((volume, self._claim_path(pod, volume)))
                    else:
                        plans.append((volume, self._payload(pod, volume)))
                except _MountFailed as exc:
                    raise self._failed(volume, str(exc)) from None
                except _ClaimNotReady as exc:
                    name = volume.get("name") or ""
                    raise PodConfigError(
                        REASON_FAILED_MOUNT,
                        f"Unable to attach or mount volumes: unmounted volumes=[{name}], "
                        f"unattached volumes=[{name}]: {exc}",
                    ) from None
            paths, limits = await asyncio.to_thread(self._setup_all, pod, plans)
            self._size_limits[uid] = limits
            return paths

    async def refresh(self, pod: dict) -> list[str]:
        """Bring the data volumes (configMap, secret, downwardAPI, projected) of a
        running pod up to date: what the referenced objects, the pod's own fields
        and its tokens say now. Only volumes set up before are touched (a volume
        directory that does not exist belongs to a pod whose set-up has not run);
        a file changes only when its content does, by the same atomic switch as
        set-up. Returns the names of the volumes that changed.

        Raises PodConfigError(FailedMount) naming the first volume whose content
        cannot be made (say, a referenced ConfigMap that is gone without
        ``optional``); the volume keeps its last content, as upstream's does.
        """
        uid = podutil.uid(pod)
        volumes = [
            v for v in podutil.spec(pod).get("volumes") or [] if any(v.get(k) is not None for k in _DATA_VOLUME_KEYS)
        ]
        if not uid or not volumes:
            return []
        if self.prefetch is not None:
            await self.prefetch(pod)
        async with self._lock(uid):
            plans: list[tuple[str, dict[str, tuple[bytes, int]]]] = []
            for volume in volumes:
                plugin = next(p for k, p in _DATA_VOLUME_KEYS.items() if volume.get(k) is not None)
                path = self.volume_dir(uid, plugin, volume.get("name") or "")
                try:
                    payload = self._payload(pod, volume)
                except _MountFailed as exc:
                    raise self._failed(volume, str(exc)) from None
                assert payload is not None
                plans.append((path, payload.files))

            def write() -> list[str]:
                changed = []
                for (path, files), volume in zip(plans, volumes):
                    if not os.path.isdir(path):
                        continue
                    try:
                        if atomic_write(path, files):
                            changed.append(volume.get("name") or "")
                    except _MountFailed as exc:
                        raise self._failed(volume, str(exc)) from None
                    except OSError as exc:
                        raise self._failed(volume, _os_error_text(exc)) from None
                return changed

            changed = await asyncio.to_thread(write)
        if changed:
            log.v(2).info("Updated the content of pod volumes", pod=podutil.full_name(pod), volumes=changed)
        return changed

    def _failed(self, volume: dict, detail: str) -> PodConfigError:
        return PodConfigError(
            REASON_FAILED_MOUNT, f'MountVolume.SetUp failed for volume "{volume.get("name")}" : {detail}'
        )

    def _setup_all(
        self, pod: dict, plans: list[tuple[dict, _Payload | _ClaimPath | None]]
    ) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
        """In a worker thread: every volume's file-system work; (paths, disk size limits)."""
        paths: dict[str, str] = {}
        limits: dict[str, tuple[str, int]] = {}
        for volume, payload in plans:
            try:
                paths[volume.get("name") or ""] = self._setup_one(pod, volume, payload, limits)
            except _MountFailed as exc:
                raise self._failed(volume, str(exc)) from None
            except OSError as exc:
                raise self._failed(volume, _os_error_text(exc)) from None
        return paths, limits

    def _setup_one(
        self, pod: dict, volume: dict, payload: _Payload | _ClaimPath | None, limits: dict[str, tuple[str, int]]
    ) -> str:
        uid = podutil.uid(pod)
        name = volume.get("name") or ""
        if isinstance(payload, _ClaimPath):
            return _setup_claim_path(payload)
        if volume.get("emptyDir") is not None:
            source = volume["emptyDir"]
            path = self.volume_dir(uid, names.VOLUME_PLUGIN_EMPTY_DIR, name)
            medium = source.get("medium") or ""
            size_limit = _size_limit(source)
            if medium == "Memory":
                self._setup_tmpfs(pod, path, size_limit)
            elif medium == "":
                _setup_dir(path, _EMPTY_DIR_MODE)
                if size_limit:
                    limits[name] = (path, size_limit)
            else:
                raise _MountFailed(f"emptyDir medium {go_quote(medium)} is not supported on this node")
            return path
        if volume.get("hostPath") is not None:
            return _setup_host_path(volume["hostPath"])
        assert payload is not None
        plugin = next(p for k, p in _DATA_VOLUME_KEYS.items() if volume.get(k) is not None)
        path = self.volume_dir(uid, plugin, name)
        if payload.tmpfs:
            self._setup_tmpfs(pod, path, 0)
        else:
            _setup_dir(path, _EMPTY_DIR_MODE)
        atomic_write(path, payload.files)
        return path

    def _setup_tmpfs(self, pod: dict, path: str, size_limit: int) -> None:
        _setup_dir(path, _EMPTY_DIR_MODE)
        if not self.tmpfs or mount_points(path).get(os.path.realpath(path)) == "tmpfs":
            return
        size = node_memory_capacity(self.ctx)
        pod_limit = pod_memory_limit(pod)
        if pod_limit and 0 < pod_limit <= size:
            size = pod_limit
        if size_limit and 0 < size_limit <= size:
            size = size_limit
        log.v(3).info("Mounting tmpfs for volume", pod=podutil.uid(pod), path=path, size=size)
        _mount_tmpfs(path, size)

    # -- persistent volume claims (on the event loop: they call the object getter) -----------------

    def _claim_path(self, pod: dict, volume: dict) -> _ClaimPath:
        """The bound volume of the claim ``volume`` names, as a path on this node."""
        ephemeral = volume.get("ephemeral") is not None
        if ephemeral:
            claim_name = f"{podutil.name(pod)}-{volume.get('name') or ''}"
        else:
            claim_name = (volume.get("persistentVolumeClaim") or {}).get("claimName") or ""
        if self.objects is None:
            raise _MountFailed(
                "persistentVolumeClaim volumes need an API server connection; this node agent "
                f"runs without one (claim {go_quote(claim_name)})"
            )
        namespace = podutil.namespace(pod)
        prefix = f"error processing PVC {namespace}/{claim_name}"
        try:
            claim = get_object(self.objects, KIND_CLAIM, namespace, claim_name)
        except PodConfigError as exc:
            raise _ClaimNotReady(f"{prefix}: {exc.message}") from None
        if claim is None:
            raise _ClaimNotReady(
                f'{prefix}: failed to fetch PVC from API server: persistentvolumeclaims "{claim_name}" not found'
            )
        if ephemeral and not claim_controlled_by(claim, podutil.uid(pod)):
            raise _MountFailed(
                f"PVC {namespace}/{claim_name} was not created for pod {namespace}/{podutil.name(pod)} (pod is not owner)"
            )
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            raise _ClaimNotReady(f"{prefix}: can't start pod because PVC {namespace}/{claim_name} is being deleted")
        volume_name = (claim.get("spec") or {}).get("volumeName") or ""
        if (claim.get("status") or {}).get("phase") != "Bound" or not volume_name:
            raise _ClaimNotReady(f"{prefix}: PVC is not bound")
        try:
            pv = get_object(self.objects, KIND_VOLUME, "", volume_name)
        except PodConfigError as exc:
            raise _ClaimNotReady(f"{prefix}: {exc.message}") from None
        if pv is None:
            raise _ClaimNotReady(
                f'{prefix}: failed to fetch PV "{volume_name}" from API server: '
                f'persistentvolumes "{volume_name}" not found'
            )
        spec = pv.get("spec") or {}
        ref = spec.get("claimRef") or {}
        claim_uid = (claim.get("metadata") or {}).get("uid") or ""
        if ref.get("uid") and ref.get("uid") != claim_uid:
            raise _ClaimNotReady(
                f'{prefix}: expected PV "{volume_name}" to be bound to PVC {namespace}/{claim_name} '
                f'(UID "{claim_uid}") but its claimRef names UID "{ref.get("uid")}"'
            )
        if (spec.get("volumeMode") or "Filesystem") != "Filesystem":
            raise _MountFailed(f'volumeMode "{spec.get("volumeMode")}" is not supported by this node agent')
        if spec.get("mountOptions"):
            raise _MountFailed(
                f"persistent volume {go_quote(volume_name)}: mountOptions are not supported for local and "
                "hostPath volumes"
            )
        if isinstance(spec.get("local"), dict):
            return _ClaimPath(str(spec["local"].get("path") or ""), "", True, 0o755)
        if isinstance(spec.get("hostPath"), dict):
            source = spec["hostPath"]
            annotations = (pv.get("metadata") or {}).get("annotations") or {}
            local_path = annotations.get(names.ANNOTATION_PROVISIONED_BY) == names.LOCAL_PATH_PROVISIONER
            return _ClaimPath(
                str(source.get("path") or ""),
                str(source.get("type") or ""),
                False,
                _LOCAL_PATH_MODE if local_path else 0o755,
            )
        kind = next(iter(volume_sources(pv)), "none")
        raise _MountFailed(
            f"persistent volume {go_quote(volume_name)} has a {go_quote(kind)} source, which this node agent "
            f"cannot mount (supported: {', '.join(_PV_SOURCES)})"
        )

    # -- data volume payloads (on the event loop: they may call the object getter) ---------------

    def _payload(self, pod: dict, volume: dict) -> _Payload | None:
        if volume.get("emptyDir") is not None or volume.get("hostPath") is not None:
            return None
        namespace = podutil.namespace(pod)
        if volume.get("configMap") is not None:
            source = volume["configMap"]
            mode = _mode(source.get("defaultMode"), _DEFAULT_MODE)
            return _Payload(self._object_payload("ConfigMap", namespace, source, mode), tmpfs=False)
        if volume.get("secret") is not None:
            source = volume["secret"]
            mode = _mode(source.get("defaultMode"), _DEFAULT_MODE)
            ref = dict(source, name=source.get("secretName") or "")
            return _Payload(self._object_payload("Secret", namespace, ref, mode), tmpfs=True)
        if volume.get("downwardAPI") is not None:
            source = volume["downwardAPI"]
            mode = _mode(source.get("defaultMode"), _DEFAULT_MODE)
            return _Payload(self._downward_payload(pod, source.get("items") or [], mode), tmpfs=True)
        if volume.get("projected") is not None:
            return _Payload(self._projected_payload(pod, volume["projected"]), tmpfs=True)
        kind = next((k for k, v in volume.items() if k != "name" and v is not None), "unknown")
        raise _MountFailed(
            f"volume type {go_quote(kind)} is not supported by this node agent (supported: {', '.join(_SUPPORTED)})"
        )

    def _object_payload(
        self, kind: str, namespace: str, source: Mapping[str, Any], default_mode: int
    ) -> dict[str, tuple[bytes, int]]:
        name = source.get("name") or ""
        if self.objects is None:
            raise _MountFailed(
                f"{kind.lower()} volumes need an API server connection; this node "
                f"agent runs without one ({kind.lower()} {go_quote(name)})"
            )
        try:
            obj = get_object(self.objects, kind, namespace, name)
        except PodConfigError as exc:
            raise _MountFailed(exc.message) from None
        optional = bool(source.get("optional"))
        if obj is None:
            if not optional:
                raise _MountFailed(f"{kind.lower()} {go_quote(name)} not found")
            data: dict[str, bytes] = {}
        else:
            try:
                data = configmap_data(obj) if kind == "ConfigMap" else secret_data(obj)
            except PodConfigError as exc:
                raise _MountFailed(exc.message) from None
        items = source.get("items") or []
        if not items:
            return {key: (value, default_mode) for key, value in data.items()}
        files = {}
        for item in items:
            key = item.get("key") or ""
            if key not in data:
                if optional:
                    continue
                what = "config" if kind == "ConfigMap" else "secret"
                raise _MountFailed(f"{kind.lower()} references non-existent {what} key: {key}")
            files[item.get("path") or key] = (data[key], _mode(item.get("mode"), default_mode))
        return files

    def _downward_payload(
        self, pod: dict, items: Iterable[Mapping[str, Any]], default_mode: int
    ) -> dict[str, tuple[bytes, int]]:
        files: dict[str, tuple[bytes, int]] = {}
        errors: list[str] = []
        for item in items:
            path = os.path.normpath(item.get("path") or "")
            mode = _mode(item.get("mode"), default_mode)
            try:
                if item.get("fieldRef") is not None:
                    value = metadata_field_value(pod, item["fieldRef"].get("fieldPath") or "")
                elif item.get("resourceFieldRef") is not None:
                    ref = item["resourceFieldRef"]
                    container = _find_container(pod, ref.get("containerName") or "")
                    value = container_resource_value(ref, container, self.ctx)
                else:
                    value = ""
            except (ValueError, PodConfigError) as exc:
                errors.append(exc.message if isinstance(exc, PodConfigError) else str(exc))
                continue
            files[path] = (value.encode(), mode)
        if errors:
            raise _MountFailed("; ".join(errors))
        return files

    def _projected_payload(self, pod: dict, source: Mapping[str, Any]) -> dict[str, tuple[bytes, int]]:
        default_mode = _mode(source.get("defaultMode"), _DEFAULT_MODE)
        namespace = podutil.namespace(pod)
        files: dict[str, tuple[bytes, int]] = {}
        for projection in source.get("sources") or []:
            if projection.get("configMap") is not None:
                files.update(self._object_payload("ConfigMap", namespace, projection["configMap"], default_mode))
            elif projection.get("secret") is not None:
                files.update(self._object_payload("Secret", namespace, projection["secret"], default_mode))
            elif projection.get("downwardAPI") is not None:
                files.update(self._downward_payload(pod, projection["downwardAPI"].get("items") or [], default_mode))
            elif projection.get("serviceAccountToken") is not None:
                projected = projection["serviceAccountToken"]
                token = self.tokens(pod, projected) if self.tokens is not None else None
                if token is None:
                    raise _MountFailed(
                        "serviceAccountToken projections need a token from the API "
                        "server's TokenRequest API (cluster mode), none is available"
                    )
                path = projected.get("path") or "token"
                _check_payload_path(path)
                files[path] = (token.encode(), default_mode)
            else:
                kind = next((k for k, v in projection.items() if v is not None), "unknown")
                raise _MountFailed(f"projected source {go_quote(kind)} is not supported")
        return files

    # -- teardown ---------------------------------------------------------------------------------

    async def teardown(self, pod_uid: str) -> None:
        """Unmount the pod's tmpfs volumes and remove ``<pod dir>/volumes``.

        Refuses (OSError) to delete anything while a mount remains below it (a
        container's bidirectional mount, say): removing through a mount would
        delete files that are not the pod's.
        """
        async with self._lock(pod_uid):
            await asyncio.to_thread(self._teardown, pod_uid, os.path.join(self.ctx.pod_dir(pod_uid), "volumes"))
            self._size_limits.pop(pod_uid, None)

    async def remove_pod_dir(self, pod_uid: str) -> None:
        """Teardown plus the rest of the pod's directory (termination messages, etc-hosts):
        for pods that are gone for good."""
        async with self._lock(pod_uid):
            await asyncio.to_thread(self._teardown, pod_uid, self.ctx.pod_dir(pod_uid))
            self._size_limits.pop(pod_uid, None)
        self._locks.pop(pod_uid, None)

    def _teardown(self, pod_uid: str, directory: str) -> None:
        if not os.path.lexists(directory):
            return
        for point in sorted(mount_points(directory), key=len, reverse=True):
            log.v(3).info("Unmounting pod volume", pod=pod_uid, path=point)
            _unmount(point)
        remaining = mount_points(directory)
        if remaining:
            raise OSError(
                errno.EBUSY, f"cannot remove {directory}: still mounted below it: {', '.join(sorted(remaining))}"
            )
        shutil.rmtree(directory)

    def orphaned_pod_uids(self, active: Iterable[str]) -> set[str]:
        """Pod directories under ``<root dir>/pods`` of pods not in ``active``."""
        try:
            entries = os.listdir(self.pods_dir())
        except FileNotFoundError:
            return set()
        keep = set(active)
        return {e for e in entries if e not in keep and os.path.isdir(os.path.join(self.pods_dir(), e))}


# --- helpers ------------------------------------------------------------------------------------


def _os_error_text(exc: OSError) -> str:
    """``mkdir /x/y: no such file or directory`` rather than Python's repr-ish text."""
    if exc.filename is None or exc.strerror is None:
        return str(exc)
    return f"{exc.filename}: {exc.strerror.lower()}"


def _mode(value: Any, default: int) -> int:
    if value is None:
        return default
    mode = int(value)
    if not 0 <= mode <= 0o777:
        raise _MountFailed(f"invalid file mode {mode:o}: must be between 0000 and 0777")
    return mode


def _size_limit(source: Mapping[str, Any]) -> int:
    raw = source.get("sizeLimit")
    if raw in (None, ""):
        return 0
    try:
        return max(0, parse_quantity(raw).value())
    except QuantityError as exc:
        raise _MountFailed(f"emptyDir sizeLimit: {exc}") from None


def _find_container(pod: dict, name: str) -> dict:
    for c in podutil.containers(pod) + podutil.init_containers(pod):
        if c.get("name") == name:
            return c
    raise ValueError(f"container {go_quote(name)} not found in the pod")


def _setup_dir(path: str, mode: int) -> None:
    """The directory, with exactly ``mode`` whatever the umask (as upstream's emptyDir)."""
    os.makedirs(path, mode=mode, exist_ok=True)
    if stat.S_IMODE(os.lstat(path).st_mode) != mode and mount_points(path).get(os.path.realpath(path)) is None:
        os.chmod(path, mode)


def _file_type(path: str) -> str:
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return "Directory"
    if stat.S_ISREG(mode):
        return "File"
    if stat.S_ISSOCK(mode):
        return "Socket"
    if stat.S_ISCHR(mode):
        return "CharDevice"
    if stat.S_ISBLK(mode):
        return "BlockDevice"
    return "Unknown"


_TYPE_WORDS = {
    "Directory": "a directory",
    "File": "a file",
    "Socket": "a socket file",
    "CharDevice": "a character device",
    "BlockDevice": "a block device",
}


def _setup_claim_path(target: _ClaimPath) -> str:
    """A claim's volume path on this node: a local volume's must exist; a hostPath
    volume's is checked (or created) by its type, a created directory getting the
    planned mode whatever the umask."""
    path = target.path
    if not path.startswith("/") or ".." in path.split("/"):
        raise _MountFailed(f"invalid volume path {go_quote(path)}: must be absolute, without '..'")
    if target.local:
        if not os.path.exists(path):
            raise _MountFailed(f"path {go_quote(path)} does not exist")
        return path
    if target.host_path_type == "DirectoryOrCreate" and not os.path.exists(path):
        os.makedirs(path, mode=target.create_mode, exist_ok=True)
        os.chmod(path, target.create_mode)
        log.info("Created the directory of a persistent volume", path=path, mode=f"{target.create_mode:04o}")
        return path
    return _setup_host_path({"path": path, "type": target.host_path_type})


def _setup_host_path(source: Mapping[str, Any]) -> str:
    path = source.get("path") or ""
    if ".." in path.split("/"):
        raise _MountFailed(f"invalid HostPath `{path}`: must not contain '..'")
    kind = source.get("type") or ""
    if kind == "":
        return path
    exists = os.path.exists(path)
    if kind == "DirectoryOrCreate":
        if not exists:
            os.makedirs(path, mode=0o755, exist_ok=True)
            return path
        kind = "Directory"
    elif kind == "FileOrCreate":
        if not exists:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            os.close(fd)
            return path
        kind = "File"
    if kind not in _TYPE_WORDS:
        raise _MountFailed(f"{kind} is an invalid volume type")
    if not exists or _file_type(path) != kind:
        raise _MountFailed(f"hostPath type check failed: {path} is not {_TYPE_WORDS[kind]}")
    return path
