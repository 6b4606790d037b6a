"""One storage test suite, run against both backends (SQLite file, real etcd).

Revisions in etcd are global and shared by every test of the session (each
test has its own key prefix), so tests compare revisions relative to each
other, never against absolute numbers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from apiserver_min.storage.encryption import AESGCMProvider, EncryptingBackend, ResourceTransformer, Transformers
from apiserver_min.storage.etcd import EtcdBackend
from apiserver_min.storage.interface import (
    Backend,
    CompactedError,
    ConflictError,
    Event,
    FutureRevisionError,
    KeyExistsError,
    KeyNotFoundError,
    UnavailableError,
)
from apiserver_min.storage.sqlite import SqliteBackend
from tests.components import free_port
from tests.helpers import require_binary

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "etcd", "sqlite+aesgcm", "etcd+aesgcm"])
async def backend(request, tmp_path):
    inner: Backend
    if request.param.startswith("sqlite"):
        inner = SqliteBackend(str(tmp_path / "orch.db"), compaction_interval=0)
    else:
        etcd = request.getfixturevalue("etcd")
        prefix = request.getfixturevalue("etcd_prefix")
        inner = EtcdBackend([etcd.endpoint], prefix=prefix, timeout=10)
    store = inner
    if request.param.endswith("+aesgcm"):
        # The encryption-at-rest wrapper keeps the contract: every key encrypted with aesgcm.
        aesgcm = AESGCMProvider([("k1", os.urandom(32))])
        store = EncryptingBackend(inner, Transformers({"/": ResourceTransformer("*.*", [aesgcm])}))
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def take(iterator, n: int, timeout: float = 5.0) -> list[Event]:
    events = []
    for _ in range(n):
        events.append(await asyncio.wait_for(anext(iterator), timeout))
    return events


async def nothing_more(iterator, wait: float = 0.3) -> None:
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(anext(iterator), wait)


# -- create / get / update / delete -------------------------------------------------


async def test_create_and_get(backend):
    rev = await backend.create("/pods/default/a", b"one")
    kv = await backend.get("/pods/default/a")
    assert kv.key == "/pods/default/a"
    assert kv.value == b"one"
    assert kv.mod_revision == kv.create_revision == rev
    assert await backend.get("/pods/default/missing") is None
    assert await backend.current_revision() >= rev


async def test_create_existing_key(backend):
    await backend.create("/pods/default/a", b"one")
    with pytest.raises(KeyExistsError) as info:
        await backend.create("/pods/default/a", b"two")
    assert info.value.key == "/pods/default/a"
    assert (await backend.get("/pods/default/a")).value == b"one"


async def test_update_compare_and_swap(backend):
    created = await backend.create("/cm/x", b"v1")
    updated = await backend.update("/cm/x", b"v2", created)
    assert updated > created
    kv = await backend.get("/cm/x")
    assert (kv.value, kv.mod_revision, kv.create_revision) == (b"v2", updated, created)

    with pytest.raises(ConflictError) as info:
        await backend.update("/cm/x", b"stale", created)
    assert (info.value.expected, info.value.actual) == (created, updated)
    assert (await backend.get("/cm/x")).value == b"v2"

    with pytest.raises(KeyNotFoundError):
        await backend.update("/cm/absent", b"v", 1)


async def test_update_unconditional(backend):
    created = await backend.create("/cm/x", b"v1")
    rev = await backend.update("/cm/x", b"v2", 0)
    assert rev > created
    with pytest.raises(KeyNotFoundError):
        await backend.update("/cm/absent", b"v", 0)


async def test_delete(backend):
    created = await backend.create("/cm/x", b"v1")
    rev, prev = await backend.delete("/cm/x")
    assert rev > created
    assert (prev.key, prev.value, prev.mod_revision, prev.create_revision) == ("/cm/x", b"v1", created, created)
    assert await backend.get("/cm/x") is None
    with pytest.raises(KeyNotFoundError):
        await backend.delete("/cm/x")

    again = await backend.create("/cm/x", b"v2")
    assert again > rev
    assert (await backend.get("/cm/x")).create_revision == again


async def test_conditional_delete(backend):
    created = await backend.create("/cm/x", b"v1")
    updated = await backend.update("/cm/x", b"v2", created)
    with pytest.raises(ConflictError) as info:
        await backend.delete("/cm/x", created)
    assert info.value.actual == updated
    assert (await backend.get("/cm/x")).value == b"v2"
    rev, prev = await backend.delete("/cm/x", updated)
    assert rev > updated and prev.value == b"v2"
    with pytest.raises(KeyNotFoundError):
        await backend.delete("/cm/x", updated)


async def test_values_are_bytes_verbatim(backend):
    value = bytes(range(256)) * 8 + b""
    await backend.create("/bin/a", value)
    await backend.create("/bin/empty", b"")
    assert (await backend.get("/bin/a")).value == value
    assert (await backend.get("/bin/empty")).value == b""
    assert [kv.key for kv in (await backend.list("/bin/")).items] == ["/bin/a", "/bin/empty"]


# -- list ---------------------------------------------------------------------------


async def test_list_order_limit_and_paging(backend):
    names = [f"/pods/ns/p{i:02d}" for i in (7, 3, 11, 0, 5, 9, 1, 10, 2, 4, 8, 6)]
    for name in names:
        await backend.create(name, name.encode())
    await backend.create("/pods/ns2/other", b"x")  # shares the string prefix "/pods/ns"
    await backend.create("/podsX", b"x")

    everything = await backend.list("/pods/ns/")
    assert [kv.key for kv in everything.items] == sorted(names)
    assert all(kv.value == kv.key.encode() for kv in everything.items)
    assert (everything.more, everything.remaining) == (False, 0)
    assert everything.revision == await backend.current_revision()

    first = await backend.list("/pods/ns/", limit=5)
    assert [kv.key for kv in first.items] == sorted(names)[:5]
    assert (first.more, first.remaining) == (True, 7)

    # Page with start_after at the first page's snapshot revision.
    seen, after = [], ""
    while True:
        page = await backend.list("/pods/ns/", revision=first.revision, start_after=after, limit=5)
        seen += [kv.key for kv in page.items]
        assert page.revision == first.revision
        if not page.more:
            assert page.remaining == 0
            break
        assert page.remaining == len(names) - len(seen)
        after = page.items[-1].key
    assert seen == sorted(names)

    exact = await backend.list("/pods/ns/", limit=len(names))
    assert (len(exact.items), exact.more, exact.remaining) == (len(names), False, 0)
    assert (await backend.list("/pods/ns/", start_after="/pods/ns/p10")).items[0].key == "/pods/ns/p11"
    assert [kv.key for kv in (await backend.list("/pods/")).items][-1] == "/pods/ns2/other"
    assert (await backend.list("/nothing/")).items == []


async def test_list_at_older_revision(backend):
    a = await backend.create("/l/a", b"a1")
    await backend.create("/l/b", b"b1")
    snapshot = await backend.current_revision()
    await backend.update("/l/a", b"a2", a)
    await backend.delete("/l/b")
    await backend.create("/l/c", b"c1")

    old = await backend.list("/l/", revision=snapshot)
    assert old.revision == snapshot
    assert [(kv.key, kv.value) for kv in old.items] == [("/l/a", b"a1"), ("/l/b", b"b1")]
    assert old.items[0].mod_revision == a

    new = await backend.list("/l/")
    assert [(kv.key, kv.value) for kv in new.items] == [("/l/a", b"a2"), ("/l/c", b"c1")]

    limited = await backend.list("/l/", revision=snapshot, limit=1)
    assert ([kv.key for kv in limited.items], limited.more, limited.remaining) == (["/l/a"], True, 1)


async def test_count(backend):
    for i in range(7):
        await backend.create(f"/c/ns1/{i}", b"x")
    for i in range(3):
        await backend.create(f"/c/ns2/{i}", b"x")
    await backend.delete("/c/ns1/0")
    assert await backend.count("/c/ns1/") == 6
    assert await backend.count("/c/") == 9
    assert await backend.count("/c/none/") == 0


async def test_historical_get(backend):
    before = await backend.current_revision()
    r1 = await backend.create("/h/x", b"v1")
    r2 = await backend.update("/h/x", b"v2", r1)
    r3, _ = await backend.delete("/h/x")
    assert (await backend.get("/h/x", revision=r1)).value == b"v1"
    kv = await backend.get("/h/x", revision=r2)
    assert (kv.value, kv.mod_revision, kv.create_revision) == (b"v2", r2, r1)
    assert await backend.get("/h/x", revision=r3) is None
    assert await backend.get("/h/x", revision=before) is None


async def test_future_revision(backend):
    await backend.create("/f/x", b"v")
    current = await backend.current_revision()
    with pytest.raises(FutureRevisionError) as info:
        await backend.get("/f/x", revision=current + 1000)
    assert info.value.revision == current + 1000
    assert info.value.current >= current
    with pytest.raises(FutureRevisionError):
        await backend.list("/f/", revision=current + 1000)
    with pytest.raises(FutureRevisionError):
        await backend.compact(current + 1000)


async def test_compaction(backend):
    r1 = await backend.create("/k/x", b"v1")
    r2 = await backend.update("/k/x", b"v2", r1)
    await backend.create("/k/gone", b"g")
    r_del, _ = await backend.delete("/k/gone")
    r3 = await backend.update("/k/x", b"v3", r2)
    await backend.create("/k/y", b"y1")

    await backend.compact(r3)
    assert await backend.compacted_revision() >= r3

    for old in (r1, r2, r_del):
        with pytest.raises(CompactedError) as info:
            await backend.get("/k/x", revision=old)
        assert info.value.revision == old
        with pytest.raises(CompactedError):
            await backend.list("/k/", revision=old)

    # The state at the compacted revision and everything after stays readable.
    assert (await backend.get("/k/x", revision=r3)).value == b"v3"
    assert [kv.key for kv in (await backend.list("/k/", revision=r3)).items] == ["/k/x"]
    current = await backend.list("/k/")
    assert [(kv.key, kv.value) for kv in current.items] == [("/k/x", b"v3"), ("/k/y", b"y1")]
    assert current.items[0].create_revision == r1

    await backend.compact(r2)  # at or below the compacted revision: nothing to do
    assert await backend.compacted_revision() >= r3
    r4 = await backend.update("/k/x", b"v4", r3)
    assert r4 > r3


# -- watch --------------------------------------------------------------------------


async def test_watch_replays_history_then_live(backend):
    start = await backend.current_revision()
    r1 = await backend.create("/w/a", b"a1")
    r2 = await backend.update("/w/a", b"a2", r1)
    r3 = await backend.create("/w/b", b"b1")
    r4, _ = await backend.delete("/w/a")

    stream = backend.watch("/w/", start)
    try:
        events = await take(stream, 4)
        assert [(e.type, e.kv.key, e.kv.mod_revision) for e in events] == [
            ("PUT", "/w/a", r1),
            ("PUT", "/w/a", r2),
            ("PUT", "/w/b", r3),
            ("DELETE", "/w/a", r4),
        ]
        assert events[0].prev is None and events[0].kv.value == b"a1"
        assert events[1].prev.value == b"a1" and events[1].prev.mod_revision == r1
        assert events[1].kv.create_revision == r1
        assert events[3].kv.value == b"" and events[3].prev.value == b"a2"

        live = []
        r5 = await backend.create("/w/c", b"c1")
        r6 = await backend.update("/w/b", b"b2", r3)
        live = await take(stream, 2)
        assert [(e.type, e.kv.key, e.kv.mod_revision) for e in live] == [("PUT", "/w/c", r5), ("PUT", "/w/b", r6)]
        assert live[1].prev.value == b"b1"
        await nothing_more(stream)
    finally:
        await stream.aclose()


async def test_watch_from_middle_of_history(backend):
    r1 = await backend.create("/w/a", b"1")
    r2 = await backend.update("/w/a", b"2", r1)
    r3 = await backend.update("/w/a", b"3", r2)
    stream = backend.watch("/w/", r2)
    try:
        (event,) = await take(stream, 1)
        assert (event.kv.mod_revision, event.kv.value, event.prev.value) == (r3, b"3", b"2")
        await nothing_more(stream)
    finally:
        await stream.aclose()


async def test_watch_live_many_writes_in_order(backend):
    start = await backend.current_revision()
    stream = backend.watch("/wl/", start)
    try:
        revs = [await backend.create(f"/wl/{i:03d}", b"x") for i in range(20)]
        revs += list(await asyncio.gather(*(backend.create(f"/wl/g{i:03d}", b"y") for i in range(50))))
        events = await take(stream, 70)
        got = [e.kv.mod_revision for e in events]
        assert got == sorted(revs)
        await nothing_more(stream)
    finally:
        await stream.aclose()


async def test_watch_prefix_isolation(backend):
    start = await backend.current_revision()
    ns1 = backend.watch("/pods/ns1/", start)
    ns = backend.watch("/pods/ns", start)
    try:
        await backend.create("/pods/ns2/x", b"x")
        r = await backend.create("/pods/ns1/y", b"y")
        await backend.create("/pods/ns10/z", b"z")
        await backend.create("/other/ns1/y", b"o")
        (event,) = await take(ns1, 1)
        assert (event.kv.key, event.kv.mod_revision) == ("/pods/ns1/y", r)
        await nothing_more(ns1)
        assert [e.kv.key for e in await take(ns, 3)] == ["/pods/ns2/x", "/pods/ns1/y", "/pods/ns10/z"]
    finally:
        await ns1.aclose()
        await ns.aclose()


async def test_watch_reports_progress_past_other_prefixes(backend):
    """Writes outside a watch's prefix move the revision; asked for progress, the
    watch says it has delivered everything up to at least that revision."""
    start = await backend.current_revision()
    w = backend.watch("/quiet/", start)
    try:
        await backend.create("/quiet/a", b"a")
        outside = await backend.create("/busy/b", b"b")
        (first,) = await take(w, 1)
        assert (first.type, first.kv.key) == ("PUT", "/quiet/a")
        await backend.request_progress()
        (progress,) = await take(w, 1)
        assert progress.type == "PROGRESS" and progress.kv.key == ""
        assert progress.kv.mod_revision >= outside
    finally:
        await w.aclose()


async def test_watch_delete_events_carry_prev(backend):
    r1 = await backend.create("/d/x", b"last")
    stream = backend.watch("/d/", r1)
    try:
        rev, _ = await backend.delete("/d/x")
        (event,) = await take(stream, 1)
        assert event.type == "DELETE"
        assert (event.kv.key, event.kv.mod_revision, event.kv.value) == ("/d/x", rev, b"")
        assert (event.prev.value, event.prev.mod_revision, event.prev.create_revision) == (b"last", r1, r1)
    finally:
        await stream.aclose()


async def test_watch_without_prev(backend, request):
    """prev=False (the watch cache's watch): the same events; etcd sends no previous values."""
    r1 = await backend.create("/np/x", b"v1")
    stream = backend.watch("/np/", r1, prev=False)
    try:
        r2 = await backend.update("/np/x", b"v2", r1)
        r3, _ = await backend.delete("/np/x")
        put, gone = await take(stream, 2)
        assert (put.type, put.kv.value, put.kv.mod_revision, put.kv.create_revision) == ("PUT", b"v2", r2, r1)
        assert (gone.type, gone.kv.key, gone.kv.mod_revision) == ("DELETE", "/np/x", r3)
        if "etcd" in request.node.callspec.params["backend"]:
            assert put.prev is None and gone.prev is None
    finally:
        await stream.aclose()


async def test_watch_after_compaction(backend):
    start = await backend.current_revision()
    r1 = await backend.create("/wc/a", b"1")
    r2 = await backend.update("/wc/a", b"2", r1)
    r3 = await backend.update("/wc/a", b"3", r2)
    await backend.compact(r3)
    with pytest.raises(CompactedError):
        await take(backend.watch("/wc/", start), 1)
    with pytest.raises(CompactedError):
        await take(backend.watch("/wc/", r1), 1)
    stream = backend.watch("/wc/", r3)  # the compacted revision itself is a valid start
    try:
        r4 = await backend.update("/wc/a", b"4", r3)
        (event,) = await take(stream, 1)
        assert (event.kv.mod_revision, event.prev.value) == (r4, b"3")
    finally:
        await stream.aclose()


# -- concurrency ----------------------------------------------------------------------


async def test_concurrent_creates(backend):
    before = await backend.current_revision()
    revs = await asyncio.gather(*(backend.create(f"/cc/{i:04d}", b"v" * 100) for i in range(200)))
    assert len(set(revs)) == 200
    assert min(revs) > before
    assert await backend.current_revision() >= max(revs)
    listed = await backend.list("/cc/")
    assert [kv.mod_revision for kv in listed.items] == list(revs)


async def test_concurrent_compare_and_swap(backend):
    created = await backend.create("/cas/x", b"0")
    results = await asyncio.gather(
        *(backend.update("/cas/x", f"{i}".encode(), created) for i in range(20)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, int)]
    losers = [r for r in results if isinstance(r, ConflictError)]
    assert len(winners) == 1 and len(losers) == 19
    assert all(e.actual == winners[0] for e in losers)
    assert (await backend.get("/cas/x")).mod_revision == winners[0]


async def test_cancelling_a_watching_task(backend):
    stream = backend.watch("/", await backend.current_revision())
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await stream.aclose()
    await backend.create("/still-works", b"x")


async def test_close_ends_watches_and_refuses_calls(backend):
    stream = backend.watch("/", await backend.current_revision())
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.1)
    await backend.close()
    with pytest.raises(UnavailableError):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(UnavailableError):
        await backend.create("/x", b"x")
    with pytest.raises(UnavailableError):
        await backend.get("/x")


