"""Admission webhook cost (not a test):

    .venv/bin/python tests/bench/bench_webhook.py [--seconds S] [--rounds R] [--conns N]

Starts ``orch-apiserver`` and an HTTPS admission webhook on 127.0.0.1 (the test
webhook server of tests/webhook_server.py, an aiohttp server that allows
everything), then measures ConfigMap creates per second with N keep-alive
connections:

* baseline: creates in a namespace no webhook matches;
* with one validating webhook (``failurePolicy: Fail``) matching every ConfigMap
  create in the other namespace (by namespaceSelector), in the same server; the
  webhook runs in a process of its own (``python -m tests.webhook_server``), as
  webhooks do.

The two alternate over several windows (``--rounds``, ``--seconds`` each) and the
medians are printed, with the server's CPU per create (from /proc), the steadier
figure on a shared machine.

It prints both figures and their ratio next to the target (>= 60% of the
baseline). The load generator, the webhook and the server share the machine's
cores. Every process started here is stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import names  # noqa: E402 - after the path set-up above
from tests.apiserver_fixtures import ApiServerProcess  # noqa: E402 - after the path set-up above
from tests.bench.bench_apiserver import HttpConn  # noqa: E402 - after the path set-up above
from tests.components import free_port  # noqa: E402 - after the path set-up above

TARGET_RATIO = 0.60


def configmap(name: str) -> bytes:
    return json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v" * 512}}
    ).encode()


def server_cpu(server: ApiServerProcess) -> float:
    """The server's CPU seconds so far (user + system, from /proc)."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def creates_per_second(
    server: ApiServerProcess, namespace: str, tag: str, seconds: float, conns: int
) -> tuple[float, float]:
    """(creates per second, server CPU milliseconds per create)"""
    ctx = server.ssl_context()
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    done = 0
    failures: list[str] = []
    stop_at = 0.0

    async def worker(w: int) -> None:
        nonlocal done
        conn = await HttpConn.open(server.port, ctx)
        i = 0
        try:
            while time.monotonic() < stop_at:
                status, body = await conn.request("POST", path, configmap(f"{tag}-{w}-{i}"))
                i += 1
                if status == 201:
                    done += 1
                elif len(failures) < 3:
                    failures.append(f"{status} {body[:200]!r}")
        finally:
            conn.close()

    stop_at = time.monotonic() + 1.0  # warm-up: connections, caches, the webhook's pool
    await asyncio.gather(*(worker(w) for w in range(conns)))
    done = 0
    cpu = server_cpu(server)
    started = time.monotonic()
    stop_at = started + seconds
    await asyncio.gather(*(worker(w + conns) for w in range(conns)))
    if failures:
        raise SystemExit(f"creates failed: {failures}")
    return done / (time.monotonic() - started), 1000 * (server_cpu(server) - cpu) / max(done, 1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-webhook-") as tmp:
        server = ApiServerProcess(Path(tmp) / "data", free_port())
        hook = subprocess.Popen(
            [sys.executable, "-m", "tests.webhook_server"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert hook.stdout is not None and hook.stdin is not None
            webhook = json.loads(hook.stdout.readline())
            with server:
                baseline, hooked = measure(server, webhook, args.seconds, args.conns, args.rounds)
        finally:
            if hook.stdin is not None:
                hook.stdin.close()
            try:
                hook.wait(10)
            except subprocess.TimeoutExpired:
                hook.kill()
                hook.wait(10)
    b_rate, h_rate = statistics.median(x[0] for x in baseline), statistics.median(x[0] for x in hooked)
    b_cpu, h_cpu = statistics.median(x[1] for x in baseline), statistics.median(x[1] for x in hooked)
    ratio = statistics.median(h[0] / b[0] for b, h in zip(baseline, hooked))
    print(f"windows: {args.rounds} x {args.seconds:g} s each, alternating, {args.conns} connections (medians)")
    print(f"creates/s without webhooks:          {b_rate:8.1f}   server CPU {b_cpu:.2f} ms/create")
    print(f"creates/s with 1 validating webhook: {h_rate:8.1f}   server CPU {h_cpu:.2f} ms/create")
    print(f"webhook call cost in the server: {h_cpu - b_cpu:.2f} ms CPU per create")
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(f"ratio: {ratio:.0%}   target >= {TARGET_RATIO:.0%} ({verdict} it)")
    return 0


def measure(
    server: ApiServerProcess, webhook: dict, seconds: float, conns: int, rounds: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Alternating windows (baseline, hooked) so that the load of the machine, which
    drifts, falls on both alike."""
    server.json("POST", "/api/v1/namespaces", {"metadata": {"name": "baseline"}}, expect=201)
    server.json(
        "POST", "/api/v1/namespaces", {"metadata": {"name": "hooked", "labels": {"bench": "hooked"}}}, expect=201
    )
    server.json(
        "POST",
        f"/apis/{names.ADMISSIONREGISTRATION_GROUP}/v1/validatingwebhookconfigurations",
        {
            "metadata": {"name": "bench"},
            "webhooks": [
                {
                    "name": "allow.bench.orch.test",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{webhook['port']}/allow",
                        "caBundle": webhook["caBundle"],
                    },
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"bench": "hooked"}},
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        },
        expect=201,
    )
    time.sleep(0.5)
    baseline, hooked = [], []
    for r in range(rounds):
        baseline.append(asyncio.run(creates_per_second(server, "baseline", f"b{r}", seconds, conns)))
        hooked.append(asyncio.run(creates_per_second(server, "hooked", f"h{r}", seconds, conns)))
    return baseline, hooked


if __name__ == "__main__":
    sys.exit(main())
