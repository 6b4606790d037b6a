"""``metrics.orch.io/v1beta1`` (upstream ``metrics.k8s.io``): the resource metrics API
that ``kubectl top`` and autoscalers read, served from the node agents' resource
metrics (``server/resourcemetrics.py``), never stored. Message package
``k8s.io.metrics.pkg.apis.metrics.v1beta1``."""

from __future__ import annotations

from ..schema import OBJECT_META, List
from ._common import DURATION, RESOURCE_LIST, STR, TIME, F, struct

PKG = "k8s.io.metrics.pkg.apis.metrics.v1beta1"
S = struct(PKG)

NodeMetrics = S(
    "NodeMetrics",
    [
        F("metadata", OBJECT_META, 1),
        F("timestamp", TIME, 2, description="When the usage was sampled: the end of the window."),
        F("window", DURATION, 3, description="The interval over which the CPU usage rate was measured."),
        F("usage", RESOURCE_LIST, 4, description="CPU (cores) and memory (working set bytes) in use."),
    ],
)
NodeMetrics.description = "The resource usage of one node."

ContainerMetrics = S(
    "ContainerMetrics",
    [
        F("name", STR, 1, description="The container's name in its pod."),
        F("usage", RESOURCE_LIST, 2, description="CPU (cores) and memory (working set bytes) in use."),
    ],
)

PodMetrics = S(
    "PodMetrics",
    [
        F("metadata", OBJECT_META, 1),
        F("timestamp", TIME, 2, description="When the usage was sampled: the end of the window."),
        F("window", DURATION, 3, description="The interval over which the CPU usage rate was measured."),
        F("containers", List(ContainerMetrics), 4, description="The usage of each container of the pod."),
    ],
)
PodMetrics.description = "The resource usage of one pod, by container."

KINDS = {"NodeMetrics": NodeMetrics, "PodMetrics": PodMetrics}