# -- backend specific ----------------------------------------------------------------


async def test_etcd_unreachable():
    store = EtcdBackend([f"127.0.0.1:{free_port()}"], timeout=0.5)
    with pytest.raises(UnavailableError):
        await store.start()


async def test_etcd_keys_live_under_prefix(etcd, etcd_prefix):
    require_binary("etcdctl", "etcd-client")
    store = EtcdBackend([etcd.endpoint], prefix=etcd_prefix)
    await store.start()
    try:
        await store.create("/pods/a", b"x")
        out = etcd.etcdctl("get", "--prefix", etcd_prefix, "--keys-only").stdout.split()
        assert out == [etcd_prefix + "/pods/a"]
    finally:
        await store.close()


async def test_etcd_compaction_done_elsewhere(etcd, etcd_prefix):
    """etcd compacted by someone else (etcdctl, --auto-compaction): learnt from answers."""
    require_binary("etcdctl", "etcd-client")
    store = EtcdBackend([etcd.endpoint], prefix=etcd_prefix)
    await store.start()
    try:
        r1 = await store.create("/e/x", b"1")
        r2 = await store.update("/e/x", b"2", r1)
        r3 = await store.update("/e/x", b"3", r2)
        etcd.etcdctl("compact", "--physical", str(r3))
        with pytest.raises(CompactedError):
            await store.get("/e/x", revision=r1)
        assert await store.compacted_revision() >= r1 + 1
    finally:
        await store.close()
    # A fresh client knows nothing; etcd's watch answer tells the exact revision.
    store = EtcdBackend([etcd.endpoint], prefix=etcd_prefix)
    await store.start()
    try:
        with pytest.raises(CompactedError) as info:
            await take(store.watch("/e/", r1), 1)
        assert info.value.compacted == r3
        assert await store.compacted_revision() == r3
    finally:
        await store.close()


