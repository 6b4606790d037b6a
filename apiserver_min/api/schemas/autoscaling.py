"""``autoscaling/v1``: the Scale sub-resource kind and the HorizontalPodAutoscaler's v1
form (CPU utilization only; served by conversion from the ``autoscaling/v2`` objects,
``registry/autoscaling.py``). Message package ``k8s.io.api.autoscaling.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META
from ._common import I32, I64, STR, TIME, F, ptr, req, struct

S = struct("k8s.io.api.autoscaling.v1")

ScaleSpec = S(
    "ScaleSpec",
    [
        F("replicas", I32, 1),
    ],
)

ScaleStatus = S(
    "ScaleStatus",
    [
        req("replicas", I32, 1),
        F("selector", STR, 2),
    ],
)

Scale = S(
    "Scale",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ScaleSpec, 2),
        F("status", ScaleStatus, 3),
    ],
)

CrossVersionObjectReference = S(
    "CrossVersionObjectReference",
    [
        req("kind", STR, 1),
        req("name", STR, 2),
        F("apiVersion", STR, 3),
    ],
)

HorizontalPodAutoscalerSpec = S(
    "HorizontalPodAutoscalerSpec",
    [
        req("scaleTargetRef", CrossVersionObjectReference, 1),
        ptr("minReplicas", I32, 2),
        req("maxReplicas", I32, 3),
        ptr("targetCPUUtilizationPercentage", I32, 4),
    ],
)

HorizontalPodAutoscalerStatus = S(
    "HorizontalPodAutoscalerStatus",
    [
        ptr("observedGeneration", I64, 1),
        ptr("lastScaleTime", TIME, 2),
        req("currentReplicas", I32, 3),
        req("desiredReplicas", I32, 4),
        ptr("currentCPUUtilizationPercentage", I32, 5),
    ],
)

HorizontalPodAutoscaler = S(
    "HorizontalPodAutoscaler",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", HorizontalPodAutoscalerSpec, 2),
        F("status", HorizontalPodAutoscalerStatus, 3),
    ],
)

KINDS = {"Scale": Scale, "HorizontalPodAutoscaler": HorizontalPodAutoscaler}
