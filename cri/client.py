"""An asyncio client for a CRI v1 runtime (containerd, or cri.fake.FakeRuntime).

    async with CriClient("unix:///run/containerd/containerd.sock") as cri:
        info = await cri.version()
        sandbox_id = await cri.run_pod_sandbox(config)

One `grpc.aio` channel per endpoint (a single one when the runtime and image
endpoints are equal), created on the running event loop by `connect()` (or on
first use). Every call carries a deadline: `request_timeout`
(`--runtime-request-timeout`, default 2 minutes), except the calls that take
as long as the work they ask for: PullImage has `image_pull_timeout`, and
ExecSync and StopContainer add their own timeout to `request_timeout` (as the
upstream node agent does); RunPodSandbox gets twice `request_timeout`.

Runtime restarts: gRPC channels reconnect by themselves. Calls never wait for
a connection (no wait_for_ready): while the runtime is down they fail at once
with `UnavailableError`, and the reconnect back-off is capped at
`max_reconnect_backoff` (1 s by default, against gRPC's 120 s) so the first
calls after the runtime is back succeed.

Errors: every failure is a `CriError` subclass chosen by gRPC status code
(`NotFoundError`, `UnavailableError`, `DeadlineExceededError`, ...), carrying
`.method`, `.code` and `.details`. A failed pull that is not a transport
problem is an `ImagePullError` (containerd answers UNKNOWN for "registry
unreachable"). StopPodSandbox and RemovePodSandbox of a sandbox that is gone
succeed: containerd answers NOT_FOUND to a repeated StopPodSandbox even though
the CRI contract calls both idempotent.

Observed containerd 1.6 answers (mirrored by cri/fake.py): StopContainer and
ContainerStatus of an unknown container answer NOT_FOUND; RemoveContainer of
an unknown container and RemoveImage of an absent image succeed; ImageStatus of
an absent image returns None here (an empty response on the wire).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import grpc
import grpc.aio

from cri import api_pb2 as pb
from cri import api_pb2_grpc as pb_grpc

__all__ = [
    "CriClient",
    "CriError",
    "NotFoundError",
    "UnavailableError",
    "DeadlineExceededError",
    "AlreadyExistsError",
    "InvalidArgumentError",
    "FailedPreconditionError",
    "ResourceExhaustedError",
    "PermissionDeniedError",
    "UnimplementedError",
    "InternalError",
    "UnknownError",
    "CancelledError",
    "ImagePullError",
    "normalize_endpoint",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_IMAGE_PULL_TIMEOUT",
    "MAX_MESSAGE_SIZE",
    "CRI_API_VERSION",
]

DEFAULT_REQUEST_TIMEOUT = 120.0
DEFAULT_IMAGE_PULL_TIMEOUT = 15 * 60.0
# The upstream node agent allows 16 MiB messages (large ListContainers replies).
MAX_MESSAGE_SIZE = 16 * 1024 * 1024
CRI_API_VERSION = "v1"


# -- errors ------------------------------------------------------------------


class CriError(Exception):
    """A CRI call failed. `code` is the gRPC status code (None for failures
    that never reached the wire, e.g. an unusable endpoint)."""

    code: grpc.StatusCode | None = None

    def __init__(self, method: str, details: str, code: grpc.StatusCode | None = None):
        self.method = method
        self.details = details
        if code is not None:
            self.code = code
        name = self.code.name if self.code is not None else "ERROR"
        super().__init__(f"CRI {method}: {name}: {details}")


class NotFoundError(CriError):
    code = grpc.StatusCode.NOT_FOUND


class UnavailableError(CriError):
    """The runtime is not reachable (not running, restarting, socket missing)."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(CriError):
    """The call's deadline passed (ours, or one the runtime enforces such as
    ExecSync's timeout)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class AlreadyExistsError(CriError):
    code = grpc.StatusCode.ALREADY_EXISTS


class InvalidArgumentError(CriError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPreconditionError(CriError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(CriError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class PermissionDeniedError(CriError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnimplementedError(CriError):
    """The runtime does not implement this call (e.g. containerd 1.6 and the
    Stream*/RuntimeConfig RPCs)."""

    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(CriError):
    code = grpc.StatusCode.INTERNAL


class UnknownError(CriError):
    """containerd's answer for most runtime failures (runc errors, wrong state)."""

    code = grpc.StatusCode.UNKNOWN


