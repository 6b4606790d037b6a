"""``autoscaling/v1`` HorizontalPodAutoscalers: a view of the stored ``autoscaling/v2``
objects, converted at this boundary.

The registry stores and watches one version of a kind (the first declared: v2); v1 is
served for create, get and list, which is what v1 clients such as ``kubectl autoscale``
use. Everything else (update, patch, delete, watch, tables) is served by v2, the
preferred version.

v1 -> v2: ``targetCPUUtilizationPercentage`` becomes the one metric (a Resource ``cpu``
metric with that average utilization; without it the v2 default, 80%, applies).
v2 -> v1: a Resource ``cpu`` utilization metric gives ``targetCPUUtilizationPercentage``
and ``currentCPUUtilizationPercentage``; the metrics, current metrics, conditions and
behavior v1 has no field for are shown as JSON in the ``autoscaling.alpha.orch.io/*``
annotations. A v1 create carrying those annotations is refused: they are the server's.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

import orjson

from ..api import names
from ..api import status as st
from ..api import validation as v
from ..api.codec import decode_stored
from ..api.helpers import dict_at, list_at
from ..api.kinds import KindInfo
from ..api.selectors import SelectorError, parse_field_selector, parse_label_selector
from ..api.user import UserInfo

V1 = f"{names.AUTOSCALING_GROUP}/v1"
V2 = f"{names.AUTOSCALING_GROUP}/v2"
_ANNOTATIONS = (
    names.HPA_V1_METRICS_ANNOTATION,
    names.HPA_V1_CURRENT_METRICS_ANNOTATION,
    names.HPA_V1_CONDITIONS_ANNOTATION,
    names.HPA_V1_BEHAVIOR_ANNOTATION,
)


def _cpu_utilization_metric(metric: Any) -> int | None:
    """The target utilization of a Resource cpu Utilization metric, else None."""
    if not isinstance(metric, dict) or metric.get("type") != "Resource":
        return None
    source = dict_at(metric, "resource")
    target = dict_at(source, "target")
    util = target.get("averageUtilization")
    if source.get("name") == "cpu" and target.get("type") == "Utilization" and isinstance(util, int):
        return util
    return None


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def to_v1(obj: dict) -> dict:
    """A stored v2 autoscaler as ``autoscaling/v1`` shows it."""
    md = copy.deepcopy(dict_at(obj, "metadata"))
    spec, status = dict_at(obj, "spec"), dict_at(obj, "status")
    annotations = dict(md.get("annotations") or {})
    for key in _ANNOTATIONS:
        annotations.pop(key, None)
    out_spec: dict = {"scaleTargetRef": copy.deepcopy(spec.get("scaleTargetRef") or {})}
    if spec.get("minReplicas") is not None:
        out_spec["minReplicas"] = spec["minReplicas"]
    out_spec["maxReplicas"] = spec.get("maxReplicas", 0)
    others = []
    for metric in list_at(spec, "metrics"):
        util = _cpu_utilization_metric(metric)
        if util is not None and "targetCPUUtilizationPercentage" not in out_spec:
            out_spec["targetCPUUtilizationPercentage"] = util
        else:
            others.append(metric)
    if others:
        annotations[names.HPA_V1_METRICS_ANNOTATION] = _json(others)
    if spec.get("behavior") is not None:
        annotations[names.HPA_V1_BEHAVIOR_ANNOTATION] = _json(spec["behavior"])
    out_status: dict = {}
    for key in ("observedGeneration", "lastScaleTime"):
        if status.get(key) is not None:
            out_status[key] = status[key]
    out_status["currentReplicas"] = status.get("currentReplicas", 0)
    out_status["desiredReplicas"] = status.get("desiredReplicas", 0)
    current_others = []
    for metric in list_at(status, "currentMetrics"):
        current = dict_at(dict_at(metric, "resource"), "current") if isinstance(metric, dict) else {}
        is_cpu = isinstance(metric, dict) and metric.get("type") == "Resource"
        if (
            is_cpu
            and dict_at(metric, "resource").get("name") == "cpu"
            and current.get("averageUtilization") is not None
        ):
            out_status["currentCPUUtilizationPercentage"] = current["averageUtilization"]
        else:
            current_others.append(metric)
    if current_others:
        annotations[names.HPA_V1_CURRENT_METRICS_ANNOTATION] = _json(current_others)
    if list_at(status, "conditions"):
        annotations[names.HPA_V1_CONDITIONS_ANNOTATION] = _json(status["conditions"])
    if annotations:
        md["annotations"] = annotations
    else:
        md.pop("annotations", None)
    return {
        "kind": "HorizontalPodAutoscaler",
        "apiVersion": V1,
        "metadata": md,
        "spec": out_spec,
        "status": out_status,
    }


def from_v1(obj: dict) -> dict:
    """A v1 autoscaler written by a client, as the v2 object to store (its status is
    the server's and dropped, as on any create)."""
    md = copy.deepcopy(dict_at(obj, "metadata"))
    name = str(md.get("name") or md.get("generateName") or "")
    raw_annotations = md.get("annotations")
    annotations: dict = raw_annotations if isinstance(raw_annotations, dict) else {}
    errs = [
        v.FieldError.forbidden(
            f"metadata.annotations[{key}]", "is set by the server from the autoscaling/v2 object; write that instead"
        )
        for key in _ANNOTATIONS
        if key in annotations
    ]
    if errs:
        raise st.invalid("HorizontalPodAutoscaler", name, v.causes(errs), names.AUTOSCALING_GROUP)
    spec = dict_at(obj, "spec")
    out_spec: dict = {}
    for key in ("scaleTargetRef", "minReplicas", "maxReplicas"):
        if key in spec:
            out_spec[key] = copy.deepcopy(spec[key])
    target = spec.get("targetCPUUtilizationPercentage")
    if target is not None:
        out_spec["metrics"] = [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}},
            }
        ]
    return {"kind": "HorizontalPodAutoscaler", "apiVersion": V2, "metadata": md, "spec": out_spec}


