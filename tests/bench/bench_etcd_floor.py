"""Where the ceiling is for a Python server creating objects in etcd (not a test):

    .venv/bin/python tests/bench/bench_etcd_floor.py [--duration S] [--raw-s S] [--loader wrk|py|both]
                                                     [--wrk-threads N] [--max-other CORES] [--retries N]
                                                     [--no-watch-variant] [--keep]

Issue 3 asks that the API server on etcd reach >= 50 % of raw etcd put
throughput through the same client library. This file measures, in one run
against one private etcd it starts (tests/components.Etcd, as
bench_apiserver.py does), everything that ratio rests on:

(a) raw etcd writes with 64 in flight from this one Python process (uvloop):
    aetcd's ``Client.put`` (bench_apiserver's raw baseline), then aetcd's
    generated KV stub on a ``grpc.aio`` channel opened exactly as the server
    opens it (``EtcdBackend.start``) for a plain ``Put`` and for the server's
    "create if absent" ``Txn``, and ``EtcdBackend.create`` itself; as context,
    the same Txn from two processes (32 in flight each): etcd's own capacity
    when the client is not one event loop;
(b) a minimal aiohttp + uvloop HTTPS server (the API server's TLS setup:
    serving certificate, client certificates asked for but optional,
    keep-alive) whose POST handler parses the 2 KB JSON body with orjson,
    serialises it again, does one ``EtcdBackend.create`` Txn under a fresh key
    (the pod's name) and answers 201 with the stored bytes;
(b0) as context, (b) without the etcd call: what HTTPS, aiohttp and orjson
    cost per request on their own;
(b+w) the same with one etcd watch on its prefix whose events it decodes and
    keeps, as the API server's watch cache does (skip with --no-watch-variant);
(c) (b) as two processes sharing the port with SO_REUSEPORT, each its own etcd
    channel;
(d) orch-apiserver on the same etcd (bench_apiserver's Server, plus a static
    token file so that wrk can authenticate as a system:masters user).

HTTP phases are loaded by wrk (``--loader wrk``, the default): 64 keep-alive
HTTPS connections, ``--wrk-threads`` threads, a Lua script that POSTs 2 KB pods
(bench_apiserver's pod template, ``schedulerName`` nobody serves) with names
unique per run. Each phase has a short warm-up run first; the measured run
lasts ``--duration`` seconds and its count is wrk's. ``--loader py`` uses
bench_apiserver's own load generator instead (asyncio client processes with
the admin's client certificate; costlier per request than wrk), ``both`` runs
each phase with both.

Printed per phase: requests/s and its ratio to each raw figure of (a), then
where the two cores went, per request (psutil, user + system of every thread):
the server process(es), etcd, the load generator, the rest of the machine
(other work on this shared machine, interrupts), and idle. The machine has two
cores shared by server, etcd and load generator: requests/s is partly a
property of the machine, CPU per request is the steadier figure. The machine
is also shared with other work: a window in which the rest of the machine took
more than ``--max-other`` cores is measured again (up to ``--retries`` times)
and the quietest window is kept; what the rest took is printed with the
biggest other processes alive through the window.

Every process started here is stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import json
import os
import re
import resource
import select
import shutil
import signal
import ssl
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
import psutil

from tests.bench import bench_apiserver as ba

HOST = ba.HOST
CONNECTIONS = ba.CONNECTIONS
NS = ba.NS_CREATE
CREATE_PATH = f"/api/v1/namespaces/{NS}/pods"
ETCD_PREFIX = "/orch-bench"  # bench_apiserver's Server uses this prefix
TOKEN = "floor-bench-token-0123456789abcdef"
TOKEN_USER = "floor-bench-admin"


# --- CPU bookkeeping ------------------------------------------------------------------------


def pcpu(pid: int) -> float:
    """user + system seconds of a process, all its threads (psutil)."""
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return float("nan")


def machine_cpu() -> tuple[float, float, float, float]:
    """(busy, idle, steal, irq + softirq) CPU seconds of the whole machine since boot;
    busy includes steal (time the hypervisor gave this VM's CPUs to others)."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    busy = sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return busy, idle, getattr(t, "steal", 0.0), getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def children_cpu() -> float:
    """CPU of this process's reaped children (wrk, once it has exited)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main_thread_cpu(pid: int) -> float:
    """user + system seconds of a process's main thread (where its event loop runs)."""
    try:
        for t in psutil.Process(pid).threads():
            if t.id == pid:
                return t.user_time + t.system_time
    except psutil.Error:
        pass
    return float("nan")


def all_cpu() -> dict[int, tuple[str, float]]:
    out = {}
    for p in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        t = p.info["cpu_times"]
        if t is not None:
            cmd = " ".join(p.info["cmdline"] or [])[:60] or p.info["name"] or "?"
            out[p.pid] = (cmd, t.user + t.system)
    return out


class Window:
    """CPU of named processes (and their main threads) and of the machine between
    start() and stop(); the biggest other consumers on the machine too."""

    def __init__(self, pids: dict[str, list[int]]):
        self.pids = pids

    def start(self) -> None:
        self.all0 = all_cpu()
        self.t0 = time.perf_counter()
        self.cpu0 = {k: [pcpu(p) for p in v] for k, v in self.pids.items()}
        self.main0 = {k: [main_thread_cpu(p) for p in v] for k, v in self.pids.items()}
        self.self0 = time.process_time()
        self.children0 = children_cpu()
        self.m0 = machine_cpu()

    def stop(self) -> None:
        self.elapsed = time.perf_counter() - self.t0
        self.cpu = {k: [b - a for a, b in zip(self.cpu0[k], (pcpu(p) for p in v))] for k, v in self.pids.items()}
        self.main = {
            k: [b - a for a, b in zip(self.main0[k], (main_thread_cpu(p) for p in v))] for k, v in self.pids.items()
        }
        self.self_cpu = time.process_time() - self.self0
        self.children = children_cpu() - self.children0
        m1 = machine_cpu()
        self.busy, self.idle, self.steal, self.irq = (b - a for a, b in zip(self.m0, m1))
        known = {os.getpid(), *(p for v in self.pids.values() for p in v)}
        all1 = all_cpu()
        deltas = [
            (all1[pid][1] - c0, name, pid) for pid, (name, c0) in self.all0.items() if pid in all1 and pid not in known
        ]
        deltas.sort(reverse=True)
        self.top_other = [(name, pid, d / self.elapsed) for d, name, pid in deltas[:3] if d > 0.02 * self.elapsed]


# --- (a) raw etcd from this process -----------------------------------------------------------


def _keep_quieter(
    best: dict | None, r: dict, attempt: int, max_other: float, retries: int, what: str
) -> tuple[dict, bool]:
    """The quieter of ``best`` and the new window ``r``, and whether ``r`` was quiet enough
    to stop measuring."""
    if best is None or r["other_cores"] < best["other_cores"]:
        best = r
    if r["other_cores"] <= max_other:
        return best, True
    print(
        f"    {what}: other work took {r['other_cores']:.2f} cores"
        + ("; measuring again" if attempt < retries else "; keeping the quietest window"),
        flush=True,
    )
    return best, False


def quietest(measure, max_other: float, retries: int, what: str) -> dict:
    """measure() again (up to ``retries`` more times) while other work on the machine
    took more than ``max_other`` cores; the window with the least other work is kept."""
    best = None
    for attempt in range(retries + 1):
        best, done = _keep_quieter(best, measure(), attempt, max_other, retries, what)
        if done:
            break
    best["attempts"] = attempt + 1
    return best


async def aquietest(measure, max_other: float, retries: int, what: str) -> dict:
    """:func:`quietest` for a coroutine ``measure``."""
    best = None
    for attempt in range(retries + 1):
        best, done = _keep_quieter(best, await measure(), attempt, max_other, retries, what)
        if done:
            break
    best["attempts"] = attempt + 1
    return best


async def raw_phase(etcd, seconds: float, max_other: float, retries: int) -> list[dict]:
    import aetcd
    from aetcd.rpc import rpc_pb2

    from apiserver_min.storage.etcd import EtcdBackend

    value = ba.pod_body(NS, "raw-0000000")
    client = aetcd.Client(host=etcd.host, port=etcd.port)
    await client.connect()
    store = EtcdBackend([etcd.endpoint], prefix="/floor-raw")
    await store.start()
    kv = store._stub()  # the server's own channel and stub
    create_cmp = rpc_pb2.Compare.CREATE
    equal = rpc_pb2.Compare.EQUAL

    async def aetcd_put(i: int) -> None:
        await client.put(b"/floor-raw/aetcd/%09d" % i, value)

    async def stub_put(i: int) -> None:
        await kv.Put(rpc_pb2.PutRequest(key=b"/floor-raw/put/%09d" % i, value=value), timeout=10)

    async def stub_txn(i: int) -> None:
        k = b"/floor-raw/txn/%09d" % i
        resp = await kv.Txn(
            rpc_pb2.TxnRequest(
                compare=[rpc_pb2.Compare(key=k, target=create_cmp, result=equal, create_revision=0)],
                success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=value))],
            ),
            timeout=10,
        )
        if not resp.succeeded:
            raise ba.BenchError(f"raw txn create of {k!r} found the key present")

    async def backend_create(i: int) -> None:
        await store.create(f"/backend/{i:09d}", value)

    out = []
    try:
        for label, fn in (
            ("aetcd Client.put", aetcd_put),
            ("KV stub Put", stub_put),
            ("KV stub Txn create-if-absent", stub_txn),
            ("EtcdBackend.create (Txn)", backend_create),
        ):
            out.append(
                await aquietest(
                    functools.partial(_measure, fn, seconds, CONNECTIONS, label, etcd.pid), max_other, retries, label
                )
            )
    finally:
        await store.close()
        await client.close()
    return out