class CancelledError(CriError):
    """The runtime cancelled the call (not asyncio cancellation, which propagates)."""

    code = grpc.StatusCode.CANCELLED


class ImagePullError(CriError):
    """PullImage failed for a reason other than the runtime being unreachable
    or the deadline: registry unreachable, image unknown, unauthorized, ..."""


_ERROR_BY_CODE: dict[grpc.StatusCode, type[CriError]] = {
    cls.code: cls
    for cls in (
        NotFoundError,
        UnavailableError,
        DeadlineExceededError,
        AlreadyExistsError,
        InvalidArgumentError,
        FailedPreconditionError,
        ResourceExhaustedError,
        PermissionDeniedError,
        UnimplementedError,
        InternalError,
        UnknownError,
        CancelledError,
    )
}


def _error_from_rpc(method: str, exc: grpc.aio.AioRpcError) -> CriError:
    code = exc.code()
    cls = _ERROR_BY_CODE.get(code, CriError)
    return cls(method, exc.details() or "", code)


# -- endpoints ---------------------------------------------------------------


def normalize_endpoint(endpoint: str) -> str:
    """A CRI endpoint as gRPC dials it. Accepts `unix:///abs/path`, `unix:/abs/path`
    and a bare absolute path; CRI on Linux is served on unix sockets only."""
    if not endpoint:
        raise ValueError("empty CRI endpoint")
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://") :]
    elif endpoint.startswith("unix:"):
        path = endpoint[len("unix:") :]
    elif endpoint.startswith("/"):
        path = endpoint
    else:
        raise ValueError(f"CRI endpoint {endpoint!r}: only unix sockets are supported (unix:///path/to/socket)")
    if not path.startswith("/"):
        raise ValueError(f"CRI endpoint {endpoint!r}: the socket path must be absolute")
    return "unix://" + path


def _channel_options(max_reconnect_backoff: float) -> list[tuple[str, Any]]:
    backoff_ms = max(1, int(max_reconnect_backoff * 1000))
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
        ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
        # gRPC's defaults (1 s initial, 120 s max) would leave us blind to a
        # restarted runtime for up to two minutes.
        ("grpc.initial_reconnect_backoff_ms", min(backoff_ms, 100)),
        ("grpc.min_reconnect_backoff_ms", min(backoff_ms, 100)),
        ("grpc.max_reconnect_backoff_ms", backoff_ms),
        # Unix sockets: no proxies, no DNS.
        ("grpc.enable_http_proxy", 0),
    ]


def _image_spec(image: str | pb.ImageSpec) -> pb.ImageSpec:
    if isinstance(image, pb.ImageSpec):
        return image
    return pb.ImageSpec(image=image)


# -- the client --------------------------------------------------------------


