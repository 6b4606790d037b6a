"""The node service proxy on real nftables, driven by a real orch-apiserver.

Services and EndpointSlices are written through the API as an administrator; a
:class:`agent.proxy.proxier.ServiceProxy` (the agent's own, with the agent's API
client) watches them and programs ``table ip orch-proxy``; requests come from a
client network namespace to two backends in namespaces of their own
(``tests/e2e/netlab.py``). Needs root and the ``nft`` command.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time

import pytest

from agent.client import ApiClient, load_orchconfig
from agent.proxy import ruleset
from agent.proxy.proxier import ServiceProxy
from apiserver_min.api import names
from apiserver_min.pki import cert_pem, key_pem, make_ca, new_key, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, create_namespace
from tests.components import free_port
from tests.e2e.netlab import BACKEND_PORT, NetLab
from tests.integration.test_agent_join import bootstrap_node

CLUSTER_IP = "10.111.77.10"
NODE = "node-a"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    """The module's API server, with bootstrap tokens on so the proxy can run as a node."""
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing (run tests/run.sh once to create .venv)")
    proc = ApiServerProcess(
        tmp_path_factory.mktemp("apiserver"), free_port(), extra_args=["--enable-bootstrap-token-auth"]
    )
    with proc:
        yield proc


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


async def test_service_proxy_end_to_end(apiserver, netlab: NetLab, tmp_path):
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

    # As the node itself (its client certificate from TLS bootstrap: the Node authorizer
    # decides), in protobuf, as the agent asks by default (--orch-api-content-type).
    node_config = await bootstrap_node(apiserver, tmp_path, NODE)
    client = ApiClient(load_orchconfig(node_config), qps=100, burst=100, content_type=names.MEDIA_PROTOBUF)
    proxy = ServiceProxy(
        client,
        NODE,
        cluster_cidr=f"{netlab.ip['a'].rsplit('.', 1)[0]}.0/24",
        min_sync_interval=0.02,
        check_period=0.3,
    )
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
        # Hairpin: pod a reaching itself through the service works only when masqueraded.
        seen = await loop.run_in_executor(None, netlab.fetch, "a", url, 3)
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

        # Someone removes the table: written again after a quiet check period.
        subprocess.run(["nft", "delete", "table", "ip", ruleset.TABLE], check=True)
        for _ in range(50):
            await asyncio.sleep(0.1)
            if (
                subprocess.run(
                    ["nft", "list", "chain", "ip", ruleset.TABLE, "services"], capture_output=True
                ).returncode
                == 0
            ):
                break
        else:
            raise AssertionError("the table was not written again")
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


# --- the API server's proxy sub-resources -------------------------------------------------