async def test_etcd_down_raises_unavailable():
    from tests.components import Etcd

    with Etcd() as own:
        store = EtcdBackend([own.endpoint], prefix="/t/", timeout=2)
        await store.start()
        rev = await store.create("/a", b"x")
        stream = store.watch("/", rev)
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)
        own.stop()
        with pytest.raises(UnavailableError):
            await store.get("/a")
        with pytest.raises(UnavailableError):
            await store.create("/b", b"x")
        with pytest.raises(UnavailableError):
            await asyncio.wait_for(waiting, 10)
        await store.close()


@pytest.fixture
async def sqlite_path(tmp_path):
    return str(tmp_path / "orch.db")


async def test_sqlite_batch_cas_is_exact(sqlite_path):
    store = SqliteBackend(sqlite_path, compaction_interval=0)
    await store.start()
    try:
        r = await store.create("/x", b"0")
        # Issued in one loop iteration: one transaction, still exact CAS.
        results = await asyncio.gather(
            store.update("/x", b"1", r),
            store.update("/x", b"2", r),
            store.create("/y", b"y"),
            store.create("/y", b"y2"),
            store.delete("/x", r),
            return_exceptions=True,
        )
        assert isinstance(results[0], int)
        assert isinstance(results[1], ConflictError) and results[1].actual == results[0]
        assert isinstance(results[2], int) and isinstance(results[3], KeyExistsError)
        assert isinstance(results[4], ConflictError)
        assert results[2] == results[0] + 1  # failed writes use no revision
        assert await store.current_revision() == results[2]
    finally:
        await store.close()


