"""The batch controllers' logic: cron schedules and their next times (time zones, DST),
the Job back-off arithmetic, completed-index ranges and pod failure policy matching;
then the CronJob, Job and TTL-after-finished controllers' decisions with an injected
clock, over a real store and watch cache on SQLite, as their own RBAC identities."""

from __future__ import annotations

import datetime as _dt

import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.cron import CronError, load_zone, local_zone, parse_schedule
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.timeutil import parse_rfc3339
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.authz.authorizer import PrivilegedGroups, Union
from apiserver_min.authz.rbac import RbacAuthorizer, RbacIndex
from apiserver_min.client.informer import InformerFactory
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers import cronjob as cj
from apiserver_min.controllers import job as jc
from apiserver_min.controllers.bootstrappolicy import reconcile_default_policy
from apiserver_min.controllers.ttlafterfinished import TTLAfterFinishedController
from apiserver_min.registry.rest import DeleteOptions
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix, object_key
from apiserver_min.storage.sqlite import SqliteBackend

UTC = _dt.timezone.utc
NS_KIND = REGISTRY.by_resource("", "v1", "namespaces")
PODS = REGISTRY.by_resource("", "v1", "pods")
JOBS = REGISTRY.by_resource("batch", "v1", "jobs")
CRONJOBS = REGISTRY.by_resource("batch", "v1", "cronjobs")
EVENTS = REGISTRY.by_resource("", "v1", "events")


def at(*args: int, tz: _dt.tzinfo = UTC) -> _dt.datetime:
    return _dt.datetime(*args, tzinfo=tz)


# --- cron schedules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, after, want",
    [
        ("*/15 * * * *", at(2026, 1, 1, 10, 7, 30), at(2026, 1, 1, 10, 15)),
        ("0 9 * * mon-fri", at(2026, 11, 27, 10), at(2026, 11, 30, 9)),  # Friday after nine: Monday
        ("0 0 1 JAN *", at(2026, 3, 1), at(2027, 1, 1)),
        ("5,35 */6 * * *", at(2026, 1, 1, 6, 5), at(2026, 1, 1, 6, 35)),
        ("10-20/5 * * * *", at(2026, 1, 1, 0, 16), at(2026, 1, 1, 0, 20)),
        ("7/20 * * * *", at(2026, 1, 1, 0, 28), at(2026, 1, 1, 0, 47)),  # a/n runs to the maximum
        ("0 0 29 2 *", at(2026, 1, 1), at(2028, 2, 29)),
        # Both day fields restricted: either matches (the 13th, or a Friday).
        ("0 0 13 * fri", at(2026, 11, 27, 10), at(2026, 12, 4)),
        # One of them "*": both must match (a Friday, any day of the month).
        ("0 0 * * fri", at(2026, 11, 27, 10), at(2026, 12, 4)),
        ("@hourly", at(2026, 1, 1, 10, 0), at(2026, 1, 1, 11, 0)),
        ("@daily", at(2026, 1, 1, 10, 0), at(2026, 1, 2)),
        ("@midnight", at(2026, 1, 1, 10, 0), at(2026, 1, 2)),
        ("@weekly", at(2026, 11, 27), at(2026, 11, 29)),  # Sunday
        ("@monthly", at(2026, 11, 27), at(2026, 12, 1)),
        ("@yearly", at(2026, 11, 27), at(2027, 1, 1)),
        ("@annually", at(2026, 11, 27), at(2027, 1, 1)),
        ("* * * * *", at(2026, 1, 1, 10, 0, 0), at(2026, 1, 1, 10, 1)),  # strictly after
        ("* * * * *", at(2026, 1, 1, 9, 59, 59), at(2026, 1, 1, 10, 0)),
    ],
)
def test_next_schedule_times(spec, after, want):
    assert parse_schedule(spec).next(after) == want


