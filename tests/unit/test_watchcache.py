"""The watch cache's in-memory mechanics: namespace slices, fan-out, waits."""

import asyncio

import pytest

from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.selectors import parse_field_selector, parse_label_selector
from apiserver_min.storage.cacher import ResourceCache, WatchCache, Watcher, WatcherClosed
from apiserver_min.storage.interface import CompactedError, Event, KeyValue, ListResult, UnavailableError

PODS = REGISTRY.by_resource("", "v1", "pods")
PREFIX = "/pods/"


def pod(ns: str, name: str, labels=None) -> bytes:
    return encode_for_storage(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}}}
    )


def put(cache: ResourceCache, ns: str, name: str, rev: int, labels=None):
    key = f"{PREFIX}{ns}/{name}"
    return cache.apply(Event("PUT", KeyValue(key, pod(ns, name, labels), rev, rev), None), 0.0)


def delete(cache: ResourceCache, ns: str, name: str, rev: int):
    key = f"{PREFIX}{ns}/{name}"
    return cache.apply(Event("DELETE", KeyValue(key, b"", rev, 0), None), 0.0)


def test_namespace_slices_stay_sorted_through_adds_and_deletes():
    c = ResourceCache(PODS, PREFIX)
    rev = 0
    # "a" and "a-b" share a prefix: the slice must not leak across namespaces.
    for ns in ("b", "a", "a-b", "ab"):
        for name in ("z", "m", "a"):
            rev += 1
            put(c, ns, name, rev)
    assert [e.name for e in c.sorted_entries("a")] == ["a", "m", "z"]
    assert [e.namespace for e in c.sorted_entries("a-b")] == ["a-b"] * 3
    rev += 1
    delete(c, "a", "m", rev)
    rev += 1
    put(c, "a", "b", rev)
    assert [e.name for e in c.sorted_entries("a")] == ["a", "b", "z"]
    keys = [e.key for e in c.sorted_entries()]
    assert keys == sorted(keys) and len(keys) == 12


async def test_events_reach_only_watchers_of_their_namespace():
    c = ResourceCache(PODS, PREFIX)
    all_ns, ns_a, ns_b = Watcher(c, None, None, None), Watcher(c, "a", None, None), Watcher(c, "b", None, None)
    for w in (all_ns, ns_a, ns_b):
        c.add_watcher(w)
    put(c, "a", "x", 1)
    put(c, "a", "y", 2)
    assert [e.rv for e in await ns_a.next_batch(1)] == [1, 2]
    assert [e.rv for e in await all_ns.next_batch(1)] == [1, 2]
    with pytest.raises(asyncio.TimeoutError):
        await ns_b.next_batch(0.05)


async def test_selector_watcher_sees_objects_enter_and_leave():
    c = ResourceCache(PODS, PREFIX)
    w = Watcher(c, None, parse_label_selector("app=web"), None)
    c.add_watcher(w)
    put(c, "a", "x", 1, {"app": "db"})
    put(c, "a", "x", 2, {"app": "web"})
    put(c, "a", "x", 3, {"app": "db"})
    assert [(e.type, e.rv) for e in await w.next_batch(1)] == [("ADDED", 2), ("DELETED", 3)]


async def test_waiting_watcher_wakes_on_offer_and_on_close():
    c = ResourceCache(PODS, PREFIX)
    w = Watcher(c, "a", None, None)
    c.add_watcher(w)
    waiting = asyncio.create_task(w.next_batch(5))
    await asyncio.sleep(0.01)
    put(c, "a", "x", 1)
    assert [e.rv for e in await waiting] == [1]
    waiting = asyncio.create_task(w.next_batch(5))
    await asyncio.sleep(0.01)
    w.close("done")
    with pytest.raises(WatcherClosed):
        await waiting
    assert c.watchers == []


async def test_cancelling_a_waiting_reader_is_a_cancellation_not_a_timeout():
    c = ResourceCache(PODS, PREFIX)
    w = Watcher(c, "a", None, None)
    task = asyncio.create_task(w.next_batch(5))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_watcher_that_falls_behind_is_closed(monkeypatch):
    import apiserver_min.storage.cacher as wc

    monkeypatch.setattr(wc, "WATCHER_QUEUE", 3)
    c = ResourceCache(PODS, PREFIX)
    w = Watcher(c, None, None, None)
    c.add_watcher(w)
    for rev in range(1, 6):
        put(c, "a", f"p{rev}", rev)
    assert w.closed_reason and "behind" in w.closed_reason
    assert c.watchers == []


def bound_pod(ns: str, name: str, node: str) -> bytes:
    return encode_for_storage(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {"nodeName": node}}
    )


