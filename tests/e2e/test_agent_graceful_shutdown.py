"""Graceful node shutdown end to end: a joined agent on containerd, a logind stand-in on a
private D-Bus daemon (``DBUS_SYSTEM_BUS_ADDRESS``), and a simulated shutdown signal.

The agent runs with ``shutdownGracePeriod: 10s`` and ``shutdownGracePeriodCriticalPods: 4s``:
it takes a delay lock at start; on ``PrepareForShutdown(true)`` the node turns not ready,
the two ordinary pods stop first and the system-node-critical pod after them, all three end
``Failed``/``Terminated`` with upstream's message and the DisruptionTarget condition, a new
pod is refused, and the lock is released. ``PrepareForShutdown(false)`` makes the node ready
again with a new lock. logind's delay (30 s) already covers the 10 s asked for: raising it
is covered by tests/integration/test_agent_nodeshutdown_logind.py, without writing to this
machine's /run.
"""

from __future__ import annotations

import json
import re

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import ApiServerProcess
from tests.components import free_port
from tests.e2e.harness import NODE, Cluster, new_cgroup_root
from tests.logind_standin import PrivateLogind, dbus_daemon

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(dbus_daemon() is None, reason="needs dbus-daemon (Debian package dbus)"),
]

# Stops within a second of SIGTERM (busybox sleep as PID 1 would ignore it).
_COMMAND = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]


def _pod(name: str, namespace: str, priority_class: str = "") -> dict:
    spec: dict = {
        "nodeName": NODE,
        "terminationGracePeriodSeconds": 8,
        "containers": [{"name": "c", "image": "orch.local/busybox:1", "imagePullPolicy": "Never", "command": _COMMAND}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.fixture(scope="module")
def setup(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("shutdown")
    cg = new_cgroup_root()
    (work / "manifests").mkdir()
    with PrivateLogind(work, delay_usec=30_000_000) as logind:
        with ApiServerProcess(str(work / "api"), free_port(), extra_args=["--enable-bootstrap-token-auth"]) as api:
            c = Cluster(work, api, containerd, cg)
            yield c, logind
            c.stop_agent()
            c.cleanup()


def _ready_condition(cluster: Cluster) -> dict:
    node = cluster.get("node", NODE) or {}
    return next((c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})


def test_shutdown_signal_stops_pods_by_priority_and_releases_the_lock(setup, monkeypatch):
    cluster, logind = setup
    argv = cluster.agent_argv(cluster.token())
    (cluster.work / "agent-config.yaml").write_text(
        "kind: AgentConfiguration\napiVersion: agent.config.orch.io/v1beta1\nnodeLeaseDurationSeconds: 8\n"
        "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 4s\n"
    )
    monkeypatch.setenv(names.ENV_DBUS_SYSTEM_BUS_ADDRESS, logind.address)
    cluster.start_agent(argv)
    cluster.wait(lambda: cluster.node_ready() == "True", 20, "node Ready")
    cluster.wait(lambda: logind.held_locks() == 1, 10, "the agent's delay lock")
    lock = logind.records("inhibit")[-1]
    assert (lock["what"], lock["who"], lock["mode"]) == ("shutdown", names.AGENT_NAME, "delay")

    pods = [
        _pod("web", "default"),
        _pod("batch", "default"),
        _pod("agent-helper", "orch-system", "system-node-critical"),
    ]
    manifest = cluster.work / "pods.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    cluster.kubectl("create", "--validate=false", "-f", str(manifest))

    def phases() -> dict[str, str]:
        out = {}
        for ns in ("default", "orch-system"):
            for p in (cluster.get("pods", "-n", ns) or {}).get("items", []):
                out[p["metadata"]["name"]] = p.get("status", {}).get("phase", "")
        return out

    cluster.wait(lambda: all(phases().get(p["metadata"]["name"]) == "Running" for p in pods), 30, "pods Running")

    releases = len(logind.records("release"))
    logind.prepare_for_shutdown(True)
    cluster.wait(lambda: len(logind.records("release")) > releases, 30, "the lock to be released")

    ready = cluster.wait(lambda: (c := _ready_condition(cluster)).get("status") == "False" and c, 10, "NotReady")
    assert names.SHUTDOWN_NOT_READY_MESSAGE in ready["message"], ready

    for p in pods:
        ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
        pod = cluster.wait(
            lambda ns=ns, name=name: (
                (o := cluster.get("pod", name, "-n", ns)) and o["status"].get("phase") == "Failed" and o
            ),
            15,
            f"{name} Failed",
        )
        status = pod["status"]
        assert status["reason"] == "Terminated", status
        assert status["message"] == "Pod was terminated in response to imminent node shutdown.", status
        target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
        assert (target["status"], target["reason"]) == ("True", names.POD_REASON_TERMINATION_BY_AGENT)
        assert status["containerStatuses"][0]["state"].get("terminated"), status

    # Order: both ordinary pods stopped before the critical one was asked to stop.
    log = cluster.log.read_text(errors="replace")
    events = [
        (m.group(1), m.group(2))
        for m in re.finditer(r"Shutdown manager (killing|finished killing) pod\b.*?pod=\"?([\w.-]+)", log)
    ]
    order = [(kind, name.split("_")[0]) for kind, name in events]
    critical_start = order.index(("killing", "agent-helper"))
    assert ("finished killing", "web") in order[:critical_start], order
    assert ("finished killing", "batch") in order[:critical_start], order
    assert logind.records("release")[-1]["time"] >= logind.records("signal")[-1]["time"]

    # New pods are refused while the node is shutting down.
    late = cluster.work / "late.json"
    late.write_text(json.dumps(_pod("late", "default")))
    cluster.kubectl("create", "--validate=false", "-f", str(late))
    refused = cluster.wait(
        lambda: (
            (o := cluster.get("pod", "late")) and o["status"].get("reason") == names.SHUTDOWN_NOT_ADMITTED_REASON and o
        ),
        15,
        "the late pod refused",
    )
    assert refused["status"]["phase"] == "Failed"
    assert refused["status"]["message"] == names.POD_REJECTED_MESSAGE_PREFIX + names.SHUTDOWN_NOT_ADMITTED_MESSAGE

    # Cancelled: ready again, with a new lock.
    logind.prepare_for_shutdown(False)
    cluster.wait(lambda: logind.held_locks() == 1, 10, "a new delay lock")
    cluster.wait(lambda: cluster.node_ready() == "True", 15, "node Ready again")
