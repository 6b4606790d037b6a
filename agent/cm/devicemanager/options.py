"""What the devices of one container add to its CRI config (the runtime manager reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DeviceRunOptions", "DeviceMount", "DeviceNode"]


@dataclass(frozen=True)
class DeviceMount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rwm"


@dataclass
class DeviceRunOptions:
    """The merged ``Allocate`` answers of every device resource the container holds.

    ``envs`` come before the container's own variables (a variable the pod sets wins);
    the agent's own annotations override the plugins'. ``cdi_devices`` are fully
    qualified CDI names.
    """

    envs: list[tuple[str, str]] = field(default_factory=list)
    mounts: list[DeviceMount] = field(default_factory=list)
    devices: list[DeviceNode] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.envs or self.mounts or self.devices or self.annotations or self.cdi_devices)
