"""List response bodies, built in slices that give the event loop back between them.

A LIST of 5,000 pods is about 12 MB of JSON. Built in one go it holds the one event
loop for tens of milliseconds (more on a busy machine), and every other request, a
quiet user's GET included, waits behind it. Here the items are encoded a slice at a
time (about :data:`SLICE_BYTES` of stored objects each), and the finished body is
sent in slices too (``app._send_now``). Between two slices a body waits for its turn
(:class:`Turns`): of the large bodies being built or sent, one does one slice per turn
of the loop, so however many run at once, a small request waits behind one slice at a
time.

The bytes are exactly those of the whole list encoded at once: JSON (the stored
objects spliced with their resourceVersion, as a single object is served), protobuf
(``<Kind>List`` item by item) and the Table form.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import MutableMapping
from typing import Any

from ..api import codec, protobuf
from ..api.kinds import KindInfo
from ..api.schema import Struct
from ..registry.store import ListResult
from .negotiation import Target, table_rows

# Stored bytes encoded between two returns to the event loop: about a millisecond of
# work (splicing JSON is faster than that, decoding for protobuf or a Table slower).
SLICE_BYTES = 512 * 1024


class Turns:
    """Large bodies taking turns on the event loop: at each turn of the loop one body
    (the one whose request came first) does one slice of work, and the loop serves
    everything else meanwhile. The oldest first, not each in turn: one at a time, the
    bodies finish one after another, soonest for the first, and so give back their
    requests' flow-control seats early and steadily; in rotation they would all finish
    late, at about the same time, for no gain in throughput on one loop. A body waiting
    for its client to read what it has sent asks for no turn, so the next one runs."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []  # a heap by rank
        self._running = False  # a turn is being handed out at each turn of the loop
        self._ranks = itertools.count()

    def lane(self, request: MutableMapping[str, Any]) -> Lane:
        """The turns of one request's body (its rank kept in ``request``, so that the
        body keeps its place from building to sending)."""
        rank = request.get(_RANK_KEY)
        if rank is None:
            rank = request[_RANK_KEY] = next(self._ranks)
        return Lane(self, rank)

    async def take(self, rank: int) -> None:
        """Returns at a later turn of the loop, when it is this body's turn."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._waiting, (rank, fut))
        if not self._running:
            self._running = True
            loop.call_soon(self._hand_out)
        await fut

    def _hand_out(self) -> None:
        # The body woken runs its slice at the next turn, and this runs again after it.
        while self._waiting:
            _, fut = heapq.heappop(self._waiting)
            if not fut.done():  # not given up meanwhile
                fut.set_result(None)
                fut.get_loop().call_soon(self._hand_out)
                return
        self._running = False


class Lane:
    """One body's place in :class:`Turns`."""

    __slots__ = ("turns", "rank")

    def __init__(self, turns: Turns, rank: int):
        self.turns, self.rank = turns, rank

    async def take(self) -> None:
        await self.turns.take(self.rank)


_RANK_KEY = "orch.body.rank"


def list_metadata(res: ListResult) -> dict[str, Any]:
    md: dict[str, Any] = {"resourceVersion": str(res.resource_version)}
    if res.continue_token:
        md["continue"] = res.continue_token
    if res.remaining is not None:
        md["remainingItemCount"] = res.remaining
    return md


