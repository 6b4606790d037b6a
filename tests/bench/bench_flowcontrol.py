"""API priority and fairness against a noisy neighbour, and its cost on creates (not a test):

    .venv/bin/python tests/bench/bench_flowcontrol.py [--seconds S] [--pods N] [--noisy C]

Starts ``orch-apiserver`` (SQLite) twice in one run: with priority and fairness (the
default) and with ``--enable-priority-and-fairness=false`` (plain in-flight limits,
upstream's defaults 400/200). Three users that are not ``system:masters`` (so their
requests are classified like any user's, to the ``global-default`` level, one flow
each) get client certificates from the server's CA and cluster-admin:

- creates: ``bench-writer`` POSTs 2 KB pods on 64 connections (``bench_apiserver``'s
  create load), windows alternating between the two servers; the creates/s with flow
  control as a share of those without (target >= 95%);
- noisy neighbour (``--inflight R,M`` sets both servers' in-flight flags; the defaults
  give the levels 600 seats, more than one event loop serves at once):
  ``bench-noisy`` keeps C (200) LISTs of N (5,000) pods in flight for
  S seconds, each connection waiting Retry-After after a 429 as a client should,
  while ``bench-quiet`` GETs one pod every 10 ms; printed: the quiet user's GET p50/p99
  (target p99 <= 100 ms with flow control), the noisy user's LISTs served and 429s
  (the acceptance point: 429s, each with Retry-After, with flow control), for both
  servers.

429s are counted, never a failure of the run: the creates' (small ``--inflight``
limits refuse some at once without flow control), the noisy LISTs' and the quiet GETs'.

Why ``--request-timeout 12s`` by default (``--request-timeout ''`` for the servers'
own 1m): a request waits in its priority level's queue at most a quarter of it. At the
defaults the noisy user's 200 LISTs neither fill their queues (the global-default
level gives a flow 6 queues of 50) nor wait 15 s (the level borrows seats, and the
LISTs drain within seconds), so all are served, late, and no 429 shows; with a 3 s
wait limit the LISTs beyond what the level serves in 3 s are answered 429 with
Retry-After, as an operator would see a noisy client refused, while the creates and
GETs (milliseconds) are far from either limit. The seat flags stay at their defaults,
so the creates compare flow control with the plain limits as shipped.

Every load loop is bounded by its window; every process started here is stopped by its
PID before exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import names  # noqa: E402 - the repository goes on sys.path first
from apiserver_min.pki import Pki, cert_pem, key_pem, new_key, sign_leaf  # noqa: E402 - likewise
from tests.bench.bench_apiserver import (  # noqa: E402 - likewise
    BENCH_SCHEDULER,
    HOST,
    Bench,
    BenchError,
    Server,
    client_ssl,
    pct,
    spawn,
    stop_all,
    stop_proc,
    use_uvloop,
)

NS = "apf-bench"
WRITE_NS = "apf-bench-writes"
USERS = ("bench-writer", "bench-noisy", "bench-quiet")
GET_P99_TARGET = 0.100
DEFAULT_REQUEST_TIMEOUT = "12s"
CREATE_SHARE_TARGET = 0.95


class FlowServer(Server):
    def __init__(self, root: Path, name: str, extra: list[str]):
        super().__init__(root, "sqlite")
        self.data_dir = root / f"apiserver-{name}"
        self.log_path = root / f"apiserver-{name}.log"
        self.extra = extra
        self.user_creds: dict[str, dict] = {}

    def argv(self) -> list[str]:
        return super().argv() + self.extra

    def start(self, timeout: float = 60.0) -> "FlowServer":
        self.proc = None
        super().start(timeout)
        return self

    def mint_users(self) -> None:
        """Client certificates for the bench users, signed by the server's CA, and a
        binding of each to cluster-admin."""
        ca_cert, ca_key = Pki(str(self.data_dir)).load_ca()
        out = self.data_dir / "bench-creds"
        for user in USERS:
            key = new_key()
            cert = sign_leaf(ca_cert, ca_key, key.public_key(), user, client=True)
            (out / f"{user}.crt").write_bytes(cert_pem(cert))
            (out / f"{user}.key").write_bytes(key_pem(key))
            self.user_creds[user] = {
                "ca": self.creds["ca"],
                "cert": str(out / f"{user}.crt"),
                "key": str(out / f"{user}.key"),
            }
        binding = {
            "apiVersion": f"{names.RBAC_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "apf-bench-users"},
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": names.RBAC_GROUP, "kind": "User", "name": u} for u in USERS],
        }
        status, body = self.api("POST", f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings", binding)
        if status != 201:
            raise BenchError(f"binding the bench users: {status} {body[:300]!r}")
        for ns in (NS, WRITE_NS):
            status, body = self.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            if status != 201:
                raise BenchError(f"creating namespace {ns}: {status} {body[:300]!r}")


# --- a small HTTP/1.1 client that keeps the response headers -------------------------------


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.r, self.w = reader, writer

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext) -> "Conn":
        reader, writer = await asyncio.open_connection(HOST, port, ssl=ctx, server_hostname=HOST, limit=1 << 22)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, bytes]:
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n" % (
            method.encode(),
            path.encode(),
            HOST.encode(),
        )
        if method == "POST":
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self.w.write(head + b"\r\n" + body)
        hdr = await self.r.readuntil(b"\r\n\r\n")
        status = int(hdr[9:12])
        lower = hdr.lower()
        i = lower.find(b"\r\ncontent-length:")
        if i >= 0:
            j = lower.find(b"\r\n", i + 2)
            data = await self.r.readexactly(int(lower[i + 17 : j]))
        else:  # chunked
            parts = []
            while True:
                size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.r.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        return status, lower, data

    def close(self) -> None:
        self.w.close()


def small_pod(name: str) -> bytes:
    """A small pod (about 2.5 KB once stored with its defaults, token volume and
    managedFields), so that 5,000 of them list in about 12 MB."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "apf-bench"}},
            "spec": {
                "schedulerName": BENCH_SCHEDULER,
                "containers": [
                    {"name": "app", "image": "registry.local/bench/app:1.0", "resources": {"requests": {"cpu": "10m"}}}
                ],
            },
        }
    ).encode()


