"""Faults that lose nothing, on a node: containerd restarted, the API server down.

One cluster for the module: an orch-apiserver, a private containerd (restarting
the session's would disturb other modules' state) and an orch-agent joined to it.
Intervals are shortened so a short outage crosses every one of them: the node
lease lasts 8 s (renewed every 2 s), node status is posted every 4 s, and the
node lifecycle controller's grace is 6 s. An outage of ORCH_FAULT_OUTAGE_S
(12 s by default) is longer than the grace and than several lease and status
periods, so it exercises what a 60 s one does against the default 40 s grace.
"""

from __future__ import annotations

import datetime
import os
import time

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import ApiServerProcess, create_namespace
from tests.components import Containerd, free_port, image_builder
from tests.e2e.harness import NODE, Cluster, new_cgroup_root

OUTAGE_S = float(os.environ.get("ORCH_FAULT_OUTAGE_S", "12"))
GRACE_S = 6
STATUS_EVERY_S = 4
LEASE_RENEW_S = 2
NS = "faults"


def _pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "c", "image": "orch.local/busybox:1", "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
            ],
        },
    }


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    work = tmp_path_factory.mktemp("faults-node")
    with Containerd() as containerd:
        try:
            image_builder().ensure_images(containerd.address)
        except Exception as exc:  # noqa: BLE001 - reported as a skip with the cause
            pytest.skip(f"test images: {exc}")
        (work / "manifests").mkdir()
        (work / "manifests" / "st.yaml").write_text(yaml.safe_dump({**_pod("st"), "spec": _static_spec()}))
        with ApiServerProcess(
            str(work / "api"),
            free_port(),
            extra_args=[
                "--enable-bootstrap-token-auth",
                f"--node-monitor-grace-period={GRACE_S}s",
                "--node-monitor-period=1s",
            ],
        ) as api:
            cluster = Cluster(work, api, containerd, new_cgroup_root("orch-faults"))
            argv = cluster.agent_argv(cluster.token())
            (work / "agent-config.yaml").write_text(
                "kind: AgentConfiguration\napiVersion: agent.config.orch.io/v1beta1\n"
                f"nodeLeaseDurationSeconds: {LEASE_RENEW_S * 4}\nnodeStatusUpdateFrequency: {STATUS_EVERY_S}s\n"
                f"nodeStatusReportFrequency: {STATUS_EVERY_S}s\n"
            )
            cluster.start_agent(argv)
            try:
                cluster.wait(lambda: cluster.node_ready() == "True", 90, "node Ready")
                create_namespace(api, NS)
                yield cluster
            finally:
                _remove_pods(cluster)
                cluster.stop_agent()
                cluster.cleanup()


def _remove_pods(cluster: Cluster) -> None:
    """Best effort before the agent stops: no pod's volumes stay mounted."""
    for manifest in (cluster.work / "manifests").iterdir():
        manifest.unlink()
    if cluster.api.running:
        cluster.kubectl("delete", "pods", "--all", "-n", NS, "--wait=false", check=False)
        try:
            cluster.wait(lambda: not (cluster.get("pods", "-A") or {"items": [1]})["items"], 60, "pods gone")
        except AssertionError as exc:
            print(f"faults: pods left at teardown: {exc}")


def _static_spec() -> dict:
    spec = dict(_pod("x")["spec"])
    spec.pop("nodeName")
    return spec


def _running(cluster: Cluster, name: str, ns: str = NS) -> dict | None:
    """The pod's container status when Running (with a start time), else None."""
    pod = cluster.get("pod", "-n", ns, name)
    if not pod or pod.get("status", {}).get("phase") != "Running":
        return None
    statuses = pod["status"].get("containerStatuses") or []
    if not statuses or "running" not in statuses[0].get("state", {}):
        return None
    return {
        "id": statuses[0]["containerID"],
        "started": statuses[0]["state"]["running"]["startedAt"],
        "restarts": statuses[0]["restartCount"],
    }


def _tasks(containerd: Containerd) -> dict[str, str]:
    """Running tasks in the CRI namespace: container ID -> PID."""
    out = containerd.ctr("tasks", "ls", namespace="k8s.io", timeout=20).stdout.splitlines()[1:]
    return {f[0]: f[1] for f in (line.split() for line in out) if len(f) >= 3 and f[2] == "RUNNING"}


