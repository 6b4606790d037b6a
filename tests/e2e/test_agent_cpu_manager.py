"""The static CPU manager on the real containerd: exclusive CPUs through cpuset cgroups.

An ``orch-agent`` with ``--cpu-manager-policy=static --reserved-cpus=0`` (and the
Static memory manager and single-numa-node topology manager beside it) runs a
Guaranteed pod asking for one whole CPU and a BestEffort pod. The Guaranteed
container's cgroup must hold cpuset ``1`` and the BestEffort one ``0`` (the shared
pool without it: the BestEffort pod runs first on both CPUs and reconciliation
moves it). After a ``kill -9`` and a restart the assignment is read back
from ``cpu_manager_state``: the running container keeps CPU 1 and a new BestEffort
pod still gets only CPU 0.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import grpc
import pytest

from apiserver_min.api import names
from cri.podresources import api_pb2 as pr
from cri.podresources import api_pb2_grpc as pr_grpc
from tests.e2e.test_agent_static_pods import (
    CGROUP_FS,
    V2,
    Agent,
    _hierarchies,
    _rm_cgroup_tree,
    container,
    pod_manifest,
)

pytestmark = pytest.mark.skipif(os.cpu_count() != 2, reason="the expected cpusets assume a 2-CPU machine")

MEMORY = "32Mi"


@pytest.fixture
def cgroup_root():
    rel = f"/orch-e2e-{uuid.uuid4().hex[:8]}"
    for root in _hierarchies():
        (root / rel.strip("/")).mkdir(exist_ok=True)
    yield rel
    _rm_cgroup_tree(rel)


def _container_cpuset(cgroup_root: str, pod: dict, name: str) -> str:
    """cpuset.cpus of the container's own cgroup (under its pod cgroup), "" until it exists."""
    statuses = {s["name"]: s for s in pod["status"].get("containerStatuses", [])}
    cid = (statuses.get(name) or {}).get("containerID", "").removeprefix("containerd://")
    if not cid:
        return ""
    parts = [cgroup_root.strip("/"), "orchpods"]
    if pod["status"].get("qosClass") not in (None, "Guaranteed"):
        parts.append(pod["status"]["qosClass"].lower())
    parts += [f"pod{pod['metadata']['uid']}", cid]
    d = (CGROUP_FS if V2 else CGROUP_FS / "cpuset").joinpath(*parts)
    for f in ("cpuset.cpus.effective", "cpuset.cpus") if V2 else ("cpuset.cpus",):
        try:
            value = (d / f).read_text().strip()
        except OSError:
            continue
        if value:
            return value
    return ""


def _running(p: dict) -> bool:
    return p["status"].get("phase") == "Running"


def test_guaranteed_pod_gets_an_exclusive_cpu_that_survives_a_restart(
    containerd, cri_images, cgroup_root, short_tmp_path
):
    tmp_path = short_tmp_path  # the agent's sockets live under it
    flags = (
        "--cpu-manager-policy=static",
        "--reserved-cpus=0",
        "--cpu-manager-reconcile-period=1s",
        # The memory manager beside it: the reservation equals the default hard eviction threshold.
        "--memory-manager-policy=Static",
        "--reserved-memory=0:memory=100Mi",
        "--topology-manager-policy=single-numa-node",
    )
    agent = Agent(tmp_path, containerd, cgroup_root, *flags)
    resources = {"cpu": "1", "memory": MEMORY}

    def shared_cpuset() -> str:
        return _container_cpuset(cgroup_root, agent.pod("shared") or {"status": {}}, "app")

    # The BestEffort pod first: it starts on the whole shared pool ...
    agent.write("shared", pod_manifest("shared", [container("app", "sleep", "3600")]))
    agent.start()
    try:
        agent.wait_pod("shared", _running, 30, "Running")
        agent.wait(lambda: shared_cpuset() == "0-1", 10, "shared cpuset 0-1")
        agent.write(
            "pinned",
            pod_manifest(
                "pinned", [container("app", "sleep", "3600", resources={"requests": resources, "limits": resources})]
            ),
        )
        pinned = agent.wait_pod("pinned", _running, 30, "Running")
        agent.wait(lambda: _container_cpuset(cgroup_root, pinned, "app") == "1", 10, "pinned cpuset 1")
        # ... and reconciliation (UpdateContainerResources) moves it off the exclusive CPU.
        agent.wait(lambda: shared_cpuset() == "0", 10, "shared cpuset 0")
        state_file = Path(tmp_path / "root" / "cpu_manager_state")
        state = json.loads(state_file.read_text())
        uid = pinned["metadata"]["uid"]
        assert state["policyName"] == "static"
        assert state["defaultCpuSet"] == "0"
        assert state["entries"] == {uid: {"app": "1"}}
        memory_state = json.loads(Path(tmp_path / "root" / "memory_manager_state").read_text())
        assert memory_state["entries"] == {uid: {"app": [{"numaAffinity": [0], "type": "memory", "size": 32 << 20}]}}
        if not V2:
            pod_cpuset = CGROUP_FS / "cpuset" / cgroup_root.strip("/") / "orchpods" / f"pod{uid}"
            assert (pod_cpuset / "cpuset.mems").read_text().strip() == "0"

        cid = pinned["status"]["containerStatuses"][0]["containerID"]
        agent.kill9()
        agent.start()
        after = agent.wait_pod("pinned", _running, 30, "Running after restart")
        assert after["status"]["containerStatuses"][0]["containerID"] == cid
        assert _container_cpuset(cgroup_root, after, "app") == "1"
        agent.write("late", pod_manifest("late", [container("app", "sleep", "3600")]))
        late = agent.wait_pod("late", _running, 30, "Running")
        assert _container_cpuset(cgroup_root, late, "app") == "0"
        assert json.loads(state_file.read_text())["entries"] == {uid: {"app": "1"}}
        assert "restored static state" in agent.output()
        # The pod resources API reports the exclusive CPU and the placed memory.
        sock = tmp_path / "root" / names.POD_RESOURCES_DIR / names.POD_RESOURCES_SOCKET
        agent.wait(sock.exists, 10, "pod resources socket")
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            stub = pr_grpc.PodResourcesListerStub(channel)
            allocatable = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
            listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
        assert list(allocatable.cpu_ids) == [1]
        (entry,) = [p for p in listed.pod_resources if p.name == after["metadata"]["name"]]
        assert list(entry.containers[0].cpu_ids) == [1]
        assert [(m.memory_type, m.size, [n.ID for n in m.topology.nodes]) for m in entry.containers[0].memory] == [
            ("memory", 32 << 20, [0])
        ]
    finally:
        for f in agent.manifests.glob("*.yaml"):
            f.unlink()
        try:
            agent.wait(lambda: not (agent.try_pods() or {"items": [1]})["items"], 40, "all pods gone")
        finally:
            agent.stop()