def test_a_schedule_that_never_fires_has_no_next_time():
    assert parse_schedule("0 0 31 2 *").next(at(2026, 1, 1)) is None


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "empty spec string"),
        ("* * *", "expected exactly 5 fields, found 3: [* * *]"),
        ("* * * * * *", "expected exactly 5 fields, found 6: [* * * * * *]"),
        ("61 * * * *", "end of range (61) above maximum (59): 61"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("a * * * *", 'failed to parse int from a: strconv.Atoi: parsing "a": invalid syntax'),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        ("* * * foo *", 'failed to parse int from foo: strconv.Atoi: parsing "foo": invalid syntax'),
        ("@fortnightly", "unrecognized descriptor: @fortnightly"),
        ("TZ=Nowhere/City * * * * *", "provided bad location Nowhere/City: unknown time zone Nowhere/City"),
    ],
)
def test_schedule_errors_say_what_is_wrong(spec, message):
    with pytest.raises(CronError) as info:
        parse_schedule(spec)
    assert str(info.value) == message


def test_schedule_in_a_time_zone():
    berlin = load_zone("Europe/Berlin")
    daily = parse_schedule("0 9 * * *")
    assert daily.next(at(2026, 1, 10), berlin) == at(2026, 1, 10, 8)  # CET = UTC+1
    assert daily.next(at(2026, 7, 10), berlin) == at(2026, 7, 10, 7)  # CEST = UTC+2
    # A TZ= prefix of a stored schedule wins over the zone given.
    assert parse_schedule("TZ=Asia/Tokyo 0 9 * * *").next(at(2026, 1, 9, 12), berlin) == at(2026, 1, 10, 0)


def test_schedule_across_daylight_saving_changes():
    ny = load_zone("America/New_York")
    # Spring forward (8 March 2026, 02:00 -> 03:00): 02:30 does not exist that day.
    s = parse_schedule("30 2 * * *")
    first = s.next(at(2026, 3, 7, 12), ny)
    assert first == at(2026, 3, 9, 2, 30, tz=ny) and first.utcoffset() == _dt.timedelta(hours=-4)
    # Fall back (1 November 2026, 02:00 -> 01:00): 01:30 happens twice, an hour apart.
    s = parse_schedule("30 1 * * *")
    a = s.next(at(2026, 11, 1, 0, 0, tz=ny), ny)
    b = s.next(a, ny)
    assert a.astimezone(UTC) == at(2026, 11, 1, 5, 30) and b.astimezone(UTC) == at(2026, 11, 1, 6, 30)
    assert s.next(b, ny).astimezone(UTC) == at(2026, 11, 2, 6, 30)
    # Every minute keeps running through the repeated hour.
    assert parse_schedule("* * * * *").next(at(2026, 11, 1, 5, 59), ny).astimezone(UTC) == at(2026, 11, 1, 6, 0)


def test_the_local_zone_follows_tz(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    assert local_zone().utcoffset(at(2026, 1, 1)) == _dt.timedelta(hours=5, minutes=30)
    monkeypatch.setenv("TZ", "No/Such_Zone")
    assert local_zone() == UTC


def test_every_descriptor():
    assert parse_schedule("@every 90s").next(at(2026, 1, 1, 10)) == at(2026, 1, 1, 10, 1, 30)


# --- job arithmetic -------------------------------------------------------------------------


def test_backoff_doubles_from_ten_seconds_up_to_six_minutes():
    assert [jc.backoff_delay(n) for n in range(0, 9)] == [0, 10, 20, 40, 80, 160, 320, 360, 360]
    assert jc.backoff_delay(3, base=1, cap=3) == 3


def test_backoff_record_counts_failures_since_the_last_success():
    rec = jc.BackoffRecord().updated([], [100.0, 105.0])
    assert (rec.failures_after_success, rec.last_failure) == (2, 105.0)
    assert rec.remaining(110.0) == 15.0  # 20 s after the second failure
    assert rec.remaining(126.0) == 0.0
    rec = rec.updated([107.0], [103.0, 109.0])  # a success: only failures after it count
    assert (rec.failures_after_success, rec.last_failure) == (1, 109.0)
    assert jc.BackoffRecord().updated([5.0], []).remaining(5.0) == 0.0


@pytest.mark.parametrize(
    "indexes, text",
    [(set(), ""), ({0}, "0"), ({1, 3, 4, 5}, "1,3-5"), ({0, 1, 2, 7, 9, 10}, "0-2,7,9-10")],
)
def test_completed_indexes_are_compressed_ranges(indexes, text):
    assert jc.format_indexes(indexes) == text
    assert jc.parse_indexes(text, 100) == indexes


def test_completed_indexes_beyond_completions_are_dropped():
    assert jc.parse_indexes("1,3-5,9", 5) == {1, 3, 4}


def _failed_pod(*codes: int, conditions=()) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "status": {
            "phase": "Failed",
            "conditions": list(conditions),
            "containerStatuses": [
                {"name": f"c{i}", "state": {"terminated": {"exitCode": code}}} for i, code in enumerate(codes)
            ],
        },
    }