_RAW_SEQ = itertools.count()  # key numbers, unique across windows and repeats


async def _measure(fn, seconds: float, inflight: int, label: str, etcd_pid: int) -> dict:
    seq = _RAW_SEQ
    ok = 0
    end = time.perf_counter() + min(1.0, seconds / 4)

    async def worker() -> None:
        nonlocal ok
        while time.perf_counter() < end:
            await fn(next(seq))
            ok += 1

    await asyncio.gather(*(worker() for _ in range(inflight)))  # warm-up
    ok = 0
    win = Window({"etcd": [etcd_pid], "client": [os.getpid()]})
    win.start()
    end = time.perf_counter() + seconds
    await asyncio.gather(*(worker() for _ in range(inflight)))
    win.stop()
    return {
        "label": label,
        "ok": ok,
        "rate": ok / win.elapsed,
        "client_cpu": win.cpu["client"][0] / ok,
        "client_loop": win.main["client"][0] / win.elapsed,
        "etcd_cpu": win.cpu["etcd"][0] / ok,
        "busy": win.busy / win.elapsed,
        "idle": win.idle / win.elapsed,
        "other": max(0.0, win.busy - win.cpu["client"][0] - win.cpu["etcd"][0]) / win.elapsed,
        "other_cores": max(0.0, win.busy - win.cpu["client"][0] - win.cpu["etcd"][0]) / win.elapsed,
        "top_other": win.top_other,
        "steal": win.steal / win.elapsed,
        "irq": win.irq / win.elapsed,
    }


