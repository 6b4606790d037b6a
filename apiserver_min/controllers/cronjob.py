"""The CronJob controller: creates a CronJob's Jobs at its schedule, as upstream's
(v1.27, the second version of its controller) does.

Each sync first reconciles ``status.active`` with the jobs the CronJob controls (a
finished one leaves it, ``SawCompletedJob``; a vanished one too, ``MissingJob``), deletes
finished jobs beyond ``successfulJobsHistoryLimit``/``failedJobsHistoryLimit``, then
looks for the most recent schedule time not yet run: since ``lastScheduleTime`` (or
the CronJob's creation), no earlier than ``startingDeadlineSeconds`` ago. It creates
``<cronjob>-<scheduled time in minutes since the epoch>`` from ``spec.jobTemplate``
(annotated with the scheduled time), unless ``concurrencyPolicy: Forbid`` and a job is
still active (``Replace`` deletes the active ones first), and is queued again for the
next schedule time: no polling. Schedules run in ``spec.timeZone``, or without one in
the server's local zone (``TZ``, ``/etc/localtime``), as upstream's controller manager.
"""

from __future__ import annotations

import copy
import datetime as _dt
import email.utils
import logging
import time
from typing import Any, Callable, Mapping

from ..api import names
from ..api import status as st
from ..api.cron import CronError, Schedule, ZoneError, load_zone, local_zone, parse_schedule
from ..api.helpers import dict_at, get_condition, list_at, object_reference
from ..api.timeutil import format_rfc3339, parse_rfc3339
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent
from . import podcontrol as pc
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.cronjob")

UTC = _dt.timezone.utc
MAX_MISSED = 100  # more missed start times than this: a warning, and only the latest runs
NEXT_SCHEDULE_DELTA = 0.1  # wake a little after the schedule time, never before


# --- pure parts ----------------------------------------------------------------------------


def _time(value: Any) -> _dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def earliest_time(cj: Mapping, now: _dt.datetime, include_deadline: bool = True) -> _dt.datetime:
    """Where the search for missed schedule times starts."""
    earliest = _time(dict_at(cj, "status").get("lastScheduleTime")) or _time(
        dict_at(cj, "metadata").get("creationTimestamp")
    )
    if earliest is None:
        earliest = now
    deadline = dict_at(cj, "spec").get("startingDeadlineSeconds")
    if include_deadline and isinstance(deadline, int):
        limit = now - _dt.timedelta(seconds=deadline)
        if limit > earliest:
            earliest = limit
    return earliest


def most_recent_schedule(
    cj: Mapping, now: _dt.datetime, schedule: Schedule, zone: _dt.tzinfo, include_deadline: bool = True
) -> tuple[_dt.datetime | None, int]:
    """The latest schedule time in (earliest, now] and how many there were (beyond
    ``MAX_MISSED`` an estimate from the interval between the first two)."""
    first = schedule.next(earliest_time(cj, now, include_deadline), zone)
    latest: _dt.datetime | None = None
    count = 0
    t = first
    while t is not None and t <= now:
        latest, count = t, count + 1
        if count > MAX_MISSED:
            return _latest_before(schedule, zone, latest, now), _estimate(schedule, zone, first, now)
        t = schedule.next(t, zone)
    return latest, count


def _latest_before(schedule: Schedule, zone: _dt.tzinfo, known: _dt.datetime, now: _dt.datetime) -> _dt.datetime:
    """The last schedule time at or before ``now``, given one (``known``) before it:
    searched back from ``now`` in doubling windows rather than walked from ``known``."""
    step = _dt.timedelta(minutes=1)
    start = known
    while now - step > known:
        probe = schedule.next(now - step, zone)
        if probe is not None and probe <= now:
            start = probe
            break
        step *= 2
    latest = start
    t = schedule.next(start, zone)
    while t is not None and t <= now:
        latest = t
        t = schedule.next(t, zone)
    return latest


def _estimate(schedule: Schedule, zone: _dt.tzinfo, first: _dt.datetime | None, now: _dt.datetime) -> int:
    second = schedule.next(first, zone) if first is not None else None
    if first is None or second is None or second <= first:
        return MAX_MISSED + 1
    return int((now - first) / (second - first)) + 1


