"""etcd watch progress: which servers order requested progress with events, and
the marker-write path used against the others (etcd 3.4.23 here is one)."""

import asyncio

import pytest

from apiserver_min.storage.etcd import PROGRESS_MARK, EtcdBackend, progress_is_ordered


@pytest.mark.parametrize(
    "version, ordered",
    [
        ("3.4.23", False),
        ("3.4.30", False),
        ("3.4.31", True),
        ("3.4.35", True),
        ("3.5.0", False),
        ("3.5.12", False),
        ("3.5.13", True),
        ("3.5.21", True),
        ("3.6.0", True),
        ("3.3.27", False),
        ("v3.5.13", True),
        ("", False),
        ("garbage", False),
    ],
)
def test_progress_ordering_by_server_version(version, ordered):
    assert progress_is_ordered(version) is ordered


@pytest.fixture
async def marker_backend(etcd, etcd_prefix):
    store = EtcdBackend([etcd.endpoint], prefix=etcd_prefix, timeout=10)
    await store.start()
    store.progress_ordered = False  # whatever the server is: the marker path
    try:
        yield store
    finally:
        await store.close()


async def _next(it, timeout: float = 5.0):
    return await asyncio.wait_for(anext(it), timeout)


async def test_marker_progress_comes_after_earlier_events_and_stays_hidden(marker_backend):
    b = marker_backend
    start = await b.current_revision()
    w = b.watch("/a/", start)
    try:
        r1 = await b.create("/a/x", b"1")
        outside = await b.create("/b/y", b"2")  # moves the revision outside the watch
        assert (await _next(w)).kv.mod_revision == r1
        await b.request_progress()
        progress = await _next(w)
        assert progress.type == "PROGRESS" and progress.kv.key == ""
        assert progress.kv.mod_revision > outside
        # The marker lives inside the watched range but is never an object.
        listed = await b.list("/a/")
        assert [kv.key for kv in listed.items] == ["/a/x"]
        everything = await b.list("/")
        assert all(PROGRESS_MARK.decode() not in kv.key for kv in everything.items)
        r2 = await b.update("/a/x", b"3", r1)
        ev = await _next(w)
        assert (ev.type, ev.kv.mod_revision, ev.prev.value) == ("PUT", r2, b"1")
    finally:
        await w.aclose()


async def test_a_wider_watch_sees_a_narrower_watchs_marker_as_progress(marker_backend):
    b = marker_backend
    start = await b.current_revision()
    narrow, wide = b.watch("/a/", start), b.watch("/", start)
    try:
        r1 = await b.create("/a/x", b"1")
        assert (await _next(narrow)).kv.mod_revision == r1
        assert (await _next(wide)).kv.mod_revision == r1
        await b.request_progress()
        got = [await _next(wide), await _next(wide)]  # the markers of both watches
        assert [e.type for e in got] == ["PROGRESS", "PROGRESS"]
        assert (await _next(narrow)).type == "PROGRESS"
    finally:
        await narrow.aclose()
        await wide.aclose()


async def test_server_version_is_read_at_start(etcd, etcd_prefix):
    store = EtcdBackend([etcd.endpoint], prefix=etcd_prefix, timeout=10)
    await store.start()
    try:
        assert store.server_version.count(".") == 2
        assert store.progress_ordered is progress_is_ordered(store.server_version)
    finally:
        await store.close()
