"""TLS connections (handshakes) the node agent opens to the API server (not a test):

    .venv/bin/python tests/bench/bench_agent_connections.py [--nodes 5] [--pods-per-node 4]
        [--idle 60] [--baseline-tree /work/main] [--keep-log DIR]

Each TCP connection to ``orch-apiserver`` costs the server one TLS handshake (the
agent's client has no session resumption), and on HTTP/1.1 an agent needs a
connection per watch plus one per request in flight. The benchmark counts them on the
server's side: the whole run lives in a network namespace of its own (``unshare
--net``, root), so the namespace's TCP ``PassiveOpens`` counter is exactly the
connections the API server accepted. In that namespace it starts one
``orch-apiserver`` (SQLite) and then, one tree at a time, ``--nodes`` hollow nodes
(tests/bench/hollow.py: the real agent on the fake CRI runtime), and reports per node:

(a) connections opened from start until the node is Ready;
(b) connections opened per minute while idle (``--idle`` seconds: node status and
    lease every 10 s, the pod and Service watches);
(c) connections opened while a Deployment of ``--pods-per-node`` pods a node is
    created, runs and is deleted, and while it settles for another ``--idle`` / 2;
(d) connections held open at the end (``ss``) and the API server's CPU per node and
    minute over the idle window (for information: the first tree's window also holds
    the fresh server settling, so the same code measures about twice as much there);
(e) the API server's CPU per TLS handshake (a node's credentials, ``--handshakes``
    connections each making one request): full handshakes against ones resuming an
    earlier session, as the agent's client context offers it.

With ``--baseline-tree DIR`` the same phases run first with the hollow nodes (and the
agent code) of that checkout, against the same server, as the same-run baseline;
the benchmark's own admin requests go over one persistent connection, counted and
subtracted. Targets: (a) at most the node's watches plus 2 (one connection for
requests, one for a heartbeat beside it), (b) 0 per node and minute (every
connection kept alive); (e) is shown for information.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agent.client.config import load_orchconfig  # noqa: E402
from agent.client.rest import ResumingContext, _ssl_context  # noqa: E402
from tests.apiserver_fixtures import ApiServerProcess  # noqa: E402
from tests.bench.hollow import HOLLOW_IMAGE, issue_node_orchconfig  # noqa: E402
from tests.components import free_port  # noqa: E402

NS = "bench-conns"
WATCHES_PER_NODE = 2  # the node's pods and every Service (no pod here references an object)
HELD_TARGET_EXTRA = 2
IN_NETNS_ENV = "ORCH_BENCH_CONNS_NETNS"


def passive_opens() -> int:
    """TCP connections accepted in this network namespace so far."""
    with open("/proc/net/snmp") as f:
        lines = [line.split() for line in f if line.startswith("Tcp:")]
    header, values = lines[0], lines[1]
    return int(values[header.index("PassiveOpens")])


def established_to(port: int) -> int:
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( dport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    return len([line for line in out.splitlines() if line.strip()])


class Admin:
    """The benchmark's own requests, over one persistent HTTPS connection (blocking)."""

    def __init__(self, server: ApiServerProcess) -> None:
        conn = load_orchconfig(str(server.kubeconfig))
        ctx = ssl.create_default_context(cadata=conn.ca_data.decode())
        tmp = Path(tempfile.mkdtemp(prefix="orch-bench-admin-"))
        try:
            (tmp / "c.pem").write_bytes(conn.cert_data or b"")
            (tmp / "k.pem").write_bytes(conn.key_data or b"")
            ctx.load_cert_chain(str(tmp / "c.pem"), str(tmp / "k.pem"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.http = http.client.HTTPSConnection(server.host, server.port, context=ctx, timeout=60)
        self.opened = 0

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        if self.http.sock is None:
            self.opened += 1
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        self.http.request(method, path, body=data, headers=headers)
        resp = self.http.getresponse()
        raw = resp.read()
        if resp.status >= 400 and not (method == "POST" and resp.status == 409):
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
        return json.loads(raw) if raw else {}

    def ready_nodes(self, prefix: str) -> int:
        ready = 0
        for node in self.call("GET", "/api/v1/nodes")["items"]:
            if not node["metadata"]["name"].startswith(prefix):
                continue
            for cond in (node.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") == "True":
                    ready += 1
        return ready

    def pods(self, label: str) -> list[dict]:
        return self.call("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=bench%3D{label}")["items"]


def deployment(name: str, replicas: int, node_prefix: str) -> dict:
    labels = {"bench": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                    # Only this tree's nodes (the baseline's stay registered a while).
                    "nodeSelector": {"bench-tree": node_prefix.rstrip("-")},
                    "containers": [{"name": "main", "image": HOLLOW_IMAGE, "imagePullPolicy": "Never"}],
                },
            },
        },
    }


