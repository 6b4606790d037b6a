"""The device manager: device plugins, their extended resources and the devices pods hold.

Device plugins (upstream's API ``v1beta1``) register on the agent's socket in
``<root-dir>/device-plugins/``; the manager then watches each plugin's devices
(``ListAndWatch``) and reports them as extended resources in the node's capacity
(every device) and allocatable (the healthy ones). At pod admission it chooses
devices for each container that asks for the resource in its limits (asking the
plugin's ``GetPreferredAllocation`` when it offers one), calls ``Allocate`` and keeps
the answer (environment, mounts, device nodes, annotations) for the container's CRI
config; ``PreStartContainer`` runs before each start when the plugin asked for it.
Allocations survive agent restarts in a checkpoint file beside the socket.

The manager is also a topology hint provider (:mod:`agent.cm.topology`): devices carry
the NUMA nodes their plugin reports.
"""

from .checkpoint import Checkpoint, CheckpointError, PodDeviceEntry
from .manager import DeviceAllocationError, DeviceManager
from .options import DeviceRunOptions
from .validation import SUPPORTED_VERSIONS, is_extended_resource_name, registration_error

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "PodDeviceEntry",
    "DeviceManager",
    "DeviceAllocationError",
    "DeviceRunOptions",
    "SUPPORTED_VERSIONS",
    "is_extended_resource_name",
    "registration_error",
]
