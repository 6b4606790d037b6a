"""Server-side apply figures (not a test):

    .venv/bin/python tests/bench/bench_apply.py [--seconds S] [--clients N] [--cprofile DIR]

Starts ``orch-apiserver`` (SQLite) as tests/bench/bench_apiserver.py does and, in
the same run, measures with N (default 64) concurrent keep-alive connections:

* create throughput: POST of 2 KB pods with distinct names, over a fixed window;
* apply throughput: each client owns one pod and applies it again and again
  (``application/apply-patch+yaml``, its own ``fieldManager``), with an
  annotation that changes every time, so each apply is a real merge, ownership
  update and write -- the first apply of each client creates its pod.

Each figure comes with the server's CPU time per request (from /proc), which
depends less than requests/s on how the two cores are shared between server and
load generator. Target: apply >= 50% of create throughput. The load generator
is one asyncio loop in this process (the minimal HTTP/1.1 client of
bench_apiserver). The server is stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import orjson

from tests.bench.bench_apiserver import CProfileRun, HttpConn, Server, _pod, client_ssl, stop_all, use_uvloop

APPLY_TYPE = b"application/apply-patch+yaml"
NAMESPACE = "bench-apply"


async def _window(server: Server, clients: int, seconds: float, one) -> tuple[int, float, float, int]:
    """Run ``one(conn, client, seq)`` on every connection for ``seconds``: (requests, wall,
    server CPU seconds, errors)."""
    ctx = client_ssl(server.creds)
    conns = [await HttpConn.open(server.port, ctx) for _ in range(clients)]
    done = 0
    errors = 0
    stop_at = 0.0

    async def run(i: int, conn: HttpConn) -> None:
        nonlocal done, errors
        seq = 0
        while time.monotonic() < stop_at:
            status = await one(conn, i, seq)
            seq += 1
            if 200 <= status < 300:
                done += 1
            else:
                errors += 1

    cpu0 = server.cpu()
    t0 = time.monotonic()
    stop_at = t0 + seconds
    await asyncio.gather(*(run(i, c) for i, c in enumerate(conns)))
    wall = time.monotonic() - t0
    cpu = server.cpu() - cpu0
    for c in conns:
        c.close()
    return done, wall, cpu, errors


def _body(name: str, seq: int) -> bytes:
    return orjson.dumps(_pod(NAMESPACE, name, {"bench.orch.io/seq": str(seq), "bench.orch.io/pad": "p" * 600}))


async def bench(args) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-apply-") as tmp:
        server = Server(Path(tmp), "sqlite", cprofile_dir=args.cprofile).start()
        try:
            status, body = server.api("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            if status != 201:
                print(f"cannot create the namespace: {status} {body[:200]!r}")
                return 1
            pods = f"/api/v1/namespaces/{NAMESPACE}/pods"

            window = [0]  # names stay distinct across windows

            async def create(conn: HttpConn, i: int, seq: int) -> int:
                status, data = await conn.request("POST", pods, _body(f"c{window[0]}-{i:03d}-{seq:06d}", 0))
                if status >= 300 and seq == 0:
                    print(f"create failed: {status} {data[:300]!r}")
                return status

            async def apply(conn: HttpConn, i: int, seq: int) -> int:
                name = f"a-{i:03d}"
                status, data = await conn.request(
                    "PATCH", f"{pods}/{name}?fieldManager=bench-{i}", _body(name, seq), ctype=APPLY_TYPE
                )
                if status >= 300 and seq == 0:
                    print(f"apply failed: {status} {data[:300]!r}")
                return status

            await _window(server, args.clients, 1.0, create)  # warm-up (caches, connections)
            rows = []
            for label, fn in (("create", create), ("apply", apply)):
                window[0] += 1
                prof = CProfileRun(server.pid, label, Path(args.cprofile)) if args.cprofile else None
                if prof:
                    prof.start()
                n, wall, cpu, errors = await _window(server, args.clients, args.seconds, fn)
                if prof:
                    prof.stop()
                rows.append((label, n / wall, cpu / max(n, 1) * 1000, errors))
            print(f"{'figure':<10} {'req/s':>9} {'server ms CPU/req':>18} {'errors':>7}")
            for label, rate, cpu_ms, errors in rows:
                print(f"{label:<10} {rate:>9.0f} {cpu_ms:>18.2f} {errors:>7}")
            ratio = rows[1][1] / rows[0][1] if rows[0][1] else 0.0
            cpu_ratio = rows[0][2] / rows[1][2] if rows[1][2] else 0.0
            verdict = "PASS" if ratio >= 0.5 else "MISS"
            print(
                f"apply/create throughput: {ratio:.0%} (target >= 50%: {verdict}); "
                f"by server CPU per request: {cpu_ratio:.0%}"
            )
            if args.cprofile:
                import pstats

                for label, *_ in rows:
                    print(
                        f"\n--- cProfile of the {label} window (slower than unprofiled; "
                        f"{args.cprofile}/{label}.pstats) ---"
                    )
                    pstats.Stats(str(Path(args.cprofile) / f"{label}.pstats")).sort_stats("tottime").print_stats(25)
            return 0 if not any(r[3] for r in rows) else 1
        finally:
            server.stop()
            stop_all()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each measuring window")
    ap.add_argument("--clients", type=int, default=64, help="concurrent connections")
    ap.add_argument("--cprofile", metavar="DIR", help="profile the server (cProfile) in each window, stats in DIR")
    args = ap.parse_args()
    use_uvloop()
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
