"""The controllers' event recorder: upstream's correlation (de-duplication, aggregation of
similar events, the spam filter per object)."""

from __future__ import annotations

import asyncio
import copy

from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.client import events as ev


class FakeClient:
    """Events kept by name; creates and updates counted."""

    def __init__(self) -> None:
        self.objs: dict[str, dict] = {}
        self.creates = 0
        self.updates = 0

    async def create(self, kind, namespace, obj):
        self.creates += 1
        self.objs[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj

    async def update(self, kind, namespace, name, mutate, *, subresource=""):
        self.updates += 1
        if name not in self.objs:
            raise st.ApiError(404, "NotFound", "gone")
        self.objs[name] = mutate(copy.deepcopy(self.objs[name]))
        return self.objs[name]


RS_REF = {"kind": "ReplicaSet", "apiVersion": "apps/v1", "namespace": "ns", "name": "web", "uid": "u1"}


def recorder(now: list[float]) -> tuple[ev.EventRecorder, FakeClient]:
    client = FakeClient()
    return ev.EventRecorder(client, REGISTRY, "replicaset-controller", clock=lambda: now[0]), client  # type: ignore[arg-type]


def run(coro):
    return asyncio.run(coro)


def test_same_event_again_bumps_the_count():
    now = [0.0]
    rec, client = recorder(now)

    async def go():
        for _ in range(3):
            await rec.record(RS_REF, "Warning", "FailedCreate", "quota exceeded")

    run(go())
    assert client.creates == 1 and client.updates == 2
    [obj] = client.objs.values()
    assert obj["count"] == 3 and obj["message"] == "quota exceeded"


def test_similar_messages_are_combined_from_the_tenth_on():
    now = [0.0]
    rec, client = recorder(now)

    async def go():
        for i in range(15):
            await rec.record(RS_REF, "Normal", "SuccessfulCreate", f"Created pod: web-{i}")

    run(go())
    # Nine events of their own, then one combined event counting the other six.
    assert client.creates == 10 and client.updates == 5
    combined = [o for o in client.objs.values() if o["message"].startswith(ev.COMBINED_PREFIX)]
    assert len(combined) == 1
    assert combined[0]["count"] == 6 and combined[0]["message"] == ev.COMBINED_PREFIX + "Created pod: web-14"
    # Another reason about the same object is not combined with these.
    run(rec.record(RS_REF, "Normal", "SuccessfulDelete", "Deleted pod: web-0"))
    assert client.objs[max(client.objs)]["message"] == "Deleted pod: web-0"


def test_spam_filter_lets_25_through_then_one_every_five_minutes():
    now = [0.0]
    rec, client = recorder(now)

    async def burst(n: int, prefix: str) -> None:
        for i in range(n):
            await rec.record(RS_REF, "Normal", "SuccessfulCreate", f"{prefix}{i}")

    run(burst(100, "Created pod: a-"))
    assert client.creates + client.updates == ev.SPAM_BURST
    assert rec.dropped == 100 - ev.SPAM_BURST
    # Another object has its own budget.
    other = {**RS_REF, "name": "api", "uid": "u2"}
    run(rec.record(other, "Normal", "SuccessfulCreate", "Created pod: api-0"))
    assert client.creates + client.updates == ev.SPAM_BURST + 1
    # Five minutes later one more event about the first object gets through.
    now[0] += 300.0
    run(burst(3, "Created pod: b-"))
    assert client.creates + client.updates == ev.SPAM_BURST + 2
    assert rec.dropped == 100 - ev.SPAM_BURST + 2


def test_aggregation_starts_over_after_ten_quiet_minutes():
    now = [0.0]
    rec, client = recorder(now)

    async def burst(prefix: str) -> None:
        for i in range(9):
            await rec.record(RS_REF, "Normal", "SuccessfulCreate", f"{prefix}{i}")

    run(burst("x-"))
    now[0] += ev.AGGREGATE_INTERVAL + 1  # the spam budget refills meanwhile too
    run(burst("y-"))
    assert client.creates == 18
    assert not any(o["message"].startswith(ev.COMBINED_PREFIX) for o in client.objs.values())