async def fill(port: int, creds: dict, count: int, conns: int = 32) -> None:
    ctx = client_ssl(creds)
    names_iter = iter(range(count))

    async def one() -> None:
        c = await Conn.open(port, ctx)
        try:
            for i in names_iter:
                status, _, data = await c.request("POST", f"/api/v1/namespaces/{NS}/pods", small_pod(f"pod-{i:07d}"))
                if status != 201:
                    raise BenchError(f"filling: {status} {data[:200]!r}")
        finally:
            c.close()

    await asyncio.gather(*(one() for _ in range(conns)))


# --- the noisy and quiet users, each in its own process -----------------------------------


async def noisy_main(spec: dict) -> dict:
    ctx = client_ssl(spec["creds"])
    deadline = time.monotonic() + spec["seconds"]
    out = {"ok": 0, "rejected": 0, "rejected_without_retry_after": 0, "other": 0, "first_other": "", "unfinished": 0}

    async def one() -> None:
        c = await Conn.open(spec["port"], ctx)
        try:
            while time.monotonic() < deadline:
                try:
                    status, head, data = await asyncio.wait_for(
                        c.request("GET", f"/api/v1/namespaces/{NS}/pods"), deadline - time.monotonic() + 20
                    )
                except asyncio.TimeoutError:
                    out["unfinished"] += 1
                    return
                if status == 200:
                    out["ok"] += 1
                elif status == 429:
                    out["rejected"] += 1
                    i = head.find(b"\r\nretry-after:")
                    if i < 0:
                        out["rejected_without_retry_after"] += 1
                        wait = 1.0
                    else:
                        wait = float(head[i + 14 : head.find(b"\r\n", i + 2)].strip())
                    await asyncio.sleep(min(wait, max(0.0, deadline - time.monotonic())))
                else:
                    out["other"] += 1
                    out["first_other"] = out["first_other"] or f"{status} {data[:200]!r}"
                    await asyncio.sleep(0.5)
        finally:
            c.close()

    await asyncio.gather(*(one() for _ in range(spec["concurrency"])))
    return out


