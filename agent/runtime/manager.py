"""The runtime manager: what the runtime has for a pod, what to do about it, and doing it.

One sync of a pod (:meth:`RuntimeManager.sync_pod`) is upstream's SyncPod:

1. read the pod's runtime state (:meth:`RuntimeManager.runtime_pod`): its
   sandboxes and containers, found by the ``io.orch.pod.uid`` label, so the
   agent never looks at anything it did not create;
2. compute the actions (:func:`compute_pod_actions`): create a new sandbox
   (killing the old one and its containers), which init container to start
   next, which app containers to start and which to kill (spec hash changed,
   liveness or startup probe failed), honouring the restart policy;
3. execute them: pod cgroup, volumes, sandbox, then containers (image per pull
   policy, config, create, start, postStart hook), each restart behind the
   crash back-off (10 s doubling to 5 min).

Ephemeral containers (``spec.ephemeralContainers``, added to a running pod through
the API server's ``pods/ephemeralcontainers``) start once in the pod's ready sandbox,
even before its init containers are done, and never again: not when they exit, not
in a new sandbox. One naming ``targetContainerName`` joins that container's process
namespace (CRI ``NamespaceOption.pid = TARGET``), so its tools see the target's
processes.

Waiting reasons the pod's status shows (``ContainerCreating``,
``CrashLoopBackOff``, ``ErrImagePull``, ``CreateContainerConfigError``...) are
returned in :class:`SyncResult` rather than kept here: the status is computed
from the runtime state plus these reasons on every sync.

Termination (:meth:`RuntimeManager.kill_pod`) runs preStop hooks and stops the
containers with the remaining grace period in parallel, then the sandbox.
Everything works from the CRI labels and annotations alone when the pod spec is
unknown (an orphan found after a restart): the grace period and the preStop
handler are recorded on each container.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import time
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from apiserver_min.api import names
from cri import api_pb2 as pb
from cri.client import CriError, NotFoundError

from .. import logging as agent_logging
from .. import pods as podutil
from .backoff import Backoff
from .container import build_container_config, container_hash, read_termination_message
from .context import NodeContext
from .env import get_object
from .errors import REASON_CREATE_CONTAINER_CONFIG, PodConfigError
from .images import ImageError, ImageManager
from .interfaces import (
    ContainerCpusets,
    DeviceOptionsSource,
    HookRunner,
    LivenessSource,
    PodCgroups,
    RuntimeService,
)
from .sandbox import build_sandbox_config
from .volumes import VolumeManager

__all__ = [
    "ContainerInfo",
    "SandboxInfo",
    "RuntimePod",
    "PodActions",
    "SyncResult",
    "RuntimeManager",
    "compute_pod_actions",
    "EventSink",
]

log = agent_logging.get_logger("runtime")

# (pod or None, event type, reason, message)
EventSink = Callable[[dict | None, str, str, str], None]

_STATE_NAMES = {
    pb.CONTAINER_CREATED: "created",
    pb.CONTAINER_RUNNING: "running",
    pb.CONTAINER_EXITED: "exited",
    pb.CONTAINER_UNKNOWN: "unknown",
}
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
MIN_STOP_GRACE = 2  # upstream's minimum grace for StopContainer


# --- runtime state ----------------------------------------------------------------


@dataclasses.dataclass
class ContainerInfo:
    id: str
    name: str
    sandbox_id: str
    state: str  # created | running | exited | unknown
    created_at: int  # ns
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    image: str = ""
    image_ref: str = ""
    hash: str = ""
    restart_count: int = 0
    log_path: str = ""
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()  # (container path, host path)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def exited(self) -> bool:
        return self.state in ("exited", "unknown")

    def termination_message(self) -> str:
        """The message the container wrote at its terminationMessagePath, or from its log."""
        path = self.annotations.get(names.CRI_ANNOTATION_TERMINATION_MESSAGE_PATH, "")
        message = ""
        if path:
            for container_path, host_path in self.mounts:
                if container_path == path:
                    message = read_termination_message(host_path)
                    break
        policy = self.annotations.get(names.CRI_ANNOTATION_TERMINATION_MESSAGE_POLICY, "File")
        if not message and policy == "FallbackToLogsOnError" and self.exit_code != 0:
            message = _log_tail(self.log_path)
        return message


@dataclasses.dataclass
class SandboxInfo:
    id: str
    ready: bool
    created_at: int
    attempt: int
    ip: str = ""
    ips: tuple[str, ...] = ()


@dataclasses.dataclass
class RuntimePod:
    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: list[SandboxInfo] = dataclasses.field(default_factory=list)  # newest first
    containers: list[ContainerInfo] = dataclasses.field(default_factory=list)  # newest first

    def latest(self, name: str) -> ContainerInfo | None:
        for c in self.containers:
            if c.name == name:
                return c
        return None

    def previous(self, name: str) -> ContainerInfo | None:
        """The instance before the latest one (``lastState``, ``logs --previous``)."""
        seen = False
        for c in self.containers:
            if c.name == name:
                if seen:
                    return c
                seen = True
        return None

    def of(self, name: str) -> list[ContainerInfo]:
        return [c for c in self.containers if c.name == name]

    @property
    def ready_sandbox(self) -> SandboxInfo | None:
        return self.sandboxes[0] if self.sandboxes and self.sandboxes[0].ready else None

    @property
    def running_containers(self) -> list[ContainerInfo]:
        return [c for c in self.containers if c.running]

    @property
    def empty(self) -> bool:
        return not self.sandboxes and not self.containers


def _log_tail(path: str) -> str:
    """The last lines of a CRI log file, text only (FallbackToLogsOnError)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    lines = []
    for raw in data.splitlines()[-FALLBACK_LOG_LINES:]:
        parts = raw.split(b" ", 3)
        if len(parts) == 4:
            lines.append(parts[3] + (b"\n" if parts[2] == b"F" else b""))
    text = b"".join(lines)[-FALLBACK_LOG_BYTES:]
    return text.decode("utf-8", "replace")


