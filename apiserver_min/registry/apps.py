"""The workload family's strategies: Deployments, ReplicaSets and ReplicationControllers.

What upstream's apps validation checks of them: a selector that is present, not empty
and matched by the pod template's labels (immutable in ``apps/v1``); a pod template
that is a valid pod spec restarting ``Always`` without an active deadline; replica
counts, ``minReadySeconds``, ``revisionHistoryLimit`` and ``progressDeadlineSeconds``
not negative (the deadline beyond ``minReadySeconds``); and a Deployment strategy whose
``maxSurge`` and ``maxUnavailable`` are integers or percentages up to 100% and not both 0.

A status write (the ``status`` sub-resource) is checked as upstream's status update
validation checks it, the spec not again: counters not negative, none above
``status.replicas``, ``availableReplicas`` not above ``readyReplicas``, and a
Deployment's ``collisionCount`` never decremented.
"""

from __future__ import annotations

import copy
import re
from typing import Any, TypeGuard

from ..api import enumvalidation, podvalidation
from ..api import validation as v
from ..api.helpers import dict_at
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict, validate_label_selector
from .apps_daemonset import collision_not_decremented
from .strategy import Strategy

Errs = list[v.FieldError]

NEGATIVE = "must be greater than or equal to 0"
ABOVE_REPLICAS = "cannot be greater than status.replicas"
ABOVE_READY = "cannot be greater than readyReplicas"
_PERCENT = re.compile(r"^[0-9]+%$")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative(spec: dict, key: str, path: str, errs: Errs) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if not _is_int(value):
        errs.append(v.FieldError.type_invalid(f"{path}.{key}", value, "must be an integer"))
        return None
    if value < 0:
        errs.append(v.FieldError.invalid(f"{path}.{key}", value, NEGATIVE))
    return value


def int_or_percent_value(value: Any) -> int | None:
    """The number of an IntOrString (``5`` or ``"5%"``); None when it is neither."""
    if _is_int(value):
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        return int(value[:-1])
    return None


