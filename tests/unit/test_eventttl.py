"""Events expire --event-ttl after their last write (controllers/eventttl.py)."""

from __future__ import annotations

import datetime as _dt
import time

import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.authz.authorizer import PrivilegedGroups, Union
from apiserver_min.client.informer import InformerFactory
from apiserver_min.client.local import LocalClient
from apiserver_min.controllers.eventttl import EventTTLController, last_written
from apiserver_min.options import OptionsError, parse
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

NS_KIND = REGISTRY.by_resource("", "v1", "namespaces")
EVENTS = REGISTRY.by_resource("", "v1", "events")
NEW_EVENTS = REGISTRY.by_resource(names.EVENTS_GROUP, "v1", "events")


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_last_written_takes_the_newest_timestamp():
    ev = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "lastTimestamp": "2026-01-01T00:10:00Z",
        "series": {"lastObservedTime": "2026-01-01T00:20:00.500000Z"},
        "eventTime": "bogus",
    }
    assert last_written(ev) == pytest.approx(1767226800.5)
    assert last_written({"metadata": {}}) is None


def test_event_ttl_flag():
    assert parse([]).event_ttl == 3600.0
    assert parse(["--event-ttl", "90s"]).event_ttl == 90.0
    with pytest.raises(OptionsError, match="--event-ttl"):
        parse(["--event-ttl", "soon"])


@pytest.fixture
async def parts(tmp_path):
    backend = SqliteBackend(str(tmp_path / "state.db"))
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    store = Store(backend, REGISTRY, cache, Chain([]))
    await backend.start()
    await cache.start()
    await store.create(NS_KIND, "", {"metadata": {"name": "team"}}, SYSTEM_USER)
    informers = InformerFactory(cache, REGISTRY)
    client = LocalClient(store, Union([PrivilegedGroups()]), SYSTEM_USER, names.APISERVER_FIELD_MANAGER)
    yield store, cache, informers, client
    informers.stop()
    await cache.stop()
    await backend.close()


def _event(name: str, last: str) -> dict:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "namespace": "team", "name": "p"},
        "reason": "Started",
        "lastTimestamp": last,
    }


async def _names(cache, kind) -> set[str]:
    await cache.sync()
    return {e.name for e in cache.cache(key_prefix(kind)).sorted_entries("team")}


def _ts(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_events_go_a_ttl_after_their_last_write(parts):
    store, cache, informers, client = parts
    t0 = time.time()  # the server stamps creationTimestamp with the real time
    # Stored before the sweeper starts: dated by the newest of their own timestamps.
    await store.create(EVENTS, "team", _event("old", _ts(t0 - 7200)), SYSTEM_USER)  # its creation: t0
    await store.create(EVENTS, "team", _event("recent", _ts(t0 + 1800)), SYSTEM_USER)
    await store.create(
        NEW_EVENTS,
        "team",
        {
            "metadata": {"name": "new-api"},
            "eventTime": _ts(t0 - 7200).replace("Z", ".000000Z"),
            "reportingController": "x",
            "reportingInstance": "y",
            "action": "Started",
            "reason": "Started",
            "regarding": {"kind": "Pod", "namespace": "team", "name": "p"},
            "type": "Normal",
        },
        SYSTEM_USER,
    )
    await cache.sync()
    clock = Clock(t0 + 3600 + 60)
    ttl = EventTTLController(client, informers, 3600.0, clock=clock)
    assert ttl.sweep_period == 60.0
    ttl.start()
    assert await ttl.sweep() == 2
    assert await _names(cache, EVENTS) == {"recent"}
    assert await _names(cache, NEW_EVENTS) == set()
    # A write seen now dates the Event from now, whatever its own timestamps say.
    await store.create(EVENTS, "team", _event("replayed", _ts(t0 - 86400)), SYSTEM_USER)
    await cache.sync()
    clock.t += 1800  # "recent" (t0 + 1800 + 1h) expired; "replayed" was written 30 minutes ago
    assert await ttl.sweep() == 1
    assert await _names(cache, EVENTS) == {"replayed"}
    # Written again before it expires: kept for another TTL from that write.
    clock.t += 1500
    await store.update(EVENTS, "team", "replayed", lambda ev: {**ev, "count": 2}, SYSTEM_USER)
    await cache.sync()
    clock.t += 3000  # 4,500 s after the create, 3,000 after the update
    assert await ttl.sweep() == 0
    clock.t += 700
    assert await ttl.sweep() == 1
    assert await _names(cache, EVENTS) == set()
    assert ttl.deleted == 4
