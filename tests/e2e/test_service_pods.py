"""Services reaching real pods: the orch-agent's own service proxy (``--proxy-mode=nftables``)
on the e2e harness's one-node cluster (orch-apiserver, containerd, the CNI bridge), two
busybox ``httpd`` backends of a Deployment and a client pod.

Acceptance of the node service proxy: from the node, ``clusterIP:port`` and
``127.0.0.1:nodePort`` answer from a backend pod; so does ``clusterIP:port`` from another
pod (``kubectl exec ... wget``); over 20 requests both backends answer; ``ClientIP``
affinity pins one. Then ``--proxy-cleanup`` removes the table and puts back
``route_localnet``. Also: stale UDP conntrack entries deleted over netlink.

Network safety: the test owns the service range (the API server's
``--service-cluster-ip-range``) and routes it ``unreachable`` before anything starts,
so that without a rule no packet for it leaves the machine. The node's own connections
consult the route before the output hook translates them, and an ``unreachable`` route
fails them at ``connect()``; so the one cluster IP the node dials also gets a /32 route
into a bridge without ports (a sink: a packet sent there is dropped), and nothing else.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pyroute2
import pytest

from agent.proxy import ruleset
from agent.proxy.conntrack import ConntrackCleaner, Flow
from agent.proxy.localnet import ROUTE_LOCALNET, STATE_FILE
from tests.apiserver_fixtures import ApiServerProcess
from tests.components import REPO_ROOT, free_port
from tests.e2e.harness import Cluster, new_cgroup_root

SERVICE_RANGE = "10.113.18.0/24"
CLUSTER_IP = "10.113.18.80"
POD_CIDR = "10.88.0.0/16"  # the CNI bridge's (packaging/cni/10-orch-bridge.conflist)
BACKEND_PORT = 8080
SYSCTL = f"/proc/sys/{ROUTE_LOCALNET}"
BEFORE: dict[str, str] = {}  # route_localnet before the agent started

# Each backend answers with its pod name (the pod's hostname).
HTTPD = f"mkdir -p /www && hostname > /www/index.html && exec httpd -f -p {BACKEND_PORT} -h /www"


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=check, timeout=20)


@pytest.fixture(scope="module")
def service_net():
    """The unreachable route for the test's service range, and the sink for CLUSTER_IP."""
    if os.geteuid() != 0:
        pytest.skip("the service e2e test needs root")
    if shutil.which("nft") is None:
        pytest.skip("the service e2e test needs nft (apt-get install nftables)")
    if SERVICE_RANGE.rsplit(".", 1)[0] + "." in _ip("-4", "route", "show").stdout:
        pytest.skip(f"{SERVICE_RANGE} is already routed on this machine; not touching it")
    sink = f"osvc{os.getpid() % 100000}"
    _ip("route", "add", "unreachable", SERVICE_RANGE)
    try:
        _ip("link", "add", sink, "type", "bridge")
        _ip("link", "set", sink, "up")
        _ip("route", "add", f"{CLUSTER_IP}/32", "dev", sink)
        yield sink
    finally:
        _ip("link", "del", sink, check=False)  # takes its route along
        _ip("route", "del", "unreachable", SERVICE_RANGE, check=False)


