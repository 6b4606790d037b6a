"""Server CPU per pod create with many node agents' pod watches open (not a test).

    .venv/bin/python tests/bench/bench_watch_fanout.py [--watches 1000] [--creates 300]

Starts ``orch-apiserver`` (SQLite), creates ``--creates`` pods bound to nodes ``n0..``
(no agent runs them) and measures the server's CPU per create; then opens
``--watches`` watches as node agents do (``/api/v1/pods?fieldSelector=spec.nodeName=nI``,
one per node), waits until the server is quiet, and measures the same again. The
difference is what the watch cache's fan-out costs per event with that many node
agents: with the trigger index (storage/cacher.py) a pod event is offered to the
watches of its node only, so it should not grow with the node count. Same-run
baseline: the creates without the watches. Server CPU is from psutil (process CPU
time), so the figure holds on a shared machine better than any latency would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agent.client.config import load_orchconfig  # noqa: E402
from agent.client.rest import ApiClient  # noqa: E402
from tests.apiserver_fixtures import ApiServerProcess  # noqa: E402
from tests.components import free_port  # noqa: E402

NS = "fanout"


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def pod(i: int, nodes: int) -> dict:
    return {
        "metadata": {"name": f"p{i}"},
        "spec": {"nodeName": f"n{i % max(1, nodes)}", "containers": [{"name": "c", "image": "busybox"}]},
    }


async def creates(client: ApiClient, proc: psutil.Process, start: int, count: int, nodes: int) -> float:
    """Server CPU milliseconds per create over ``count`` creates."""
    c0 = cpu(proc)
    for i in range(start, start + count):
        await client.create(f"/api/v1/namespaces/{NS}/pods", pod(i, nodes))
    return (cpu(proc) - c0) / count * 1000


async def quiet(proc: psutil.Process, limit: float = 120.0) -> None:
    """Until the server uses under 0.05 cores over 2 s (the watches all set up)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while loop.time() < deadline:
        c0 = cpu(proc)
        await asyncio.sleep(2)
        if cpu(proc) - c0 < 0.1:
            return


async def amain(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="orch-bench-fanout-"))
    server = ApiServerProcess(work / "srv", free_port())
    client = None
    tasks: list[asyncio.Task] = []
    try:
        server.start(timeout=60)
        proc = psutil.Process(server.pid or 0)
        client = ApiClient(load_orchconfig(str(server.kubeconfig)), qps=-1, timeout=120)
        await client.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await creates(client, proc, 0, 50, args.watches)  # warm-up
        base = await creates(client, proc, 50, args.creates, args.watches)
        delivered = [0]

        async def watch(i: int) -> None:
            params = {"fieldSelector": f"spec.nodeName=n{i}", "timeoutSeconds": "600"}
            async for _type, _obj in client.watch("/api/v1/pods", params=params):
                delivered[0] += 1

        tasks = [asyncio.create_task(watch(i)) for i in range(args.watches)]
        await asyncio.sleep(5)
        await quiet(proc)
        before = delivered[0]
        loaded = await creates(client, proc, 50 + args.creates, args.creates, args.watches)
        await asyncio.sleep(2)
        extra = loaded - base
        print(
            f"bench_watch_fanout: server CPU per pod create {base:.2f} ms without watches (same-run baseline), "
            f"{loaded:.2f} ms with {args.watches} node watches open: +{extra:.2f} ms per event "
            f"(should not grow with --watches: compare --watches 10); {delivered[0] - before} of {args.creates} events delivered; "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            flush=True,
        )
        return 0
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if client is not None:
            await client.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--watches", type=int, default=1000, help="node agents' pod watches (one per node)")
    ap.add_argument("--creates", type=int, default=300, help="pod creates measured in each phase")
    args = ap.parse_args(argv)
    if args.watches < 1 or args.creates < 1:
        ap.error("--watches and --creates must be >= 1")
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