def test_pod_failure_policy_matching():
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "c1", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
        ]
    }
    disrupted = _failed_pod(42, 42, conditions=[{"type": "DisruptionTarget", "status": "True"}])
    assert jc.match_failure_policy(policy, disrupted) == ("Ignore", None)
    assert jc.match_failure_policy(policy, _failed_pod(1, 42)) == (
        "FailJob",
        "Container c1 for pod ns/p failed with exit code 42 matching FailJob rule at index 1",
    )
    assert jc.match_failure_policy(policy, _failed_pod(42, 0)) == ("Count", None)  # c0, not c1
    assert jc.match_failure_policy(policy, _failed_pod(1, 2)) == (None, None)
    assert jc.match_failure_policy(policy, _failed_pod(0)) == (None, None)  # exit code 0 never matches
    cond_policy = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    assert jc.match_failure_policy(cond_policy, disrupted) == (
        "FailJob",
        "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0",
    )
    assert jc.match_failure_policy(None, disrupted) == (None, None)


def test_index_name_prefix_is_cut_to_leave_room():
    assert jc.generate_name_with_index("job", 3) == "job-3-"
    long = "j" * 60
    prefix = jc.generate_name_with_index(long, 12)
    assert prefix.endswith("-12-") and len(prefix) == jc.MAX_GENERATED_NAME


# --- the cron job's scheduling decision --------------------------------------------------------


