"""API server figures (not a test):

    .venv/bin/python tests/bench/bench_apiserver.py [--backend sqlite|etcd|both] [--quick]
                                                    [--load-procs N] [--profile DIR]

Starts ``orch-apiserver`` itself (a subprocess per backend; for etcd a private
etcd from tests/components.Etcd) and prints, per backend, each figure next to
its target and to a baseline measured in the same run:

* create throughput: 64 concurrent HTTP/1.1 keep-alive connections POSTing
  2 KB pods with distinct names, counted over a fixed window; the server's CPU
  time per create (from /proc/<pid>/stat), which depends far less on how the
  two cores are shared between server and load generator than requests/s;
* get p50/p99 of existing pods (random names) at 64 connections;
* list of 10,000 pods, whole and in pages of 500 (limit/continue);
* watch delivery latency p50/p99 with 1,000 watchers: a writer creates and
  patches pods at a modest rate with its wall-clock time in an annotation;
  every watcher records receive time minus that time;
* server RSS with 10,000 pods stored (/proc/<pid>/status);
* baselines: the storage backend called directly (SqliteBackend.create with
  64 concurrent tasks, plain sqlite3 inserts in the same schema; raw aetcd
  puts with 64 in flight and EtcdBackend.create), the backend's own list of
  the same number of keys, and a bare aiohttp HTTPS server (2 KB JSON echo /
  fixed 2 KB GET) driven by the same load generator: the ceiling of HTTP on
  this machine with this client.

The load generator runs in separate processes (``--load-procs``, default 2,
64 connections in all). wrk cannot present a client certificate and the
server authenticates only by client certificate, so the load generator is a
minimal HTTP/1.1 client on asyncio streams (uvloop) in this file: per request
it costs a fraction of what aiohttp's client would. The machine has two
cores: server, load generator (and etcd) share them, so requests/s is partly
a property of the machine; server CPU per request is the steadier figure.

``--quick`` uses small counts (about a minute for both backends) and is only a
smoke run: its list, RSS and watch figures are not at the target's scale.
``--profile DIR`` also samples the server with py-spy (``--py-spy PATH``,
default: on PATH or /tmp/pyspy/bin/py-spy) during an extra create window and
an extra window of back-to-back lists, writes the raw samples to DIR and
prints the functions that dominate. ``--cprofile DIR`` does the same with the
standard library's cProfile inside the server (it is started through this
file, which switches the profiler on and off on SIGUSR1/SIGUSR2); cProfile
slows Python calls down: its create and list windows are extra ones, but the
watch figures are measured under it, so they are not comparable.
``--only PHASES`` runs a subset of the phases (for iterating on one figure).
``--gc-stats`` starts the server through this file (no profiler) and notes, per
load window, the time the cyclic garbage collector took per request: its pauses
land on whatever code allocated last, so profiles spread them thin.
``--gc-threshold T0,T1,T2`` (implies ``--gc-stats``) sets the server's collector
thresholds first: an experiment for choosing the server's own setting, whose
figures are then not the server's as shipped.

Benchmarks are not part of the test suite. Every process started here is
stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import base64
import collections
import json
import math
import os
import random
import select
import shutil
import signal
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import orjson

HOST = "127.0.0.1"
CONNECTIONS = 64
TS_ANNOTATION = "bench.orch.io/ts"
TS_MARKER = b'"' + TS_ANNOTATION.encode() + b'":"'
POD_BYTES = 2048  # request body size of a pod
CLK_TCK = os.sysconf("SC_CLK_TCK")

NS_LIST, NS_CREATE, NS_WATCH = "bench-list", "bench-create", "bench-watch"
BENCH_SCHEDULER = "orch-bench-no-scheduler"  # a scheduler name nobody serves

FULL = dict(
    fill=10_000,
    create_s=15.0,
    get_s=10.0,
    list_runs=5,
    page_runs=3,
    watchers=1000,
    watch_procs=4,
    watch_events=200,
    watch_rate=10.0,
    raw_puts=20_000,
    raw_inserts=20_000,
    echo_s=8.0,
    profile_s=8.0,
)
QUICK = dict(
    fill=1000,
    create_s=3.0,
    get_s=2.0,
    list_runs=2,
    page_runs=1,
    watchers=100,
    watch_procs=2,
    watch_events=20,
    watch_rate=20.0,
    raw_puts=2000,
    raw_inserts=2000,
    echo_s=2.0,
    profile_s=3.0,
)


def use_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


# --- pods -----------------------------------------------------------------------------


def _pod(namespace: str, name: str, annotations: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "bench", "tier": "backend", "bench.orch.io/shard": "s3"},
            "annotations": annotations,
        },
        "spec": {
            # Not the default scheduler's pods: with no nodes, the in-process scheduler
            # would answer each create with a PodScheduled=False status write and a
            # FailedScheduling Event (three writes per create), and work through
            # that backlog during the later phases. The figures are the API's.
            "schedulerName": BENCH_SCHEDULER,
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.local/bench/app:1.0",
                    "command": ["/bin/app", "--listen=:8080", "--log-level=info"],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": f"BENCH_SETTING_{i}", "value": f"value-{i:02d}-" + "x" * 16} for i in range(8)],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                }
            ],
        },
    }


def _pod_template(namespace: str) -> tuple[bytes, bytes]:
    """(prefix, suffix): prefix + name + suffix is a pod body of POD_BYTES bytes
    for an 11-character name."""
    probe = orjson.dumps(_pod(namespace, "@NAME@", {"bench.orch.io/pad": ""}))
    pad = POD_BYTES - (len(probe) - len("@NAME@") + len("pod-0000000"))
    body = orjson.dumps(_pod(namespace, "@NAME@", {"bench.orch.io/pad": "p" * max(0, pad)}))
    prefix, suffix = body.split(b"@NAME@")
    return prefix, suffix


def pod_body(namespace: str, name: str) -> bytes:
    prefix, suffix = _pod_template(namespace)
    return prefix + name.encode() + suffix


def fill_name(i: int) -> str:
    return f"pod-{i:07d}"


# --- a minimal HTTP/1.1 keep-alive client -------------------------------------------------


def client_ssl(creds: dict) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=creds["ca"])
    ctx.load_cert_chain(creds["cert"], creds["key"])
    return ctx


class HttpConn:
    """One keep-alive connection, one request at a time; Content-Length or chunked."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: bytes):
        self.r, self.w, self.host = reader, writer, host

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext) -> "HttpConn":
        reader, writer = await asyncio.open_connection(HOST, port, ssl=ctx, server_hostname=HOST, limit=1 << 20)
        return cls(reader, writer, f"{HOST}:{port}".encode())

    async def request(
        self, method: str, path: str, body: bytes = b"", ctype: bytes = b"application/json"
    ) -> tuple[int, bytes]:
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: orch-bench/1\r\nAccept: application/json\r\n" % (
            method.encode(),
            path.encode(),
            self.host,
        )
        if body or method in ("POST", "PUT", "PATCH"):
            head += b"Content-Type: %s\r\nContent-Length: %d\r\n" % (ctype, len(body))
        self.w.write(head + b"\r\n" + body)
        hdr = await self.r.readuntil(b"\r\n\r\n")
        status = int(hdr[9:12])
        lower = hdr.lower()
        i = lower.find(b"\r\ncontent-length:")
        if i >= 0:
            j = lower.find(b"\r\n", i + 2)
            data = await self.r.readexactly(int(lower[i + 17 : j]))
        elif b"\r\ntransfer-encoding: chunked" in lower:
            parts = []
            while True:
                size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.r.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        else:
            data = await self.r.read()
        return status, data

    def close(self) -> None:
        self.w.close()


# --- process bookkeeping ------------------------------------------------------------------

_STARTED: list[subprocess.Popen] = []  # every child; stopped by PID in stop_all()


def spawn(argv: list[str], **kw) -> subprocess.Popen:
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    _STARTED.append(proc)
    return proc


