"""Service allocation figures (not a test):

    .venv/bin/python tests/bench/bench_service_alloc.py [--services N] [--range CIDR]

In process, on a temporary SQLite database, through the generic store with the
Service allocators wired as the server wires them: creates N ClusterIP Services and
N NodePort Services one after another and prints the time per create for each kind,
a plain ConfigMap create for comparison, the stored size of each range bitmap, and the
time of one repair round over all of them.
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

from apiserver_min.api.kinds import REGISTRY  # noqa: E402 - after the path set-up
from apiserver_min.api.user import SYSTEM_USER  # noqa: E402 - after the path set-up
from apiserver_min.registry.core import ServiceStrategy  # noqa: E402 - after the path set-up
from apiserver_min.registry.servicerepair import ServiceRangeRepair  # noqa: E402 - after the path set-up
from apiserver_min.registry.services import ServiceAllocators  # noqa: E402 - after the path set-up
from apiserver_min.registry.store import Store  # noqa: E402 - after the path set-up
from apiserver_min.storage.cacher import WatchCache  # noqa: E402 - after the path set-up
from apiserver_min.storage.keys import key_prefix  # noqa: E402 - after the path set-up
from apiserver_min.storage.sqlite import SqliteBackend  # noqa: E402 - after the path set-up


async def main(n: int, cidr: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend = SqliteBackend(f"{tmp}/state.db", compaction_interval=0)
        await backend.start()
        store = Store(backend, REGISTRY, WatchCache(backend, list(REGISTRY.kinds), key_prefix))
        allocs = ServiceAllocators(backend, [cidr], 30000, 2768)
        svc_kind = REGISTRY.by_resource("", "v1", "services")
        cm_kind = REGISTRY.by_resource("", "v1", "configmaps")
        strategy = store.strategy(svc_kind)
        assert isinstance(strategy, ServiceStrategy)
        strategy.allocators = allocs

        async def timed(kind, make) -> float:
            t0 = time.perf_counter()
            for i in range(n):
                await store.create(kind, "default", make(i), SYSTEM_USER)
            return (time.perf_counter() - t0) / n * 1000

        cm = await timed(cm_kind, lambda i: {"metadata": {"name": f"cm{i}"}, "data": {"a": "b"}})
        cip = await timed(svc_kind, lambda i: {"metadata": {"name": f"c{i}"}, "spec": {"ports": [{"port": 80}]}})
        np = await timed(
            svc_kind,
            lambda i: {"metadata": {"name": f"n{i}"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}},
        )
        print(f"create, ms each over {n}: ConfigMap {cm:.2f}, ClusterIP Service {cip:.2f}, NodePort Service {np:.2f}")
        for alloc in [*allocs.ips.values(), allocs.ports]:
            kv = await backend.get(alloc.store.key)
            assert kv is not None
            print(f"{alloc.store.key}: {alloc.size} values, {len(kv.value)} bytes stored")
        repair = ServiceRangeRepair(store, REGISTRY, allocs)
        t0 = time.perf_counter()
        await repair.repair()
        print(f"one repair round over {2 * n} Services: {(time.perf_counter() - t0) * 1000:.1f} ms")
        await backend.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--services", type=int, default=500)
    p.add_argument("--range", default="10.96.0.0/12")
    a = p.parse_args()
    asyncio.run(main(a.services, a.range))
