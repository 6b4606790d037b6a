"""What the runtime manager needs from its neighbours, as protocols.

The real parts are :class:`cri.client.CriClient` (over containerd's socket), the
container manager (:class:`agent.cm.ContainerManager`), the probe manager
(:class:`agent.prober.ProbeManager`) and the prober's hooks module; a unit test
hands in the in-process fake runtime or a small fake instead.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from agent.cm.devicemanager.options import DeviceRunOptions
from agent.prober.manager import ProbeFailure
from cri import api_pb2 as pb

__all__ = ["ImageService", "RuntimeService", "PodCgroups", "LivenessSource", "HookRunner", "DeviceOptionsSource"]


class ImageService(Protocol):
    """The CRI image calls the image manager makes."""

    async def image_status(
        self, image: str | pb.ImageSpec, verbose: bool = False, *, timeout: float | None = None
    ) -> pb.Image | None: ...

    async def pull_image(
        self,
        image: str | pb.ImageSpec,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
        *,
        timeout: float | None = None,
    ) -> str: ...


class RuntimeService(ImageService, Protocol):
    """The CRI runtime calls the runtime manager makes (sandboxes and containers)."""

    async def sandbox_image(self, *, timeout: float | None = None) -> str: ...

    async def run_pod_sandbox(
        self, config: pb.PodSandboxConfig, runtime_handler: str = "", *, timeout: float | None = None
    ) -> str: ...

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None: ...

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None: ...

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> pb.PodSandboxStatusResponse: ...

    async def list_pod_sandbox(
        self,
        filter: pb.PodSandboxFilter | None = None,
        *,
        id: str = "",
        state: pb.PodSandboxState | None = None,
        label_selector: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> list[pb.PodSandbox]: ...

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: pb.ContainerConfig,
        sandbox_config: pb.PodSandboxConfig,
        *,
        timeout: float | None = None,
    ) -> str: ...

    async def start_container(self, container_id: str, *, timeout: float | None = None) -> None: ...

    async def stop_container(
        self, container_id: str, grace_period: int = 0, *, timeout: float | None = None
    ) -> None: ...

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None: ...

    async def list_containers(
        self,
        filter: pb.ContainerFilter | None = None,
        *,
        id: str = "",
        pod_sandbox_id: str = "",
        state: pb.ContainerState | None = None,
        label_selector: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> list[pb.Container]: ...

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> pb.ContainerStatusResponse: ...


class PodCgroups(Protocol):
    """The pod cgroups of the container manager."""

    def ensure_pod(self, pod: dict) -> str: ...

    def remove_pod(self, pod_uid: str) -> object: ...


class ContainerCpusets(Protocol):
    """The CPU and memory managers' placement of a container (the container manager)."""

    def container_cpuset(self, pod: dict, container: dict) -> tuple[str, str]:
        """(cpuset.cpus, cpuset.mems) for a new container; "" leaves the runtime's default."""
        ...

    def container_created(self, container_id: str, cpus: str) -> None: ...


class LivenessSource(Protocol):
    """Whether a container's liveness or startup probe failed (the probe manager)."""

    def liveness_failure(self, pod_uid: str, container_name: str, container_id: str) -> ProbeFailure | None: ...


class HookRunner(Protocol):
    """Runs a postStart or preStop handler (the prober's hooks module)."""

    async def run_handler(
        self,
        cri: Any,
        handler: dict,
        pod: dict,
        container: dict,
        container_id: str,
        pod_ip: str,
        *,
        timeout: float,
        user_agent: str | None = None,
        session: Any = None,
    ) -> str | None: ...


class DeviceOptionsSource(Protocol):
    """What the device manager adds to a container (its plugins' Allocate answers)."""

    async def pre_start(self, pod: Mapping, container: Mapping) -> None: ...

    def run_options(self, pod: Mapping, container: Mapping) -> DeviceRunOptions: ...
