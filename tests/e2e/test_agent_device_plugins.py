"""Device plugins end to end: the sample plugin (a separate process, real gRPC over unix
sockets) registers with an agent joined to an orch-apiserver on the session's containerd;
the node shows the resource; a pod asking for one widget sees its variable, a pod asking
for three is refused by the agent; after an agent restart the plugin registers again and
the pod resources API still lists the allocation (from the checkpoint)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import pytest

from apiserver_min.api import names
from cri.podresources import api_pb2 as pr
from cri.podresources import api_pb2_grpc as pr_grpc
from tests.apiserver_fixtures import ApiServerProcess
from tests.components import REPO_ROOT, free_port
from tests.deviceplugin_sample import RESOURCE
from tests.e2e.harness import NODE, Cluster, new_cgroup_root

pytestmark = pytest.mark.e2e


def widget_pod(name: str, count: int) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                # Bound here directly: the agent's own admission is what is tested.
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 1,
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": "orch.local/busybox:1",
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "echo WIDGET_IDS=$WIDGET_IDS; exec sleep 3600"],
                        "resources": {"limits": {RESOURCE: str(count)}},
                    }
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def cluster(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("devplug")
    cg = new_cgroup_root("orch-devplug")
    (work / "manifests").mkdir()
    with ApiServerProcess(str(work / "api"), free_port(), extra_args=["--enable-bootstrap-token-auth"]) as api:
        c = Cluster(work, api, containerd, cg)
        plugin = subprocess.Popen(
            [sys.executable, "-m", "tests.deviceplugin_sample", "--dir", str(work / "root" / names.DEVICE_PLUGIN_DIR)],
            cwd=REPO_ROOT,
            stdout=open(work / "plugin.log", "a"),
            stderr=subprocess.STDOUT,
        )
        try:
            yield c
        finally:
            plugin.terminate()
            plugin.wait(10)
            c.stop_agent()
            c.cleanup()


def create(c: Cluster, manifest: str) -> None:
    path = c.work / f"pod-{time.monotonic_ns()}.json"
    path.write_text(manifest)
    c.kubectl("create", "-f", str(path))


def widgets(c: Cluster) -> tuple[str, str] | None:
    node = c.get("node", NODE)
    if not node:
        return None
    status = node.get("status") or {}
    return (status.get("capacity") or {}).get(RESOURCE, ""), (status.get("allocatable") or {}).get(RESOURCE, "")


def list_pod_resources(c: Cluster) -> dict[str, list[tuple[str, str, list[str]]]]:
    path = c.work / "root" / names.POD_RESOURCES_DIR / names.POD_RESOURCES_SOCKET
    with grpc.insecure_channel(f"unix://{path}") as channel:
        answer = pr_grpc.PodResourcesListerStub(channel).List(pr.ListPodResourcesRequest(), timeout=5)
    return {
        p.name: [(ct.name, d.resource_name, list(d.device_ids)) for ct in p.containers for d in ct.devices]
        for p in answer.pod_resources
    }


def test_sample_plugin_pods_and_restart(cluster):
    c = cluster
    t0 = time.monotonic()
    argv = c.agent_argv(c.token())
    c.start_agent(argv)
    c.wait(lambda: c.node_ready() == "True", 20, "node Ready")
    c.wait(lambda: widgets(c) == ("2", "2"), 15, f"{RESOURCE}: 2 in capacity and allocatable")

    create(c, widget_pod("one", 1))
    c.wait(lambda: (p := c.get("pod", "one")) and p["status"].get("phase") == "Running", 30, "pod one Running")
    logs = c.wait(lambda: "WIDGET_IDS=" in (out := c.kubectl("logs", "one").stdout) and out, 15, "pod one's output")
    assert "WIDGET_IDS=widget-1" in logs or "WIDGET_IDS=widget-0" in logs, logs
    held = logs.split("WIDGET_IDS=")[1].split()[0]

    create(c, widget_pod("three", 3))
    refused = c.wait(
        lambda: (p := c.get("pod", "three")) and p["status"].get("phase") == "Failed" and p["status"],
        20,
        "pod three refused",
    )
    assert refused["reason"] == "UnexpectedAdmissionError", refused
    assert refused["message"] == names.POD_REJECTED_MESSAGE_PREFIX + (
        f"Allocate failed due to requested number of devices unavailable for {RESOURCE}. "
        "Requested: 3, Available: 1, which is unexpected"
    ), refused
    assert list_pod_resources(c)["one"] == [("c", RESOURCE, [held])]

    # Restart: the plugin registers with the new agent; the allocation comes from the checkpoint.
    c.stop_agent()
    c.start_agent(argv)
    c.wait(lambda: (listed := list_pod_resources_or_none(c)) and "one" in listed and listed, 30, "pod resources again")
    assert list_pod_resources(c)["one"] == [("c", RESOURCE, [held])]
    c.wait(lambda: widgets(c) == ("2", "2"), 20, "the plugin registered again")
    pod = c.get("pod", "one")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    # The pod ends: the agent removes it (and its volumes) and frees its device.
    c.kubectl("delete", "pod", "one", "three", "--wait=true", timeout=30)
    c.wait(lambda: (listed := list_pod_resources_or_none(c)) is not None and "one" not in listed, 10, "pod one gone")
    checkpoint = json.loads((c.work / "root" / names.DEVICE_PLUGIN_DIR / names.DEVICE_PLUGIN_CHECKPOINT).read_text())
    assert checkpoint["Data"]["PodDeviceEntries"] == [], checkpoint
    print(f"device plugin e2e: {time.monotonic() - t0:.1f}s")


def list_pod_resources_or_none(c: Cluster):
    try:
        return list_pod_resources(c)
    except grpc.RpcError:
        return None
