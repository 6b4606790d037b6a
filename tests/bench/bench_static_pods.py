"""Static pods on the real containerd against the raw CRI sequence (not a test):
python -m tests.bench.bench_static_pods [--quick] [--profile FILE | --trace FILE] [--agent-v N]
[--keep-log FILE]

Starts a private containerd (tests/components.py) with the test images, a
private cgroup root in every hierarchy, and one ``orch-agent`` process with a
manifest directory. In the same run, on the same containerd, it measures:

(a) start latency of one static pod (one ``orch.local/busybox:1`` container
    running ``sleep 3600``, pod network), manifest written -> container
    running, for N pods one at a time (they accumulate, as the raw ones do),
    against the raw sequence RunPodSandbox + CreateContainer + StartContainer
    issued here through ``cri.client.CriClient`` with equivalent configs.
    Targets: agent p50 <= raw p50 + 150 ms, agent p99 <= 1 s;
(b) 30 manifests written together -> all 30 containers running, against 30
    concurrent raw sequences. Target: <= 1.5 x raw;
(c) the agent's RSS and CPU (% of one core, averaged over an idle window) with
    0 and with 30 running pods (psutil on the agent process; containerd's CPU
    over the same window is shown for context). Targets: RSS <= 60 MB idle and
    <= 70 MB at 30 pods (issue 22), CPU <= 3 % of a core at 30 pods.

"Running" is read from the runtime, not from the agent: the benchmark polls
CRI ListContainers (state RUNNING, every 20 ms) and then takes each
container's ``started_at`` from ContainerStatus, the moment containerd
recorded the task start. The same clock (``started_at`` minus the wall time
the work began) is used for the raw runs, so polling granularity is in neither
figure; the first-seen-by-polling latency is printed beside it. The benchmark
does not poll while idle figures are taken.

Everything is removed at the end: agent pods by deleting their manifests, raw
sandboxes by StopPodSandbox + RemovePodSandbox, then the agent, the cgroup root
and containerd. ``--profile FILE`` runs the agent under cProfile and writes
the stats there at exit (read with ``python -m pstats FILE``); ``--trace FILE``
times the agent's pod path and every CRI call it makes instead (see _TRACED).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import secrets
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import names
from cri import api_pb2 as pb
from cri.client import CriClient, NotFoundError
from tests.bench.bench_cri import container_config, sandbox_config
from tests.components import Containerd, free_port, image_builder

BUSYBOX = "orch.local/busybox:1"
NODE = "bench-node"
CGROUP_FS = Path("/sys/fs/cgroup")
POLL_S = 0.020
P50_OVER_RAW_S = 0.150
P99_TARGET_S = 1.0
BURST_RATIO_TARGET = 1.5
RSS_TARGET_MB = 70.0  # with 30 pods
RSS_IDLE_TARGET_MB = 60.0  # with none
CPU_TARGET_PCT = 3.0
RAW_LABEL = {"orch.io/bench": "static-pods-raw"}
MANAGED = {names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE}

# `--trace FILE`: the agent runs under this wrapper, which appends one line per call
# of the functions below (and per CRI call) to FILE: "<wall start> <seconds> <what>".
# The benchmark appends its own "<wall> 0 WRITE <pod>" lines, so one file shows
# where the time between a manifest write and the container start goes.
_TRACED = [
    ("agent.sources.file", "FileSource", "read_once"),
    ("agent.sources.merge", "PodConfig", "push"),
    ("agent.workers", "PodPipeline", "handle"),
    ("agent.workers", "PodPipeline", "_sync"),
    ("agent.workers", "PodPipeline", "_housekeeping"),
    ("agent.runtime.manager", "RuntimeManager", "runtime_pod"),
    ("agent.runtime.manager", "RuntimeManager", "sync_pod"),
    ("agent.runtime.manager", "RuntimeManager", "relist"),
    ("agent.runtime.manager", "RuntimeManager", "learn_sandbox_image"),
    ("agent.runtime.manager", "RuntimeManager", "_start_container"),
    ("agent.runtime.images", "ImageManager", "ensure"),
    ("agent.runtime.volumes", "VolumeManager", "setup"),
    ("agent.cm.manager", "ContainerManager", "ensure_pod"),
    ("agent.cm.manager", "ContainerManager", "update_qos"),
]
_TRACER = """
import functools, importlib, inspect, runpy, sys, time
out = open(sys.argv.pop(1), "a", buffering=1)
def wrap(label, fn):
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def traced(*a, **k):
            t0 = time.time()
            try:
                return await fn(*a, **k)
            finally:
                out.write(f"{t0:.6f} {time.time() - t0:.6f} {label(a)}\\n")
    else:
        @functools.wraps(fn)
        def traced(*a, **k):
            t0 = time.time()
            try:
                return fn(*a, **k)
            finally:
                out.write(f"{t0:.6f} {time.time() - t0:.6f} {label(a)}\\n")
    return traced