async def test_watchers_pinned_to_a_node_or_name_get_only_their_objects_events():
    """A node agent's watch (spec.nodeName=X) is indexed by X: it sees its pods arrive when
    bound and leave when moved, other nodes' watchers are not offered them, and a
    watcher removed from the index gets nothing more."""
    c = ResourceCache(PODS, PREFIX)
    n1 = Watcher(c, None, None, parse_field_selector("spec.nodeName=n1"))
    n2 = Watcher(c, None, None, parse_field_selector("spec.nodeName=n2"))
    unbound = Watcher(c, None, None, parse_field_selector("spec.nodeName="))
    by_name = Watcher(c, "a", None, parse_field_selector("metadata.name=x"))
    others = Watcher(c, None, None, parse_field_selector("spec.nodeName!=n1"))
    for w in (n1, n2, unbound, by_name, others):
        c.add_watcher(w)
    assert n1.trigger == (None, "spec.nodeName", "n1") and others.trigger is None
    assert len(c.watchers) == 5

    def bind(name: str, node: str, rev: int):
        key = f"{PREFIX}a/{name}"
        return c.apply(Event("PUT", KeyValue(key, bound_pod("a", name, node), rev, rev), None), 0.0)

    bind("x", "", 1)
    bind("x", "n1", 2)
    bind("y", "n2", 3)
    bind("x", "n2", 4)  # not what a scheduler does, but the selector semantics hold
    delete(c, "a", "y", 5)
    assert [(e.type, e.rv) for e in await n1.next_batch(1)] == [("ADDED", 2), ("DELETED", 4)]
    assert [(e.type, e.rv) for e in await n2.next_batch(1)] == [("ADDED", 3), ("ADDED", 4), ("DELETED", 5)]
    assert [(e.type, e.rv) for e in await unbound.next_batch(1)] == [("ADDED", 1), ("DELETED", 2)]
    assert [(e.type, e.rv) for e in await by_name.next_batch(1)] == [("ADDED", 1), ("MODIFIED", 2), ("MODIFIED", 4)]
    assert [(e.type, e.rv) for e in await others.next_batch(1)] == [
        ("ADDED", 1),
        ("DELETED", 2),
        ("ADDED", 3),
        ("ADDED", 4),
        ("DELETED", 5),
    ]
    c.remove_watcher(n1)
    assert len(c.watchers) == 4 and c.trigger_fields["spec.nodeName"] == 2
    bind("z", "n1", 6)
    with pytest.raises(asyncio.TimeoutError):
        await n1.next_batch(0.05)


# --- the storage watch interrupted -----------------------------------------------------------


class _FlakyBackend:
    """A store whose watch breaks with a given error after handing out its queued events."""

    def __init__(self, error: Exception):
        self.error = error
        self.log: list[Event] = []
        self.lists = 0
        self.watched_from: list[int] = []
        self.breaks = 1

    async def list(self, prefix: str):
        self.lists += 1
        last = {}
        for ev in self.log:
            last[ev.kv.key] = ev
        items = [ev.kv for ev in last.values() if ev.type == "PUT"]
        return ListResult(items, self.log[-1].kv.mod_revision if self.log else 0, False, 0)

    async def watch(self, prefix: str, after: int, prev: bool = True):
        self.watched_from.append(after)
        for ev in [e for e in self.log if e.kv.mod_revision > after]:
            yield ev
        if self.breaks:
            self.breaks -= 1
            raise self.error
        while True:
            await asyncio.sleep(3600)

    def put(self, name: str) -> None:
        rev = len(self.log) + 1
        self.log.append(Event("PUT", KeyValue(f"{PREFIX}a/{name}", pod("a", name), rev, rev), None))


async def _watched(backend: _FlakyBackend) -> tuple[WatchCache, ResourceCache, Watcher]:
    """A watch cache over ``backend`` (holding pod "x"), and a watcher of namespace "a"."""
    backend.put("x")
    cache = WatchCache(backend, [PODS], lambda kind: PREFIX)  # type: ignore[arg-type]
    await cache.start()
    c = cache.cache(PREFIX)
    w = Watcher(c, "a", None, None)
    c.add_watcher(w)
    return cache, c, w


async def _until(cond, what: str):
    for _ in range(200):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_store_away_for_a_while_is_watched_again_without_losing_history_or_watchers():
    backend = _FlakyBackend(UnavailableError("etcd: UNAVAILABLE: connection refused"))
    cache, c, w = await _watched(backend)
    try:
        backend.put("y")  # handed out, then the watch breaks
        await _until(lambda: backend.watched_from == [1, 2], "the watch to be resumed after revision 2")
        # The resumed watch starts after what the cache holds: nothing replayed, nothing missed.
        assert backend.lists == 1 and cache.resyncs == 0 and cache.rewatches == 1
        assert [e.rv for e in await w.next_batch(1)] == [2]
        assert [e.rv for e in c.events_after(1)] == [2]  # history kept: a watch from rv 1 replays
    finally:
        await cache.stop()


async def test_any_other_watch_failure_relists_and_closes_watchers():
    backend = _FlakyBackend(RuntimeError("a malformed event"))
    cache, c, w = await _watched(backend)
    try:
        await _until(lambda: backend.lists == 2, "the relist")
        assert cache.resyncs == 1 and cache.rewatches == 0
        with pytest.raises(WatcherClosed):
            await w.next_batch(1)
        with pytest.raises(CompactedError):
            c.events_after(0)  # history starts again at the relist
    finally:
        await cache.stop()