def _pod(ns: str, name: str, ip: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "web", "image": "busybox", "ports": [{"containerPort": BACKEND_PORT}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    }


def test_proxy_subresources_through_the_apiserver(apiserver, netlab: NetLab, kubectl):
    ns = "proxy-sub"
    create_namespace(apiserver, ns)
    a, b = netlab.ip["a"], netlab.ip["b"]
    for name, ip in (("pod-a", a), ("pod-b", b)):
        apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, name, ip), expect=201)
        apiserver.json("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", _pod(ns, name, ip), expect=200)
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": BACKEND_PORT}]},
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/services", svc, expect=201)
    base = f"/api/v1/namespaces/{ns}/services"
    slices = f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/{ns}/endpointslices"

    # No endpoints yet: 503.
    status, doc = apiserver.json("GET", f"{base}/web:80/proxy/")
    assert status == 503 and doc["message"] == 'no endpoints available for service "web"', doc

    sl = _slice(ns, [(a, NODE)])
    sl["endpoints"][0]["targetRef"] = {"kind": "Pod", "namespace": ns, "name": "pod-a"}
    # An endpoint whose pod does not have that IP is never used.
    sl["endpoints"].append({"addresses": [b], "targetRef": {"kind": "Pod", "namespace": ns, "name": "pod-a"}})
    apiserver.json("POST", slices, sl, expect=201)

    # kubectl get --raw, by port number and by port name.
    for ident in ("web:80", "web:http", "http:web:http"):
        out = kubectl("get", "--raw", f"{base}/{ident}/proxy/", check=True)
        assert out.stdout.strip() == "backend-a", (ident, out.stdout)
    status, _, body = apiserver.request("GET", f"{base}/web:80/proxy/index.html?x=1")
    assert status == 200 and body.strip() == b"backend-a"
    # Without the trailing slash: redirected to it.
    status, hdrs, _ = apiserver.request("GET", f"{base}/web:80/proxy?x=1")
    assert status == 301 and hdrs["location"] == f"{base}/web:80/proxy/?x=1"
    # Other methods reach the backend (http.server answers 501 to POST), the body streamed.
    status, _, _ = apiserver.request("POST", f"{base}/web:80/proxy/", b"hello", {"Content-Type": "text/plain"})
    assert status == 501
    # A port the service does not have, a bad name.
    status, doc = apiserver.json("GET", f"{base}/web:81/proxy/")
    assert status == 503 and "no service port 81" in doc["message"]
    status, doc = apiserver.json("GET", f"{base}/ftp:web:80/proxy/")
    assert status == 400 and doc["message"] == 'invalid service request "ftp:web:80"'
    # Upgrades are refused.
    status, doc = apiserver.json(
        "GET", f"{base}/web:80/proxy/", headers={"Connection": "Upgrade", "Upgrade": "websocket"}
    )
    assert status == 400 and "not supported" in doc["message"]

    # pods/proxy: the pod's first container port by default.
    out = kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/pod-b/proxy/", check=True)
    assert out.stdout.strip() == "backend-b"
    status, _, body = apiserver.request("GET", f"/api/v1/namespaces/{ns}/pods/pod-a:{BACKEND_PORT}/proxy/")
    assert status == 200 and body.strip() == b"backend-a"

    # nodes/proxy to a port other than the agent's: plain HTTP to the node's address.
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "proxy-node"}}
    apiserver.json("POST", "/api/v1/nodes", node, expect=201)
    node_status = dict(node, status={"addresses": [{"type": "InternalIP", "address": b}]})
    apiserver.json("PUT", "/api/v1/nodes/proxy-node/status", node_status, expect=200)
    out = kubectl("get", "--raw", f"/api/v1/nodes/proxy-node:{BACKEND_PORT}/proxy/", check=True)
    assert out.stdout.strip() == "backend-b"
    # A loopback node address is refused.
    node_status["status"]["addresses"][0]["address"] = "127.0.0.1"
    apiserver.json("PUT", "/api/v1/nodes/proxy-node/status", node_status, expect=200)
    status, doc = apiserver.json("GET", f"/api/v1/nodes/proxy-node:{BACKEND_PORT}/proxy/")
    assert status == 400 and doc["message"] == "address not allowed"
    apiserver.json("DELETE", "/api/v1/nodes/proxy-node", expect=200)


class _WhoAmI(http.server.BaseHTTPRequestHandler):
    """Answers with the common name of the client certificate and the path asked for."""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib handler's naming
        cert = self.connection.getpeercert() or {}
        cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"), "")
        body = f"{cn} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_node_proxy_reaches_the_agent_port_with_the_client_certificate(apiserver, netlab: NetLab, tmp_path):
    """A stand-in agent on the node's address (a local address of the test bridge) with a
    certificate from a CA of its own; it requires a client certificate from the cluster CA."""
    ca_cert, ca_key = make_ca("stand-in-agent-ca")
    key = new_key()
    address = netlab.gateway["a"]
    cert = sign_leaf(ca_cert, ca_key, key.public_key(), "stand-in-agent", server=True, ips=[address])
    (tmp_path / "tls.crt").write_bytes(cert_pem(cert))
    (tmp_path / "tls.key").write_bytes(key_pem(key))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(apiserver.ca_cert))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    httpd = http.server.ThreadingHTTPServer((address, 0), _WhoAmI)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "agent-node"}}
        apiserver.json("POST", "/api/v1/nodes", node, expect=201)
        node["status"] = {
            "addresses": [{"type": "InternalIP", "address": address}],
            "daemonEndpoints": {names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": port}},
        }
        apiserver.json("PUT", "/api/v1/nodes/agent-node/status", node, expect=200)
        for ident in ("agent-node", f"agent-node:{port}"):
            status, _, body = apiserver.request("GET", f"/api/v1/nodes/{ident}/proxy/healthz?verbose")
            assert status == 200, body
            assert body.decode() == f"{names.APISERVER_AGENT_CLIENT_USER} /healthz?verbose"
    finally:
        httpd.shutdown()
        httpd.server_close()
        apiserver.json("DELETE", "/api/v1/nodes/agent-node")