def _cj(created: _dt.datetime, schedule: str = "* * * * *", **spec) -> dict:
    return {
        "metadata": {"name": "c", "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"schedule": schedule, **spec},
        "status": {},
    }


def test_most_recent_schedule_time_and_the_wait_for_the_next():
    sched = parse_schedule("* * * * *")
    obj = _cj(at(2026, 1, 1, 10, 0, 30))
    assert cj.most_recent_schedule(obj, at(2026, 1, 1, 10, 0, 59), sched, UTC) == (None, 0)
    assert cj.next_schedule_delay(obj, at(2026, 1, 1, 10, 0, 40), sched, UTC) == pytest.approx(20.1)
    assert cj.most_recent_schedule(obj, at(2026, 1, 1, 10, 1, 0, 500), sched, UTC) == (at(2026, 1, 1, 10, 1), 1)
    assert cj.most_recent_schedule(obj, at(2026, 1, 1, 10, 5, 10), sched, UTC) == (at(2026, 1, 1, 10, 5), 5)
    obj["status"]["lastScheduleTime"] = "2026-01-01T10:05:00Z"
    assert cj.most_recent_schedule(obj, at(2026, 1, 1, 10, 5, 10), sched, UTC) == (None, 0)
    assert cj.next_schedule_delay(obj, at(2026, 1, 1, 10, 5, 10), sched, UTC) == pytest.approx(50.1)
    assert cj.job_name("c", at(2026, 1, 1, 10, 1)) == f"c-{int(at(2026, 1, 1, 10, 1).timestamp()) // 60}"


def test_starting_deadline_limits_how_far_back_missed_times_count():
    sched = parse_schedule("*/10 * * * *")
    obj = _cj(at(2026, 1, 1, 0, 0, 30), startingDeadlineSeconds=120)
    assert cj.most_recent_schedule(obj, at(2026, 1, 1, 10, 5), sched, UTC) == (None, 0)
    assert cj.most_recent_schedule(obj, at(2026, 1, 1, 10, 1), sched, UTC) == (at(2026, 1, 1, 10, 0), 1)


def test_too_many_missed_start_times_are_reported_and_only_the_latest_runs():
    sched = parse_schedule("* * * * *")
    obj = _cj(at(2026, 1, 1, 0, 0, 30))
    latest, count = cj.most_recent_schedule(obj, at(2026, 1, 3, 7, 42, 5), sched, UTC)
    assert latest == at(2026, 1, 3, 7, 42) and count > cj.MAX_MISSED


def test_job_from_template_names_and_annotates_the_schedule_time():
    obj = _cj(at(2026, 1, 1), jobTemplate={"metadata": {"labels": {"a": "b"}}, "spec": {"parallelism": 2}})
    obj["metadata"].update(uid="u1", namespace="ns")
    tokyo = load_zone("Asia/Tokyo")
    job = cj.job_from_template(obj, at(2026, 1, 1, 10, 1), tokyo)
    md = job["metadata"]
    assert md["annotations"][names.ANNOTATION_CRONJOB_SCHEDULED_TIMESTAMP] == "2026-01-01T19:01:00+09:00"
    assert (
        cj.job_from_template(obj, at(2026, 1, 1, 10, 1), UTC)["metadata"]["annotations"][
            names.ANNOTATION_CRONJOB_SCHEDULED_TIMESTAMP
        ]
        == "2026-01-01T10:01:00Z"
    )
    london_winter = cj.job_from_template(obj, at(2026, 1, 1, 10, 1), load_zone("Europe/London"))
    assert london_winter["metadata"]["annotations"][names.ANNOTATION_CRONJOB_SCHEDULED_TIMESTAMP].endswith("10:01:00Z")
    assert md["labels"] == {"a": "b"} and job["spec"] == {"parallelism": 2}
    assert md["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": "c",
            "uid": "u1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


# --- the controllers over a real store ---------------------------------------------------------


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def cluster(tmp_path):
    """A store on SQLite with its watch cache, RBAC over the default policy, namespace "team"."""
    backend = SqliteBackend(str(tmp_path / "state.db"))
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    index = RbacIndex.attach(cache, REGISTRY)
    store = Store(backend, REGISTRY, cache, Chain([]))
    await backend.start()
    await cache.start()
    await reconcile_default_policy(store)
    await store.create(NS_KIND, "", {"metadata": {"name": "team"}}, SYSTEM_USER)
    await cache.sync()
    informers = InformerFactory(cache, REGISTRY)
    authorizer = Union([PrivilegedGroups(), RbacAuthorizer(index)])

    def client(name: str) -> LocalClient:
        return LocalClient(store, authorizer, controller_user(name), names.CONTROLLER_MANAGER_FIELD_MANAGER)

    yield store, cache, informers, client
    informers.stop()
    await cache.stop()
    await backend.close()


def _capture_requeues(controller) -> list[tuple]:
    seen: list[tuple] = []
    controller.queue.add_after = lambda item, delay: seen.append((item, delay))
    return seen


def _template() -> dict:
    return {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "work", "image": "orch.local/busybox:1"}],
        }
    }