def stop_proc(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc in _STARTED:
        _STARTED.remove(proc)


def stop_all() -> None:
    for proc in list(_STARTED):
        stop_proc(proc, 10.0)


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu(pid: int) -> float:
    """utime + stime of a process's main thread (its event loop), seconds: a
    single-loop server saturates when this reaches one CPU, whatever its other
    threads (gRPC's) use."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy() -> float:
    """CPU seconds all CPUs spent not idle since boot (/proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: only what processes are charged
    # with (interrupt time, e.g. loopback networking, is not attributed to any process).
    return sum(fields[:3]) / CLK_TCK


def proc_mem(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out


class BenchError(RuntimeError):
    pass


# --- load generator processes -------------------------------------------------------------


class Workers:
    """Child processes running this file in ``_worker`` mode: READY, GO, RESULT lines."""

    def __init__(self, specs: list[dict], log_dir: Path):
        self.procs = []
        self.bufs: dict[int, bytes] = {}
        for spec in specs:
            log = open(log_dir / f"worker-{spec['kind']}-{spec['wid']}.log", "ab")
            proc = spawn(
                [sys.executable, __file__, "_worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
            log.close()
            proc.log_path = log_dir / f"worker-{spec['kind']}-{spec['wid']}.log"
            self.procs.append(proc)
            self.bufs[proc.pid] = b""

    def _readline(self, proc: subprocess.Popen, deadline: float) -> str:
        fd = proc.stdout.fileno()
        while b"\n" not in self.bufs[proc.pid]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"worker {proc.pid} did not answer in time; log:\n{_tail(proc.log_path)}")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise BenchError(f"worker {proc.pid} exited ({proc.wait()}); log:\n{_tail(proc.log_path)}")
                self.bufs[proc.pid] += chunk
        line, _, rest = self.bufs[proc.pid].partition(b"\n")
        self.bufs[proc.pid] = rest
        return line.decode()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            line = self._readline(proc, deadline)
            if line != "READY":
                raise BenchError(f"worker {proc.pid}: {line}\n{_tail(proc.log_path)}")

    def go(self, params: dict) -> None:
        line = ("GO " + json.dumps(params) + "\n").encode()
        for proc in self.procs:
            proc.stdin.write(line)
            proc.stdin.flush()

    def results(self, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        out = []
        for proc in self.procs:
            line = self._readline(proc, deadline)
            if not line.startswith("RESULT "):
                raise BenchError(f"worker {proc.pid}: {line}\n{_tail(proc.log_path)}")
            out.append(json.loads(line[7:]))
            proc.wait(30)
            _STARTED.remove(proc)
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc in _STARTED:
                stop_proc(proc, 5.0)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<{exc}>"


def read_latencies(paths: list[str]) -> list[float]:
    values = array.array("d")
    for path in paths:
        with open(path, "rb") as fh:
            values.frombytes(fh.read())
    return sorted(values)


def pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


# --- worker side (child processes) -------------------------------------------------------


async def _stdin_line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def load_worker(spec: dict) -> None:
    """``conns`` connections doing ``op`` (create|get) until a count or a time window ends."""
    ctx = client_ssl(spec["creds"])
    port = spec["port"]
    conns = await asyncio.gather(*(HttpConn.open(port, ctx) for _ in range(spec["conns"])))
    for conn in conns:  # TLS done, the client certificate seen, keep-alive established
        status, body = await conn.request("GET", "/version")
        if status != 200:
            raise BenchError(f"GET /version: {status} {body[:200]!r}")
    _say("READY")
    go = json.loads((await _stdin_line()).split(" ", 1)[1])
    op, ns, wid, tag = spec["op"], spec["namespace"], spec["wid"], spec["tag"]
    prefix, suffix = _pod_template(ns)
    lat = array.array("d")
    errors: collections.Counter = collections.Counter()
    first_error = ""
    ok = 0
    count = go.get("count")  # count mode: exactly these fill indices, no window
    if count is not None:
        indices = iter(range(wid, count, spec["nprocs"]))
    else:
        seq = iter(range(1 << 62))
    names_total = spec.get("names_total", 0)
    rnd = random.Random(wid)
    start_pc = time.perf_counter() + (go["start_at"] - time.time())
    end_pc = start_pc + go["duration"] if count is None else math.inf
    create_path = f"/api/v1/namespaces/{ns}/pods"

    async def run(conn: HttpConn) -> None:
        nonlocal ok, first_error
        while True:
            if count is not None:
                i = next(indices, None)
                if i is None:
                    return
                name = fill_name(i)
            else:
                if time.perf_counter() >= end_pc:
                    return
                name = f"{tag}-{wid}-{next(seq)}"
            t0 = time.perf_counter()
            if op == "create":
                status, body = await conn.request("POST", create_path, prefix + name.encode() + suffix)
                good = status == 201
            else:
                path = f"{create_path}/{fill_name(rnd.randrange(names_total))}"
                status, body = await conn.request("GET", path)
                good = status == 200
            t1 = time.perf_counter()
            if t1 < start_pc or t1 > end_pc:
                continue
            if good:
                ok += 1
                lat.append(t1 - t0)
            else:
                errors[status] += 1
                if not first_error:
                    first_error = f"{status} {body[:300]!r}"

    delay = start_pc - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    cpu0 = time.process_time()
    t_start = time.perf_counter()
    await asyncio.gather(*(run(c) for c in conns))
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - cpu0
    for conn in conns:
        conn.close()
    with open(spec["out"], "wb") as fh:
        fh.write(lat.tobytes())
    _say(
        "RESULT "
        + json.dumps(
            {
                "ok": ok,
                "errors": {str(k): v for k, v in errors.items()},
                "first_error": first_error,
                "cpu": cpu,
                "elapsed": elapsed,
                "out": spec["out"],
            }
        )
    )


class WatchProto(asyncio.Protocol):
    """One watch stream: parses the chunked response, records delivery latencies."""

    def __init__(self, request: bytes, sink: array.array):
        self.request, self.sink = request, sink
        self.buf = bytearray()
        self.line = bytearray()
        self.headers_done = False
        self.ready = asyncio.get_running_loop().create_future()
        self.count = 0
        self.other: collections.Counter = collections.Counter()
        self.closed = False
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def connection_lost(self, exc) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_exception(BenchError(f"watch connection lost before headers: {exc}"))

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.buf
        buf += data
        pos = 0
        if not self.headers_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            if head[9:12] != b"200" or b"transfer-encoding: chunked" not in head:
                if not self.ready.done():
                    self.ready.set_exception(BenchError(f"watch answered {bytes(buf[:300])!r}"))
                return
            self.headers_done = True
            self.ready.set_result(None)
            pos = end + 4
        n = len(buf)
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(buf[pos:eol].split(b";")[0], 16)
            if n < eol + 2 + size + 2:
                break
            if size == 0:
                pos = eol + 4
                break
            self.line += buf[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2
        del buf[:pos]
        line = self.line
        while True:
            nl = line.find(b"\n")
            if nl < 0:
                break
            frame = bytes(line[:nl])
            del line[: nl + 1]
            j = frame.find(TS_MARKER)
            if j < 0:
                self.other[frame[9 : frame.find(b'"', 9)].decode(errors="replace")] += 1
                continue
            j += len(TS_MARKER)
            self.sink.append(now - float(frame[j : frame.index(b'"', j)]))
            self.count += 1


async def watch_worker(spec: dict) -> None:
    loop = asyncio.get_running_loop()
    ctx = client_ssl(spec["creds"])
    request = (
        b"GET /api/v1/namespaces/%s/pods?watch=true&timeoutSeconds=900 HTTP/1.1\r\n"
        b"Host: %s:%d\r\nUser-Agent: orch-bench/1\r\nAccept: application/json\r\n\r\n"
        % (spec["namespace"].encode(), HOST.encode(), spec["port"])
    )
    sink = array.array("d")
    protos: list[WatchProto] = []
    gate = asyncio.Semaphore(32)

    async def open_one() -> None:
        async with gate:
            _, proto = await loop.create_connection(
                lambda: WatchProto(request, sink), HOST, spec["port"], ssl=ctx, server_hostname=HOST
            )
            protos.append(proto)
            await asyncio.wait_for(proto.ready, 30)

    await asyncio.gather(*(open_one() for _ in range(spec["conns"])))
    _say("READY")
    go = json.loads((await _stdin_line()).split(" ", 1)[1])
    cpu0 = time.process_time()
    expected, deadline = go["expected"], go["deadline"]
    while time.time() < deadline:
        if all(p.count >= expected or p.closed for p in protos):
            break
        await asyncio.sleep(0.05)
    other: collections.Counter = collections.Counter()
    for p in protos:
        other.update(p.other)
        p.transport.close()
    with open(spec["out"], "wb") as fh:
        fh.write(sink.tobytes())
    _say(
        "RESULT "
        + json.dumps(
            {
                "watchers": len(protos),
                "deliveries": len(sink),
                "complete": sum(1 for p in protos if p.count >= expected),
                "missing": sum(max(0, expected - p.count) for p in protos),
                "closed_early": sum(1 for p in protos if p.closed and p.count < expected),
                "other_frames": dict(other),
                "cpu": time.process_time() - cpu0,
                "out": spec["out"],
            }
        )
    )


def worker_main(spec: dict) -> None:
    use_uvloop()
    if spec["kind"] == "load":
        asyncio.run(load_worker(spec))
    elif spec["kind"] == "watch":
        asyncio.run(watch_worker(spec))
    else:
        raise SystemExit(f"unknown worker kind {spec['kind']}")


def echo_main(spec: dict) -> None:
    """A bare aiohttp HTTPS server: the HTTP ceiling of this machine (same TLS setup
    as the API server: client certificates optional, verified against the CA)."""
    from aiohttp import web

    use_uvloop()
    stored = pod_body(NS_LIST, fill_name(0))

    async def handler(request: web.Request) -> web.Response:
        if request.method == "POST":
            obj = orjson.loads(await request.read())
            return web.Response(body=orjson.dumps(obj), status=201, content_type="application/json")
        return web.Response(body=stored, content_type="application/json")

    async def main() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(spec["cert"], spec["key"])
        ctx.load_verify_locations(spec["ca"])
        ctx.verify_mode = ssl.CERT_OPTIONAL
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, HOST, spec["port"], ssl_context=ctx, backlog=1024)
        await site.start()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        _say("READY")
        await stop.wait()
        await runner.cleanup()

    asyncio.run(main())


# --- cProfile inside the server -------------------------------------------------------------


class CProfileRun:
    """One cProfile window in a server started by ``cprofile_server_main``."""

    def __init__(self, pid: int, name: str, out_dir: Path):
        self.pid, self.name, self.out_dir = pid, name, out_dir
        self.path = out_dir / f"{name}.pstats"
        self.stopped = False

    def start(self) -> None:
        os.kill(self.pid, signal.SIGUSR1)

    def stop(self, timeout: float = 60.0) -> None:
        if self.stopped:
            return
        self.stopped = True
        done = self.out_dir / f"{self.name}.done"
        done.unlink(missing_ok=True)
        (self.out_dir / "next-name").write_text(self.name)
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while not done.exists():
            if time.monotonic() > deadline:
                raise BenchError(f"the server did not write its profile {self.path} within {timeout:g}s")
            time.sleep(0.05)


GC_THRESHOLD_ENV = "ORCH_BENCH_GC_THRESHOLD"


def cprofile_server_main(out_dir: str, argv: list[str], profile: bool = True) -> int:
    """Run orch-apiserver in this process; SIGUSR1 switches cProfile on, SIGUSR2
    switches it off and writes ``<out_dir>/<name>.pstats`` (the name is read
    from ``<out_dir>/next-name``). Signal handlers run on the main thread, the
    one the server's event loop runs on, which is the thread profiled."""
    import cProfile
    import gc

    from apiserver_min.cli import main as server_main

    state: dict = {"prof": None, "gc": None, "gc_t0": 0.0}

    def gc_probe(phase: str, info: dict) -> None:
        # The collector's pauses land on whatever Python call allocated last, so a
        # profile spreads them thin; the window's total is kept apart (<name>.gc.json).
        acc = state["gc"]
        if acc is None:
            return
        if phase == "start":
            state["gc_t0"] = time.perf_counter()
        else:
            gen = info.get("generation", 0)
            acc["seconds"][gen] += time.perf_counter() - state["gc_t0"]
            acc["count"][gen] += 1

    gc.callbacks.append(gc_probe)
    if os.environ.get(GC_THRESHOLD_ENV):  # --gc-threshold: an experiment, not the server's own setting
        gc.set_threshold(*map(int, os.environ[GC_THRESHOLD_ENV].split(",")))

    def on(signum, frame) -> None:
        if state["prof"] is None:
            state["gc"] = {"seconds": [0.0, 0.0, 0.0], "count": [0, 0, 0], "tracked": len(gc.get_objects())}
            state["prof"] = cProfile.Profile()
            if profile:  # --gc-stats: the window's garbage collection alone, nothing slowed down
                state["prof"].enable()

    def off(signum, frame) -> None:
        prof, state["prof"] = state["prof"], None
        acc, state["gc"] = state["gc"], None
        name = (Path(out_dir) / "next-name").read_text().strip() or "profile"
        if prof is not None and profile:
            prof.disable()
            prof.dump_stats(str(Path(out_dir) / f"{name}.pstats"))
        if acc is not None:
            (Path(out_dir) / f"{name}.gc.json").write_text(json.dumps(acc))
        (Path(out_dir) / f"{name}.done").touch()

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    return server_main(argv)


# --- the server under test -----------------------------------------------------------------


class Server:
    """orch-apiserver as a subprocess, with the admin client credentials extracted."""

    def __init__(self, root: Path, backend: str, etcd=None, cprofile_dir: str | None = None, gc_dir: str | None = None):
        from tests.components import free_port

        self.cprofile_dir = cprofile_dir
        self.gc_dir = gc_dir
        self.backend = backend
        self.data_dir = root / f"apiserver-{backend}"
        self.port = free_port()
        self.etcd = etcd
        self.proc: subprocess.Popen | None = None
        self.log_path = root / f"apiserver-{backend}.log"
        self.creds: dict = {}

    def argv(self) -> list[str]:
        exe = Path(sys.executable).parent / "orch-apiserver"
        if self.cprofile_dir:
            argv = [sys.executable, __file__, "_cprofile_server", self.cprofile_dir]
        elif self.gc_dir:
            argv = [sys.executable, __file__, "_gc_server", self.gc_dir]
        elif exe.exists():
            argv = [str(exe)]
        else:
            argv = [sys.executable, "-m", "apiserver_min.cli"]
        argv += ["--data-dir", str(self.data_dir), "--bind-address", HOST, "--secure-port", str(self.port)]
        if self.backend == "etcd":
            argv += ["--storage-backend", "etcd3", "--etcd-servers", self.etcd.url, "--etcd-prefix", "/orch-bench"]
        return argv

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> "Server":
        # This checkout's code first (unless the caller chose a tree): the environment's
        # editable install may point at another checkout sharing the environment.
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)}
        with open(self.log_path, "ab") as log:
            self.proc = spawn(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO), env=env
            )
        deadline = time.monotonic() + timeout
        config = self.data_dir / "admin.orchconfig"
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"orch-apiserver exited with {self.proc.returncode}:\n{_tail(self.log_path)}")
            if config.exists() and self._ready():
                break
            if time.monotonic() > deadline:
                raise BenchError(f"orch-apiserver not ready after {timeout:g}s:\n{_tail(self.log_path)}")
            time.sleep(0.1)
        self._extract_creds(config)
        return self

    def _ready(self) -> bool:
        try:
            ctx = ssl.create_default_context(cafile=str(self.data_dir / "pki" / "ca.crt"))
            with urllib.request.urlopen(f"https://{HOST}:{self.port}/readyz", context=ctx, timeout=2) as resp:
                return resp.status == 200
        except (OSError, ssl.SSLError, urllib.error.URLError):
            return False

    def _extract_creds(self, config: Path) -> None:
        import yaml

        doc = yaml.safe_load(config.read_text())
        user = doc["users"][0]["user"]
        creds_dir = self.data_dir / "bench-creds"
        creds_dir.mkdir(mode=0o700, exist_ok=True)
        cert, key = creds_dir / "client.crt", creds_dir / "client.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        key.chmod(0o600)
        self.creds = {"ca": str(self.data_dir / "pki" / "ca.crt"), "cert": str(cert), "key": str(key)}

    def api(
        self, method: str, path: str, body: dict | None = None, ctype: str = "application/json"
    ) -> tuple[int, bytes]:
        req = urllib.request.Request(
            f"https://{HOST}:{self.port}{path}",
            method=method,
            data=orjson.dumps(body) if body is not None else None,
            headers={"Content-Type": ctype, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=client_ssl(self.creds), timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def stop(self) -> None:
        if self.proc is not None:
            stop_proc(self.proc, 40.0)

    def cpu(self) -> float:
        return proc_cpu(self.pid)

    def mem(self) -> dict[str, float]:
        return proc_mem(self.pid)


# --- phases ----------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, sizes: dict, root: Path):
        self.args, self.sizes, self.root = args, sizes, root
        self.rows: list[tuple] = []  # (backend, figure, measured, target, verdict, baselines)
        self.details: list[str] = []
        self.profiles: list[str] = []
        self.warnings: list[str] = []
        self._seq = 0
        self._gc_pid: int | None = None
        self._gc_dir: Path | None = None

    def out_path(self) -> str:
        self._seq += 1
        return str(self.root / f"lat-{self._seq}.bin")

    def row(self, backend, figure, measured, target="", ok=None, baselines=()) -> None:
        verdict = "" if ok is None else ("met" if ok else "MISSED")
        self.rows.append((backend, figure, measured, target, verdict, list(baselines)))

    def note(self, text: str) -> None:
        self.details.append(text)
        print(f"  {text}", flush=True)

    # -- load windows --------------------------------------------------------------

    def _load_specs(self, port: int, creds: dict, op: str, namespace: str, names_total: int = 0) -> list[dict]:
        nprocs = self.args.load_procs
        per = [CONNECTIONS // nprocs + (1 if i < CONNECTIONS % nprocs else 0) for i in range(nprocs)]
        self._seq += 1
        tag = f"w{self._seq}"
        return [
            dict(
                kind="load",
                wid=i,
                nprocs=nprocs,
                conns=per[i],
                op=op,
                namespace=namespace,
                tag=tag,
                names_total=names_total,
                port=port,
                creds=creds,
                out=self.out_path(),
            )
            for i in range(nprocs)
        ]

    def load_window(
        self,
        port: int,
        creds: dict,
        op: str,
        namespace: str,
        duration: float,
        cpu_pids: tuple[int, ...] = (),
        names_total: int = 0,
        profile: str | None = None,
        label: str = "",
    ) -> dict:
        """Run ``op`` on 64 connections for ``duration`` seconds; completions counted in the window."""
        workers = Workers(self._load_specs(port, creds, op, namespace, names_total), self.root)
        try:
            workers.wait_ready(60)
            start_at = time.time() + 0.5
            workers.go({"start_at": start_at, "duration": duration})
            time.sleep(max(0.0, start_at - time.time()))
            cpu0 = [proc_cpu(p) for p in cpu_pids]
            main0 = thread_cpu(cpu_pids[0]) if cpu_pids else 0.0
            busy0 = machine_busy()
            spy = self._start_profile(cpu_pids[0], duration - 0.5, profile) if profile else None
            gc_run = None
            if self._gc_dir is not None and cpu_pids and cpu_pids[0] == self._gc_pid and not profile:
                self._seq += 1
                gc_run = CProfileRun(self._gc_pid, f"window-{self._seq}", self._gc_dir)
                gc_run.start()
            time.sleep(max(0.0, start_at + duration - time.time()))
            cpu1 = [proc_cpu(p) for p in cpu_pids]
            main1 = thread_cpu(cpu_pids[0]) if cpu_pids else 0.0
            busy1 = machine_busy()
            if isinstance(spy, CProfileRun):
                self._stop_profile(spy)
            gc_acc = None
            if gc_run is not None:
                gc_run.stop()
                gc_acc = json.loads((self._gc_dir / f"{gc_run.name}.gc.json").read_text())
            results = workers.results(duration + 120)
            self._stop_profile(spy)
        finally:
            workers.stop()
        ok = sum(r["ok"] for r in results)
        if isinstance(spy, CProfileRun):  # requests in the profiled window, for figures per request
            (spy.out_dir / f"{spy.name}.requests").write_text(str(ok))
        errors: collections.Counter = collections.Counter()
        for r in results:
            errors.update(r["errors"])
        lat = read_latencies([r["out"] for r in results])
        ours = sum(b - a for a, b in zip(cpu0, cpu1)) + sum(r["cpu"] for r in results)
        foreign = max(0.0, (busy1 - busy0) - ours) / duration  # cores used by other processes
        if gc_acc is not None and ok:
            self.note(
                f"{label or op}: garbage collector {sum(gc_acc['seconds']) / ok * 1e6:.0f} us per request ("
                + ", ".join(f"gen{g} {gc_acc['count'][g]}x {gc_acc['seconds'][g] * 1e3:.0f} ms" for g in range(3))
                + f"; {gc_acc['tracked']:,} tracked objects at the start)"
            )
        if foreign > 0.1 and not profile:
            self.warnings.append(f"{label or op} window: other processes used {foreign:.2f} of {os.cpu_count()} CPUs")
        return {
            "ok": ok,
            "rate": ok / duration,
            "errors": dict(errors),
            "foreign": foreign,
            "busy": (busy1 - busy0) / duration,
            "first_error": next((r["first_error"] for r in results if r["first_error"]), ""),
            "p50": pct(lat, 0.50),
            "p99": pct(lat, 0.99),
            "max": lat[-1] if lat else float("nan"),
            "cpu_per_req": [(b - a) / ok if ok else float("nan") for a, b in zip(cpu0, cpu1)],
            "main_cpu_per_req": (main1 - main0) / ok if ok else float("nan"),
            "client_cpu_per_req": sum(r["cpu"] for r in results) / ok if ok else float("nan"),
        }

    def fill(self, server: Server, count: int) -> float:
        """Create pods pod-0000000..count-1 in NS_LIST on 64 connections; returns creates/s."""
        workers = Workers(self._load_specs(server.port, server.creds, "create", NS_LIST), self.root)
        try:
            workers.wait_ready(60)
            t0 = time.time()
            workers.go({"start_at": t0, "count": count})
            results = workers.results(600)
            elapsed = time.time() - t0
        finally:
            workers.stop()
        ok = sum(r["ok"] for r in results)
        if ok != count:
            errs = [r["first_error"] for r in results if r["first_error"]]
            raise BenchError(f"fill created {ok} of {count} pods: {errs[:1]}")
        return count / elapsed

    # -- profiling ------------------------------------------------------------------------

    def _start_profile(self, pid: int, seconds: float | None, name: str):
        """Profile the server: py-spy record for ``seconds`` (None: until
        _stop_profile), or switch the server's cProfile on (``--cprofile``)."""
        if self.args.cprofile:
            run = CProfileRun(pid, name, Path(self.args.cprofile))
            run.start()
            self.profiles.append(str(run.path))
            return run
        spy = find_py_spy(self.args.py_spy)
        if spy is None:
            return None
        out = Path(self.args.profile) / f"{name}.txt"
        log = open(Path(self.args.profile) / f"{name}.log", "wb")
        duration = ["--duration", str(max(1, int(seconds)))] if seconds is not None else []
        proc = spawn(
            [
                spy,
                "record",
                "--pid",
                str(pid),
                *duration,
                "--rate",
                "250",
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        proc.out_path = out
        proc.timed = seconds is not None
        self.profiles.append(str(out))
        return proc

    def _stop_profile(self, spy) -> None:
        """End a profile from _start_profile: a timed py-spy run is waited for, an
        open-ended one interrupted, a cProfile window switched off and written."""
        if spy is None:
            return
        if isinstance(spy, CProfileRun):
            spy.stop()
            return
        if spy not in _STARTED:
            return
        if spy.poll() is None and not spy.timed:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(60)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(10)
        _STARTED.remove(spy)

    # -- one backend -------------------------------------------------------------------------

    def run_backend(self, backend: str, etcd=None) -> Server:
        s = self.sizes
        only = self.args.only
        print(f"\n[{backend}] starting orch-apiserver", flush=True)
        gc_dir = None
        if self.args.gc_stats:
            gc_dir = self.root / "gc"
            gc_dir.mkdir(exist_ok=True)
        server = Server(self.root, backend, etcd, self.args.cprofile, str(gc_dir) if gc_dir else None).start()
        self._gc_pid, self._gc_dir = (server.pid, gc_dir) if gc_dir else (None, None)
        cpu_pids = (server.pid,) + ((etcd.pid,) if etcd is not None else ())
        r: dict = {}
        try:
            for ns in (NS_LIST, NS_CREATE, NS_WATCH):
                status, body = server.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
                if status != 201:
                    raise BenchError(f"creating namespace {ns}: {status} {body[:300]!r}")
            status, body = server.api(
                "POST", f"/api/v1/namespaces/{NS_CREATE}/pods", orjson.loads(pod_body(NS_CREATE, "probe-pod"))
            )
            if status != 201:
                raise BenchError(f"a 2 KB pod is refused: {status} {body[:500]!r}")
            self.stored_pod_bytes = len(body)
            r["mem0"] = mem0 = server.mem()

            n = s["fill"]
            print(f"[{backend}] filling {n:,} pods", flush=True)
            r["fill_rate"] = fill_rate = self.fill(server, n)
            r["mem_fill"] = mem_fill = server.mem()
            self.note(
                f"{backend}: filled {n:,} pods at {fill_rate:,.0f}/s; RSS {mem0['VmRSS']:.0f} MiB empty -> "
                f"{mem_fill['VmRSS']:.0f} MiB with {n:,} pods"
            )

            if "list" in only:
                print(f"[{backend}] list", flush=True)
                r["lists"] = asyncio.run(self.measure_lists(server, n))
                r["mem_list"] = mem_list = server.mem()
                self.note(
                    f"{backend}: RSS after lists {mem_list['VmRSS']:.0f} MiB (peak VmHWM {mem_list['VmHWM']:.0f} MiB)"
                )

            if "create" in only:
                print(f"[{backend}] create window {s['create_s']:g}s", flush=True)
                r["create"] = create = self.load_window(
                    server.port, server.creds, "create", NS_CREATE, s["create_s"], cpu_pids, label=f"{backend} create"
                )
                self._check_errors(backend, "create", create)
                # A consistent list right after the burst: waits until the watch cache
                # has every event of the window (or reads storage), so it must count all.
                t0 = time.perf_counter()
                status, body = server.api("GET", f"/api/v1/namespaces/{NS_CREATE}/pods?limit=1")
                catch_up = time.perf_counter() - t0
                doc = orjson.loads(body) if status == 200 else {}
                listed = len(doc.get("items", [])) + (doc.get("metadata", {}).get("remainingItemCount") or 0)
                create["catch_up_ms"], create["listed"] = catch_up * 1000, listed
                self.note(
                    f"{backend}: consistent list after the create window: {catch_up * 1000:.0f} ms, "
                    f"{listed:,} pods in {NS_CREATE} (status {status})"
                )
                r["mem_create"] = mem_create = server.mem()
                self.note(
                    f"{backend}: RSS after the create window ({n + create['ok']:,} pods stored) "
                    f"{mem_create['VmRSS']:.0f} MiB (peak {mem_create['VmHWM']:.0f})"
                )

            if "get" in only:
                print(f"[{backend}] get window {s['get_s']:g}s", flush=True)
                r["get"] = get = self.load_window(
                    server.port,
                    server.creds,
                    "get",
                    NS_LIST,
                    s["get_s"],
                    cpu_pids,
                    names_total=n,
                    label=f"{backend} get",
                )
                self._check_errors(backend, "get", get)
                r["mem_get"] = mem_get = server.mem()
                self.note(
                    f"{backend}: RSS after the get window {mem_get['VmRSS']:.0f} MiB (peak {mem_get['VmHWM']:.0f})"
                )

            if self.args.profile or self.args.cprofile:
                print(f"[{backend}] profiling create, get and list", flush=True)
                if "create" in only or "list" in only:
                    self.load_window(
                        server.port,
                        server.creds,
                        "create",
                        NS_CREATE,
                        s["profile_s"],
                        cpu_pids,
                        profile=f"{backend}-create",
                    )
                if "get" in only:
                    self.load_window(
                        server.port,
                        server.creds,
                        "get",
                        NS_LIST,
                        s["profile_s"],
                        cpu_pids,
                        names_total=n,
                        profile=f"{backend}-get",
                    )
                if "list" in only:
                    asyncio.run(self.profile_lists(server, s["profile_s"], f"{backend}-list"))

            if "watch" in only:
                head = orjson.loads(server.api("GET", "/api/v1/pods?limit=1")[1])
                stored = len(head["items"]) + (head["metadata"].get("remainingItemCount") or 0)
                print(f"[{backend}] watch: {s['watchers']:,} watchers ({stored:,} pods stored)", flush=True)
                r["watch"] = watch = self.measure_watch(server, cpu_pids, backend)
                watch["stored"] = stored
            r["mem_end"] = server.mem()
        finally:
            server.stop()
        self.results[backend] = r
        return server

    def _check_errors(self, backend: str, what: str, res: dict) -> None:
        if res["errors"]:
            self.note(f"{backend}: {what} errors {res['errors']}; first: {res['first_error']}")

    async def measure_lists(self, server: Server, n: int) -> dict:
        ctx = client_ssl(server.creds)
        conn = await HttpConn.open(server.port, ctx)
        path = f"/api/v1/namespaces/{NS_LIST}/pods"
        try:
            full, sizes = [], []
            for _ in range(self.sizes["list_runs"]):
                t0 = time.perf_counter()
                status, body = await conn.request("GET", path)
                full.append(time.perf_counter() - t0)
                if status != 200:
                    raise BenchError(f"list: {status} {body[:300]!r}")
                items = len(orjson.loads(body)["items"])
                if items != n:
                    raise BenchError(f"list returned {items} pods, expected {n}")
                sizes.append(len(body))
            paged, pages, page_times = [], 0, []
            for _ in range(self.sizes["page_runs"]):
                t0 = time.perf_counter()
                token, items, pages = "", 0, 0
                while True:
                    q = "?limit=500" + (f"&continue={token}" if token else "")
                    p0 = time.perf_counter()
                    status, body = await conn.request("GET", path + q)
                    page_times.append(time.perf_counter() - p0)
                    if status != 200:
                        raise BenchError(f"paged list: {status} {body[:300]!r}")
                    doc = orjson.loads(body)
                    items += len(doc["items"])
                    pages += 1
                    token = doc["metadata"].get("continue", "")
                    if not token:
                        break
                paged.append(time.perf_counter() - t0)
                if items != n:
                    raise BenchError(f"paged list returned {items} pods, expected {n}")
        finally:
            conn.close()
        page_times.sort()
        return {
            "full_ms": statistics.median(full) * 1000,
            "full_min_ms": min(full) * 1000,
            "full_max_ms": max(full) * 1000,
            "bytes": statistics.median(sizes),
            "paged_ms": statistics.median(paged) * 1000,
            "pages": pages,
            "page_p50_ms": pct(page_times, 0.5) * 1000,
            "page_max_ms": page_times[-1] * 1000,
        }

    async def profile_lists(self, server: Server, seconds: float, name: str) -> None:
        conn = await HttpConn.open(server.port, client_ssl(server.creds))
        path = f"/api/v1/namespaces/{NS_LIST}/pods"
        spy = self._start_profile(server.pid, seconds, name)
        end = time.monotonic() + seconds + 0.5
        try:
            while time.monotonic() < end:
                await conn.request("GET", path)
                token = ""
                while True:  # every other round a paged list
                    status, body = await conn.request(
                        "GET", path + "?limit=500" + (f"&continue={token}" if token else "")
                    )
                    token = orjson.loads(body)["metadata"].get("continue", "")
                    if not token:
                        break
        finally:
            conn.close()
        await asyncio.get_running_loop().run_in_executor(None, self._stop_profile, spy)

    def measure_watch(self, server: Server, cpu_pids: tuple[int, ...], backend: str) -> dict:
        s = self.sizes
        nprocs = s["watch_procs"]
        per = [s["watchers"] // nprocs + (1 if i < s["watchers"] % nprocs else 0) for i in range(nprocs)]
        specs = [
            dict(
                kind="watch",
                wid=i,
                conns=per[i],
                namespace=NS_WATCH,
                port=server.port,
                creds=server.creds,
                out=self.out_path(),
            )
            for i in range(nprocs)
        ]
        profile = bool(self.args.profile or self.args.cprofile)
        spy = self._start_profile(server.pid, None, f"{backend}-watch-open") if profile else None
        workers = Workers(specs, self.root)
        try:
            t0 = time.monotonic()
            workers.wait_ready(300)
            setup = time.monotonic() - t0
            self._stop_profile(spy)
            spy = None
            mem_watch = server.mem()
            events = s["watch_events"]
            deadline = time.time() + events / s["watch_rate"] + 20
            spy = self._start_profile(server.pid, None, f"{backend}-watch-deliver") if profile else None
            workers.go({"expected": events, "deadline": deadline})
            cpu0 = [proc_cpu(p) for p in cpu_pids]
            busy0, own0, t0 = machine_busy(), time.process_time(), time.monotonic()
            writes = asyncio.run(self.watch_writer(server, events, s["watch_rate"]))
            results = workers.results(events / s["watch_rate"] + 120)
            cpu1 = [proc_cpu(p) for p in cpu_pids]
            busy1, own1, elapsed = machine_busy(), time.process_time(), time.monotonic() - t0
            self._stop_profile(spy)
            spy = None
        finally:
            self._stop_profile(spy)
            workers.stop()
        lat = read_latencies([r["out"] for r in results])
        deliveries = sum(r["deliveries"] for r in results)
        ours = sum(b - a for a, b in zip(cpu0, cpu1)) + sum(r["cpu"] for r in results) + (own1 - own0)
        foreign = max(0.0, (busy1 - busy0) - ours) / elapsed
        if foreign > 0.1 and not profile:
            self.warnings.append(f"{backend} watch window: other processes used {foreign:.2f} of {os.cpu_count()} CPUs")
        other: collections.Counter = collections.Counter()
        for r in results:
            other.update(r["other_frames"])
        return {
            "watchers": sum(r["watchers"] for r in results),
            "setup_s": setup,
            "events": events,
            "deliveries": deliveries,
            "expected": events * s["watchers"],
            "missing": sum(r["missing"] for r in results),
            "closed_early": sum(r["closed_early"] for r in results),
            "other": dict(other),
            "p50": pct(lat, 0.5),
            "p99": pct(lat, 0.99),
            "max": lat[-1] if lat else float("nan"),
            "write_p50": writes["p50"],
            "write_p99": writes["p99"],
            "write_errors": writes["errors"],
            "cpu_per_delivery": (cpu1[0] - cpu0[0]) / deliveries if deliveries else float("nan"),
            "client_cpu_per_delivery": sum(r["cpu"] for r in results) / deliveries if deliveries else float("nan"),
            "rss_watchers": mem_watch["VmRSS"],
        }

    async def watch_writer(self, server: Server, events: int, rate: float) -> dict:
        conn = await HttpConn.open(server.port, client_ssl(server.creds))
        lat, errors = [], collections.Counter()
        interval = 1.0 / rate
        t_next = time.perf_counter() + 0.2
        try:
            for j in range(events):
                delay = t_next - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                t_next += interval
                name = f"w-{j // 2:05d}"
                t0 = time.perf_counter()
                ts = f"{time.time():.6f}"
                if j % 2 == 0:
                    obj = _pod(NS_WATCH, name, {TS_ANNOTATION: ts})
                    status, body = await conn.request("POST", f"/api/v1/namespaces/{NS_WATCH}/pods", orjson.dumps(obj))
                    good = status == 201
                else:
                    patch = {"metadata": {"annotations": {TS_ANNOTATION: ts}}}
                    status, body = await conn.request(
                        "PATCH",
                        f"/api/v1/namespaces/{NS_WATCH}/pods/{name}",
                        orjson.dumps(patch),
                        b"application/merge-patch+json",
                    )
                    good = status == 200
                lat.append(time.perf_counter() - t0)
                if not good:
                    errors[f"{status} {body[:200]!r}"] += 1
        finally:
            conn.close()
        lat.sort()
        return {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "errors": dict(errors)}

    # -- baselines --------------------------------------------------------------------------

    async def _concurrent(self, fn, count: int) -> float:
        it = iter(range(count))

        async def worker():
            for i in it:
                await fn(i)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
        return count / (time.perf_counter() - t0)

    async def _backend_list(self, store, prefix: str, n: int) -> dict:
        full = []
        for _ in range(self.sizes["list_runs"]):
            t0 = time.perf_counter()
            res = await store.list(prefix)
            full.append(time.perf_counter() - t0)
            assert len(res.items) == n, len(res.items)
        paged = []
        for _ in range(self.sizes["page_runs"]):
            t0 = time.perf_counter()
            start, rev, total = "", 0, 0
            while True:
                res = await store.list(prefix, revision=rev, start_after=start, limit=500)
                total += len(res.items)
                rev = res.revision
                if not res.more:
                    break
                start = res.items[-1].key
            paged.append(time.perf_counter() - t0)
            assert total == n, total
        return {"full_ms": statistics.median(full) * 1000, "paged_ms": statistics.median(paged) * 1000}

    async def sqlite_baselines(self) -> dict:
        """SqliteBackend.create with 64 concurrent tasks and its list, in this process
        (its own loop, as in the server); the empty schema for the sqlite3 runs."""
        from apiserver_min.storage.sqlite import SqliteBackend

        value = pod_body(NS_LIST, fill_name(0))
        n = self.sizes["fill"]
        store = SqliteBackend(str(self.root / "baseline-backend.db"), compaction_interval=0)
        await store.start()
        try:
            cpu0 = time.process_time()
            rate = await self._concurrent(lambda i: store.create(f"/pods/{NS_LIST}/{fill_name(i)}", value), n)
            cpu = (time.process_time() - cpu0) / n
            lists = await self._backend_list(store, f"/pods/{NS_LIST}/", n)
        finally:
            await store.close()
        for per_txn in (1, CONNECTIONS):
            empty = SqliteBackend(str(self.root / f"baseline-raw{per_txn}.db"), compaction_interval=0)
            await empty.start()
            await empty.close()
        return {"backend_create": rate, "backend_cpu": cpu, **lists}

    def raw_sqlite(self, per_txn: int) -> float:
        """Rows/s inserted with plain sqlite3 into the backend's own schema (log + current +
        commits, the backend's pragmas), ``per_txn`` rows per transaction."""
        value = pod_body(NS_LIST, fill_name(0))
        count = self.sizes["raw_inserts"]
        db = sqlite3.connect(str(self.root / f"baseline-raw{per_txn}.db"), isolation_level=None)
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        t0 = time.perf_counter()
        rev = 0
        for base in range(0, count, per_txn):
            rows = []
            for i in range(base, min(count, base + per_txn)):
                rev += 1
                rows.append((rev, f"/pods/raw/{i:07d}", rev, None, value))
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO log (id, key, created, prev, value) VALUES (?, ?, ?, ?, ?)", rows)
            db.executemany("INSERT INTO current (key, id) VALUES (?, ?)", [(r[1], r[0]) for r in rows])
            db.execute("INSERT INTO commits (rev, ts) VALUES (?, ?)", (rev, time.time()))
            db.execute("COMMIT")
        rate = count / (time.perf_counter() - t0)
        db.close()
        return rate

    async def etcd_baselines(self, etcd) -> dict:
        import aetcd

        from apiserver_min.storage.etcd import EtcdBackend

        value = pod_body(NS_LIST, fill_name(0))
        client = aetcd.Client(host=etcd.host, port=etcd.port)
        await client.connect()
        try:
            count = self.sizes["raw_puts"]
            e0, c0 = proc_cpu(etcd.pid), time.process_time()
            raw = await self._concurrent(lambda i: client.put(b"/raw-bench/%07d" % i, value), count)
            raw_etcd_cpu = (proc_cpu(etcd.pid) - e0) / count
            raw_client_cpu = (time.process_time() - c0) / count
        finally:
            await client.close()
        n = self.sizes["fill"]
        store = EtcdBackend([etcd.endpoint], prefix="/backend-bench")
        await store.start()
        try:
            e0, c0 = proc_cpu(etcd.pid), time.process_time()
            backend = await self._concurrent(lambda i: store.create(f"/pods/{NS_LIST}/{fill_name(i)}", value), n)
            backend_etcd_cpu = (proc_cpu(etcd.pid) - e0) / n
            backend_client_cpu = (time.process_time() - c0) / n
            lists = await self._backend_list(store, f"/pods/{NS_LIST}/", n)
        finally:
            await store.close()
        return {
            "raw_put": raw,
            "raw_etcd_cpu": raw_etcd_cpu,
            "raw_client_cpu": raw_client_cpu,
            "backend_create": backend,
            "backend_etcd_cpu": backend_etcd_cpu,
            "backend_client_cpu": backend_client_cpu,
            **lists,
        }

    def echo_baseline(self, pki_dir: Path, creds: dict) -> dict:
        from tests.components import free_port

        port = free_port()
        spec = {
            "port": port,
            "cert": str(pki_dir / "apiserver.crt"),
            "key": str(pki_dir / "apiserver.key"),
            "ca": str(pki_dir / "ca.crt"),
        }
        log = open(self.root / "echo.log", "ab")
        proc = spawn(
            [sys.executable, __file__, "_echo", json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        log.close()
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            if not ready or proc.stdout.readline().strip() != b"READY":
                raise BenchError(f"echo server did not start:\n{_tail(self.root / 'echo.log')}")
            rss0 = proc_mem(proc.pid)["VmRSS"]
            post = self.load_window(
                port, creds, "create", NS_CREATE, self.sizes["echo_s"], (proc.pid,), label="echo POST"
            )
            get = self.load_window(
                port,
                creds,
                "get",
                NS_LIST,
                self.sizes["echo_s"],
                (proc.pid,),
                names_total=self.sizes["fill"],
                label="echo GET",
            )
        finally:
            stop_proc(proc)
        return {"post": post, "get": get, "rss": rss0}

    # -- the whole run ----------------------------------------------------------------------------

    def run(self) -> None:
        self.results: dict = {}
        self.baselines: dict = {}
        self.echo: dict | None = None
        backends = ["sqlite", "etcd"] if self.args.backend == "both" else [self.args.backend]
        first_server: Server | None = None
        for backend in backends:
            with_baselines = "baselines" in self.args.only
            if backend == "sqlite":
                if with_baselines:
                    print("\n[sqlite] raw baselines (SqliteBackend, sqlite3)", flush=True)
                    self.baselines["sqlite"] = asyncio.run(self.sqlite_baselines())
                    self.baselines["sqlite"]["raw1"] = self.raw_sqlite(1)
                    self.baselines["sqlite"]["raw64"] = self.raw_sqlite(CONNECTIONS)
                server = self.run_backend("sqlite")
            else:
                from tests.components import Etcd

                with Etcd(base_dir=str(self.root), quota_backend_bytes=4 * 1024**3, log_level="warn") as etcd:
                    if with_baselines:
                        print(
                            f"\n[etcd] private etcd at {etcd.endpoint}; raw baselines (aetcd, EtcdBackend)", flush=True
                        )
                        self.baselines["etcd"] = asyncio.run(self.etcd_baselines(etcd))
                    server = self.run_backend("etcd", etcd)
            if first_server is None and "echo" in self.args.only:
                first_server = server
                print("\n[http] baseline: bare aiohttp HTTPS echo server, same load generator", flush=True)
                self.echo = self.echo_baseline(server.data_dir / "pki", server.creds)

    # -- report ---------------------------------------------------------------------------------

    def report(self) -> None:
        s = self.sizes
        n = s["fill"]
        echo = self.echo
        for backend, r in self.results.items():
            b = self.baselines.get(backend)
            c, g, L, w = r.get("create"), r.get("get"), r.get("lists"), r.get("watch")
            base = (
                [
                    f"HTTP echo server (same client): {echo['post']['rate']:,.0f}/s, "
                    f"{echo['post']['cpu_per_req'][0] * 1e6:.0f} us CPU/req"
                ]
                if echo
                else []
            )
            if c is not None:
                cpu_server = c["cpu_per_req"][0] * 1e6
                if backend == "sqlite":
                    self.row(
                        backend,
                        "create throughput, 64 clients, 2 KB pods",
                        f"{c['rate']:,.0f}/s",
                        ">= 2,000/s",
                        c["rate"] >= 2000,
                        (
                            [
                                f"SqliteBackend.create x64 direct: {b['backend_create']:,.0f}/s "
                                f"({b['backend_cpu'] * 1e6:.0f} us CPU/op)",
                                f"sqlite3, same schema: {b['raw1']:,.0f}/s 1 per txn, {b['raw64']:,.0f}/s 64 per txn",
                            ]
                            if b
                            else []
                        )
                        + base,
                    )
                    cpu_text = f"{cpu_server:.0f} us (loop thread {c['main_cpu_per_req'] * 1e6:.0f})"
                else:
                    ratio = c["rate"] / b["raw_put"] if b else float("nan")
                    self.row(
                        backend,
                        "create throughput, 64 clients, 2 KB pods",
                        f"{c['rate']:,.0f}/s = {ratio:.0%} of raw",
                        ">= 50% of raw put",
                        ratio >= 0.5 if b else None,
                        (
                            [
                                f"raw aetcd put x64: {b['raw_put']:,.0f}/s (etcd {b['raw_etcd_cpu'] * 1e6:.0f} + "
                                f"client {b['raw_client_cpu'] * 1e6:.0f} us CPU/op)",
                                f"EtcdBackend.create x64 direct: {b['backend_create']:,.0f}/s (etcd "
                                f"{b['backend_etcd_cpu'] * 1e6:.0f} + client {b['backend_client_cpu'] * 1e6:.0f} "
                                f"us CPU/op)",
                            ]
                            if b
                            else []
                        )
                        + base,
                    )
                    cpu_text = (
                        f"{cpu_server:.0f} us (loop thread {c['main_cpu_per_req'] * 1e6:.0f}) + etcd "
                        f"{c['cpu_per_req'][1] * 1e6:.0f} us"
                    )
                self.row(
                    backend,
                    "server CPU per create",
                    cpu_text,
                    "",
                    None,
                    [f"echo server: {echo['post']['cpu_per_req'][0] * 1e6:.0f} us/req"] if echo else [],
                )
                self.row(
                    backend,
                    "create latency p50 / p99 (64 clients)",
                    f"{c['p50'] * 1e3:.1f} / {c['p99'] * 1e3:.1f} ms",
                    "",
                    None,
                    [],
                )
            if g is not None:
                self.row(
                    backend,
                    "get p50 / p99, 64 clients",
                    f"{g['p50'] * 1e3:.1f} / {g['p99'] * 1e3:.1f} ms",
                    "p99 <= 20 ms" if backend == "sqlite" else "",
                    g["p99"] <= 0.020 if backend == "sqlite" else None,
                    (
                        [
                            f"echo GET: {echo['get']['p50'] * 1e3:.1f} / {echo['get']['p99'] * 1e3:.1f} ms "
                            f"at {echo['get']['rate']:,.0f}/s"
                        ]
                        if echo
                        else []
                    )
                    + [f"server: {g['rate']:,.0f} gets/s, {g['cpu_per_req'][0] * 1e6:.0f} us CPU/get"],
                )
            if L is not None:
                self.row(
                    backend,
                    f"list of {n:,} pods, whole",
                    f"{L['full_ms']:.0f} ms",
                    "<= 500 ms",
                    L["full_ms"] <= 500,
                    ([f"backend list of {n:,} keys direct: {b['full_ms']:.0f} ms"] if b else [])
                    + [f"response {L['bytes'] / 1e6:.1f} MB; min/max {L['full_min_ms']:.0f}/{L['full_max_ms']:.0f} ms"],
                )
                self.row(
                    backend,
                    f"list of {n:,} pods, pages of 500",
                    f"{L['paged_ms']:.0f} ms ({L['pages']} pages)",
                    "",
                    None,
                    ([f"backend, pages of 500 direct: {b['paged_ms']:.0f} ms"] if b else [])
                    + [f"one page p50 {L['page_p50_ms']:.1f} ms, max {L['page_max_ms']:.1f} ms"],
                )
            if w is not None:
                self.row(
                    backend,
                    f"watch delivery p50 / p99, {w['watchers']:,} watchers",
                    f"{w['p50'] * 1e3:.1f} / {w['p99'] * 1e3:.1f} ms",
                    "p99 <= 100 ms",
                    w["p99"] <= 0.100,
                    [
                        f"writer's own request: p50 {w['write_p50'] * 1e3:.1f} / p99 {w['write_p99'] * 1e3:.1f} ms",
                        f"{w['deliveries']:,} of {w['expected']:,} deliveries ({w['events']} events at "
                        f"{s['watch_rate']:g}/s), max {w['max'] * 1e3:.0f} ms",
                        f"server {w['cpu_per_delivery'] * 1e6:.0f} us CPU/delivery (incl. the writes), "
                        f"watch clients {w['client_cpu_per_delivery'] * 1e6:.0f} us",
                    ],
                )
            later = []
            if "mem_list" in r:
                later.append(f"after lists {r['mem_list']['VmRSS']:.0f} MiB (peak {r['mem_list']['VmHWM']:.0f})")
            if c is not None:
                later.append(f"after create window (+{c['ok']:,} pods) {r['mem_create']['VmRSS']:.0f} MiB")
            if g is not None:
                later.append(f"after gets {r['mem_get']['VmRSS']:.0f} MiB")
            if w is not None:
                later.append(f"with watchers {w['rss_watchers']:.0f} MiB")
            self.row(
                backend,
                f"server RSS with {n:,} pods stored",
                f"{r['mem_fill']['VmRSS']:.0f} MiB",
                "<= 300 MB",
                r["mem_fill"]["VmRSS"] * 1.048576 <= 300,
                [f"empty server {r['mem0']['VmRSS']:.0f} MiB; pod bytes {n * self.stored_pod_bytes / 2**20:.0f} MiB"]
                + ["; ".join(later)]
                + ([f"bare aiohttp echo process: {echo['rss']:.0f} MiB"] if echo else []),
            )
        self._print_table()
        for backend, r in self.results.items():
            c, g, w = r.get("create"), r.get("get"), r.get("watch")
            parts = [f"\n{backend}: fill {n:,} pods at {r['fill_rate']:,.0f}/s"]
            if c is not None:
                parts.append(
                    f"create window {c['ok']:,} in {s['create_s']:g}s, load generator "
                    f"{c['client_cpu_per_req'] * 1e6:.0f} us CPU/req, machine {c['busy']:.2f} CPUs busy"
                )
            if g is not None:
                parts.append(
                    f"get load generator {g['client_cpu_per_req'] * 1e6:.0f} us CPU/req, "
                    f"machine {g['busy']:.2f} CPUs busy"
                )
            print("; ".join(parts))
            for what, res in (("create", c), ("get", g)):
                if res is not None and res["errors"]:
                    print(f"  {what} errors: {res['errors']} first: {res['first_error']}")
            if w is not None:
                if w["missing"] or w["closed_early"] or w["write_errors"] or w["other"]:
                    print(
                        f"  watch: missing {w['missing']}, closed early {w['closed_early']}, "
                        f"writer errors {w['write_errors']}, other frames {w['other']}"
                    )
                print(
                    f"  watch: {w['watchers']:,} streams opened in {w['setup_s']:.1f}s with {w['stored']:,} pods stored"
                )
            print(f"  RSS at the end {r['mem_end']['VmRSS']:.0f} MiB (peak {r['mem_end']['VmHWM']:.0f})")
        if self.warnings:
            print(
                "\nWARNING: the machine was not quiet; throughput and latency figures are low by roughly "
                "that share (CPU per request is steadier):"
            )
            for w in self.warnings:
                print(f"  {w}")
        if self.profiles:
            self._print_profiles()

    def _print_table(self) -> None:
        title = (
            f"orch-apiserver benchmark ({'quick' if self.args.quick else 'full'} run, {os.cpu_count()} CPUs, "
            f"Python {sys.version.split()[0]}, 2 KB pods, {CONNECTIONS} connections from "
            f"{self.args.load_procs} load processes)"
        )
        print("\n" + title)
        if self.args.quick:
            print("(quick: counts are smaller than the targets assume; verdicts are indicative only)")
        heads = ("backend", "figure", "measured", "target", "", "baseline / context (same run)")
        widths = [max(len(heads[i]), *(len(str(r[i])) for r in self.rows)) for i in range(5)]
        line = "  ".join(h.ljust(w) for h, w in zip(heads, widths + [0]))
        print(line)
        print("-" * min(160, len(line) + 60))
        for r in self.rows:
            cells = [str(r[i]).ljust(widths[i]) for i in range(5)]
            baselines = r[5] or [""]
            print("  ".join(cells + [baselines[0]]))
            for extra in baselines[1:]:
                print("  ".join(" " * w for w in widths) + "  " + extra)

    def _print_cprofiles(self) -> None:
        import io
        import pstats

        print(f"\ncProfile windows of the server (files in {self.args.cprofile}; inspect with python -m pstats FILE)")
        for path in self.profiles:
            if not Path(path).exists():
                print(f"  {path}: not written")
                continue
            gc_path = Path(path).with_suffix(".gc.json")
            if gc_path.exists():
                acc = json.loads(gc_path.read_text())
                print(
                    f"\n  {Path(path).stem}: garbage collector "
                    + ", ".join(f"gen{g} {acc['count'][g]}x {acc['seconds'][g] * 1e3:.0f} ms" for g in range(3))
                    + f" ({acc['tracked']:,} tracked objects at the start)"
                )
            req_path = Path(path).with_suffix(".requests")
            if req_path.exists() and int(req_path.read_text() or 0):
                ok = int(req_path.read_text())
                stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
                calls = sum(v[1] for v in stats.values())
                print(f"\n  {Path(path).stem}: {ok:,} requests, {calls / ok:.0f} Python calls per request")
            for order, limit in (("tottime", 25), ("cumulative", 30)):
                out = io.StringIO()
                st = pstats.Stats(path, stream=out)
                st.sort_stats(order).print_stats(limit)
                text = out.getvalue()
                body = text[text.find("   ncalls") :] if "   ncalls" in text else text
                print(f"\n  {Path(path).stem}, by {order}:")
                for line in body.rstrip().splitlines():
                    print("    " + line[:200])

    def _print_profiles(self) -> None:
        if self.args.cprofile:
            self._print_cprofiles()
            return
        print(f"\npy-spy profiles of the server (samples of the server process; raw files in {self.args.profile})")
        for path in self.profiles:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                print(f"  {path}: {exc}")
                continue
            self_counts: collections.Counter = collections.Counter()
            incl: collections.Counter = collections.Counter()
            total = 0
            for line in text.splitlines():
                stack, _, count = line.rpartition(" ")
                if not stack or not count.isdigit():
                    continue
                k = int(count)
                total += k
                frames = [_frame_name(f) for f in stack.split(";")]
                self_counts[frames[-1]] += k
                for f in set(frames):
                    incl[f] += k
            print(f"\n  {Path(path).stem}: {total} samples")
            print("    self time:")
            for name, k in self_counts.most_common(12):
                print(f"      {k / total:6.1%}  {name}")
            print("    inclusive (project code):")
            shown = 0
            for name, k in incl.most_common():
                if "apiserver_min" in name or "aiohttp" in name:
                    print(f"      {k / total:6.1%}  {name}")
                    shown += 1
                    if shown >= 15:
                        break


def find_py_spy(explicit: str | None) -> str | None:
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    fallback = "/tmp/pyspy/bin/py-spy"
    return shutil.which("py-spy") or (fallback if os.access(fallback, os.X_OK) else None)


def _frame_name(frame: str) -> str:
    """``func (path/file.py:123)`` -> ``func (…/package/file.py)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    parts = path.split("/")
    for anchor in (
        "apiserver_min",
        "aiohttp",
        "asyncio",
        "uvloop",
        "orjson",
        "grpc",
        "aetcd",
        "yarl",
        "multidict",
        "ssl.py",
    ):
        if anchor in parts:
            path = "/".join(parts[parts.index(anchor) :])
            break
    else:
        path = "/".join(parts[-2:])
    return f"{name} ({path})"


PHASES = ("baselines", "list", "create", "get", "watch", "echo")


def _phases(text: str) -> tuple[str, ...]:
    chosen = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in chosen if p not in PHASES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown phase(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(PHASES)}"
        )
    return chosen


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "_worker":
        worker_main(json.loads(sys.argv[2]))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "_echo":
        echo_main(json.loads(sys.argv[2]))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "_cprofile_server":
        return cprofile_server_main(sys.argv[2], sys.argv[3:])
    if len(sys.argv) >= 3 and sys.argv[1] == "_gc_server":
        return cprofile_server_main(sys.argv[2], sys.argv[3:], profile=False)
    parser = argparse.ArgumentParser(
        description="orch-apiserver figures (create, get, list, watch, RSS) "
        "beside their targets and same-run baselines; not a test."
    )
    parser.add_argument("--backend", choices=("sqlite", "etcd", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="small counts, about a minute (a smoke run)")
    parser.add_argument("--load-procs", type=int, default=2, help="load generator processes (64 connections in all)")
    parser.add_argument("--profile", metavar="DIR", help="also sample the server with py-spy, raw output in DIR")
    parser.add_argument("--py-spy", metavar="PATH", help="py-spy binary (default: PATH, then /tmp/pyspy/bin/py-spy)")
    parser.add_argument(
        "--cprofile", metavar="DIR", help="profile the server with cProfile (in-process) instead, .pstats files in DIR"
    )
    parser.add_argument(
        "--gc-stats",
        action="store_true",
        help="start the server through this file and report the garbage collector's time "
        "per request of each load window (no profiler; the figures stay comparable)",
    )
    parser.add_argument(
        "--gc-threshold",
        metavar="T0,T1,T2",
        help="experiment: set the server's gc thresholds (gc.set_threshold) before it starts; "
        "implies --gc-stats. The figures are then not the server's own",
    )
    parser.add_argument(
        "--only",
        metavar="PHASES",
        type=_phases,
        default=PHASES,
        help=f"comma-separated subset of {','.join(PHASES)} (default: all)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, databases)")
    args = parser.parse_args()
    if args.gc_threshold:
        try:
            if len([int(x) for x in args.gc_threshold.split(",")]) != 3:
                raise ValueError
        except ValueError:
            parser.error("--gc-threshold: expected three integers, e.g. 20000,10,10")
        args.gc_stats = True
        os.environ[GC_THRESHOLD_ENV] = args.gc_threshold
    if args.gc_stats and args.cprofile:
        parser.error("--gc-stats excludes --cprofile (which reports the collector itself)")
    if args.profile and args.cprofile:
        parser.error("--profile and --cprofile exclude each other")
    if args.cprofile:
        args.cprofile = os.path.abspath(args.cprofile)
        os.makedirs(args.cprofile, exist_ok=True)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        if find_py_spy(args.py_spy) is None:
            parser.error("--profile: py-spy not found (give --py-spy PATH)")
    # 1,000 watch streams need more than the usual 1,024 descriptors in the server.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard) if hard != resource.RLIM_INFINITY else 8192, hard))
    use_uvloop()
    root = Path(tempfile.mkdtemp(prefix="orch-bench-apiserver-"))
    bench = Bench(args, QUICK if args.quick else FULL, root)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.monotonic()
    try:
        bench.run()
        bench.report()
        print(f"\ntotal {time.monotonic() - t0:.0f}s")
        return 0
    except BenchError as exc:
        print(f"\nbenchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        stop_all()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
