"""The batch family: Jobs and CronJobs.

A Job's selector is generated on create unless ``spec.manualSelector`` is true: the
template gets the job's name and uid as labels (``job-name``, ``controller-uid`` and
their ``batch.orch.io/`` forms) and the selector matches ``batch.orch.io/controller-uid``,
so a job selects exactly its own pods. Validation follows upstream's: counts are
non-negative, the template's ``restartPolicy`` is ``OnFailure`` or ``Never``, an
``Indexed`` job needs ``completions``, and on update the selector, ``completions``,
``completionMode``, ``podFailurePolicy`` and the template are immutable (the template's
scheduling directives may change while a job is suspended and never started).

A CronJob's ``schedule`` must parse (api/cron.py), may not carry a ``TZ=`` prefix on a
new object (``spec.timeZone`` says the zone), and ``spec.timeZone`` must name a known
IANA zone.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from ..api import names, podvalidation
from ..api import validation as v
from ..api.cron import CronError, ZoneError, load_zone, parse_schedule, valid_zone_name_parts
from ..api.helpers import dict_at
from ..api.selectors import SelectorError, label_selector_from_dict, validate_label_selector
from .strategy import Strategy

Errs = list[v.FieldError]

NON_NEGATIVE = "must be greater than or equal to 0"
MAX_INDEXED_COMPLETIONS = 100_000
JOB_RESTART_POLICIES = ("OnFailure", "Never")
CONDITION_STATUSES = ("True", "False", "Unknown")
MAX_FAILURE_POLICY_RULES = 20
MAX_FAILURE_POLICY_VALUES = 255
MAX_CRONJOB_NAME = 52  # the job name adds "-" and up to 10 digits of minutes
IMMUTABLE = "field is immutable"
TZ_REFUSED = "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
TZ_BESIDE_TIME_ZONE = "cannot use both timeZone field and TZ or CRON_TZ in schedule"
# What may change in the template of a suspended job that never started.
_SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "schedulingGates")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative(spec: dict, key: str, path: str, errs: Errs) -> None:
    value = spec.get(key)
    if value is None:
        return
    if not _is_int(value):
        errs.append(v.FieldError.type_invalid(f"{path}.{key}", value, "must be an integer"))
    elif value < 0:
        errs.append(v.FieldError.invalid(f"{path}.{key}", value, NON_NEGATIVE))


def generate_selector(job: dict) -> None:
    """Labels on the template naming the job and its uid, and a selector on the uid label
    (each left alone where the client set it: a conflict is for validation to report)."""
    md = dict_at(job, "metadata")
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return
    template = spec.setdefault("template", {})
    if not isinstance(template, dict):
        return
    tmd = template.setdefault("metadata", {})
    if not isinstance(tmd, dict):
        return
    labels = tmd.get("labels")
    if labels is None:
        labels = tmd["labels"] = {}
    if not isinstance(labels, dict):
        return
    for key in (names.LABEL_JOB_NAME_LEGACY, names.LABEL_JOB_NAME):
        labels.setdefault(key, md.get("name", ""))
    for key in (names.LABEL_JOB_CONTROLLER_UID_LEGACY, names.LABEL_JOB_CONTROLLER_UID):
        labels.setdefault(key, md.get("uid", ""))
    selector = spec.get("selector")
    if selector is None:
        selector = spec["selector"] = {}
    if not isinstance(selector, dict):
        return
    match = selector.get("matchLabels")
    if match is None:
        match = selector["matchLabels"] = {}
    if isinstance(match, dict):
        match.setdefault(names.LABEL_JOB_CONTROLLER_UID, md.get("uid", ""))


def _validate_failure_policy(spec: dict, path: str, errs: Errs) -> None:
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return
    ppath = f"{path}.podFailurePolicy"
    if not isinstance(policy, dict):
        errs.append(v.FieldError.type_invalid(ppath, policy, "must be an object"))
        return
    pod_spec = dict_at(dict_at(spec, "template"), "spec")
    restart = pod_spec.get("restartPolicy")
    if restart != "Never":
        errs.append(
            v.FieldError.invalid(
                f"{path}.template.spec.restartPolicy",
                restart,
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    rules = policy.get("rules")
    if not isinstance(rules, list):
        errs.append(v.FieldError.required(f"{ppath}.rules"))
        return
    if len(rules) > MAX_FAILURE_POLICY_RULES:
        errs.append(
            v.FieldError(
                v.FIELD_VALUE_TOO_MANY,
                f"{ppath}.rules",
                len(rules),
                f"must have at most {MAX_FAILURE_POLICY_RULES} items",
            )
        )
    containers = {c.get("name") for c in pod_spec.get("containers") or [] if isinstance(c, dict)}
    containers |= {c.get("name") for c in pod_spec.get("initContainers") or [] if isinstance(c, dict)}
    for i, rule in enumerate(rules):
        rpath = f"{ppath}.rules[{i}]"
        if not isinstance(rule, dict):
            errs.append(v.FieldError.type_invalid(rpath, rule, "must be an object"))
            continue
        if not rule.get("action"):
            errs.append(v.FieldError.required(f"{rpath}.action"))
        on_codes, on_conds = rule.get("onExitCodes"), rule.get("onPodConditions")
        if on_codes is not None and on_conds is not None:
            errs.append(
                v.FieldError.invalid(rpath, "", "specifying both OnExitCodes and OnPodConditions is not supported")
            )
        elif on_codes is None and on_conds is None:
            errs.append(
                v.FieldError.invalid(rpath, "", "specifying one of OnExitCodes and OnPodConditions is required")
            )
        if isinstance(on_codes, dict):
            _validate_exit_codes(on_codes, f"{rpath}.onExitCodes", containers, errs)
        if isinstance(on_conds, list):
            for j, pattern in enumerate(on_conds):
                cpath = f"{rpath}.onPodConditions[{j}]"
                if not isinstance(pattern, dict):
                    errs.append(v.FieldError.type_invalid(cpath, pattern, "must be an object"))
                    continue
                status = pattern.get("status")
                if status not in CONDITION_STATUSES:
                    errs.append(v.FieldError.not_supported(f"{cpath}.status", status, CONDITION_STATUSES))
                ctype = pattern.get("type")
                if not isinstance(ctype, str) or not ctype:
                    errs.append(v.FieldError.required(f"{cpath}.type"))
                else:
                    errs += [v.FieldError.invalid(f"{cpath}.type", ctype, m) for m in v.is_qualified_name(ctype)]


def _validate_exit_codes(req: dict, path: str, containers: set, errs: Errs) -> None:
    name = req.get("containerName")
    if name is not None and name not in containers:
        errs.append(
            v.FieldError.invalid(
                f"{path}.containerName", name, "must be one of the container or initContainer names in the pod template"
            )
        )
    op = req.get("operator")
    if not op:
        errs.append(v.FieldError.required(f"{path}.operator"))
    values = req.get("values")
    if not isinstance(values, list) or not values:
        errs.append(v.FieldError.invalid(f"{path}.values", values, "at least one value is required"))
        return
    if len(values) > MAX_FAILURE_POLICY_VALUES:
        errs.append(
            v.FieldError(
                v.FIELD_VALUE_TOO_MANY,
                f"{path}.values",
                len(values),
                f"must have at most {MAX_FAILURE_POLICY_VALUES} items",
            )
        )
    seen: set[int] = set()
    previous: int | None = None
    for i, value in enumerate(values):
        vpath = f"{path}.values[{i}]"
        if not _is_int(value):
            errs.append(v.FieldError.type_invalid(vpath, value, "must be an integer"))
            continue
        if value in seen:
            errs.append(v.FieldError.duplicate(vpath, value))
        if op == "In" and value == 0:
            errs.append(v.FieldError.invalid(vpath, value, "must not be 0 for the In operator"))
        if previous is not None and previous > value:
            errs.append(v.FieldError.invalid(vpath, value, "must be ordered"))
        seen.add(value)
        previous = value


def validate_job_spec(spec: Any, path: str, *, template_of_cronjob: bool = False) -> Errs:
    """A JobSpec (a Job's, or a CronJob's job template's)."""
    if not isinstance(spec, dict):
        return [v.FieldError.required(path)]
    errs: Errs = []
    for key in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"):
        _non_negative(spec, key, path, errs)
    # (Enumerated values, completionMode among them, are checked by the base strategy.)
    if spec.get("completionMode") == "Indexed":
        completions, parallelism = spec.get("completions"), spec.get("parallelism")
        if completions is None:
            errs.append(v.FieldError.required(f"{path}.completions", "when completion mode is Indexed"))
        elif _is_int(completions) and completions > MAX_INDEXED_COMPLETIONS:
            errs.append(
                v.FieldError.invalid(
                    f"{path}.completions",
                    completions,
                    f"must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed",
                )
            )
        if _is_int(parallelism) and parallelism > MAX_INDEXED_COMPLETIONS:
            errs.append(
                v.FieldError.invalid(
                    f"{path}.parallelism",
                    parallelism,
                    f"must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed",
                )
            )
    selector = spec.get("selector")
    template = spec.get("template")
    if template_of_cronjob:
        if selector is not None:
            errs.append(v.FieldError.invalid(f"{path}.selector", selector, "`selector` will be auto-generated"))
        if spec.get("manualSelector") is True:
            errs.append(v.FieldError.not_supported(f"{path}.manualSelector", True, ("nil", "false")))
    elif selector is None:
        errs.append(v.FieldError.required(f"{path}.selector"))
    else:
        serrs = validate_label_selector(selector, f"{path}.selector")
        errs += serrs
        if not serrs and isinstance(template, dict):
            tlabels = dict_at(dict_at(template, "metadata"), "labels")
            try:
                sel = label_selector_from_dict(selector)
            except SelectorError:
                sel = None
            if sel is not None and not sel.matches(tlabels):
                errs.append(
                    v.FieldError.invalid(
                        f"{path}.template.metadata.labels", tlabels, "`selector` does not match template `labels`"
                    )
                )
    if not isinstance(template, dict):
        errs.append(v.FieldError.required(f"{path}.template"))
        return errs
    tpath = f"{path}.template"
    tmd = template.get("metadata")
    if isinstance(tmd, dict):
        labels = tmd.get("labels")
        if isinstance(labels, dict):
            errs += v.validate_labels(labels, f"{tpath}.metadata.labels")
        annotations = tmd.get("annotations")
        if isinstance(annotations, dict):
            errs += v.validate_annotations(annotations, f"{tpath}.metadata.annotations")
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        errs.append(v.FieldError.required(f"{tpath}.spec"))
        return errs
    errs += podvalidation.validate_pod_spec(pod_spec, f"{tpath}.spec")
    restart = pod_spec.get("restartPolicy")
    if restart not in JOB_RESTART_POLICIES:
        errs.append(v.FieldError.not_supported(f"{tpath}.spec.restartPolicy", restart, JOB_RESTART_POLICIES))
    _validate_failure_policy(spec, path, errs)
    return errs


class JobStrategy(Strategy):
    # batch/v1 keeps its first behaviour: a delete that names no policy orphans the pods.
    default_propagation = "Orphan"

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("manualSelector") is not True:
            generate_selector(obj)

    def validate(self, obj: dict) -> Errs:
        errs = super().validate(obj)
        spec = obj.get("spec")
        errs += validate_job_spec(spec, "spec")
        if isinstance(spec, dict) and spec.get("manualSelector") is not True:
            errs += self._generated_selector_errors(obj)
        return errs

    @staticmethod
    def _generated_selector_errors(job: dict) -> Errs:
        md = dict_at(job, "metadata")
        uid, name = md.get("uid", ""), md.get("name", "")
        errs: Errs = []
        if not uid:
            errs.append(v.FieldError.required("metadata.uid"))
        labels = dict_at(dict_at(dict_at(dict_at(job, "spec"), "template"), "metadata"), "labels")
        for key, want in ((names.LABEL_JOB_CONTROLLER_UID_LEGACY, uid), (names.LABEL_JOB_NAME_LEGACY, name)):
            lpath = f"spec.template.metadata.labels[{key}]"
            if key not in labels:
                errs.append(v.FieldError.required(lpath))
            elif labels[key] != want:
                errs.append(v.FieldError.invalid(lpath, labels, f"must be '{want}'"))
        selector = dict_at(job, "spec").get("selector")
        try:
            sel = label_selector_from_dict(selector if isinstance(selector, dict) else None)
        except SelectorError:
            return errs
        expected = {names.LABEL_JOB_CONTROLLER_UID_LEGACY: uid, names.LABEL_JOB_CONTROLLER_UID: uid}
        if not sel.matches(expected):
            errs.append(v.FieldError.invalid("spec.selector", selector, "`selector` not auto-generated"))
        return errs

    def validate_update(self, new: dict, old: dict) -> Errs:
        errs = super().validate_update(new, old)
        if new.get("status") != old.get("status"):
            # A status write (the spec is the old one): counts are never negative.
            status = dict_at(new, "status")
            for key in ("active", "succeeded", "failed", "ready"):
                _non_negative(status, key, "status", errs)
            return errs
        nspec, ospec = dict_at(new, "spec"), dict_at(old, "spec")
        for key in ("completions", "selector", "completionMode", "podFailurePolicy"):
            if nspec.get(key) != ospec.get(key):
                errs.append(v.FieldError.invalid(f"spec.{key}", nspec.get(key), IMMUTABLE))
        ntemplate, otemplate = nspec.get("template"), ospec.get("template")
        if ntemplate != otemplate:
            suspended_never_started = ospec.get("suspend") is True and not dict_at(old, "status").get("startTime")
            if not (suspended_never_started and _only_scheduling_changed(ntemplate, otemplate)):
                errs.append(v.FieldError.invalid("spec.template", ntemplate, IMMUTABLE))
        return errs


def _only_scheduling_changed(new: Any, old: Any) -> bool:
    """The templates differ only in labels, annotations, node affinity, node selector,
    tolerations and scheduling gates."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return False

    def strip(t: dict) -> dict:
        out = dict(t)
        md = dict(dict_at(t, "metadata"))
        md.pop("labels", None)
        md.pop("annotations", None)
        out["metadata"] = md
        spec = dict(dict_at(t, "spec"))
        for key in _SCHEDULING_DIRECTIVES:
            spec.pop(key, None)
        affinity = dict(dict_at(spec, "affinity"))
        affinity.pop("nodeAffinity", None)
        if affinity:
            spec["affinity"] = affinity
        else:
            spec.pop("affinity", None)
        out["spec"] = spec
        return out

    return strip(new) == strip(old)


def validate_schedule(schedule: Any) -> Errs:
    """A new schedule: it parses, and names no zone (``spec.timeZone`` does)."""
    path = "spec.schedule"
    if not isinstance(schedule, str) or not schedule:
        return [v.FieldError.required(path)]
    errs: Errs = []
    try:
        parse_schedule(schedule)
    except CronError as exc:
        errs.append(v.FieldError.invalid(path, schedule, str(exc)))
    if "TZ" in schedule:
        errs.append(v.FieldError.invalid(path, schedule, TZ_REFUSED))
    return errs


def validate_time_zone(time_zone: Any) -> Errs:
    path = "spec.timeZone"
    if time_zone is None:
        return []
    if not isinstance(time_zone, str) or not time_zone:
        return [v.FieldError.invalid(path, time_zone, "timeZone must be nil or non-empty string")]
    if not valid_zone_name_parts(time_zone):
        return [v.FieldError.invalid(path, time_zone, f"unknown time zone {time_zone}")]
    if time_zone.lower() == "local":
        return [
            v.FieldError.invalid(
                path, time_zone, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
            )
        ]
    try:
        load_zone(time_zone)
    except ZoneError as exc:
        return [v.FieldError.invalid(path, time_zone, str(exc))]
    return []


class CronJobStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        return super().validate(obj) + self._spec_errors(obj)

    def validate_name(self, name: str, path: str = "metadata.name") -> Errs:
        errs = super().validate_name(name, path)
        if len(name) > MAX_CRONJOB_NAME:
            errs.append(v.FieldError.invalid(path, name, f"must be no more than {MAX_CRONJOB_NAME} characters"))
        return errs

    def validate_update(self, new: dict, old: dict) -> Errs:
        errs = super().validate_update(new, old)
        # A schedule stored with TZ= before that was refused may keep it (but not beside timeZone).
        old_schedule = dict_at(old, "spec").get("schedule")
        if isinstance(old_schedule, str) and "TZ" in old_schedule:
            errs = [e for e in errs if e.detail != TZ_REFUSED]
            spec = dict_at(new, "spec")
            schedule = spec.get("schedule")
            if isinstance(schedule, str) and "TZ" in schedule and spec.get("timeZone") is not None:
                errs.append(v.FieldError.invalid("spec.schedule", schedule, TZ_BESIDE_TIME_ZONE))
        return errs

    @staticmethod
    def _spec_errors(obj: dict) -> Errs:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [v.FieldError.required("spec")]
        errs = validate_schedule(spec.get("schedule"))
        errs += validate_time_zone(spec.get("timeZone"))
        for key in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
            _non_negative(spec, key, "spec", errs)
        policy = spec.get("concurrencyPolicy")
        if not policy:  # (a value outside the enumeration: the base strategy's enum check)
            errs.append(v.FieldError.required("spec.concurrencyPolicy"))
        template = spec.get("jobTemplate")
        if not isinstance(template, dict):
            errs.append(v.FieldError.required("spec.jobTemplate"))
        else:
            tmd = template.get("metadata")
            if isinstance(tmd, dict):
                if isinstance(tmd.get("labels"), dict):
                    errs += v.validate_labels(tmd["labels"], "spec.jobTemplate.metadata.labels")
                if isinstance(tmd.get("annotations"), dict):
                    errs += v.validate_annotations(tmd["annotations"], "spec.jobTemplate.metadata.annotations")
            errs += validate_job_spec(template.get("spec"), "spec.jobTemplate.spec", template_of_cronjob=True)
        return errs