def _parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _lease_renewed(cluster: Cluster) -> datetime.datetime:
    lease = cluster.get("lease", "-n", names.NS_NODE_LEASE, NODE)
    return _parse_time(lease["spec"]["renewTime"]) if lease else datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _ready_condition(cluster: Cluster) -> dict:
    node = cluster.get("node", NODE) or {}
    for condition in node.get("status", {}).get("conditions", []):
        if condition["type"] == "Ready":
            return {**condition, "taints": [t["key"] for t in node.get("spec", {}).get("taints") or []]}
    return {}


def test_containerd_restart_keeps_containers(node):
    cluster = node
    api: ApiServerProcess = cluster.api
    api.json("POST", f"/api/v1/namespaces/{NS}/pods", _pod("keep"), expect=201)
    before = cluster.wait(lambda: _running(cluster, "keep"), 90, "pod keep Running")
    tasks_before = _tasks(cluster.containerd)
    cluster.containerd.restart()
    restarted = datetime.datetime.now(datetime.UTC)
    # The agent reconnects: a pod created after the restart starts.
    api.json("POST", f"/api/v1/namespaces/{NS}/pods", _pod("after"), expect=201)
    cluster.wait(lambda: _running(cluster, "after"), 90, "a pod created after the restart Running")
    # Status keeps flowing: the lease renewed and the node Ready after the restart.
    cluster.wait(lambda: _lease_renewed(cluster) > restarted, 10 * LEASE_RENEW_S, "lease renewed")
    assert cluster.node_ready() == "True"
    # No running container was restarted.
    time.sleep(2 * STATUS_EVERY_S)
    assert _running(cluster, "keep") == before
    tasks_after = _tasks(cluster.containerd)
    for cid, pid in tasks_before.items():
        assert tasks_after.get(cid) == pid, f"container {cid} (pid {pid}) restarted or gone: {tasks_after.get(cid)}"
    api.json("DELETE", f"/api/v1/namespaces/{NS}/pods/after", expect=200)
    cluster.wait(lambda: cluster.get("pod", "-n", NS, "after") is None, 60, "pod after deleted")


def test_apiserver_outage(node):
    cluster = node
    api: ApiServerProcess = cluster.api
    mirror = f"st-{NODE}"
    cluster.wait(lambda: _running(cluster, mirror, "default"), 90, "static pod's mirror Running")
    cluster.wait(lambda: _running(cluster, "keep"), 90, "pod keep Running")
    tasks_before = _tasks(cluster.containerd)
    api.stop()
    down = time.monotonic()
    try:
        # Static pods still start while the server is away.
        (cluster.work / "manifests" / "st2.yaml").write_text(yaml.safe_dump({**_pod("st2"), "spec": _static_spec()}))
        new = cluster.wait(
            lambda: set(_tasks(cluster.containerd)) - set(tasks_before), OUTAGE_S + 30, "the new static pod's task"
        )
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        tasks_during = _tasks(cluster.containerd)
        for cid, pid in tasks_before.items():
            assert tasks_during.get(cid) == pid, f"container {cid} stopped during the outage"
    finally:
        api.start(timeout=60)
    back = datetime.datetime.now(datetime.UTC)
    back_mono = time.monotonic()
    print(f"API server down {back_mono - down:.1f}s; static pod started during it: {sorted(new)}")
    # The node's lease and status catch up within one interval of the server's return.
    cluster.wait(lambda: _lease_renewed(cluster) >= back - datetime.timedelta(seconds=1), LEASE_RENEW_S + 5, "lease")
    cluster.wait(
        lambda: (
            _parse_time(_ready_condition(cluster).get("lastHeartbeatTime", "1970-01-01T00:00:00Z"))
            >= back - datetime.timedelta(seconds=1)
        ),
        STATUS_EVERY_S + 5,
        "node status heartbeat",
    )
    cluster.wait(lambda: _running(cluster, f"st2-{NODE}", "default"), 60, "mirror pod of the static pod added offline")
    # Not marked unreachable by the server's own restart: Ready stays True past the grace.
    while time.monotonic() - back_mono < GRACE_S + 4:
        condition = _ready_condition(cluster)
        assert condition.get("status") == "True", f"node marked {condition} after the server restart"
        assert names.TAINT_UNREACHABLE not in condition["taints"], condition
        time.sleep(0.5)
    assert _running(cluster, "keep")["restarts"] == 0