for module, cls, attr in TRACED:
    c = getattr(importlib.import_module(module), cls)
    setattr(c, attr, wrap(lambda a, n=f"{cls}.{attr}": n, getattr(c, attr)))
from cri.client import CriClient
CriClient._call = wrap(lambda a: f"CRI.{a[2]}", CriClient._call)
sys.argv[0] = "agent.cli"
runpy.run_module("agent.cli", run_name="__main__", alter_sys=True)
"""


# --- cgroup root --------------------------------------------------------------------------


def _hierarchies() -> list[Path]:
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()]


def make_cgroup_root(rel: str) -> None:
    for root in _hierarchies():
        (root / rel.strip("/")).mkdir(exist_ok=True)


def remove_cgroup_root(rel: str) -> list[str]:
    """Remove the tree deepest first; the directories that would not go."""
    left = []
    for root in _hierarchies():
        base = root / rel.strip("/")
        if not base.is_dir():
            continue
        for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [base]:
            try:
                d.rmdir()
            except OSError:
                left.append(str(d))
    return left


# --- the agent process --------------------------------------------------------------------


class AgentProcess:
    """One orch-agent with a manifest directory and its HTTPS read-only view."""

    def __init__(
        self,
        work: Path,
        containerd: Containerd,
        cgroup_root: str,
        *,
        verbosity: int,
        profile: str | None,
        trace: str | None = None,
    ) -> None:
        self.work = work
        self.manifests = work / "manifests"
        self.manifests.mkdir(parents=True)
        self.log = work / "agent.log"
        self.port = free_port()
        self.containerd = containerd
        self.cgroup_root = cgroup_root
        self.verbosity = verbosity
        self.profile = profile
        self.trace = trace
        self.proc: subprocess.Popen | None = None
        self.ssl = ssl.create_default_context()
        self.ssl.check_hostname = False
        self.ssl.verify_mode = ssl.CERT_NONE

    def start(self) -> None:
        runner = [sys.executable]
        if self.profile:
            runner += ["-m", "cProfile", "-o", self.profile, "-m", "agent.cli"]
        elif self.trace:
            runner += ["-c", f"TRACED = {_TRACED!r}\n{_TRACER}", self.trace]
        else:
            runner += ["-m", "agent.cli"]
        argv = runner + [
            f"--root-dir={self.work / 'root'}",
            f"--pod-manifest-path={self.manifests}",
            f"--hostname-override={NODE}",
            f"--container-runtime-endpoint=unix://{self.containerd.socket}",
            f"--port={self.port}",
            "--address=127.0.0.1",
            "--healthz-port=0",
            f"--cert-dir={self.work / 'pki'}",
            f"--cgroup-root={self.cgroup_root}",
            "--fail-swap-on=false",
            "--deprecation-warnings=false",
            f"-v={self.verbosity}",
        ]
        self.proc = subprocess.Popen(
            argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while self.pods_view() is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent's /pods not up after 30 s:\n{self.tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def pods_view(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/pods", context=self.ssl, timeout=2) as r:
                return json.loads(r.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def write(self, name: str) -> None:
        """Atomically, as an operator's tool would: a dot-file (ignored) renamed into place."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "sleep", "image": BUSYBOX, "command": ["sleep", "3600"]}],
            },
        }
        tmp = self.manifests / f".{name}.tmp"
        tmp.write_text(yaml.safe_dump(pod))
        if self.trace:
            with open(self.trace, "a") as f:
                f.write(f"{time.time():.6f} 0 WRITE {name}\n")
        os.replace(tmp, self.manifests / f"{name}.yaml")

    def remove_all(self) -> None:
        for f in self.manifests.iterdir():
            f.unlink()

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid  # under cProfile too: it runs the agent in its own process


# --- measuring "running" from the runtime ---------------------------------------------------


