"""The scheduler, the node lifecycle controller and the pods/log proxy in a real
orch-apiserver: Nodes and Leases are written as an agent would, heartbeats come from
a thread, and a small local HTTPS server stands in for an agent's /containerLogs."""

from __future__ import annotations

import datetime as _dt
import http.server
import json
import re
import ssl
import threading
import time
import urllib.parse
import uuid

import pytest

from apiserver_min.api import names
from apiserver_min.pki import Pki, cert_pem, key_pem, make_ca, new_key, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess
from tests.components import free_port
from tests.helpers import wait_for

GRACE = 2  # --node-monitor-grace-period, seconds
PERIOD = 1  # --node-monitor-period
LEASES = f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{names.NS_NODE_LEASE}/leases"
MERGE = {"Content-Type": names.MEDIA_MERGE_PATCH}


def now_micro() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_seconds() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Heartbeats:
    """Renews the Leases of the nodes in ``alive`` every half second, as agents would."""

    def __init__(self, server: ApiServerProcess):
        self.server = server
        self.alive: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def renew(self, name: str) -> None:
        self.server.json(
            "PUT",
            f"{LEASES}/{name}",
            {
                "apiVersion": f"{names.COORDINATION_GROUP}/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": names.NS_NODE_LEASE},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()},
            },
            expect=(200, 201),
        )

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for name in list(self.alive):
                try:
                    self.renew(name)
                except Exception:  # noqa: BLE001 - the next round tries again
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(
        tmp_path_factory.mktemp("sched"),
        free_port(),
        extra_args=[f"--node-monitor-period={PERIOD}s", f"--node-monitor-grace-period={GRACE}s"],
    )
    with s:
        yield s


@pytest.fixture(scope="module")
def beats(server):
    with Heartbeats(server) as h:
        yield h


@pytest.fixture
def ns(server):
    name = f"sch-{uuid.uuid4().hex[:6]}"
    server.json("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=201)
    return name


def ready_condition(status: str = "True") -> dict:
    ts = now_seconds()
    return {
        "type": "Ready",
        "status": status,
        "reason": names.NODE_REASON_READY,
        "message": "ready",
        "lastHeartbeatTime": ts,
        "lastTransitionTime": ts,
    }


def make_node(server, beats, name, *, cpu="4", memory="8Gi", labels=None, address="127.0.0.1", port=None):
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "10Gi"}
    status = {
        "capacity": dict(alloc),
        "allocatable": alloc,
        "conditions": [ready_condition()],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
    }
    if port is not None:
        status["daemonEndpoints"] = {names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": port}}
    server.json(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "status": status,
        },
        expect=201,
    )
    beats.renew(name)
    beats.alive.add(name)


def make_pod(
    server,
    ns,
    name,
    *,
    cpu=None,
    selector=None,
    node=None,
    tolerations=None,
    scheduler=None,
    containers=("c",),
    annotations=None,
):
    spec = {
        "containers": [
            {"name": c, "image": "busybox", "resources": {"requests": {"cpu": cpu}} if cpu else {}} for c in containers
        ]
    }
    if selector:
        spec["nodeSelector"] = selector
    if node:
        spec["nodeName"] = node
    if tolerations:
        spec["tolerations"] = tolerations
    if scheduler:
        spec["schedulerName"] = scheduler
    md = {"name": name}
    if annotations:
        md["annotations"] = annotations
    _, doc = server.json("POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": md, "spec": spec}, expect=201)
    return doc


