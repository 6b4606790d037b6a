"""``node.orch.io/v1`` (upstream ``node.k8s.io``): message package ``k8s.io.api.node.v1``
(upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META, List
from . import core
from ._common import RESOURCE_LIST, STR, STR_MAP_ATOMIC, F, ptr, req, struct

S = struct("k8s.io.api.node.v1")

Overhead = S(
    "Overhead",
    [
        F("podFixed", RESOURCE_LIST, 1),
    ],
)

Scheduling = S(
    "Scheduling",
    [
        F("nodeSelector", STR_MAP_ATOMIC, 1),
        F("tolerations", List(core.Toleration, "atomic"), 2),
    ],
)

RuntimeClass = S(
    "RuntimeClass",
    [
        F("metadata", OBJECT_META, 1),
        req("handler", STR, 2),
        ptr("overhead", Overhead, 3),
        ptr("scheduling", Scheduling, 4),
    ],
)

KINDS = {"RuntimeClass": RuntimeClass}