async def wait_running(
    cri: CriClient, pod_names: set[str], deadline_s: float = 60.0
) -> tuple[dict[str, int], dict[str, int]]:
    """Poll ListContainers every 20 ms until each named pod (CRI pod-name label) has a
    running container; (pod -> started_at ns, pod -> first-seen wall ns)."""
    seen: dict[str, int] = {}
    ids: dict[str, str] = {}
    deadline = time.monotonic() + deadline_s
    while len(seen) < len(pod_names):
        if time.monotonic() > deadline:
            missing = sorted(pod_names - set(seen))
            raise RuntimeError(f"{len(missing)} pods not running after {deadline_s:g} s: {missing[:5]}")
        containers = await cri.list_containers(state=pb.CONTAINER_RUNNING, label_selector=MANAGED)
        now = time.time_ns()
        for c in containers:
            pod = c.labels.get(names.CRI_LABEL_POD_NAME, "")
            if pod in pod_names and pod not in seen:
                seen[pod] = now
                ids[pod] = c.id
        if len(seen) < len(pod_names):
            await asyncio.sleep(POLL_S)
    started = {}
    for pod, cid in ids.items():
        started[pod] = (await cri.container_status(cid)).status.started_at
    return started, seen


async def wait_agent_pods_gone(cri: CriClient, agent: AgentProcess, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        sandboxes = await cri.list_pod_sandbox(label_selector=MANAGED)
        view = await asyncio.to_thread(agent.pods_view) or {"items": [1]}
        if not sandboxes and not view["items"]:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"agent pods not gone after {timeout:g} s: {len(sandboxes)} sandboxes, "
                f"{len(view['items'])} in /pods\n{agent.tail()}"
            )
        await asyncio.sleep(0.2)


# --- the raw CRI sequence ----------------------------------------------------------------------


class RawPods:
    """Sandboxes the benchmark creates itself, so that it can always remove them."""

    def __init__(self, cri: CriClient, cgroup_parent: str, log_root: Path) -> None:
        self.cri = cri
        self.cgroup_parent = cgroup_parent
        self.log_root = log_root
        self.sandboxes: list[str] = []
        self.calls: dict[str, list[float]] = {"RunPodSandbox": [], "CreateContainer": [], "StartContainer": []}

    async def start(self, name: str) -> tuple[int, float]:
        """One pod: (container started_at ns, seconds until StartContainer returned)."""
        config = sandbox_config(name, self.cgroup_parent, self.log_root)
        config.labels.update(RAW_LABEL)
        t0 = time.perf_counter()
        sandbox_id = await self.cri.run_pod_sandbox(config)
        self.sandboxes.append(sandbox_id)
        t1 = time.perf_counter()
        container_id = await self.cri.create_container(sandbox_id, container_config(), config)
        t2 = time.perf_counter()
        await self.cri.start_container(container_id)
        t3 = time.perf_counter()
        returned = t3 - t0
        for call, took in zip(self.calls, (t1 - t0, t2 - t1, t3 - t2)):
            self.calls[call].append(took)
        started_at = (await self.cri.container_status(container_id)).status.started_at
        return started_at, returned

    async def remove_all(self) -> None:
        async def one(sandbox_id: str) -> None:
            try:
                await self.cri.stop_pod_sandbox(sandbox_id)
                await self.cri.remove_pod_sandbox(sandbox_id)
            except NotFoundError:
                pass

        ids, self.sandboxes = self.sandboxes, []
        await asyncio.gather(*(one(s) for s in ids))
        left = await self.cri.list_pod_sandbox(label_selector=RAW_LABEL)
        await asyncio.gather(*(one(s.id) for s in left))


# --- the phases ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Sequential:
    raw: list[float] = dataclasses.field(default_factory=list)  # started_at - t0
    raw_returned: list[float] = dataclasses.field(default_factory=list)  # StartContainer returned
    raw_calls: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    agent: list[float] = dataclasses.field(default_factory=list)  # started_at - written
    agent_polled: list[float] = dataclasses.field(default_factory=list)  # first seen by polling


@dataclasses.dataclass
class Burst:
    pods: int = 0
    raw: float = 0.0
    agent: float = 0.0
    agent_polled: float = 0.0
    agent_each: list[float] = dataclasses.field(default_factory=list)
    raw_containerd_cpu: float = 0.0  # CPU seconds containerd used during the raw burst
    agent_containerd_cpu: float = 0.0  # ... during the agent's burst
    agent_cpu: float = 0.0  # CPU seconds the agent used during its burst