async def test_cronjob_creates_its_job_at_the_schedule_time(cluster):
    store, cache, informers, client = cluster
    created, _ = await store.create(
        CRONJOBS,
        "team",
        {
            "metadata": {"name": "tick"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": _template()}}},
        },
        SYSTEM_USER,
    )
    await cache.sync()
    t0 = parse_rfc3339(created["metadata"]["creationTimestamp"]).timestamp()
    minute = (int(t0) // 60 + 1) * 60  # the first schedule time after creation
    clock = Clock(minute - 1.0)
    controller = cj.CronJobController(client("cronjob-controller"), informers, clock=clock)
    requeues = _capture_requeues(controller)
    key = object_key(CRONJOBS, "team", "tick")
    await controller.sync(key)
    assert _list(cache, JOBS) == []
    assert requeues == [(key, pytest.approx(1.1))]  # exactly at the next minute, no polling
    clock.t = minute + 0.5
    await controller.sync(key)
    jobs = _list(cache, JOBS)
    assert [j["metadata"]["name"] for j in jobs] == [f"tick-{minute // 60}"]
    await cache.sync()
    stored = await store.get_object(CRONJOBS, "team", "tick")
    assert stored["status"]["lastScheduleTime"] == _dt.datetime.fromtimestamp(minute, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    assert [r["name"] for r in stored["status"]["active"]] == [f"tick-{minute // 60}"]
    assert requeues[-1] == (key, pytest.approx(59.6))
    # The same minute again: nothing more.
    await controller.sync(key)
    assert len(_list(cache, JOBS)) == 1
    # The job deleted behind its back: it leaves status.active.
    await store.delete(
        JOBS, "team", f"tick-{minute // 60}", DeleteOptions(propagation_policy="Background"), SYSTEM_USER
    )
    await cache.sync()
    await controller.sync(key)
    await cache.sync()
    assert "active" not in (await store.get_object(CRONJOBS, "team", "tick"))["status"]
    assert "MissingJob" in _reasons(cache)


async def test_cronjob_forbid_skips_while_a_job_runs_and_replace_replaces_it(cluster):
    store, cache, informers, client = cluster
    spec = {"schedule": "* * * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": {"template": _template()}}}
    created, _ = await store.create(CRONJOBS, "team", {"metadata": {"name": "one"}, "spec": spec}, SYSTEM_USER)
    await cache.sync()
    minute = (int(parse_rfc3339(created["metadata"]["creationTimestamp"]).timestamp()) // 60 + 1) * 60
    clock = Clock(minute + 1)
    controller = cj.CronJobController(client("cronjob-controller"), informers, clock=clock)
    _capture_requeues(controller)
    key = object_key(CRONJOBS, "team", "one")
    await controller.sync(key)
    await cache.sync()
    clock.t = minute + 61
    await controller.sync(key)
    await cache.sync()
    assert len(_list(cache, JOBS)) == 1  # Forbid: the first still runs
    assert "JobAlreadyActive" in _reasons(cache)

    def replace(obj: dict) -> dict:
        obj["spec"]["concurrencyPolicy"] = "Replace"
        return obj

    await store.update(CRONJOBS, "team", "one", replace, SYSTEM_USER)
    await cache.sync()
    await controller.sync(key)
    await cache.sync()
    names_now = sorted(j["metadata"]["name"] for j in _list(cache, JOBS) if not j["metadata"].get("deletionTimestamp"))
    assert names_now == [f"one-{minute // 60 + 1}"]
    assert {"SuccessfulCreate", "SuccessfulDelete"} <= _reasons(cache)


def _list(cache, kind) -> list[dict]:
    return [e.object() for e in cache.cache(key_prefix(kind)).sorted_entries("team")]


def _reasons(cache) -> set[str]:
    return {e["reason"] for e in _list(cache, EVENTS)}


async def _set_pod_phase(store, pod: dict, phase: str, exit_code: int, finished: _dt.datetime) -> None:
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")

    def compute(obj: dict) -> dict:
        obj["status"]["phase"] = phase
        obj["status"]["containerStatuses"] = [
            {
                "name": "work",
                "image": "orch.local/busybox:1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "finishedAt": stamp}},
            }
        ]
        return obj

    await store.update(PODS, "team", pod["metadata"]["name"], compute, SYSTEM_USER, subresource="status")


async def test_job_waits_out_its_back_off_before_replacing_a_failed_pod(cluster):
    store, cache, informers, client = cluster
    await store.create(
        JOBS, "team", {"metadata": {"name": "retry"}, "spec": {"backoffLimit": 3, "template": _template()}}, SYSTEM_USER
    )
    await cache.sync()
    now = _dt.datetime.now(UTC).replace(microsecond=0)
    clock = Clock(now.timestamp())
    controller = jc.JobController(client("job-controller"), informers, clock=clock)
    controller.start()
    requeues = _capture_requeues(controller)
    key = object_key(JOBS, "team", "retry")
    await controller.sync(key)
    await cache.sync()
    pods = _list(cache, PODS)
    assert len(pods) == 1
    await _set_pod_phase(store, pods[0], "Failed", 1, now)
    await cache.sync()
    clock.t = now.timestamp() + 2
    await controller.sync(key)
    await cache.sync()
    assert len(_list(cache, PODS)) == 1  # backing off
    assert (key, pytest.approx(8.0)) in requeues
    job = await store.get_object(JOBS, "team", "retry")
    assert job["status"]["failed"] == 1 and "conditions" not in job["status"]
    clock.t = now.timestamp() + 11
    await controller.sync(key)
    await cache.sync()
    pods = _list(cache, PODS)
    assert len(pods) == 2 and sum(1 for p in pods if p["status"].get("phase") == "Failed") == 1
    # The counted pod lost its tracking finalizer.
    failed = next(p for p in pods if p["status"].get("phase") == "Failed")
    assert names.FINALIZER_JOB_TRACKING not in (failed["metadata"].get("finalizers") or [])


async def test_active_deadline_fails_the_job(cluster):
    store, cache, informers, client = cluster
    await store.create(
        JOBS,
        "team",
        {"metadata": {"name": "slow"}, "spec": {"activeDeadlineSeconds": 30, "template": _template()}},
        SYSTEM_USER,
    )
    await cache.sync()
    start = _dt.datetime.now(UTC).timestamp()
    clock = Clock(start)
    controller = jc.JobController(client("job-controller"), informers, clock=clock)
    controller.start()
    requeues = _capture_requeues(controller)
    key = object_key(JOBS, "team", "slow")
    await controller.sync(key)
    await cache.sync()
    assert (key, pytest.approx(30.0, abs=1.0)) in requeues
    clock.t = start + 31
    await controller.sync(key)
    await cache.sync()
    job = await store.get_object(JOBS, "team", "slow")
    cond = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert (cond["reason"], cond["message"]) == ("DeadlineExceeded", "Job was active longer than specified deadline")
    pods = _list(cache, PODS)
    assert all(p["metadata"].get("deletionTimestamp") for p in pods) or pods == []


async def test_ttl_after_finished_deletes_when_it_expires(cluster):
    store, cache, informers, client = cluster
    await store.create(
        JOBS,
        "team",
        {"metadata": {"name": "done"}, "spec": {"ttlSecondsAfterFinished": 60, "template": _template()}},
        SYSTEM_USER,
    )
    finished = _dt.datetime.now(UTC).replace(microsecond=0)
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")

    def complete(obj: dict) -> dict:
        obj["status"] = {
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": stamp, "lastProbeTime": stamp}],
            "succeeded": 1,
            "completionTime": stamp,
            "startTime": stamp,
        }
        return obj

    await store.update(JOBS, "team", "done", complete, SYSTEM_USER, subresource="status")
    await cache.sync()
    clock = Clock(finished.timestamp() + 30)
    controller = TTLAfterFinishedController(client("ttl-after-finished-controller"), informers, clock=clock)
    requeues = _capture_requeues(controller)
    key = object_key(JOBS, "team", "done")
    await controller.sync(key)
    assert requeues == [(key, pytest.approx(30.0))]
    await store.get_object(JOBS, "team", "done")
    clock.t = finished.timestamp() + 61
    await controller.sync(key)
    await cache.sync()
    job = (_list(cache, JOBS) or [None])[0]
    # Foreground deletion: gone, or waiting for its dependents with the finalizer set.
    assert job is None or job["metadata"].get("deletionTimestamp")


async def test_job_with_a_manual_selector_adopts_matching_orphans(cluster):
    store, cache, informers, client = cluster
    selector = {"matchLabels": {"app": "batch"}}
    template = _template()
    template["metadata"] = {"labels": {"app": "batch"}}
    await store.create(
        JOBS,
        "team",
        {
            "metadata": {"name": "manual"},
            "spec": {"manualSelector": True, "selector": selector, "parallelism": 1, "template": template},
        },
        SYSTEM_USER,
    )
    orphan = {"metadata": {"name": "stray", "labels": {"app": "batch"}}, "spec": template["spec"]}
    await store.create(PODS, "team", orphan, SYSTEM_USER)
    await cache.sync()
    controller = jc.JobController(client("job-controller"), informers)
    controller.start()
    _capture_requeues(controller)
    await controller.sync(object_key(JOBS, "team", "manual"))
    await cache.sync()
    pods = _list(cache, PODS)
    assert [p["metadata"]["name"] for p in pods] == ["stray"]  # adopted: no second pod
    assert pods[0]["metadata"]["ownerReferences"][0]["name"] == "manual"
    job = await store.get_object(JOBS, "team", "manual")
    assert job["status"]["active"] == 1
    assert job["spec"]["selector"] == selector  # not generated


def test_a_deleted_pod_counts_as_failed_unless_a_policy_waits_for_its_phase():
    deleting = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"nodeName": "n1"}, "status": {}}
    assert jc._pod_failed(deleting, has_policy=False)
    assert not jc._pod_failed(deleting, has_policy=True)  # a node will report how it ended
    never_scheduled = {"metadata": deleting["metadata"], "spec": {}, "status": {"phase": "Pending"}}
    assert jc._pod_failed(never_scheduled, has_policy=True)
    succeeded = {"metadata": deleting["metadata"], "spec": {}, "status": {"phase": "Succeeded"}}
    assert not jc._pod_failed(succeeded, has_policy=False)


async def test_cronjob_keeps_its_history_limits(cluster):
    store, cache, informers, client = cluster
    spec = {
        "schedule": "@yearly",
        "suspend": True,
        "successfulJobsHistoryLimit": 1,
        "failedJobsHistoryLimit": 1,
        "jobTemplate": {"spec": {"template": _template()}},
    }
    owner, _ = await store.create(CRONJOBS, "team", {"metadata": {"name": "hist"}, "spec": spec}, SYSTEM_USER)
    ref = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": "hist",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for name, outcome, started in (
        ("hist-1", "Complete", "2026-01-01T00:00:00Z"),
        ("hist-2", "Complete", "2026-01-02T00:00:00Z"),
        ("hist-3", "Failed", "2026-01-01T00:00:00Z"),
        ("hist-4", "Failed", "2026-01-02T00:00:00Z"),
    ):
        body = {"metadata": {"name": name, "ownerReferences": [ref]}, "spec": {"template": _template()}}
        await store.create(JOBS, "team", body, SYSTEM_USER)

        def finish(obj: dict, outcome=outcome, started=started) -> dict:
            cond = {"type": outcome, "status": "True", "lastTransitionTime": started, "lastProbeTime": started}
            obj["status"] = {"startTime": started, "conditions": [cond]}
            return obj

        await store.update(JOBS, "team", name, finish, SYSTEM_USER, subresource="status")
    await cache.sync()
    controller = cj.CronJobController(client("cronjob-controller"), informers)
    _capture_requeues(controller)
    await controller.sync(object_key(CRONJOBS, "team", "hist"))
    await cache.sync()
    left = sorted(j["metadata"]["name"] for j in _list(cache, JOBS) if not j["metadata"].get("deletionTimestamp"))
    assert left == ["hist-2", "hist-4"]
    assert "SuccessfulDelete" in _reasons(cache)


