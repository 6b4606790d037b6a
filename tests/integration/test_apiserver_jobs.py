"""Against a running orch-apiserver: the Job, CronJob and TTL-after-finished controllers.

No node agent runs: a pod's end is simulated by writing its status (phase, container
statuses with exit codes) through ``pods/status`` as the administrator, as an agent
would report it.
"""

from __future__ import annotations

import datetime as _dt
import time

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq, wait_for

JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
CRONJOBS = "/apis/batch/v1/namespaces/{ns}/cronjobs"
PODS = "/api/v1/namespaces/{ns}/pods"


@pytest.fixture(scope="module")
def ns(apiserver):
    name = uniq("jobs")
    create_namespace(apiserver, name)
    return name


def _job(name: str, **spec) -> dict:
    template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "work", "image": "orch.local/busybox:1", "command": ["true"]}],
        }
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"template": template, **spec}}


def _pods(apiserver, ns: str, job: str) -> list[dict]:
    _, body = apiserver.json("GET", PODS.format(ns=ns) + f"?labelSelector={names.LABEL_JOB_NAME}%3D{job}", expect=200)
    return body["items"]


def _active(pods: list[dict]) -> list[dict]:
    return [
        p
        for p in pods
        if p["status"].get("phase") not in ("Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp")
    ]


def _get_job(apiserver, ns: str, name: str) -> dict:
    return apiserver.json("GET", JOBS.format(ns=ns) + f"/{name}", expect=200)[1]


def _condition(obj: dict, ctype: str) -> dict | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def _wait_condition(apiserver, ns: str, name: str, ctype: str, status: str = "True") -> dict:
    """The job once its ``ctype`` condition has ``status``."""

    def check() -> dict | None:
        job = _get_job(apiserver, ns, name)
        cond = _condition(job, ctype)
        return job if cond is not None and cond["status"] == status else None

    return wait_for(check, 10, f"job {name} condition {ctype}={status}")