def _annotation_json(annotations: dict, key: str) -> Any:
    raw = annotations.pop(key, None)
    if not isinstance(raw, str):
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def view_to_v2(obj: dict) -> dict:
    """A v1 autoscaler as :func:`to_v1` shows one (the annotations holding what v1 has
    no field for), back as the v2 object: the reverse of :func:`to_v1`, for objects the
    server converted itself (an admission webhook's view of a v2 request). The CPU
    metric follows the others, as upstream's conversion puts it."""
    md = copy.deepcopy(dict_at(obj, "metadata"))
    annotations = dict(md.get("annotations") or {})
    others = _annotation_json(annotations, names.HPA_V1_METRICS_ANNOTATION)
    behavior = _annotation_json(annotations, names.HPA_V1_BEHAVIOR_ANNOTATION)
    current_others = _annotation_json(annotations, names.HPA_V1_CURRENT_METRICS_ANNOTATION)
    conditions = _annotation_json(annotations, names.HPA_V1_CONDITIONS_ANNOTATION)
    if annotations:
        md["annotations"] = annotations
    else:
        md.pop("annotations", None)
    spec, status = dict_at(obj, "spec"), dict_at(obj, "status")
    out_spec: dict = {}
    for key in ("scaleTargetRef", "minReplicas", "maxReplicas"):
        if key in spec:
            out_spec[key] = copy.deepcopy(spec[key])
    metrics = list(others) if isinstance(others, list) else []
    target = spec.get("targetCPUUtilizationPercentage")
    if target is not None:
        metrics.append(
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}},
            }
        )
    if metrics:
        out_spec["metrics"] = metrics
    if isinstance(behavior, dict):
        out_spec["behavior"] = behavior
    out: dict = {"kind": "HorizontalPodAutoscaler", "apiVersion": V2, "metadata": md, "spec": out_spec}
    if "status" in obj:
        out_status: dict = {}
        for key in ("observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"):
            if status.get(key) is not None:
                out_status[key] = status[key]
        current = list(current_others) if isinstance(current_others, list) else []
        if status.get("currentCPUUtilizationPercentage") is not None:
            current.append(
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "current": {"averageUtilization": status["currentCPUUtilizationPercentage"]},
                    },
                }
            )
        if current:
            out_status["currentMetrics"] = current
        if isinstance(conditions, list):
            out_status["conditions"] = conditions
        out["status"] = out_status
    return out


class _Store(Protocol):
    async def get_object(self, kind: KindInfo, namespace: str, name: str) -> dict: ...

    async def list(
        self,
        kind: KindInfo,
        namespace: str | None,
        labels: Any,
        fields: Any,
        rv: str | None,
        rv_match: str | None,
        limit: int,
        cont: str | None,
    ) -> Any: ...

    async def create(
        self,
        kind: KindInfo,
        namespace: str,
        obj: dict,
        user: UserInfo,
        *,
        dry_run: bool = False,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> tuple[dict, bytes]: ...


class HorizontalPodAutoscalerV1REST:
    """Create, get and list of ``autoscaling/v1`` autoscalers over the stored v2 objects."""

    def __init__(self, store: _Store, stored: KindInfo):
        self.store = store
        self.stored = stored

    async def create(self, ctx: Any, obj: dict) -> tuple[int, dict]:
        created, _ = await self.store.create(
            self.stored,
            ctx.namespace,
            from_v1(obj),
            ctx.user,
            dry_run=ctx.dry_run,
            field_manager=ctx.field_manager or None,
        )
        return 201, to_v1(created)

    async def get(self, ctx: Any) -> dict:
        return to_v1(await self.store.get_object(self.stored, ctx.namespace, ctx.name))

    async def list(self, ctx: Any) -> dict:
        query = ctx.query
        try:
            labels = parse_label_selector(query["labelSelector"]) if query.get("labelSelector") else None
            fields = parse_field_selector(query["fieldSelector"]) if query.get("fieldSelector") else None
        except (SelectorError, ValueError) as exc:
            raise st.bad_request(f"invalid selector: {exc}") from None
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise st.bad_request(f"invalid limit {query.get('limit')!r}") from None
        res = await self.store.list(
            self.stored,
            ctx.namespace or None,
            labels,
            fields,
            query.get("resourceVersion"),
            query.get("resourceVersionMatch"),
            limit,
            query.get("continue"),
        )
        meta: dict = {"resourceVersion": str(res.resource_version)}
        if res.continue_token:
            meta["continue"] = res.continue_token
            if res.remaining is not None:
                meta["remainingItemCount"] = res.remaining
        return {
            "kind": "HorizontalPodAutoscalerList",
            "apiVersion": V1,
            "metadata": meta,
            "items": [to_v1(decode_stored(raw, rev)) for raw, rev in res.items],
        }
