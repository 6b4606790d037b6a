"""Direct (sink) delivery of JSON watch frames: order, selectors, chunk framing,
and slow clients dropped without holding up the fan-out."""

import asyncio
import json

import pytest

from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.selectors import parse_label_selector
from apiserver_min.storage.cacher import FELL_BEHIND, ResourceCache, Watcher, WatcherClosed, chunked_transport_sink
from apiserver_min.storage.interface import Event, KeyValue

PODS = REGISTRY.by_resource("", "v1", "pods")
PREFIX = "/pods/"


def put(cache: ResourceCache, ns: str, name: str, rev: int, labels=None, pad: int = 0):
    raw = encode_for_storage(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": {"pad": "p" * pad}},
        }
    )
    return cache.apply(Event("PUT", KeyValue(f"{PREFIX}{ns}/{name}", raw, rev, rev), None), 0.0)


def frames(chunks: list[bytes]) -> list[tuple[str, str, str]]:
    out = []
    for f in chunks:
        doc = json.loads(f)
        out.append((doc["type"], doc["object"]["metadata"]["name"], doc["object"]["metadata"]["resourceVersion"]))
    return out


def test_queued_events_come_back_before_the_sink_is_attached():
    c = ResourceCache(PODS, PREFIX)
    w = Watcher(c, "a", None, None)
    c.add_watcher(w)
    put(c, "a", "x", 1)
    put(c, "a", "y", 2)
    got: list[bytes] = []
    pending = w.attach_sink(lambda frame: got.append(frame) or True)
    assert [e.rv for e in pending] == [1, 2] and not w.direct  # the caller sends these first
    put(c, "a", "z", 3)  # still queued: not attached yet
    assert [e.rv for e in w.attach_sink(lambda frame: got.append(frame) or True)] == [3]
    assert w.attach_sink(lambda frame: got.append(frame) or True) == [] and w.direct
    put(c, "a", "x", 4)
    put(c, "b", "x", 5)  # another namespace: not this watcher's
    put(c, "a", "y", 6)
    assert frames(got) == [("MODIFIED", "x", "4"), ("MODIFIED", "y", "6")]
    assert not w.events and w.last_rv == 6


def test_direct_watcher_applies_selectors_per_watcher():
    c = ResourceCache(PODS, PREFIX)
    w = Watcher(c, None, parse_label_selector("app=web"), None)
    c.add_watcher(w)
    got: list[bytes] = []
    assert w.attach_sink(lambda frame: got.append(frame) or True) == []
    put(c, "a", "x", 1, {"app": "db"})
    put(c, "a", "x", 2, {"app": "web"})
    put(c, "a", "x", 3, {"app": "db"})
    assert frames(got) == [("ADDED", "x", "2"), ("DELETED", "x", "3")]


async def test_a_refusing_sink_closes_the_watcher_and_others_still_get_the_event():
    c = ResourceCache(PODS, PREFIX)
    slow, fine = Watcher(c, None, None, None), Watcher(c, None, None, None)
    c.add_watcher(slow)
    c.add_watcher(fine)
    got: list[bytes] = []
    slow.attach_sink(lambda frame: False)
    fine.attach_sink(lambda frame: got.append(frame) or True)
    put(c, "a", "x", 1)
    assert slow.closed_reason == FELL_BEHIND and slow not in c.watchers and fine in c.watchers
    assert frames(got) == [("ADDED", "x", "1")]
    with pytest.raises(WatcherClosed):
        await slow.next_batch(1)


class FakeTransport(asyncio.WriteTransport):
    def __init__(self, unsent: int = 0):
        super().__init__()
        self.data = bytearray()
        self.unsent = unsent
        self.closing = False

    def write(self, data) -> None:
        self.data += data

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.closing


def test_chunked_sink_frames_each_event_and_reports_backlog_and_closing():
    t = FakeTransport()
    sink = chunked_transport_sink(t, limit=100)
    assert sink(b'{"a":1}\n')
    assert bytes(t.data) == b'8\r\n{"a":1}\n\r\n'
    t.unsent = 101
    assert not sink(b"x" * 20)  # written, but the client is too far behind
    assert bytes(t.data).endswith(b"14\r\n" + b"x" * 20 + b"\r\n")
    t.unsent, t.closing = 0, True
    before = len(t.data)
    assert not sink(b"y")
    assert len(t.data) == before  # nothing written to a closing transport


async def test_a_client_that_stops_reading_is_dropped_while_the_fan_out_goes_on():
    """A real socket whose peer never reads: the transport's backlog passes the
    limit, the watcher is closed, and a reading watcher got every event."""
    loop = asyncio.get_running_loop()
    accepted: list[asyncio.Transport] = []

    class Server(asyncio.Protocol):
        def connection_made(self, transport):
            accepted.append(transport)

    class Reader(asyncio.Protocol):
        def __init__(self):
            self.received = 0

        def data_received(self, data):
            self.received += len(data)

    server = await loop.create_server(Server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stalled_t, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    stalled_t.pause_reading()
    reader_t, reader = await loop.create_connection(Reader, "127.0.0.1", port)
    while len(accepted) < 2:
        await asyncio.sleep(0.01)
    try:
        c = ResourceCache(PODS, PREFIX)
        slow, fine = Watcher(c, None, None, None), Watcher(c, None, None, None)
        c.add_watcher(slow)
        c.add_watcher(fine)
        slow.attach_sink(chunked_transport_sink(accepted[0], limit=256 << 10))
        sent = 0
        fine.attach_sink(lambda frame: True)
        rev = 0
        while slow.closed_reason is None:
            rev += 1
            put(c, "a", f"p{rev}", rev, pad=16 << 10)
            sent += 1
            if rev % 64 == 0:
                await asyncio.sleep(0)  # let the kernel move bytes
            assert rev < 20_000, "the stalled watcher was never dropped"
        assert slow.closed_reason == FELL_BEHIND and fine.closed_reason is None
        assert fine.last_rv == rev and sent == rev
        # The reading client on the same loop is unaffected.
        fine_sink = chunked_transport_sink(accepted[1])
        assert fine_sink(b"{}\n")
        for _ in range(100):
            if reader.received:
                break
            await asyncio.sleep(0.01)
        assert reader.received == len(b"3\r\n{}\n\r\n")
    finally:
        stalled_t.close()
        reader_t.close()
        for t in accepted:
            t.abort()
        server.close()
        await server.wait_closed()
