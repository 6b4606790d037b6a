"""DaemonSets (apps/v1): the strategy, as upstream's (v1.27) daemonset strategy and
ValidateDaemonSet.

The server keeps the template generation in the annotation
``deprecated.daemonset.template.generation``: 1 on create, one more on each update
that changes ``spec.template``; what a client writes there is replaced.
"""

from __future__ import annotations

from typing import Any

from ..api import names
from ..api import validation as v
from ..api.helpers import dict_at
from ..api.podvalidation import validate_pod_spec
from ..api.selectors import SelectorError, label_selector_from_dict, validate_label_selector
from .strategy import Strategy

NONNEGATIVE = "must be greater than or equal to 0"
SELECTOR_MISMATCH = "`selector` does not match template `labels`"


def nonnegative(spec: dict, field: str, path: str) -> list[v.FieldError]:
    value = spec.get(field)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [v.FieldError.invalid(path, value, NONNEGATIVE)]
    return []


def template_matches_selector(spec: dict, path: str, kind: str) -> list[v.FieldError]:
    """``selector`` required, valid, not empty and matching the template's labels."""
    errs: list[v.FieldError] = []
    selector = spec.get("selector")
    labels = dict_at(dict_at(spec, "template"), "metadata").get("labels")
    if selector is None:
        errs.append(v.FieldError.required(f"{path}.selector"))
    else:
        errs += validate_label_selector(selector, f"{path}.selector")
        if isinstance(selector, dict) and not selector.get("matchLabels") and not selector.get("matchExpressions"):
            errs.append(v.FieldError.invalid(f"{path}.selector", selector, f"empty selector is invalid for {kind}"))
    try:
        parsed = label_selector_from_dict(selector if isinstance(selector, dict) or selector is None else {})
    except SelectorError:
        return errs
    if selector is not None and not parsed.matches(labels if isinstance(labels, dict) else {}):
        errs.append(v.FieldError.invalid(f"{path}.template.metadata.labels", labels, SELECTOR_MISMATCH))
    return errs


def validate_pod_template(template: Any, path: str) -> list[v.FieldError]:
    """A pod template's labels, annotations and pod spec (upstream ValidatePodTemplateSpec)."""
    if not isinstance(template, dict):
        return [v.FieldError.required(path)]
    tmd = dict_at(template, "metadata")
    errs = v.validate_labels(tmd.get("labels"), f"{path}.metadata.labels")
    errs += v.validate_annotations(tmd.get("annotations"), f"{path}.metadata.annotations")
    spec = template.get("spec")
    if isinstance(spec, dict):
        errs += validate_pod_spec(spec, f"{path}.spec")
    else:
        errs.append(v.FieldError.required(f"{path}.spec"))
    return errs


