"""Soak (not a test, root): python tests/bench/soak.py --minutes 30

A one-node cluster on this host: an orch-apiserver (SQLite), a private
containerd, an orch-agent joined with a bootstrap token. For --minutes it runs

* ConfigMap churn: 4 writers creating, updating and deleting at a steady
  --rate (the watch history then holds a steady number of events), each on a
  kept-alive connection as real clients hold theirs, reopened every
  RECONNECT_EVERY requests so that fresh TLS handshakes are soaked too;
* 2 watches on the ConfigMaps, each reopened from its last resourceVersion
  when the server ends it (timeoutSeconds);
* pod churn on the node: a busybox pod created every --pod-every seconds, the
  oldest deleted once more than 3 exist;

and samples the server's and the agent's RSS, open file descriptors and threads
every --sample seconds (asyncio's default executor apart, shown as "+N": its
workers start on demand up to a bound and stay). After the warm-up (the first
20 % of the run, at least the Events' time to live plus the 5-minute watch
history window plus a minute: 11 minutes) it prints each figure's growth beside
its target: RSS growth <= 5 %, no file-descriptor or thread growth, the
executor's workers within its bound.

The server's RSS is also split, so that growth can be placed: anonymous memory
against file-backed pages (/proc/PID/smaps_rollup), and within the anonymous
part SQLite's own heap (the server's orch_storage_sqlite_memory_bytes gauge),
with the database file's size beside it: SQLite's page cache holds at most the
file's pages (and at most its 64 MiB cache size), so a flat file means a flat
cache.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.storage.cacher import HISTORY_SECONDS  # noqa: E402
from apiserver_min.storage.sqlite import MEMORY_METRIC  # noqa: E402
from tests.apiserver_fixtures import ApiServerProcess, create_namespace  # noqa: E402
from tests.components import Containerd, _unmount_all_under, free_port, image_builder  # noqa: E402
from tests.e2e.harness import NODE, Cluster, new_cgroup_root  # noqa: E402

RSS_GROWTH_TARGET = 0.05
EVENT_TTL = HISTORY_SECONDS  # the server's --event-ttl here (1 h by default)
NS = "soak"
WRITERS = 4
# Requests a churning client sends on one connection before it opens a new one.
RECONNECT_EVERY = 300


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.values[name] = self.values.get(name, 0) + n


class KeepAlive:
    """One client's connection, kept open across requests as real clients (kubectl,
    informers) keep theirs; reopened after an error and after every RECONNECT_EVERY
    requests, so fresh TLS handshakes stay part of the soak at a bounded count
    ("handshakes" in the work done)."""

    def __init__(self, api: ApiServerProcess, counters: Counters) -> None:
        self.api = api
        self.counters = counters
        self.conn: http.client.HTTPSConnection | None = None
        self.used = 0

    def json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if self.conn is None or self.used >= RECONNECT_EVERY:
            self.close()
            self.conn = self.api.connection()
            self.counters.add("handshakes")
        self.used += 1
        data = json.dumps(body).encode() if body is not None else None
        try:
            self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            raw = resp.read()
        except Exception:
            self.close()
            raise
        return resp.status, json.loads(raw) if raw else None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.used = None, 0


def paced(rate: float, stop: threading.Event, counters: Counters) -> Iterator[int]:
    """Yield 0, 1, 2, ... `rate` times a second until stop. A slot missed (the machine
    is shared) is dropped, not caught up in a burst: a burst would swell the watch
    history window past its steady size, and its high-water mark reads as growth."""
    interval = 1.0 / rate
    due = time.monotonic()
    j = 0
    while not stop.wait(max(0.0, due - time.monotonic())):
        yield j
        j += 1
        due += interval
        now = time.monotonic()
        if due < now - interval:
            missed = int((now - due) / interval)
            counters.add("slots dropped", missed)
            due += missed * interval


def churn(api: ApiServerProcess, index: int, rate: float, stop: threading.Event, counters: Counters) -> None:
    """Create, update, delete one ConfigMap `rate` times a second (slots the machine
    could not serve in time are dropped, see paced)."""
    path = f"/api/v1/namespaces/{NS}/configmaps"
    client = KeepAlive(api, counters)
    for j in paced(rate, stop, counters):
        name = f"c{index}-{j % 50}"
        try:
            status, body = client.json("POST", path, {"metadata": {"name": name}, "data": {"v": "0"}})
            if status == 201:
                body["data"] = {"v": "1"}
                client.json("PUT", f"{path}/{name}", body)
                client.json("DELETE", f"{path}/{name}")
                counters.add("writes", 3)
            else:
                counters.add(f"status {status}")
        except Exception as exc:  # noqa: BLE001 - counted, the soak goes on
            counters.add(f"error {type(exc).__name__}")


def watch(api: ApiServerProcess, stop: threading.Event, counters: Counters) -> None:
    rv = ""
    while not stop.is_set():
        try:
            if not rv:
                _, doc = api.json("GET", f"/api/v1/namespaces/{NS}/configmaps", expect=200)
                rv = doc["metadata"]["resourceVersion"]
            path = f"/api/v1/namespaces/{NS}/configmaps?watch=1&timeoutSeconds=60&resourceVersion={rv}"
            with api.watch(path, timeout=90) as stream:
                while not stop.is_set():
                    event = stream.next()
                    if event is None:
                        counters.add("watch reopened")
                        break
                    if event["type"] == "ERROR":
                        counters.add("watch 410")
                        rv = ""
                        break
                    rv = event["object"]["metadata"]["resourceVersion"]
                    counters.add("watch events")
        except Exception as exc:  # noqa: BLE001 - counted, the watch is reopened
            counters.add(f"watch error {type(exc).__name__}")
            stop.wait(1)


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "c", "image": "orch.local/busybox:1", "command": ["sleep", "3600"], "imagePullPolicy": "Never"}
            ],
        },
    }


def pod_churn(api: ApiServerProcess, every: float, stop: threading.Event, counters: Counters) -> None:
    client = KeepAlive(api, counters)
    live: list[str] = []
    n = 0
    while not stop.wait(every):
        name = f"p{n}"
        n += 1
        try:
            status, _ = client.json("POST", f"/api/v1/namespaces/{NS}/pods", pod(name))
            if status == 201:
                live.append(name)
                counters.add("pods created")
            while len(live) > 3:
                client.json("DELETE", f"/api/v1/namespaces/{NS}/pods/{live.pop(0)}")
                counters.add("pods deleted")
        except Exception as exc:  # noqa: BLE001 - counted, the soak goes on
            counters.add(f"pod error {type(exc).__name__}")


# asyncio's default executor (asyncio.to_thread) starts its worker threads on demand, up to
# this many, and keeps them: a plateau, not a leak. The agent names its workers for the
# system (agent.process.WORKER_THREAD_NAME), so they are told apart.
POOL_MAX = min(32, (os.cpu_count() or 1) + 4)
POOL_SUFFIX = "-pool"


def sample(proc: psutil.Process) -> tuple[float, int, int, int]:
    """(RSS MiB, fds, threads outside the default executor, the executor's workers)."""
    pool = 0
    for tid in os.listdir(f"/proc/{proc.pid}/task"):
        try:
            with open(f"/proc/{proc.pid}/task/{tid}/comm") as f:
                pool += f.read().strip().endswith(POOL_SUFFIX)
        except FileNotFoundError:
            pass  # ended meanwhile
    with proc.oneshot():
        return proc.memory_info().rss / 2**20, proc.num_fds(), proc.num_threads() - pool, pool


def smaps_mib(pid: int) -> tuple[float, float]:
    """(anonymous, file-backed) resident MiB of a process."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return fields["Anonymous"], fields["Rss"] - fields["Anonymous"]


def sqlite_mib(api: ApiServerProcess) -> float:
    """SQLite's heap in the server (its gauge on /metrics); NaN when it is not there."""
    try:
        status, _, body = api.request("GET", "/metrics")
    except OSError:
        return float("nan")
    for line in body.decode(errors="replace").splitlines() if status == 200 else ():
        if line.startswith(MEMORY_METRIC + " "):
            return float(line.split()[1]) / 2**20
    return float("nan")


def server_split(api: ApiServerProcess, pid: int, db: Path) -> tuple[float, float, float, float]:
    """(anonymous, file-backed, SQLite heap, database file) MiB."""
    anon, file = smaps_mib(pid)
    size = sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists()) / 2**20
    return anon, file, sqlite_mib(api), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--rate",
        type=float,
        default=8.0,
        help="ConfigMap create/update/delete cycles a second, all writers together: a steady rate keeps the "
        "5-minute watch history steady, so memory that keeps growing is a leak, not more history",
    )
    parser.add_argument("--pod-every", type=float, default=20.0, help="seconds between pod creations (0: none)")
    # To place a growth: run again with one factor changed (e.g. --server-arg=--metric-resolution=3600
    # for no resource-metrics scrape, --server-env LD_PRELOAD=<an allocator>, --pod-every 0 for no pods).
    parser.add_argument("--server-arg", action="append", default=[], help="an extra orch-apiserver flag")
    parser.add_argument("--server-env", action="append", default=[], help="NAME=VALUE in orch-apiserver's environment")
    args = parser.parse_args()
    duration = args.minutes * 60
    # The watch cache's history and the store's retained history grow for their window
    # (5 minutes) before old events fall off; the Events of the pods start to be deleted
    # only --event-ttl after they were written, and those deletions then fill the history
    # for another window. Until both are steady the server holds more each minute: that is
    # warm-up, not a leak (a 30-minute soak measured 91.0 -> 93.0 MiB between minutes 6 and
    # 13, flat from there, with 1,060 more watch-history events held at minute 17 than at 13).
    warmup = max(EVENT_TTL + HISTORY_SECONDS + 60.0, duration * 0.2)
    if duration <= warmup + 3 * args.sample:
        parser.error(f"--minutes {args.minutes} leaves no time after the warm-up of {warmup:.0f}s")
    server_env = {}
    for item in args.server_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--server-env {item!r}: expected NAME=VALUE")
        server_env[name] = value

    work = Path(tempfile.mkdtemp(prefix="orch-soak-"))
    containerd = Containerd(base_dir=work).start()
    api = ApiServerProcess(
        work / "api",
        free_port(),
        # Events are kept --event-ttl after their last write (1h by default): a soak looks
        # for leaks, so their retention is made to reach its steady state within the warm-up.
        extra_args=[
            "--enable-bootstrap-token-auth",
            "--node-monitor-grace-period=40s",
            f"--event-ttl={int(EVENT_TTL)}s",
            *args.server_arg,
        ],
        extra_env=server_env,
    )
    cluster = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        image_builder().ensure_images(containerd.address)
        api.start(timeout=60)
        create_namespace(api, NS)
        cluster = Cluster(work, api, containerd, new_cgroup_root("orch-soak"))
        cluster.start_agent(cluster.agent_argv(cluster.token()))
        cluster.wait(lambda: cluster.node_ready() == "True", 120, "node Ready")
        server_proc, agent_proc = psutil.Process(api.pid), psutil.Process(cluster.agent.pid)
        counters = Counters()
        threads = [
            threading.Thread(target=churn, args=(api, i, args.rate / WRITERS, stop, counters)) for i in range(WRITERS)
        ]
        threads += [threading.Thread(target=watch, args=(api, stop, counters)) for _ in range(2)]
        if args.pod_every > 0:
            threads.append(threading.Thread(target=pod_churn, args=(api, args.pod_every, stop, counters)))
        for thread in threads:
            thread.start()
        samples: list[tuple[float, tuple, tuple, tuple]] = []
        db = api.data_dir / "state.db"
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < duration:
            samples.append((elapsed, sample(server_proc), sample(agent_proc), server_split(api, server_proc.pid, db)))
            s, a, split = samples[-1][1], samples[-1][2], samples[-1][3]
            print(
                f"{elapsed:7.0f}s server {s[0]:6.1f} MiB {s[1]:4d} fds {s[2]:3d}+{s[3]} threads "
                f"(anon {split[0]:.1f}, file {split[1]:.1f}, sqlite {split[2]:.1f}, db file {split[3]:.1f}) | "
                f"agent {a[0]:6.1f} MiB {a[1]:4d} fds {a[2]:3d}+{a[3]} threads | {json.dumps(counters.values)}",
                flush=True,
            )
            time.sleep(min(args.sample, max(0.0, duration - elapsed)))
        stop.set()
        for thread in threads:
            thread.join(100)
        report(samples, warmup, counters)
    finally:
        stop.set()
        if cluster is not None:
            if api.running:  # the agent unmounts the pods' volumes as it removes them
                cluster.kubectl("delete", "pods", "--all", "-n", NS, "--wait=false", check=False)
                try:
                    cluster.wait(
                        lambda: not (cluster.get("pods", "-n", NS) or {"items": [1]})["items"], 60, "pods gone"
                    )
                except AssertionError as exc:
                    print(f"soak: pods left at the end: {exc}")
            cluster.stop_agent()
            cluster.cleanup()
        api.stop()
        containerd.stop()
        still = _unmount_all_under(work)  # lazily unmounts what the agent left
        if still:
            print(f"soak: still mounted under {work}: {still}")
        shutil.rmtree(work, ignore_errors=True)