def get_pod(server, ns, name):
    status, doc = server.json("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return doc if status == 200 else None


def condition(obj, ctype):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def events_for(server, ns, name, reason):
    sel = urllib.parse.quote(f"involvedObject.name={name},reason={reason}")
    _, doc = server.json("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={sel}", expect=200)
    return doc["items"]


# --- scheduling ---------------------------------------------------------------------------


def test_pods_are_bound_to_fitting_nodes_with_events(server, beats, ns):
    group = {"group": ns}
    make_node(server, beats, f"{ns}-big", cpu="4", labels=group)
    make_node(server, beats, f"{ns}-small", cpu="1", labels=group)

    make_pod(server, ns, "two-cpu", cpu="2", selector=group)
    pod = wait_for(lambda: (p := get_pod(server, ns, "two-cpu"))["spec"].get("nodeName") and p, 10, "binding")
    assert pod["spec"]["nodeName"] == f"{ns}-big"
    assert condition(pod, "PodScheduled")["status"] == "True"
    [ev] = wait_for(lambda: events_for(server, ns, "two-cpu", "Scheduled"), 5, "Scheduled event")
    assert ev["type"] == "Normal" and ev["source"]["component"] == "default-scheduler"
    assert ev["message"] == f"Successfully assigned {ns}/two-cpu to {ns}-big"
    assert ev["involvedObject"]["uid"] == pod["metadata"]["uid"]

    # 2 of the big node's 4 cpus are taken now: 3 fit nowhere.
    make_pod(server, ns, "three-cpu", cpu="3", selector=group)
    pod = wait_for(
        lambda: (p := get_pod(server, ns, "three-cpu")) and condition(p, "PodScheduled") and p, 10, "PodScheduled=False"
    )
    cond = condition(pod, "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert re.match(
        r"0/\d+ nodes are available: (.*, )?2 Insufficient cpu(, .*)?\. preemption: 0/\d+ nodes are "
        r"available: .*2 No preemption victims found for incoming pod.*\.\.$",
        cond["message"],
    ), cond
    [ev] = wait_for(lambda: events_for(server, ns, "three-cpu", "FailedScheduling"), 5, "FailedScheduling event")
    assert ev["type"] == "Warning" and ev["message"] == cond["message"]
    assert not pod["spec"].get("nodeName")

    # Freeing the cpus schedules it without waiting for the periodic retry.
    server.json("DELETE", f"/api/v1/namespaces/{ns}/pods/two-cpu?gracePeriodSeconds=0", expect=200)
    pod = wait_for(lambda: (p := get_pod(server, ns, "three-cpu"))["spec"].get("nodeName") and p, 10, "retry")
    assert pod["spec"]["nodeName"] == f"{ns}-big"
    assert condition(pod, "PodScheduled")["status"] == "True"


def test_node_selector_retry_and_other_schedulers(server, beats, ns):
    make_node(server, beats, f"{ns}-n", labels={"group": ns})
    make_pod(server, ns, "picky", selector={"group": ns, "disk": "ssd"})
    make_pod(server, ns, "not-mine", scheduler="other-scheduler", selector={"group": ns})
    pod = wait_for(
        lambda: (p := get_pod(server, ns, "picky")) and condition(p, "PodScheduled") and p, 10, "unschedulable"
    )
    assert "node(s) didn't match Pod's node affinity/selector" in condition(pod, "PodScheduled")["message"]
    server.json("PATCH", f"/api/v1/nodes/{ns}-n", {"metadata": {"labels": {"disk": "ssd"}}}, headers=MERGE, expect=200)
    pod = wait_for(lambda: (p := get_pod(server, ns, "picky"))["spec"].get("nodeName") and p, 10, "bound")
    assert pod["spec"]["nodeName"] == f"{ns}-n"
    other = get_pod(server, ns, "not-mine")
    assert not other["spec"].get("nodeName") and condition(other, "PodScheduled") is None
    assert events_for(server, ns, "not-mine", "FailedScheduling") == []


# --- node lifecycle -----------------------------------------------------------------------


def test_silent_node_goes_unknown_is_tainted_evicts_and_recovers(server, beats, ns):
    node = f"{ns}-flaky"
    make_node(server, beats, node, labels={"group": ns})
    quick = [{"key": names.TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]
    make_pod(server, ns, "quick", node=node, tolerations=quick)
    make_pod(server, ns, "patient", node=node)  # DefaultTolerationSeconds: 300 s
    make_pod(
        server,
        ns,
        "mirror",
        node=node,
        annotations={names.ANNOTATION_CONFIG_MIRROR: "abc"},
        tolerations=[{**quick[0], "tolerationSeconds": 0}],
    )
    ts = now_seconds()
    server.json(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/patient/status",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts}]}},
        headers=MERGE,
        expect=200,
    )
    _, patient = server.json("GET", f"/api/v1/namespaces/{ns}/pods/patient", expect=200)
    assert any(t.get("tolerationSeconds") == 300 for t in patient["spec"]["tolerations"])

    # Healthy: no controller taints after a few checks.
    time.sleep(GRACE + PERIOD)
    _, n = server.json("GET", f"/api/v1/nodes/{node}", expect=200)
    assert not (n.get("spec") or {}).get("taints") and condition(n, "Ready")["status"] == "True"

    beats.alive.discard(node)
    stopped = time.monotonic()

    def unknown():
        _, n = server.json("GET", f"/api/v1/nodes/{node}", expect=200)
        keys = {(t["key"], t["effect"]) for t in (n.get("spec") or {}).get("taints") or []}
        if (
            condition(n, "Ready")["status"] == "Unknown"
            and {(names.TAINT_UNREACHABLE, "NoSchedule"), (names.TAINT_UNREACHABLE, "NoExecute")} <= keys
        ):
            return n
        return None

    n = wait_for(unknown, GRACE + PERIOD + 5, "Ready Unknown and unreachable taints")
    assert time.monotonic() - stopped >= GRACE - 0.6  # not before the grace period (lease renewed every 0.5 s)
    ready = condition(n, "Ready")
    assert ready["reason"] == "NodeStatusUnknown" and ready["message"] == "Node agent stopped posting node status."
    assert condition(n, "MemoryPressure")["status"] == "Unknown"
    assert next(t for t in n["spec"]["taints"] if t["effect"] == "NoExecute").get("timeAdded")

    # tolerationSeconds 1: evicted (graceful deletion starts) about a second later, with the condition.
    def evicted():
        p = get_pod(server, ns, "quick")
        return p is None or bool(p["metadata"].get("deletionTimestamp")) and p

    p = wait_for(evicted, 6, "eviction of the pod tolerating 1 s")
    if p:
        assert condition(p, "DisruptionTarget")["reason"] == "DeletionByTaintManager"
    assert wait_for(lambda: events_for(server, ns, "quick", "TaintManagerEviction"), 5, "eviction event")

    # The 300 s pod stays, its Ready condition turns False; the mirror pod is never evicted.
    patient = wait_for(
        lambda: (p := get_pod(server, ns, "patient")) and condition(p, "Ready")["status"] == "False" and p,
        5,
        "pod Ready=False",
    )
    assert not patient["metadata"].get("deletionTimestamp")
    assert events_for(server, ns, "patient", "NodeNotReady")[0]["message"] == "Node is not ready"
    mirror = get_pod(server, ns, "mirror")
    assert mirror is not None and not mirror["metadata"].get("deletionTimestamp")

    # The agent returns: Lease renewed and Ready posted again; the taints go.
    beats.renew(node)
    beats.alive.add(node)
    server.json(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"conditions": [ready_condition()]}},
        headers=MERGE,
        expect=200,
    )

    def recovered():
        _, n = server.json("GET", f"/api/v1/nodes/{node}", expect=200)
        return not (n.get("spec") or {}).get("taints") and condition(n, "Ready")["status"] == "True" and n

    wait_for(recovered, 5, "taints removed")
    time.sleep(GRACE + PERIOD)  # and it stays healthy while the lease is renewed
    assert recovered()
    assert not get_pod(server, ns, "patient")["metadata"].get("deletionTimestamp")