def next_schedule_delay(cj: Mapping, now: _dt.datetime, schedule: Schedule, zone: _dt.tzinfo) -> float | None:
    """Seconds until the schedule time after the latest one passed (a little after it)."""
    latest, _ = most_recent_schedule(cj, now, schedule, zone, include_deadline=False)
    base = latest or earliest_time(cj, now, include_deadline=False)
    nxt = schedule.next(base, zone)
    if nxt is None:
        return None
    return max(0.0, (nxt - now).total_seconds()) + NEXT_SCHEDULE_DELTA


def job_name(cronjob_name: str, scheduled: _dt.datetime) -> str:
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


def rfc3339_in(t: _dt.datetime, zone: _dt.tzinfo) -> str:
    """``t`` in ``zone`` as RFC 3339 with its offset ("Z" for a zero offset, as Go writes it)."""
    text = t.astimezone(zone).replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def job_from_template(cj: Mapping, scheduled: _dt.datetime, zone: _dt.tzinfo) -> dict:
    """The Job a CronJob runs at ``scheduled``."""
    md = dict_at(cj, "metadata")
    template = dict_at(dict_at(cj, "spec"), "jobTemplate")
    tmd = dict_at(template, "metadata")
    jmd: dict[str, Any] = {"name": job_name(str(md.get("name", "")), scheduled)}
    if tmd.get("labels"):
        jmd["labels"] = dict(tmd["labels"])
    annotations = dict(tmd.get("annotations") or {})
    annotations[names.ANNOTATION_CRONJOB_SCHEDULED_TIMESTAMP] = rfc3339_in(scheduled, zone)
    jmd["annotations"] = annotations
    jmd["ownerReferences"] = [pc.controller_ref(cj, "batch/v1", "CronJob")]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": jmd, "spec": copy.deepcopy(dict_at(template, "spec"))}


def job_finished_as(job: Mapping) -> str | None:
    for ctype in ("Complete", "Failed"):
        cond = get_condition(job, ctype)
        if cond is not None and cond.get("status") == "True":
            return ctype
    return None


def _iso(t: _dt.datetime) -> str:
    return format_rfc3339(t.astimezone(UTC))


# --- the controller --------------------------------------------------------------------------