def _finish(apiserver, pod: dict, phase: str, exit_code: int) -> None:
    """Report the pod ended, as a node agent would."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    md = pod["metadata"]
    _, fresh = apiserver.json("GET", PODS.format(ns=md["namespace"]) + f"/{md['name']}", expect=200)
    fresh["status"].update(
        {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "work",
                    "image": "orch.local/busybox:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            ],
        }
    )
    apiserver.json("PUT", PODS.format(ns=md["namespace"]) + f"/{md['name']}/status", fresh, expect=200)


def test_job_keeps_parallelism_and_completes(apiserver, ns, kubectl):
    name = uniq("par")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name, completions=3, parallelism=2), expect=201)
    job = _get_job(apiserver, ns, name)
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {names.LABEL_JOB_CONTROLLER_UID: uid}}
    assert job["spec"]["backoffLimit"] == 6 and job["spec"]["completionMode"] == "NonIndexed"
    succeeded = 0
    while succeeded < 3:
        active = wait_for(lambda: _active(_pods(apiserver, ns, name)) or None, 10, f"an active pod of job {name}")
        assert len(active) <= 2, [p["metadata"]["name"] for p in active]
        if succeeded < 2:
            wait_for(lambda: len(_active(_pods(apiserver, ns, name))) == 2, 10, "two active pods")
        pod = active[0]
        labels = pod["metadata"]["labels"]
        assert labels["job-name"] == name and labels[names.LABEL_JOB_NAME] == name
        assert labels["controller-uid"] == uid and labels[names.LABEL_JOB_CONTROLLER_UID] == uid
        assert names.FINALIZER_JOB_TRACKING in pod["metadata"]["finalizers"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
        _finish(apiserver, pod, "Succeeded", 0)
        succeeded += 1
        wait_for(
            lambda n=succeeded: (_get_job(apiserver, ns, name)["status"].get("succeeded") or 0) >= n, 10, "counted"
        )
    result = kubectl("wait", "-n", ns, "--for=condition=Complete", f"job/{name}", "--timeout=20s")
    assert result.returncode == 0, result.stderr
    job = _get_job(apiserver, ns, name)
    assert job["status"]["succeeded"] == 3 and "active" not in job["status"]
    assert job["status"]["completionTime"] and job["status"]["startTime"]
    assert job["status"].get("uncountedTerminatedPods") == {}
    pods = _pods(apiserver, ns, name)
    assert len(pods) == 3
    assert all(names.FINALIZER_JOB_TRACKING not in (p["metadata"].get("finalizers") or []) for p in pods)


def test_job_fails_at_its_backoff_limit(apiserver, ns):
    name = uniq("fail")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name, backoffLimit=0), expect=201)
    pod = wait_for(lambda: (_active(_pods(apiserver, ns, name)) or [None])[0], 10, "the job's pod")
    _finish(apiserver, pod, "Failed", 1)
    job = _wait_condition(apiserver, ns, name, "Failed")
    cond = _condition(job, "Failed")
    assert cond["status"] == "True" and cond["reason"] == "BackoffLimitExceeded"
    assert cond["message"] == "Job has reached the specified backoff limit"
    assert job["status"]["failed"] == 1
    time.sleep(0.5)
    assert len(_pods(apiserver, ns, name)) == 1  # no replacement


def test_pod_failure_policy_fails_the_job_on_an_exit_code(apiserver, ns):
    name = uniq("pfp")
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    apiserver.json("POST", JOBS.format(ns=ns), _job(name, podFailurePolicy=policy), expect=201)
    pod = wait_for(lambda: (_active(_pods(apiserver, ns, name)) or [None])[0], 10, "the job's pod")
    _finish(apiserver, pod, "Failed", 42)
    job = _wait_condition(apiserver, ns, name, "Failed")
    cond = _condition(job, "Failed")
    assert cond["reason"] == "PodFailurePolicy"
    assert cond["message"] == (
        f"Container work for pod {ns}/{pod['metadata']['name']} failed with exit code 42 matching FailJob rule at index 0"
    )
    assert _condition(job, "FailureTarget")["status"] == "True"


def test_indexed_job_pods_carry_their_index(apiserver, ns):
    name = uniq("idx")
    apiserver.json(
        "POST", JOBS.format(ns=ns), _job(name, completions=3, parallelism=3, completionMode="Indexed"), expect=201
    )
    pods = wait_for(lambda: a if len(a := _active(_pods(apiserver, ns, name))) == 3 else None, 10, "three indexed pods")
    by_index = {p["metadata"]["annotations"][names.ANNOTATION_JOB_COMPLETION_INDEX]: p for p in pods}
    assert sorted(by_index) == ["0", "1", "2"]
    for ix, p in by_index.items():
        assert p["metadata"]["name"].startswith(f"{name}-{ix}-")
        assert p["spec"]["hostname"] == f"{name}-{ix}"
        env = p["spec"]["containers"][0]["env"]
        assert {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {
                    "apiVersion": "v1",
                    "fieldPath": f"metadata.annotations['{names.ANNOTATION_JOB_COMPLETION_INDEX}']",
                }
            },
        } in env
    _finish(apiserver, by_index["0"], "Succeeded", 0)
    _finish(apiserver, by_index["2"], "Succeeded", 0)
    wait_for(lambda: _get_job(apiserver, ns, name)["status"].get("completedIndexes") == "0,2", 10, "indexes 0,2")
    _finish(apiserver, by_index["1"], "Succeeded", 0)
    job = _wait_condition(apiserver, ns, name, "Complete")
    assert job["status"]["completedIndexes"] == "0-2" and job["status"]["succeeded"] == 3


def test_suspended_job_has_no_pods_until_resumed(apiserver, ns):
    name = uniq("susp")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name, suspend=True), expect=201)
    job = _wait_condition(apiserver, ns, name, "Suspended")
    assert _condition(job, "Suspended")["reason"] == "JobSuspended"
    assert "startTime" not in job["status"] and _pods(apiserver, ns, name) == []
    apiserver.json(
        "PATCH",
        JOBS.format(ns=ns) + f"/{name}",
        {"spec": {"suspend": False}},
        headers={"Content-Type": "application/merge-patch+json"},
        expect=200,
    )
    wait_for(lambda: _active(_pods(apiserver, ns, name)), 10, "a pod after resuming")
    job = _wait_condition(apiserver, ns, name, "Suspended", "False")
    assert _condition(job, "Suspended")["reason"] == "JobResumed" and job["status"]["startTime"]


def test_finished_job_with_ttl_zero_is_deleted(apiserver, ns):
    name = uniq("ttl")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name, ttlSecondsAfterFinished=0), expect=201)
    pod = wait_for(lambda: (_active(_pods(apiserver, ns, name)) or [None])[0], 10, "the job's pod")
    _finish(apiserver, pod, "Succeeded", 0)
    wait_for(lambda: apiserver.request("GET", JOBS.format(ns=ns) + f"/{name}")[0] == 404, 20, f"job {name} deleted")
    wait_for(lambda: _pods(apiserver, ns, name) == [], 20, "its pods deleted")


def test_job_validation_errors(apiserver, ns):
    bad = _job(uniq("bad"))
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    _, body = apiserver.json("POST", JOBS.format(ns=ns), bad, expect=422)
    assert (
        'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"'
        in body["message"]
    )
    indexed = _job(uniq("bad"), completionMode="Indexed", parallelism=1)
    _, body = apiserver.json("POST", JOBS.format(ns=ns), indexed, expect=422)
    assert "spec.completions: Required value: when completion mode is Indexed" in body["message"]
    name = uniq("imm")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name, suspend=True), expect=201)
    _, body = apiserver.json(
        "PATCH",
        JOBS.format(ns=ns) + f"/{name}",
        {"spec": {"completions": 5}},
        headers={"Content-Type": "application/merge-patch+json"},
        expect=422,
    )
    assert "spec.completions: Invalid value: 5: field is immutable" in body["message"]


def _cronjob(name: str, schedule: str, **spec) -> dict:
    template = _job("x")["spec"]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {"metadata": {"labels": {"from": name}}, "spec": template},
            **spec,
        },
    }


def test_cronjob_validation_errors(apiserver, ns):
    _, body = apiserver.json("POST", CRONJOBS.format(ns=ns), _cronjob(uniq("cj"), "61 * * * *"), expect=422)
    assert 'spec.schedule: Invalid value: "61 * * * *": end of range (61) above maximum (59): 61' in body["message"]
    _, body = apiserver.json("POST", CRONJOBS.format(ns=ns), _cronjob(uniq("cj"), "CRON_TZ=UTC * * * * *"), expect=422)
    assert "cannot use TZ or CRON_TZ in schedule, use timeZone field instead" in body["message"]
    _, body = apiserver.json(
        "POST", CRONJOBS.format(ns=ns), _cronjob(uniq("cj"), "@hourly", timeZone="Mars/Olympus"), expect=422
    )
    assert 'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus' in body["message"]
    apiserver.json(
        "POST", CRONJOBS.format(ns=ns), _cronjob(uniq("cj"), "@weekly", timeZone="Europe/Berlin"), expect=201
    )


def test_cronjob_runs_a_missed_schedule_inside_its_starting_deadline(apiserver, ns, kubectl):
    name = uniq("cj")
    apiserver.json(
        "POST",
        CRONJOBS.format(ns=ns),
        _cronjob(name, "* * * * *", suspend=True, startingDeadlineSeconds=300),
        expect=201,
    )
    _, cj = apiserver.json("GET", CRONJOBS.format(ns=ns) + f"/{name}", expect=200)
    two_minutes_ago = _dt.datetime.now(_dt.timezone.utc).replace(second=0, microsecond=0) - _dt.timedelta(minutes=2)
    cj["status"] = {"lastScheduleTime": two_minutes_ago.strftime("%Y-%m-%dT%H:%M:%SZ")}
    apiserver.json("PUT", CRONJOBS.format(ns=ns) + f"/{name}/status", cj, expect=200)
    apiserver.json(
        "PATCH",
        CRONJOBS.format(ns=ns) + f"/{name}",
        {"spec": {"suspend": False}},
        headers={"Content-Type": "application/merge-patch+json"},
        expect=200,
    )

    def created() -> list[dict]:
        _, body = apiserver.json("GET", JOBS.format(ns=ns) + f"?labelSelector=from%3D{name}", expect=200)
        return body["items"]

    jobs = wait_for(created, 10, "the cron job's job")
    job = jobs[0]
    scheduled = _dt.datetime.strptime(
        job["metadata"]["annotations"][names.ANNOTATION_CRONJOB_SCHEDULED_TIMESTAMP], "%Y-%m-%dT%H:%M:%SZ"
    ).replace(tzinfo=_dt.timezone.utc)
    assert scheduled > two_minutes_ago
    assert job["metadata"]["name"] == f"{name}-{int(scheduled.timestamp()) // 60}"
    ref = job["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("CronJob", name, True)
    _, cj = apiserver.json("GET", CRONJOBS.format(ns=ns) + f"/{name}", expect=200)
    wait_for(
        lambda: apiserver.json("GET", CRONJOBS.format(ns=ns) + f"/{name}", expect=200)[1]["status"].get("active"),
        10,
        "status.active",
    )
    # kubectl runs one now, client side, from the template.
    result = kubectl("create", "job", "-n", ns, f"{name}-manual", f"--from=cronjob/{name}")
    assert result.returncode == 0, result.stderr
    manual = _get_job(apiserver, ns, f"{name}-manual")
    assert manual["metadata"]["ownerReferences"][0]["name"] == name
    wait_for(lambda: _active(_pods(apiserver, ns, f"{name}-manual")), 10, "the manual job's pod")


def test_job_events(apiserver, ns):
    name = uniq("ev")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name), expect=201)
    pod = wait_for(lambda: (_active(_pods(apiserver, ns, name)) or [None])[0], 10, "the job's pod")
    _finish(apiserver, pod, "Succeeded", 0)

    def reasons() -> set[str]:
        _, body = apiserver.json(
            "GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3D{name}", expect=200
        )
        return {e["reason"] for e in body["items"]}

    wait_for(lambda: {"SuccessfulCreate", "Completed"} <= reasons(), 10, "the job's events")


def test_deleting_a_job_orphans_its_pods_unless_told_otherwise(apiserver, ns, kubectl):
    name = uniq("orph")
    apiserver.json("POST", JOBS.format(ns=ns), _job(name), expect=201)
    pod = wait_for(lambda: (_active(_pods(apiserver, ns, name)) or [None])[0], 10, "the job's pod")
    apiserver.json("DELETE", JOBS.format(ns=ns) + f"/{name}", expect=200)  # batch/v1: Orphan by default
    wait_for(lambda: apiserver.request("GET", JOBS.format(ns=ns) + f"/{name}")[0] == 404, 20, "job gone")

    def released() -> dict | None:
        _, p = apiserver.json("GET", PODS.format(ns=ns) + f"/{pod['metadata']['name']}", expect=200)
        md = p["metadata"]
        return (
            p
            if not md.get("ownerReferences") and names.FINALIZER_JOB_TRACKING not in (md.get("finalizers") or [])
            else None
        )

    wait_for(released, 20, "the pod orphaned, its tracking finalizer removed")
    other = uniq("casc")
    apiserver.json("POST", JOBS.format(ns=ns), _job(other), expect=201)
    wait_for(lambda: _active(_pods(apiserver, ns, other)), 10, "the second job's pod")
    result = kubectl("delete", "-n", ns, f"job/{other}")  # kubectl asks for background propagation
    assert result.returncode == 0, result.stderr
    wait_for(lambda: _pods(apiserver, ns, other) == [], 20, "the second job's pods deleted")