async def json_list(kind: KindInfo, res: ListResult, lane: Lane) -> bytes | bytearray:
    """The ``<Kind>List`` in JSON: the stored objects with their resourceVersion. A list
    larger than a slice comes as a bytearray, grown a slice at a time (one copy of the
    whole body at the end would hold the loop again)."""
    head = b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
        kind.list_kind.encode(),
        kind.api_version.encode(),
        codec.dumps(list_metadata(res)),
    )
    splice = codec.splice_rv
    buf: bytearray | None = None
    part: list[bytes] = []
    budget = SLICE_BYTES
    for raw, rev in res.items:
        part.append(splice(raw, rev))
        budget -= len(raw)
        if budget <= 0:
            if buf is None:
                buf = bytearray(head)
            else:
                buf += b","
            buf += b",".join(part)
            part = []
            budget = SLICE_BYTES
            await lane.take()
    if buf is None:  # one slice: the head joins the first item and the tail the last, one copy
        if not part:
            return head + b"]}"
        part[0] = head + part[0]
        part[-1] += b"]}"
        return b",".join(part)
    if part:
        buf += b","
        buf += b",".join(part)
    buf += b"]}"
    return buf


def protobuf_schema(kind: KindInfo) -> Struct | None:
    """The item schema when the kind's list has its protobuf encoding (``metadata`` 1,
    ``items`` 2), else None (the list is answered in JSON)."""
    av = kind.api_version
    list_schema = protobuf.schema_of(av, kind.list_kind)
    item_schema = protobuf.schema_of(av, kind.kind)
    if list_schema is None or item_schema is None:
        return None
    shape = [(f.json_name, f.number) for f in list_schema.fields]
    return item_schema if shape == [("metadata", 1), ("items", 2)] else None


async def protobuf_list(
    kind: KindInfo, res: ListResult, item_schema: Struct, lane: Lane, keep: bool = False
) -> tuple[bytes, dict[str, Any] | None]:
    """The ``<Kind>List`` in protobuf, and (``keep``: for an audit event that records
    the response) the list as JSON-shaped objects."""
    md = list_metadata(res)
    enc = protobuf.ListEncoder(kind.api_version, kind.list_kind, md, item_schema)
    kept: list[dict] | None = [] if keep else None
    budget = SLICE_BYTES
    for raw, rev in res.items:
        obj = codec.decode_stored(raw, rev)
        enc.add(obj)
        if kept is not None:
            kept.append(obj)
        budget -= len(raw)
        if budget <= 0:
            budget = SLICE_BYTES
            await lane.take()
    body = enc.finish()
    if kept is None:
        return body, None
    return body, {"kind": kind.list_kind, "apiVersion": kind.api_version, "metadata": md, "items": kept}


async def decode_items(res: ListResult, lane: Lane) -> list[dict]:
    """The listed objects decoded, with their resourceVersion."""
    objs: list[dict] = []
    budget = SLICE_BYTES
    for raw, rev in res.items:
        objs.append(codec.decode_stored(raw, rev))
        budget -= len(raw)
        if budget <= 0:
            budget = SLICE_BYTES
            await lane.take()
    return objs


# Objects decoded and rendered as Table rows between two returns to the event loop.
SLICE_ROWS = 100


async def table_list(
    table: dict[str, Any],
    kind: KindInfo,
    res: ListResult,
    include: str,
    target: Target,
    lane: Lane,
    keep: bool = False,
) -> bytes:
    """``table`` (a Table whose ``rows``, its last key, is empty) in JSON with one row per
    listed object, the objects decoded a slice at a time and let go once their rows are
    written (freeing thousands of decoded objects at once would hold the loop too).
    ``keep``: the rows are also added to ``table`` (for an audit event that records the
    response)."""
    head = codec.dumps(table)
    items = res.items
    if not items:
        return head
    if not head.endswith(b'"rows":[]}'):
        raise ValueError("a Table's rows must be its last key")
    rows: list[dict] = table["rows"]
    slices: list[bytes] = []
    for start in range(0, len(items), SLICE_ROWS):
        if start:
            await lane.take()
        objs = [codec.decode_stored(raw, rev) for raw, rev in items[start : start + SLICE_ROWS]]
        chunk = table_rows(kind, objs, include, target)
        if keep:
            rows += chunk
        slices.append(codec.dumps(chunk)[1:-1])
    slices[0] = head[:-2] + slices[0]
    slices[-1] += b"]}"
    return b",".join(slices)
