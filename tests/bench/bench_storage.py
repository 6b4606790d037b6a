"""Storage backend figures (not a test): python tests/bench/bench_storage.py

Prints, for SQLite: creates/s through the backend with 64 concurrent tasks
(2 KB values), the raw sqlite3 insert rate in the same schema, and the time
to list 10,000 keys; for etcd (a private instance on loopback): creates/s
through the backend with 64 in flight against raw aetcd puts/s in the same
run, the same creates while a watch on the whole prefix consumes every event
(as the API server's watch cache does), and the time to list 10,000 keys.
Beside each rate: the CPU the calling thread (the event loop) spent per
operation, which bounds a single-loop server whatever its other threads do.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apiserver_min.storage.etcd import EtcdBackend
from apiserver_min.storage.sqlite import SqliteBackend

CONCURRENCY = 64
CREATES = 20_000
LIST_KEYS = 10_000
VALUE = os.urandom(1024).hex().encode()  # 2 KB


def _thread_cpu() -> float:
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


async def creates_per_second(create, count: int, prefix: str) -> float:
    return (await timed_creates(create, count, prefix))[0]


async def timed_creates(create, count: int, prefix: str) -> tuple[float, float]:
    """(creates/s, event-loop thread CPU seconds per create)."""
    counter = iter(range(count))

    async def worker():
        for i in counter:
            await create(f"{prefix}{i:07d}", VALUE)

    start, cpu = time.perf_counter(), _thread_cpu()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return count / (time.perf_counter() - start), (_thread_cpu() - cpu) / count


async def list_ms(store, prefix: str, runs: int = 5) -> tuple[float, float]:
    """(median ms of a full list, median ms of one 500-key page)."""
    full, page = [], []
    for _ in range(runs):
        start = time.perf_counter()
        result = await store.list(prefix)
        full.append((time.perf_counter() - start) * 1000)
        assert len(result.items) == LIST_KEYS, len(result.items)
        start = time.perf_counter()
        await store.list(prefix, start_after=result.items[4000].key, limit=500)
        page.append((time.perf_counter() - start) * 1000)
    return statistics.median(full), statistics.median(page)


async def raw_sqlite_inserts(path: str, count: int, per_txn: int) -> float:
    """Rows/s inserting into the backend's schema directly (log + current),
    ``per_txn`` rows per transaction, same pragmas."""
    await _init_schema(path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA locking_mode = EXCLUSIVE")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    start = time.perf_counter()
    rev = 0
    for base in range(0, count, per_txn):
        rows = []
        for i in range(base, min(count, base + per_txn)):
            rev += 1
            rows.append((rev, f"/raw/{i:07d}", rev, None, VALUE))
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO log (id, key, created, prev, value) VALUES (?, ?, ?, ?, ?)", rows)
        db.executemany("INSERT INTO current (key, id) VALUES (?, ?)", [(r[1], r[0]) for r in rows])
        db.execute("INSERT INTO commits (rev, ts) VALUES (?, ?)", (rev, time.time()))
        db.execute("COMMIT")
    rate = count / (time.perf_counter() - start)
    db.close()
    return rate


async def _init_schema(path: str) -> None:
    store = SqliteBackend(path, compaction_interval=0)
    await store.start()
    await store.close()


async def bench_sqlite(directory: str) -> None:
    print("SQLite (WAL, synchronous=NORMAL), 2 KB values")
    path = os.path.join(directory, "bench.db")
    store = SqliteBackend(path, compaction_interval=0)
    await store.start()
    try:
        rate = await creates_per_second(store.create, CREATES, "/bench/c/")
        print(f"  backend creates/s, {CONCURRENCY} concurrent tasks: {rate:,.0f}")
        await creates_per_second(store.create, LIST_KEYS, "/bench/list/")
        full, page = await list_ms(store, "/bench/list/")
        print(f"  list of {LIST_KEYS:,} keys: {full:.1f} ms; one 500-key page: {page:.2f} ms")
        rev = await store.current_revision()
        updates = [store.update(f"/bench/list/{i:07d}", VALUE, 0) for i in range(LIST_KEYS)]
        await asyncio.gather(*updates)
        start = time.perf_counter()
        old = await store.list("/bench/list/", revision=rev)
        ms = (time.perf_counter() - start) * 1000
        print(f"  list of {len(old.items):,} keys at an older revision (2 versions per key): {ms:.1f} ms")
    finally:
        await store.close()
    for per_txn in (1, CONCURRENCY):
        raw = await raw_sqlite_inserts(os.path.join(directory, f"raw{per_txn}.db"), CREATES, per_txn)
        print(f"  raw sqlite3 inserts/s, same schema, {per_txn} per transaction: {raw:,.0f}")


async def bench_etcd(endpoint: str) -> None:
    import aetcd

    print(f"etcd ({endpoint})")
    store = EtcdBackend([endpoint], prefix="/bench")
    await store.start()
    host, port = endpoint.rsplit(":", 1)
    client = aetcd.Client(host=host, port=int(port))
    await client.connect()
    try:
        count = CREATES // 2
        rate, cpu = await timed_creates(store.create, count, "/c/")
        raw, raw_cpu = await timed_creates(lambda k, v: client.put(b"/bench-raw" + k.encode(), v), count, "/p/")
        watched, watched_cpu = await _creates_under_watch(store, count)
        print(f"  backend creates/s (txn), {CONCURRENCY} in flight: {rate:,.0f} ({cpu * 1e6:.0f} us loop CPU/op)")
        print(f"  raw aetcd puts/s, {CONCURRENCY} in flight:       {raw:,.0f} ({raw_cpu * 1e6:.0f} us loop CPU/op)")
        print(
            f"  backend creates/s with a prefix watch consuming: {watched:,.0f} "
            f"({watched_cpu * 1e6:.0f} us loop CPU/op, the event's share included)"
        )
        await creates_per_second(store.create, LIST_KEYS, "/list/")
        full, page = await list_ms(store, "/list/")
        print(f"  list of {LIST_KEYS:,} keys: {full:.1f} ms; one 500-key page: {page:.2f} ms")
    finally:
        await client.close()
        await store.close()


async def _creates_under_watch(store: EtcdBackend, count: int) -> tuple[float, float]:
    """Creates while one watch on the whole prefix reads every event, counted
    until the last event arrived: what the backend costs the server's loop."""
    seen = 0
    done = asyncio.Event()
    after = await store.current_revision()

    async def consume() -> None:
        nonlocal seen
        async for ev in store.watch("/w/", after):
            if ev.type != "PROGRESS":
                seen += 1
                if seen == count:
                    done.set()

    task = asyncio.create_task(consume())
    try:
        await asyncio.sleep(0.2)  # the watch is registered
        start, cpu = time.perf_counter(), _thread_cpu()
        await timed_creates(store.create, count, "/w/")
        await asyncio.wait_for(done.wait(), 60)
        return count / (time.perf_counter() - start), (_thread_cpu() - cpu) / count
    finally:
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as directory:
        asyncio.run(bench_sqlite(directory))
    try:
        from tests.components import Etcd
    except ImportError as exc:  # pragma: no cover
        print(f"etcd: skipped ({exc})")
        return
    with Etcd(quota_backend_bytes=4 * 1024**3, log_level="warn") as etcd:
        asyncio.run(bench_etcd(etcd.endpoint))


if __name__ == "__main__":
    main()