@pytest.fixture(scope="module")
def cluster(service_net, containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("svc-pods")
    (work / "manifests").mkdir()
    with open(SYSCTL) as f:
        BEFORE["route_localnet"] = f.read().strip()
    api_args = ["--enable-bootstrap-token-auth", f"--service-cluster-ip-range={SERVICE_RANGE}"]
    with ApiServerProcess(str(work / "api"), free_port(), extra_args=api_args) as api:
        c = Cluster(work, api, containerd, new_cgroup_root("orch-svc"))
        argv = [a for a in c.agent_argv(c.token()) if a != "--proxy-mode=none"]
        c.start_agent(argv + ["--proxy-mode=nftables", f"--cluster-cidr={POD_CIDR}"])
        try:
            c.wait(lambda: c.node_ready() == "True", 30, "node Ready")
            yield c
        finally:
            if c.agent is not None and c.agent.poll() is None:
                _delete_pods(c)
            c.stop_agent()
            c.cleanup()
            # Whatever happened above: no table and the sysctl as it was.
            if (work / "root" / STATE_FILE).exists():
                _proxy_cleanup(c)
            subprocess.run(["nft", "-f", "-"], input=ruleset.delete_script().encode(), check=False)


def _delete_pods(c: Cluster) -> None:
    # httpd and sleep as PID 1 ignore SIGTERM: a short grace period.
    c.kubectl("delete", "deployment", "web", "--cascade=orphan", "--ignore-not-found", check=False)
    c.kubectl("delete", "replicasets", "-l", "app=web", "--cascade=orphan", check=False)
    c.kubectl("delete", "pods", "--all", "--grace-period=1", "--wait=false", check=False)
    c.wait(lambda: not (c.get("pods") or {}).get("items"), 60, "pods gone")


def _proxy_cleanup(c: Cluster) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "--proxy-cleanup", f"--root-dir={c.work}/root"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _sysctl() -> str:
    with open(SYSCTL) as f:
        return f.read().strip()


# Never through an HTTP proxy from the environment: straight to the service address.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, n: int, timeout: float = 2.0) -> list[str]:
    """``n`` GETs from the node, each on a new connection: bodies, or ``error:...``."""
    out = []
    for _ in range(n):
        try:
            with DIRECT.open(url, timeout=timeout) as r:
                out.append(r.read().decode().strip())
        except OSError as exc:
            out.append(f"error:{exc}")
    return out


def _from_pod(c: Cluster, url: str, n: int) -> list[str]:
    # (This busybox's wget crashes with -T; the kubectl timeout bounds the loop instead.)
    script = f"i=0; while [ $i -lt {n} ]; do wget -q -O- {url} || echo error; i=$((i+1)); done"
    return c.kubectl("exec", "client", "--", "sh", "-c", script, timeout=60).stdout.split()


def _table() -> str:
    return subprocess.run(["nft", "list", "table", "ip", ruleset.TABLE], capture_output=True, text=True).stdout


def test_services_reach_real_pods_through_the_agents_proxy(cluster: Cluster):
    c = cluster
    started = time.monotonic()
    c.kubectl(
        "create", "deployment", "web", "--image=orch.local/busybox:1", "--replicas=2", "--port=8080",
        "--", "sh", "-c", HTTPD,
    )  # fmt: skip
    c.kubectl("run", "client", "--image=orch.local/busybox:1", "--restart=Never", "--", "sleep", "3600")
    c.kubectl(
        "expose", "deployment", "web", "--type=NodePort", "--port=80", f"--target-port={BACKEND_PORT}",
        f"--cluster-ip={CLUSTER_IP}",
    )  # fmt: skip
    node_port = c.get("service", "web")["spec"]["ports"][0]["nodePort"]

    def backends() -> set[str]:
        pods = (c.get("pods", "-l", "app=web") or {}).get("items", [])
        ready = {
            p["metadata"]["name"]
            for p in pods
            if any(x["type"] == "Ready" and x["status"] == "True" for x in p["status"].get("conditions", []))
        }
        return ready if len(ready) == 2 else set()

    pods = c.wait(backends, 60, "two ready backends")
    c.wait(lambda: c.get("pod", "client")["status"].get("phase") == "Running", 60, "the client pod")

    # The proxy programmed both endpoints and the node port (and set route_localnet).
    def programmed() -> bool:
        table = _table()
        return table.count("dnat to 10.88.") >= 2 and f"tcp . {node_port}" in table and _sysctl() == "1"

    c.wait(programmed, 10, "the service's rules")

    # From the node: the cluster IP, and the node port on 127.0.0.1; both backends over 20.
    got = _get(f"http://{CLUSTER_IP}/", 20)
    assert set(got) == pods, got
    got = _get(f"http://127.0.0.1:{node_port}/", 20)
    assert set(got) == pods, got

    # From another pod: the cluster IP.
    got = _from_pod(c, f"http://{CLUSTER_IP}/", 20)
    assert set(got) == pods, got

    # ClientIP affinity pins one backend per client (the node's address, 127.0.0.1, the pod).
    c.kubectl("patch", "service", "web", "-p", '{"spec":{"sessionAffinity":"ClientIP"}}')
    c.wait(lambda: "aff-" in _table(), 10, "affinity rules")
    for got in (
        _get(f"http://{CLUSTER_IP}/", 10),
        _get(f"http://127.0.0.1:{node_port}/", 10),
        _from_pod(c, f"http://{CLUSTER_IP}/", 10),
    ):
        assert len(set(got)) == 1 and got[0] in pods, got
    print(f"service e2e: from the pods' creation to the last answer {time.monotonic() - started:.1f} s")

    # --proxy-cleanup after the agent stops: the table goes, the sysctl is put back.
    _delete_pods(c)
    c.stop_agent()
    done = _proxy_cleanup(c)
    assert done.returncode == 0, done.stderr
    assert not _table()
    assert _sysctl() == BEFORE["route_localnet"]
    assert not (c.work / "root" / STATE_FILE).exists()


async def test_stale_udp_conntrack_entries_are_deleted_over_netlink(service_net):
    """Entries written through netlink as the kernel makes them for a translated UDP flow
    (no packet is sent): the cleaner deletes exactly those of the stale flows."""
    tup = pyroute2.conntrack.NFCTAttrTuple
    udp = socket.IPPROTO_UDP
    ct = pyroute2.AsyncConntrack()
    ep_a, ep_b, client = "10.113.18.201", "10.113.18.202", "10.113.18.200"

    async def add(sport: int, endpoint: str, dport: int = 53) -> None:
        orig = tup(saddr=client, daddr=CLUSTER_IP, proto=udp, sport=sport, dport=dport)
        reply = tup(saddr=endpoint, daddr=client, proto=udp, sport=5353, dport=sport)
        await ct.entry("add", timeout=60, tuple_orig=orig, tuple_reply=reply)

    async def left() -> list:
        entries = [e async for e in await ct.dump_entries(tuple_orig=tup(proto=udp, daddr=CLUSTER_IP))]
        return sorted((e.tuple_orig.sport, e.tuple_reply.saddr) for e in entries)

    try:
        await add(40001, ep_a)
        await add(40002, ep_b)
        await add(40003, ep_a, dport=54)  # another port of the same address: not stale
        cleaner = ConntrackCleaner()
        assert await cleaner.delete({Flow(CLUSTER_IP, 53, ep_a)}) == 1
        assert await left() == [(40002, ep_b), (40003, ep_a)]
        assert await cleaner.delete({Flow(CLUSTER_IP, 53)}) == 1
        assert await left() == [(40003, ep_a)]
    finally:
        for e in [e async for e in await ct.dump_entries(tuple_orig=tup(proto=udp, daddr=CLUSTER_IP))]:
            await ct.delete(e)
        ct.close()