class CronJobController:
    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        *,
        clock: Callable[[], float] = time.time,
        default_zone: _dt.tzinfo | None = None,
    ):
        self.client = client
        # Where a CronJob without spec.timeZone runs: the local zone, as upstream.
        self.default_zone = default_zone or local_zone()
        self.cj_kind = informers.kind(names.BATCH_GROUP, "v1", "cronjobs")
        self.job_kind = informers.kind(names.BATCH_GROUP, "v1", "jobs")
        self.cronjobs = informers.for_kind(self.cj_kind)
        self.jobs = informers.for_kind(self.job_kind)
        self.recorder = EventRecorder(client, informers.registry, "cronjob-controller")
        self.clock = clock
        self.queue = RateLimitedQueue()
        self._written: dict[str, dict] = {}

    def start(self) -> None:
        self.cronjobs.add_handler(self.on_cronjob)
        self.jobs.add_handler(self.on_job)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "cronjob")

    def on_cronjob(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.cronjobs.list():
                self.queue.add(e.key)
        elif ev.type == "DELETED":
            self._written.pop(ev.entry.key, None)
        else:
            self.queue.add(ev.entry.key)

    def on_job(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        for uid, _, kind, name in ev.entry.owners:
            if kind == "CronJob":
                owner = self.cronjobs.get(ev.entry.namespace, name)
                if owner is not None and owner.uid == uid:
                    self.queue.add(owner.key)

    def _now(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self.clock(), UTC)

    async def sync(self, key: str) -> None:
        entry = self.cronjobs.get_by_key(key)
        if entry is None:
            return
        cj = entry.object()
        written = self._written.get(key)
        if written is not None and dict_at(written, "metadata").get("uid") == entry.uid:
            if int(dict_at(written, "metadata").get("resourceVersion") or 0) > entry.rv:
                cj = copy.deepcopy(written)
        md, spec = dict_at(cj, "metadata"), dict_at(cj, "spec")
        ns, uid = str(md.get("namespace", "")), md.get("uid")
        old_status = copy.deepcopy(dict_at(cj, "status"))
        status = copy.deepcopy(old_status)
        ref = object_reference(cj, "CronJob", "batch/v1")
        now = self._now()
        jobs = [e.object() for e in self.jobs.list(ns)]
        mine = [j for j in jobs if (pc.controller_of(j) or {}).get("uid") == uid]

        # 1. status.active against the jobs this CronJob controls.
        active = [r for r in list_at(status, "active") if isinstance(r, dict)]
        active_uids = {r.get("uid") for r in active}
        for j in mine:
            jmd = dict_at(j, "metadata")
            outcome = job_finished_as(j)
            if jmd.get("uid") not in active_uids and outcome is None:
                # Created by someone else (kubectl create job --from), or by us before a
                # crash: reported, not adopted into status.active (as upstream).
                await self.recorder.record(
                    ref,
                    "Warning",
                    "UnexpectedJob",
                    f"Saw a job that the controller did not create or forgot: {jmd.get('name')}",
                )
            elif jmd.get("uid") in active_uids and outcome is not None:
                active = [r for r in active if r.get("uid") != jmd.get("uid")]
                active_uids.discard(jmd.get("uid"))
                await self.recorder.record(
                    ref, "Normal", "SawCompletedJob", f"Saw completed job: {jmd.get('name')}, status: {outcome}"
                )
            if outcome == "Complete":
                done = _time(dict_at(j, "status").get("completionTime"))
                last = _time(status.get("lastSuccessfulTime"))
                if done is not None and (last is None or done > last):
                    status["lastSuccessfulTime"] = _iso(done)
        mine_uids = {dict_at(j, "metadata").get("uid") for j in mine}
        for r in list(active):
            if r.get("uid") not in mine_uids and not await self._still_there(ns, r):
                active.remove(r)
                await self.recorder.record(ref, "Normal", "MissingJob", f"Active job went missing: {r.get('name')}")
        status["active"] = active

        if md.get("deletionTimestamp"):
            await self._write_status(key, cj, status, old_status)
            return
        zone_name = spec.get("timeZone")
        try:
            zone = load_zone(zone_name) if isinstance(zone_name, str) else self.default_zone
        except ZoneError as exc:
            await self.recorder.record(ref, "Warning", "UnknownTimeZone", f'invalid timeZone: "{zone_name}": {exc}')
            await self._write_status(key, cj, status, old_status)
            return
        try:
            schedule = parse_schedule(str(spec.get("schedule") or ""))
        except CronError as exc:
            await self.recorder.record(
                ref, "Warning", "UnparseableSchedule", f'unparseable schedule: "{spec.get("schedule")}" : {exc}'
            )
            await self._write_status(key, cj, status, old_status)
            return
        await self._cleanup_history(cj, mine, status, ref)
        if spec.get("suspend") is True:
            await self._write_status(key, cj, status, old_status)
            return

        # 2. The most recent schedule time not yet run.
        scheduled, count = most_recent_schedule(cj, now, schedule, zone)
        if count > MAX_MISSED:
            await self.recorder.record(
                ref,
                "Warning",
                "TooManyMissedTimes",
                f"too many missed start times: {count}. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
            )
        requeue = next_schedule_delay(cj, now, schedule, zone)
        try:
            if scheduled is None:
                return
            deadline = spec.get("startingDeadlineSeconds")
            if isinstance(deadline, int) and scheduled + _dt.timedelta(seconds=deadline) < now:
                when = email.utils.format_datetime(scheduled.astimezone(UTC)).replace("-0000", "+0000")
                await self.recorder.record(
                    ref, "Warning", "MissSchedule", f"Missed scheduled time to start a job: {when}"
                )
                return
            name = job_name(str(md.get("name", "")), scheduled)
            last = _time(status.get("lastScheduleTime"))
            if any(r.get("name") == name for r in active) or (last is not None and last == scheduled):
                return
            policy = spec.get("concurrencyPolicy") or "Allow"
            if policy == "Forbid" and active:
                await self.recorder.record(
                    ref,
                    "Normal",
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid",
                )
                return
            if policy == "Replace":
                for r in list(active):
                    if await self._delete_job(ns, str(r.get("name", "")), ref):
                        active.remove(r)
            job = job_from_template(cj, scheduled, zone)
            try:
                made = await self.client.create(self.job_kind, ns, job)
            except st.ApiError as exc:
                if exc.code != 409:
                    await self.recorder.record(ref, "Warning", "FailedCreate", f"Error creating job: {exc.message}")
                    raise
                log.info("cronjob %s: job %s already exists", key, name)
                existing = self.jobs.get(ns, name)
                if existing is None:
                    raise
                made = existing.object()
                if (pc.controller_of(made) or {}).get("uid") != uid:
                    return
            else:
                await self.recorder.record(ref, "Normal", "SuccessfulCreate", f"Created job {name}")
            if job_finished_as(made) is None and dict_at(made, "metadata").get("uid") not in {
                r.get("uid") for r in active
            }:
                active.append(self._job_ref(made))
            status["lastScheduleTime"] = _iso(scheduled)
        finally:
            await self._write_status(key, cj, status, old_status)
            if requeue is not None:
                self.queue.add_after(key, requeue)

    async def _still_there(self, ns: str, r: Mapping) -> bool:
        """Whether the job ``r`` refers to exists (asked of the API: the informer may not
        have seen a job just created)."""
        try:
            job = await self.client.get(self.job_kind, ns, str(r.get("name", "")))
        except st.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return dict_at(job, "metadata").get("uid") == r.get("uid")

    @staticmethod
    def _job_ref(job: Mapping) -> dict:
        ref = object_reference(job, "Job", "batch/v1")
        return ref

    async def _cleanup_history(self, cj: dict, mine: list[dict], status: dict, ref: dict) -> None:
        spec = dict_at(cj, "spec")
        ok_limit, failed_limit = spec.get("successfulJobsHistoryLimit"), spec.get("failedJobsHistoryLimit")
        if ok_limit is None and failed_limit is None:
            return
        ns = str(dict_at(cj, "metadata").get("namespace", ""))

        def started(j: Mapping) -> tuple[int, str]:
            t = _time(dict_at(j, "status").get("startTime"))
            if t is None:
                return (1, str(dict_at(j, "metadata").get("creationTimestamp", "")))
            return (0, _iso(t))

        for outcome, limit in (("Complete", ok_limit), ("Failed", failed_limit)):
            if not isinstance(limit, int):
                continue
            finished = sorted((j for j in mine if job_finished_as(j) == outcome), key=started)
            for j in finished[: max(0, len(finished) - limit)]:
                jmd = dict_at(j, "metadata")
                if await self._delete_job(ns, str(jmd.get("name", "")), ref):
                    status["active"] = [r for r in list_at(status, "active") if r.get("uid") != jmd.get("uid")]

    async def _delete_job(self, ns: str, name: str, ref: dict) -> bool:
        try:
            await self.client.delete(self.job_kind, ns, name, DeleteOptions(propagation_policy="Background"))
        except st.ApiError as exc:
            if exc.code == 404:
                return True
            await self.recorder.record(ref, "Warning", "FailedDelete", f"Deleted job: {exc.message}")
            return False
        await self.recorder.record(ref, "Normal", "SuccessfulDelete", f"Deleted job {name}")
        return True

    async def _write_status(self, key: str, cj: dict, status: dict, old_status: dict) -> None:
        if not status.get("active"):
            status.pop("active", None)
        if status == old_status:
            return
        md = dict_at(cj, "metadata")
        obj = dict(cj)
        obj["status"] = status
        written = await self.client.update(
            self.cj_kind, str(md.get("namespace", "")), str(md.get("name", "")), obj, subresource="status"
        )
        self._written[key] = copy.deepcopy(written)