class CriClient:
    """Thin async methods over RuntimeService and ImageService.

    Methods return the response's payload (an ID, a list, a message) rather
    than the response wrapper where the wrapper holds a single field.
    Every method takes `timeout=` (seconds) to override its default deadline.
    """

    def __init__(
        self,
        runtime_endpoint: str,
        image_endpoint: str | None = None,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        image_pull_timeout: float | None = DEFAULT_IMAGE_PULL_TIMEOUT,
        max_reconnect_backoff: float = 1.0,
    ):
        self.runtime_endpoint = normalize_endpoint(runtime_endpoint)
        self.image_endpoint = normalize_endpoint(image_endpoint or runtime_endpoint)
        if request_timeout <= 0:
            raise ValueError(f"request_timeout must be positive, got {request_timeout}")
        self.request_timeout = float(request_timeout)
        self.image_pull_timeout = image_pull_timeout
        self.max_reconnect_backoff = max_reconnect_backoff
        self._runtime_channel: grpc.aio.Channel | None = None
        self._image_channel: grpc.aio.Channel | None = None
        self._runtime: pb_grpc.RuntimeServiceStub | None = None
        self._images: pb_grpc.ImageServiceStub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -----------------------------------------------------------

    def connect(self) -> "CriClient":
        """Create the channels on the running loop (no I/O: gRPC connects lazily).
        Called by every method when needed; a closed client reconnects."""
        loop = asyncio.get_running_loop()
        if self._runtime_channel is not None and self._loop is loop:
            return self
        if self._runtime_channel is not None:
            raise RuntimeError("CriClient is bound to another event loop; close() it there first")
        options = _channel_options(self.max_reconnect_backoff)
        self._runtime_channel = grpc.aio.insecure_channel(self.runtime_endpoint, options=options)
        if self.image_endpoint == self.runtime_endpoint:
            self._image_channel = self._runtime_channel
        else:
            self._image_channel = grpc.aio.insecure_channel(self.image_endpoint, options=options)
        self._runtime = pb_grpc.RuntimeServiceStub(self._runtime_channel)
        self._images = pb_grpc.ImageServiceStub(self._image_channel)
        self._loop = loop
        return self

    async def close(self) -> None:
        channels = {id(c): c for c in (self._runtime_channel, self._image_channel) if c is not None}
        self._runtime_channel = self._image_channel = None
        self._runtime = self._images = None
        self._loop = None
        for channel in channels.values():
            await channel.close()

    async def __aenter__(self) -> "CriClient":
        return self.connect()

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    def _stubs(self) -> tuple[pb_grpc.RuntimeServiceStub, pb_grpc.ImageServiceStub]:
        self.connect()
        if self._runtime is None or self._images is None:  # connect() creates both
            raise RuntimeError("CriClient has no stubs after connect()")
        return self._runtime, self._images

    @property
    def runtime_stub(self) -> pb_grpc.RuntimeServiceStub:
        """The raw RuntimeService stub, for calls this class does not wrap."""
        return self._stubs()[0]

    @property
    def image_stub(self) -> pb_grpc.ImageServiceStub:
        return self._stubs()[1]

    async def wait_ready(self, timeout: float = 30.0, interval: float = 0.1) -> pb.VersionResponse:
        """Poll Version until the runtime answers; UnavailableError after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                return await self.version(timeout=max(0.05, min(remaining, self.request_timeout)))
            except (UnavailableError, DeadlineExceededError):
                if remaining <= 0:
                    raise
            await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    # -- plumbing ------------------------------------------------------------

    async def _call(self, service: str, method: str, request, timeout: float | None):
        runtime, images = self._stubs()
        stub = runtime if service == "runtime" else images
        try:
            return await getattr(stub, method)(request, timeout=timeout, wait_for_ready=False)
        except grpc.aio.AioRpcError as exc:
            raise _error_from_rpc(method, exc) from None

    def _timeout(self, timeout: float | None, default: float | None = None) -> float | None:
        if timeout is not None:
            return timeout
        return self.request_timeout if default is None else default

    # -- RuntimeService: runtime -------------------------------------------

    async def version(self, *, timeout: float | None = None) -> pb.VersionResponse:
        return await self._call(
            "runtime", "Version", pb.VersionRequest(version=CRI_API_VERSION), self._timeout(timeout)
        )

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> pb.StatusResponse:
        return await self._call("runtime", "Status", pb.StatusRequest(verbose=verbose), self._timeout(timeout))

    async def sandbox_image(self, *, timeout: float | None = None) -> str:
        """The image the runtime runs pod sandboxes from, or "" when it does not say.

        The runtime chooses and pulls that image itself (containerd's CRI
        ``sandbox_image``); verbose Status reports it as ``sandboxImage`` in the
        JSON ``config`` of its ``info`` (what ``crictl info`` prints).
        """
        response = await self.status(verbose=True, timeout=timeout)
        try:
            config = json.loads(response.info.get("config") or "{}")
        except ValueError:
            return ""
        image = config.get("sandboxImage") if isinstance(config, dict) else None
        return image if isinstance(image, str) else ""

    async def update_runtime_config(self, pod_cidr: str, *, timeout: float | None = None) -> None:
        request = pb.UpdateRuntimeConfigRequest(
            runtime_config=pb.RuntimeConfig(network_config=pb.NetworkConfig(pod_cidr=pod_cidr))
        )
        await self._call("runtime", "UpdateRuntimeConfig", request, self._timeout(timeout))

    # -- RuntimeService: sandboxes -----------------------------------------

    async def run_pod_sandbox(
        self, config: pb.PodSandboxConfig, runtime_handler: str = "", *, timeout: float | None = None
    ) -> str:
        """Returns the sandbox ID. Default deadline: twice request_timeout (it
        includes network set-up)."""
        request = pb.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        response = await self._call(
            "runtime", "RunPodSandbox", request, self._timeout(timeout, 2 * self.request_timeout)
        )
        return response.pod_sandbox_id

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        """Stops the sandbox's containers and tears down its network. A sandbox
        that is already gone counts as stopped."""
        try:
            await self._call(
                "runtime",
                "StopPodSandbox",
                pb.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
                self._timeout(timeout),
            )
        except NotFoundError:
            pass

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        """Removes the sandbox and its containers. A sandbox that is already gone
        counts as removed."""
        try:
            await self._call(
                "runtime",
                "RemovePodSandbox",
                pb.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
                self._timeout(timeout),
            )
        except NotFoundError:
            pass

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> pb.PodSandboxStatusResponse:
        """NotFoundError when the sandbox is unknown."""
        return await self._call(
            "runtime",
            "PodSandboxStatus",
            pb.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id, verbose=verbose),
            self._timeout(timeout),
        )

    async def list_pod_sandbox(
        self,
        filter: pb.PodSandboxFilter | None = None,
        *,
        id: str = "",
        state: pb.PodSandboxState | None = None,
        label_selector: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> list[pb.PodSandbox]:
        """Sandboxes matching `filter`, or one built from id/state/label_selector."""
        if filter is None and (id or state is not None or label_selector):
            filter = pb.PodSandboxFilter(id=id, label_selector=dict(label_selector or {}))
            if state is not None:
                filter.state.state = state
        request = pb.ListPodSandboxRequest(filter=filter) if filter is not None else pb.ListPodSandboxRequest()
        response = await self._call("runtime", "ListPodSandbox", request, self._timeout(timeout))
        return list(response.items)

    async def port_forward(
        self, pod_sandbox_id: str, ports: Iterable[int] = (), *, timeout: float | None = None
    ) -> str:
        """The URL of the runtime's port-forward streaming endpoint."""
        response = await self._call(
            "runtime",
            "PortForward",
            pb.PortForwardRequest(pod_sandbox_id=pod_sandbox_id, port=list(ports)),
            self._timeout(timeout),
        )
        return response.url

    # -- RuntimeService: containers ----------------------------------------

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: pb.ContainerConfig,
        sandbox_config: pb.PodSandboxConfig,
        *,
        timeout: float | None = None,
    ) -> str:
        """Returns the container ID."""
        request = pb.CreateContainerRequest(pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config)
        response = await self._call("runtime", "CreateContainer", request, self._timeout(timeout))
        return response.container_id

    async def start_container(self, container_id: str, *, timeout: float | None = None) -> None:
        await self._call(
            "runtime", "StartContainer", pb.StartContainerRequest(container_id=container_id), self._timeout(timeout)
        )

    async def stop_container(self, container_id: str, grace_period: int = 0, *, timeout: float | None = None) -> None:
        """Signal the container, then SIGKILL after grace_period seconds (0 kills at
        once). Default deadline: request_timeout + grace_period."""
        grace_period = max(0, int(grace_period))
        await self._call(
            "runtime",
            "StopContainer",
            pb.StopContainerRequest(container_id=container_id, timeout=grace_period),
            self._timeout(timeout, self.request_timeout + grace_period),
        )

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None:
        """Removes the container (killing it if running); unknown IDs succeed."""
        await self._call(
            "runtime", "RemoveContainer", pb.RemoveContainerRequest(container_id=container_id), self._timeout(timeout)
        )

    async def list_containers(
        self,
        filter: pb.ContainerFilter | None = None,
        *,
        id: str = "",
        pod_sandbox_id: str = "",
        state: pb.ContainerState | None = None,
        label_selector: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> list[pb.Container]:
        if filter is None and (id or pod_sandbox_id or state is not None or label_selector):
            filter = pb.ContainerFilter(id=id, pod_sandbox_id=pod_sandbox_id, label_selector=dict(label_selector or {}))
            if state is not None:
                filter.state.state = state
        request = pb.ListContainersRequest(filter=filter) if filter is not None else pb.ListContainersRequest()
        response = await self._call("runtime", "ListContainers", request, self._timeout(timeout))
        return list(response.containers)

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> pb.ContainerStatusResponse:
        """NotFoundError when the container is unknown."""
        return await self._call(
            "runtime",
            "ContainerStatus",
            pb.ContainerStatusRequest(container_id=container_id, verbose=verbose),
            self._timeout(timeout),
        )

    async def update_container_resources(
        self,
        container_id: str,
        linux: pb.LinuxContainerResources | None = None,
        *,
        windows: pb.WindowsContainerResources | None = None,
        annotations: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        request = pb.UpdateContainerResourcesRequest(container_id=container_id, annotations=dict(annotations or {}))
        if linux is not None:
            request.linux.CopyFrom(linux)
        if windows is not None:
            request.windows.CopyFrom(windows)
        await self._call("runtime", "UpdateContainerResources", request, self._timeout(timeout))

    async def reopen_container_log(self, container_id: str, *, timeout: float | None = None) -> None:
        """After log rotation. containerd refuses (UnknownError) when the
        container is not running."""
        await self._call(
            "runtime",
            "ReopenContainerLog",
            pb.ReopenContainerLogRequest(container_id=container_id),
            self._timeout(timeout),
        )

    async def exec_sync(
        self, container_id: str, cmd: Iterable[str], exec_timeout: int = 0, *, timeout: float | None = None
    ) -> pb.ExecSyncResponse:
        """Run cmd in the container and collect its output and exit code.
        exec_timeout (whole seconds, 0 = none) is enforced by the runtime, which
        answers DeadlineExceededError past it. Default deadline: request_timeout
        + exec_timeout, or none when exec_timeout is 0."""
        exec_timeout = max(0, int(exec_timeout))
        if timeout is None:
            timeout = self.request_timeout + exec_timeout if exec_timeout else None
        return await self._call(
            "runtime",
            "ExecSync",
            pb.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=exec_timeout),
            timeout,
        )

    async def exec(
        self,
        container_id: str,
        cmd: Iterable[str],
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool = True,
        timeout: float | None = None,
    ) -> str:
        """The URL of the runtime's exec streaming endpoint."""
        request = pb.ExecRequest(
            container_id=container_id, cmd=list(cmd), tty=tty, stdin=stdin, stdout=stdout, stderr=stderr and not tty
        )
        response = await self._call("runtime", "Exec", request, self._timeout(timeout))
        return response.url

    async def attach(
        self,
        container_id: str,
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool = True,
        timeout: float | None = None,
    ) -> str:
        """The URL of the runtime's attach streaming endpoint."""
        request = pb.AttachRequest(
            container_id=container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr and not tty
        )
        response = await self._call("runtime", "Attach", request, self._timeout(timeout))
        return response.url

    # -- RuntimeService: statistics ----------------------------------------

    async def container_stats(self, container_id: str, *, timeout: float | None = None) -> pb.ContainerStats:
        response = await self._call(
            "runtime", "ContainerStats", pb.ContainerStatsRequest(container_id=container_id), self._timeout(timeout)
        )
        return response.stats

    async def list_container_stats(
        self, filter: pb.ContainerStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[pb.ContainerStats]:
        request = pb.ListContainerStatsRequest(filter=filter) if filter is not None else pb.ListContainerStatsRequest()
        response = await self._call("runtime", "ListContainerStats", request, self._timeout(timeout))
        return list(response.stats)

    async def pod_sandbox_stats(self, pod_sandbox_id: str, *, timeout: float | None = None) -> pb.PodSandboxStats:
        """Served by containerd 1.6 (CPU, memory, network, containers)."""
        response = await self._call(
            "runtime",
            "PodSandboxStats",
            pb.PodSandboxStatsRequest(pod_sandbox_id=pod_sandbox_id),
            self._timeout(timeout),
        )
        return response.stats

    async def list_pod_sandbox_stats(
        self, filter: pb.PodSandboxStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[pb.PodSandboxStats]:
        request = (
            pb.ListPodSandboxStatsRequest(filter=filter) if filter is not None else pb.ListPodSandboxStatsRequest()
        )
        response = await self._call("runtime", "ListPodSandboxStats", request, self._timeout(timeout))
        return list(response.stats)

    # -- ImageService --------------------------------------------------------

    async def list_images(
        self, filter: pb.ImageFilter | str | None = None, *, timeout: float | None = None
    ) -> list[pb.Image]:
        if isinstance(filter, str):
            filter = pb.ImageFilter(image=pb.ImageSpec(image=filter))
        request = pb.ListImagesRequest(filter=filter) if filter is not None else pb.ListImagesRequest()
        response = await self._call("image", "ListImages", request, self._timeout(timeout))
        return list(response.images)

    async def image_status(
        self, image: str | pb.ImageSpec, verbose: bool = False, *, timeout: float | None = None
    ) -> pb.Image | None:
        """The image, or None when the runtime does not have it."""
        response = await self._call(
            "image",
            "ImageStatus",
            pb.ImageStatusRequest(image=_image_spec(image), verbose=verbose),
            self._timeout(timeout),
        )
        return response.image if response.HasField("image") else None

    async def image_status_verbose(
        self, image: str | pb.ImageSpec, *, timeout: float | None = None
    ) -> pb.ImageStatusResponse:
        """The whole response, including `info` (image config as JSON)."""
        return await self._call(
            "image",
            "ImageStatus",
            pb.ImageStatusRequest(image=_image_spec(image), verbose=True),
            self._timeout(timeout),
        )

    async def pull_image(
        self,
        image: str | pb.ImageSpec,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """Pull and return the image reference (ID). containerd 1.6 contacts the
        registry even for a present image: check image_status first. Failures
        other than Unavailable/DeadlineExceeded raise ImagePullError."""
        request = pb.PullImageRequest(image=_image_spec(image))
        if auth is not None:
            request.auth.CopyFrom(auth)
        if sandbox_config is not None:
            request.sandbox_config.CopyFrom(sandbox_config)
        effective = timeout if timeout is not None else self.image_pull_timeout
        try:
            response = await self._call("image", "PullImage", request, effective)
        except (UnavailableError, DeadlineExceededError):
            raise
        except CriError as exc:
            raise ImagePullError("PullImage", exc.details, exc.code) from None
        return response.image_ref

    async def remove_image(self, image: str | pb.ImageSpec, *, timeout: float | None = None) -> None:
        """Absent images succeed."""
        await self._call(
            "image", "RemoveImage", pb.RemoveImageRequest(image=_image_spec(image)), self._timeout(timeout)
        )

    async def image_fs_info(self, *, timeout: float | None = None) -> pb.ImageFsInfoResponse:
        return await self._call("image", "ImageFsInfo", pb.ImageFsInfoRequest(), self._timeout(timeout))
