"""List bodies built in slices (server/listbody.py): the same bytes as the whole list
encoded at once, in JSON, protobuf and the Table form, with the event loop served
between slices."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from apiserver_min.api import codec, protobuf
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.registry.store import ListResult
from apiserver_min.server import listbody
from apiserver_min.server.negotiation import Target, table

PODS = REGISTRY.by_resource("", "v1", "pods")
TABLE = Target("table", "meta.orch.io", "v1")


def stored_pod(i: int) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i:04d}", "namespace": "ns", "uid": f"uid-{i}", "labels": {"i": str(i)}},
            "spec": {"containers": [{"name": "c", "image": f"img:{i}"}], "nodeName": "n1"},
            "status": {"phase": "Running"},
        }
    )


def result(n: int, **kw) -> ListResult:
    return ListResult([(stored_pod(i), 100 + i) for i in range(n)], 900, kw.get("cont", ""), kw.get("remaining"))


def whole_json(res: ListResult) -> bytes:
    """The whole list at once: the stored objects spliced with their versions."""
    md = listbody.list_metadata(res)
    head = b'{"kind":"PodList","apiVersion":"v1","metadata":%s,"items":[' % codec.dumps(md)
    return head + b",".join(codec.splice_rv(raw, rev) for raw, rev in res.items) + b"]}"


class Ticker:
    """Counts the turns of the event loop while it is entered."""

    def __init__(self) -> None:
        self.turn = 0
        self._stop = False
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while not self._stop:
            self.turn += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> "Ticker":
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc) -> None:
        self._stop = True
        assert self._task is not None
        await self._task


async def with_ticks(coro) -> tuple[object, int]:
    """Runs ``coro``; returns its result and the turns the loop took meanwhile."""
    async with Ticker() as ticker:
        start = ticker.turn
        out = await coro
        return out, ticker.turn - start


def lane() -> listbody.Lane:
    return listbody.Turns().lane({})


@pytest.fixture
def small_slices(monkeypatch):
    monkeypatch.setattr(listbody, "SLICE_BYTES", 2048)  # a few pods per slice
    monkeypatch.setattr(listbody, "SLICE_ROWS", 7)


@pytest.mark.parametrize("n", [0, 1, 5, 60])
def test_json_list_is_the_whole_list_and_yields_between_slices(small_slices, n):
    res = result(n, cont="tok", remaining=3)
    body, ticks = asyncio.run(with_ticks(listbody.json_list(PODS, res, lane())))
    assert body == whole_json(res)
    doc = orjson.loads(body)
    assert [p["metadata"]["resourceVersion"] for p in doc["items"]] == [str(100 + i) for i in range(n)]
    assert doc["metadata"] == {"resourceVersion": "900", "continue": "tok", "remainingItemCount": 3}
    assert (ticks >= n // 10) if n >= 60 else True


def test_protobuf_list_is_the_whole_list_encoded_at_once(small_slices):
    res = result(60)
    schema = listbody.protobuf_schema(PODS)
    assert schema is not None
    (body, kept), ticks = asyncio.run(with_ticks(listbody.protobuf_list(PODS, res, schema, lane(), keep=True)))
    whole = orjson.loads(whole_json(res))
    assert body == protobuf.encode(whole)
    assert ticks >= 5
    assert kept == whole
    body2, none = asyncio.run(listbody.protobuf_list(PODS, res, schema, lane()))
    assert body2 == body and none is None


@pytest.mark.parametrize("include", ["Metadata", "None", "Object"])
@pytest.mark.parametrize("n", [0, 20])
def test_table_list_is_the_whole_table(small_slices, include, n):
    res = result(n, cont="c2")
    objs = asyncio.run(listbody.decode_items(res, lane()))
    kw = {"resource_version": "900", "continue_token": "c2", "remaining": None}
    expected = table(PODS, objs, TABLE, include, **kw)
    tbl = table(PODS, [], TABLE, include, **kw)
    body, ticks = asyncio.run(with_ticks(listbody.table_list(tbl, PODS, res, include, TABLE, lane(), keep=True)))
    assert body == codec.dumps(expected)
    assert tbl == expected
    assert ticks >= (2 if n else 0)
    bare = table(PODS, [], TABLE, include, **kw)
    assert asyncio.run(listbody.table_list(bare, PODS, res, include, TABLE, lane())) == body
    assert bare["rows"] == []  # kept only for an audit event that records the response


def test_large_bodies_take_turns_oldest_first_one_slice_per_turn_of_the_loop():
    """Three bodies at once: never two slices in the same turn of the loop, the oldest
    request's body first, a rank kept per request, and other work at every turn."""

    async def main() -> tuple[list[tuple[int, int]], int]:
        turns = listbody.Turns()
        requests: list[dict] = [{}, {}, {}]
        lanes = [turns.lane(r) for r in requests]
        assert turns.lane(requests[1]).rank == lanes[1].rank  # building, then sending
        slices: list[tuple[int, int]] = []
        async with Ticker() as ticker:

            async def body(name: int) -> None:
                for _ in range(4):
                    slices.append((ticker.turn, name))
                    await lanes[name].take()

            await asyncio.gather(*(body(i) for i in (2, 0, 1)))  # started in another order
            return slices, ticker.turn

    slices, total = asyncio.run(main())
    later = [t for t, _ in slices[3:]]  # the first slices all start in the first turn
    assert len(later) == len(set(later)) == 9
    assert [n for _, n in slices[3:]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert total >= 9
