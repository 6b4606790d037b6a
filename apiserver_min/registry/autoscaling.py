"""The autoscaling family: HorizontalPodAutoscaler (``autoscaling/v2``).

Validation follows upstream's (v1.27) rules and messages: ``minReplicas`` at least 1
(scaling to zero needs the alpha feature HPAScaleToZero, which this server does not
offer), ``maxReplicas`` positive and not below ``minReplicas``, a scale target with a
kind and a name, each metric of a known type carrying exactly the source its type
names, targets of a known type with positive values, and behavior rules within
upstream's bounds. A status write may not make the replica counts negative.
"""

from __future__ import annotations

from typing import Any

from ..api import validation as v
from ..api.quantity import QuantityError, parse_quantity
from ..api.selectors import validate_label_selector
from .strategy import Strategy

Errs = list[v.FieldError]

METRIC_SOURCE_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")
# The field each metric type fills.
SOURCE_FIELDS = {
    "Object": "object",
    "Pods": "pods",
    "Resource": "resource",
    "External": "external",
    "ContainerResource": "containerResource",
}
TARGET_TYPES = ("Utilization", "Value", "AverageValue")
SELECT_POLICIES = ("Disabled", "Max", "Min")
POLICY_TYPES = ("Percent", "Pods")
MAX_STABILIZATION_WINDOW_SECONDS = 3600
MAX_PERIOD_SECONDS = 1800
MIN_REPLICAS_LOWER_BOUND = 1


def _d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_object_reference(ref: Any, path: str) -> Errs:
    errs: Errs = []
    ref = _d(ref)
    for field in ("kind", "name"):
        value = ref.get(field) or ""
        if not value:
            errs.append(v.FieldError.required(f"{path}.{field}"))
        elif isinstance(value, str):
            errs += [v.FieldError.invalid(f"{path}.{field}", value, m) for m in v.is_valid_path_segment_name(value)]
    return errs


def _validate_metric_identifier(ident: Any, path: str) -> Errs:
    ident = _d(ident)
    name = ident.get("name") or ""
    errs: Errs = []
    if not name:
        errs.append(v.FieldError.required(f"{path}.name", "must specify a metric name"))
    elif isinstance(name, str):
        errs += [v.FieldError.invalid(f"{path}.name", name, m) for m in v.is_valid_path_segment_name(name)]
    if ident.get("selector") is not None:
        errs += validate_label_selector(ident["selector"], f"{path}.selector")
    return errs


def _positive_quantity(value: Any) -> bool:
    try:
        return parse_quantity(value).sign() == 1
    except (QuantityError, TypeError, ValueError):
        return False


def _validate_metric_target(target: Any, path: str) -> Errs:
    target = _d(target)
    errs: Errs = []
    typ = target.get("type") or ""
    if not typ:
        errs.append(v.FieldError.required(f"{path}.type", "must specify a metric target type"))
    if typ not in TARGET_TYPES:
        errs.append(v.FieldError.invalid(f"{path}.type", typ, "must be either Utilization, Value, or AverageValue"))
    for field in ("value", "averageValue"):
        if target.get(field) is not None and not _positive_quantity(target[field]):
            errs.append(v.FieldError.invalid(f"{path}.{field}", target[field], "must be positive"))
    util = target.get("averageUtilization")
    if util is not None and (not _is_int(util) or util < 1):
        errs.append(v.FieldError.invalid(f"{path}.averageUtilization", util, "must be greater than 0"))
    return errs


def _validate_resource_source(src: dict, path: str, container: bool) -> Errs:
    errs: Errs = []
    if not src.get("name"):
        errs.append(v.FieldError.required(f"{path}.name", "must specify a resource name"))
    if container:
        name = src.get("container") or ""
        if not name:
            errs.append(v.FieldError.required(f"{path}.container", "must specify a container"))
        elif isinstance(name, str):
            errs += [v.FieldError.invalid(f"{path}.container", name, m) for m in v.is_dns1123_label(name)]
    target = _d(src.get("target"))
    errs += _validate_metric_target(target, f"{path}.target")
    if target.get("averageUtilization") is None and target.get("averageValue") is None:
        errs.append(
            v.FieldError.required(
                f"{path}.target.averageUtilization", "must set either a target raw value or a target utilization"
            )
        )
    if target.get("averageUtilization") is not None and target.get("averageValue") is not None:
        errs.append(
            v.FieldError.forbidden(
                f"{path}.target.averageValue", "may not set both a target raw value and a target utilization"
            )
        )
    return errs


