"""``policy/v1``: message package ``k8s.io.api.policy.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import CONDITION, DELETE_OPTIONS, LABEL_SELECTOR, OBJECT_META, Map
from ._common import I32, I64, IOS, TIME, F, enum, merge_list, ptr, req, struct

S = struct("k8s.io.api.policy.v1")

PodDisruptionBudgetSpec = S(
    "PodDisruptionBudgetSpec",
    [
        ptr("minAvailable", IOS, 1),
        ptr("selector", LABEL_SELECTOR, 2, patch_strategy="replace"),
        ptr("maxUnavailable", IOS, 3),
        ptr("unhealthyPodEvictionPolicy", enum("AlwaysAllow", "IfHealthyBudget"), 4),
    ],
)

PodDisruptionBudgetStatus = S(
    "PodDisruptionBudgetStatus",
    [
        F("observedGeneration", I64, 1),
        F("disruptedPods", Map(TIME), 2),
        req("disruptionsAllowed", I32, 3),
        req("currentHealthy", I32, 4),
        req("desiredHealthy", I32, 5),
        req("expectedPods", I32, 6),
        F("conditions", merge_list(CONDITION, "type", list_type="map", keys=("type",)), 7),
    ],
)

PodDisruptionBudget = S(
    "PodDisruptionBudget",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", PodDisruptionBudgetSpec, 2),
        F("status", PodDisruptionBudgetStatus, 3),
    ],
)

Eviction = S(
    "Eviction",
    [
        F("metadata", OBJECT_META, 1),
        ptr("deleteOptions", DELETE_OPTIONS, 2),
    ],
)

KINDS = {"PodDisruptionBudget": PodDisruptionBudget, "Eviction": Eviction}