def report(samples, warmup: float, counters: Counters) -> None:
    after = [s for s in samples if s[0] >= warmup]
    base, end = after[:3], after[-3:]
    print(f"\nsoak: {samples[-1][0] / 60:.1f} min, warm-up {warmup:.0f}s, {len(after)} samples after it")
    print(f"work done: {json.dumps(counters.values)}")
    ok = True
    for who, idx in (("server", 1), ("agent", 2)):
        rss0 = statistics.mean(s[idx][0] for s in base)
        rss1 = statistics.mean(s[idx][0] for s in end)
        growth = rss1 / rss0 - 1
        fds0, fds1 = max(s[idx][1] for s in base), max(s[idx][1] for s in end)
        thr0, thr1 = max(s[idx][2] for s in base), max(s[idx][2] for s in end)
        pool1 = max(s[idx][3] for s in after)
        good = growth <= RSS_GROWTH_TARGET and fds1 <= fds0 + 2 and thr1 <= thr0 + 1 and pool1 <= POOL_MAX
        ok &= good
        print(
            f"{who:6s} RSS {rss0:.1f} -> {rss1:.1f} MiB ({growth:+.1%}, target <= +{RSS_GROWTH_TARGET:.0%}); "
            f"fds {fds0} -> {fds1} (target no growth); threads {thr0} -> {thr1} (target no growth), "
            f"executor workers at most {pool1} (target <= {POOL_MAX})  {'ok' if good else 'MISSED'}"
        )
    parts = ("anonymous", "file-backed", "of which SQLite's heap", "database file (not resident)")
    print("server RSS split (MiB, start of the window -> end):")
    for i, part in enumerate(parts):
        v0, v1 = statistics.mean(s[3][i] for s in base), statistics.mean(s[3][i] for s in end)
        print(f"  {part:30s} {v0:6.1f} -> {v1:6.1f} ({v1 - v0:+.1f})")
    print("soak:", "all targets met" if ok else "a target missed")


if __name__ == "__main__":
    main()
