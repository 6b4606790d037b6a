"""The node service proxy on real nftables, driven by a real orch-apiserver.

Services and EndpointSlices are written through the API as an administrator; a
:class:`agent.proxy.proxier.ServiceProxy` (the agent's own, with the agent's API
client) watches them and programs ``table ip orch-proxy``; requests come from a
client network namespace to two backends in namespaces of their own
(``tests/e2e/netlab.py``). Needs root and the ``nft`` command.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time

import pytest

from agent.client import ApiClient, load_orchconfig
from agent.proxy import ruleset
from agent.proxy.proxier import ServiceProxy
from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.e2e.netlab import BACKEND_PORT, NetLab

CLUSTER_IP = "10.111.77.10"
NODE = "node-a"


@pytest.fixture(scope="module")
def netlab():
    if os.geteuid() != 0:
        pytest.skip("the service proxy test needs root")
    if shutil.which("nft") is None:
        pytest.skip("the service proxy test needs nft (apt-get install nftables)")
    lab = NetLab()
    try:
        yield lab.up()
    finally:
        lab.down()
        subprocess.run(["nft", "-f", "-"], input=ruleset.delete_script().encode(), check=False)


def _slice(ns: str, endpoints: list[tuple[str, str]], name: str = "web-1") -> dict:
    return {
        "apiVersion": f"{names.DISCOVERY_GROUP}/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {names.LABEL_SERVICE_NAME: "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": BACKEND_PORT, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "nodeName": node, "conditions": {"ready": True}} for ip, node in endpoints],
    }


async def _until(cond, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not within {timeout}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


def _fetch(lab: NetLab, url: str, n: int, timeout: float = 2.0) -> list[str]:
    return lab.fetch("c", url, n, timeout)


async def test_service_proxy_end_to_end(apiserver, netlab: NetLab):
    ns = "proxy-e2e"
    create_namespace(apiserver, ns)
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "type": "NodePort",
            "clusterIP": CLUSTER_IP,
            "ports": [{"name": "http", "port": 80, "targetPort": BACKEND_PORT}],
        },
    }
    _, created = apiserver.json("POST", f"/api/v1/namespaces/{ns}/services", svc, expect=201)
    node_port = created["spec"]["ports"][0]["nodePort"]
    slices = f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/{ns}/endpointslices"
    a, b = netlab.ip["a"], netlab.ip["b"]
    apiserver.json("POST", slices, _slice(ns, [(a, NODE), (b, "node-b")]), expect=201)

    client = ApiClient(load_orchconfig(str(apiserver.kubeconfig)), qps=100, burst=100)
    proxy = ServiceProxy(client, NODE, cluster_cidr=f"{netlab.ip['a'].rsplit('.', 1)[0]}.0/24", min_sync_interval=0.02)
    task = asyncio.create_task(proxy.run())
    url = f"http://{CLUSTER_IP}:80/"
    loop = asyncio.get_running_loop()
    try:
        await _until(lambda: f"{ns}/web" in proxy.applied, 10, "first sync")

        # Cluster IP: answers, and over 20 requests both backends do.
        seen = await loop.run_in_executor(None, _fetch, netlab, url, 20)
        assert set(seen) == {"backend-a", "backend-b"}, seen

        # Node port on a local address of the node (from outside the pod range: masqueraded).
        seen = await loop.run_in_executor(None, _fetch, netlab, f"http://{netlab.node_address}:{node_port}/", 6)
        assert set(seen) <= {"backend-a", "backend-b"} and seen, seen

        # ClientIP affinity pins one backend.
        patch = {"spec": {"sessionAffinity": "ClientIP"}}
        apiserver.json(
            "PATCH",
            f"/api/v1/namespaces/{ns}/services/web",
            patch,
            headers={"Content-Type": "application/merge-patch+json"},
            expect=200,
        )
        await _until(lambda: proxy.applied[f"{ns}/web"].sets, 2, "affinity sets")
        seen = await loop.run_in_executor(None, _fetch, netlab, url, 12)
        assert len(set(seen)) == 1 and seen[0].startswith("backend-"), seen

        # internalTrafficPolicy Local: only this node's endpoint (a) for cluster-IP traffic.
        patch = {"spec": {"sessionAffinity": "None", "internalTrafficPolicy": "Local"}}
        apiserver.json(
            "PATCH",
            f"/api/v1/namespaces/{ns}/services/web",
            patch,
            headers={"Content-Type": "application/merge-patch+json"},
            expect=200,
        )
        await _until(lambda: not proxy.applied[f"{ns}/web"].sets, 2, "affinity removed")
        seen = await loop.run_in_executor(None, _fetch, netlab, url, 8)
        assert set(seen) == {"backend-a"}, seen
        apiserver.json(
            "PATCH",
            f"/api/v1/namespaces/{ns}/services/web",
            {"spec": {"internalTrafficPolicy": "Cluster"}},
            headers={"Content-Type": "application/merge-patch+json"},
            expect=200,
        )

        # Removing an endpoint: the rules follow within a second.
        syncs = proxy.syncs
        started = time.monotonic()
        _, current = apiserver.json("GET", f"{slices}/web-1", expect=200)
        current["endpoints"] = [e for e in current["endpoints"] if e["addresses"] != [a]]
        apiserver.json("PUT", f"{slices}/web-1", current, expect=200)
        chain = f"svc-{ns}/web/tcp/http"

        def only_b() -> bool:
            rules = proxy.applied[f"{ns}/web"].chains.get(chain, ())
            return proxy.syncs > syncs and bool(rules) and all(a not in r for r in rules)

        await _until(only_b, 1.0, "endpoint removal")
        took = time.monotonic() - started
        seen = await loop.run_in_executor(None, _fetch, netlab, url, 8)
        assert set(seen) == {"backend-b"}, seen
        print(f"endpoint removal programmed in {took * 1000:.0f} ms")

        # No endpoints: refused at once.
        current = apiserver.json("GET", f"{slices}/web-1", expect=200)[1]
        current["endpoints"] = []
        apiserver.json("PUT", f"{slices}/web-1", current, expect=200)
        await _until(lambda: f"svc-{ns}/web/tcp/http" not in proxy.applied[f"{ns}/web"].chains, 1.0, "reject")
        out = await loop.run_in_executor(None, _fetch, netlab, url, 2)
        for r in out:
            assert r.startswith("error:ConnectionRefusedError"), out
            assert float(r.rsplit(":", 1)[1]) < 0.5, out

        # The Service goes: its rules go.
        apiserver.json("DELETE", f"/api/v1/namespaces/{ns}/services/web", expect=200)
        await _until(lambda: f"{ns}/web" not in proxy.applied, 1.0, "service removal")
        listing = subprocess.run(["nft", "list", "table", "ip", ruleset.TABLE], capture_output=True, text=True)
        assert CLUSTER_IP not in listing.stdout and f"-{ns}/web/" not in listing.stdout
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()

    # --proxy-cleanup removes the table and exits 0.
    assert subprocess.run(["nft", "list", "table", "ip", ruleset.TABLE], capture_output=True).returncode == 0
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "--proxy-cleanup"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert subprocess.run(["nft", "list", "table", "ip", ruleset.TABLE], capture_output=True).returncode != 0