def rawproc_main(spec: dict) -> None:
    """Child: the server's create Txn, ``inflight`` in flight, from start_at for seconds."""
    ba.use_uvloop()
    from apiserver_min.storage.etcd import EtcdBackend

    async def main() -> None:
        value = ba.pod_body(NS, "raw-0000000")
        store = EtcdBackend([spec["endpoint"]], prefix=spec["prefix"])
        await store.start()
        seq = itertools.count()
        ok = 0
        end = time.time() + 0.5  # warm-up before the common start

        async def worker(count: bool) -> None:
            nonlocal ok
            while time.time() < end:
                await store.create(f"/{next(seq):09d}", value)
                if count:
                    ok += 1

        await asyncio.gather(*(worker(False) for _ in range(spec["inflight"])))
        await asyncio.sleep(max(0.0, spec["start_at"] - time.time()))
        end = spec["start_at"] + spec["seconds"]
        cpu0, t0 = time.process_time(), time.time()
        await asyncio.gather(*(worker(True) for _ in range(spec["inflight"])))
        elapsed, cpu = time.time() - t0, time.process_time() - cpu0
        await store.close()
        print("RESULT " + json.dumps({"ok": ok, "elapsed": elapsed, "cpu": cpu}), flush=True)

    asyncio.run(main())