@dataclasses.dataclass
class Idle:
    pods: int
    seconds: float
    rss_mb: float
    cpu_pct: float
    containerd_cpu_pct: float


def full_name(name: str) -> str:
    return f"{name}-{NODE}"


async def sequential(cri: CriClient, raw: RawPods, agent: AgentProcess, count: int) -> Sequential:
    """Raw pod i, then agent pod i, alternately: both see the same runtime load (the
    pods accumulate) and the same drift of the machine over the phase."""
    out = Sequential()
    raw.calls = {call: [] for call in raw.calls}
    for i in range(count):
        t0 = time.time_ns()
        started_at, returned = await raw.start(f"rawseq-{i}")
        out.raw.append((started_at - t0) / 1e9)
        out.raw_returned.append(returned)
        name = f"seq-{i}"
        t0 = time.time_ns()
        agent.write(name)
        started, seen = await wait_running(cri, {full_name(name)})
        out.agent.append((started[full_name(name)] - t0) / 1e9)
        out.agent_polled.append((seen[full_name(name)] - t0) / 1e9)
    out.raw_calls = {call: list(took) for call, took in raw.calls.items()}
    await raw.remove_all()
    agent.remove_all()
    await wait_agent_pods_gone(cri, agent)
    return out


def cpu_seconds(*pids: int | None) -> list[float]:
    out = []
    for pid in pids:
        times = psutil.Process(pid).cpu_times() if pid else None
        out.append(times.user + times.system if times else float("nan"))
    return out


async def burst(cri: CriClient, raw: RawPods, agent: AgentProcess, count: int, containerd_pid: int | None) -> Burst:
    """Raw first, then the agent; leaves the agent's pods running (for the idle figures)."""
    out = Burst(count)
    t0 = time.time_ns()
    c0 = cpu_seconds(containerd_pid)
    results = await asyncio.gather(*(raw.start(f"rawburst-{i}") for i in range(count)))
    out.raw = (max(started for started, _ in results) - t0) / 1e9
    out.raw_containerd_cpu = cpu_seconds(containerd_pid)[0] - c0[0]
    await raw.remove_all()
    wanted = {full_name(f"burst-{i}") for i in range(count)}
    c0 = cpu_seconds(containerd_pid, agent.pid())
    t0 = time.time_ns()
    for i in range(count):
        agent.write(f"burst-{i}")
    started, seen = await wait_running(cri, wanted)
    c1 = cpu_seconds(containerd_pid, agent.pid())
    out.agent_containerd_cpu, out.agent_cpu = c1[0] - c0[0], c1[1] - c0[1]
    out.agent = (max(started.values()) - t0) / 1e9
    out.agent_polled = (max(seen.values()) - t0) / 1e9
    out.agent_each = sorted((s - t0) / 1e9 for s in started.values())
    return out


def idle(agent_pid: int, containerd_pid: int | None, pods: int, seconds: float) -> Idle:
    """CPU of one core averaged over `seconds`, and RSS at the end (blocking: nothing
    else of the benchmark runs meanwhile)."""
    proc = psutil.Process(agent_pid)
    ctrd = psutil.Process(containerd_pid) if containerd_pid else None
    c0 = proc.cpu_times()
    d0 = ctrd.cpu_times() if ctrd else None
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    c1 = proc.cpu_times()
    d1 = ctrd.cpu_times() if ctrd else None
    cpu = (c1.user + c1.system - c0.user - c0.system) / wall * 100
    dcpu = ((d1.user + d1.system - d0.user - d0.system) / wall * 100) if ctrd and d0 else float("nan")
    return Idle(pods, wall, proc.memory_info().rss / 2**20, cpu, dcpu)