async def test_work_queue_job_stops_creating_after_a_success_and_completes_when_all_end(cluster):
    store, cache, informers, client = cluster
    created, _ = await store.create(
        JOBS, "team", {"metadata": {"name": "queue"}, "spec": {"parallelism": 2, "template": _template()}}, SYSTEM_USER
    )
    assert "completions" not in created["spec"]  # work-queue mode
    controller = jc.JobController(client("job-controller"), informers)
    controller.start()
    _capture_requeues(controller)
    key = object_key(JOBS, "team", "queue")
    await cache.sync()
    await controller.sync(key)
    await cache.sync()
    pods = _list(cache, PODS)
    assert len(pods) == 2
    now = _dt.datetime.now(UTC)
    await _set_pod_phase(store, pods[0], "Succeeded", 0, now)
    await cache.sync()
    await controller.sync(key)
    await cache.sync()
    assert len(_list(cache, PODS)) == 2  # no new pod after a success
    job = await store.get_object(JOBS, "team", "queue")
    assert job["status"]["succeeded"] == 1 and job["status"]["active"] == 1
    assert "conditions" not in job["status"]
    await _set_pod_phase(store, pods[1], "Succeeded", 0, now)
    await cache.sync()
    await controller.sync(key)
    await cache.sync()
    job = await store.get_object(JOBS, "team", "queue")
    assert job["status"]["succeeded"] == 2
    assert [c["type"] for c in job["status"]["conditions"]] == ["Complete"]
    assert "Completed" in _reasons(cache)


