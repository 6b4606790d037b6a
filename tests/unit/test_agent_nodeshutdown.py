"""Graceful node shutdown: budgets, priority groups, grace periods, the final status, and
the config fields with upstream's validation. The D-Bus side is in
tests/integration/test_agent_nodeshutdown_logind.py, the whole thing in the e2e test."""

from __future__ import annotations

import json

import pytest

from agent.config import ConfigError, build_config, load_config_file
from agent.metrics import AgentMetrics
from agent.nodeshutdown import (
    ShutdownManager,
    budgets_from_config,
    group_by_priority,
    mark_terminated,
    migrate_config,
    period_requested,
    pod_grace_period,
    write_inhibit_delay_dropin,
)
from agent.nodeshutdown.logind import system_bus_address
from agent.options import ShutdownGracePeriodByPodPriority as Budget
from agent.options import parse_args
from agent.server import configz_document
from agent.validation import validate
from apiserver_min.api import names

CRITICAL = names.SYSTEM_CRITICAL_PRIORITY


def pod(name: str, priority: int | None = None, grace: int | None = None) -> dict:
    spec: dict = {"containers": []}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": spec}


def config(tmp_path, fields: dict, *flags: str):
    path = tmp_path / "agent.yaml"
    path.write_text(json.dumps({"kind": "AgentConfiguration", "apiVersion": names.AGENT_CONFIG_API_VERSION, **fields}))
    return build_config(parse_args([f"--config={path}", *flags]))


# --- budgets ---------------------------------------------------------------------------


def test_two_field_form_is_the_two_entry_list():
    assert migrate_config(30, 10) == (Budget(0, 20), Budget(CRITICAL, 10))
    assert migrate_config(30, 0) == (Budget(0, 30), Budget(CRITICAL, 0))
    assert migrate_config(0, 0) == ()
    assert migrate_config(10, 20) == ()  # invalid (validation refuses it first)
    assert period_requested(migrate_config(30, 10)) == 30


