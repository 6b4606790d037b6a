"""Many hollow nodes against one orch-apiserver: upstream's scalability SLIs (not a test).

    .venv/bin/python tests/bench/bench_scale.py [--nodes 50] [--pods 1000] [--backend sqlite|etcd]
        [--duration 60] [--step 0] [--max-nodes N] [--nodes-per-process N]
        [--replicas 0] [--timeline] [--profile DIR] [--keep-log DIR] [--loop-watch DIR] [--hollow-nice N]
        [--priority N] [--idle 20]

Starts ``orch-apiserver`` (SQLite, or etcd from tests/components.py) in a temporary
data dir and ``--nodes`` hollow nodes (tests/bench/hollow.py: the real node agent on
the fake CRI runtime) in ``ceil(nodes / --nodes-per-process)`` processes (by default
as many nodes a process as spreads ``--nodes`` over every CPU, at most 250: nodes stand
for machines of their own, and one process would hold them all to one core). Once every
node is Ready it creates pods through Deployments (10 replicas each, 50 Deployments
a namespace) at a steady rate, ``--pods`` of them over ``--duration`` seconds, and
meanwhile measures, from a client process of its own (admin credentials):

* mutating API call latency: the Deployment creates, plus a ConfigMap
  create / patch / delete probe twice a second;
* non-streaming read latency: GET of one pod (namespace-scoped) and of one node
  (cluster-scoped), LIST of a full namespace of pods, LIST of all nodes and a
  500-object page of all pods (cluster-scoped), each once a second;
* pod startup latency: from the moment a watch on the Deployments' pods first
  delivers a pod to the moment it delivers it with phase Running (set from the
  node agent's status report), for every pod created;
* watch delivery lag: the probe ConfigMaps' ADDED events on a watch, after the
  create was acknowledged (0 when the event came first);
* the API server's CPU (cores used over the load) and peak RSS, and the hollow
  processes' RSS.

Client-side latencies include TLS and the benchmark's own event loop, so they are
upper bounds; the server-side figures beside them are upstream's own definition: the
server's ``apiserver_request_duration_seconds`` histogram (``/metrics``) over the
step, for every client (the agents' status, lease and pod traffic included), p99 given
as the bucket bound it falls in. With ``--step S`` the node count
then grows by S (pods in proportion, ``--pods`` per ``--nodes``) until an SLI breaks
or ``--max-nodes``; the knee is the last count that held. With ``--replicas R`` a
Deployment of R replicas is then created and timed to R available, and a rolling
update of it timed to done (the issue-19 figures); ``--timeline`` then prints both as a
row per second (tests/bench/timeline.py): pods seen, bound, Running, Ready, marked for
deletion and gone, the ReplicaSets' sizes, and the CPU the server and the hollow
processes used.

Separating the server from the load (the machine is shared): ``--idle S`` (default 20)
measures S seconds of steady state after the nodes are Ready and before the step's pods,
and prints CPU per node per second of the hollow processes and of the server and the
node count 2 cores could carry at that rate; every step prints the CPU of the server,
the hollow processes, this client and the rest of the machine, and the seconds each of
ours spent waiting for a CPU (run queue, /proc schedstat). ``--priority N`` runs the
server and this client at nice -N (root) and ``--hollow-nice N`` the hollow processes
at nice N, so that the latencies measure the server rather than the load generator or
other users of the machine. ``--loop-watch DIR`` runs the server under
tests/bench/apiserver_watched.py and the hollow processes with ``--loop-watch``: each
writes an event-loop lag histogram and the stacks that stalled its loop
(tests/bench/loopwatch.py), one report per period (start-up, steady state, each step).

Targets (issue 22, a 2-core machine): 1,000 nodes and 30,000 pods on SQLite with
mutating p99 <= 1 s, reads p99 <= 1 s (lists of a namespace <= 5 s; upstream
allows 30 s for cluster-scoped lists), pod startup p99 <= 5 s, server RSS <= 2 GiB.
The load average is printed beside the figures: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agent.client.config import load_orchconfig  # noqa: E402
from agent.client.rest import ApiClient, ApiConnectionError, ApiError  # noqa: E402
from tests.apiserver_fixtures import ApiServerProcess  # noqa: E402
from tests.bench.bench_apiserver import CProfileRun  # noqa: E402
from tests.bench.hollow import HOLLOW_IMAGE  # noqa: E402
from tests.bench.timeline import Timeline  # noqa: E402
from tests.components import Etcd, free_port  # noqa: E402

HOLLOW_SCRIPT = REPO / "tests" / "bench" / "hollow.py"
WATCHED_SERVER_SCRIPT = REPO / "tests" / "bench" / "apiserver_watched.py"
BENCH_APISERVER_SCRIPT = REPO / "tests" / "bench" / "bench_apiserver.py"
LABEL = {"bench": "scale"}
REPLICAS_PER_DEPLOYMENT = 10
DEPLOYMENTS_PER_NAMESPACE = 50
PROBE_NS = "scale-probe"

TARGET_MUTATING_S = 1.0
TARGET_READ_S = 1.0
TARGET_LIST_NS_S = 5.0
TARGET_LIST_CLUSTER_S = 30.0
TARGET_STARTUP_S = 5.0
TARGET_RSS = 2 * 2**30
TARGET_NODES = 1000
TARGET_PODS = 30000
TARGET_BIG_AVAILABLE_S = 60.0
TARGET_BIG_ROLLOUT_S = 90.0
TARGET_CPU_PER_POD_MS = 2.0
MAX_NODES_PER_PROCESS = 250
IDLE_SAMPLE_S = 5.0


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def fmt_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class ProfiledServer(ApiServerProcess):
    """orch-apiserver run by bench_apiserver.py's cProfile wrapper (windows on SIGUSR1/SIGUSR2)."""

    def __init__(self, *args, profile_dir: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.profile_dir = profile_dir

    def argv(self) -> list[str]:
        return [sys.executable, str(BENCH_APISERVER_SCRIPT), "_cprofile_server", self.profile_dir, *super().argv()[1:]]


# --- the hollow processes -----------------------------------------------------------------------


class Fleet:
    """Hollow-node processes, grown by :meth:`grow`; stopped by PID."""

    def __init__(
        self,
        server: ApiServerProcess,
        work: Path,
        per_process: int,
        profile_dir: str = "",
        nice: int | None = None,
        loop_watch: str = "",
    ) -> None:
        self.server = server
        self.profile_dir = profile_dir
        self.work = work
        self.per_process = per_process
        self.nice = nice
        self.loop_watch = loop_watch
        self.procs: list[asyncio.subprocess.Process] = []
        self.count = 0

    async def grow(self, total: int) -> float:
        """Start processes until ``total`` nodes run; seconds it took them to start."""
        t0 = time.monotonic()
        starting = []
        while self.count < total:
            n = min(self.per_process, total - self.count)
            idx = len(self.procs)
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(HOLLOW_SCRIPT),
                "--data-dir",
                str(self.server.data_dir),
                "--server",
                self.server.url,
                "--nodes",
                str(n),
                "--first",
                str(self.count),
                "--work-dir",
                str(self.work / f"proc-{idx}"),
                "--log-file",
                str(self.work / f"proc-{idx}.log"),
                # Set outright, not inherited: --priority raises this process's priority.
                *(["--nice", str(self.nice)] if self.nice is not None else []),
                *(["--loop-watch", str(Path(self.loop_watch) / f"hollow-{idx}.txt")] if self.loop_watch else []),
                *(["--profile-dir", self.profile_dir] if self.profile_dir else []),
                stdout=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            self.procs.append(proc)
            starting.append(proc)
            self.count += n
        for proc in starting:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=max(60.0, total * 0.5))
            if not line:
                raise RuntimeError(f"a hollow-node process exited during start (code {await proc.wait()})")
        return time.monotonic() - t0

    def rss(self) -> int:
        total = 0
        for proc in self.procs:
            try:
                total += psutil.Process(proc.pid).memory_info().rss
            except psutil.Error:
                pass
        return total

    def cpu_seconds(self) -> float:
        total = 0.0
        for proc in self.procs:
            try:
                t = psutil.Process(proc.pid).cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def signal(self, signum: int) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(signum)

    async def stop(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.terminate()
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()


class WatchedApiServerProcess(ApiServerProcess):
    """The API server run by tests/bench/apiserver_watched.py: its event-loop lag and
    the stacks that stalled it are written to ``report``."""

    def __init__(self, *args, report: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.report = report

    def argv(self) -> list[str]:
        return [sys.executable, str(WATCHED_SERVER_SCRIPT), "--out", str(self.report), "--", *super().argv()[1:]]


# --- measurements -------------------------------------------------------------------------------

HISTOGRAM_RE = re.compile(r'^apiserver_request_duration_seconds_bucket\{(.*),le="([^"]+)"\} (\d+)$')
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MUTATING_VERBS = frozenset({"CREATE", "UPDATE", "PATCH", "DELETE", "DELETECOLLECTION", "POST", "PUT", "APPLY"})
# Server-side classes of upstream's SLIs: (name, verbs, scopes); scope "namespace" is any
# namespaced request, "resource" a cluster-scoped object, "cluster" a cluster-wide list.
SERVER_CLASSES = (
    ("mutating (all clients)", MUTATING_VERBS, None, TARGET_MUTATING_S),
    ("GET namespaced object", frozenset({"GET"}), frozenset({"namespace"}), TARGET_READ_S),
    ("GET cluster-scoped object", frozenset({"GET"}), frozenset({"resource"}), TARGET_READ_S),
    ("LIST in a namespace", frozenset({"LIST"}), frozenset({"namespace"}), TARGET_LIST_NS_S),
    ("LIST cluster-wide", frozenset({"LIST"}), frozenset({"cluster"}), TARGET_LIST_CLUSTER_S),
)


async def scrape_histograms(client: ApiClient) -> dict[tuple[str, str], dict[float, int]]:
    """(verb, scope) -> cumulative bucket counts of the server's request durations."""
    reply = await client.get("/metrics")
    text = reply.get("text", "") if isinstance(reply, dict) else ""
    out: dict[tuple[str, str], dict[float, int]] = {}
    for line in str(text).splitlines():
        m = HISTOGRAM_RE.match(line)
        if not m:
            continue
        labels = dict(LABEL_RE.findall(m.group(1)))
        bound = math.inf if m.group(2) == "+Inf" else float(m.group(2))
        key = (labels.get("verb", ""), labels.get("scope", ""))
        buckets = out.setdefault(key, {})
        buckets[bound] = buckets.get(bound, 0) + int(m.group(3))
    return out


def server_p99(before: dict, after: dict, verbs: frozenset, scopes: frozenset | None) -> tuple[float | None, int]:
    """The p99 bucket bound of the requests between two scrapes, and their count."""
    merged: dict[float, int] = {}
    for (verb, scope), buckets in after.items():
        if verb not in verbs or (scopes is not None and scope not in scopes):
            continue
        old = before.get((verb, scope), {})
        for bound, n in buckets.items():
            merged[bound] = merged.get(bound, 0) + n - old.get(bound, 0)
    total = merged.get(math.inf, 0)
    if not total:
        return None, 0
    for bound in sorted(merged):
        if merged[bound] >= 0.99 * total:
            return bound, total
    return math.inf, total


@dataclasses.dataclass
class Samples:
    mutating: list[float] = dataclasses.field(default_factory=list)
    get_ns: list[float] = dataclasses.field(default_factory=list)
    get_cluster: list[float] = dataclasses.field(default_factory=list)
    list_ns: list[float] = dataclasses.field(default_factory=list)
    list_cluster: list[float] = dataclasses.field(default_factory=list)
    watch_lag: list[float] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)


def run_queue_wait(pids: list[int]) -> float:
    """Seconds the threads of ``pids`` spent runnable but waiting for a CPU (the second
    field of /proc/PID/task/TID/schedstat): what a busy machine adds to every latency."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return total / 1e9


def own_cpu_seconds() -> float:
    """This process's CPU seconds: the probes, the pod watch and the metrics scrapes."""
    t = psutil.Process().cpu_times()
    return t.user + t.system


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (every developer's processes included)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


class ServerSampler:
    """The API server's CPU seconds and peak RSS, sampled every second."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak_rss = 0

    def cpu_seconds(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    async def run(self) -> None:
        while True:
            try:
                self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
            except psutil.Error:
                return
            await asyncio.sleep(1.0)


class PodWatch:
    """The benchmark's pods, all namespaces: when each was first delivered, and when
    first delivered Running (monotonic clock of this process)."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self.first_seen: dict[str, float] = {}
        self.scheduled: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def run(self) -> None:
        selector = ",".join(f"{k}={v}" for k, v in LABEL.items())
        listed = await self.client.get("/api/v1/pods", params={"labelSelector": selector})
        rv = listed["metadata"]["resourceVersion"]
        now = time.monotonic()
        for pod in listed["items"]:
            self._see(pod, now)
        while True:
            try:
                async for ev_type, obj in self.client.watch(
                    "/api/v1/pods",
                    params={
                        "labelSelector": selector,
                        "resourceVersion": rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": "600",
                    },
                ):
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev_type in ("ADDED", "MODIFIED"):
                        self._see(obj, time.monotonic())
            except ApiConnectionError:
                await asyncio.sleep(0.5)

    def _see(self, pod: dict, now: float) -> None:
        uid = pod["metadata"]["uid"]
        self.first_seen.setdefault(uid, now)
        if (pod.get("spec") or {}).get("nodeName"):
            self.scheduled.setdefault(uid, now)
        if (pod.get("status") or {}).get("phase") == "Running" and uid not in self.running:
            self.running[uid] = now
            self.changed.set()

    def startup_latencies(self) -> list[float]:
        return [self.running[u] - self.first_seen[u] for u in self.running if u in self.first_seen]

    def scheduling_latencies(self) -> list[float]:
        """Seen → bound to a node (the scheduler's share of the startup latency)."""
        return [self.scheduled[u] - self.first_seen[u] for u in self.scheduled if u in self.first_seen]


async def timed(samples: list[float], errors: list[str], what: str, coro) -> dict | None:
    t0 = time.monotonic()
    try:
        result = await coro
    except (ApiError, ApiConnectionError) as exc:
        errors.append(f"{what}: {exc}")
        return None
    samples.append(time.monotonic() - t0)
    return result


async def probe_mutations(client: ApiClient, s: Samples, stop: asyncio.Event, acked: dict[str, float]) -> None:
    base = f"/api/v1/namespaces/{PROBE_NS}/configmaps"
    i = 0
    while not stop.is_set():
        name = f"probe-{i}"
        i += 1
        created = await timed(
            s.mutating, s.errors, "create configmap", client.create(base, {"metadata": {"name": name}, "data": {}})
        )
        if created is not None:
            acked[name] = time.monotonic()
            await timed(s.mutating, s.errors, "patch configmap", client.patch(f"{base}/{name}", {"data": {"k": "v"}}))
            await timed(s.mutating, s.errors, "delete configmap", client.delete(f"{base}/{name}"))
        await asyncio.sleep(0.5)


async def watch_lag(client: ApiClient, s: Samples, acked: dict[str, float], rv: str) -> None:
    base = f"/api/v1/namespaces/{PROBE_NS}/configmaps"
    pending: dict[str, float] = {}
    while True:
        try:
            async for ev_type, obj in client.watch(base, params={"resourceVersion": rv, "timeoutSeconds": "600"}):
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                name = obj.get("metadata", {}).get("name", "")
                if ev_type == "ADDED" and name.startswith("probe-"):
                    pending[name] = time.monotonic()
                for n in [n for n in pending if n in acked]:
                    s.watch_lag.append(max(0.0, pending.pop(n) - acked[n]))
        except ApiConnectionError:
            await asyncio.sleep(0.5)


async def probe_reads(client: ApiClient, s: Samples, stop: asyncio.Event, ns: str, pod_name: list[str]) -> None:
    tick = 0
    while not stop.is_set():
        if pod_name:
            await timed(s.get_ns, s.errors, "get pod", client.get(f"/api/v1/namespaces/{ns}/pods/{pod_name[0]}"))
        await timed(s.get_cluster, s.errors, "get node", client.get("/api/v1/nodes/hollow-0"))
        await timed(s.list_ns, s.errors, "list namespace pods", client.get(f"/api/v1/namespaces/{ns}/pods"))
        await timed(s.list_cluster, s.errors, "list nodes", client.get("/api/v1/nodes"))
        if tick % 5 == 0:
            await timed(s.list_cluster, s.errors, "list pods page", client.get("/api/v1/pods", params={"limit": "500"}))
        tick += 1
        await asyncio.sleep(1.0)


def deployment(name: str, replicas: int) -> dict:
    labels = {**LABEL, "deployment": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(LABEL)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": HOLLOW_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "1000000"],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }


async def ensure_namespace(client: ApiClient, name: str) -> None:
    try:
        await client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    except ApiError as exc:
        if exc.status != 409:
            raise


async def wait_nodes_ready(client: ApiClient, count: int, timeout: float) -> float:
    t0 = time.monotonic()
    deadline = t0 + timeout
    ready = 0
    while time.monotonic() < deadline:
        nodes = await client.get("/api/v1/nodes")
        ready = 0
        for node in nodes["items"]:
            for cond in (node.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") == "True":
                    ready += 1
        if ready >= count:
            return time.monotonic() - t0
        await asyncio.sleep(1.0)
    raise NodesNotReady(f"only {ready} of {count} nodes Ready after {timeout:g} s")


class NodesNotReady(RuntimeError):
    """The nodes of a step did not all become Ready in time: the step broke."""


# --- one step: N nodes, pods created at a steady rate -------------------------------------------


@dataclasses.dataclass
class StepResult:
    nodes: int
    pods: int
    running: int
    samples: Samples
    startup: list[float]
    scheduling: list[float]
    server_cpu_cores: float
    server_rss: int
    hollow_rss: int
    hollow_cpu_cores: float
    load: str
    create_rate: float
    server_side: list[tuple[str, float | None, int, float]]
    client_cpu_cores: float = 0.0
    machine_busy_cores: float = 0.0
    run_queue_wait: tuple[float, ...] = (0.0, 0.0, 0.0)  # seconds a second: server, hollow, client

    def broken(self) -> list[str]:
        out = []
        checks = [
            ("mutating p99", percentile(self.samples.mutating, 99), TARGET_MUTATING_S),
            ("get namespaced p99", percentile(self.samples.get_ns, 99), TARGET_READ_S),
            ("get cluster p99", percentile(self.samples.get_cluster, 99), TARGET_READ_S),
            ("list namespace p99", percentile(self.samples.list_ns, 99), TARGET_LIST_NS_S),
            ("list cluster p99", percentile(self.samples.list_cluster, 99), TARGET_LIST_CLUSTER_S),
            ("pod startup p99", percentile(self.startup, 99), TARGET_STARTUP_S),
        ]
        checks += [(f"server-side {name} p99", p99, target) for name, p99, _n, target in self.server_side]
        for what, value, target in checks:
            if value is not None and value > target:
                out.append(f"{what} {value:.3f} s > {target:g} s")
        if self.server_rss > TARGET_RSS:
            out.append(f"server RSS {self.server_rss / 2**20:.0f} MiB > {TARGET_RSS / 2**20:.0f} MiB")
        if self.running < self.pods:
            out.append(f"only {self.running} of {self.pods} pods Running")
        return out


class Bench:
    def __init__(self, client: ApiClient, server: ApiServerProcess, fleet: Fleet) -> None:
        self.client = client
        self.server = server
        self.fleet = fleet
        self.sampler = ServerSampler(server.pid or 0)
        self.pods = PodWatch(client)
        self.deployments = 0
        self.namespaces: list[str] = []
        self.pods_wanted = 0
        self.idle_seconds = 0.0

    def waits(self) -> tuple[float, float, float]:
        """Run-queue wait in seconds so far: the server, the hollow processes, this client."""
        return (
            run_queue_wait([self.server.pid or 0]),
            run_queue_wait([p.pid for p in self.fleet.procs]),
            run_queue_wait([os.getpid()]),
        )

    def mark_period(self) -> None:
        """With --loop-watch: close the loop-watch period of the server and the hollow processes."""
        if not self.fleet.loop_watch:
            return
        for pid in [self.server.pid or 0] + [p.pid for p in self.fleet.procs]:
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass

    async def idle(self, nodes: int) -> None:
        """The steady state before the step's pods: CPU per node per second of the hollow
        processes and of the server (status, lease, pod watch, relist, housekeeping; the
        pods already there included), with no requests from the benchmark."""
        cpu0, hcpu0, ccpu0, mcpu0 = (
            self.sampler.cpu_seconds(),
            self.fleet.cpu_seconds(),
            own_cpu_seconds(),
            machine_busy_seconds(),
        )
        t0 = time.monotonic()
        await asyncio.sleep(self.idle_seconds)
        wall = time.monotonic() - t0
        server = (self.sampler.cpu_seconds() - cpu0) / wall
        hollow = (self.fleet.cpu_seconds() - hcpu0) / wall
        client = (own_cpu_seconds() - ccpu0) / wall
        busy = (machine_busy_seconds() - mcpu0) / wall
        print(
            f"  steady state, {wall:.0f} s with {nodes} nodes and {len(self.pods.running)} pods Running: "
            f"hollow {hollow:.3f} cores = {hollow / nodes * 1000:.2f} ms a node a second, server {server:.3f} cores "
            f"= {server / nodes * 1000:.2f} ms a node a second, benchmark client {client:.3f}; machine busy "
            f"{busy:.2f} of {os.cpu_count()} (others {max(0.0, busy - server - hollow - client):.2f}); "
            f"2 cores carry about {2000 / max(1e-9, (hollow + server) / nodes * 1000):.0f} such nodes "
            f"(server alone: {2000 / max(1e-9, server / nodes * 1000):.0f}); load average {loadavg()}",
            flush=True,
        )

    def namespace_for(self, index: int) -> str:
        return f"scale-{index // DEPLOYMENTS_PER_NAMESPACE}"

    async def step(self, nodes: int, pods: int, duration: float) -> StepResult:
        grow_s = await self.fleet.grow(nodes)
        print(f"  {nodes} hollow nodes started in {grow_s:.1f} s (load average {loadavg()})", flush=True)
        ready_s = await wait_nodes_ready(self.client, nodes, timeout=max(120.0, nodes * 0.5))
        print(f"  all {nodes} Ready {ready_s:.1f} s later", flush=True)
        self.mark_period()  # loop-watch period: start-up
        if self.idle_seconds:
            await self.idle(nodes)
            self.mark_period()  # steady state
        new_deployments = max(0, math.ceil((pods - self.pods_wanted) / REPLICAS_PER_DEPLOYMENT))
        samples = Samples()
        stop = asyncio.Event()
        acked: dict[str, float] = {}
        cm = await self.client.get(f"/api/v1/namespaces/{PROBE_NS}/configmaps")
        first_ns = self.namespace_for(0)
        await ensure_namespace(self.client, first_ns)
        known_pod: list[str] = []
        helpers = [
            asyncio.create_task(probe_mutations(self.client, samples, stop, acked)),
            asyncio.create_task(watch_lag(self.client, samples, acked, cm["metadata"]["resourceVersion"])),
            asyncio.create_task(probe_reads(self.client, samples, stop, first_ns, known_pod)),
        ]
        hist0 = await scrape_histograms(self.client)
        cpu0, hcpu0, t0 = self.sampler.cpu_seconds(), self.fleet.cpu_seconds(), time.monotonic()
        ccpu0, mcpu0 = own_cpu_seconds(), machine_busy_seconds()
        wait0 = self.waits()
        interval = duration / new_deployments if new_deployments else duration
        try:
            for k in range(new_deployments):
                index = self.deployments
                ns = self.namespace_for(index)
                if ns not in self.namespaces:
                    await ensure_namespace(self.client, ns)
                    self.namespaces.append(ns)
                await timed(
                    samples.mutating,
                    samples.errors,
                    "create deployment",
                    self.client.create(
                        f"/apis/apps/v1/namespaces/{ns}/deployments",
                        deployment(f"d{index}", REPLICAS_PER_DEPLOYMENT),
                    ),
                )
                self.deployments += 1
                self.pods_wanted += REPLICAS_PER_DEPLOYMENT
                if not known_pod:
                    page = await self.client.get(f"/api/v1/namespaces/{first_ns}/pods", params={"limit": "1"})
                    if page["items"]:
                        known_pod.append(page["items"][0]["metadata"]["name"])
                next_at = t0 + (k + 1) * interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if not new_deployments:
                await asyncio.sleep(duration)
            create_rate = new_deployments * REPLICAS_PER_DEPLOYMENT / max(1e-9, time.monotonic() - t0)
            # The last pods get the same chance to start as the first.
            deadline = time.monotonic() + max(60.0, TARGET_STARTUP_S * 6)
            while len(self.pods.running) < self.pods_wanted and time.monotonic() < deadline:
                self.pods.changed.clear()
                try:
                    await asyncio.wait_for(self.pods.changed.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
        finally:
            stop.set()
            for t in helpers:
                t.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        wall = time.monotonic() - t0
        wait1 = self.waits()
        self.mark_period()  # the step's load
        hist1 = await scrape_histograms(self.client)
        server_side = []
        for name, verbs, scopes, target in SERVER_CLASSES:
            p99, n = server_p99(hist0, hist1, verbs, scopes)
            server_side.append((name, p99, n, target))
        return StepResult(
            nodes=nodes,
            pods=self.pods_wanted,
            running=len(self.pods.running),
            samples=samples,
            startup=self.pods.startup_latencies(),
            scheduling=self.pods.scheduling_latencies(),
            server_cpu_cores=(self.sampler.cpu_seconds() - cpu0) / wall,
            server_rss=self.sampler.peak_rss,
            hollow_rss=self.fleet.rss(),
            hollow_cpu_cores=(self.fleet.cpu_seconds() - hcpu0) / wall,
            load=loadavg(),
            create_rate=create_rate,
            server_side=server_side,
            client_cpu_cores=(own_cpu_seconds() - ccpu0) / wall,
            machine_busy_cores=(machine_busy_seconds() - mcpu0) / wall,
            run_queue_wait=tuple((b - a) / wall for a, b in zip(wait0, wait1)),
        )

    async def big_deployment(self, replicas: int, timeline: bool = False) -> None:
        """Issue 19: one Deployment of ``replicas`` over the hollow nodes, to available; then a rolling update."""
        ns = "scale-big"
        await ensure_namespace(self.client, ns)
        path = f"/apis/apps/v1/namespaces/{ns}/deployments"
        tl = Timeline(self.client, ns, {"server": self.sampler.cpu_seconds, "hollow": self.fleet.cpu_seconds})
        tl.start()
        try:
            await self._big_deployment(ns, path, replicas, tl)
        finally:
            await tl.stop()
        if timeline:
            print(tl.summary())
            print(tl.report(tl.marks[0][0], tl.marks[-1][0] + 1))

    async def _idle_cpu(self, seconds: float = IDLE_SAMPLE_S) -> tuple[float, float]:
        """Cores the server and the hollow processes use with nothing to do (their
        status, leases and relists), to tell the rollout's own CPU from theirs."""
        cpu0, hcpu0, t0 = self.sampler.cpu_seconds(), self.fleet.cpu_seconds(), time.monotonic()
        await asyncio.sleep(seconds)
        wall = time.monotonic() - t0
        return (self.sampler.cpu_seconds() - cpu0) / wall, (self.fleet.cpu_seconds() - hcpu0) / wall

    async def _big_deployment(self, ns: str, path: str, replicas: int, tl: Timeline) -> None:
        idle, hidle = await self._idle_cpu()
        print(f"  idle: server {idle:.2f} cores, hollow processes {hidle:.2f} cores", flush=True)
        cpu0, hcpu0, t0 = self.sampler.cpu_seconds(), self.fleet.cpu_seconds(), time.monotonic()
        tl.mark("created")
        await self.client.create(path, deployment("big", replicas))
        available_s = await self._wait_rollout(f"{path}/big", replicas, generation=1, timeout=600)
        tl.mark("available")
        cpu_create = self.sampler.cpu_seconds() - cpu0
        hcpu_create = self.fleet.cpu_seconds() - hcpu0
        wall = time.monotonic() - t0
        print(
            f"  Deployment of {replicas} replicas over {self.fleet.count} nodes: {replicas} available in "
            f"{fmt_s(available_s)} (target <= {TARGET_BIG_AVAILABLE_S:g} s at 1,000 over 100 nodes); "
            f"server CPU {cpu_create:.1f} s = {cpu_create / replicas * 1000:.2f} ms a pod "
            f"(target <= {TARGET_CPU_PER_POD_MS:g} ms); RSS {self.sampler.peak_rss / 2**20:.0f} MiB; "
            f"hollow CPU {hcpu_create:.1f} s = {hcpu_create / replicas * 1000:.2f} ms a pod; load {loadavg()}",
            flush=True,
        )
        above = (cpu_create - idle * wall) / replicas * 1000, (hcpu_create - hidle * wall) / replicas * 1000
        print(f"    above idle: server {above[0]:.2f} ms, hollow {above[1]:.2f} ms a pod", flush=True)
        if available_s is None:
            print("  (not all available within 600 s: no rolling update timed)")
            await self.client.delete(f"{path}/big")
            return
        cpu0, hcpu0, t0 = self.sampler.cpu_seconds(), self.fleet.cpu_seconds(), time.monotonic()
        tl.mark("patched")
        server_profile = None
        if self.fleet.profile_dir:
            self.fleet.signal(signal.SIGUSR1)
            if isinstance(self.server, ProfiledServer):
                server_profile = CProfileRun(self.server.pid or 0, "server-rollout", Path(self.fleet.profile_dir))
                server_profile.start()
        await self.client.patch(
            f"{path}/big", {"spec": {"template": {"metadata": {"annotations": {"bench/rollout": str(time.time())}}}}}
        )
        rolled_s = await self._wait_rollout(f"{path}/big", replicas, generation=2, timeout=600)
        tl.mark("rolled")
        if self.fleet.profile_dir:
            self.fleet.signal(signal.SIGUSR2)
        if server_profile is not None:
            await asyncio.to_thread(server_profile.stop)
        cpu_roll = self.sampler.cpu_seconds() - cpu0
        hcpu_roll = self.fleet.cpu_seconds() - hcpu0
        wall = time.monotonic() - t0
        print(
            f"  rolling update of it: done in {fmt_s(rolled_s)} (target <= {TARGET_BIG_ROLLOUT_S:g} s); "
            f"server CPU {cpu_roll:.1f} s = {cpu_roll / replicas * 1000:.2f} ms a pod replaced; "
            f"hollow CPU {hcpu_roll:.1f} s = {hcpu_roll / replicas * 1000:.2f} ms a pod replaced; "
            f"RSS {self.sampler.peak_rss / 2**20:.0f} MiB; load {loadavg()}",
            flush=True,
        )
        above = (cpu_roll - idle * wall) / replicas * 1000, (hcpu_roll - hidle * wall) / replicas * 1000
        print(f"    above idle: server {above[0]:.2f} ms, hollow {above[1]:.2f} ms a pod replaced", flush=True)
        await self.client.delete(f"{path}/big")

    async def _wait_rollout(self, path: str, replicas: int, generation: int, timeout: float) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            d = await self.client.get(path)
            st = d.get("status") or {}
            if (
                st.get("observedGeneration", 0) >= generation
                and st.get("updatedReplicas", 0) == replicas
                and st.get("availableReplicas", 0) == replicas
                and st.get("replicas", 0) == replicas
            ):
                return time.monotonic() - t0
            await asyncio.sleep(0.5)
        await self._show_unavailable(f"/api/v1/namespaces/{path.split('/')[5]}/pods")
        return None

    async def _show_unavailable(self, pods_path: str, limit: int = 10) -> None:
        """A rollout that did not finish: which pods are not ready, where, and why."""
        pods = (await self.client.get(pods_path))["items"]
        stuck = [
            p
            for p in pods
            if not any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        print(f"  {len(stuck)} of {len(pods)} pods not ready; the first {min(limit, len(stuck))}:")
        for p in stuck[:limit]:
            st = p.get("status") or {}
            print(
                f"    {p['metadata']['name']} node={p['spec'].get('nodeName')} phase={st.get('phase')} "
                f"deleting={bool(p['metadata'].get('deletionTimestamp'))} conditions="
                f"{[(c.get('type'), c.get('status'), c.get('reason')) for c in st.get('conditions') or []]} "
                f"containers={[(c.get('name'), c.get('state')) for c in st.get('containerStatuses') or []]}"
            )


def report(r: StepResult, backend: str) -> None:
    s = r.samples

    def row(what: str, values: list[float], target: float) -> None:
        print(
            f"    {what:<34} p50 {fmt_s(percentile(values, 50)):>9}  p99 {fmt_s(percentile(values, 99)):>9}"
            f"  (n={len(values)}, target p99 <= {target:g} s)"
        )

    print(f"  --- {r.nodes} nodes, {r.pods} pods ({r.running} Running), {backend}; load average {r.load}")
    print(f"    targets: {TARGET_NODES} nodes and {TARGET_PODS} pods on SQLite; created at {r.create_rate:.1f} pods/s")
    print("    client-side (the benchmark's own requests, TLS and its event loop included):")
    row("mutating calls", s.mutating, TARGET_MUTATING_S)
    row("GET pod (namespaced)", s.get_ns, TARGET_READ_S)
    row("GET node (cluster-scoped)", s.get_cluster, TARGET_READ_S)
    row("LIST pods of a namespace", s.list_ns, TARGET_LIST_NS_S)
    row("LIST nodes / pods page (cluster)", s.list_cluster, TARGET_LIST_CLUSTER_S)
    row("pod startup (seen → Running)", r.startup, TARGET_STARTUP_S)
    sched = r.scheduling
    print(
        f"    {'  of which seen → bound':<34} p50 {fmt_s(percentile(sched, 50)):>9}"
        f"  p99 {fmt_s(percentile(sched, 99)):>9}  (n={len(sched)})"
    )
    lag = s.watch_lag
    print(
        f"    {'watch delivery lag':<34} p50 {fmt_s(percentile(lag, 50)):>9}  p99 {fmt_s(percentile(lag, 99)):>9}"
        f"  (n={len(lag)})"
    )
    print("    server-side (apiserver_request_duration_seconds, p99 as the bucket bound it falls in):")
    for name, p99, n, target in r.server_side:
        print(f"      {name:<32} p99 <= {fmt_s(p99):>9}  (n={n}, target p99 <= {target:g} s)")
    print(
        f"    server: {r.server_cpu_cores:.2f} cores, peak RSS {r.server_rss / 2**20:.0f} MiB "
        f"(target <= {TARGET_RSS / 2**20:.0f} MiB); hollow nodes: RSS {r.hollow_rss / 2**20:.0f} MiB "
        f"({r.hollow_rss / 2**20 / max(1, r.nodes):.2f} MiB a node), {r.hollow_cpu_cores:.2f} cores"
    )
    others = r.machine_busy_cores - r.server_cpu_cores - r.hollow_cpu_cores - r.client_cpu_cores
    print(
        f"    CPU over the step (cores): server {r.server_cpu_cores:.2f} ({r.server_cpu_cores / r.nodes * 1000:.2f} ms"
        f" a node a second), hollow {r.hollow_cpu_cores:.2f} ({r.hollow_cpu_cores / r.nodes * 1000:.2f} ms a node a"
        f" second), benchmark client {r.client_cpu_cores:.2f}, rest of the machine {max(0.0, others):.2f} "
        f"(busy {r.machine_busy_cores:.2f} of {os.cpu_count()})"
    )
    sw, hw, cw = r.run_queue_wait
    print(
        f"    waiting for a CPU (run queue, seconds a second, summed over threads): server {sw:.2f}, "
        f"hollow {hw:.2f}, benchmark client {cw:.2f}"
    )
    if s.errors:
        print(f"    {len(s.errors)} request errors, first: {s.errors[0]}")


async def amain(args: argparse.Namespace) -> int:
    # SIGINT/SIGTERM cancel the run, so the cleanup below stops everything by PID.
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, me.cancel)
    work = Path(tempfile.mkdtemp(prefix="orch-bench-scale-"))
    etcd = None
    server = None
    fleet = None
    client = None
    try:
        if args.backend == "etcd":
            etcd = Etcd(base_dir=work)
            etcd.start()
            server = ApiServerProcess(
                work / "srv", free_port(), backend="etcd", etcd_endpoint=etcd.endpoint, etcd_prefix="/bench"
            )
        elif args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            server = ProfiledServer(work / "srv", free_port(), profile_dir=str(Path(args.profile).resolve()))
        else:
            server = ApiServerProcess(work / "srv", free_port())
        if args.loop_watch:
            Path(args.loop_watch).mkdir(parents=True, exist_ok=True)
            server = WatchedApiServerProcess(
                server.data_dir,
                server.port,
                backend=server.backend,
                etcd_endpoint=server.etcd_endpoint,
                etcd_prefix=server.etcd_prefix,
                report=Path(args.loop_watch).resolve() / "apiserver.txt",
            )
        server.start(timeout=60)
        client = ApiClient(load_orchconfig(str(server.kubeconfig)), qps=-1, timeout=120)
        await ensure_namespace(client, PROBE_NS)
        profile_dir = str(Path(args.profile).resolve()) if args.profile else ""
        fleet = Fleet(
            server,
            work / "hollow",
            args.nodes_per_process,
            profile_dir,
            nice=args.hollow_nice if (args.hollow_nice or args.priority) else None,
            loop_watch=str(Path(args.loop_watch).resolve()) if args.loop_watch else "",
        )
        bench = Bench(client, server, fleet)
        bench.idle_seconds = args.idle
        if args.priority:
            # The measurement must reflect the server, not the load generator or other users of
            # the machine: the server and this client run at a higher priority (needs root).
            for pid in (os.getpid(), server.pid or 0):
                psutil.Process(pid).nice(-args.priority)
        tasks = [asyncio.create_task(bench.sampler.run()), asyncio.create_task(bench.pods.run())]
        print(
            f"bench_scale: backend {args.backend}, {args.nodes} nodes / {args.pods} pods over {args.duration:g} s"
            f"{f', step {args.step} to {args.max_nodes}' if args.step else ''}; "
            f"{args.nodes_per_process} hollow nodes a process; "
            f"{os.cpu_count()} CPUs, load average {loadavg()}",
            flush=True,
        )
        held: int | None = None  # the last node count at which every SLI held
        broke_at: int | None = None
        nodes = args.nodes
        try:
            while True:
                pods = round(args.pods * nodes / args.nodes)
                try:
                    result = await bench.step(nodes, pods, args.duration)
                except NodesNotReady as exc:
                    print(f"    broken at {nodes} nodes: {exc} (load average {loadavg()})")
                    broke_at = nodes
                    break
                report(result, args.backend)
                broken = result.broken()
                if broken:
                    print(f"    SLI broken at {nodes} nodes: {'; '.join(broken)}")
                    broke_at = nodes
                    break
                held = nodes
                if not args.step or nodes + args.step > args.max_nodes:
                    break
                nodes += args.step
            if broke_at is None:
                print(f"  knee: not reached (every SLI held up to {held} nodes)")
            elif held is None:
                print(f"  knee: below {broke_at} nodes (an SLI broke at the first step)")
            else:
                print(f"  knee: {held} nodes (the last count at which every SLI held; broken at {broke_at})")
            if args.replicas:
                await bench.big_deployment(args.replicas, timeline=args.timeline)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return 0
    finally:
        if fleet is not None:
            await fleet.stop()
        if client is not None:
            await client.close()
        if server is not None:
            if args.keep_log:
                Path(args.keep_log).mkdir(parents=True, exist_ok=True)
                shutil.copy(server.log_path, Path(args.keep_log) / "apiserver.log")
                for log in (work / "hollow").glob("*.log"):
                    shutil.copy(log, Path(args.keep_log) / log.name)
            server.stop()
        if etcd is not None:
            etcd.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=50, help="hollow nodes in the first step")
    ap.add_argument("--pods", type=int, default=1000, help="pods at --nodes (in proportion at later steps)")
    ap.add_argument("--backend", choices=("sqlite", "etcd"), default="sqlite")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds over which each step creates its pods")
    ap.add_argument("--step", type=int, default=0, help="nodes added per step until an SLI breaks (0: one step)")
    ap.add_argument("--max-nodes", type=int, default=TARGET_NODES, help="last node count tried with --step")
    ap.add_argument(
        "--nodes-per-process",
        type=int,
        default=0,
        help=f"hollow nodes per process (default: --nodes spread over the CPUs, at most {MAX_NODES_PER_PROCESS})",
    )
    ap.add_argument("--replicas", type=int, default=0, help="then a Deployment of this many replicas (issue 19)")
    ap.add_argument("--timeline", action="store_true", help="print the big Deployment's timeline, a row a second")
    ap.add_argument(
        "--profile",
        default="",
        help="cProfile the server (SQLite) and the hollow processes during the rolling update (files in DIR)",
    )
    ap.add_argument("--keep-log", default="", help="copy the server's and the hollow nodes' logs here")
    ap.add_argument(
        "--loop-watch", default="", help="write event-loop stall reports (tests/bench/loopwatch.py) into this dir"
    )
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of steady state measured before each step's pods")
    ap.add_argument(
        "--priority",
        type=int,
        default=0,
        help="run the server and the benchmark's client at nice -N (root), above the hollow nodes and other load",
    )
    ap.add_argument("--hollow-nice", type=int, default=0, help="run the hollow processes at this nice value (0..19)")
    args = ap.parse_args(argv)
    if not 0 <= args.hollow_nice <= 19 or not 0 <= args.priority <= 20 or args.idle < 0:
        ap.error("--hollow-nice must be 0..19, --priority 0..20, --idle >= 0")
    if args.nodes < 1 or args.pods < 0 or args.duration <= 0 or args.nodes_per_process < 0:
        ap.error("--nodes must be >= 1, --nodes-per-process >= 0, --pods >= 0, --duration > 0")
    if not args.nodes_per_process:
        args.nodes_per_process = min(MAX_NODES_PER_PROCESS, math.ceil(args.nodes / (os.cpu_count() or 1)))
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
