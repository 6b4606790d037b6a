"""Service proxy rule-sync figures (not a test):

    .venv/bin/python tests/bench/bench_proxy.py [--services 1000] [--endpoints 5] [--changes 20]

Feeds the agent's ServiceProxy N ClusterIP Services and their EndpointSlices
(``--endpoints`` each) directly (no API server) and times its syncs: the first,
full one (build, render, ``nft -f``), then ``--changes`` syncs that each change one
endpoint of one service (incremental), printed beside the targets (full <= 1 s,
one change <= 50 ms). As root with ``nft`` the rules are applied to the real table
(``ip orch-proxy``, removed at the end) under ``unreachable`` routes for the
service and endpoint ranges, and no traffic is sent; otherwise only the rendering
is timed and the script is said to be unapplied.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agent.proxy import ruleset  # noqa: E402 - after the path set-up
from agent.proxy.nft import make_runner  # noqa: E402 - after the path set-up
from agent.proxy.proxier import ServiceProxy  # noqa: E402 - after the path set-up
from apiserver_min.api import names  # noqa: E402 - after the path set-up

SERVICE_RANGE = ipaddress.ip_network("10.111.128.0/17")
ENDPOINT_RANGE = ipaddress.ip_network("10.253.128.0/17")


class FeedInformer:
    def __init__(self, client, path, **kw) -> None:
        self.handlers: list = []

    def add_handler(self, on_add=None, on_update=None, on_delete=None) -> None:
        self.handlers.append((on_add, on_update, on_delete))


class RenderOnly:
    def __init__(self) -> None:
        self.lines = 0

    async def apply(self, script: str) -> None:
        self.lines = script.count("\n")


def service(i: int) -> dict:
    return {
        "metadata": {"namespace": "bench", "name": f"svc-{i}"},
        "spec": {"clusterIP": str(SERVICE_RANGE[i + 1]), "ports": [{"name": "http", "port": 80}]},
    }


def eps(i: int, n: int, shift: int = 0) -> dict:
    base = i * n + shift
    return {
        "metadata": {"namespace": "bench", "name": f"svc-{i}-1", "labels": {names.LABEL_SERVICE_NAME: f"svc-{i}"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [str(ENDPOINT_RANGE[base + k + 1])], "nodeName": "n1"} for k in range(n)],
    }


async def run(n_services: int, n_eps: int, changes: int, apply: bool) -> None:
    runner = make_runner() if apply else RenderOnly()
    print(f"applied through: {getattr(runner, 'path', '(rendering only)')}")
    proxy = ServiceProxy(None, "n1", runner=runner, informer_factory=FeedInformer)
    add_svc = proxy.services.handlers[0][0]
    add_slice, update_slice = proxy.slices.handlers[0][0], proxy.slices.handlers[0][1]
    for i in range(n_services):
        add_svc(service(i))
        add_slice(eps(i, n_eps))
    t = time.perf_counter()
    await proxy.sync()
    full = time.perf_counter() - t
    size = sum(len(f.chains) for f in proxy.applied.values())
    print(f"full sync, {n_services} services, {n_services * n_eps} endpoints ({size} chains): "
          f"{full * 1000:.0f} ms (target <= 1000 ms){'' if apply else ' [rendered, not applied]'}")  # fmt: skip
    times = []
    for c in range(changes):
        i = (c * 37) % n_services
        slice_now = eps(i, n_eps, shift=0)
        # One endpoint's address changes (a pod replaced).
        slice_now["endpoints"][0]["addresses"] = [str(ENDPOINT_RANGE[(n_services + 1) * n_eps + 1 + c])]
        update_slice(None, slice_now)
        t = time.perf_counter()
        await proxy.sync()
        times.append(time.perf_counter() - t)
    print(f"one changed endpoint, {changes} syncs: median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms (target <= 50 ms)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--endpoints", type=int, default=5)
    ap.add_argument("--changes", type=int, default=20)
    args = ap.parse_args()
    apply = os.geteuid() == 0 and shutil.which("nft") is not None
    routes = [str(SERVICE_RANGE), str(ENDPOINT_RANGE)]
    if apply:
        for r in routes:
            subprocess.run(["ip", "route", "add", "unreachable", r], check=True)
    try:
        asyncio.run(run(args.services, args.endpoints, args.changes, apply))
    finally:
        if apply:
            subprocess.run(["nft", "-f", "-"], input=ruleset.delete_script().encode(), check=False)
            for r in routes:
                subprocess.run(["ip", "route", "del", "unreachable", r], check=False)


if __name__ == "__main__":
    main()
