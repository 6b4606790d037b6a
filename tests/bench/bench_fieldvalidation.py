"""Field validation cost (not a test):

    .venv/bin/python tests/bench/bench_fieldvalidation.py [--seconds 6] [--rounds 3] [--load-procs 2]

Starts ``orch-apiserver`` (SQLite, a subprocess, as tests/bench/bench_apiserver.py
does) and measures create throughput of 2 KB pods with distinct names on 64
concurrent keep-alive connections, alternating windows of
``fieldValidation=Ignore`` and ``fieldValidation=Strict`` (and the default,
Warn) in a rotating order, so that drift of the machine and the growing store
hit every level alike. Prints per level
the median creates/s and the server's CPU time per create, and the Strict vs
Ignore ratio; the target (issue 4) is Strict costing at most 25% over Ignore.
Also prints the in-process cost of decode + field validation of the same pod
body per level, which is the part that differs between the levels.

The load generator is bench_apiserver's minimal HTTP/1.1 client, in separate
processes. Every process started here is stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_apiserver as ba

CONNECTIONS = ba.CONNECTIONS
NAMESPACE = "fv-bench"
LEVELS = ("Ignore", "Strict", "Warn")


async def _load(spec: dict) -> dict:
    """``conns`` connections POSTing pods until the window ends."""
    ctx = ba.client_ssl(spec["creds"])
    conns = await asyncio.gather(*(ba.HttpConn.open(spec["port"], ctx) for _ in range(spec["conns"])))
    prefix, suffix = ba._pod_template(NAMESPACE)
    path = f"/api/v1/namespaces/{NAMESPACE}/pods?fieldValidation={spec['level']}"
    ok, errors, first_error = 0, 0, ""
    seq = iter(range(1 << 62))
    start = spec["start_at"] - time.time() + time.perf_counter()
    end = start + spec["duration"]
    await asyncio.sleep(max(0.0, start - time.perf_counter()))

    async def run(conn: ba.HttpConn) -> None:
        nonlocal ok, errors, first_error
        while time.perf_counter() < end:
            name = f"{spec['tag']}-{spec['wid']}-{next(seq)}"
            status, body = await conn.request("POST", path, prefix + name.encode() + suffix)
            if time.perf_counter() > end:
                break
            if status == 201:
                ok += 1
            else:
                errors += 1
                first_error = first_error or f"{status} {body[:300]!r}"

    await asyncio.gather(*(run(c) for c in conns))
    for conn in conns:
        conn.close()
    return {"ok": ok, "errors": errors, "first_error": first_error}


def worker_main(spec: dict) -> None:
    ba.use_uvloop()
    print(json.dumps(asyncio.run(_load(spec))), flush=True)


def window(server: ba.Server, level: str, seconds: float, procs: int, tag: str) -> dict:
    per = [CONNECTIONS // procs + (1 if i < CONNECTIONS % procs else 0) for i in range(procs)]
    start_at = time.time() + 1.5  # time for the workers to connect (TLS) first
    workers = [
        ba.spawn(
            [
                sys.executable,
                __file__,
                "_worker",
                json.dumps(
                    {
                        "port": server.port,
                        "creds": server.creds,
                        "conns": per[i],
                        "wid": i,
                        "level": level,
                        "tag": tag,
                        "start_at": start_at,
                        "duration": seconds,
                    }
                ),
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for i in range(procs)
    ]
    try:
        time.sleep(max(0.0, start_at - time.time()))
        cpu0 = server.cpu()
        time.sleep(max(0.0, start_at + seconds - time.time()))
        cpu1 = server.cpu()
        results = []
        for w in workers:
            out, _ = w.communicate(timeout=seconds + 60)
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
    finally:
        for w in workers:
            ba.stop_proc(w)
    ok = sum(r["ok"] for r in results)
    errors = sum(r["errors"] for r in results)
    if errors:
        raise ba.BenchError(
            f"{level}: {errors} failed creates, first: {next(r['first_error'] for r in results if r['first_error'])}"
        )
    return {"rate": ok / seconds, "cpu_per_req": (cpu1 - cpu0) / ok if ok else float("nan")}


def in_process_costs() -> dict[str, float]:
    """Microseconds per decode + field validation of the bench pod body, per level."""
    sys.path.insert(0, str(ba.REPO))
    from apiserver_min.api import codec
    from apiserver_min.api.schemas import schema_for
    from apiserver_min.registry import fieldvalidation

    body = ba.pod_body(NAMESPACE, "pod-0000001")
    schema = schema_for("", "v1", "Pod")
    out = {}
    n = 5000
    t0 = time.perf_counter()
    for _ in range(n):
        codec.decode_object_body(body, "application/json")
    out["decode only"] = (time.perf_counter() - t0) / n * 1e6
    for level in LEVELS:
        t0 = time.perf_counter()
        for _ in range(n):
            fieldvalidation.validate_decoded(
                codec.decode_object_body(body, "application/json"), schema, level, kind="Pod", version="v1"
            )
        out[level] = (time.perf_counter() - t0) / n * 1e6
    return out


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "_worker":
        worker_main(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="length of one load window")
    ap.add_argument("--rounds", type=int, default=3, help="windows per level (alternating)")
    ap.add_argument("--load-procs", type=int, default=2)
    args = ap.parse_args()

    costs = in_process_costs()
    print(
        "decode + field validation of a 2 KB pod, in process (µs): "
        + ", ".join(f"{k} {v:.1f}" for k, v in costs.items()),
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="orch-bench-fv-") as tmp:
        server = ba.Server(Path(tmp), "sqlite")
        try:
            server.start()
            status, body = server.api(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            )
            if status != 201:
                raise ba.BenchError(f"creating namespace {NAMESPACE}: {status} {body[:300]!r}")
            time.sleep(1.0)  # the namespace's service account and root CA are published
            window(server, "Ignore", 2.0, args.load_procs, "warmup")
            figures: dict[str, list[dict]] = {level: [] for level in LEVELS}
            for r in range(args.rounds):
                # Rotate the order: the store grows every window, which must not favour a level.
                for level in LEVELS[r % len(LEVELS) :] + LEVELS[: r % len(LEVELS)]:
                    res = window(server, level, args.seconds, args.load_procs, f"r{r}{level[0].lower()}")
                    figures[level].append(res)
                    print(
                        f"  round {r + 1} {level:6s}: {res['rate']:7.0f} creates/s, server CPU "
                        f"{res['cpu_per_req'] * 1e6:6.0f} µs/create",
                        flush=True,
                    )
        finally:
            server.stop()
            ba.stop_all()

    med = {
        level: {
            "rate": statistics.median(x["rate"] for x in figures[level]),
            "cpu": statistics.median(x["cpu_per_req"] for x in figures[level]),
        }
        for level in LEVELS
    }
    print(
        f"\ncreate throughput, {CONNECTIONS} clients, 2 KB pods, SQLite (median of {args.rounds} "
        f"windows of {args.seconds:g} s):"
    )
    for level in LEVELS:
        print(
            f"  fieldValidation={level:6s}: {med[level]['rate']:7.0f} creates/s, server CPU "
            f"{med[level]['cpu'] * 1e6:6.0f} µs/create"
        )
    ratio = med["Ignore"]["rate"] / med["Strict"]["rate"]
    cpu_ratio = med["Strict"]["cpu"] / med["Ignore"]["cpu"]
    verdict = "met" if ratio <= 1.25 else "MISSED"
    print(
        f"Strict vs Ignore: throughput Ignore/Strict = {ratio:.3f} (cost {100 * (ratio - 1):+.1f}%), "
        f"server CPU per create Strict/Ignore = {cpu_ratio:.3f}; target <= 1.25: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