async def quiet_main(spec: dict) -> dict:
    ctx = client_ssl(spec["creds"])
    c = await Conn.open(spec["port"], ctx)
    await asyncio.sleep(spec.get("delay", 0.0))
    deadline = time.monotonic() + spec["seconds"]
    lat: list[float] = []
    errors = rejected = 0
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            status, _, _ = await c.request("GET", f"/api/v1/namespaces/{NS}/pods/pod-0000001")
            lat.append(time.perf_counter() - t0)
            rejected += status == 429
            errors += status not in (200, 429)
            await asyncio.sleep(0.01)
    finally:
        c.close()
    return {"latencies": lat, "errors": errors, "rejected": rejected}


def child_main(role: str, spec_json: str) -> int:
    use_uvloop()
    spec = json.loads(spec_json)
    result = asyncio.run(noisy_main(spec) if role == "_noisy" else quiet_main(spec))
    print(json.dumps(result), flush=True)
    return 0


def run_child(role: str, spec: dict, root: Path) -> subprocess.Popen:
    out = open(root / f"{role}-{spec['port']}.json", "w")  # noqa: SIM115 - closed with the child
    return spawn([sys.executable, __file__, role, json.dumps(spec)], stdout=out, stderr=subprocess.STDOUT)


def noisy_window(server: FlowServer, args, root: Path) -> dict:
    noisy = run_child(
        "_noisy",
        {
            "port": server.port,
            "creds": server.user_creds["bench-noisy"],
            "seconds": args.seconds,
            "concurrency": args.noisy,
        },
        root,
    )
    # The quiet user starts once the noisy LISTs are under way.
    quiet = run_child(
        "_quiet",
        {"port": server.port, "creds": server.user_creds["bench-quiet"], "seconds": args.seconds - 3, "delay": 2.0},
        root,
    )
    results = {}
    for role, proc in (("_noisy", noisy), ("_quiet", quiet)):
        try:
            proc.wait(timeout=args.seconds + 60)
        except subprocess.TimeoutExpired:
            stop_proc(proc)
            raise BenchError(f"{role} did not finish") from None
        text = (root / f"{role}-{server.port}.json").read_text().strip().splitlines()
        try:
            results[role] = json.loads(text[-1])
        except (IndexError, json.JSONDecodeError):
            raise BenchError(f"{role} failed: {' '.join(text[-5:])}") from None
    return results


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] in ("_noisy", "_quiet"):
        return child_main(sys.argv[1], sys.argv[2])
    parser = argparse.ArgumentParser(description="API priority and fairness: noisy neighbour and create cost")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each noisy-neighbour window")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--noisy", type=int, default=200, help="concurrent LISTs of the noisy user")
    parser.add_argument("--create-seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load-procs", type=int, default=2)
    parser.add_argument(
        "--inflight",
        default="",
        help="READ,MUTATING: --max-requests-inflight and --max-mutating-requests-inflight of both "
        "servers (default: the servers' defaults, 400,200)",
    )
    parser.add_argument(
        "--request-timeout",
        default=DEFAULT_REQUEST_TIMEOUT,
        help="both servers' --request-timeout; a request waits in its queue at most a quarter of it "
        f"(default {DEFAULT_REQUEST_TIMEOUT}: see the top of this file; '' for the servers' own, 1m)",
    )
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    use_uvloop()
    root = Path(tempfile.mkdtemp(prefix="orch-bench-apf-"))
    bench = Bench(args, {}, root)
    limits: list[str] = []
    if args.inflight:
        read, mutating = args.inflight.split(",")
        limits = ["--max-requests-inflight", read, "--max-mutating-requests-inflight", mutating]
    if args.request_timeout:
        limits += ["--request-timeout", args.request_timeout]
    print(
        f"in-flight limits: {args.inflight or '400,200 (defaults)'}; "
        f"--request-timeout {args.request_timeout or '1m (default)'}",
        flush=True,
    )
    servers = {
        "apf": FlowServer(root, "apf", limits),
        "no-apf": FlowServer(root, "no-apf", limits + ["--enable-priority-and-fairness=false"]),
    }
    started = time.monotonic()
    try:
        # Fill one server, then give the other a copy of its data (the same pods, users, CA).
        first, second = servers["apf"], servers["no-apf"]
        first.start()
        first.mint_users()
        t0 = time.monotonic()
        asyncio.run(fill(first.port, first.creds, args.pods))
        print(f"{args.pods} pods created in {time.monotonic() - t0:.1f}s", flush=True)
        first.stop()
        shutil.copytree(first.data_dir, second.data_dir)
        for server in servers.values():
            server.start()
            server.user_creds = first.user_creds
        rates: dict[str, list[float]] = {n: [] for n in servers}
        create_429: dict[str, int] = {n: 0 for n in servers}
        for _ in range(args.rounds):
            for name, server in servers.items():
                r = bench.load_window(
                    server.port,
                    server.user_creds["bench-writer"],
                    "create",
                    WRITE_NS,
                    args.create_seconds,
                    (server.pid,),
                    label=name,
                )
                # Small in-flight limits answer some creates 429 (at once without flow control,
                # after a queue wait with it): counted and shown, not a failure of the run.
                rejected = r["errors"].get("429", 0)
                other = {k: v for k, v in r["errors"].items() if k != "429"}
                if other:
                    raise BenchError(f"{name}: create errors {other}: {r['first_error']}")
                create_429[name] += rejected
                rates[name].append(r["rate"])
                print(f"  creates {name:7s} {r['rate']:8.0f}/s ({rejected} answered 429)", flush=True)
        noisy: dict[str, dict] = {}
        for name, server in servers.items():
            noisy[name] = noisy_window(server, args, root)
        print(f"\n(total run {time.monotonic() - started:.0f}s)")
        share = statistics.median(rates["apf"]) / statistics.median(rates["no-apf"])
        print(f"\n{'figure':52s} {'with APF':>10s} {'without':>10s} {'target':>10s}")
        print(
            f"{'creates/s (bench-writer, global-default level)':52s} {statistics.median(rates['apf']):10.0f} "
            f"{statistics.median(rates['no-apf']):10.0f} {'>=95%':>10s} "
            f"{share:.0%} {'met' if share >= CREATE_SHARE_TARGET else 'MISSED'}"
        )
        row = {}
        for name in servers:
            lat = sorted(noisy[name]["_quiet"]["latencies"])
            row[name] = (pct(lat, 0.50), pct(lat, 0.99), len(lat), noisy[name]["_quiet"]["errors"])
        p99 = row["apf"][1]
        print(f"{'quiet user GET p50 (ms)':52s} {row['apf'][0] * 1e3:10.1f} {row['no-apf'][0] * 1e3:10.1f} {'':>10s}")
        print(
            f"{'quiet user GET p99 (ms)':52s} {p99 * 1e3:10.1f} {row['no-apf'][1] * 1e3:10.1f} "
            f"{'<=100':>10s} {'met' if p99 <= GET_P99_TARGET else 'MISSED'}"
        )
        print(
            f"{'quiet user GETs (429s, other errors)':52s} "
            + " ".join(
                f"{row[n][2]:5d} ({noisy[n]['_quiet']['rejected']},{row[n][3]})".rjust(10) for n in ("apf", "no-apf")
            )
        )
        print(f"{'creates answered 429 (all rounds)':52s} {create_429['apf']:10d} {create_429['no-apf']:10d}")
        for label, key in (("noisy LISTs served", "ok"), ("noisy LISTs answered 429", "rejected")):
            print(f"{label:52s} {noisy['apf']['_noisy'][key]:10d} {noisy['no-apf']['_noisy'][key]:10d}")
        n = noisy["apf"]["_noisy"]
        ok429 = n["rejected"] > 0 and n["rejected_without_retry_after"] == 0
        seen = f"{n['rejected']} ({n['rejected_without_retry_after']} without)"
        print(
            f"{'noisy user got 429s with Retry-After (APF)':52s} {seen:>21s} "
            f"{'429s seen':>10s} {'met' if ok429 else 'MISSED'}"
        )
        for name in servers:
            if noisy[name]["_noisy"]["other"]:
                print(
                    f"{name}: noisy other statuses: {noisy[name]['_noisy']['other']} {noisy[name]['_noisy']['first_other']}"
                )
        return 0
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for server in servers.values():
            server.stop()
        stop_all()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
