"""``autoscaling/v2``: the HorizontalPodAutoscaler. Message package
``k8s.io.api.autoscaling.v2`` (upstream v1.27), field numbers as upstream's."""

from __future__ import annotations

from ..schema import LABEL_SELECTOR, OBJECT_META, List
from . import core
from ._common import I32, I64, QTY, STR, TIME, F, merge_list, ptr, req, struct

S = struct("k8s.io.api.autoscaling.v2")

METRIC_SOURCE_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")
METRIC_TARGET_TYPES = ("AverageValue", "Utilization", "Value")

CrossVersionObjectReference = S(
    "CrossVersionObjectReference",
    [
        req("kind", STR, 1),
        req("name", STR, 2),
        F("apiVersion", STR, 3),
    ],
)

MetricIdentifier = S(
    "MetricIdentifier",
    [
        req("name", STR, 1),
        ptr("selector", LABEL_SELECTOR, 2),
    ],
)

MetricTarget = S(
    "MetricTarget",
    [
        req("type", STR, 1),
        ptr("value", QTY, 2),
        ptr("averageValue", QTY, 3),
        ptr("averageUtilization", I32, 4),
    ],
)

MetricValueStatus = S(
    "MetricValueStatus",
    [
        ptr("value", QTY, 1),
        ptr("averageValue", QTY, 2),
        ptr("averageUtilization", I32, 3),
    ],
)

ResourceMetricSource = S("ResourceMetricSource", [req("name", STR, 1), req("target", MetricTarget, 2)])
ContainerResourceMetricSource = S(
    "ContainerResourceMetricSource",
    [req("name", STR, 1), req("target", MetricTarget, 2), req("container", STR, 3)],
)
PodsMetricSource = S("PodsMetricSource", [req("metric", MetricIdentifier, 1), req("target", MetricTarget, 2)])
ObjectMetricSource = S(
    "ObjectMetricSource",
    [
        req("describedObject", CrossVersionObjectReference, 1),
        req("target", MetricTarget, 2),
        req("metric", MetricIdentifier, 3),
    ],
)
ExternalMetricSource = S("ExternalMetricSource", [req("metric", MetricIdentifier, 1), req("target", MetricTarget, 2)])

MetricSpec = S(
    "MetricSpec",
    [
        req("type", STR, 1),
        ptr("object", ObjectMetricSource, 2),
        ptr("pods", PodsMetricSource, 3),
        ptr("resource", ResourceMetricSource, 4),
        ptr("containerResource", ContainerResourceMetricSource, 7),
        ptr("external", ExternalMetricSource, 5),
    ],
)

ResourceMetricStatus = S("ResourceMetricStatus", [req("name", STR, 1), req("current", MetricValueStatus, 2)])
ContainerResourceMetricStatus = S(
    "ContainerResourceMetricStatus",
    [req("name", STR, 1), req("current", MetricValueStatus, 2), req("container", STR, 3)],
)
PodsMetricStatus = S("PodsMetricStatus", [req("metric", MetricIdentifier, 1), req("current", MetricValueStatus, 2)])
ObjectMetricStatus = S(
    "ObjectMetricStatus",
    [
        req("metric", MetricIdentifier, 1),
        req("current", MetricValueStatus, 2),
        req("describedObject", CrossVersionObjectReference, 3),
    ],
)
ExternalMetricStatus = S(
    "ExternalMetricStatus", [req("metric", MetricIdentifier, 1), req("current", MetricValueStatus, 2)]
)

MetricStatus = S(
    "MetricStatus",
    [
        req("type", STR, 1),
        ptr("object", ObjectMetricStatus, 2),
        ptr("pods", PodsMetricStatus, 3),
        ptr("resource", ResourceMetricStatus, 4),
        ptr("containerResource", ContainerResourceMetricStatus, 7),
        ptr("external", ExternalMetricStatus, 5),
    ],
)

HPAScalingPolicy = S(
    "HPAScalingPolicy",
    [
        req("type", STR, 1),
        req("value", I32, 2),
        req("periodSeconds", I32, 3),
    ],
)

HPAScalingRules = S(
    "HPAScalingRules",
    [
        ptr("stabilizationWindowSeconds", I32, 3),
        ptr("selectPolicy", STR, 1),
        F("policies", List(HPAScalingPolicy, "atomic"), 2),
    ],
)

HorizontalPodAutoscalerBehavior = S(
    "HorizontalPodAutoscalerBehavior",
    [
        ptr("scaleUp", HPAScalingRules, 1),
        ptr("scaleDown", HPAScalingRules, 2),
    ],
)

HorizontalPodAutoscalerSpec = S(
    "HorizontalPodAutoscalerSpec",
    [
        req("scaleTargetRef", CrossVersionObjectReference, 1),
        ptr("minReplicas", I32, 2),
        req("maxReplicas", I32, 3),
        F("metrics", List(MetricSpec, "atomic"), 4),
        ptr("behavior", HorizontalPodAutoscalerBehavior, 5),
    ],
)

HorizontalPodAutoscalerCondition = S(
    "HorizontalPodAutoscalerCondition",
    [
        req("type", STR, 1),
        req("status", core.CONDITION_STATUS, 2),
        F("lastTransitionTime", TIME, 3),
        F("reason", STR, 4),
        F("message", STR, 5),
    ],
)

HorizontalPodAutoscalerStatus = S(
    "HorizontalPodAutoscalerStatus",
    [
        ptr("observedGeneration", I64, 1),
        ptr("lastScaleTime", TIME, 2),
        F("currentReplicas", I32, 3),
        req("desiredReplicas", I32, 4),
        F("currentMetrics", List(MetricStatus, "atomic"), 5),
        F(
            "conditions",
            merge_list(HorizontalPodAutoscalerCondition, "type", list_type="map", keys=("type",)),
            6,
        ),
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

KINDS = {"HorizontalPodAutoscaler": HorizontalPodAutoscaler}
