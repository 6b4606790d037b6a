"""The Job controller: runs a Job's pods to completion, as upstream's (v1.27) does.

A Job wants ``min(parallelism, completions - succeeded)`` active pods (with
``completions`` unset, the work-queue mode: ``parallelism`` until one pod succeeds,
then no new pods). ``Indexed`` jobs give each pod a completion index (the annotation
``batch.orch.io/job-completion-index``, the env var ``JOB_COMPLETION_INDEX`` from it
through the downward API, hostname ``<job>-<index>``, name ``<job>-<index>-xxxxx``) and
record finished indexes in ``status.completedIndexes`` ("1,3-5").

Pods are tracked with the ``batch.orch.io/job-tracking`` finalizer: a finished pod's
uid first goes into ``status.uncountedTerminatedPods``, then its finalizer is removed,
then it is moved into ``status.succeeded``/``failed``; so a pod is counted once even
when it is deleted right after it finished, and the job's conditions are set only
when every finished pod is counted.

Failures: re-creating after failures waits 10 s doubling per failure since the last
success, at most 6 min; more failures than ``backoffLimit`` (or, for ``OnFailure``
pods, that many container restarts) fail the job (``BackoffLimitExceeded``), as does
running longer than ``activeDeadlineSeconds`` (``DeadlineExceeded``). A
``podFailurePolicy`` rule on exit codes or pod conditions can fail the job at once
(``FailureTarget``, then ``Failed``, reason ``PodFailurePolicy``), ignore a failure or
count it. A suspended job has no active pods; resuming resets ``startTime``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import logging
import time
from typing import Any, Callable, Iterable, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at, get_condition, list_at, object_reference
from ..api.selectors import SelectorError, label_selector_from_dict
from ..api.timeutil import format_rfc3339, parse_rfc3339
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent, Entry
from . import podcontrol as pc
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.job")

DEFAULT_BACKOFF = 10.0  # seconds, doubled per failure since the last success
MAX_BACKOFF = 360.0
MAX_CREATE_DELETE_PER_SYNC = 500
SLOW_START_BATCH = 1
MAX_GENERATED_NAME = 58  # a generated name's prefix leaves room for the random suffix
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"

REASON_BACKOFF = "BackoffLimitExceeded"
MESSAGE_BACKOFF = "Job has reached the specified backoff limit"
REASON_DEADLINE = "DeadlineExceeded"
MESSAGE_DEADLINE = "Job was active longer than specified deadline"
REASON_POD_FAILURE_POLICY = "PodFailurePolicy"

COMPLETE, FAILED, FAILURE_TARGET, SUSPENDED = "Complete", "Failed", "FailureTarget", "Suspended"


# --- pure parts ----------------------------------------------------------------------------


def backoff_delay(failures: int, base: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """The wait before re-creating a pod after ``failures`` failures since the last success."""
    if failures <= 0:
        return 0.0
    delay = base
    for _ in range(1, failures):
        delay *= 2
        if delay >= cap:
            return cap
    return min(delay, cap)


@dataclasses.dataclass
class BackoffRecord:
    """Failures since a job's last success, and when the last of them happened."""

    failures_after_success: int = 0
    last_failure: float | None = None

    def updated(self, succeeded_at: Iterable[float], failed_at: Iterable[float]) -> BackoffRecord:
        """With newly finished pods (their finish times) taken into account."""
        succ, fail = sorted(succeeded_at), sorted(failed_at)
        if not succ and not fail:
            return self
        if not succ:
            return BackoffRecord(self.failures_after_success + len(fail), fail[-1])
        last_success = succ[-1]
        after = [t for t in fail if t > last_success]
        return BackoffRecord(len(after), after[-1] if after else None)

    def remaining(self, now: float, base: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
        if self.failures_after_success == 0 or self.last_failure is None:
            return 0.0
        delay = backoff_delay(self.failures_after_success, base, cap)
        elapsed = now - self.last_failure
        return 0.0 if elapsed > delay else delay - elapsed


def parse_indexes(text: str, completions: int) -> set[int]:
    """``status.completedIndexes`` ("1,3-5") as a set, indexes at or over ``completions`` dropped."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if hi else a
        except ValueError:
            continue
        out.update(i for i in range(a, b + 1) if 0 <= i < completions)
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """Sorted indexes with runs compressed: {1, 3, 4, 5} -> "1,3-5"."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


def completion_index(pod: Mapping) -> int | None:
    value = dict_at(dict_at(pod, "metadata"), "annotations").get(names.ANNOTATION_JOB_COMPLETION_INDEX)
    if not isinstance(value, str) or not value.isdigit():
        return None
    return int(value)


def _exit_code_matches(code: int, req: Mapping) -> bool:
    values = req.get("values") or []
    if req.get("operator") == "In":
        return code in values
    if req.get("operator") == "NotIn":
        return code not in values
    return False


def match_failure_policy(policy: Mapping | None, pod: Mapping) -> tuple[str | None, str | None]:
    """The action of the first rule of ``policy`` that matches the failed ``pod``
    (``FailJob``, ``Ignore``, ``Count``; None when none does) and, for ``FailJob``, the
    message the job's condition carries."""
    if not policy:
        return None, None
    md = dict_at(pod, "metadata")
    pod_name = f"{md.get('namespace', '')}/{md.get('name', '')}"
    status = dict_at(pod, "status")
    statuses = list_at(status, "initContainerStatuses") + list_at(status, "containerStatuses")
    for index, rule in enumerate(list_at(policy, "rules")):
        action = rule.get("action") if isinstance(rule, dict) else None
        if not isinstance(rule, dict):
            continue
        on_codes = rule.get("onExitCodes")
        if isinstance(on_codes, dict):
            for cs in statuses:
                term = dict_at(dict_at(cs, "state"), "terminated") if isinstance(cs, dict) else {}
                code = term.get("exitCode")
                if not isinstance(code, int) or code == 0:
                    continue
                wanted = on_codes.get("containerName")
                if wanted and wanted != cs.get("name"):
                    continue
                if _exit_code_matches(code, on_codes):
                    message = (
                        f"Container {cs.get('name')} for pod {pod_name} failed with exit code {code} "
                        f"matching {action} rule at index {index}"
                    )
                    return action, message if action == "FailJob" else None
            continue
        for pattern in list_at(rule, "onPodConditions"):
            for cond in list_at(status, "conditions"):
                if not isinstance(cond, dict) or not isinstance(pattern, dict):
                    continue
                if cond.get("type") == pattern.get("type") and cond.get("status") == pattern.get("status", "True"):
                    message = f"Pod {pod_name} has condition {cond.get('type')} matching {action} rule at index {index}"
                    return action, message if action == "FailJob" else None
    return None, None


def _ts(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339(value).timestamp()
    except ValueError:
        return None


def pod_finish_time(pod: Mapping, now: float) -> float:
    """When a finished pod finished: its containers' last ``finishedAt``, else the
    time it turned not ready, else its deletion time, else ``now``."""
    status = dict_at(pod, "status")
    latest: float | None = None
    for cs in list_at(status, "initContainerStatuses") + list_at(status, "containerStatuses"):
        term = dict_at(dict_at(cs, "state"), "terminated") if isinstance(cs, dict) else {}
        t = _ts(term.get("finishedAt"))
        if t is not None and (latest is None or t > latest):
            latest = t
    if latest is not None:
        return latest
    ready = get_condition(pod, "Ready")
    if ready is not None and ready.get("status") == "False":
        t = _ts(ready.get("lastTransitionTime"))
        if t is not None:
            return t
    t = _ts(dict_at(pod, "metadata").get("deletionTimestamp"))
    return t if t is not None else now


def restarts_of_active(pods: Iterable[Mapping]) -> int:
    total = 0
    for p in pods:
        if dict_at(p, "status").get("phase") not in (pc.RUNNING, pc.PENDING):
            continue
        status = dict_at(p, "status")
        for cs in list_at(status, "initContainerStatuses") + list_at(status, "containerStatuses"):
            if isinstance(cs, dict):
                total += int(cs.get("restartCount") or 0)
    return total


def is_finished(job: Mapping) -> bool:
    for ctype in (COMPLETE, FAILED):
        cond = get_condition(job, ctype)
        if cond is not None and cond.get("status") == "True":
            return True
    return False


def _iso(t: float) -> str:
    return format_rfc3339(_dt.datetime.fromtimestamp(t, _dt.timezone.utc))


def _set_condition(status: dict, ctype: str, cstatus: str, reason: str, message: str, now: float) -> bool:
    """Upstream's ensureJobConditionStatus: set or flip one condition; a False condition
    that is absent is not added. True when something changed."""
    conds = status.setdefault("conditions", [])
    for c in conds:
        if isinstance(c, dict) and c.get("type") == ctype:
            if c.get("status") == cstatus and (c.get("reason") or "") == reason and (c.get("message") or "") == message:
                return False
            if c.get("status") != cstatus:
                c["lastTransitionTime"] = _iso(now)
            c.update(status=cstatus, lastProbeTime=_iso(now))
            for field, value in (("reason", reason), ("message", message)):
                if value:
                    c[field] = value
                else:
                    c.pop(field, None)
            return True
    if cstatus != "True":
        if not conds:
            status.pop("conditions", None)
        return False
    cond = {"type": ctype, "status": cstatus, "lastProbeTime": _iso(now), "lastTransitionTime": _iso(now)}
    if reason:
        cond["reason"] = reason  # empty ones are omitted, as upstream's wire form omits them
    if message:
        cond["message"] = message
    conds.append(cond)
    return True


def _has_tracking_finalizer(pod: Mapping) -> bool:
    return names.FINALIZER_JOB_TRACKING in list_at(dict_at(pod, "metadata"), "finalizers")


def _pod_failed(pod: Mapping, has_policy: bool) -> bool:
    phase = dict_at(pod, "status").get("phase")
    if phase == pc.FAILED:
        return True
    deleting = bool(dict_at(pod, "metadata").get("deletionTimestamp")) and phase != pc.SUCCEEDED
    if has_policy:
        # The policy looks at how the pod ended, so wait for a terminal phase; except for
        # a pod never scheduled, which no node will ever finish (upstream's pod garbage
        # collector marks those Failed).
        return deleting and not dict_at(pod, "spec").get("nodeName")
    # Deleted before it could finish: counted as a failure (an orphan never reaches Failed).
    return deleting


def generate_name_with_index(job_name: str, index: int) -> str:
    suffix = f"-{index}-"
    prefix = job_name + suffix
    if len(prefix) > MAX_GENERATED_NAME:
        prefix = prefix[: MAX_GENERATED_NAME - len(suffix)] + suffix
    return prefix


def add_completion_index_env(template: dict) -> None:
    """Every container reads JOB_COMPLETION_INDEX from the pod's completion-index annotation."""
    spec = dict_at(template, "spec")
    ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{names.ANNOTATION_JOB_COMPLETION_INDEX}']"}}
    for key in ("initContainers", "containers"):
        for c in list_at(spec, key):
            if not isinstance(c, dict):
                continue
            env = c.setdefault("env", [])
            if isinstance(env, list) and not any(
                isinstance(e, dict) and e.get("name") == COMPLETION_INDEX_ENV for e in env
            ):
                env.append({"name": COMPLETION_INDEX_ENV, "valueFrom": copy.deepcopy(ref)})


# --- the controller --------------------------------------------------------------------------


class JobController:
    """Syncs each Job (queue key: its storage key) from its pods; removes the tracking
    finalizer from pods whose job is gone or finished (queue key ``("pod", key)``)."""

    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        *,
        clock: Callable[[], float] = time.time,
        backoff_base: float = DEFAULT_BACKOFF,
        backoff_max: float = MAX_BACKOFF,
    ):
        self.client = client
        self.job_kind = informers.kind(names.BATCH_GROUP, "v1", "jobs")
        self.pod_kind = informers.kind("", "v1", "pods")
        self.jobs = informers.for_kind(self.job_kind)
        self.pods = informers.for_kind(self.pod_kind)
        self.recorder = EventRecorder(client, informers.registry, "job-controller")
        self.clock = clock
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.queue = RateLimitedQueue()
        self.expectations = pc.Expectations()
        self._backoff: dict[str, BackoffRecord] = {}
        self._written: dict[str, dict] = {}  # job key -> the job as this controller last wrote it
        self._finalizer_removed: set[str] = set()  # pod uids whose finalizer this controller removed
        self._pod_errors: list[st.ApiError] = []  # creates and deletes that failed in the sync under way

    def start(self) -> None:
        self.jobs.add_handler(self.on_job)
        self.pods.add_handler(self.on_pod)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "job")

    # --- events ------------------------------------------------------------------------
    def on_job(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.jobs.list():
                self.queue.add(e.key)
            return
        if ev.type == "DELETED":
            self.expectations.forget(ev.entry.key)
            self._backoff.pop(ev.entry.key, None)
            self._written.pop(ev.entry.key, None)
            # Its pods lose their finalizer (the garbage collector deletes them).
            for p in self.pods.list(ev.entry.namespace):
                if names.FINALIZER_JOB_TRACKING in p.finalizers and any(o[0] == ev.entry.uid for o in p.owners):
                    self.queue.add(("pod", p.key))
            return
        self.queue.add(ev.entry.key)

    def _job_key_of(self, pod: Mapping) -> str | None:
        ref = pc.controller_of(pod)
        if ref is None or ref.get("kind") != "Job":
            return None
        ns = str(dict_at(pod, "metadata").get("namespace", ""))
        entry = self.jobs.get(ns, str(ref.get("name", "")))
        if entry is None or entry.uid != ref.get("uid"):
            return None
        return entry.key

    def _job_key_of_entry(self, entry: Entry) -> str | None:
        """The queue key of the Job owning a pod (from the cache's parsed owners: no decoding)."""
        for uid, _, kind, name in entry.owners:
            if kind == "Job":
                job = self.jobs.get(entry.namespace, name)
                if job is not None and job.uid == uid:
                    return job.key
        return None

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        e = ev.entry
        key = self._job_key_of_entry(e)
        pod_key = f"{e.namespace}/{e.name}"
        if ev.type == "DELETED":
            self._finalizer_removed.discard(e.uid)
            if key is not None:
                self.expectations.deletion_observed(key, pod_key)
                self.queue.add(key)
            return
        if ev.type == "ADDED" and key is not None:
            self.expectations.creation_observed(key)
        if e.deleting and key is not None:
            self.expectations.deletion_observed(key, pod_key)
        tracked = names.FINALIZER_JOB_TRACKING in e.finalizers
        if not tracked:
            self._finalizer_removed.discard(e.uid)
        if key is not None:
            self.queue.add(key)
            return
        if not e.owners:
            # An orphan: a job whose selector matches may adopt it.
            for j in self.jobs.list(e.namespace):
                self.queue.add(j.key)
        if tracked:
            self.queue.add(("pod", e.key))

    # --- sync --------------------------------------------------------------------------
    async def sync(self, item: Any) -> None:
        if isinstance(item, tuple):
            await self._sync_orphan_pod(item[1])
            return
        key = item
        entry = self.jobs.get_by_key(key)
        if entry is None:
            self.expectations.forget(key)
            return
        job = entry.object()
        written = self._written.get(key)
        if written is not None and dict_at(written, "metadata").get("uid") == entry.uid:
            if int(dict_at(written, "metadata").get("resourceVersion") or 0) > entry.rv:
                job = copy.deepcopy(written)  # the informer has not seen our last write yet
        pods = await self._claim_pods(job)
        if is_finished(job) or dict_at(job, "metadata").get("deletionTimestamp"):
            for p in pods:
                if _has_tracking_finalizer(p) and not pc.is_active(p):
                    await self._remove_finalizer(p)
            return
        if not self.expectations.satisfied(key):
            return
        await self._sync_job(key, job, pods)

    async def _claim_pods(self, job: dict) -> list[dict]:
        ns = str(dict_at(job, "metadata").get("namespace", ""))
        try:
            selector = label_selector_from_dict(dict_at(job, "spec").get("selector"))
        except SelectorError:
            return []
        uid = dict_at(job, "metadata").get("uid")
        # Only pods that name the job as an owner, or orphans it selects, are decoded.
        candidates = [e.object() for e in self.pods.claimable(ns, str(uid or ""), selector)]

        async def fresh() -> dict | None:
            try:
                return await self.client.get(self.job_kind, ns, str(dict_at(job, "metadata").get("name", "")))
            except st.ApiError as exc:
                if exc.code == 404:
                    return None
                raise

        result = await pc.claim(self.client, self.pod_kind, job, self.job_kind, selector, candidates, owner_fresh=fresh)
        if result.errors:
            raise result.errors[0]
        return result.pods

    async def _sync_orphan_pod(self, pod_key: str) -> None:
        entry = self.pods.get_by_key(pod_key)
        if entry is None or names.FINALIZER_JOB_TRACKING not in entry.finalizers:
            return
        pod = entry.object()
        key = self._job_key_of(pod)
        if key is None:
            await self._remove_finalizer(pod)
        else:
            self.queue.add(key)

    async def _sync_job(self, key: str, job: dict, pods: list[dict]) -> None:
        now = self.clock()
        self._pod_errors = []
        spec = dict_at(job, "spec")
        old_status = copy.deepcopy(dict_at(job, "status"))
        status = copy.deepcopy(old_status)
        suspended = spec.get("suspend") is True
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions") if isinstance(spec.get("completions"), int) else None
        backoff_limit = int(spec.get("backoffLimit") if spec.get("backoffLimit") is not None else 6)
        policy = spec.get("podFailurePolicy") if isinstance(spec.get("podFailurePolicy"), dict) else None
        if not status.get("startTime") and not suspended:
            status["startTime"] = _iso(now)

        # 1. Uncounted pods whose finalizer is gone are counted.
        uncounted = dict_at(status, "uncountedTerminatedPods")
        unc_succ = [u for u in list_at(uncounted, "succeeded") if isinstance(u, str)]
        unc_fail = [u for u in list_at(uncounted, "failed") if isinstance(u, str)]
        tracked = {
            dict_at(p, "metadata").get("uid")
            for p in pods
            if _has_tracking_finalizer(p) and dict_at(p, "metadata").get("uid") not in self._finalizer_removed
        }
        succeeded = int(status.get("succeeded") or 0) + sum(1 for u in unc_succ if u not in tracked)
        failed = int(status.get("failed") or 0) + sum(1 for u in unc_fail if u not in tracked)
        unc_succ = [u for u in unc_succ if u in tracked]
        unc_fail = [u for u in unc_fail if u in tracked]

        # 2. Newly finished pods: into the uncounted lists, finalizers to remove.
        succeeded_indexes = (
            parse_indexes(str(status.get("completedIndexes") or ""), completions or 0) if indexed else set()
        )
        to_uncount: list[dict] = []
        ignored: list[dict] = []
        new_succ_times: list[float] = []
        new_fail_times: list[float] = []
        fail_message: str | None = None
        counted = set(unc_succ) | set(unc_fail)
        for p in pods:
            uid = dict_at(p, "metadata").get("uid")
            if uid not in tracked or uid in counted or pc.is_active(p):
                continue
            phase = dict_at(p, "status").get("phase")
            if phase == pc.SUCCEEDED:
                ix = completion_index(p) if indexed else None
                if indexed and (ix is None or ix >= (completions or 0) or ix in succeeded_indexes):
                    ignored.append(p)
                    continue
                if ix is not None:
                    succeeded_indexes.add(ix)
                unc_succ.append(uid)
                to_uncount.append(p)
                new_succ_times.append(pod_finish_time(p, now))
            elif _pod_failed(p, policy is not None):
                action, message = match_failure_policy(policy, p)
                if action == "Ignore":
                    ignored.append(p)
                    continue
                if action == "FailJob" and fail_message is None:
                    fail_message = message
                unc_fail.append(uid)
                to_uncount.append(p)
                new_fail_times.append(pod_finish_time(p, now))
        record = self._backoff.get(key, BackoffRecord()).updated(new_succ_times, new_fail_times)
        self._backoff[key] = record
        if indexed:
            text = format_indexes(succeeded_indexes)
            if text or status.get("completedIndexes"):
                status["completedIndexes"] = text
        succeeded_total = succeeded + len(unc_succ)
        failed_total = failed + len(unc_fail)

        # 3. Is the job done for?
        active_pods = [p for p in pods if pc.is_active(p)]
        finished: tuple[str, str, str] | None = None
        target = get_condition({"status": status}, FAILURE_TARGET)
        if target is not None and target.get("status") == "True":
            finished = (FAILED, str(target.get("reason") or ""), str(target.get("message") or ""))
        elif fail_message is not None:
            finished = (FAILURE_TARGET, REASON_POD_FAILURE_POLICY, fail_message)
        if finished is None:
            restart_policy = dict_at(dict_at(spec.get("template") or {}, "spec"), "restartPolicy")
            over_restarts = restart_policy == "OnFailure" and (
                restarts_of_active(active_pods) > 0
                if backoff_limit == 0
                else restarts_of_active(active_pods) >= backoff_limit
            )
            deadline = spec.get("activeDeadlineSeconds")
            start = _ts(status.get("startTime"))
            if failed_total > backoff_limit or over_restarts:
                finished = (FAILED, REASON_BACKOFF, MESSAGE_BACKOFF)
            elif isinstance(deadline, int) and start is not None and not suspended:
                left = start + deadline - now
                if left <= 0:
                    finished = (FAILED, REASON_DEADLINE, MESSAGE_DEADLINE)
                else:
                    self.queue.add_after(key, left)

        # 4. Pods to create or delete.
        active = len(active_pods)
        if finished is not None:
            active -= await self._delete_pods(key, job, active_pods)
        else:
            active = await self._manage(key, job, active_pods, succeeded_total, succeeded_indexes, record, now)
        complete = False
        if finished is None:
            if completions is None:
                complete = succeeded_total > 0 and active == 0
            elif indexed:
                complete = len(succeeded_indexes) >= completions
            else:
                complete = succeeded_total >= completions and active == 0
            if complete:
                finished = (COMPLETE, "", "")
                if active:
                    active -= await self._delete_pods(key, job, [p for p in pods if pc.is_active(p)])

        # 5. Suspension.
        suspend_event: tuple[str, str] | None = None
        if finished is None or finished[0] == FAILURE_TARGET:
            if suspended:
                if _set_condition(status, SUSPENDED, "True", "JobSuspended", "Job suspended", now):
                    suspend_event = ("Suspended", "Job suspended")
            elif _set_condition(status, SUSPENDED, "False", "JobResumed", "Job resumed", now):
                suspend_event = ("Resumed", "Job resumed")
                status["startTime"] = _iso(now)
        status["active"] = active
        status["ready"] = sum(1 for p in active_pods if pc.is_ready(p) and pc.is_active(p))

        # 6. Record the uncounted pods, remove finalizers, then count them.
        status["uncountedTerminatedPods"] = self._uncounted(unc_succ, unc_fail)
        status["succeeded"], status["failed"] = succeeded, failed
        job = self._with_status(job, status)
        if to_uncount:
            job = await self._write_status(key, job)
        removed: set[str] = set()
        for p in to_uncount + ignored:
            if await self._remove_finalizer(p):
                removed.add(str(dict_at(p, "metadata").get("uid")))
        status = dict_at(job, "status")
        status["succeeded"] = succeeded + sum(1 for u in unc_succ if u in removed)
        status["failed"] = failed + sum(1 for u in unc_fail if u in removed)
        unc_succ = [u for u in unc_succ if u not in removed]
        unc_fail = [u for u in unc_fail if u not in removed]
        status["uncountedTerminatedPods"] = self._uncounted(unc_succ, unc_fail)

        # 7. Finish once every finished pod is counted.
        finish_event: tuple[str, str, str] | None = None
        if finished is not None and not unc_succ and not unc_fail:
            ctype, reason, message = finished
            _set_condition(status, ctype, "True", reason, message, now)
            if ctype == COMPLETE:
                status["completionTime"] = _iso(now)
                finish_event = ("Normal", "Completed", "Job completed")
            elif ctype == FAILED:
                finish_event = ("Warning", reason, message)
            else:
                self.queue.add(key)  # FailureTarget: Failed on the next sync
        elif finished is not None:
            self.queue.add_after(key, 1.0)
        job = self._with_status(job, status)
        if dict_at(job, "status") != old_status:
            job = await self._write_status(key, job)
        ref = object_reference(job, "Job", "batch/v1")
        if suspend_event is not None:
            await self.recorder.record(ref, "Normal", *suspend_event)
        if finish_event is not None:
            await self.recorder.record(ref, *finish_event)
        if self._pod_errors:
            # A create or delete failed: the job comes back, rate-limited (status is written).
            raise self._pod_errors[0]

    @staticmethod
    def _uncounted(succ: list[str], fail: list[str]) -> dict:
        out: dict[str, list[str]] = {}
        if succ:
            out["succeeded"] = succ
        if fail:
            out["failed"] = fail
        return out

    @staticmethod
    def _with_status(job: dict, status: dict) -> dict:
        """``job`` with ``status``; zero counts are omitted, as upstream's wire form omits them."""
        for field in ("active", "succeeded", "failed"):
            if status.get(field) == 0:
                status.pop(field)
        out = dict(job)
        out["status"] = status
        return out

    async def _write_status(self, key: str, job: dict) -> dict:
        md = dict_at(job, "metadata")
        written = await self.client.update(
            self.job_kind, str(md.get("namespace", "")), str(md.get("name", "")), job, subresource="status"
        )
        self._written[key] = copy.deepcopy(written)
        return written

    async def _manage(
        self,
        key: str,
        job: dict,
        active_pods: list[dict],
        succeeded: int,
        succeeded_indexes: set[int],
        record: BackoffRecord,
        now: float,
    ) -> int:
        """Create or delete pods toward the wanted number; the number active after."""
        spec = dict_at(job, "spec")
        active = len(active_pods)
        if spec.get("suspend") is True:
            return active - await self._delete_pods(key, job, active_pods)
        parallelism = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
        completions = spec.get("completions") if isinstance(spec.get("completions"), int) else None
        indexed = spec.get("completionMode") == "Indexed"
        if completions is None:
            want = active if succeeded > 0 else parallelism
        else:
            want = max(0, min(parallelism, completions - (len(succeeded_indexes) if indexed else succeeded)))
        to_delete: list[dict] = []
        if indexed:
            # Pods of completed, duplicate or out-of-range indexes go first.
            seen: set[int] = set()
            keep: list[dict] = []
            for p in active_pods:
                ix = completion_index(p)
                if ix is None or ix >= (completions or 0) or ix in succeeded_indexes or ix in seen:
                    to_delete.append(p)
                else:
                    seen.add(ix)
                    keep.append(p)
            extra = len(keep) - want
            if extra > 0:
                to_delete += sorted(keep, key=lambda p: -(completion_index(p) or 0))[:extra]
        elif active > want:
            to_delete = pc.deletion_order(active_pods)[: active - want]
        if to_delete:
            return active - await self._delete_pods(key, job, to_delete[:MAX_CREATE_DELETE_PER_SYNC])
        if active >= want:
            return active
        wait = record.remaining(now, self.backoff_base, self.backoff_max)
        if wait > 0:
            self.queue.add_after(key, wait)
            return active
        diff = min(want - active, MAX_CREATE_DELETE_PER_SYNC)
        indexes: list[int | None] = [None] * diff
        if indexed:
            taken = succeeded_indexes | {completion_index(p) for p in active_pods if completion_index(p) is not None}
            pending = [i for i in range(completions or 0) if i not in taken]
            indexes = list(pending[:diff])
            diff = len(indexes)
        created = await self._create_pods(key, job, indexes)
        return active + created

    def _template(self, job: dict, index: int | None) -> tuple[dict, str]:
        """The pod template for one pod (the tracking finalizer added; for an index: its
        annotation, env var and hostname) and the name prefix of the pod."""
        template = copy.deepcopy(dict_at(dict_at(job, "spec"), "template"))
        tmd = template.setdefault("metadata", {})
        finalizers = list(tmd.get("finalizers") or [])
        if names.FINALIZER_JOB_TRACKING not in finalizers:
            finalizers.append(names.FINALIZER_JOB_TRACKING)
        tmd["finalizers"] = finalizers
        job_name = str(dict_at(job, "metadata").get("name", ""))
        if index is None:
            return template, ""
        add_completion_index_env(template)
        annotations = tmd.get("annotations") if isinstance(tmd.get("annotations"), dict) else {}
        tmd["annotations"] = {**annotations, names.ANNOTATION_JOB_COMPLETION_INDEX: str(index)}
        template.setdefault("spec", {})["hostname"] = f"{job_name}-{index}"
        return template, generate_name_with_index(job_name, index)

    async def _create_pods(self, key: str, job: dict, indexes: list[int | None]) -> int:
        """Slow start: batches of 1, 2, 4, ... until one batch has a failure."""
        md = dict_at(job, "metadata")
        ns = str(md.get("namespace", ""))
        ref = object_reference(job, "Job", "batch/v1")
        self.expectations.expect_creations(key, len(indexes))
        created = 0
        pos = 0
        batch = min(len(indexes), SLOW_START_BATCH)
        while pos < len(indexes):
            failed = False
            for index in indexes[pos : pos + batch]:
                template, prefix = self._template(job, index)
                pod = pc.pod_from_template(template, job, self.job_kind)
                if prefix:
                    pod["metadata"]["generateName"] = prefix
                try:
                    made = await self.client.create(self.pod_kind, ns, pod)
                except st.ApiError as exc:
                    self.expectations.creation_observed(key)
                    self._pod_errors.append(exc)
                    failed = True
                    await self.recorder.record(ref, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                    continue
                created += 1
                await self.recorder.record(
                    ref, "Normal", "SuccessfulCreate", f"Created pod: {dict_at(made, 'metadata').get('name')}"
                )
            pos += batch
            if failed:
                # The rest are not attempted: no longer expected.
                for _ in indexes[pos:]:
                    self.expectations.creation_observed(key)
                break
            batch = min(batch * 2, len(indexes) - pos)
        return created

    async def _delete_pods(self, key: str, job: dict, pods: list[dict]) -> int:
        """Delete ``pods`` (their tracking finalizer removed first: a pod the controller
        deletes is not counted as failed); the number deleted."""
        ref = object_reference(job, "Job", "batch/v1")
        self.expectations.expect_deletions(key, [pc.pod_key(p) for p in pods])
        deleted = 0
        for p in pods:
            pmd = dict_at(p, "metadata")
            try:
                if _has_tracking_finalizer(p):
                    await self._remove_finalizer(p, raise_errors=True)
                await self.client.delete(
                    self.pod_kind, str(pmd.get("namespace", "")), str(pmd.get("name", "")), DeleteOptions()
                )
            except st.ApiError as exc:
                self.expectations.deletion_observed(key, pc.pod_key(p))
                if exc.code == 404:
                    deleted += 1
                    continue
                self._pod_errors.append(exc)
                await self.recorder.record(ref, "Warning", "FailedDelete", f"Error deleting: {exc.message}")
                continue
            deleted += 1
            await self.recorder.record(ref, "Normal", "SuccessfulDelete", f"Deleted pod: {pmd.get('name')}")
        return deleted

    async def _remove_finalizer(self, pod: Mapping, *, raise_errors: bool = False) -> bool:
        md = dict_at(pod, "metadata")
        patch = {
            "metadata": {"uid": md.get("uid"), "$deleteFromPrimitiveList/finalizers": [names.FINALIZER_JOB_TRACKING]}
        }
        try:
            await self.client.patch(
                self.pod_kind,
                str(md.get("namespace", "")),
                str(md.get("name", "")),
                patch,
                names.MEDIA_STRATEGIC_MERGE_PATCH,
            )
        except st.ApiError as exc:
            if exc.code == 404:
                self._finalizer_removed.add(str(md.get("uid")))
                return True
            if raise_errors:
                raise
            log.info("pod %s/%s: tracking finalizer not removed: %s", md.get("namespace"), md.get("name"), exc.message)
            return False
        self._finalizer_removed.add(str(md.get("uid")))
        return True