def _validate_pods_source(src: dict, path: str) -> Errs:
    errs = _validate_metric_identifier(src.get("metric"), f"{path}.metric")
    target = _d(src.get("target"))
    errs += _validate_metric_target(target, f"{path}.target")
    if target.get("averageValue") is None:
        errs.append(v.FieldError.required(f"{path}.target.averageValue", "must specify a positive target averageValue"))
    return errs


def _validate_object_source(src: dict, path: str) -> Errs:
    errs = validate_object_reference(src.get("describedObject"), f"{path}.describedObject")
    errs += _validate_metric_identifier(src.get("metric"), f"{path}.metric")
    target = _d(src.get("target"))
    errs += _validate_metric_target(target, f"{path}.target")
    if target.get("value") is None and target.get("averageValue") is None:
        errs.append(
            v.FieldError.required(f"{path}.target.averageValue", "must set either a target value or averageValue")
        )
    return errs


def _validate_external_source(src: dict, path: str) -> Errs:
    errs = _validate_metric_identifier(src.get("metric"), f"{path}.metric")
    target = _d(src.get("target"))
    errs += _validate_metric_target(target, f"{path}.target")
    if target.get("value") is None and target.get("averageValue") is None:
        errs.append(
            v.FieldError.required(
                f"{path}.target.averageValue", "must set either a target value for metric or a per-pod target"
            )
        )
    if target.get("value") is not None and target.get("averageValue") is not None:
        errs.append(
            v.FieldError.forbidden(
                f"{path}.target.value", "may not set both a target value for metric and a per-pod target"
            )
        )
    return errs


def validate_metric_spec(spec: Any, path: str) -> Errs:
    spec = _d(spec)
    errs: Errs = []
    typ = spec.get("type") or ""
    if not typ:
        errs.append(v.FieldError.required(f"{path}.type", "must specify a metric source type"))
    elif typ not in METRIC_SOURCE_TYPES:
        errs.append(v.FieldError.not_supported(f"{path}.type", typ, METRIC_SOURCE_TYPES))
    present = [field for field in SOURCE_FIELDS.values() if spec.get(field) is not None]
    expected = SOURCE_FIELDS.get(typ, "")
    if expected and spec.get(expected) is None:
        errs.append(
            v.FieldError.required(f"{path}.{expected}", "must populate information for the given metric source")
        )
    if len(present) != 1:
        for field in sorted(present):
            if field != expected:
                errs.append(v.FieldError.forbidden(f"{path}.{field}", "must populate the given metric source only"))
    # The first source present is checked in full, in upstream's order.
    for field, check in (
        ("object", _validate_object_source),
        ("external", _validate_external_source),
        ("pods", _validate_pods_source),
    ):
        if spec.get(field) is not None:
            return errs + check(_d(spec[field]), f"{path}.{field}")
    if spec.get("resource") is not None:
        return errs + _validate_resource_source(_d(spec["resource"]), f"{path}.resource", container=False)
    if spec.get("containerResource") is not None:
        return errs + _validate_resource_source(
            _d(spec["containerResource"]), f"{path}.containerResource", container=True
        )
    return errs


def _validate_metrics(metrics: Any, path: str, min_replicas: Any) -> Errs:
    errs: Errs = []
    items = metrics if isinstance(metrics, list) else []
    for i, m in enumerate(items):
        errs += validate_metric_spec(m, f"{path}[{i}]")
    if min_replicas == 0:
        types = {_d(m).get("type") for m in items}
        if not types & {"Object", "External"}:
            errs.append(
                v.FieldError.forbidden(
                    path, "must specify at least one Object or External metric to support scaling to zero replicas"
                )
            )
    return errs