# --- report ---------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 20 samples is their maximum)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(seq: Sequential, bst: Burst, idles: list[Idle], runtime: str) -> bool:
    rows: list[tuple[str, str, str, str, str]] = []
    raw50, raw99 = pct(seq.raw, 50), pct(seq.raw, 99)
    a50, a99 = pct(seq.agent, 50), pct(seq.agent, 99)
    n = len(seq.agent)
    rows.append(
        (
            f"(a) start, 1 at a time, p50 (n={n})",
            f"{a50 * 1000:.0f} ms",
            f"{raw50 * 1000:.0f} ms",
            f"<= raw + {P50_OVER_RAW_S * 1000:.0f} ms = {(raw50 + P50_OVER_RAW_S) * 1000:.0f} ms",
            verdict(a50 <= raw50 + P50_OVER_RAW_S),
        )
    )
    rows.append(
        (
            f"(a) start, 1 at a time, p99 (n={n})",
            f"{a99 * 1000:.0f} ms",
            f"{raw99 * 1000:.0f} ms",
            f"<= {P99_TARGET_S * 1000:.0f} ms",
            verdict(a99 <= P99_TARGET_S),
        )
    )
    rows.append(
        (
            f"(b) {bst.pods} pods at once, all running",
            f"{bst.agent:.2f} s",
            f"{bst.raw:.2f} s",
            f"<= {BURST_RATIO_TARGET:g} x raw = {BURST_RATIO_TARGET * bst.raw:.2f} s",
            verdict(bst.agent <= BURST_RATIO_TARGET * bst.raw),
        )
    )
    for i in idles:
        target = i.pods >= 30
        rss_target = RSS_TARGET_MB if target else RSS_IDLE_TARGET_MB if i.pods == 0 else None
        rows.append(
            (
                f"(c) agent RSS, {i.pods} idle pods",
                f"{i.rss_mb:.1f} MB",
                "",
                f"<= {rss_target:g} MB" if rss_target is not None else "(info)",
                verdict(i.rss_mb <= rss_target) if rss_target is not None else "",
            )
        )
        rows.append(
            (
                f"(c) agent CPU, {i.pods} idle pods ({i.seconds:.0f} s)",
                f"{i.cpu_pct:.2f} %",
                "",
                f"<= {CPU_TARGET_PCT:g} % of a core" if target else "(info)",
                verdict(i.cpu_pct <= CPU_TARGET_PCT) if target else "",
            )
        )
        rows.append(("    containerd CPU meanwhile", f"{i.containerd_cpu_pct:.2f} %", "", "(info)", ""))
    head = ("figure", "agent", "raw CRI", "target", "")
    widths = [max(len(r[k]) for r in rows + [head]) for k in range(5)]
    print(f"\nstatic pods vs raw CRI on {runtime}, {os.cpu_count()} cores")
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"\n(a) agent per pod, ms:     {' '.join(f'{v * 1000:.0f}' for v in seq.agent)}")
    print(
        f"    agent first seen by 20 ms polling: p50 {pct(seq.agent_polled, 50) * 1000:.0f} ms, "
        f"max {max(seq.agent_polled) * 1000:.0f} ms"
    )
    print(f"    raw per pod, ms:       {' '.join(f'{v * 1000:.0f}' for v in seq.raw)}")
    print(
        f"    raw StartContainer returned: p50 {pct(seq.raw_returned, 50) * 1000:.0f} ms, "
        f"max {max(seq.raw_returned) * 1000:.0f} ms; per call p50: "
        + ", ".join(f"{call} {pct(took, 50) * 1000:.0f} ms" for call, took in seq.raw_calls.items())
    )
    print(
        f"(b) agent pods running at (s): first {bst.agent_each[0]:.2f}, median "
        f"{statistics.median(bst.agent_each):.2f}, last {bst.agent_each[-1]:.2f}; "
        f"last seen by polling {bst.agent_polled:.2f}"
    )
    print(
        f"    CPU seconds until all ran: containerd {bst.agent_containerd_cpu:.2f} + agent "
        f"{bst.agent_cpu:.2f} (raw burst: containerd {bst.raw_containerd_cpu:.2f})"
    )
    return all(r[4] != "MISS" for r in rows)


def summarize_trace(path: str) -> None:
    """Per traced function: calls and p50/max duration while the sequential pods started
    (from the first seq- write to the last seq- write plus 0.5 s)."""
    lines = []
    with open(path) as f:
        for raw_line in f:
            parts = raw_line.split()
            if len(parts) >= 3:
                lines.append((float(parts[0]), float(parts[1]), parts[2], " ".join(parts[3:])))
    writes = [t for t, _, what, arg in lines if what == "WRITE" and arg.startswith("seq-")]
    if not writes:
        return
    start, end = min(writes), max(writes) + 0.5
    took: dict[str, list[float]] = {}
    for t, d, what, _ in lines:
        if start <= t <= end and what != "WRITE":
            took.setdefault(what, []).append(d)
    print(f"\nagent trace while the {len(writes)} sequential pods started ({path}):")
    for what, ds in sorted(took.items(), key=lambda kv: -sum(kv[1])):
        print(
            f"  {what:40s} {len(ds):4d} calls  p50 {pct(ds, 50) * 1000:7.1f} ms  "
            f"max {max(ds) * 1000:7.1f} ms  total {sum(ds) * 1000:8.1f} ms"
        )