def validate_daemon_set_spec(spec: Any) -> list[v.FieldError]:
    if not isinstance(spec, dict):
        return [v.FieldError.required("spec")]
    errs = template_matches_selector(spec, "spec", "daemonset")
    template = spec.get("template")
    errs += validate_pod_template(template, "spec.template")
    pod_spec = dict_at(dict_at(spec, "template"), "spec")
    restart = pod_spec.get("restartPolicy")
    if restart != "Always":
        errs.append(v.FieldError.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
    if pod_spec.get("activeDeadlineSeconds") is not None:
        errs.append(
            v.FieldError.invalid(
                "spec.template.spec.activeDeadlineSeconds",
                pod_spec["activeDeadlineSeconds"],
                "activeDeadlineSeconds must be nil for daemonsets",
            )
        )
    errs += nonnegative(spec, "minReadySeconds", "spec.minReadySeconds")
    errs += validate_update_strategy(dict_at(spec, "updateStrategy"))
    errs += nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit")
    return errs


PERCENT_MESSAGE = v.regex_error(
    "a valid percent string must be a numeric string followed by an ending '%'", "[0-9]+%", "1%", "93%"
)


def _percent(value: Any) -> int | None:
    """The number of a valid percent string, else None."""
    if isinstance(value, str) and len(value) > 1 and value.endswith("%") and value[:-1].isdigit():
        return int(value[:-1])
    return None


def _int_or_percent_value(value: Any) -> int:
    """As upstream reads an int-or-percent to see whether it is zero: a percent's number,
    an int, a string's integer (0 when it is none)."""
    pct = _percent(value)
    if pct is not None:
        return pct
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


def _positive_int_or_percent(value: Any, path: str) -> list[v.FieldError]:
    shown = v.GoValue(str(value))
    if isinstance(value, str):
        return [] if _percent(value) is not None else [v.FieldError.invalid(path, shown, PERCENT_MESSAGE)]
    if isinstance(value, int) and not isinstance(value, bool):
        return [v.FieldError.invalid(path, value, NONNEGATIVE)] if value < 0 else []
    return [v.FieldError.invalid(path, shown, "must be an integer or percentage (e.g '5%')")]


def validate_update_strategy(strategy: dict) -> list[v.FieldError]:
    """RollingUpdate needs ``rollingUpdate`` with exactly one of maxUnavailable and maxSurge
    non-zero, each a non-negative number or a percentage of at most 100%."""
    path = "spec.updateStrategy"
    if strategy.get("type") != "RollingUpdate":
        return []
    rolling = strategy.get("rollingUpdate")
    if not isinstance(rolling, dict):
        return [v.FieldError.required(f"{path}.rollingUpdate")]
    rpath = f"{path}.rollingUpdate"
    errs: list[v.FieldError] = []
    present = {}
    for field in ("maxUnavailable", "maxSurge"):
        value = rolling.get(field)
        present[field] = value is not None and _int_or_percent_value(value) != 0
        if present[field]:
            errs += _positive_int_or_percent(value, f"{rpath}.{field}")
            pct = _percent(value)
            if pct is not None and pct > 100:
                errs.append(v.FieldError.invalid(f"{rpath}.{field}", v.GoValue(value), "must not be greater than 100%"))
    if present["maxUnavailable"] and present["maxSurge"]:
        errs.append(
            v.FieldError.invalid(
                f"{rpath}.maxSurge",
                v.GoValue(str(rolling.get("maxSurge"))),
                "may not be set when maxUnavailable is non-zero",
            )
        )
    elif not present["maxUnavailable"] and not present["maxSurge"]:
        errs.append(v.FieldError.required(f"{rpath}.maxUnavailable", "cannot be 0 when maxSurge is 0"))
    return errs


DS_STATUS_COUNTS = (
    "currentNumberScheduled",
    "numberMisscheduled",
    "desiredNumberScheduled",
    "numberReady",
    "observedGeneration",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberUnavailable",
    "collisionCount",
)


def status_counts_nonnegative(status: Any, counts: tuple[str, ...]) -> list[v.FieldError]:
    status = status if isinstance(status, dict) else {}
    errs: list[v.FieldError] = []
    for field in counts:
        errs += nonnegative(status, field, f"status.{field}")
    return errs


def collision_not_decremented(new: dict, old: dict) -> list[v.FieldError]:
    before = dict_at(old, "status").get("collisionCount")
    after = dict_at(new, "status").get("collisionCount")
    if isinstance(before, int) and (not isinstance(after, int) or after < before):
        return [v.FieldError.invalid("status.collisionCount", after or 0, "cannot be decremented")]
    return []


class DaemonSetStrategy(Strategy):
    def initial_status(self, obj: dict) -> dict:
        return {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        annotations = obj["metadata"].get("annotations")
        annotations = dict(annotations) if isinstance(annotations, dict) else {}
        annotations[names.ANNOTATION_DS_TEMPLATE_GENERATION] = "1"
        obj["metadata"]["annotations"] = annotations

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        before = dict_at(dict_at(old, "metadata"), "annotations").get(names.ANNOTATION_DS_TEMPLATE_GENERATION)
        try:
            generation = int(before) if isinstance(before, str) else 0
        except ValueError:
            generation = 0
        if dict_at(new.get("spec") or {}, "template") != dict_at(old.get("spec") or {}, "template"):
            generation += 1
        md = new.setdefault("metadata", {})
        annotations = md.get("annotations")
        annotations = dict(annotations) if isinstance(annotations, dict) else {}
        annotations[names.ANNOTATION_DS_TEMPLATE_GENERATION] = str(generation)
        md["annotations"] = annotations

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + validate_daemon_set_spec(obj.get("spec"))

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        if new.get("status") != old.get("status"):
            # A status write (the spec is the stored one, not checked again, as upstream).
            errs = self.validate_metadata(new) + self._finalizer_update_errors(new, old)
            return (
                errs
                + status_counts_nonnegative(new.get("status"), DS_STATUS_COUNTS)
                + collision_not_decremented(new, old)
            )
        errs = super().validate_update(new, old)
        new_sel = dict_at(new, "spec").get("selector")
        if new_sel != dict_at(old, "spec").get("selector"):
            errs.append(v.FieldError.invalid("spec.selector", new_sel, "field is immutable"))
        return errs
