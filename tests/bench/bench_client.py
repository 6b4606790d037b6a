"""What the controllers' in-process client costs per write (not a test):

    PYTHONPATH=. .venv/bin/python tests/bench/bench_client.py [--n N] [--rounds R]

One generic store on SQLite in a temporary directory, its watch cache running, the
RBAC index attached and the default policy reconciled (so RBAC answers from the real
default bindings, as in the server). Then, alternating in rounds, N ConfigMap
creates each way:

* ``store``: ``Store.create`` as the API server's own user (what the controllers did);
* ``client``: ``LocalClient.create`` as ``system:serviceaccount:orch-system:root-ca-cert-publisher``
  (the RBAC authorizer, then the same store call).

Printed: the median per-create CPU time of this process (all threads: steadier than wall time
on a shared machine) of each and the difference. The admission chain
is empty in both, so the difference is the client's own cost (authorization and the
call). Compare with the server CPU of one HTTPS create on loopback (~450 µs on the
development machine, bench_apiserver.py), which a loopback client would add on top.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.authz.authorizer import PrivilegedGroups, Union
from apiserver_min.authz.rbac import RbacAuthorizer, RbacIndex
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers.bootstrappolicy import reconcile_default_policy
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend


async def main(n: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        backend = SqliteBackend(f"{d}/state.db")
        cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
        index = RbacIndex.attach(cache, REGISTRY)
        authorizer = Union([PrivilegedGroups(), RbacAuthorizer(index)])
        store = Store(backend, REGISTRY, cache)
        await backend.start()
        await cache.start()
        await reconcile_default_policy(store)
        await cache.sync()
        ns_kind = REGISTRY.by_resource("", "v1", "namespaces")
        cm = REGISTRY.by_resource("", "v1", "configmaps")
        await store.create(ns_kind, "", {"metadata": {"name": "bench"}}, SYSTEM_USER)
        client = LocalClient(
            store, authorizer, controller_user("root-ca-cert-publisher"), names.CONTROLLER_MANAGER_FIELD_MANAGER
        )
        times: dict[str, list[float]] = {"store": [], "client": []}
        seq = 0

        async def one_round(way: str) -> None:
            nonlocal seq
            t0 = time.process_time()
            for _ in range(n):
                seq += 1
                obj = {"metadata": {"name": f"cm-{seq}"}, "data": {"k": "v"}}
                if way == "store":
                    await store.create(
                        cm, "bench", obj, SYSTEM_USER, field_manager=names.CONTROLLER_MANAGER_FIELD_MANAGER
                    )
                else:
                    await client.create(cm, "bench", obj)
            times[way].append((time.process_time() - t0) / n)

        await one_round("store")  # warm-up
        await one_round("client")
        times = {"store": [], "client": []}
        for r in range(rounds):
            for way in ("store", "client") if r % 2 == 0 else ("client", "store"):
                await one_round(way)
        # The authorization alone, without storage noise.
        t0 = time.process_time()
        for _ in range(n * 10):
            await client.authorize("create", cm, "bench")
        authz = (time.process_time() - t0) / (n * 10)
        s, c = statistics.median(times["store"]), statistics.median(times["client"])
        print(f"store.create   {s * 1e6:8.1f} µs")
        print(f"client.create  {c * 1e6:8.1f} µs  (+{(c - s) * 1e6:.1f} µs, {100 * (c - s) / s:+.1f} %)")
        print(f"authorize only {authz * 1e6:8.1f} µs (RBAC, default policy, service-account subject)")
        await cache.stop()
        await backend.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--rounds", type=int, default=8)
    a = p.parse_args()
    asyncio.run(main(a.n, a.rounds))
