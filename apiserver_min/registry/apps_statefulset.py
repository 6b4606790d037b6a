"""StatefulSets (apps/v1): the strategy, as upstream's (v1.27) statefulset strategy and
ValidateStatefulSet.

``spec.updateStrategy.rollingUpdate.maxUnavailable`` belongs to the alpha feature
MaxUnavailableStatefulSet, which this server does not implement: it is refused
rather than stored and ignored. ``spec.ordinals`` (beta, on by default in v1.27) is
implemented.
"""

from __future__ import annotations

from typing import Any

from ..api import validation as v
from ..api.helpers import dict_at
from .apps_daemonset import collision_not_decremented, nonnegative, status_counts_nonnegative, template_matches_selector
from .strategy import Strategy

MUTABLE_SPEC_FIELDS = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
FORBIDDEN_SPEC_UPDATE = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
)
MAX_UNAVAILABLE_REFUSED = (
    "maxUnavailable for StatefulSets is the alpha feature MaxUnavailableStatefulSet, "
    "which this server does not implement; leave it unset (pods are updated one at a time)"
)


def validate_stateful_set_spec(spec: Any) -> list[v.FieldError]:
    if not isinstance(spec, dict):
        return [v.FieldError.required("spec")]
    errs: list[v.FieldError] = []
    if not spec.get("podManagementPolicy"):
        errs.append(v.FieldError.required("spec.podManagementPolicy"))
    strategy = dict_at(spec, "updateStrategy")
    stype = strategy.get("type")
    rolling = strategy.get("rollingUpdate")
    if not stype:
        errs.append(v.FieldError.required("spec.updateStrategy"))
    elif stype == "OnDelete" and rolling is not None:
        errs.append(
            v.FieldError.invalid(
                "spec.updateStrategy.rollingUpdate", rolling, "only allowed for updateStrategy 'RollingUpdate'"
            )
        )
    elif stype == "RollingUpdate" and isinstance(rolling, dict):
        errs += nonnegative(rolling, "partition", "spec.updateStrategy.rollingUpdate.partition")
        if rolling.get("maxUnavailable") is not None:
            errs.append(
                v.FieldError.forbidden("spec.updateStrategy.rollingUpdate.maxUnavailable", MAX_UNAVAILABLE_REFUSED)
            )
    errs += nonnegative(spec, "replicas", "spec.replicas")
    errs += nonnegative(spec, "minReadySeconds", "spec.minReadySeconds")
    errs += nonnegative(dict_at(spec, "ordinals"), "start", "spec.ordinals.start")
    errs += template_matches_selector(spec, "spec", "statefulset")
    tmd = dict_at(dict_at(spec, "template"), "metadata")
    errs += v.validate_labels(tmd.get("labels"), "spec.template.labels")
    errs += v.validate_annotations(tmd.get("annotations"), "spec.template.annotations")
    pod_spec = dict_at(dict_at(spec, "template"), "spec")
    restart = pod_spec.get("restartPolicy")
    if restart != "Always":
        errs.append(v.FieldError.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
    if pod_spec.get("activeDeadlineSeconds") is not None:
        errs.append(
            v.FieldError.forbidden(
                "spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds in StatefulSet is not Supported"
            )
        )
    errs += nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit")
    for i, t in enumerate(spec.get("volumeClaimTemplates") or []):
        name = dict_at(t, "metadata").get("name") if isinstance(t, dict) else None
        if not name:
            errs.append(v.FieldError.required(f"spec.volumeClaimTemplates[{i}].metadata.name"))
        else:
            errs += v.validate_object_name(name, f"spec.volumeClaimTemplates[{i}].metadata.name", "subdomain")
    return errs


STS_STATUS_COUNTS = (
    "replicas",
    "readyReplicas",
    "currentReplicas",
    "updatedReplicas",
    "availableReplicas",
    "observedGeneration",
    "collisionCount",
)


def validate_stateful_set_status(status: Any) -> list[v.FieldError]:
    """Counts not negative, none above ``replicas``, available ones not above ready ones."""
    errs = status_counts_nonnegative(status, STS_STATUS_COUNTS)
    status = status if isinstance(status, dict) else {}

    def count(field: str) -> int:
        n = status.get(field)
        return n if isinstance(n, int) and not isinstance(n, bool) else 0

    for field in ("readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas"):
        if count(field) > count("replicas"):
            errs.append(v.FieldError.invalid(f"status.{field}", count(field), "cannot be greater than status.replicas"))
    if count("availableReplicas") > count("readyReplicas"):
        errs.append(
            v.FieldError.invalid(
                "status.availableReplicas", count("availableReplicas"), "cannot be greater than status.readyReplicas"
            )
        )
    return errs


class StatefulSetStrategy(Strategy):
    def initial_status(self, obj: dict) -> dict:
        return {"replicas": 0, "availableReplicas": 0}

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + validate_stateful_set_spec(obj.get("spec"))

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        if new.get("status") != old.get("status"):
            # A status write (the spec is the stored one, not checked again, as upstream).
            errs = self.validate_metadata(new) + self._finalizer_update_errors(new, old)
            return errs + validate_stateful_set_status(new.get("status")) + collision_not_decremented(new, old)
        errs = super().validate_update(new, old)
        new_spec, old_spec = dict_at(new, "spec"), dict_at(old, "spec")
        fixed_new = {k: val for k, val in new_spec.items() if k not in MUTABLE_SPEC_FIELDS}
        fixed_old = {k: val for k, val in old_spec.items() if k not in MUTABLE_SPEC_FIELDS}
        if fixed_new != fixed_old:
            errs.append(v.FieldError.forbidden("spec", FORBIDDEN_SPEC_UPDATE))
        return errs
