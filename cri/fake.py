"""An in-process fake CRI runtime: a real grpc.aio server on a unix socket.

    async with FakeRuntime() as fake:
        async with CriClient(fake.endpoint) as cri:
            ...

It implements RuntimeService and ImageService over the same wire protocol as
containerd, keeping sandboxes, containers and images in memory and writing
container logs (CRI format) where the sandbox config says. Nothing runs:
a "running" container is a state plus timers. Unit tests of the agent and
scale tests (many fake nodes in one process) use it; e2e tests use containerd.

It answers the way containerd 1.6 answers on our machines (tests/e2e pin the
real behaviour; keep the two in step):
  * PullImage contacts the "registry": it fails (UNKNOWN, "failed to resolve
    reference") for every image not registered with `allow_pull()`, even an
    image that is present. Images are made present with `preload_image()`
    (what `ctr images import` does); the two test images are preloaded. An
    image allowed with `credentials=(user, password)` is a private one: a pull
    without them fails (UNKNOWN, "401 Unauthorized").
  * The sandbox image is the runtime's own (`sandbox_image`, containerd's CRI
    `sandbox_image`), reported by verbose Status as `sandboxImage` in the JSON
    `config` of `info`. RunPodSandbox uses it when present and otherwise pulls
    it itself (from the images registered with `allow_pull()`), failing with
    containerd's "failed to get sandbox image" when that pull fails; the
    client never pulls it.
  * StopPodSandbox of an unknown sandbox: NOT_FOUND; RemovePodSandbox of an
    unknown sandbox: OK. RemovePodSandbox of a ready sandbox stops it first,
    then removes its containers. A stopped sandbox reports no IP.
  * StopPodSandbox kills running containers: exit code 137, reason "Error".
  * CreateContainer: unknown sandbox or image NOT_FOUND; a sandbox that is not
    ready NOT_FOUND ("no running task found"); a reused (name, attempt) in a
    sandbox UNKNOWN ("failed to reserve container name").
  * A host-network sandbox with a hostname fails (runc: "unable to set hostname
    without a private UTS namespace"); sysctls that are not namespaced, or
    net.* ones on the host network, fail likewise.
  * StartContainer of a container not CREATED: UNKNOWN ("container is in
    CONTAINER_EXITED state"); a failed start leaves it EXITED with code 128,
    reason "StartError".
  * StopContainer: unknown NOT_FOUND; a CREATED container stays CREATED; a
    running one exits 143 on SIGTERM, or - with `ignore_sigterm` (e.g. sleep as
    PID 1) - after the whole grace period with 137.
  * RemoveContainer of an unknown container: OK. ContainerStatus: NOT_FOUND.
  * ExecSync on a container not running: UNKNOWN; past its timeout:
    DEADLINE_EXCEEDED ("timeout Ns exceeded"), no exit code.
  * ReopenContainerLog of a container not running: UNKNOWN ("container is not
    running"). RemoveImage of an absent image: OK.
  * Exited containers: reason "Completed" (exit 0), "Error", or "OOMKilled".
  * Stream*, RuntimeConfig, events, metrics, checkpoint: UNIMPLEMENTED.

Knobs (all synchronous; call them from the test's event loop):
  fail_next(method, code, details, times)     the next call(s) of method fail
  set_delay(method, seconds)                  every call of method waits first
  set_behavior(ContainerBehavior(...), container=, pod=, namespace=)
                                              exit after N s with code X, OOM,
                                              ignore SIGTERM, log lines, start error
  schedule_exit(container_id, after, exit_code) / exit_container(...)
  on_exec(cmd, ExecResult | callable, container=)   ExecSync script
  preload_image(name) / allow_pull(name, credentials=) / remove_image(name)
  kill_sandbox(sandbox_id)                    the pause process died: NOTREADY
  set_condition(type, status, reason, message)  Status conditions
  down() / up() / restart()                   stop serving on the socket and
                                              come back, state kept
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import inspect
import ipaddress
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from cri import api_pb2 as pb
from cri import api_pb2_grpc as pb_grpc

__all__ = [
    "FakeRuntime",
    "ContainerBehavior",
    "ExecResult",
    "FakeSandbox",
    "FakeContainer",
    "FakeImage",
    "DEFAULT_IMAGES",
    "normalize_image_ref",
    "format_log_line",
    "rfc3339nano",
]

DEFAULT_IMAGES = ("orch.local/busybox:1", "orch.local/pause:1")
_RUNTIME_METHODS = tuple(pb.DESCRIPTOR.services_by_name["RuntimeService"].methods_by_name)
_IMAGE_METHODS = tuple(pb.DESCRIPTOR.services_by_name["ImageService"].methods_by_name)
_ALL_METHODS = frozenset(_RUNTIME_METHODS + _IMAGE_METHODS)

_STATE_NAME = {
    pb.CONTAINER_CREATED: "CONTAINER_CREATED",
    pb.CONTAINER_RUNNING: "CONTAINER_RUNNING",
    pb.CONTAINER_EXITED: "CONTAINER_EXITED",
    pb.CONTAINER_UNKNOWN: "CONTAINER_UNKNOWN",
}

# Sysctls runc accepts inside a pod's own namespaces (IPC and network).
_NAMESPACED_SYSCTL_PREFIXES = ("kernel.msg", "kernel.sem", "kernel.shm", "fs.mqueue.", "net.")
_NAMESPACED_SYSCTLS = ("kernel.domainname", "kernel.hostname")


# -- helpers shared with tests -------------------------------------------------


def rfc3339nano(ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: trailing zeros of the fraction dropped."""
    seconds, frac = divmod(ns, 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def format_log_line(stream: str, text: str, *, partial: bool = False, ns: int | None = None) -> str:
    """One CRI log line: `<RFC3339Nano> <stdout|stderr> <P|F> <text>\\n`."""
    stamp = rfc3339nano(time.time_ns() if ns is None else ns)
    return f"{stamp} {stream} {'P' if partial else 'F'} {text}\n"


def normalize_image_ref(ref: str) -> str:
    """The fully qualified name containerd's CRI uses: `busybox` ->
    `docker.io/library/busybox:latest`; `sha256:...` IDs are returned as is."""
    if ref.startswith("sha256:"):
        return ref
    name, digest = (ref.split("@", 1) + [""])[:2]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = "docker.io", name
        if "/" not in path:
            path = "library/" + path
    last = path.rsplit("/", 1)[-1]
    if ":" not in last and not digest:
        path += ":latest"
    full = f"{domain}/{path}"
    return f"{full}@{digest}" if digest else full


# -- state ---------------------------------------------------------------------


@dataclasses.dataclass
class ContainerBehavior:
    """What a fake container "does" once started."""

    exit_after: float | None = None  # seconds after start; None: until stopped
    exit_code: int = 0
    oom: bool = False  # exit reason OOMKilled (exit code 137 unless set)
    ignore_sigterm: bool = False  # StopContainer waits the whole grace period
    term_exit_code: int = 143  # exit code when SIGTERM ends it
    logs: tuple[tuple[str, str], ...] = ()  # (stream, text) lines written at start
    start_error: str | None = None  # StartContainer fails with this message
    memory_bytes: int = 4 * 1024 * 1024  # reported by the stats calls
    cpu_nano_cores: int = 1_000_000


@dataclasses.dataclass
class ExecResult:
    exit_code: int = 0
    stdout: bytes | str = b""
    stderr: bytes | str = b""
    duration: float = 0.0  # simulated run time (ExecSync timeouts)


ExecHandler = Callable[["FakeContainer", list[str]], "ExecResult | Awaitable[ExecResult]"]


@dataclasses.dataclass
class FakeImage:
    id: str
    repo_tags: list[str]
    repo_digests: list[str] = dataclasses.field(default_factory=list)
    size: int = 1_037_061
    uid: int | None = 0
    username: str = ""
    pinned: bool = False

    def to_proto(self) -> pb.Image:
        image = pb.Image(
            id=self.id,
            repo_tags=self.repo_tags,
            repo_digests=self.repo_digests,
            size=self.size,
            username=self.username,
            pinned=self.pinned,
        )
        if self.uid is not None:
            image.uid.value = self.uid
        return image

    @property
    def ref(self) -> str:
        """What containerd reports as a container's image_ref: a repo digest when
        the image has one, otherwise the ID."""
        return self.repo_digests[0] if self.repo_digests else self.id


@dataclasses.dataclass
class FakeSandbox:
    id: str
    config: pb.PodSandboxConfig
    runtime_handler: str
    created_at: int
    state: int = pb.SANDBOX_READY
    ip: str = ""
    reserved_name: str = ""

    @property
    def host_network(self) -> bool:
        return self.config.linux.security_context.namespace_options.network == pb.NODE

    @property
    def metadata(self) -> pb.PodSandboxMetadata:
        return self.config.metadata


@dataclasses.dataclass
class FakeContainer:
    id: str
    sandbox_id: str
    config: pb.ContainerConfig
    sandbox_config: pb.PodSandboxConfig
    image: FakeImage
    behavior: ContainerBehavior
    created_at: int
    state: int = pb.CONTAINER_CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    log_path: str = ""
    reserved_name: str = ""
    resources: pb.LinuxContainerResources = dataclasses.field(default_factory=pb.LinuxContainerResources)
    exit_timer: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        return self.config.metadata.name


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code = code
        self.details = details


def _new_id() -> str:
    return secrets.token_hex(32)


def _labels_match(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


# -- the runtime -------------------------------------------------------------


class FakeRuntime:
    """A CRI runtime in this process. Start and stop it on one event loop."""

    def __init__(
        self,
        *,
        socket_dir: str | os.PathLike | None = None,
        images: Iterable[str] = DEFAULT_IMAGES,
        sandbox_image: str = "orch.local/pause:1",
        runtime_name: str = "fake-cri",
        runtime_version: str = "0.1.0",
        runtime_handlers: Iterable[str] = ("runc",),
        pod_cidr: str = "10.88.0.0/16",
        record_calls: int = 10_000,
    ):
        self._own_dir = socket_dir is None
        self.dir = Path(socket_dir) if socket_dir is not None else Path(tempfile.mkdtemp(prefix="orch-fake-cri-"))
        self.socket_path = self.dir / "cri.sock"
        self.sandbox_image = sandbox_image
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.runtime_handlers = {"", *runtime_handlers}
        self.pod_cidr = pod_cidr
        self._ip_pool = ipaddress.ip_network(pod_cidr).hosts()
        next(self._ip_pool)  # the gateway, as the bridge plugin reserves it

        self.sandboxes: dict[str, FakeSandbox] = {}
        self.containers: dict[str, FakeContainer] = {}
        self.images: dict[str, FakeImage] = {}  # by ID
        self.registry: dict[str, FakeImage] = {}  # pullable, by normalized name
        self.registry_credentials: dict[str, tuple[str, str]] = {}  # private images: (user, password)
        self.conditions: dict[str, pb.RuntimeCondition] = {
            "RuntimeReady": pb.RuntimeCondition(type="RuntimeReady", status=True),
            "NetworkReady": pb.RuntimeCondition(type="NetworkReady", status=True),
        }
        self.default_behavior = ContainerBehavior()
        self._behaviors: list[tuple[dict[str, str], ContainerBehavior]] = []
        self._exec_rules: list[tuple[tuple[str, ...], str | None, ExecResult | ExecHandler]] = []
        self._failures: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self._delays: dict[str, float] = {}
        self._reserved_names: dict[str, str] = {}
        self.calls: collections.deque[tuple[str, Any]] = collections.deque(maxlen=record_calls)
        self.call_counts: collections.Counter[str] = collections.Counter()
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stream_port = 10010
        for name in images:
            self.preload_image(name)

    # -- lifecycle -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def start(self) -> "FakeRuntime":
        if self._server is not None:
            return self
        self._loop = asyncio.get_running_loop()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", 16 << 20), ("grpc.max_send_message_length", 16 << 20)]
        )
        pb_grpc.add_RuntimeServiceServicer_to_server(_RuntimeServicer(self), server)
        pb_grpc.add_ImageServiceServicer_to_server(_ImageServicer(self), server)
        if server.add_insecure_port(f"unix:{self.socket_path}") == 0:
            raise RuntimeError(f"fake CRI: cannot listen on {self.socket_path}")
        await server.start()
        self._server = server
        return self

    async def down(self, grace: float | None = 0) -> None:
        """Stop serving (calls fail UNAVAILABLE); sandboxes, containers and timers stay."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        self.socket_path.unlink(missing_ok=True)

    async def up(self) -> "FakeRuntime":
        return await self.start()

    async def restart(self, down_for: float = 0.0) -> "FakeRuntime":
        await self.down()
        if down_for:
            await asyncio.sleep(down_for)
        return await self.start()

    async def stop(self, grace: float | None = 0) -> None:
        """Stop serving, cancel every timer, remove the socket directory."""
        await self.down(grace)
        for container in self.containers.values():
            if container.exit_timer is not None:
                container.exit_timer.cancel()
                container.exit_timer = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    async def __aenter__(self) -> "FakeRuntime":
        return await self.start()

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    # -- knobs -----------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        details: str = "injected failure",
        *,
        times: int = 1,
    ) -> None:
        """The next `times` calls of method fail with code/details (before any effect)."""
        self._check_method(method)
        for _ in range(times):
            self._failures[method].append((code, details))

    def set_delay(self, method: str, seconds: float) -> None:
        """Every call of method waits `seconds` before acting (0 removes the delay)."""
        self._check_method(method)
        if seconds:
            self._delays[method] = seconds
        else:
            self._delays.pop(method, None)

    def clear_faults(self) -> None:
        self._failures.clear()
        self._delays.clear()

    def set_behavior(
        self,
        behavior: ContainerBehavior,
        *,
        container: str | None = None,
        pod: str | None = None,
        namespace: str | None = None,
    ) -> None:
        """Containers created from now on whose container name / pod name / pod
        namespace match (None = any) behave so; later rules win."""
        match = {
            key: value
            for key, value in (("container", container), ("pod", pod), ("namespace", namespace))
            if value is not None
        }
        self._behaviors.insert(0, (match, behavior))

    def on_exec(self, cmd: Iterable[str], result: ExecResult | ExecHandler, *, container: str | None = None) -> None:
        """ExecSync of a command starting with `cmd` (in containers named
        `container`, or any) answers `result`, or whatever result(container, cmd)
        returns (it may be a coroutine). Later rules win."""
        self._exec_rules.insert(0, (tuple(cmd), container, result))

    def preload_image(
        self, name: str, *, size: int = 1_037_061, image_id: str | None = None, uid: int | None = 0, username: str = ""
    ) -> str:
        """Make the image present (like `ctr images import`); returns its ID."""
        full = normalize_image_ref(name)
        if image_id is None:
            image_id = "sha256:" + hashlib.sha256(full.encode()).hexdigest()
        image = self.images.get(image_id)
        if image is None:
            image = self.images[image_id] = FakeImage(image_id, [], size=size, uid=uid, username=username)
        for other in self.images.values():  # a tag names one image
            if other is not image and name in other.repo_tags:
                other.repo_tags.remove(name)
        if name not in image.repo_tags:
            image.repo_tags.append(name)
        return image_id

    def allow_pull(
        self,
        name: str,
        *,
        size: int = 1_037_061,
        image_id: str | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        """Make the image pullable, as if a registry served it (only to these credentials)."""
        full = normalize_image_ref(name)
        if credentials is not None:
            self.registry_credentials[full] = credentials
        if image_id is None:
            image_id = "sha256:" + hashlib.sha256(full.encode()).hexdigest()
        repo = full.rsplit(":", 1)[0] if "@" not in full else full.split("@", 1)[0]
        digest = "sha256:" + hashlib.sha256(("manifest:" + full).encode()).hexdigest()
        self.registry[full] = FakeImage(image_id, [name], [f"{repo}@{digest}"], size=size)

    def remove_image(self, name: str) -> None:
        image = self._find_image(name)
        if image is not None:
            del self.images[image.id]

    def schedule_exit(self, container_id: str, after: float, exit_code: int = 0, *, reason: str | None = None) -> None:
        """A running container exits `after` seconds from now."""
        container = self.containers[container_id]
        if container.exit_timer is not None:
            container.exit_timer.cancel()
        container.exit_timer = self._require_loop().call_later(after, self._exit, container, exit_code, reason)

    def exit_container(
        self, container_id: str, exit_code: int = 1, *, reason: str | None = None, message: str = ""
    ) -> None:
        """The container's process ends now (a crash, an OOM kill, ...)."""
        self._exit(self.containers[container_id], exit_code, reason, message)

    def kill_sandbox(self, sandbox_id: str) -> None:
        """The sandbox's pause process died: the sandbox turns NOTREADY."""
        self.sandboxes[sandbox_id].state = pb.SANDBOX_NOTREADY

    def set_condition(self, type: str, status: bool, reason: str = "", message: str = "") -> None:
        self.conditions[type] = pb.RuntimeCondition(type=type, status=status, reason=reason, message=message)

    def write_log(self, container_id: str, stream: str, text: str, *, partial: bool = False) -> None:
        """Append one line to the container's log as the runtime would."""
        self._write_log(self.containers[container_id], [(stream, text)], partial=partial)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01) -> None:
        """Poll predicate on this loop until true; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake CRI: condition not reached within {timeout:g}s")
            await asyncio.sleep(interval)

    def containers_in(self, sandbox_id: str) -> list[FakeContainer]:
        return [c for c in self.containers.values() if c.sandbox_id == sandbox_id]

    # -- internals ---------------------------------------------------------------

    def _check_method(self, method: str) -> None:
        if method not in _ALL_METHODS:
            raise ValueError(f"unknown CRI method {method!r}")

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def _dispatch(self, method: str, request, context: grpc.aio.ServicerContext):
        self.calls.append((method, request))
        self.call_counts[method] += 1
        try:
            delay = self._delays.get(method)
            if delay:
                await asyncio.sleep(delay)
            queue = self._failures.get(method)
            if queue:
                code, details = queue.popleft()
                raise _Abort(code, details)
            handler = getattr(self, f"_rpc_{method}", None)
            if handler is None:
                service = "RuntimeService" if method in _RUNTIME_METHODS else "ImageService"
                raise _Abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {method} for service runtime.v1.{service}")
            result = handler(request)
            if inspect.isawaitable(result):
                result = await result
            return result
        except _Abort as exc:
            await context.abort(exc.code, exc.details)

    def _find_image(self, ref: str) -> FakeImage | None:
        if ref in self.images:
            return self.images[ref]
        full = normalize_image_ref(ref)
        for image in self.images.values():
            if full in (normalize_image_ref(tag) for tag in image.repo_tags):
                return image
            if ref in image.repo_digests:
                return image
        if len(ref) >= 12 and re.fullmatch(r"[0-9a-f]+", ref):
            matches = [image for image in self.images.values() if image.id.removeprefix("sha256:").startswith(ref)]
            if len(matches) == 1:
                return matches[0]
        return None

    def _get_container(self, container_id: str, prefix: str = "") -> FakeContainer:
        container = self.containers.get(container_id)
        if container is None:
            raise _Abort(
                grpc.StatusCode.NOT_FOUND,
                f'{prefix}an error occurred when try to find container "{container_id}": not found',
            )
        return container

    def _behavior_for(self, config: pb.ContainerConfig, sandbox: FakeSandbox) -> ContainerBehavior:
        facts = {
            "container": config.metadata.name,
            "pod": sandbox.metadata.name,
            "namespace": sandbox.metadata.namespace,
        }
        for match, behavior in self._behaviors:
            if all(facts[key] == value for key, value in match.items()):
                return behavior
        return self.default_behavior

    def _write_log(self, container: FakeContainer, lines, *, partial: bool = False) -> None:
        if not container.log_path:
            return
        path = Path(container.log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            for stream, text in lines:
                fh.write(format_log_line(stream, text, partial=partial))

    def _exit(self, container: FakeContainer, exit_code: int, reason: str | None = None, message: str = "") -> None:
        if container.exit_timer is not None:
            container.exit_timer.cancel()
            container.exit_timer = None
        if container.state != pb.CONTAINER_RUNNING:
            return
        container.state = pb.CONTAINER_EXITED
        container.finished_at = time.time_ns()
        container.exit_code = exit_code
        container.reason = reason or ("Completed" if exit_code == 0 else "Error")
        container.message = message

    def _allocate_ip(self) -> str:
        return str(next(self._ip_pool))

    # -- RuntimeService ------------------------------------------------------

    def _rpc_Version(self, request: pb.VersionRequest) -> pb.VersionResponse:
        return pb.VersionResponse(
            version="0.1.0",
            runtime_name=self.runtime_name,
            runtime_version=self.runtime_version,
            runtime_api_version="v1",
        )

    def _rpc_Status(self, request: pb.StatusRequest) -> pb.StatusResponse:
        response = pb.StatusResponse(status=pb.RuntimeStatus(conditions=list(self.conditions.values())))
        for name in sorted(self.runtime_handlers):
            response.runtime_handlers.add(name=name)
        if request.verbose:
            response.info["config"] = json.dumps({"sandboxImage": self.sandbox_image, "podCIDR": self.pod_cidr})
        return response

    def _rpc_UpdateRuntimeConfig(self, request):
        self.pod_cidr = request.runtime_config.network_config.pod_cidr or self.pod_cidr
        return pb.UpdateRuntimeConfigResponse()

    def _rpc_RunPodSandbox(self, request: pb.RunPodSandboxRequest) -> pb.RunPodSandboxResponse:
        config = request.config
        meta = config.metadata
        if not meta.name or not meta.namespace or not meta.uid:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                "failed to reserve sandbox name: sandbox metadata (name, namespace, uid) must be set",
            )
        if request.runtime_handler not in self.runtime_handlers:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to get sandbox runtime: no runtime for "{request.runtime_handler}" is configured',
            )
        if self._find_image(self.sandbox_image) is None and normalize_image_ref(self.sandbox_image) in self.registry:
            # As containerd does: the runtime pulls its own sandbox image.
            self._rpc_PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=self.sandbox_image)))
        if self._find_image(self.sandbox_image) is None:
            full = normalize_image_ref(self.sandbox_image)
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to get sandbox image "{self.sandbox_image}": failed to pull '
                f'image "{self.sandbox_image}": failed to pull and unpack image '
                f'"{full}": failed to resolve reference "{full}": '
                f"failed to do request: dial tcp: lookup: no such host",
            )
        name = f"{meta.name}_{meta.namespace}_{meta.uid}_{meta.attempt}"
        if name in self._reserved_names:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to reserve sandbox name "{name}": name "{name}" is '
                f'reserved for "{self._reserved_names[name]}"',
            )
        host_network = config.linux.security_context.namespace_options.network == pb.NODE
        if host_network and config.hostname:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                "failed to create containerd task: failed to create shim task: OCI "
                "runtime create failed: runc create failed: unable to set hostname "
                "without a private UTS namespace: unknown",
            )
        for key in sorted(config.linux.sysctls):
            namespaced = key in _NAMESPACED_SYSCTLS or key.startswith(_NAMESPACED_SYSCTL_PREFIXES)
            if not namespaced:
                raise _Abort(
                    grpc.StatusCode.UNKNOWN,
                    f"failed to create containerd task: failed to create shim task: OCI "
                    f'runtime create failed: runc create failed: sysctl "{key}" is not '
                    f"in a separate kernel namespace: unknown",
                )
            if host_network and key.startswith("net."):
                raise _Abort(
                    grpc.StatusCode.UNKNOWN,
                    f"failed to create containerd task: failed to create shim task: OCI "
                    f'runtime create failed: runc create failed: sysctl "{key}" not '
                    f"allowed in host network namespace: unknown",
                )
        sandbox_id = _new_id()
        sandbox = FakeSandbox(
            sandbox_id, pb.PodSandboxConfig(), request.runtime_handler, created_at=time.time_ns(), reserved_name=name
        )
        sandbox.config.CopyFrom(config)
        if not host_network:
            sandbox.ip = self._allocate_ip()
        self._reserved_names[name] = sandbox_id
        self.sandboxes[sandbox_id] = sandbox
        return pb.RunPodSandboxResponse(pod_sandbox_id=sandbox_id)

    def _stop_sandbox(self, sandbox: FakeSandbox) -> None:
        for container in self.containers_in(sandbox.id):
            if container.state == pb.CONTAINER_RUNNING:
                self._exit(container, 137, "Error")
        sandbox.state = pb.SANDBOX_NOTREADY
        sandbox.ip = ""

    def _rpc_StopPodSandbox(self, request):
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Abort(
                grpc.StatusCode.NOT_FOUND,
                f'an error occurred when try to find sandbox "{request.pod_sandbox_id}": not found',
            )
        self._stop_sandbox(sandbox)
        return pb.StopPodSandboxResponse()

    def _rpc_RemovePodSandbox(self, request):
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            return pb.RemovePodSandboxResponse()
        if sandbox.state == pb.SANDBOX_READY:
            self._stop_sandbox(sandbox)
        for container in self.containers_in(sandbox.id):
            self._remove_container(container)
        self._reserved_names.pop(sandbox.reserved_name, None)
        del self.sandboxes[sandbox.id]
        return pb.RemovePodSandboxResponse()

    def _sandbox_status(self, sandbox: FakeSandbox) -> pb.PodSandboxStatus:
        status = pb.PodSandboxStatus(
            id=sandbox.id,
            metadata=sandbox.metadata,
            state=sandbox.state,
            created_at=sandbox.created_at,
            labels=dict(sandbox.config.labels),
            annotations=dict(sandbox.config.annotations),
            runtime_handler=sandbox.runtime_handler,
        )
        status.network.ip = sandbox.ip
        status.linux.namespaces.options.CopyFrom(sandbox.config.linux.security_context.namespace_options)
        return status

    def _rpc_PodSandboxStatus(self, request):
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Abort(grpc.StatusCode.NOT_FOUND, "an error occurred when try to find sandbox: not found")
        response = pb.PodSandboxStatusResponse(status=self._sandbox_status(sandbox))
        if request.verbose:
            response.info["info"] = json.dumps(
                {
                    "pid": 0,
                    "processStatus": "running" if sandbox.state == pb.SANDBOX_READY else "stopped",
                    "runtimeHandler": sandbox.runtime_handler,
                    "config": {"hostname": sandbox.config.hostname, "log_directory": sandbox.config.log_directory},
                }
            )
        return response

    def _rpc_ListPodSandbox(self, request):
        flt = request.filter if request.HasField("filter") else None
        items = []
        for sandbox in self.sandboxes.values():
            if flt is not None:
                if flt.id and not sandbox.id.startswith(flt.id):
                    continue
                if flt.HasField("state") and sandbox.state != flt.state.state:
                    continue
                if not _labels_match(sandbox.config.labels, flt.label_selector):
                    continue
            items.append(
                pb.PodSandbox(
                    id=sandbox.id,
                    metadata=sandbox.metadata,
                    state=sandbox.state,
                    created_at=sandbox.created_at,
                    labels=dict(sandbox.config.labels),
                    annotations=dict(sandbox.config.annotations),
                    runtime_handler=sandbox.runtime_handler,
                )
            )
        return pb.ListPodSandboxResponse(items=items)

    def _rpc_CreateContainer(self, request):
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f'failed to find sandbox id "{request.pod_sandbox_id}": not found')
        config = request.config
        meta = config.metadata
        name = f"{meta.name}_{sandbox.metadata.name}_{sandbox.metadata.namespace}_{sandbox.metadata.uid}_{meta.attempt}"
        if name in self._reserved_names:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to reserve container name "{name}": name "{name}" is '
                f'reserved for "{self._reserved_names[name]}"',
            )
        image = self._find_image(config.image.image)
        if image is None:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f'failed to resolve image "{config.image.image}": not found')
        if sandbox.state != pb.SANDBOX_READY:
            raise _Abort(
                grpc.StatusCode.NOT_FOUND,
                f"failed to get sandbox container task: no running task found: task {sandbox.id} not found: not found",
            )
        container_id = _new_id()
        log_path = ""
        if sandbox.config.log_directory and config.log_path:
            log_path = os.path.join(sandbox.config.log_directory, config.log_path)
        container = FakeContainer(
            container_id,
            sandbox.id,
            pb.ContainerConfig(),
            pb.PodSandboxConfig(),
            image,
            self._behavior_for(config, sandbox),
            created_at=time.time_ns(),
            log_path=log_path,
            reserved_name=name,
        )
        container.config.CopyFrom(config)
        container.sandbox_config.CopyFrom(request.sandbox_config)
        container.resources.CopyFrom(config.linux.resources)
        self._reserved_names[name] = container_id
        self.containers[container_id] = container
        return pb.CreateContainerResponse(container_id=container_id)

    def _rpc_StartContainer(self, request):
        container = self._get_container(request.container_id)
        if container.state != pb.CONTAINER_CREATED:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to set starting state for container "{container.id}": '
                f"container is in {_STATE_NAME[container.state]} state",
            )
        sandbox = self.sandboxes.get(container.sandbox_id)
        if sandbox is None or sandbox.state != pb.SANDBOX_READY:
            raise _Abort(grpc.StatusCode.UNKNOWN, f'sandbox container "{container.sandbox_id}" is not running')
        behavior = container.behavior
        now = time.time_ns()
        if behavior.start_error is not None:
            container.state = pb.CONTAINER_EXITED
            container.started_at = 0
            container.finished_at = now
            container.exit_code = 128
            container.reason = "StartError"
            container.message = behavior.start_error
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f"failed to create containerd task: failed to create shim task: "
                f"OCI runtime create failed: {behavior.start_error}: unknown",
            )
        container.state = pb.CONTAINER_RUNNING
        container.started_at = now
        if container.log_path:
            # The runtime creates the log file (and missing directories) at start.
            Path(container.log_path).parent.mkdir(parents=True, exist_ok=True)
            Path(container.log_path).touch()
        self._write_log(container, behavior.logs)
        if behavior.exit_after is not None or behavior.oom:
            code = behavior.exit_code if (behavior.exit_code or not behavior.oom) else 137
            reason = "OOMKilled" if behavior.oom else None
            container.exit_timer = self._require_loop().call_later(
                behavior.exit_after or 0.0, self._exit, container, code, reason
            )
        return pb.StartContainerResponse()

    async def _rpc_StopContainer(self, request):
        container = self._get_container(request.container_id)
        if container.state != pb.CONTAINER_RUNNING:
            return pb.StopContainerResponse()
        if request.timeout > 0 and container.behavior.ignore_sigterm:
            # The process ignores SIGTERM: SIGKILL only after the grace period.
            deadline = time.monotonic() + request.timeout
            while container.state == pb.CONTAINER_RUNNING and time.monotonic() < deadline:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            self._exit(container, 137, "Error")
        elif request.timeout > 0:
            self._exit(container, container.behavior.term_exit_code)
        else:
            self._exit(container, 137, "Error")
        return pb.StopContainerResponse()

    def _remove_container(self, container: FakeContainer) -> None:
        self._exit(container, 137, "Error")
        self._reserved_names.pop(container.reserved_name, None)
        self.containers.pop(container.id, None)

    def _rpc_RemoveContainer(self, request):
        container = self.containers.get(request.container_id)
        if container is not None:
            self._remove_container(container)
        return pb.RemoveContainerResponse()

    def _container_proto(self, container: FakeContainer) -> pb.Container:
        return pb.Container(
            id=container.id,
            pod_sandbox_id=container.sandbox_id,
            metadata=container.config.metadata,
            image=container.config.image,
            image_ref=container.image.ref,
            state=container.state,
            created_at=container.created_at,
            labels=dict(container.config.labels),
            annotations=dict(container.config.annotations),
            image_id=container.image.id,
        )

    def _rpc_ListContainers(self, request):
        flt = request.filter if request.HasField("filter") else None
        items = []
        for container in self.containers.values():
            if flt is not None:
                if flt.id and not container.id.startswith(flt.id):
                    continue
                if flt.pod_sandbox_id and not container.sandbox_id.startswith(flt.pod_sandbox_id):
                    continue
                if flt.HasField("state") and container.state != flt.state.state:
                    continue
                if not _labels_match(container.config.labels, flt.label_selector):
                    continue
            items.append(self._container_proto(container))
        return pb.ListContainersResponse(containers=items)

    def _rpc_ContainerStatus(self, request):
        container = self._get_container(request.container_id)
        image_name = container.image.repo_tags[0] if container.image.repo_tags else container.config.image.image
        status = pb.ContainerStatus(
            id=container.id,
            metadata=container.config.metadata,
            state=container.state,
            created_at=container.created_at,
            started_at=container.started_at,
            finished_at=container.finished_at,
            exit_code=container.exit_code,
            image=pb.ImageSpec(image=image_name),
            image_ref=container.image.ref,
            reason=container.reason,
            message=container.message,
            labels=dict(container.config.labels),
            annotations=dict(container.config.annotations),
            mounts=list(container.config.mounts),
            log_path=container.log_path,
            image_id=container.image.id,
        )
        status.resources.linux.CopyFrom(container.resources)
        response = pb.ContainerStatusResponse(status=status)
        if request.verbose:
            response.info["info"] = json.dumps({"sandboxID": container.sandbox_id, "pid": 0})
        return response

    def _rpc_UpdateContainerResources(self, request):
        container = self._get_container(request.container_id)
        if container.state not in (pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING):
            raise _Abort(
                grpc.StatusCode.UNKNOWN, f'container "{container.id}" is in {_STATE_NAME[container.state]} state'
            )
        if request.HasField("linux"):
            container.resources.CopyFrom(request.linux)
        return pb.UpdateContainerResourcesResponse()

    def _rpc_ReopenContainerLog(self, request):
        container = self._get_container(request.container_id)
        if container.state != pb.CONTAINER_RUNNING:
            raise _Abort(grpc.StatusCode.UNKNOWN, "container is not running")
        if container.log_path:
            Path(container.log_path).parent.mkdir(parents=True, exist_ok=True)
            Path(container.log_path).touch()
        return pb.ReopenContainerLogResponse()

    def _exec_target(self, container_id: str) -> FakeContainer:
        container = self.containers.get(container_id)
        if container is None:
            raise _Abort(
                grpc.StatusCode.NOT_FOUND,
                f'failed to exec in container: failed to find container "{container_id}" in store: not found',
            )
        if container.state != pb.CONTAINER_RUNNING:
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f"failed to exec in container: container is in {_STATE_NAME[container.state]} state",
            )
        return container

    async def _rpc_ExecSync(self, request):
        container = self._exec_target(request.container_id)
        cmd = list(request.cmd)
        result = await self._run_exec(container, cmd)
        if request.timeout > 0 and result.duration > request.timeout:
            await asyncio.sleep(request.timeout)
            raise _Abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"failed to exec in container: timeout {request.timeout}s exceeded: context deadline exceeded",
            )
        if result.duration > 0:
            await asyncio.sleep(result.duration)
        return pb.ExecSyncResponse(
            stdout=_as_bytes(result.stdout)[: 16 << 20],
            stderr=_as_bytes(result.stderr)[: 16 << 20],
            exit_code=result.exit_code,
        )

    async def _run_exec(self, container: FakeContainer, cmd: list[str]) -> ExecResult:
        for prefix, only_in, result in self._exec_rules:
            if only_in is not None and only_in != container.name:
                continue
            if tuple(cmd[: len(prefix)]) != prefix:
                continue
            if callable(result):
                result = result(container, cmd)
                if inspect.isawaitable(result):
                    result = await result
            return result
        return _default_exec(cmd)

    def _stream_url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self._stream_port}/{kind}/{secrets.token_urlsafe(6)}"

    def _rpc_Exec(self, request):
        self._exec_target(request.container_id)
        return pb.ExecResponse(url=self._stream_url("exec"))

    def _rpc_Attach(self, request):
        self._get_container(request.container_id)
        return pb.AttachResponse(url=self._stream_url("attach"))

    def _rpc_PortForward(self, request):
        if request.pod_sandbox_id not in self.sandboxes:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f'failed to find sandbox "{request.pod_sandbox_id}": not found')
        return pb.PortForwardResponse(url=self._stream_url("portforward"))

    def _container_stats(self, container: FakeContainer, now: int) -> pb.ContainerStats:
        stats = pb.ContainerStats()
        stats.attributes.id = container.id
        stats.attributes.metadata.CopyFrom(container.config.metadata)
        stats.attributes.labels.update(container.config.labels)
        stats.attributes.annotations.update(container.config.annotations)
        running_ns = max(0, now - container.started_at) if container.started_at else 0
        stats.cpu.timestamp = now
        stats.cpu.usage_core_nano_seconds.value = running_ns * container.behavior.cpu_nano_cores // 1_000_000_000
        stats.cpu.usage_nano_cores.value = (
            container.behavior.cpu_nano_cores if container.state == pb.CONTAINER_RUNNING else 0
        )
        memory = container.behavior.memory_bytes if container.state == pb.CONTAINER_RUNNING else 0
        stats.memory.timestamp = now
        stats.memory.working_set_bytes.value = memory
        stats.memory.usage_bytes.value = memory
        stats.memory.rss_bytes.value = memory
        limit = container.resources.memory_limit_in_bytes
        if limit:
            stats.memory.available_bytes.value = max(0, limit - memory)
        stats.writable_layer.timestamp = now
        stats.writable_layer.fs_id.mountpoint = str(self.dir / "snapshots")
        stats.writable_layer.used_bytes.value = 4096
        stats.writable_layer.inodes_used.value = 1
        return stats

    def _rpc_ContainerStats(self, request):
        container = self._get_container(request.container_id)
        return pb.ContainerStatsResponse(stats=self._container_stats(container, time.time_ns()))

    def _rpc_ListContainerStats(self, request):
        flt = request.filter if request.HasField("filter") else None
        now = time.time_ns()
        stats = []
        for container in self.containers.values():
            if container.state != pb.CONTAINER_RUNNING:
                continue
            if flt is not None:
                if flt.id and not container.id.startswith(flt.id):
                    continue
                if flt.pod_sandbox_id and not container.sandbox_id.startswith(flt.pod_sandbox_id):
                    continue
                if not _labels_match(container.config.labels, flt.label_selector):
                    continue
            stats.append(self._container_stats(container, now))
        return pb.ListContainerStatsResponse(stats=stats)

    def _sandbox_stats(self, sandbox: FakeSandbox, now: int) -> pb.PodSandboxStats:
        stats = pb.PodSandboxStats()
        stats.attributes.id = sandbox.id
        stats.attributes.metadata.CopyFrom(sandbox.metadata)
        stats.attributes.labels.update(sandbox.config.labels)
        stats.attributes.annotations.update(sandbox.config.annotations)
        containers = [
            self._container_stats(c, now) for c in self.containers_in(sandbox.id) if c.state == pb.CONTAINER_RUNNING
        ]
        stats.linux.cpu.timestamp = now
        stats.linux.cpu.usage_core_nano_seconds.value = sum(c.cpu.usage_core_nano_seconds.value for c in containers)
        stats.linux.cpu.usage_nano_cores.value = sum(c.cpu.usage_nano_cores.value for c in containers)
        stats.linux.memory.timestamp = now
        stats.linux.memory.working_set_bytes.value = sum(c.memory.working_set_bytes.value for c in containers)
        stats.linux.memory.usage_bytes.value = stats.linux.memory.working_set_bytes.value
        stats.linux.network.timestamp = now
        if not sandbox.host_network:
            stats.linux.network.default_interface.name = "eth0"
            stats.linux.network.default_interface.rx_bytes.value = 0
            stats.linux.network.default_interface.tx_bytes.value = 0
        stats.linux.process.timestamp = now
        stats.linux.process.process_count.value = len(containers) + 1
        stats.linux.containers.extend(containers)
        return stats

    def _rpc_PodSandboxStats(self, request):
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Abort(
                grpc.StatusCode.NOT_FOUND,
                f'an error occurred when trying to find sandbox "{request.pod_sandbox_id}": not found',
            )
        return pb.PodSandboxStatsResponse(stats=self._sandbox_stats(sandbox, time.time_ns()))

    def _rpc_ListPodSandboxStats(self, request):
        flt = request.filter if request.HasField("filter") else None
        now = time.time_ns()
        stats = []
        for sandbox in self.sandboxes.values():
            if sandbox.state != pb.SANDBOX_READY:
                continue
            if flt is not None:
                if flt.id and not sandbox.id.startswith(flt.id):
                    continue
                if not _labels_match(sandbox.config.labels, flt.label_selector):
                    continue
            stats.append(self._sandbox_stats(sandbox, now))
        return pb.ListPodSandboxStatsResponse(stats=stats)

    # -- ImageService ----------------------------------------------------------

    def _rpc_ListImages(self, request):
        images = list(self.images.values())
        if request.HasField("filter") and request.filter.image.image:
            wanted = self._find_image(request.filter.image.image)
            images = [wanted] if wanted is not None else []
        return pb.ListImagesResponse(images=[image.to_proto() for image in images])

    def _rpc_ImageStatus(self, request):
        image = self._find_image(request.image.image)
        if image is None:
            return pb.ImageStatusResponse()
        response = pb.ImageStatusResponse(image=image.to_proto())
        if request.verbose:
            response.info["info"] = json.dumps({"id": image.id, "repoTags": image.repo_tags})
        return response

    def _rpc_PullImage(self, request):
        ref = request.image.image
        full = normalize_image_ref(ref)
        template = self.registry.get(full)
        if template is None:
            repo, _, tag = full.rpartition(":")
            domain, _, path = repo.partition("/")
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to pull and unpack image "{full}": failed to resolve '
                f'reference "{full}": failed to do request: Head '
                f'"https://{domain}/v2/{path}/manifests/{tag}": dial tcp: lookup '
                f"{domain}: no such host",
            )
        wanted = self.registry_credentials.get(full)
        if wanted is not None and (request.auth.username, request.auth.password) != wanted:
            repo, _, tag = full.rpartition(":")
            domain = repo.partition("/")[0]
            raise _Abort(
                grpc.StatusCode.UNKNOWN,
                f'failed to pull and unpack image "{full}": failed to resolve reference "{full}": '
                f"pulling from host {domain} failed with status code [manifests {tag}]: 401 Unauthorized",
            )
        image = self.images.get(template.id)
        if image is None:
            image = self.images[template.id] = dataclasses.replace(
                template, repo_tags=[], repo_digests=list(template.repo_digests)
            )
        for tag in template.repo_tags:
            if tag not in image.repo_tags:
                image.repo_tags.append(tag)
        return pb.PullImageResponse(image_ref=image.id)

    def _rpc_RemoveImage(self, request):
        self.remove_image(request.image.image)
        return pb.RemoveImageResponse()

    def _rpc_ImageFsInfo(self, request):
        now = time.time_ns()
        usage = pb.FilesystemUsage(timestamp=now)
        usage.fs_id.mountpoint = str(self.dir / "snapshots")
        usage.used_bytes.value = sum(image.size for image in self.images.values())
        usage.inodes_used.value = 64 * len(self.images)
        return pb.ImageFsInfoResponse(image_filesystems=[usage])


def _default_exec(cmd: list[str]) -> ExecResult:
    """A few busybox applets, enough for probes: true, false, echo, sleep N,
    `sh -c 'exit N'`. Anything else succeeds silently."""
    if not cmd:
        return ExecResult(exit_code=126, stderr=b"exec: no command\n")
    program = os.path.basename(cmd[0])
    args = cmd[1:]
    if program == "true":
        return ExecResult()
    if program == "false":
        return ExecResult(exit_code=1)
    if program == "echo":
        return ExecResult(stdout=(" ".join(args) + "\n").encode())
    if program == "sleep" and args:
        try:
            return ExecResult(duration=float(args[0]))
        except ValueError:
            return ExecResult(exit_code=1, stderr=f"sleep: invalid number '{args[0]}'\n")
    if program in ("sh", "ash") and len(args) >= 2 and args[0] == "-c":
        match = re.fullmatch(r"\s*exit\s+(\d+)\s*", args[1])
        if match:
            return ExecResult(exit_code=int(match.group(1)))
    return ExecResult()


# -- servicers -----------------------------------------------------------------


def _make_servicer(base: type, methods: tuple[str, ...]) -> type:
    namespace: dict[str, Any] = {}

    def __init__(self, fake: FakeRuntime):
        self._fake = fake

    namespace["__init__"] = __init__
    for method in methods:
        # Coroutine functions: grpc.aio runs plain functions in a thread pool.
        async def handler(self, request, context, _method=method):
            return await self._fake._dispatch(_method, request, context)

        handler.__name__ = method
        namespace[method] = handler

    # Streaming RPCs (all of which the fake leaves unimplemented, like
    # containerd 1.6) need async generators in grpc.aio servers.
    service = pb.DESCRIPTOR.services_by_name[base.__name__.removesuffix("Servicer")]
    for method in methods:
        if service.methods_by_name[method].server_streaming:

            async def stream(self, request, context, _method=method):
                await self._fake._dispatch(_method, request, context)
                return
                yield  # never reached: it makes this an async generator

            stream.__name__ = method
            namespace[method] = stream
    return type(f"Fake{base.__name__}", (base,), namespace)


_RuntimeServicer = _make_servicer(pb_grpc.RuntimeServiceServicer, _RUNTIME_METHODS)
_ImageServicer = _make_servicer(pb_grpc.ImageServiceServicer, _IMAGE_METHODS)
