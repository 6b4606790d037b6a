"""``batch/v1``: message package ``k8s.io.api.batch.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import LABEL_SELECTOR, OBJECT_META, List
from . import core
from ._common import BOOL, I32, I64, STR, STR_SET, TIME, F, enum, ptr, req, struct

S = struct("k8s.io.api.batch.v1")

PodFailurePolicyOnExitCodesRequirement = S(
    "PodFailurePolicyOnExitCodesRequirement",
    [
        ptr("containerName", STR, 1),
        req("operator", enum("In", "NotIn"), 2),
        req("values", List(I32, "set"), 3),
    ],
)

PodFailurePolicyOnPodConditionsPattern = S(
    "PodFailurePolicyOnPodConditionsPattern",
    [
        req("type", STR, 1),
        req("status", core.CONDITION_STATUS, 2),
    ],
)

PodFailurePolicyRule = S(
    "PodFailurePolicyRule",
    [
        req("action", enum("Count", "FailJob", "Ignore"), 1),
        ptr("onExitCodes", PodFailurePolicyOnExitCodesRequirement, 2),
        # Optional, whatever the generated OpenAPI of some releases said: a rule on exit codes has none.
        F("onPodConditions", List(PodFailurePolicyOnPodConditionsPattern, "atomic"), 3),
    ],
)

PodFailurePolicy = S(
    "PodFailurePolicy",
    [
        req("rules", List(PodFailurePolicyRule, "atomic"), 1),
    ],
)

JobSpec = S(
    "JobSpec",
    [
        ptr("parallelism", I32, 1),
        ptr("completions", I32, 2),
        ptr("activeDeadlineSeconds", I64, 3),
        ptr("podFailurePolicy", PodFailurePolicy, 11),
        ptr("backoffLimit", I32, 7),
        ptr("selector", LABEL_SELECTOR, 4),
        ptr("manualSelector", BOOL, 5),
        req("template", core.PodTemplateSpec, 6),
        ptr("ttlSecondsAfterFinished", I32, 8),
        ptr("completionMode", enum("Indexed", "NonIndexed"), 9),
        ptr("suspend", BOOL, 10),
    ],
)

UncountedTerminatedPods = S(
    "UncountedTerminatedPods",
    [
        F("succeeded", STR_SET, 1),
        F("failed", STR_SET, 2),
    ],
)

JobCondition = S(
    "JobCondition",
    [
        req("type", STR, 1),
        req("status", core.CONDITION_STATUS, 2),
        F("lastProbeTime", TIME, 3),
        F("lastTransitionTime", TIME, 4),
        F("reason", STR, 5),
        F("message", STR, 6),
    ],
)

JobStatus = S(
    "JobStatus",
    [
        # upstream marks this list atomic for apply while strategic merge merges it by type
        F("conditions", List(JobCondition, "atomic", patch_strategy="merge", patch_merge_key="type"), 1),
        ptr("startTime", TIME, 2),
        ptr("completionTime", TIME, 3),
        F("active", I32, 4),
        F("succeeded", I32, 5),
        F("failed", I32, 6),
        F("completedIndexes", STR, 7),
        ptr("uncountedTerminatedPods", UncountedTerminatedPods, 8),
        ptr("ready", I32, 9),
    ],
)

Job = S(
    "Job",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", JobSpec, 2),
        F("status", JobStatus, 3),
    ],
)

JobTemplateSpec = S(
    "JobTemplateSpec",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", JobSpec, 2),
    ],
)

CronJobSpec = S(
    "CronJobSpec",
    [
        req("schedule", STR, 1),
        ptr("timeZone", STR, 8),
        ptr("startingDeadlineSeconds", I64, 2),
        F("concurrencyPolicy", enum("Allow", "Forbid", "Replace"), 3),
        ptr("suspend", BOOL, 4),
        req("jobTemplate", JobTemplateSpec, 5),
        ptr("successfulJobsHistoryLimit", I32, 6),
        ptr("failedJobsHistoryLimit", I32, 7),
    ],
)

CronJobStatus = S(
    "CronJobStatus",
    [
        F("active", List(core.ObjectReference, "atomic"), 1),
        ptr("lastScheduleTime", TIME, 4),
        ptr("lastSuccessfulTime", TIME, 5),
    ],
)

CronJob = S(
    "CronJob",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", CronJobSpec, 2),
        F("status", CronJobStatus, 3),
    ],
)

KINDS = {"Job": Job, "CronJob": CronJob}