# --- actions ------------------------------------------------------------------------


@dataclasses.dataclass
class PodActions:
    kill_pod: bool = False  # stop every container and the sandbox
    create_sandbox: bool = False
    attempt: int = 0
    sandbox_id: str = ""
    next_init: dict | None = None  # the init container to start now
    init_failed: bool = False  # restartPolicy Never and an init container failed
    start: list[dict] = dataclasses.field(default_factory=list)
    start_ephemeral: list[dict] = dataclasses.field(default_factory=list)  # never started before
    kill: dict[str, tuple[ContainerInfo, str]] = dataclasses.field(default_factory=dict)  # id -> (c, why)
    restart_reasons: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> why it restarts

    @property
    def idle(self) -> bool:
        return not (
            self.kill_pod or self.create_sandbox or self.next_init or self.start or self.start_ephemeral or self.kill
        )


def _should_restart(container: dict, last: ContainerInfo | None, policy: str) -> bool:
    if last is None:
        return True
    if last.running or last.state == "created":
        return False
    if policy == "Never":
        return False
    if policy == "OnFailure":
        return last.exit_code != 0
    return True


def _succeeded(last: ContainerInfo | None) -> bool:
    return last is not None and last.exited and last.exit_code == 0


def compute_pod_actions(
    pod: dict,
    rp: RuntimePod,
    *,
    liveness_failure: Callable[[str, str], str | None] = lambda name, cid: None,
    ephemeral_ran: Collection[str] = (),
) -> PodActions:
    """What to do to bring the runtime to the pod's spec (upstream's computePodActions).

    ``ephemeral_ran``: ephemeral containers known to have run (their reported status
    names a container), which are not started again even when the runtime no longer
    has them (removed by the container garbage collector)."""
    policy = podutil.restart_policy(pod)
    actions = PodActions()
    sandbox = rp.sandboxes[0] if rp.sandboxes else None
    ready = sandbox is not None and sandbox.ready
    need_sandbox = not ready or sum(1 for s in rp.sandboxes if s.ready) > 1
    if need_sandbox:
        attempt = sandbox.attempt + 1 if sandbox is not None else 0
        ran_before = any(c for c in rp.containers)
        if sandbox is not None and policy == "Never" and ran_before:
            # The pod's sandbox died after its containers ran: it is done, not re-created.
            actions.kill_pod = any(c.running for c in rp.containers) or any(s.ready for s in rp.sandboxes)
            return actions
        # As upstream: every container runs again in the new sandbox (those still
        # reported running are stopped by kill_pod first), except the ones that
        # already succeeded under OnFailure.
        start = [
            c
            for c in podutil.containers(pod)
            if not (policy == "OnFailure" and _succeeded(rp.latest(c.get("name", ""))))
        ]
        inits = podutil.init_containers(pod)
        if not start and all(_succeeded(rp.latest(i.get("name", ""))) for i in inits):
            # Nothing left to run (a completed pod seen by a restarted agent): no new sandbox.
            actions.kill_pod = any(c.running for c in rp.containers) or any(s.ready for s in rp.sandboxes)
            return actions
        actions.kill_pod = not rp.empty
        actions.create_sandbox = True
        actions.attempt = attempt
        if inits:
            actions.next_init = inits[0]
        else:
            actions.start = start
        return actions
    assert sandbox is not None  # a ready one: need_sandbox is False
    actions.sandbox_id = sandbox.id

    # Ephemeral containers: once each, whatever the init containers are doing.
    for ephemeral in podutil.ephemeral_containers(pod):
        name = ephemeral.get("name", "")
        if rp.latest(name) is None and name not in ephemeral_ran:
            actions.start_ephemeral.append(ephemeral)

    # Init containers: in order, each to completion before the next.
    inits = podutil.init_containers(pod)
    init_done = True
    for init in inits:
        name = init.get("name", "")
        last = rp.latest(name)
        if last is not None and last.exited and last.exit_code == 0:
            continue
        init_done = False
        if last is None:
            actions.next_init = init
        elif last.running or last.state == "created":
            pass  # wait for it
        elif policy == "Never":
            actions.init_failed = True
            actions.kill_pod = any(c.running for c in rp.containers)
        else:
            actions.next_init = init
            actions.restart_reasons[name] = "init container failed"
        break
    if not init_done:
        return actions

    for container in podutil.containers(pod):
        name = container.get("name", "")
        last = rp.latest(name)
        if last is not None and last.running:
            why = ""
            if last.hash and last.hash != container_hash(container):
                why = f"Container {name} definition changed"
            else:
                failure = liveness_failure(name, last.id)
                if failure:
                    why = failure
            if why:
                actions.kill[last.id] = (last, why)
                if policy != "Never":
                    actions.start.append(container)
                    actions.restart_reasons[name] = why
            continue
        if _should_restart(container, last, policy):
            actions.start.append(container)
    return actions


