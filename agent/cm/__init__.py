"""The node agent's container manager: cgroups, QoS tiers, node allocatable, admission.

See :mod:`agent.cm.manager` for the cgroup layout and :mod:`agent.cm.allocatable`
for how capacity becomes allocatable.
"""

from .admission import AdmitResult
from .cgroupfs import CgroupError, ResourceConfig
from .manager import ContainerManager, resource_config_for_pod
from .qos import BEST_EFFORT, BURSTABLE, GUARANTEED, pod_limits, pod_qos_class, pod_requests

__all__ = [
    "CgroupError",
    "AdmitResult",
    "ContainerManager",
    "ResourceConfig",
    "resource_config_for_pod",
    "pod_qos_class",
    "pod_requests",
    "pod_limits",
    "GUARANTEED",
    "BURSTABLE",
    "BEST_EFFORT",
]