def _int_or_percent(value: Any, path: str, errs: Errs) -> None:
    """Upstream ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    if isinstance(value, str):
        if not _PERCENT.match(value):
            errs.append(v.FieldError.invalid(path, value, "must be an integer or percentage (e.g '5%')"))
        elif int(value[:-1]) > 100:
            errs.append(v.FieldError.invalid(path, value, "must not be greater than 100%"))
    elif _is_int(value):
        if value < 0:
            errs.append(v.FieldError.invalid(path, value, NEGATIVE))
    else:
        errs.append(v.FieldError.type_invalid(path, value, "must be an integer or percentage (e.g '5%')"))


def validate_template(template: Any, selector: LabelSelector | None, path: str) -> Errs:
    """Upstream ValidatePodTemplateSpecForReplicaSet: the template's labels match the
    selector; its metadata and pod spec are valid; it restarts Always, with no deadline."""
    if not isinstance(template, dict):
        return [v.FieldError.required(path, "")]
    errs: Errs = []
    md = template.get("metadata")
    md = md if isinstance(md, dict) else {}
    labels = md.get("labels")
    if selector is not None and not selector.empty:
        if not selector.matches(labels if isinstance(labels, dict) else {}):
            errs.append(
                v.FieldError.invalid(f"{path}.metadata.labels", labels, "`selector` does not match template `labels`")
            )
    errs += v.validate_labels(labels if isinstance(labels, dict) else None, f"{path}.metadata.labels")
    annotations = md.get("annotations")
    errs += v.validate_annotations(
        annotations if isinstance(annotations, dict) else None, f"{path}.metadata.annotations"
    )
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return errs + [v.FieldError.required(f"{path}.spec", "")]
    errs += podvalidation.validate_pod_spec(spec, f"{path}.spec")
    restart = spec.get("restartPolicy")
    if restart != "Always":
        errs.append(v.FieldError.not_supported(f"{path}.spec.restartPolicy", restart, ("Always",)))
    if spec.get("activeDeadlineSeconds") is not None:
        errs.append(
            v.FieldError.forbidden(
                f"{path}.spec.activeDeadlineSeconds", "activeDeadlineSeconds in ReplicaSet is not Supported"
            )
        )
    return errs


def _structured_selector(spec: dict, path: str, errs: Errs) -> LabelSelector | None:
    """A ``{matchLabels, matchExpressions}`` selector: required and not empty."""
    sel = spec.get("selector")
    if sel is None:
        errs.append(v.FieldError.required(f"{path}.selector", ""))
        return None
    sel_errs = validate_label_selector(sel, f"{path}.selector")
    errs += sel_errs
    if sel_errs:
        return None
    if not sel.get("matchLabels") and not sel.get("matchExpressions"):
        # (upstream says "deployment" for ReplicaSets too)
        errs.append(v.FieldError.invalid(f"{path}.selector", sel, "empty selector is invalid for deployment"))
        return None
    try:
        return label_selector_from_dict(sel)
    except SelectorError:
        return None


def _replica_set_like(spec: dict, path: str = "spec") -> Errs:
    errs: Errs = []
    _non_negative(spec, "replicas", path, errs)
    _non_negative(spec, "minReadySeconds", path, errs)
    selector = _structured_selector(spec, path, errs)
    errs += validate_template(spec.get("template"), selector, f"{path}.template")
    return errs


def validate_deployment_spec(spec: dict, path: str = "spec") -> Errs:
    errs = _replica_set_like(spec, path)
    _non_negative(spec, "revisionHistoryLimit", path, errs)
    deadline = _non_negative(spec, "progressDeadlineSeconds", path, errs)
    min_ready = spec.get("minReadySeconds")
    if deadline is not None and _is_int(min_ready) and deadline <= min_ready:
        errs.append(
            v.FieldError.invalid(f"{path}.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds")
        )
    strategy = spec.get("strategy")
    spath = f"{path}.strategy"
    if isinstance(strategy, dict):
        rolling = strategy.get("rollingUpdate")
        if strategy.get("type") == "Recreate" and rolling is not None:
            errs.append(
                v.FieldError.forbidden(
                    f"{spath}.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'"
                )
            )
        elif strategy.get("type") == "RollingUpdate":
            if not isinstance(rolling, dict):
                errs.append(
                    v.FieldError.required(f"{spath}.rollingUpdate", "this should be defaulted and never be nil")
                )
            else:
                rpath = f"{spath}.rollingUpdate"
                unavailable, surge = rolling.get("maxUnavailable"), rolling.get("maxSurge")
                _int_or_percent(unavailable, f"{rpath}.maxUnavailable", errs)
                _int_or_percent(surge, f"{rpath}.maxSurge", errs)
                if int_or_percent_value(unavailable) == 0 and int_or_percent_value(surge) == 0:
                    errs.append(
                        v.FieldError.invalid(
                            f"{rpath}.maxUnavailable", unavailable, "may not be 0 when `maxSurge` is 0"
                        )
                    )
    return errs


def validate_replication_controller_spec(spec: dict, path: str = "spec") -> Errs:
    errs: Errs = []
    _non_negative(spec, "replicas", path, errs)
    _non_negative(spec, "minReadySeconds", path, errs)
    sel = spec.get("selector")
    selector: LabelSelector | None = None
    if not sel:
        errs.append(v.FieldError.required(f"{path}.selector", ""))
    elif not isinstance(sel, dict) or not all(isinstance(x, str) for x in sel.values()):
        errs.append(v.FieldError.type_invalid(f"{path}.selector", sel, "must be a map of strings"))
    else:
        label_errs = v.validate_labels(sel, f"{path}.selector")
        errs += label_errs
        if not label_errs:
            selector = LabelSelector.from_set(sel)
    template = spec.get("template")
    if template is None:
        errs.append(v.FieldError.required(f"{path}.template", ""))
    else:
        errs += validate_template(template, selector, f"{path}.template")
    return errs


# upstream's order of the non-negative checks
DEPLOYMENT_STATUS_COUNTS = (
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
    "collisionCount",
)
REPLICA_SET_STATUS_COUNTS = (
    "replicas",
    "fullyLabeledReplicas",
    "readyReplicas",
    "availableReplicas",
    "observedGeneration",
)


def _status_counts(status: Any, counts: tuple[str, ...], errs: Errs) -> dict[str, int]:
    """Each counter checked not negative (an integer); the values, absent ones as 0."""
    status = status if isinstance(status, dict) else {}
    values: dict[str, int] = {}
    for key in counts:
        n = _non_negative(status, key, "status", errs)
        values[key] = n if n is not None else 0
    return values


def _not_above(values: dict[str, int], keys: tuple[str, ...], errs: Errs) -> None:
    for key in keys:
        if values[key] > values["replicas"]:
            errs.append(v.FieldError.invalid(f"status.{key}", values[key], ABOVE_REPLICAS))
    if values["availableReplicas"] > values["readyReplicas"]:
        errs.append(v.FieldError.invalid("status.availableReplicas", values["availableReplicas"], ABOVE_READY))


def validate_deployment_status(status: Any) -> Errs:
    """Upstream ValidateDeploymentStatus."""
    errs: Errs = []
    values = _status_counts(status, DEPLOYMENT_STATUS_COUNTS, errs)
    _not_above(values, ("updatedReplicas", "readyReplicas", "availableReplicas"), errs)
    return errs


def validate_replica_set_status(status: Any) -> Errs:
    """Upstream ValidateReplicaSetStatus (and ValidateReplicationControllerStatus, the same rules)."""
    errs: Errs = []
    values = _status_counts(status, REPLICA_SET_STATUS_COUNTS, errs)
    _not_above(values, ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"), errs)
    return errs


def _selector_immutable(new: dict, old: dict) -> Errs:
    sel = dict_at(new, "spec").get("selector")
    if sel != dict_at(old, "spec").get("selector"):
        return [v.FieldError.invalid("spec.selector", sel, "field is immutable")]
    return []


class _WorkloadStrategy(Strategy):
    enum_rules = enumvalidation.POD_RULES  # validate_template checks the pod template's own

    def validate_spec(self, spec: dict) -> Errs:
        raise NotImplementedError

    def validate(self, obj: dict) -> list[v.FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return super().validate(obj) + [v.FieldError.required("spec", "")]
        return super().validate(obj) + self.validate_spec(spec)

    def validate_status(self, status: Any) -> Errs:
        return validate_replica_set_status(status)

    def validate_status_update(self, new: dict, old: dict) -> list[v.FieldError]:
        """Upstream's status update validation: the metadata update and the status, not the spec."""
        errs = self.validate_metadata(new) + self._finalizer_update_errors(new, old)
        return errs + self.validate_status(new.get("status"))