def _validate_scaling_rules(rules: Any, path: str) -> Errs:
    if rules is None:
        return []
    rules = _d(rules)
    errs: Errs = []
    window = rules.get("stabilizationWindowSeconds")
    if window is not None and _is_int(window):
        if window < 0:
            errs.append(
                v.FieldError.invalid(
                    f"{path}.stabilizationWindowSeconds", window, "must be greater than or equal to zero"
                )
            )
        if window > MAX_STABILIZATION_WINDOW_SECONDS:
            errs.append(
                v.FieldError.invalid(
                    f"{path}.stabilizationWindowSeconds",
                    window,
                    f"must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}",
                )
            )
    select = rules.get("selectPolicy")
    if select is not None and select not in SELECT_POLICIES:
        errs.append(v.FieldError.not_supported(f"{path}.selectPolicy", select, SELECT_POLICIES))
    policies = rules.get("policies") if isinstance(rules.get("policies"), list) else []
    if not policies:
        errs.append(v.FieldError.required(f"{path}.policies", "must specify at least one Policy"))
    for i, policy in enumerate(policies):
        p = f"{path}.policies[{i}]"
        policy = _d(policy)
        if policy.get("type") not in POLICY_TYPES:
            errs.append(v.FieldError.not_supported(f"{p}.type", policy.get("type", ""), POLICY_TYPES))
        value = policy.get("value", 0)
        if _is_int(value) and value <= 0:
            errs.append(v.FieldError.invalid(f"{p}.value", value, "must be greater than zero"))
        period = policy.get("periodSeconds", 0)
        if _is_int(period):
            if period <= 0:
                errs.append(v.FieldError.invalid(f"{p}.periodSeconds", period, "must be greater than zero"))
            if period > MAX_PERIOD_SECONDS:
                errs.append(
                    v.FieldError.invalid(
                        f"{p}.periodSeconds", period, f"must be less than or equal to {MAX_PERIOD_SECONDS}"
                    )
                )
    return errs


def validate_hpa_spec(spec: Any, path: str = "spec") -> Errs:
    spec = _d(spec)
    errs: Errs = []
    min_replicas = spec.get("minReplicas")
    max_replicas = spec.get("maxReplicas", 0)
    if _is_int(min_replicas) and min_replicas < MIN_REPLICAS_LOWER_BOUND:
        errs.append(
            v.FieldError.invalid(
                f"{path}.minReplicas", min_replicas, f"must be greater than or equal to {MIN_REPLICAS_LOWER_BOUND}"
            )
        )
    if _is_int(max_replicas):
        if max_replicas < 1:
            errs.append(v.FieldError.invalid(f"{path}.maxReplicas", max_replicas, "must be greater than 0"))
        if _is_int(min_replicas) and max_replicas < min_replicas:
            errs.append(
                v.FieldError.invalid(
                    f"{path}.maxReplicas", max_replicas, "must be greater than or equal to `minReplicas`"
                )
            )
    errs += validate_object_reference(spec.get("scaleTargetRef"), f"{path}.scaleTargetRef")
    errs += _validate_metrics(spec.get("metrics"), f"{path}.metrics", min_replicas)
    behavior = spec.get("behavior")
    if behavior is not None:
        behavior = _d(behavior)
        errs += _validate_scaling_rules(behavior.get("scaleUp"), f"{path}.behavior.scaleUp")
        errs += _validate_scaling_rules(behavior.get("scaleDown"), f"{path}.behavior.scaleDown")
    return errs


def validate_hpa_status(status: Any, path: str = "status") -> Errs:
    status = _d(status)
    errs: Errs = []
    for field in ("currentReplicas", "desiredReplicas"):
        value = status.get(field)
        if _is_int(value) and value < 0:
            errs.append(v.FieldError.invalid(f"{path}.{field}", value, "must be greater than or equal to 0"))
    return errs


class HorizontalPodAutoscalerStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        return super().validate(obj) + validate_hpa_spec(obj.get("spec")) + validate_hpa_status(obj.get("status"))
