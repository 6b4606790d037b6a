"""The batch strategies: a Job's generated selector and labels, and upstream's
validation messages for Jobs and CronJobs (counts, template, pod failure policy,
schedule, time zone, immutability)."""

from __future__ import annotations

import copy

from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.registry.batch import CronJobStrategy, JobStrategy

JOB = JobStrategy(REGISTRY.by_resource("batch", "v1", "jobs"))
CRON = CronJobStrategy(REGISTRY.by_resource("batch", "v1", "cronjobs"))


def _pod_spec() -> dict:
    return {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}


def _new_job(**spec) -> dict:
    obj = {"metadata": {"name": "pi", "namespace": "ns"}, "spec": {"template": {"spec": _pod_spec()}, **spec}}
    JOB.prepare_for_create(obj)
    apply_defaults("batch", "v1", "Job", obj)
    return obj


def _messages(errs) -> list[str]:
    return [e.message() for e in errs]


def test_selector_and_labels_are_generated_from_the_uid():
    job = _new_job()
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {names.LABEL_JOB_CONTROLLER_UID: uid}}
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "job-name": "pi",
        names.LABEL_JOB_NAME: "pi",
        "controller-uid": uid,
        names.LABEL_JOB_CONTROLLER_UID: uid,
    }
    # The job's own labels default from the template's (as upstream shows them).
    assert job["metadata"]["labels"]["job-name"] == "pi"
    assert (job["spec"]["completions"], job["spec"]["parallelism"], job["spec"]["backoffLimit"]) == (1, 1, 6)
    assert JOB.validate(job) == []


def test_a_selector_the_server_did_not_generate_is_refused():
    job = _new_job()
    job["spec"]["selector"] = {"matchLabels": {"app": "x"}}
    job["spec"]["template"]["metadata"]["labels"]["app"] = "x"
    assert "spec.selector: Invalid value: " in _messages(JOB.validate(job))[0]
    assert _messages(JOB.validate(job))[0].endswith("`selector` not auto-generated")


def test_job_spec_messages():
    job = _new_job(parallelism=-1, completionMode="Sometimes", activeDeadlineSeconds=-5)
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    msgs = _messages(JOB.validate(job))
    assert "spec.parallelism: Invalid value: -1: must be greater than or equal to 0" in msgs
    assert "spec.activeDeadlineSeconds: Invalid value: -5: must be greater than or equal to 0" in msgs
    assert 'spec.completionMode: Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"' in msgs
    assert (
        'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"' in msgs
    )
    big = _new_job(completionMode="Indexed", completions=100_001)
    assert (
        "spec.completions: Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed"
        in _messages(JOB.validate(big))
    )


def test_pod_failure_policy_messages():
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 3, 2, 2]}},
            {"action": "Explode", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]},
            {"action": "Ignore"},
            {
                "action": "Count",
                "onExitCodes": {"containerName": "nope", "operator": "NotIn", "values": [1]},
                "onPodConditions": [{"type": "DisruptionTarget"}],
            },
        ]
    }
    job = _new_job(podFailurePolicy=policy)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    msgs = _messages(JOB.validate(job))
    assert (
        'spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy '
        "is specified" in msgs
    )
    assert (
        "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator"
        in msgs
    )
    assert "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Invalid value: 2: must be ordered" in msgs
    assert "spec.podFailurePolicy.rules[0].onExitCodes.values[3]: Duplicate value: 2" in msgs
    assert any(m.startswith('spec.podFailurePolicy.rules[1].action: Unsupported value: "Explode"') for m in msgs)
    assert any(
        m.startswith("spec.podFailurePolicy.rules[1].onPodConditions[0].status: Unsupported value") for m in msgs
    )
    assert any(m.endswith("specifying one of OnExitCodes and OnPodConditions is required") for m in msgs)
    assert any(m.endswith("specifying both OnExitCodes and OnPodConditions is not supported") for m in msgs)
    assert any(
        m.startswith('spec.podFailurePolicy.rules[3].onExitCodes.containerName: Invalid value: "nope"') for m in msgs
    )


def _stored(job: dict) -> dict:
    out = copy.deepcopy(job)
    out["metadata"]["resourceVersion"] = "5"
    return out


def test_job_update_immutability():
    old = _stored(_new_job())
    new = copy.deepcopy(old)
    new["spec"]["completions"] = 3
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    msgs = _messages(JOB.validate_update(new, old))
    assert "spec.completions: Invalid value: 3: field is immutable" in msgs
    assert any(m.startswith("spec.template: Invalid value: ") and m.endswith("field is immutable") for m in msgs)
    # Suspended and never started: scheduling directives may change.
    old = _stored(_new_job(suspend=True))
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    assert JOB.validate_update(new, old) == []
    old["status"] = {"startTime": "2026-01-01T00:00:00Z"}
    new["status"] = old["status"]
    assert any(m.startswith("spec.template: Invalid value") for m in _messages(JOB.validate_update(new, old)))


def _cronjob(schedule: str = "*/5 * * * *", name: str = "tick", **spec) -> dict:
    obj = {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": _pod_spec()}}}, **spec},
    }
    CRON.prepare_for_create(obj)
    apply_defaults("batch", "v1", "CronJob", obj)
    return obj


def test_cronjob_messages():
    assert CRON.validate(_cronjob()) == []
    assert CRON.validate(_cronjob("@daily", timeZone="America/New_York")) == []
    assert _messages(CRON.validate(_cronjob("* * *"))) == [
        'spec.schedule: Invalid value: "* * *": expected exactly 5 fields, found 3: [* * *]'
    ]
    assert _messages(CRON.validate(_cronjob("TZ=UTC * * * * *"))) == [
        'spec.schedule: Invalid value: "TZ=UTC * * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field '
        "instead"
    ]
    assert _messages(CRON.validate(_cronjob(timeZone="Local"))) == [
        'spec.timeZone: Invalid value: "Local": timeZone must be an explicit time zone as defined in '
        "https://www.iana.org/time-zones"
    ]
    assert _messages(CRON.validate(_cronjob(timeZone="../etc"))) == [
        'spec.timeZone: Invalid value: "../etc": unknown time zone ../etc'
    ]
    assert _messages(CRON.validate(_cronjob(timeZone=""))) == [
        'spec.timeZone: Invalid value: "": timeZone must be nil or non-empty string'
    ]
    assert _messages(CRON.validate(_cronjob(name="c" * 53)))[-1].endswith("must be no more than 52 characters")
    bad = _cronjob(concurrencyPolicy="Sometimes")
    assert _messages(CRON.validate(bad)) == [
        'spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace"'
    ]
    sel = _cronjob()
    sel["spec"]["jobTemplate"]["spec"]["selector"] = {"matchLabels": {"a": "b"}}
    assert _messages(CRON.validate(sel))[0].endswith("`selector` will be auto-generated")


def test_a_stored_tz_schedule_may_stay_on_update():
    old = _stored(_cronjob())
    old["spec"]["schedule"] = "TZ=UTC 0 * * * *"
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = True
    assert CRON.validate_update(new, old) == []
    new["spec"]["timeZone"] = "UTC"
    assert _messages(CRON.validate_update(new, old)) == [
        'spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use both timeZone field and TZ or CRON_TZ in schedule'
    ]


def test_job_status_counts_are_never_negative():
    old = _stored(_new_job())
    new = copy.deepcopy(old)
    new["status"] = {"active": -1, "succeeded": 2}
    assert _messages(JOB.validate_update(new, old)) == [
        "status.active: Invalid value: -1: must be greater than or equal to 0"
    ]