class DeploymentStrategy(_WorkloadStrategy):
    def validate_spec(self, spec: dict) -> Errs:
        return validate_deployment_spec(spec)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        """As upstream: a change of the annotations also counts as a new generation."""
        super().prepare_for_update(new, old)
        if dict_at(new, "metadata").get("annotations") != dict_at(old, "metadata").get("annotations"):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1) or 1) + 1

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        """A status write keeps the stored spec and labels, and takes the rest of the
        object as sent: the controller records the revision in the annotations so."""
        new["spec"] = copy.deepcopy(old.get("spec"))
        md, omd = new.setdefault("metadata", {}), old["metadata"]
        if "labels" in omd:
            md["labels"] = copy.deepcopy(omd["labels"])
        else:
            md.pop("labels", None)
        self.keep_system_metadata(new, old)
        md["generation"] = omd.get("generation", 1)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        return super().validate_update(new, old) + _selector_immutable(new, old)

    def validate_status(self, status: Any) -> Errs:
        return validate_deployment_status(status)

    def validate_status_update(self, new: dict, old: dict) -> list[v.FieldError]:
        return super().validate_status_update(new, old) + collision_not_decremented(new, old)


class ReplicaSetStrategy(_WorkloadStrategy):
    def validate_spec(self, spec: dict) -> Errs:
        return _replica_set_like(spec)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        return super().validate_update(new, old) + _selector_immutable(new, old)


class ReplicationControllerStrategy(_WorkloadStrategy):
    def validate_spec(self, spec: dict) -> Errs:
        return validate_replication_controller_spec(spec)