def test_budgets_from_the_config_file(tmp_path):
    assert budgets_from_config(config(tmp_path, {})) == ()  # off by default: nothing taken from logind
    cfg = config(tmp_path, {"shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "10s"})
    assert budgets_from_config(cfg) == (Budget(0, 20), Budget(CRITICAL, 10))
    cfg = config(
        tmp_path,
        {
            "shutdownGracePeriodByPodPriority": [
                {"priority": 100000, "shutdownGracePeriodSeconds": 20},
                {"priority": 0, "shutdownGracePeriodSeconds": 5},
            ]
        },
    )
    assert not [e for e in validate(cfg) if "shutdown" in e]
    assert budgets_from_config(cfg) == (Budget(0, 5), Budget(100000, 20))  # sorted by priority
    assert configz_document(cfg)[names.AGENT_CONFIGZ_KEY]["shutdownGracePeriodByPodPriority"] == [
        {"priority": 100000, "shutdownGracePeriodSeconds": 20},
        {"priority": 0, "shutdownGracePeriodSeconds": 5},
    ]


def test_gate_off_turns_the_feature_off(tmp_path):
    cfg = config(tmp_path, {"shutdownGracePeriod": "30s"}, "--feature-gates=GracefulNodeShutdown=false")
    assert budgets_from_config(cfg) == ()
    assert any("requires feature gate GracefulNodeShutdown" in e for e in validate(cfg))


def test_validation_refuses_both_forms_and_bad_entries(tmp_path):
    both = config(
        tmp_path,
        {
            "shutdownGracePeriod": "30s",
            "shutdownGracePeriodByPodPriority": [{"priority": 0, "shutdownGracePeriodSeconds": 5}],
        },
    )
    assert any(
        "cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod" in e for e in validate(both)
    )
    gated = config(
        tmp_path,
        {"shutdownGracePeriodByPodPriority": [{"priority": 0, "shutdownGracePeriodSeconds": 5}]},
        "--feature-gates=GracefulNodeShutdownBasedOnPodPriority=false",
    )
    assert any("requires feature gate GracefulNodeShutdownBasedOnPodPriority" in e for e in validate(gated))
    bad = config(
        tmp_path,
        {
            "shutdownGracePeriodByPodPriority": [
                {"priority": 0, "shutdownGracePeriodSeconds": -1},
                {"priority": 0, "shutdownGracePeriodSeconds": 3},
            ]
        },
    )
    errors = validate(bad)
    assert any("[0].shutdownGracePeriodSeconds must not be negative" in e for e in errors), errors
    assert any("[1].priority is listed twice" in e for e in errors), errors
    critical = config(tmp_path, {"shutdownGracePeriod": "10s", "shutdownGracePeriodCriticalPods": "20s"})
    assert any("must not exceed shutdownGracePeriod" in e for e in validate(critical))


@pytest.mark.parametrize(
    "value, message",
    [
        ({"priority": 0}, "expected a list"),
        ([{"priority": "high", "shutdownGracePeriodSeconds": 1}], "[0].priority: expected an integer"),
        ([{"priority": 1, "gracePeriod": 1}], "[0]: unknown field 'gracePeriod'"),
        ([{"priority": 2**31, "shutdownGracePeriodSeconds": 1}], "32-bit"),
    ],
)
def test_config_file_type_errors_name_the_field(tmp_path, value, message):
    path = tmp_path / "agent.yaml"
    path.write_text(
        json.dumps(
            {
                "kind": "AgentConfiguration",
                "apiVersion": names.AGENT_CONFIG_API_VERSION,
                "shutdownGracePeriodByPodPriority": value,
            }
        )
    )
    with pytest.raises(ConfigError) as err:
        load_config_file(str(path))
    assert "shutdownGracePeriodByPodPriority" in str(err.value) and message in str(err.value)


# --- groups and grace periods ---------------------------------------------------------------


def test_groups_follow_the_entries_lowest_first():
    budgets = (Budget(0, 10), Budget(1000, 5), Budget(CRITICAL, 3))
    pods = [
        pod("critical", CRITICAL + 1000),
        pod("none"),
        pod("negative", -5),  # below the lowest entry: the lowest group
        pod("between", 500),  # between two entries: the lower one
        pod("boundary", 1000),  # on an entry: that entry
        pod("cluster-critical", CRITICAL),
    ]
    groups = group_by_priority(budgets, pods)
    assert [(g.priority, g.seconds, [p["metadata"]["name"] for p in g.pods]) for g in groups] == [
        (0, 10, ["none", "negative", "between"]),
        (1000, 5, ["boundary"]),
        (CRITICAL, 3, ["critical", "cluster-critical"]),
    ]
    assert group_by_priority((), pods) == []


def test_two_field_form_puts_only_system_critical_pods_last():
    groups = group_by_priority(migrate_config(30, 10), [pod("user", 1_000_000_000), pod("node", CRITICAL + 1000)])
    assert [[p["metadata"]["name"] for p in g.pods] for g in groups] == [["user"], ["node"]]


def test_a_shorter_own_grace_period_wins():
    assert pod_grace_period(pod("a", grace=30), 20) == 20
    assert pod_grace_period(pod("a", grace=5), 20) == 5
    assert pod_grace_period(pod("a", grace=20), 20) == 20
    assert pod_grace_period(pod("a"), 20) == 20


# --- the final status ------------------------------------------------------------------------


def test_terminated_status_as_upstream():
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    mark_terminated(status, disruption_condition=True, now="2026-01-01T00:00:00Z")
    assert status["phase"] == "Failed"
    assert status["reason"] == "Terminated"
    assert status["message"] == "Pod was terminated in response to imminent node shutdown."
    assert status["conditions"][1] == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": names.POD_REASON_TERMINATION_BY_AGENT,
        "message": "Pod was terminated in response to imminent node shutdown.",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    # Again (a second shutdown): one condition, its transition time kept.
    mark_terminated(status, disruption_condition=True, now="2026-01-02T00:00:00Z")
    targets = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
    assert len(targets) == 1 and targets[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_a_succeeded_pod_stays_succeeded_and_the_gate_drops_the_condition():
    status = {"phase": "Succeeded"}
    mark_terminated(status, disruption_condition=False)
    assert status == {
        "phase": "Succeeded",
        "reason": "Terminated",
        "message": "Pod was terminated in response to imminent node shutdown.",
    }


# --- logind's side that needs no bus -------------------------------------------------------


def test_dropin_and_bus_address(tmp_path):
    path = write_inhibit_delay_dropin(45, str(tmp_path / "logind.conf.d"))
    assert path.endswith("/99-orch-agent-shutdown.conf")
    text = open(path).read()
    assert "[Login]\nInhibitDelayMaxSec=45\n" in text
    assert system_bus_address({}) == "unix:path=/var/run/dbus/system_bus_socket"
    assert system_bus_address({"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/x"}) == "unix:path=/x"


# --- the last shutdown's times ---------------------------------------------------------------


async def test_shutdown_times_survive_a_restart_and_are_metrics(tmp_path):
    state = str(tmp_path / "graceful_node_shutdown_state")
    killed: list[str] = []

    async def kill(p, grace, update):
        killed.append(p["metadata"]["name"])

    mgr = ShutdownManager([Budget(0, 1)], pods=lambda: [pod("a")], kill=kill, state_file=state)
    assert mgr.metrics() == {}
    await mgr.process_shutdown()
    assert killed == ["a"]
    times = mgr.metrics()
    assert times["start"] <= times["end"]
    again = ShutdownManager([Budget(0, 1)], pods=list, kill=kill, state_file=state)  # after the reboot
    assert again.metrics() == pytest.approx(times, abs=1e-3)
    metrics = AgentMetrics("n1")
    metrics.graceful_shutdown(again.metrics)
    lines = dict(line.rsplit(" ", 1) for line in metrics.render().splitlines() if not line.startswith("#"))
    prefix = f"{names.AGENT_METRICS_PREFIX}_graceful_shutdown"
    assert float(lines[f"{prefix}_start_time_seconds"]) == pytest.approx(times["start"], abs=1e-3)
    assert float(lines[f"{prefix}_end_time_seconds"]) == pytest.approx(times["end"], abs=1e-3)
    text = metrics.render()
    assert f"# TYPE {names.AGENT_METRICS_PREFIX}_graceful_shutdown_end_time_seconds gauge" in text
    # A broken file is reported and ignored.
    open(state, "w").write("{not json")
    assert ShutdownManager([Budget(0, 1)], pods=list, kill=kill, state_file=state).metrics() == {}
