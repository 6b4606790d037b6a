"""``scheduling.orch.io/v1`` (upstream ``scheduling.k8s.io``): message package
``k8s.io.api.scheduling.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META
from ._common import BOOL, I32, STR, F, enum, ptr, req, struct

S = struct("k8s.io.api.scheduling.v1")

PriorityClass = S(
    "PriorityClass",
    [
        F("metadata", OBJECT_META, 1),
        req("value", I32, 2),
        F("globalDefault", BOOL, 3),
        F("description", STR, 4),
        ptr("preemptionPolicy", enum("Never", "PreemptLowerPriority"), 5),
    ],
)

KINDS = {"PriorityClass": PriorityClass}
