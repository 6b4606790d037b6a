"""Hollow nodes (tests/bench/hollow.py) against a real orch-apiserver, so the scale
benchmark's node mode keeps working: three node agents in the test's process, each on
its own fake CRI runtime, register, renew their leases, run a scheduled pod to
Running (status reported), create the mirror pod of their static pod, remove a
deleted pod, and pull a private image with the pod's image pull secret."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

from agent.client.config import load_orchconfig
from agent.client.rest import ApiClient, ApiError
from agent.runtime.volumes import mount_points
from apiserver_min.api import names
from tests.bench.hollow import HOLLOW_IMAGE, STATIC_POD_NAME, HollowNodes, pod_cidr_of

PREFIX = "hollow-t-"
COUNT = 3
LEASES = f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{names.NS_NODE_LEASE}/leases"


async def until(check, timeout: float, what: str, interval: float = 0.2):
    """Poll the coroutine function ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} within {timeout:g} s (last: {last!r})")


def ready(node: dict) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


async def test_hollow_nodes_register_renew_run_and_mirror(apiserver, tmp_path):
    # A 4 s lease is renewed every second (the duration is a config-file field only).
    config = tmp_path / "agent-config.yaml"
    config.write_text(
        f"apiVersion: {names.AGENT_CONFIG_API_VERSION}\nkind: {names.AGENT_CONFIG_KIND}\nnodeLeaseDurationSeconds: 4\n"
    )
    fleet = HollowNodes(
        data_dir=apiserver.data_dir,
        server_url=apiserver.url,
        count=COUNT,
        prefix=PREFIX,
        work_dir=tmp_path / "hollow",
        extra_flags=(f"--config={config}", "--node-status-update-frequency=1s"),
    )
    client = ApiClient(load_orchconfig(str(apiserver.kubeconfig)), qps=-1)
    await fleet.start()
    try:
        wanted = {f"{PREFIX}{i}" for i in range(COUNT)}

        async def nodes_ready():
            items = (await client.get("/api/v1/nodes"))["items"]
            return {n["metadata"]["name"] for n in items if ready(n)} >= wanted

        await until(nodes_ready, 30, "all hollow nodes Ready")
        node = await client.get(f"/api/v1/nodes/{PREFIX}0")
        assert node["status"]["capacity"]["cpu"] == "4" and node["status"]["capacity"]["pods"] == "110"

        async def renew_times():
            leases = {ls["metadata"]["name"]: ls for ls in (await client.get(LEASES))["items"]}
            if not wanted <= set(leases):
                return None
            return {n: leases[n]["spec"]["renewTime"] for n in wanted}

        first = await until(renew_times, 30, "a lease for every node")

        async def renewed():
            now = await renew_times()
            return now is not None and all(now[n] > first[n] for n in wanted)

        await until(renewed, 30, "every lease renewed")

        async def mirrors():
            items = (await client.get(f"/api/v1/namespaces/{names.NS_SYSTEM}/pods"))["items"]
            found = {
                p["spec"]["nodeName"]
                for p in items
                if p["metadata"]["name"] == f"{STATIC_POD_NAME}-{p['spec'].get('nodeName')}"
                and names.ANNOTATION_CONFIG_MIRROR in p["metadata"].get("annotations", {})
                and (p.get("status") or {}).get("phase") == "Running"
            }
            return found >= wanted

        await until(mirrors, 30, "a Running mirror pod of every node's static pod")

        pods = "/api/v1/namespaces/default/pods"
        await client.create(
            pods,
            {
                "metadata": {"name": "hollow-web"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "web", "image": HOLLOW_IMAGE, "command": ["sleep", "1000"]}],
                },
            },
        )

        async def running():
            pod = await client.get(f"{pods}/hollow-web")
            st = pod.get("status") or {}
            return pod if st.get("phase") == "Running" and st.get("podIP") else None

        pod = await until(running, 30, "the scheduled pod Running")
        node_name = pod["spec"]["nodeName"]
        assert node_name in wanted
        index = int(node_name.removeprefix(PREFIX))
        assert pod["status"]["podIP"].startswith(pod_cidr_of(index).rsplit(".", 1)[0] + ".")
        (cs,) = pod["status"]["containerStatuses"]
        assert cs["ready"] and "running" in cs["state"]

        await client.delete(f"{pods}/hollow-web")

        async def gone():
            try:
                await client.get(f"{pods}/hollow-web")
            except ApiError as exc:
                return exc.status == 404
            return False

        await until(gone, 30, "the deleted pod removed by its node")

        # A private image: the pod's pull secret, read by its node (the Node authorizer lets
        # it), reaches the runtime's PullImage; without it the registry refuses the pull.
        private = "reg.hollow.test/private:1"
        for hollow in fleet.nodes:
            assert hollow.fake is not None
            hollow.fake.allow_pull(private, credentials=("robot", "hunter2"))
        docker_config = {"auths": {"reg.hollow.test": {"auth": base64.b64encode(b"robot:hunter2").decode()}}}
        await client.create(
            "/api/v1/namespaces/default/secrets",
            {
                "metadata": {"name": "regcred"},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": base64.b64encode(json.dumps(docker_config).encode()).decode()},
            },
        )
        await client.create(
            pods,
            {
                "metadata": {"name": "hollow-private"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "imagePullSecrets": [{"name": "regcred"}],
                    "containers": [{"name": "app", "image": private, "command": ["sleep", "1000"]}],
                },
            },
        )

        async def private_running():
            return ((await client.get(f"{pods}/hollow-private")).get("status") or {}).get("phase") == "Running"

        await until(private_running, 30, "the pod of a private image Running")
        assert not fleet.failed()
        # The pod's token volume was a plain directory: hollow nodes mount nothing.
        assert mount_points(str(tmp_path)) == {}
        # Its log directory was the node's own, never the machine's /var/log/pods.
        logs = tmp_path / "hollow" / node_name / "pod-logs"
        assert any(d.name.startswith("default_hollow-web_") for d in logs.iterdir()) or any(
            d.name.startswith(f"{names.NS_SYSTEM}_{STATIC_POD_NAME}-") for d in logs.iterdir()
        )
        shared = Path("/var/log/pods")
        assert not shared.exists() or not [d for d in shared.iterdir() if PREFIX in d.name]
    finally:
        await fleet.stop()
        await client.close()