class FlakyPods:
    """A client whose first pod create fails (a quota, a webhook down, ...)."""

    def __init__(self, inner):
        self.inner = inner
        self.failures = 1

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def create(self, kind, namespace, obj, **kw):
        if kind.resource == "pods" and self.failures:
            self.failures -= 1
            raise st.ApiError(500, "InternalError", "the pod store hiccuped")
        return await self.inner.create(kind, namespace, obj, **kw)


async def test_a_failed_pod_create_brings_the_job_back(cluster):
    store, cache, informers, client = cluster
    await store.create(JOBS, "team", {"metadata": {"name": "flaky"}, "spec": {"template": _template()}}, SYSTEM_USER)
    await cache.sync()
    controller = jc.JobController(FlakyPods(client("job-controller")), informers)
    controller.start()
    _capture_requeues(controller)
    key = object_key(JOBS, "team", "flaky")
    with pytest.raises(st.ApiError):  # the worker puts the job back, rate-limited
        await controller.sync(key)
    await cache.sync()
    assert _list(cache, PODS) == [] and "FailedCreate" in _reasons(cache)
    await controller.sync(key)
    await cache.sync()
    assert len(_list(cache, PODS)) == 1


async def test_too_many_missed_start_times_warn_and_run_the_latest(cluster):
    store, cache, informers, client = cluster
    spec = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": _template()}}}
    created, _ = await store.create(CRONJOBS, "team", {"metadata": {"name": "late"}, "spec": spec}, SYSTEM_USER)
    await cache.sync()
    t0 = parse_rfc3339(created["metadata"]["creationTimestamp"]).timestamp()
    clock = Clock(t0 + 3 * 3600 + 5)  # the controller was away for three hours
    controller = cj.CronJobController(client("cronjob-controller"), informers, clock=clock)
    _capture_requeues(controller)
    await controller.sync(object_key(CRONJOBS, "team", "late"))
    await cache.sync()
    latest = int(clock.t) // 60
    assert [j["metadata"]["name"] for j in _list(cache, JOBS)] == [f"late-{latest}"]
    warnings = [e for e in _list(cache, EVENTS) if e["reason"] == "TooManyMissedTimes"]
    assert warnings and warnings[0]["type"] == "Warning"
    assert warnings[0]["message"].startswith("too many missed start times: 18")
    assert warnings[0]["message"].endswith(". Set or decrease .spec.startingDeadlineSeconds or check clock skew")