# --- sync result ----------------------------------------------------------------------


@dataclasses.dataclass
class SyncResult:
    waiting: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # name -> (reason, message)
    retry_in: float | None = None  # wake the worker again after this many seconds
    pod_error: tuple[str, str] | None = None  # (reason, message) for the pod as a whole
    changed: bool = False  # the runtime state changed (re-read it for the status)


# --- the manager ------------------------------------------------------------------------


class RuntimeManager:
    def __init__(
        self,
        cri: RuntimeService,
        ctx: NodeContext,
        *,
        images: ImageManager,
        volumes: VolumeManager,
        cgroups: PodCgroups | None = None,
        probes: LivenessSource | None = None,
        events: EventSink | None = None,
        backoff: Backoff | None = None,
        hooks: HookRunner | None = None,
    ) -> None:
        self.cri = cri
        self.ctx = ctx
        self.images = images
        self.volumes = volumes
        self.cgroups = cgroups
        self.probes = probes
        self.events: EventSink = events or (lambda pod, type_, reason, message: None)
        self.backoff = backoff or Backoff()
        self.hooks = hooks  # the prober's hooks module (run_handler), injectable
        # The device manager: what the devices' plugins add to a container, and PreStartContainer.
        self.devices: DeviceOptionsSource | None = None
        # The pod's service variables (cluster mode: the agent's Service cache); None: no API server.
        # It raises PodConfigError while the Services were never listed.
        self.service_env: Callable[[dict], Mapping[str, str]] | None = None
        # What ContainerStatus said of a container, kept while the lists show it in the same
        # state (a container's status changes only with its state), and a sandbox's addresses
        # (fixed for its life): a pod's runtime view then costs two list calls when nothing
        # changed. Entries of what the relist no longer shows go.
        self._status_cache: dict[str, ContainerInfo] = {}
        self._sandbox_ips: dict[str, tuple[str, tuple[str, ...]]] = {}
        # The image the runtime itself runs sandboxes from (containerd's sandbox_image), as its
        # verbose Status reports it; "" until it answered or when it does not say.
        self.runtime_sandbox_image = ""
        self._sandbox_image_known = False
        # Dead instances kept per container when a new one starts; None leaves it all to the
        # container garbage collector (the agent's own setting, where the GC task runs).
        self.dead_containers_kept: int | None = 1
        # Where the CPU and memory managers place each new container (cpuset.cpus/mems).
        self.cpusets: ContainerCpusets | None = None

    # -- the sandbox image ---------------------------------------------------------------
    #
    # The runtime chooses, pulls and runs the sandbox ("pause") image on RunPodSandbox; the
    # agent never pulls one (upstream neither). It only keeps two names from the image
    # garbage collector: --pod-infra-container-image and the runtime's own.

    async def learn_sandbox_image(self) -> str:
        """Ask the runtime once (until it answers) which image it runs sandboxes from."""
        if not self._sandbox_image_known:
            try:
                image = await self.cri.sandbox_image()
            except CriError as exc:
                log.v(2).info("Could not read the runtime's sandbox image", err=exc.details or exc)
                return self.runtime_sandbox_image
            self.runtime_sandbox_image, self._sandbox_image_known = image, True
            log.info(
                "Runtime sandbox image",
                image=image or "(not reported)",
                kept_from_gc=",".join(sorted(self.images_kept_from_gc())),
            )
        return self.runtime_sandbox_image

    def images_kept_from_gc(self) -> frozenset[str]:
        """Images an image garbage collector must never remove, as upstream's sandbox image:
        ``--pod-infra-container-image`` and the sandbox image the runtime reported."""
        return frozenset(i for i in (self.ctx.pod_infra_image, self.runtime_sandbox_image) if i)

    # -- reading the runtime -------------------------------------------------------------

    async def runtime_pod(self, uid: str) -> RuntimePod:
        labels = {names.CRI_LABEL_POD_UID: uid}
        sandboxes, containers = await asyncio.gather(
            self.cri.list_pod_sandbox(label_selector=labels), self.cri.list_containers(label_selector=labels)
        )
        return await self._assemble(uid, sandboxes, containers)

    async def _assemble(
        self, uid: str, sandboxes: Sequence[pb.PodSandbox], containers: Sequence[pb.Container]
    ) -> RuntimePod:
        rp = RuntimePod(uid)
        for s in sorted(sandboxes, key=lambda s: s.created_at, reverse=True):
            if s.labels.get(names.CRI_LABEL_MANAGED) != names.CRI_LABEL_MANAGED_VALUE:
                continue
            rp.name = rp.name or s.labels.get(names.CRI_LABEL_POD_NAME, "")
            rp.namespace = rp.namespace or s.labels.get(names.CRI_LABEL_POD_NAMESPACE, "")
            rp.sandboxes.append(SandboxInfo(s.id, s.state == pb.SANDBOX_READY, s.created_at, s.metadata.attempt))
        if rp.sandboxes and rp.sandboxes[0].ready:
            newest = rp.sandboxes[0]
            addresses = self._sandbox_ips.get(newest.id)
            if addresses is None:
                try:
                    addresses = await self._sandbox_addresses(newest.id)
                except NotFoundError:
                    newest.ready = False
            if addresses is not None:
                newest.ip, newest.ips = addresses
        infos = await asyncio.gather(
            *(
                self._container_info(c)
                for c in containers
                if c.labels.get(names.CRI_LABEL_MANAGED) == names.CRI_LABEL_MANAGED_VALUE
            )
        )
        rp.containers = sorted((i for i in infos if i is not None), key=lambda c: c.created_at, reverse=True)
        return rp

    async def _sandbox_addresses(self, sandbox_id: str) -> tuple[str, tuple[str, ...]]:
        """The sandbox's IP and all its IPs (PodSandboxStatus), remembered for its life."""
        net = (await self.cri.pod_sandbox_status(sandbox_id)).status.network
        addresses = (net.ip, tuple(ip for ip in [net.ip] + [a.ip for a in net.additional_ips] if ip))
        self._sandbox_ips[sandbox_id] = addresses
        return addresses

    async def _container_info(self, c: pb.Container) -> ContainerInfo | None:
        cached = self._status_cache.get(c.id)
        if cached is not None and cached.state == _STATE_NAMES.get(c.state, "unknown"):
            return cached
        try:
            st = (await self.cri.container_status(c.id)).status
        except NotFoundError:
            return None
        try:
            restart_count = int(st.annotations.get(names.CRI_ANNOTATION_CONTAINER_RESTART_COUNT, "0"))
        except ValueError:
            restart_count = 0
        info = ContainerInfo(
            id=st.id,
            name=st.metadata.name,
            sandbox_id=c.pod_sandbox_id,
            state=_STATE_NAMES.get(st.state, "unknown"),
            created_at=st.created_at,
            started_at=st.started_at,
            finished_at=st.finished_at,
            exit_code=st.exit_code,
            reason=st.reason,
            message=st.message,
            image=st.image.image,
            image_ref=st.image_ref,
            hash=st.annotations.get(names.CRI_ANNOTATION_CONTAINER_HASH, ""),
            restart_count=restart_count,
            log_path=st.log_path,
            annotations=dict(st.annotations),
            mounts=tuple((m.container_path, m.host_path) for m in st.mounts),
        )
        self._status_cache[c.id] = info
        return info

    async def all_runtime_pods(self, *, skip: Iterable[str] = ()) -> dict[str, RuntimePod]:
        """Every pod the agent has in the runtime, by uid (housekeeping, PLEG, adoption).

        Pods whose uid is in ``skip`` come back empty (uid only): assembling a pod costs a
        PodSandboxStatus and a ContainerStatus per running container, and housekeeping,
        which needs the full state of orphans alone, asking that for every pod every 2 s
        was most of an idle node's CRI traffic (tests/bench/bench_static_pods.py)."""
        skip = set(skip)
        selector = {names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE}
        sandboxes, containers = await asyncio.gather(
            self.cri.list_pod_sandbox(label_selector=selector), self.cri.list_containers(label_selector=selector)
        )
        by_uid: dict[str, tuple[list, list]] = {}
        for s in sandboxes:
            by_uid.setdefault(s.labels.get(names.CRI_LABEL_POD_UID, ""), ([], []))[0].append(s)
        for c in containers:
            by_uid.setdefault(c.labels.get(names.CRI_LABEL_POD_UID, ""), ([], []))[1].append(c)
        by_uid.pop("", None)
        out = {}
        for uid, (ss, cs) in by_uid.items():
            out[uid] = RuntimePod(uid) if uid in skip else await self._assemble(uid, ss, cs)
        return out

    async def relist(self) -> dict[str, dict[str, str]]:
        """uid -> {container or sandbox id: state}, from two list calls (the PLEG's view)."""
        selector = {names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE}
        sandboxes, containers = await asyncio.gather(
            self.cri.list_pod_sandbox(label_selector=selector), self.cri.list_containers(label_selector=selector)
        )
        out: dict[str, dict[str, str]] = {}
        for s in sandboxes:
            uid = s.labels.get(names.CRI_LABEL_POD_UID, "")
            out.setdefault(uid, {})[s.id] = "ready" if s.state == pb.SANDBOX_READY else "notready"
        for c in containers:
            uid = c.labels.get(names.CRI_LABEL_POD_UID, "")
            out.setdefault(uid, {})[c.id] = _STATE_NAMES.get(c.state, "unknown")
        out.pop("", None)
        # What the runtime no longer has is forgotten (an id is never reused).
        if self._status_cache:
            gone = self._status_cache.keys() - {c.id for c in containers}
            for cid in gone:
                del self._status_cache[cid]
        if self._sandbox_ips:
            for sid in self._sandbox_ips.keys() - {s.id for s in sandboxes}:
                del self._sandbox_ips[sid]
        return out

    # -- syncing a pod -------------------------------------------------------------------

    async def _refresh_volumes(self, pod: dict) -> None:
        """Keep a running pod's configMap, secret, downward API and projected volumes
        current (upstream's volume manager does this on every pod sync)."""
        try:
            await self.volumes.refresh(pod)
        except PodConfigError as exc:
            log.warning("Cannot update the pod's volumes", pod=podutil.full_name(pod), err=exc.message)
            self.events(pod, "Warning", exc.reason, exc.message)
        except Exception as exc:  # noqa: BLE001 - e.g. the API is unreachable: keep the old content
            log.warning("Cannot update the pod's volumes", pod=podutil.full_name(pod), err=str(exc))

    async def sync_pod(self, pod: dict, rp: RuntimePod, *, ephemeral_ran: Collection[str] = ()) -> SyncResult:
        uid = podutil.uid(pod)
        result = SyncResult()

        def liveness(name: str, cid: str) -> str | None:
            if self.probes is None:
                return None
            failure = self.probes.liveness_failure(uid, name, cid)
            if failure is None:
                return None
            return f"Container {name} failed {failure.probe.lower()} probe, will be restarted"

        actions = compute_pod_actions(pod, rp, liveness_failure=liveness, ephemeral_ran=ephemeral_ran)
        if rp.sandboxes and not actions.create_sandbox and not actions.kill_pod:
            await self._refresh_volumes(pod)
        if actions.idle:
            return result
        result.changed = True

        if actions.kill_pod:
            why = (
                "Pod sandbox changed, it will be killed and re-created."
                if actions.create_sandbox
                else "Pod has completed"
            )
            if actions.create_sandbox and rp.sandboxes:
                self.events(pod, "Normal", "SandboxChanged", why)
            await self.kill_pod(pod, rp, reason=why)
        for info, why in actions.kill.values():
            self.events(pod, "Normal", "Killing", f"Stopping container {info.name}")
            log.info("Killing container", pod=podutil.full_name(pod), container=info.name, reason=why)
            await self.kill_container(pod, info, grace=self._liveness_grace(pod, info))
        if actions.init_failed:
            result.pod_error = ("InitContainerFailed", "an init container failed")
            return result
        if not actions.create_sandbox and not actions.next_init and not actions.start and not actions.start_ephemeral:
            return result

        sandbox_config = None
        sandbox_id = actions.sandbox_id
        pod_ip = ""
        pod_ips: tuple[str, ...] = ()
        try:
            cgroup_parent = ""
            if self.cgroups is not None:
                cgroup_parent = await asyncio.to_thread(self.cgroups.ensure_pod, pod)
            volume_paths = await self.volumes.setup(pod)
            sandbox_config = build_sandbox_config(pod, self.ctx, attempt=actions.attempt, cgroup_parent=cgroup_parent)
        except PodConfigError as exc:
            result.pod_error = (exc.reason, exc.message)
            for c in podutil.init_containers(pod) + podutil.containers(pod) + actions.start_ephemeral:
                result.waiting[c.get("name", "")] = ("ContainerCreating", "")
            self.events(pod, "Warning", exc.reason, exc.message)
            result.retry_in = 10.0
            return result
        if actions.create_sandbox:
            await self.learn_sandbox_image()
            try:
                sandbox_id = await self.cri.run_pod_sandbox(sandbox_config)
            except CriError as exc:
                message = f"Failed to create pod sandbox: {getattr(exc, 'details', '') or exc}"
                log.error("Failed to create the pod sandbox", pod=podutil.full_name(pod), err=message)
                self.events(pod, "Warning", "FailedCreatePodSandBox", message)
                result.pod_error = ("FailedCreatePodSandBox", message)
                result.retry_in = self.backoff.next((uid, "", "sandbox"))
                return result
            self.backoff.reset((uid, "", "sandbox"))
        if sandbox_id:
            try:
                pod_ip, pod_ips = self._sandbox_ips.get(sandbox_id) or await self._sandbox_addresses(sandbox_id)
            except CriError:
                pass

        to_start = [actions.next_init] if actions.next_init else list(actions.start)
        pull_secrets = self._pull_secrets(pod)
        for container in actions.start_ephemeral + to_start:
            name = container.get("name", "")
            wait = await self._start_container(
                pod, container, rp, sandbox_id, sandbox_config, volume_paths, pod_ip, pod_ips, pull_secrets
            )
            if wait is not None:
                result.waiting[name] = wait[:2]
                if wait[2] is not None:
                    result.retry_in = wait[2] if result.retry_in is None else min(result.retry_in, wait[2])
        return result

    def _pull_secrets(self, pod: dict) -> list[dict]:
        """The pod's image pull Secrets the node can read. Those it cannot are named in a
        warning event, and the pulls go on without them (as upstream)."""
        found, missing = [], []
        namespace = podutil.namespace(pod)
        for ref in podutil.spec(pod).get("imagePullSecrets") or []:
            name = ref.get("name") if isinstance(ref, dict) else None
            if not name:
                continue  # upstream's API let empty names through: nothing to read
            try:
                secret = get_object(self.volumes.objects, "Secret", namespace, name)
            except PodConfigError as exc:
                log.info("Unable to read an image pull secret", pod=podutil.full_name(pod), err=exc.message)
                secret = None
            if secret is None:
                missing.append(name)
            else:
                found.append(secret)
        if missing:
            log.info(
                "Unable to retrieve pull secret, the image pull may not succeed",
                pod=podutil.full_name(pod),
                secrets=",".join(missing),
            )
            self.events(
                pod,
                "Warning",
                names.EVENT_FAILED_TO_RETRIEVE_PULL_SECRET,
                f"Unable to retrieve some image pull secrets ({', '.join(missing)}); "
                "attempting to pull the image may not succeed.",
            )
        return found

    async def _start_container(
        self,
        pod: dict,
        container: dict,
        rp: RuntimePod,
        sandbox_id: str,
        sandbox_config: pb.PodSandboxConfig,
        volume_paths: dict[str, str],
        pod_ip: str,
        pod_ips: Sequence[str],
        pull_secrets: Sequence[dict] = (),
    ) -> tuple[str, str, float | None] | None:
        """Start one container; (waiting reason, message, retry in) when it could not start now."""
        uid = podutil.uid(pod)
        name = container.get("name", "")
        last = rp.latest(name)
        key = (uid, name)
        if last is not None and last.exited:
            remaining = self.backoff.remaining(key, last.finished_at / 1e9 if last.finished_at else time.time())
            if remaining > 0:
                delay = self.backoff.delay(key)
                message = (
                    f"back-off {_go_duration(delay)} restarting failed container={name} "
                    f"pod={podutil.name(pod)}_{podutil.namespace(pod)}({uid})"
                )
                self.events(
                    pod,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {name} in pod "
                    f"{podutil.name(pod)}_{podutil.namespace(pod)}({uid})",
                )
                return ("CrashLoopBackOff", message, remaining)
            self.backoff.next(key)
        image = container.get("image", "")
        try:
            await self.images.ensure(
                image,
                container.get("imagePullPolicy", ""),
                pod_uid=uid,
                container=name,
                sandbox_config=sandbox_config,
                pull_secrets=pull_secrets,
            )
        except ImageError as exc:
            kind = "Warning"
            self.events(pod, kind, "Failed", exc.message)
            if exc.reason == "ErrImagePull":
                self.events(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"')
            retry = max(1.0, self.images.backoff.delay((uid, name, image)) or 10.0)
            return (exc.reason, exc.message, retry)
        restart_count = 0
        if last is not None:
            restart_count = last.restart_count + 1
        device_options = None
        if self.devices is not None:
            try:
                await self.devices.pre_start(pod, container)
                device_options = self.devices.run_options(pod, container)
            except Exception as exc:  # noqa: BLE001 - the plugin's failure is the container's config error
                message = str(exc)
                self.events(pod, "Warning", "Failed", f"Error: {message}")
                return (REASON_CREATE_CONTAINER_CONFIG, message, 10.0)
        target_id = ""
        target = container.get("targetContainerName") or ""
        if target:
            found = rp.latest(target)
            if found is None or not found.running:
                # Upstream's startContainer says this as a config error; the next sync tries again.
                message = (
                    f"cannot find target container {target}"
                    if found is None
                    else (f"target container {target} is not running")
                )
                self.events(pod, "Warning", "Failed", f"Error: {message}")
                return (REASON_CREATE_CONTAINER_CONFIG, message, 10.0)
            target_id = found.id
        try:
            setup = build_container_config(
                pod,
                container,
                self.ctx,
                device_options=device_options,
                restart_count=restart_count,
                pod_ip=pod_ip,
                pod_ips=pod_ips,
                volume_paths=volume_paths,
                objects=self.volumes.objects,
                service_env=self.service_env(pod) if self.service_env is not None else None,
                target_id=target_id,
            )
        except PodConfigError as exc:
            self.events(pod, "Warning", "Failed", f"Error: {exc.message}")
            return (exc.reason, exc.message, 10.0)
        cpus = ""
        if self.cpusets is not None:
            cpus, mems = self.cpusets.container_cpuset(pod, container)
            if cpus:
                setup.config.linux.resources.cpuset_cpus = cpus
            if mems:
                setup.config.linux.resources.cpuset_mems = mems
        try:
            cid = await self.cri.create_container(sandbox_id, setup.config, sandbox_config)
        except CriError as exc:
            message = exc.details or str(exc)
            self.events(pod, "Warning", "Failed", f"Error: {message}")
            return ("CreateContainerError", message, 10.0)
        if self.cpusets is not None:
            self.cpusets.container_created(cid, cpus)
        self.events(pod, "Normal", "Created", f"Created container {name}")
        try:
            await self.cri.start_container(cid)
        except CriError as exc:
            message = exc.details or str(exc)
            self.events(pod, "Warning", "Failed", f"Error: {message}")
            log.error("Failed to start container", pod=podutil.full_name(pod), container=name, err=message)
            return ("RunContainerError", message, 10.0)
        self.events(pod, "Normal", "Started", f"Started container {name}")
        log.info(
            "Started container", pod=podutil.full_name(pod), container=name, id=cid[:13], restart_count=restart_count
        )
        post_start = (container.get("lifecycle") or {}).get("postStart")
        if post_start and self.hooks is not None:
            error = await self.hooks.run_handler(
                self.cri,
                post_start,
                pod,
                container,
                cid,
                pod_ip,
                timeout=float(podutil.grace_period_seconds(pod) or 30),
            )
            if error:
                message = f"PostStartHook failed: {error}"
                self.events(pod, "Warning", "FailedPostStartHook", message)
                await self._stop(cid, podutil.grace_period_seconds(pod))
                return ("PostStartHookError", message, None)
        await self._prune_dead(rp, name)
        return None

    def forget_container(self, cid: str) -> None:
        """Drop what is cached of a container removed elsewhere (the container GC)."""
        self._status_cache.pop(cid, None)

    async def _prune_dead(self, rp: RuntimePod, name: str) -> None:
        """Keep ``dead_containers_kept`` dead instances per container (lastState, logs --previous)."""
        if self.dead_containers_kept is None or self.dead_containers_kept < 0:
            return
        dead = [c for c in rp.of(name) if c.exited]
        for old in dead[self.dead_containers_kept :]:
            try:
                await self.cri.remove_container(old.id)
            except CriError as exc:
                log.warning("Failed to remove an old container", id=old.id[:13], err=exc)
            self._status_cache.pop(old.id, None)

    def _liveness_grace(self, pod: dict, info: ContainerInfo) -> int:
        if self.probes is not None:
            failure = self.probes.liveness_failure(podutil.uid(pod), info.name, info.id)
            if failure is not None and failure.termination_grace_seconds is not None:
                return failure.termination_grace_seconds
        return podutil.grace_period_seconds(pod)

    # -- stopping --------------------------------------------------------------------------

    async def _stop(self, cid: str, grace: int) -> None:
        try:
            await self.cri.stop_container(cid, grace)
        except NotFoundError:
            pass

    async def kill_container(
        self, pod: dict | None, info: ContainerInfo, *, grace: int, deadline: float | None = None
    ) -> None:
        """preStop (from the spec, or the recorded handler of an orphan), then stop with what remains."""
        start = time.monotonic()
        container = None
        handler = None
        if pod is not None:
            for c in podutil.containers(pod) + podutil.init_containers(pod):
                if c.get("name") == info.name:
                    container = c
                    handler = (c.get("lifecycle") or {}).get("preStop")
        else:
            raw = info.annotations.get(names.CRI_ANNOTATION_PRESTOP_HANDLER, "")
            if raw:
                try:
                    handler = json.loads(raw)
                except ValueError:
                    handler = None
            container = {
                "name": info.name,
                "ports": _json_or(info.annotations.get(names.CRI_ANNOTATION_CONTAINER_PORTS, ""), []),
            }
        if handler and info.running and self.hooks is not None and grace > 0:
            pod_for_hook = pod or {"metadata": {"name": "", "namespace": "", "uid": ""}, "spec": {}}
            try:
                async with asyncio.timeout(grace):
                    error = await self.hooks.run_handler(
                        self.cri, handler, pod_for_hook, container or {}, info.id, "", timeout=float(grace)
                    )
            except asyncio.TimeoutError:
                error = f"PreStop hook did not finish within {grace}s"
            if error:
                log.warning("PreStop hook failed", container=info.name, err=error)
                if pod is not None:
                    self.events(pod, "Warning", "FailedPreStopHook", error)
        remaining = grace - int(time.monotonic() - start)
        if grace > 0:
            remaining = max(remaining, MIN_STOP_GRACE)
        else:
            remaining = 0
        if info.running or info.state == "created":
            await self._stop(info.id, remaining)

    async def kill_pod(self, pod: dict | None, rp: RuntimePod, *, grace: int | None = None, reason: str = "") -> None:
        """Stop every running container (in parallel, with preStop) and the sandboxes."""
        if grace is None:
            grace = podutil.grace_period_seconds(pod) if pod is not None else _recorded_grace(rp)
        running = [c for c in rp.containers if c.running or c.state == "created"]
        if running:
            log.info(
                "Killing pod",
                pod=f"{rp.name}_{rp.namespace}",
                uid=rp.uid,
                grace=grace,
                reason=reason,
                containers=len(running),
            )
        if pod is not None:
            for c in running:
                self.events(pod, "Normal", "Killing", f"Stopping container {c.name}")
        await asyncio.gather(*(self.kill_container(pod, c, grace=grace) for c in running))
        for s in rp.sandboxes:
            if s.ready:
                try:
                    await self.cri.stop_pod_sandbox(s.id)
                except CriError as exc:
                    log.error("Failed to stop the pod sandbox", uid=rp.uid, err=exc)
                    raise

    async def remove_pod(self, rp: RuntimePod) -> None:
        """Remove the stopped pod's containers and sandboxes, then its volumes, cgroup and logs."""
        for c in rp.containers:
            await self.cri.remove_container(c.id)
            self._status_cache.pop(c.id, None)
        for s in rp.sandboxes:
            await self.cri.remove_pod_sandbox(s.id)
            self._sandbox_ips.pop(s.id, None)
        await self.cleanup_pod_files(rp.uid, rp.namespace, rp.name)

    async def cleanup_pod_files(self, uid: str, namespace: str, name: str) -> None:
        await self.volumes.teardown(uid)
        await self.volumes.remove_pod_dir(uid)
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.remove_pod, uid)
        if namespace and name:
            log_dir = self.ctx.pod_log_dir(namespace, name, uid)
            await asyncio.to_thread(shutil.rmtree, log_dir, True)
        self.backoff.forget_prefix((uid,))


def _recorded_grace(rp: RuntimePod) -> int:
    for c in rp.containers:
        for key in (names.CRI_ANNOTATION_POD_DELETION_GRACE_PERIOD, names.CRI_ANNOTATION_POD_TERMINATION_GRACE_PERIOD):
            raw = c.annotations.get(key)
            if raw:
                try:
                    return max(0, int(raw))
                except ValueError:
                    pass
    return 30


def _json_or(raw: str, default: Any) -> Any:
    if not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        return default


def _go_duration(seconds: float) -> str:
    """5m0s / 40s, as upstream prints durations in back-off messages."""
    seconds = int(round(seconds))
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60}s"
    return f"{seconds}s"