# --- pods/log -------------------------------------------------------------------------------


class FakeAgent:
    """An HTTPS /containerLogs endpoint that requires a client certificate from the cluster CA."""

    def __init__(self, ca_file: str, cert: bytes, key: bytes, tmp):
        self.requests: list[tuple[str, dict, str]] = []
        self.release = threading.Event()
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                peer = dict(x[0] for x in self.connection.getpeercert()["subject"])
                agent.requests.append((url.path, query, peer.get("commonName", "")))
                container = url.path.rsplit("/", 1)[-1]
                if container == "c2":
                    self._send(400, b'container "c2" in pod "multi" is waiting to start: ContainerCreating')
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"line one\n")
                self.wfile.flush()
                if query.get("follow") == "true":
                    agent.release.wait(10)
                    self.wfile.write(b"line two\n")

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        cert_path, key_path = tmp / f"agent-{uuid.uuid4().hex[:6]}.crt", tmp / "agent.key"
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert_path), str(key_path))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=ca_file)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def serving_cert(server, *, cluster_ca: bool, ip: str = "127.0.0.1") -> tuple[bytes, bytes]:
    ca_cert, ca_key = Pki(str(server.data_dir)).load_ca() if cluster_ca else make_ca("agent-self-signed-ca")
    key = new_key()
    cert = sign_leaf(ca_cert, ca_key, key.public_key(), "agent-serving", server=True, ips=[ip])
    return cert_pem(cert), key_pem(key)