@dataclasses.dataclass
class TreeResult:
    label: str
    nodes: int
    start: float = 0.0  # connections per node until Ready
    idle_per_min: float = 0.0
    load: float = 0.0
    held: float = 0.0
    server_cpu_ms_per_node_min: float = 0.0
    start_s: float = 0.0
    load_s: float = 0.0


def wait(cond, timeout: float, what: str, poll: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done after {timeout:g} s")
        time.sleep(poll)


def run_tree(args, server: ApiServerProcess, admin: Admin, tree: Path, label: str, work: Path) -> TreeResult:
    prefix = f"{label}-"
    r = TreeResult(label, args.nodes)
    log = work / f"{label}.log"
    c0, a0 = passive_opens(), admin.opened
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(tree / "tests" / "bench" / "hollow.py"),
            "--data-dir",
            str(server.data_dir),
            "--server",
            server.url,
            "--nodes",
            str(args.nodes),
            "--prefix",
            prefix,
            "--work-dir",
            str(work / label),
            "--log-file",
            str(log),
            f"--agent-flag=--node-labels=bench-tree={label}",
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{label}: the hollow nodes exited during start (code {proc.wait()})")
        wait(lambda: admin.ready_nodes(prefix) >= args.nodes, 120, f"{label}: nodes Ready")
        r.start_s = time.monotonic() - t0
        c1, a1 = passive_opens(), admin.opened
        r.start = (c1 - c0 - (a1 - a0)) / args.nodes

        cpu0 = sum(psutil.Process(server.pid).cpu_times()[:2])
        time.sleep(args.idle)
        cpu1 = sum(psutil.Process(server.pid).cpu_times()[:2])
        c2, a2 = passive_opens(), admin.opened
        r.idle_per_min = (c2 - c1 - (a2 - a1)) / args.nodes / (args.idle / 60)
        r.server_cpu_ms_per_node_min = (cpu1 - cpu0) * 1000 / args.nodes / (args.idle / 60)

        t1 = time.monotonic()
        name = f"load-{label}"
        replicas = args.nodes * args.pods_per_node
        admin.call("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name, replicas, prefix))
        wait(
            lambda: sum(1 for p in admin.pods(name) if (p.get("status") or {}).get("phase") == "Running") >= replicas,
            180,
            f"{label}: {replicas} pods Running",
        )
        admin.call("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
        wait(lambda: not admin.pods(name), 180, f"{label}: pods gone")
        r.load_s = time.monotonic() - t1
        time.sleep(args.idle / 2)
        c3, a3 = passive_opens(), admin.opened
        r.load = (c3 - c2 - (a3 - a2)) / args.nodes
        r.held = (established_to(server.port) - (1 if admin.http.sock is not None else 0)) / args.nodes
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if args.keep_log and log.exists():
            Path(args.keep_log).mkdir(parents=True, exist_ok=True)
            shutil.copy(log, Path(args.keep_log) / log.name)
    for i in range(args.nodes):
        admin.call("DELETE", f"/api/v1/nodes/{prefix}{i}")
    return r


def handshake_cpu(server: ApiServerProcess, orchconfig: Path, count: int) -> tuple[float, float, float]:
    """Server CPU ms per connection (one GET each): full handshakes, resumed ones, and
    the share of the latter that did resume."""
    conn = load_orchconfig(str(orchconfig))
    proc = psutil.Process(server.pid)

    def run(resume: bool) -> tuple[float, int]:
        ctx = _ssl_context(conn)
        assert isinstance(ctx, ResumingContext)
        session = None
        reused = 0
        c0 = sum(proc.cpu_times()[:2])
        for _ in range(count):
            sock = socket.create_connection((server.host, server.port))
            tls = ctx.wrap_socket(sock, server_hostname=server.host, session=session if resume else None)
            tls.sendall(b"GET /api/v1/nodes/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while tls.recv(65536):
                pass
            reused += tls.session_reused
            session = session or tls.session
            tls.close()
        time.sleep(0.2)
        return (sum(proc.cpu_times()[:2]) - c0) * 1000 / count, reused

    full, _ = run(False)
    resumed, reused = run(True)
    return full, resumed, reused / count


def report(results: list[TreeResult], idle: float, handshakes: tuple[float, float, float] | None) -> None:
    base = results[0] if len(results) > 1 else None
    cur = results[-1]
    rows = [
        ("(a) connections per node, start to Ready", "start", float(WATCHES_PER_NODE + HELD_TARGET_EXTRA)),
        (f"(b) connections per node and minute, idle ({idle:g} s)", "idle_per_min", 0.0),
        ("(c) connections per node, pods created/run/deleted", "load", None),
        ("(d) connections held per node at the end", "held", None),
        ("(d) server CPU ms per node and idle minute (see above)", "server_cpu_ms_per_node_min", None),
    ]
    print(f"\n{'figure':56s} {'now':>8s} {'baseline':>9s}  target")
    for label, attr, target in rows:
        now = getattr(cur, attr)
        b = f"{getattr(base, attr):9.2f}" if base else f"{'-':>9s}"
        verdict = ""
        if target is not None:
            verdict = f"<= {target:g}  {'ok' if now <= target + 1e-9 else 'MISS'}"
        print(f"{label:56s} {now:8.2f} {b}  {verdict}")
    if handshakes is not None:
        full, resumed, share = handshakes
        print(f"{'(e) server CPU ms per connection, full TLS handshake':56s} {full:8.2f}")
        print(f"{'(e) ... resuming a session (' + f'{share:.0%} resumed)':56s} {resumed:8.2f}")
    for r in results:
        print(f"  {r.label}: {r.nodes} nodes Ready in {r.start_s:.1f} s; load phase {r.load_s:.1f} s")


def in_netns(args) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="orch-bench-conns-"))
    server = ApiServerProcess(work / "srv", free_port())
    results = []
    handshakes = None
    try:
        server.start(timeout=60)
        admin = Admin(server)
        admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        trees = [(Path(args.baseline_tree), "base")] if args.baseline_tree else []
        trees.append((REPO, "now"))
        for tree, label in trees:
            results.append(run_tree(args, server, admin, tree, label, work))
            print(f"{label}: {dataclasses.asdict(results[-1])}", flush=True)
        if args.handshakes:
            node_config = issue_node_orchconfig(server.data_dir, server.url, "handshake-node", work / "hs.orchconfig")
            handshakes = handshake_cpu(server, node_config, args.handshakes)
    finally:
        if args.keep_log and server.log_path.exists():
            Path(args.keep_log).mkdir(parents=True, exist_ok=True)
            shutil.copy(server.log_path, Path(args.keep_log) / "apiserver.log")
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.idle, handshakes)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--pods-per-node", type=int, default=4)
    ap.add_argument("--idle", type=float, default=60.0, help="idle window in seconds (60)")
    ap.add_argument("--handshakes", type=int, default=200, help="connections per kind in (e); 0: skip (200)")
    ap.add_argument("--baseline-tree", default="", help="a checkout whose agent runs first as the baseline")
    ap.add_argument("--keep-log", default="", help="copy the server's and the hollow nodes' logs here")
    args = ap.parse_args(argv)
    if os.environ.get(IN_NETNS_ENV) != "1":
        if os.geteuid() != 0 or not shutil.which("unshare"):
            print("bench_agent_connections: needs root and unshare(1) for a private network namespace")
            return 2
        env = {**os.environ, IN_NETNS_ENV: "1"}
        argv = sys.argv[1:] if argv is None else argv
        return subprocess.run(["unshare", "--net", sys.executable, __file__, *argv], env=env).returncode
    return in_netns(args)


if __name__ == "__main__":
    sys.exit(main())