async def test_sqlite_reopen_continues(sqlite_path):
    store = SqliteBackend(sqlite_path, compaction_interval=0)
    await store.start()
    r1 = await store.create("/a", b"1")
    await store.create("/b", b"1")
    r3, _ = await store.delete("/b")
    await store.compact(r3)  # drops the newest row (a tombstone)
    await store.close()

    store = SqliteBackend(sqlite_path, compaction_interval=0)
    await store.start()
    try:
        assert await store.current_revision() == r3
        assert await store.compacted_revision() == r3
        assert (await store.get("/a")).mod_revision == r1
        assert await store.create("/c", b"1") == r3 + 1
        with pytest.raises(CompactedError):
            await store.get("/a", revision=r1)
    finally:
        await store.close()


async def test_sqlite_second_opener_is_refused(sqlite_path):
    store = SqliteBackend(sqlite_path, compaction_interval=0)
    await store.start()
    try:
        other = SqliteBackend(sqlite_path, compaction_interval=0)
        with pytest.raises(UnavailableError):
            await other.start()
    finally:
        await store.close()


async def test_sqlite_slow_watcher_does_not_block_writers(sqlite_path):
    store = SqliteBackend(sqlite_path, compaction_interval=0, watch_queue_size=10)
    await store.start()
    try:
        start = await store.current_revision()
        stream = store.watch("/s/", start)
        (event,), first = await asyncio.gather(take(stream, 1), store.create("/s/0000", b"x"))
        assert event.kv.mod_revision == first
        # The consumer now sleeps while 500 writes land: far over its queue.
        revs = [first]
        for batch in range(10):
            revs += await asyncio.gather(*(store.create(f"/s/{batch}-{i:03d}", b"x") for i in range(50)))
        assert store.watch_overflows >= 1
        events = await take(stream, 500)
        assert [e.kv.mod_revision for e in events] == revs[1:]
        r = await store.create("/s/last", b"x")
        assert (await take(stream, 1))[0].kv.mod_revision == r
        await stream.aclose()
    finally:
        await store.close()