def logs(server, ns, pod, query=""):
    return server.request("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log{query}")


def test_pod_logs_are_proxied_to_the_agent(server, beats, ns, tmp_path):
    agent = FakeAgent(str(server.ca_cert), *serving_cert(server, cluster_ca=False), tmp_path)
    try:
        node = f"{ns}-logs"
        make_node(server, beats, node, labels={"group": ns}, port=agent.port)
        make_pod(server, ns, "multi", node=node, containers=("c1", "c2"))
        make_pod(server, ns, "single", node=node)
        make_pod(server, ns, "pending", scheduler="nobody")

        status, _, body = logs(server, ns, "pending")
        assert (status, body) == (200, b"")  # not on a node: an empty log, as upstream

        status, _, body = logs(server, ns, "multi")
        doc = json.loads(body)
        assert status == 400 and doc["message"] == (
            "a container name must be specified for pod multi, choose one of: [c1 c2]"
        )

        status, hdrs, body = logs(server, ns, "multi", "?container=c1&tailLines=2&timestamps=true")
        assert status == 200 and body == b"line one\n" and hdrs["content-type"].startswith("text/plain")
        path, query, cn = agent.requests[-1]
        assert path == f"/containerLogs/{ns}/multi/c1"
        assert query == {"tailLines": "2", "timestamps": "true"}
        assert cn == names.APISERVER_AGENT_CLIENT_USER

        status, _, body = logs(server, ns, "single", "?sinceSeconds=10&limitBytes=100")
        assert status == 200 and agent.requests[-1][0] == f"/containerLogs/{ns}/single/c"
        assert agent.requests[-1][1] == {"sinceSeconds": "10", "limitBytes": "100"}

        status, _, body = logs(server, ns, "multi", "?container=c2")
        doc = json.loads(body)
        assert status == 400 and doc["kind"] == "Status" and doc["reason"] == "BadRequest"
        assert doc["message"] == 'container "c2" in pod "multi" is waiting to start: ContainerCreating'

        status, _, body = logs(server, ns, "single", "?tailLines=-1")
        assert status == 422 and json.loads(body)["reason"] == "Invalid"

        # follow: the first line arrives while the agent still holds the stream open.
        conn = server.connection(timeout=10)
        try:
            conn.request("GET", f"/api/v1/namespaces/{ns}/pods/single/log?follow=true")
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.readline() == b"line one\n"
            agent.release.set()
            assert resp.read() == b"line two\n"
        finally:
            conn.close()
        assert agent.requests[-1][1] == {"follow": "true"}
    finally:
        agent.close()


def test_pod_logs_verify_agents_with_cluster_ca_certificates(server, beats, ns, tmp_path):
    good = FakeAgent(str(server.ca_cert), *serving_cert(server, cluster_ca=True), tmp_path)
    wrong = FakeAgent(str(server.ca_cert), *serving_cert(server, cluster_ca=True, ip="10.9.9.9"), tmp_path)
    try:
        for agent, label in ((good, "good"), (wrong, "wrong")):
            make_node(server, beats, f"{ns}-{label}", labels={"group": ns}, port=agent.port)
            make_pod(server, ns, label, node=f"{ns}-{label}")
        status, _, body = logs(server, ns, "good")
        assert (status, body) == (200, b"line one\n")
        status, _, body = logs(server, ns, "wrong")
        doc = json.loads(body)
        assert status == 500 and doc["kind"] == "Status" and "IP address mismatch" in doc["message"], doc
        assert not wrong.requests  # the request never reached an agent whose certificate did not match
    finally:
        good.close()
        wrong.close()

    status, _, body = logs(server, ns, "good")  # agent gone: a 500 naming the URL
    assert status == 500 and "containerLogs" in json.loads(body)["message"]
