"""A one-node cluster's figures (not a test):

    .venv/bin/python tests/bench/bench_cluster.py [--quick] [--pods N] [--idle S] [--agent-v N]
                                                  [--keep-log DIR]

Brings up what the join e2e test does: ``orch-apiserver`` on SQLite (a temporary
data dir, ``--enable-bootstrap-token-auth``), a private containerd with the test
images (tests/components.py), a private cgroup root, and one ``orch-agent``
started only with ``join`` and a fresh bootstrap token (TLS bootstrap, CSR
auto-approved and signed). It waits for the node to be Ready, then measures:

(a) pod start latency, the upstream SLO definition: a pod (one
    ``orch.local/busybox:1`` container running ``sleep``) created through the
    API without ``nodeName`` (so the scheduler binds it) until a watch opened
    beforehand delivers it with phase Running, for N pods one at a time; in the
    same run, alternately with them, N static pods (manifest written atomically
    until the watch delivers their mirror pod Running). Both kinds are also
    timed on the runtime's clock (the container's ``started_at`` from CRI minus
    the create/write time), which leaves out the status round trip.
    Target: API pods p99 <= 2 s (upstream's SLO: 5 s);
(b) the agent's RSS with the N API pods running in cluster mode (the static
    pods removed first). Target <= 100 MB;
(c) the API requests the agent sends while idle with those N pods, over
    ``--idle`` seconds: the server's ``apiserver_request_total`` counters
    (``/metrics``) before and after the window, by verb and resource. The
    in-process controllers do not pass through HTTP and the benchmark sends
    nothing counted meanwhile (its watch is closed, ``/metrics`` is not a
    resource request), so the difference is the agent's. Target: <= 1 request/s
    besides lease renewals. The agent's CPU over the window is shown for context.

Everything is removed at the end (API pods deleted, manifests removed, agent,
server and containerd stopped by PID, the cgroup root removed).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import names
from cri import api_pb2 as pb
from cri.client import CriClient
from tests.apiserver_fixtures import ApiServerProcess
from tests.bench.bench_static_pods import make_cgroup_root, remove_cgroup_root
from tests.components import Containerd, _unmount_all_under, free_port, image_builder

BUSYBOX = "orch.local/busybox:1"
NODE = "bench-node"
NS = "default"
P99_TARGET_S = 2.0
RSS_TARGET_MB = 100.0
IDLE_RPS_TARGET = 1.0
MANAGED = {names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE}
METRIC_RE = re.compile(r"^apiserver_request_total\{(.*)\} (\d+(?:\.\d+)?)$")
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def pod_manifest(name: str, *, static: bool) -> dict:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "sleep", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
    }
    md: dict = {"name": name}
    if not static:
        md["namespace"] = NS
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


# --- the watch that decides "Running" --------------------------------------------------------------


class RunningWatch(threading.Thread):
    """All pods, all namespaces: per pod name the first time it was delivered with
    phase Running (perf_counter of this process)."""

    def __init__(self, api: ApiServerProcess):
        super().__init__(daemon=True, name="running-watch")
        self.running: dict[str, float] = {}
        self.cond = threading.Condition()
        status, doc = api.json("GET", "/api/v1/pods")
        if status != 200:
            raise RuntimeError(f"list pods: {status} {doc}")
        rv = doc["metadata"]["resourceVersion"]
        self.stream = api.watch(f"/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true", timeout=3600)
        if self.stream.status != 200:
            raise RuntimeError(f"watch pods: {self.stream.status}")
        self.closed = False

    def run(self) -> None:
        while True:
            try:
                ev = self.stream.next()
            except Exception:  # noqa: BLE001 - closed under the reader (close()) or the server went
                break
            if ev is None:
                break
            now = time.perf_counter()
            obj = ev.get("object") or {}
            if ev.get("type") in ("ADDED", "MODIFIED") and (obj.get("status") or {}).get("phase") == "Running":
                with self.cond:
                    self.running.setdefault(obj["metadata"]["name"], now)
                    self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self.cond:
            while name not in self.running:
                if self.closed:
                    raise RuntimeError(f"the pod watch ended before {name} was Running")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{name} not observed Running within {timeout:g} s")
                self.cond.wait(left)
            return self.running[name]

    def close(self) -> None:
        self.stream.close()


# --- the cluster ------------------------------------------------------------------------------------


class Cluster:
    def __init__(self, work: Path, api: ApiServerProcess, containerd: Containerd, cgroup_root: str, verbosity: int):
        self.work, self.api, self.containerd, self.cg = work, api, containerd, cgroup_root
        self.verbosity = verbosity
        self.manifests = work / "manifests"
        self.manifests.mkdir()
        self.log = work / "agent.log"
        self.agent: subprocess.Popen | None = None

    def join_command(self) -> list[str]:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "apiserver_min.cli",
                "token",
                "create",
                "--data-dir",
                str(self.api.data_dir),
                "--print-join-command",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"token create failed: {out.stderr}")
        words = out.stdout.strip().split()
        if words[:2] != [names.AGENT_NAME, "join"]:
            raise RuntimeError(f"unexpected join command: {out.stdout!r}")
        return words

    def start_agent(self) -> None:
        join = self.join_command()
        argv = [
            sys.executable,
            "-m",
            "agent.cli",
            *join[1:],
            f"--root-dir={self.work}/root",
            f"--pod-manifest-path={self.manifests}",
            f"--hostname-override={NODE}",
            f"--container-runtime-endpoint=unix://{self.containerd.socket}",
            f"--port={free_port()}",
            "--address=127.0.0.1",
            "--node-ip=127.0.0.1",
            "--healthz-port=0",
            "--proxy-mode=none",
            f"--cert-dir={self.work}/pki",
            f"--cgroup-root={self.cg}",
            "--fail-swap-on=false",
            "--deprecation-warnings=false",
            f"-v={self.verbosity}",
        ]
        self.agent = subprocess.Popen(
            argv,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=open(self.log, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(10)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def check_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is not None:
            raise RuntimeError(f"the agent exited with {self.agent.returncode}:\n{self.tail()}")

    def node_ready(self) -> bool:
        status, node = self.api.json("GET", f"/api/v1/nodes/{NODE}")
        if status != 200:
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions", [])
        )

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            self.check_agent()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}\n{self.tail()}")
            time.sleep(0.2)

    def create_pod(self, name: str) -> float:
        body = json.dumps(pod_manifest(name, static=False)).encode()
        t0 = time.perf_counter()
        status, _, data = self.api.request(
            "POST", f"/api/v1/namespaces/{NS}/pods", body, {"Content-Type": "application/json"}
        )
        if status != 201:
            raise RuntimeError(f"create pod {name}: {status} {data[:300]!r}")
        return t0

    def write_static(self, name: str) -> float:
        tmp = self.manifests / f".{name}.tmp"
        tmp.write_text(yaml.safe_dump(pod_manifest(name, static=True)))
        t0 = time.perf_counter()
        os.replace(tmp, self.manifests / f"{name}.yaml")
        return t0

    def delete_api_pods(self, pod_names: list[str]) -> None:
        """Graceful deletion (1 s), so that the agent stops the pod and cleans its volumes
        up before it deletes the object (grace 0 would remove the object at once)."""
        for name in pod_names:
            self.api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=1")

    def sandboxes(self) -> int:
        async def count() -> int:
            async with CriClient(self.containerd.endpoint, request_timeout=30) as cri:
                return len(await cri.list_pod_sandbox(label_selector=MANAGED))

        return asyncio.run(count())

    def api_pods(self) -> list[str]:
        status, doc = self.api.json("GET", "/api/v1/pods")
        return [p["metadata"]["name"] for p in doc.get("items", [])] if status == 200 else []


def metrics_counts(api: ApiServerProcess) -> collections.Counter:
    """apiserver_request_total by (verb, resource, subresource, code)."""
    status, _, body = api.request("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status}")
    out: collections.Counter = collections.Counter()
    for line in body.decode().splitlines():
        m = METRIC_RE.match(line)
        if not m:
            continue
        labels = dict(LABEL_RE.findall(m.group(1)))
        out[
            (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""), labels.get("code", ""))
        ] += float(m.group(2))
    return out


async def cri_started(endpoint: str, pod_names: set[str]) -> dict[str, float]:
    """Per pod name (CRI pod-name label): the running container's started_at, Unix seconds."""
    async with CriClient(endpoint, request_timeout=30) as cri:
        out = {}
        for c in await cri.list_containers(state=pb.CONTAINER_RUNNING, label_selector=MANAGED):
            pod = c.labels.get(names.CRI_LABEL_POD_NAME, "")
            if pod in pod_names:
                out[pod] = (await cri.container_status(c.id)).status.started_at / 1e9
        return out


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 30 samples is their maximum)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def bench(cluster: Cluster, args) -> bool:
    api = cluster.api
    t_join = time.monotonic()
    cluster.start_agent()
    cluster.wait(cluster.node_ready, 60, "the node to turn Ready")
    ready_s = time.monotonic() - t_join
    print(f"node {NODE} Ready {ready_s:.1f} s after join", flush=True)

    watch = RunningWatch(api)
    watch.start()
    # Warm-up of both paths (first sandbox, first scheduling, lazy imports); not counted.
    cluster.create_pod("warm-api")
    cluster.write_static("warm-static")
    watch.wait("warm-api", 60)
    watch.wait(f"warm-static-{NODE}", 60)
    cluster.delete_api_pods(["warm-api"])
    (cluster.manifests / "warm-static.yaml").unlink()
    cluster.wait(
        lambda: not any(n.startswith("warm-") for n in cluster.api_pods()) and not cluster.sandboxes(),
        60,
        "warm-up pods gone",
    )
    time.sleep(args.settle)

    # (a) one at a time, API pod i then static pod i, both on the wall clock of this process
    # (perf_counter for the watch, time.time offsets for CRI started_at).
    api_lat, static_lat, api_cri, static_cri = [], [], [], []
    api_names = [f"api-{i}" for i in range(args.pods)]
    wall_at: dict[str, float] = {}
    for i in range(args.pods):
        for kind in ("api", "static"):
            name = f"{kind}-{i}"
            observed_name = name if kind == "api" else f"{name}-{NODE}"
            offset = time.time() - time.perf_counter()
            t0 = cluster.create_pod(name) if kind == "api" else cluster.write_static(name)
            wall_at[observed_name] = t0 + offset
            seen = watch.wait(observed_name, 60)
            (api_lat if kind == "api" else static_lat).append(seen - t0)
        print(
            f"  pair {i + 1}/{args.pods}: api {api_lat[-1] * 1000:.0f} ms, static {static_lat[-1] * 1000:.0f} ms",
            flush=True,
        )
    started = asyncio.run(cri_started(cluster.containerd.endpoint, set(wall_at)))
    for name, at in wall_at.items():
        if name in started:
            (static_cri if name.startswith("static-") else api_cri).append(started[name] - at)

    # Leave the N API pods: remove the static ones and wait for their mirror pods to go.
    for f in cluster.manifests.glob("*.yaml"):
        f.unlink()
    cluster.wait(
        lambda: not any(n.startswith("static-") for n in cluster.api_pods()) and cluster.sandboxes() == args.pods,
        90,
        "static pods gone",
    )
    watch.close()
    time.sleep(args.settle)

    # (b) + (c) idle window with the N API pods.
    agent = psutil.Process(cluster.agent.pid)
    before = metrics_counts(api)
    cpu0 = agent.cpu_times()
    t0 = time.monotonic()
    time.sleep(args.idle)
    wall = time.monotonic() - t0
    after = metrics_counts(api)
    cpu1 = agent.cpu_times()
    rss_mb = agent.memory_info().rss / 2**20
    children = agent.children(recursive=True)
    child_rss = sum(c.memory_info().rss for c in children) / 2**20 if children else 0.0
    cpu_pct = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall * 100
    delta = collections.Counter({k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0})
    total = sum(delta.values())
    leases = sum(v for k, v in delta.items() if k[1] == "leases")
    other_rps = (total - leases) / wall
    running_pods = len(asyncio.run(cri_started(cluster.containerd.endpoint, set(api_names))))

    # --- report ----------------------------------------------------------------------------------
    rows = []
    n = len(api_lat)
    a50, a99 = pct(api_lat, 50), pct(api_lat, 99)
    s50, s99 = pct(static_lat, 50), pct(static_lat, 99)
    rows.append(
        (
            f"(a) API pod create -> Running (watch), p50 (n={n})",
            f"{a50 * 1000:.0f} ms",
            f"static: {s50 * 1000:.0f} ms",
            "(info)",
            "",
        )
    )
    rows.append(
        (
            f"(a) API pod create -> Running (watch), p99 (n={n})",
            f"{a99 * 1000:.0f} ms",
            f"static: {s99 * 1000:.0f} ms",
            f"<= {P99_TARGET_S * 1000:.0f} ms",
            verdict(a99 <= P99_TARGET_S),
        )
    )
    if api_cri and static_cri:
        rows.append(
            (
                "(a) ... container started_at (CRI), p50 / p99",
                f"{pct(api_cri, 50) * 1000:.0f} / {pct(api_cri, 99) * 1000:.0f} ms",
                f"static: {pct(static_cri, 50) * 1000:.0f} / {pct(static_cri, 99) * 1000:.0f} ms",
                "(info)",
                "",
            )
        )
    rows.append(
        (
            f"(b) agent RSS, {running_pods} API pods running",
            f"{rss_mb:.1f} MB",
            "",
            f"<= {RSS_TARGET_MB:g} MB",
            verdict(rss_mb <= RSS_TARGET_MB),
        )
    )
    rows.append(
        (
            f"(c) agent API requests/s idle, besides leases ({wall:.0f} s)",
            f"{other_rps:.3f}/s",
            f"leases: {leases / wall:.3f}/s",
            f"<= {IDLE_RPS_TARGET:g}/s",
            verdict(other_rps <= IDLE_RPS_TARGET),
        )
    )
    rows.append(("    agent CPU meanwhile", f"{cpu_pct:.2f} %", "", "(info)", ""))
    head = ("figure", "measured", "beside it", "target", "")
    widths = [max(len(r[k]) for r in rows + [head]) for k in range(5)]
    print(f"\none-node cluster (SQLite, containerd, agent via join), {os.cpu_count()} cores")
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"\n(a) API pods, ms:    {' '.join(f'{v * 1000:.0f}' for v in api_lat)}")
    print(f"    static pods, ms: {' '.join(f'{v * 1000:.0f}' for v in static_lat)}")
    if api_cri:
        print(f"    API pods, create -> container started_at, ms: {' '.join(f'{v * 1000:.0f}' for v in api_cri)}")
        print(
            f"    API pods, started_at -> Running seen by the watch: p50 "
            f"{(a50 - pct(api_cri, 50)) * 1000:.0f} ms (difference of the medians)"
        )
    if children:
        print(f"(b) the agent has {len(children)} child processes, {child_rss:.1f} MB RSS in all")
    print(f"(c) requests in {wall:.0f} s idle, by verb/resource/subresource/code:")
    for (verb, res, sub, code), v in sorted(delta.items(), key=lambda kv: -kv[1]):
        print(f"      {verb:<8} {res + ('/' + sub if sub else ''):<24} {code:<4} {v:5.0f}  ({v / wall:.3f}/s)")
    if not delta:
        print("      none")
    return all(r[4] != "MISS" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 pods of each kind, 15 s idle window")
    ap.add_argument("--pods", type=int, default=None, help="pods of each kind (30)")
    ap.add_argument("--idle", type=float, default=None, help="idle window in seconds (60)")
    ap.add_argument("--settle", type=float, default=5.0, help="quiet time before measuring idle (5)")
    ap.add_argument("--agent-v", type=int, default=2, help="the agent's -v (2)")
    ap.add_argument("--keep-log", default=None, metavar="DIR", help="copy the agent's and server's logs here")
    args = ap.parse_args()
    args.pods = args.pods or (5 if args.quick else 30)
    args.idle = args.idle or (15.0 if args.quick else 60.0)

    cgroup_root = f"/orch-bench-{secrets.token_hex(4)}"
    ok = False
    with tempfile.TemporaryDirectory(prefix="orch-bench-cluster-") as tmp:
        work = Path(tmp)
        make_cgroup_root(cgroup_root)
        try:
            with Containerd() as containerd:
                image_builder().ensure_images(containerd.address)
                with ApiServerProcess(work / "api", free_port(), extra_args=["--enable-bootstrap-token-auth"]) as api:
                    cluster = Cluster(work, api, containerd, cgroup_root, args.agent_v)
                    try:
                        ok = bench(cluster, args)
                    finally:
                        try:
                            for f in cluster.manifests.glob("*.yaml"):
                                f.unlink()
                            cluster.delete_api_pods([n for n in cluster.api_pods() if not n.endswith(f"-{NODE}")])
                            deadline = time.monotonic() + 90
                            while (
                                (cluster.api_pods() or cluster.sandboxes())
                                and time.monotonic() < deadline
                                and cluster.agent
                                and cluster.agent.poll() is None
                            ):
                                time.sleep(0.5)
                        finally:
                            cluster.stop_agent()
                            # A safety net: volumes of pods the agent did not get to clean up.
                            still = _unmount_all_under(work)
                            if still:
                                print(f"warning: still mounted under {work}: {still[:3]}", file=sys.stderr)
                            if args.keep_log:
                                Path(args.keep_log).mkdir(parents=True, exist_ok=True)
                                shutil.copyfile(cluster.log, Path(args.keep_log) / "agent.log")
                                shutil.copyfile(api.log_path, Path(args.keep_log) / "apiserver.log")
        finally:
            left = remove_cgroup_root(cgroup_root)
            if left:
                print(f"warning: cgroup directories left behind: {left[:5]}", file=sys.stderr)
    print(f"\noverall: {'all targets met' if ok else 'some targets MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