def raw_two_procs(etcd, seconds: float, root: Path) -> dict:
    start_at = time.time() + 4.0
    procs = []
    run = next(_RAW_SEQ)
    for i in range(2):
        spec = {
            "endpoint": etcd.endpoint,
            "prefix": f"/floor-raw2/{run}/{i}",
            "inflight": CONNECTIONS // 2,
            "start_at": start_at,
            "seconds": seconds,
        }
        log = open(root / f"rawproc-{i}.log", "ab")
        procs.append(
            ba.spawn(
                [sys.executable, __file__, "_rawproc", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        )
        log.close()
    try:
        time.sleep(max(0.0, start_at - time.time()))
        win = Window({"etcd": [etcd.pid], "clients": [p.pid for p in procs]})
        win.start()
        time.sleep(seconds)
        win.stop()
        results = []
        for i, p in enumerate(procs):
            out, _ = p.communicate(timeout=60)
            line = next((ln for ln in out.decode().splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                raise ba.BenchError(f"raw client process {i} failed:\n{ba._tail(root / f'rawproc-{i}.log')}")
            results.append(json.loads(line[7:]))
            ba._STARTED.remove(p)
    finally:
        for p in procs:
            if p in ba._STARTED:
                ba.stop_proc(p, 5.0)
    ok = sum(r["ok"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    clients = sum(r["cpu"] for r in results)
    return {
        "label": "EtcdBackend.create, 2 processes x 32",
        "ok": ok,
        "rate": ok / elapsed,
        "client_cpu": clients / ok,
        "etcd_cpu": win.cpu["etcd"][0] / ok,
        "busy": win.busy / win.elapsed,
        "client_loop": max(win.main["clients"]) / win.elapsed,
        "idle": win.idle / win.elapsed,
        "other": max(0.0, win.busy - sum(win.cpu["clients"]) - win.cpu["etcd"][0] - win.self_cpu) / win.elapsed,
        "other_cores": max(0.0, win.busy - sum(win.cpu["clients"]) - win.cpu["etcd"][0] - win.self_cpu) / win.elapsed,
        "top_other": win.top_other,
        "steal": win.steal / win.elapsed,
        "irq": win.irq / win.elapsed,
    }


# --- (b), (c) the minimal server ------------------------------------------------------------


def minserver_main(spec: dict) -> None:
    """Child: the minimal create server (see the module docstring)."""
    from aiohttp import web

    from apiserver_min.storage.etcd import EtcdBackend
    from apiserver_min.storage.interface import KeyExistsError

    ba.use_uvloop()
    store = EtcdBackend([spec["etcd"]], prefix=spec["prefix"])
    version = orjson.dumps({"major": "1", "minor": "0", "gitVersion": "floor-bench"})
    cache: dict[str, bytes] = {}  # (b+w): what a watch cache keeps
    ctype = "application/json"
    no_etcd = spec.get("no_etcd", False)

    async def post(request: web.Request) -> web.Response:
        obj = orjson.loads(await request.read())
        md = obj["metadata"]
        data = orjson.dumps(obj)
        if no_etcd:
            return web.Response(status=201, body=data, content_type=ctype)
        try:
            await store.create(f"/pods/{md['namespace']}/{md['name']}", data)
        except KeyExistsError:
            return web.Response(status=409, body=b'{"kind":"Status","reason":"AlreadyExists"}', content_type=ctype)
        return web.Response(status=201, body=data, content_type=ctype)

    async def get(request: web.Request) -> web.Response:
        return web.Response(body=version, content_type=ctype)

    async def watcher() -> None:
        async for ev in store.watch("/pods/", await store.current_revision()):
            if ev.type == "PUT":
                cache[ev.kv.key] = ev.kv.value
                orjson.loads(ev.kv.value)  # a watch cache decodes what it keeps

    async def main() -> None:
        await store.start()
        watch_task = asyncio.get_running_loop().create_task(watcher()) if spec["watch"] else None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(spec["cert"], spec["key"])
        ctx.load_verify_locations(spec["ca"])
        ctx.verify_mode = ssl.CERT_OPTIONAL
        app = web.Application(client_max_size=3 * 1024 * 1024 + 1024)
        app.router.add_route("POST", "/{tail:.*}", post)
        app.router.add_route("GET", "/{tail:.*}", get)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(
            runner, HOST, spec["port"], ssl_context=ctx, backlog=1024, reuse_address=True, reuse_port=spec["reuse_port"]
        )
        await site.start()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        gc.freeze()  # as the API server does once started
        gc.set_threshold(20_000, 10, 10)
        print("READY", flush=True)
        await stop.wait()
        await runner.cleanup()
        if watch_task is not None:
            watch_task.cancel()
        await store.close()

    asyncio.run(main())


def start_minservers(
    root: Path, etcd, pki: dict, port: int, nprocs: int, watch: bool, tag: str, no_etcd: bool = False
) -> list:
    procs = []
    try:
        for i in range(nprocs):
            spec = {
                "etcd": etcd.endpoint,
                "prefix": f"/floor-{tag}",
                "port": port,
                "reuse_port": nprocs > 1,
                "watch": watch,
                "no_etcd": no_etcd,
                **pki,
            }
            log_path = root / f"minserver-{tag}-{i}.log"
            log = open(log_path, "ab")
            proc = ba.spawn(
                [sys.executable, __file__, "_minserver", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
            log.close()
            procs.append(proc)
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            if not ready or proc.stdout.readline().strip() != b"READY":
                raise ba.BenchError(f"minimal server {tag}-{i} did not start:\n{ba._tail(log_path)}")
    except BaseException:
        for p in procs:
            ba.stop_proc(p, 10.0)
        raise
    return procs


# --- wrk --------------------------------------------------------------------------------------

WRK_LUA = r"""
local prefix = [==[@PREFIX@]==]
local suffix = [==[@SUFFIX@]==]
local path = "@PATH@"
local nthreads = 0
local counter = 0
local tag = "x"
local headers = {["Content-Type"] = "application/json", ["Accept"] = "application/json"}

function setup(thread)
  thread:set("tid", nthreads)
  nthreads = nthreads + 1
end

function init(args)
  tag = args[1]
  if args[2] ~= nil and args[2] ~= "" then
    headers["Authorization"] = "Bearer " .. args[2]
  end
end

function request()
  counter = counter + 1
  local name = tag .. "-" .. tid .. "-" .. counter
  return wrk.format("POST", path, headers, prefix .. name .. suffix)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'FLOOR_RESULT {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,' ..
    '"timeout":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def write_wrk_script(root: Path) -> Path:
    prefix, suffix = ba._pod_template(NS)
    text = (
        WRK_LUA.replace("@PREFIX@", prefix.decode()).replace("@SUFFIX@", suffix.decode()).replace("@PATH@", CREATE_PATH)
    )
    path = root / "create.lua"
    path.write_text(text)
    return path


_tags = itertools.count(1)


def run_wrk(
    args,
    script: Path,
    port: int,
    duration: float,
    pids: dict[str, list[int]],
    token: str = "",
    sample_conns: list[int] | None = None,
) -> dict:
    """One wrk run; CPU of ``pids`` and of the machine over it (wrk's own from RUSAGE_CHILDREN)."""
    tag = f"f{os.getpid() % 1000}r{next(_tags)}"
    argv = [
        shutil.which("wrk") or "wrk",
        "-t",
        str(args.wrk_threads),
        "-c",
        str(CONNECTIONS),
        "-d",
        f"{duration:g}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        f"https://{HOST}:{port}{CREATE_PATH}",
        "--",
        tag,
        token,
    ]
    win = Window(pids)
    win.start()
    proc = ba.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    conns = None
    try:
        if sample_conns:
            time.sleep(duration / 2)
            conns = []
            for pid in sample_conns:
                try:
                    conns.append(
                        sum(
                            1
                            for c in psutil.Process(pid).net_connections("tcp")
                            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
                        )
                    )
                except psutil.Error:
                    conns.append(-1)
        out, _ = proc.communicate(timeout=duration + 60)
    finally:
        if proc in ba._STARTED:
            ba.stop_proc(proc, 5.0)
    win.stop()
    text = out.decode(errors="replace")
    m = re.search(r"^FLOOR_RESULT (\{.*\})$", text, re.M)
    if proc.returncode != 0 or m is None:
        raise ba.BenchError(f"wrk exited {proc.returncode}:\n{text[-2000:]}")
    r = json.loads(m.group(1))
    n = r["requests"]
    secs = r["duration_us"] / 1e6
    errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
    cpu = {k: sum(v) for k, v in win.cpu.items()}
    ours = sum(cpu.values()) + win.children + win.self_cpu
    return {
        "ok": n - r["status"],
        "rate": (n - r["status"]) / secs,
        "errors": errors,
        "err_detail": r,
        "p50": r["p50_us"] / 1e3,
        "p99": r["p99_us"] / 1e3,
        "cpu": {k: v / n for k, v in cpu.items()},
        "per_proc": {k: [c / n for c in v] for k, v in win.cpu.items()},
        "loadgen": win.children / n,
        "other": max(0.0, win.busy - ours) / n,
        "idle": win.idle / n,
        "busy_cores": win.busy / win.elapsed,
        "other_cores": max(0.0, win.busy - ours) / win.elapsed,
        "loop_cores": [m / win.elapsed for m in win.main.get("server", [])],
        "server_cores": [c / win.elapsed for c in win.cpu.get("server", [])],
        "etcd_cores": sum(win.cpu.get("etcd", [])) / win.elapsed,
        "wrk_cores": win.children / win.elapsed,
        "top_other": win.top_other,
        "steal": win.steal / win.elapsed,
        "irq": win.irq / win.elapsed,
        "conns": conns,
        "n": n,
        "loader": f"wrk -t{args.wrk_threads}",
    }


def run_py(bench, port: int, creds: dict, duration: float, pids: dict[str, list[int]]) -> dict:
    """bench_apiserver's load window (its asyncio load generator, 2 processes)."""
    order = [(k, p) for k, v in pids.items() for p in v]
    res = bench.load_window(port, creds, "create", NS, duration, tuple(p for _, p in order), label="floor")
    n = res["ok"]
    per: dict[str, list[float]] = {k: [] for k in pids}
    for (k, _), c in zip(order, res["cpu_per_req"]):
        per[k].append(c)
    # Machine shares from load_window's own window (/proc/stat user+nice+system).
    loadgen = res["client_cpu_per_req"]
    busy = res["busy"]  # cores busy over the window
    ours = sum(sum(v) for v in per.values()) + loadgen
    return {
        "ok": n,
        "rate": res["rate"],
        "errors": sum(res["errors"].values()),
        "err_detail": res["errors"],
        "p50": res["p50"] * 1e3,
        "p99": res["p99"] * 1e3,
        "cpu": {k: sum(v) for k, v in per.items()},
        "per_proc": per,
        "loadgen": loadgen,
        "other": max(0.0, busy * duration / n - ours) if n else float("nan"),
        "idle": max(0.0, (os.cpu_count() - busy) * duration / n) if n else float("nan"),
        "busy_cores": busy,
        "other_cores": res["foreign"],
        "conns": None,
        "n": n,
        "loop_cores": [res["main_cpu_per_req"] * res["rate"]] + [float("nan")] * (len(per["server"]) - 1),
        "server_cores": [c * res["rate"] for c in per["server"]],
        "etcd_cores": sum(per["etcd"]) * res["rate"],
        "wrk_cores": loadgen * res["rate"],
        "top_other": [],
        "steal": float("nan"),
        "irq": float("nan"),
        "loader": f"py x{bench.args.load_procs}",
    }


# --- (d) the API server -------------------------------------------------------------------------


class TokenServer(ba.Server):
    """bench_apiserver's Server on etcd, with a static token file for wrk."""

    def __init__(self, root: Path, etcd, token_file: Path):
        super().__init__(root, "etcd", etcd)
        self.token_file = token_file

    def argv(self) -> list[str]:
        return super().argv() + ["--token-auth-file", str(self.token_file)]


class WorkersServer(TokenServer):
    """The same server with ``--workers N``: a supervisor and N processes sharing the port."""

    def __init__(self, root: Path, etcd, token_file: Path, workers: int):
        super().__init__(root, etcd, token_file)
        self.workers = workers
        self.log_path = root / f"apiserver-etcd-workers{workers}.log"

    def argv(self) -> list[str]:
        return super().argv() + ["--workers", str(self.workers)]

    def start(self, timeout: float = 240.0) -> "WorkersServer":
        super().start(timeout)
        deadline = time.monotonic() + timeout
        line = f"all {self.workers} workers serve"
        while line not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise ba.BenchError(f"the {self.workers} workers did not all serve:\n{ba._tail(self.log_path)}")
            time.sleep(0.2)
        return self

    def worker_pids(self) -> list[int]:
        return [c.pid for c in psutil.Process(self.pid).children()]


# --- the run --------------------------------------------------------------------------------------


def fmt_us(x: float) -> str:
    return f"{x * 1e6:5.0f}"


class Floor:
    def __init__(self, args, root: Path):
        self.args, self.root = args, root
        self.raw: list[dict] = []
        self.phases: list[tuple[str, str, dict]] = []  # (phase, description, result)

    def loaders(self) -> list[str]:
        return ["wrk", "py"] if self.args.loader == "both" else [self.args.loader]

    def load(self, loader: str, port: int, pids: dict, token: str = "", sample_conns=None) -> dict:
        a = self.args
        if loader == "wrk":
            run_wrk(a, self.script, port, a.warmup, {}, token)  # warm-up, not counted
            return quietest(
                lambda: run_wrk(a, self.script, port, a.duration, pids, token, sample_conns),
                a.max_other,
                a.retries,
                "window",
            )
        return quietest(
            lambda: run_py(self.bench, port, self.creds, a.duration, pids), a.max_other, a.retries, "window"
        )

    def run(self) -> None:
        from apiserver_min.pki import Pki, write_admin_config
        from tests.components import Etcd, free_port

        args = self.args
        self.script = write_wrk_script(self.root)
        token_file = self.root / "tokens.csv"
        token_file.write_text(f'{TOKEN},{TOKEN_USER},floor-bench-uid,"system:masters"\n')
        with Etcd(base_dir=str(self.root), quota_backend_bytes=4 * 1024**3, log_level="warn") as etcd:
            self.etcd = etcd
            server = TokenServer(self.root, etcd, token_file)
            # The server's PKI made up front (the server reuses it): the minimal server
            # serves the same certificate, the py loader uses the admin's client cert.
            pki = Pki(str(server.data_dir))
            pki.ensure([HOST])
            config = server.data_dir / "admin.orchconfig"
            write_admin_config(pki, str(config), f"https://{HOST}:{server.port}")
            server._extract_creds(config)
            self.creds = server.creds
            self.bench = ba.Bench(
                argparse.Namespace(load_procs=args.load_procs, cprofile=None, profile=None, py_spy=None, quick=False),
                {},
                self.root,
            )
            spec_pki = {"cert": pki.serving_cert, "key": pki.serving_key, "ca": pki.ca_cert}

            print(
                f"[a] raw etcd writes, {CONNECTIONS} in flight from this process, {args.raw_s:g}s each "
                f"(etcd {etcd.endpoint})",
                flush=True,
            )
            self.raw = asyncio.run(raw_phase(etcd, args.raw_s, args.max_other, args.retries))
            print("[a'] the create Txn from 2 processes x 32 in flight", flush=True)
            self.raw.append(
                quietest(
                    lambda: raw_two_procs(etcd, args.raw_s, self.root), args.max_other, args.retries, "2 processes"
                )
            )
            for r in self.raw:
                print(f"    {r['label']}: {r['rate']:,.0f}/s", flush=True)

            variants = [
                ("b0", "minimal server, 1 process, no etcd call (HTTPS + orjson only)", 1, False, True),
                ("b", "minimal aiohttp+uvloop server, 1 process", 1, False, False),
            ]
            if not args.no_watch_variant:
                variants.append(("b+w", "minimal server, 1 process, + a watch decoding every event", 1, True, False))
            variants.append(("c", "minimal server, 2 processes, SO_REUSEPORT", 2, False, False))
            for tag, desc, nprocs, watch, no_etcd in variants:
                for loader in self.loaders():
                    port = free_port()
                    print(f"[{tag}] {desc}; {loader}", flush=True)
                    procs = start_minservers(
                        self.root, etcd, spec_pki, port, nprocs, watch, f"{tag.replace('+', '')}-{loader}", no_etcd
                    )
                    try:
                        pids = {"server": [p.pid for p in procs], "etcd": [etcd.pid]}
                        res = self.load(loader, port, pids, sample_conns=[p.pid for p in procs] if nprocs > 1 else None)
                    finally:
                        for p in procs:
                            ba.stop_proc(p, 10.0)
                    self._done(tag, desc, res)

            for loader in self.loaders():
                print(f"[d] orch-apiserver on etcd; {loader}", flush=True)
                server.start()
                try:
                    status, body = server.api("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
                    if status not in (201, 409):
                        raise ba.BenchError(f"creating namespace {NS}: {status} {body[:300]!r}")
                    status, body = server.api("POST", CREATE_PATH, orjson.loads(ba.pod_body(NS, f"probe-{loader}")))
                    if status != 201:
                        raise ba.BenchError(f"a 2 KB pod is refused: {status} {body[:500]!r}")
                    if loader == "wrk":
                        self._check_token(server)
                    pids = {"server": [server.pid], "etcd": [etcd.pid]}
                    res = self.load(loader, server.port, pids, token=TOKEN)
                finally:
                    server.stop()
                self._done("d", "orch-apiserver (etcd)", res)

            for loader in self.loaders():
                print(f"[d2] orch-apiserver --workers 2 on etcd; {loader}", flush=True)
                multi = WorkersServer(self.root, etcd, token_file, 2)
                multi.data_dir, multi.port = server.data_dir, free_port()
                multi.start()
                try:
                    workers = multi.worker_pids()
                    pids = {"server": [multi.pid, *workers], "etcd": [etcd.pid]}
                    res = self.load(loader, multi.port, pids, token=TOKEN, sample_conns=workers)
                finally:
                    multi.stop()
                self._done("d2", "orch-apiserver --workers 2 (etcd; supervisor + 2 workers)", res)

    def _check_token(self, server) -> None:
        """The bench token must authenticate (not fall back to anonymous) before wrk uses it."""
        from apiserver_min.api import names

        group = names.AUTHENTICATION_GROUP
        req = urllib.request.Request(
            f"https://{HOST}:{server.port}/apis/{group}/v1/selfsubjectreviews",
            method="POST",
            data=orjson.dumps({"apiVersion": f"{group}/v1", "kind": "SelfSubjectReview"}),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
        )
        ctx = ssl.create_default_context(cafile=server.creds["ca"])
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                doc = orjson.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ba.BenchError(f"the bench token is refused: {exc.code} {exc.read()[:300]!r}") from None
        user = doc.get("status", {}).get("userInfo", {}).get("username")
        if user != TOKEN_USER:
            raise ba.BenchError(f"the bench token authenticates as {user!r}, not {TOKEN_USER!r}")

    def _done(self, tag: str, desc: str, res: dict) -> None:
        self.phases.append((tag, desc, res))
        extra = f", connections per process {res['conns']}" if res.get("conns") else ""
        print(
            f"    {res['rate']:,.0f}/s ({res['errors']} errors), server {fmt_us(res['cpu']['server']).strip()} us "
            f"+ etcd {fmt_us(res['cpu']['etcd']).strip()} us CPU/req{extra}",
            flush=True,
        )
        if res["errors"]:
            print(f"    errors: {res['err_detail']}", flush=True)

    def _targets(self) -> None:
        """Issue 22's figures beside their targets, against the floor server (b) of this run."""
        by = {(tag, r["loader"]): r for tag, _d, r in self.phases}
        print("\n    targets (same run; the floor is phase b, the minimal server over etcd):")
        for loader in dict.fromkeys(r["loader"] for _t, _d, r in self.phases):
            b, d, d2 = by.get(("b", loader)), by.get(("d", loader)), by.get(("d2", loader))
            if b is None or d is None:
                continue
            cpu = d["cpu"]["server"] / b["cpu"]["server"]
            rate = d["rate"] / b["rate"]
            print(
                f"    {loader:<4} server CPU per create / floor's   {cpu:5.2f}x  (target <= 1.50x)  "
                f"{'ok' if cpu <= 1.5 else 'MISSED'}  [{d['cpu']['server'] * 1e6:.0f} vs {b['cpu']['server'] * 1e6:.0f} us]"
            )
            print(
                f"    {loader:<4} etcd creates / floor's throughput {rate:5.0%}  (target >= 80%)   "
                f"{'ok' if rate >= 0.8 else 'MISSED'}  [{d['rate']:,.0f} vs {b['rate']:,.0f}/s]"
            )
            if d2 is not None:
                gain = d2["rate"] / d["rate"]
                print(
                    f"    {loader:<4} --workers 2 / 1 throughput        {gain:5.2f}x  (target >= 1.00x)  "
                    f"{'ok' if gain >= 1.0 else 'MISSED'}  [{d2['rate']:,.0f} vs {d['rate']:,.0f}/s]"
                )

    def report(self) -> None:
        raw = {r["label"]: r for r in self.raw}
        put = raw["aetcd Client.put"]["rate"]
        txn = raw["KV stub Txn create-if-absent"]["rate"]
        ncpu = os.cpu_count()
        print(
            f"\netcd floor benchmark: {ncpu} CPUs, Python {sys.version.split()[0]}, 2 KB pods, "
            f"{CONNECTIONS} connections / in flight, windows {self.args.duration:g}s (raw {self.args.raw_s:g}s)"
        )
        print(
            "\n(a) raw etcd writes                      rate/s  client us/op  etcd us/op  client loop  "
            "other cores  idle cores"
        )
        for r in self.raw:
            print(
                f"    {r['label']:<36} {r['rate']:>8,.0f}  {fmt_us(r['client_cpu']):>12}  {fmt_us(r['etcd_cpu']):>10}"
                f"  {r['client_loop']:>11.2f}  {r['other']:>11.2f}  {r['idle']:>10.2f}"
            )
        for r in self.raw:
            if r.get("attempts", 1) > 1 or r["other"] > 0.05:
                print(
                    f"    other during {r['label']} ({r.get('attempts', 1)} attempts, the quietest kept): steal {r['steal']:.2f}, irq+softirq {r['irq']:.2f}"
                    + "".join(f", [{n}] ({pid}) {c:.2f}" for n, pid, c in r["top_other"])
                )
        print("    (client loop: cores used by the client's event-loop thread; 1.00 = saturated)")
        print(f"\n(b)-(d) over HTTPS; ratios of aetcd put x64 ({put:,.0f}/s) and of the create Txn x64 ({txn:,.0f}/s)")
        print(
            "    phase  loader   req/s   /put   /txn | CPU us/req: server (per process)   etcd  load  other  idle |"
            " p50/p99 ms     err"
        )
        for tag, _desc, r in self.phases:
            per = "+".join(f"{c * 1e6:.0f}" for c in r["per_proc"]["server"])
            server = f"{r['cpu']['server'] * 1e6:.0f}" + (f" ({per})" if len(r["per_proc"]["server"]) > 1 else "")
            print(
                f"    {tag:<5}  {r['loader']:<7} {r['rate']:>6,.0f}  {r['rate'] / put:>5.0%}  {r['rate'] / txn:>5.0%}"
                f" | {server:>31}   {r['cpu']['etcd'] * 1e6:>4.0f}  {r['loadgen'] * 1e6:>4.0f}  "
                f"{r['other'] * 1e6:>5.0f}  {r['idle'] * 1e6:>4.0f} | {r['p50']:5.1f}/{r['p99']:5.1f}  {r['errors']:>6}"
            )
        self._targets()
        print(f"\n    where the {ncpu} cores went (cores busy over the window):")
        print("    phase  loader   server (per process)   server loop thread(s)   etcd   load  other   idle")
        for tag, _desc, r in self.phases:
            sc = "+".join(f"{c:.2f}" for c in r["server_cores"])
            lc = "+".join(f"{c:.2f}" for c in r["loop_cores"])
            idle = max(0.0, ncpu - r["busy_cores"])
            print(
                f"    {tag:<5}  {r['loader']:<7} {sc:>20}   {lc:>21}   {r['etcd_cores']:>4.2f}   {r['wrk_cores']:>4.2f}"
                f"   {r['other_cores']:>4.2f}   {idle:>4.2f}"
            )
        print()
        for tag, desc, r in self.phases:
            extra = f"; connections per process {r['conns']}" if r.get("conns") else ""
            if r.get("attempts", 1) > 1:
                extra += f"; window {r['attempts']} attempts, the quietest kept"
            if r["other_cores"] > 0.05:
                extra += f"; other: steal {r['steal']:.2f}, irq+softirq {r['irq']:.2f}" + "".join(
                    f", [{n}] ({pid}) {c:.2f}" for n, pid, c in r["top_other"]
                )
            print(f"    {tag:<5} {desc} ({r['loader']}){extra}")
        print(
            "\n    CPU is user+system of every thread of a process (psutil); 'load' is wrk (RUSAGE_CHILDREN) or "
            "the py load processes; 'other' the rest of the machine's busy time (other work, kernel threads, "
            "interrupts); 'idle' idle CPU."
        )


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "_minserver":
        minserver_main(json.loads(sys.argv[2]))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "_rawproc":
        rawproc_main(json.loads(sys.argv[2]))
        return 0
    parser = argparse.ArgumentParser(
        description="raw etcd writes vs. a minimal Python create server vs. "
        "orch-apiserver, one run, one etcd; not a test."
    )
    parser.add_argument("--duration", type=float, default=10.0, help="measured window per HTTP phase, s")
    parser.add_argument("--warmup", type=float, default=2.0, help="wrk warm-up run before each window, s")
    parser.add_argument("--raw-s", type=float, default=6.0, help="window per raw etcd figure, s")
    parser.add_argument("--loader", choices=("wrk", "py", "both"), default="wrk")
    parser.add_argument("--wrk-threads", type=int, default=2)
    parser.add_argument("--load-procs", type=int, default=2, help="py loader processes")
    parser.add_argument(
        "--max-other",
        type=float,
        default=0.15,
        help="a window in which other work on the machine took more cores than this is measured "
        "again (the machine is shared)",
    )
    parser.add_argument("--retries", type=int, default=2, help="at most this many repeats of a window")
    parser.add_argument("--no-watch-variant", action="store_true", help="skip phase b+w")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args()
    if args.loader != "py" and shutil.which("wrk") is None:
        parser.error("wrk not found on PATH (apt-get install wrk), or use --loader py")
    ba.use_uvloop()
    root = Path(tempfile.mkdtemp(prefix="orch-bench-floor-"))
    floor = Floor(args, root)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.monotonic()
    try:
        floor.run()
        floor.report()
        print(f"\ntotal {time.monotonic() - t0:.0f}s")
        return 0
    except ba.BenchError as exc:
        print(f"\nbenchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        ba.stop_all()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