# --- main -----------------------------------------------------------------------------------------


async def bench(containerd: Containerd, agent: AgentProcess, args, log_root: Path, raw_parent: str) -> bool:
    async with CriClient(containerd.endpoint, request_timeout=60) as cri:
        version = await cri.version()
        runtime = f"{version.runtime_name} {version.runtime_version}"
        raw = RawPods(cri, raw_parent, log_root)
        try:
            # Warm-up of both paths: first sandbox pays for snapshots and CNI set-up,
            # the agent's first pod for its lazy imports and its first cgroup work.
            for i in range(2):
                await raw.start(f"warm-{i}")
            await raw.remove_all()
            agent.write("warm")
            await wait_running(cri, {full_name("warm")})
            agent.remove_all()
            await wait_agent_pods_gone(cri, agent)
            await asyncio.sleep(args.settle)

            idles = [await asyncio.to_thread(idle, agent.pid(), containerd.pid, 0, args.idle)]
            seq = await sequential(cri, raw, agent, args.pods)
            bst = await burst(cri, raw, agent, args.burst, containerd.pid)
            await asyncio.sleep(args.settle)  # let the post-start syncs and probes go quiet
            idles.append(await asyncio.to_thread(idle, agent.pid(), containerd.pid, args.burst, args.idle))
            agent.remove_all()
            await wait_agent_pods_gone(cri, agent)
        finally:
            await raw.remove_all()
            agent.remove_all()
    return report(seq, bst, idles, runtime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 sequential pods, 8 s idle windows")
    ap.add_argument("--pods", type=int, default=None, help="pods started one at a time (20)")
    ap.add_argument("--burst", type=int, default=30, help="pods written together (30)")
    ap.add_argument("--idle", type=float, default=None, help="idle window in seconds (20)")
    ap.add_argument("--settle", type=float, default=None, help="quiet time before an idle window (5)")
    ap.add_argument("--agent-v", type=int, default=2, help="the agent's -v (2)")
    ap.add_argument("--profile", default=None, help="run the agent under cProfile, stats to this file")
    ap.add_argument(
        "--trace", default=None, help="time the agent's pod path and CRI calls, one line per call, to this file"
    )
    ap.add_argument("--keep-log", default=None, help="copy the agent's log here at the end")
    args = ap.parse_args()
    args.pods = args.pods or (8 if args.quick else 20)
    args.idle = args.idle or (8.0 if args.quick else 20.0)
    args.settle = args.settle if args.settle is not None else (3.0 if args.quick else 5.0)

    cgroup_root = f"/orch-bench-{secrets.token_hex(4)}"
    ok = False
    with tempfile.TemporaryDirectory(prefix="orch-bench-static-") as tmp:
        work = Path(tmp)
        make_cgroup_root(cgroup_root)
        agent = None
        try:
            with Containerd() as containerd:
                image_builder().ensure_images(containerd.address)
                agent = AgentProcess(
                    work / "agent",
                    containerd,
                    cgroup_root,
                    verbosity=args.agent_v,
                    profile=args.profile,
                    trace=args.trace,
                )
                agent.start()
                try:
                    ok = asyncio.run(bench(containerd, agent, args, work / "logs", f"{cgroup_root}/raw"))
                finally:
                    agent.stop()
                    if args.keep_log:
                        shutil.copyfile(agent.log, args.keep_log)
        finally:
            left = remove_cgroup_root(cgroup_root)
            if left:
                print(f"warning: cgroup directories left behind: {left[:5]}", file=sys.stderr)
    if args.trace:
        summarize_trace(args.trace)
    if args.profile:
        print(f"agent profile written to {args.profile} (python -m pstats {args.profile})")
    print(f"\noverall: {'all targets met' if ok else 'some targets MISSED'}")


if __name__ == "__main__":
    main()