async def test_sqlite_time_based_compaction(sqlite_path):
    store = SqliteBackend(sqlite_path, compaction_interval=0, retention_seconds=0.2)
    await store.start()
    try:
        r1 = await store.create("/t", b"1")
        r2 = await store.update("/t", b"2", r1)
        await asyncio.sleep(0.3)
        r3 = await store.update("/t", b"3", r2)
        assert await store.compact_expired() == r2
        with pytest.raises(CompactedError):
            await store.get("/t", revision=r1)
        assert (await store.get("/t", revision=r2)).value == b"2"
        assert (await store.get("/t", revision=r3)).value == b"3"
    finally:
        await store.close()


async def test_sqlite_background_compaction(sqlite_path):
    store = SqliteBackend(sqlite_path, compaction_interval=0.05, retention_seconds=0.1)
    await store.start()
    try:
        r1 = await store.create("/t", b"1")
        await store.update("/t", b"2", r1)
        deadline = time.monotonic() + 5
        while await store.compacted_revision() < r1 + 1:
            assert time.monotonic() < deadline, "background compaction never ran"
            await asyncio.sleep(0.05)
    finally:
        await store.close()
    assert store._compactor is None


_WRITER = textwrap.dedent("""
    import asyncio, sys
    from apiserver_min.storage.sqlite import SqliteBackend

    async def main(path):
        store = SqliteBackend(path, compaction_interval=0)
        await store.start()
        counter = iter(range(10**9))

        async def worker():
            while True:
                key = f"/crash/{next(counter):08d}"
                rev = await store.create(key, key.encode() * 50)
                sys.stdout.write(f"{key} {rev}\\n")
                sys.stdout.flush()

        await asyncio.gather(*(worker() for _ in range(16)))

    asyncio.run(main(sys.argv[1]))
""")


@pytest.mark.slow
async def test_sqlite_acknowledged_writes_survive_kill_9(sqlite_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, sqlite_path],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: dict[str, int] = {}
    try:
        for line in proc.stdout:
            key, rev = line.split()
            acked[key] = int(rev)
            if len(acked) >= 3000:
                break
        assert len(acked) >= 3000, proc.stderr.read()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
    for line in rest.splitlines():  # acknowledged before the kill, still in the pipe
        key, rev = line.split()
        acked[key] = int(rev)
    assert proc.returncode == -signal.SIGKILL

    store = SqliteBackend(sqlite_path, compaction_interval=0)
    await store.start()
    try:
        stored = {kv.key: kv.mod_revision for kv in (await store.list("/crash/")).items}
        missing = {k: r for k, r in acked.items() if stored.get(k) != r}
        assert not missing, f"{len(missing)} acknowledged writes lost"
        top = max(acked.values())
        assert await store.current_revision() >= top
        assert await store.create("/after-crash", b"x") > top
    finally:
        await store.close()
