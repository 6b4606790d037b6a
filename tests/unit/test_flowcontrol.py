"""API priority and fairness, the logic: classification, shuffle sharding, seats and fair
queuing, borrowing, LIST widths, validation, the bootstrap annotation rule, and the plain
in-flight limits."""

from __future__ import annotations

import asyncio

import pytest

from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.user import UserInfo
from apiserver_min.registry.flowcontrol import flow_schema_spec_errors, priority_level_spec_errors
from apiserver_min.server.flowcontrol import InflightLimits, is_long_running
from apiserver_min.server.flowcontrol.bootstrap import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    SUGGESTED_FLOW_SCHEMAS,
    SUGGESTED_PRIORITY_LEVELS,
    auto_update,
)
from apiserver_min.server.flowcontrol.classifier import Classifier, compile_schema
from apiserver_min.server.flowcontrol.controller import list_width
from apiserver_min.server.flowcontrol.levels import Level, Rejected, borrowing_limits, deal_hand, nominal_limits

AUTH = names.GROUP_AUTHENTICATED


def _classifier() -> Classifier:
    schemas = {**MANDATORY_FLOW_SCHEMAS, **SUGGESTED_FLOW_SCHEMAS}
    return Classifier([compile_schema({"metadata": {"name": n, "uid": n}, "spec": s}) for n, s in schemas.items()])


def _levels(server_limit: int = 600) -> dict[str, Level]:
    levels = {n: Level(n, n, s) for n, s in {**MANDATORY_PRIORITY_LEVELS, **SUGGESTED_PRIORITY_LEVELS}.items()}
    nominal_limits(list(levels.values()), server_limit)
    return levels


@pytest.mark.parametrize(
    "user, request_, expected",
    [
        (UserInfo("admin", groups=(names.GROUP_MASTERS, AUTH)), (True, "delete", "", "pods", "ns"), ("exempt", "")),
        (None, (False, "get", "", "", "", "/healthz"), ("probes", "")),
        (None, (False, "get", "", "", "", "/version"), ("global-default", names.USER_ANONYMOUS)),
        (UserInfo("alice", groups=(AUTH,)), (True, "list", "", "pods", "ns"), ("global-default", "alice")),
        (
            UserInfo("system:node:n1", groups=(names.GROUP_NODES, AUTH)),
            (True, "update", names.COORDINATION_GROUP, "leases", "orch-node-lease"),
            ("system-node-high", "system:node:n1"),
        ),
        (
            UserInfo("system:node:n1", groups=(names.GROUP_NODES, AUTH)),
            (True, "list", "", "pods", ""),
            ("system-nodes", "system:node:n1"),
        ),
        (
            UserInfo("system:serviceaccount:team:bot", groups=(names.GROUP_SERVICEACCOUNTS, AUTH)),
            (True, "get", "", "configmaps", "team"),
            ("service-accounts", "system:serviceaccount:team:bot"),
        ),
        (
            UserInfo("system:serviceaccount:orch-system:job-controller", groups=(names.GROUP_SERVICEACCOUNTS, AUTH)),
            (True, "create", "", "pods", "default"),
            ("orch-system-service-accounts", "default"),
        ),
        (
            UserInfo("system:serviceaccount:orch-system:job-controller", groups=(names.GROUP_SERVICEACCOUNTS, AUTH)),
            (True, "update", names.COORDINATION_GROUP, "leases", "orch-system"),
            ("system-leader-election", "system:serviceaccount:orch-system:job-controller"),
        ),
        (
            UserInfo("system:serviceaccount:orch-system:job-controller", groups=(names.GROUP_SERVICEACCOUNTS, AUTH)),
            (True, "get", "", "configmaps", "orch-system"),
            ("workload-leader-election", "system:serviceaccount:orch-system:job-controller"),
        ),
        (
            UserInfo(names.CONTROLLER_MANAGER_USER, groups=(AUTH,)),
            (True, "update", "", "endpoints", "default"),
            ("endpoint-controller", names.CONTROLLER_MANAGER_USER),
        ),
        (UserInfo("x", groups=()), (True, "get", "", "pods", "ns"), ("", "")),  # no group at all: nothing matches
    ],
)
def test_classification_follows_the_bootstrap_schemas(user, request_, expected):
    is_resource, verb, group, resource, namespace, *path = request_
    schema, flow = _classifier().classify(
        user, is_resource, verb, group, resource, namespace, path[0] if path else "/api"
    )
    assert ((schema.name if schema else ""), flow) == expected


def test_subresources_and_wildcards_in_rules():
    spec = {
        "priorityLevelConfiguration": {"name": "pl"},
        "matchingPrecedence": 10,
        "rules": [
            {
                "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                "resourceRules": [
                    {"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"], "namespaces": ["a"]}
                ],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["/apis/*"]}],
            }
        ],
    }
    c = Classifier([compile_schema({"metadata": {"name": "s"}, "spec": spec})])
    u = UserInfo("bob", groups=("g",))
    assert c.classify(u, True, "get", "", "pods/log", "a", "")[0] is not None
    assert c.classify(u, True, "get", "", "pods/log", "b", "")[0] is None
    assert c.classify(u, True, "get", "", "pods", "a", "")[0] is None
    assert c.classify(u, False, "get", "", "", "", "/apis")[0] is not None
    assert c.classify(u, False, "post", "", "", "", "/apis/x/y")[0] is not None
    assert c.classify(u, False, "get", "", "", "", "/api")[0] is None


def test_deal_hand_gives_distinct_queues():
    for h in (0, 1, 12345678901234, 2**63 - 1):
        hand = deal_hand(h, 128, 6)
        assert len(set(hand)) == 6 and all(0 <= i < 128 for i in hand)
    assert deal_hand(99, 4, 4) == sorted(deal_hand(99, 4, 4), key=deal_hand(99, 4, 4).index)
    assert sorted(deal_hand(99, 4, 4)) == [0, 1, 2, 3]


def test_nominal_limits_as_upstream():
    levels = _levels(600)
    assert levels["global-default"].nominal_limit == 49  # ceil(600 * 20 / 245)
    assert levels["workload-low"].nominal_limit == 245
    assert levels["catch-all"].nominal_limit == 13
    assert levels["global-default"].min_limit == 49 - 24  # lends half (rounded)
    assert levels["leader-election"].min_limit == levels["leader-election"].nominal_limit


def test_borrowing_moves_idle_seats_to_busy_levels_within_bounds():
    levels = _levels(600)
    for lv in levels.values():
        lv.smoothed_demand = 0.0
    levels["global-default"].smoothed_demand = 400.0
    borrowing_limits(list(levels.values()), 600)
    limited = [lv for lv in levels.values() if not lv.exempt]
    assert abs(sum(lv.current_limit for lv in limited) - 600) <= len(limited)
    assert levels["global-default"].current_limit > 49
    for lv in limited:
        assert lv.current_limit >= lv.min_limit


def test_reject_level_rejects_beyond_its_seats():
    async def run():
        lv = Level("tiny", "u", {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}})
        lv.current_limit = 2
        a = lv.admit(1, "s", "")
        lv.admit(1, "s", "")
        with pytest.raises(Rejected) as exc:
            lv.admit(1, "s", "")
        assert exc.value.reason == "concurrency-limit"
        lv.finish(a, 0.01)
        assert lv.admit(1, "s", "").future is None

    asyncio.run(run())


def _queuing_level(queues: int = 16, hand: int = 4, limit: int = 50, seats: int = 20) -> Level:
    lv = Level(
        "q",
        "u",
        {
            "type": "Limited",
            "limited": {
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": limit},
                }
            },
        },
    )
    lv.current_limit = seats
    return lv


def test_full_queues_reject():
    async def run():
        lv = _queuing_level(queues=1, hand=1, limit=2, seats=1)
        lv.admit(1, "s", "noisy")
        lv.admit(1, "s", "noisy")
        lv.admit(1, "s", "noisy")
        with pytest.raises(Rejected) as exc:
            lv.admit(1, "s", "noisy")
        assert exc.value.reason == "queue-full"

    asyncio.run(run())


def test_a_quiet_flow_is_served_before_a_noisy_backlog():
    async def run():
        lv = _queuing_level(queues=64, hand=6, limit=50, seats=49)
        running = [r for r in (lv.admit(10, "gd", "noisy") for _ in range(200)) if r.future is None]
        assert lv.executing_seats == 40 and lv.waiting == 196
        # The noisy requests finish one by one (each 50 ms); a quiet request arrives now and then.
        waits = []
        for step in range(40):
            quiet = lv.admit(1, "gd", "quiet") if step % 4 == 0 else None
            started = lv.finish(running.pop(0), 0.05)
            for r in started:
                if r.width == 1:
                    lv.finish(r, 0.001)
                else:
                    running.append(r)
            if quiet is not None:
                waits.append(quiet.future is None or quiet.future.done())
                if quiet.future is None:
                    lv.finish(quiet, 0.001)
        # Once the level has seen how long the wide requests take, the quiet ones go first.
        assert all(waits[1:]), waits

    asyncio.run(run())


def test_a_short_narrow_request_fills_seats_a_blocked_wide_head_cannot_use():
    async def run():
        lv = _queuing_level(queues=64, hand=6, limit=50, seats=49)
        lv.estimates = {10: 1.0, 2: 0.5, 1: 0.003}
        running = [r for r in (lv.admit(10, "gd", "noisy") for _ in range(20)) if r.future is None]
        assert lv.executing_seats == 40
        lv.r = 100.0  # the noisy queues are owed service: their heads would finish first
        quiet = lv.admit(1, "gd", "quiet")
        assert quiet.future is not None and quiet.future.done()  # 9 seats free, 3 ms expected: ahead of the LIST
        slow = lv.admit(2, "gd", "other")  # half as long as a LIST: it waits its turn
        assert slow.future is not None and not slow.future.done()
        lv.finish(quiet, 0.003)
        started = lv.finish(running[0], 1.0)
        assert [r.width for r in started][:1] == [10]  # the wide head was not passed over

    asyncio.run(run())


def test_waiting_requests_that_gave_up_leave_the_queue():
    async def run():
        lv = _queuing_level(seats=1)
        first = lv.admit(1, "s", "a")
        waiting = lv.admit(1, "s", "b")
        assert waiting.future is not None and lv.waiting == 1
        lv.abandon(waiting)
        assert lv.waiting == 0 and lv.busy == 1
        lv.finish(first, 0.01)
        assert lv.busy == 0 and lv.executing_seats == 0

    asyncio.run(run())


@pytest.mark.parametrize(
    "count, query, seats",
    [
        (5000, {}, 10),
        (50, {}, 1),
        (120, {}, 3),  # 2 * 120 objects from storage
        (120, {"resourceVersion": "0"}, 2),  # from the cache: 120 objects
        (5000, {"limit": "100"}, 2),
        (300, {"labelSelector": "a=b", "limit": "50"}, 4),  # 300 scanned + 50
    ],
)
def test_list_width_as_upstream(count, query, seats):
    assert list_width(count, query) == seats


def test_long_running_requests():
    assert is_long_running("watch", "", {})
    assert is_long_running("create", "exec", {})
    assert is_long_running("get", "log", {})
    assert is_long_running("list", "", {"watch": "true"})
    assert not is_long_running("list", "", {})


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"priorityLevelConfiguration": {"name": "x"}, "matchingPrecedence": 10001}, "spec.matchingPrecedence"),
        ({"priorityLevelConfiguration": {}}, "spec.priorityLevelConfiguration.name"),
        (
            {"priorityLevelConfiguration": {"name": "x"}, "rules": [{"subjects": [{"kind": "User"}]}]},
            "spec.rules[0].subjects[0].user",
        ),
        (
            {
                "priorityLevelConfiguration": {"name": "x"},
                "rules": [
                    {
                        "subjects": [{"kind": "Group", "group": {"name": "g"}}],
                        "resourceRules": [{"verbs": ["get", "*"], "apiGroups": ["*"], "resources": ["*"]}],
                    }
                ],
            },
            "spec.rules[0].resourceRules[0].verbs",
        ),
        (
            {
                "priorityLevelConfiguration": {"name": "x"},
                "rules": [
                    {
                        "subjects": [{"kind": "Group", "group": {"name": "g"}}],
                        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["healthz"]}],
                    }
                ],
            },
            "spec.rules[0].nonResourceRules[0].nonResourceURLs[0]",
        ),
    ],
)
def test_flow_schema_validation(spec, field):
    assert field in [e.field for e in flow_schema_spec_errors(spec)]


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"type": "Exempt", "limited": {}}, "spec.limited"),
        ({"type": "Limited"}, "spec.limited"),
        (
            {"type": "Limited", "limited": {"limitResponse": {"type": "Reject", "queuing": {"queues": 1}}}},
            "spec.limited.limitResponse.queuing",
        ),
        (
            {"type": "Limited", "limited": {"limitResponse": {"type": "Queue"}}},
            "spec.limited.limitResponse.queuing",
        ),
        (
            {"type": "Limited", "limited": {"lendablePercent": 101, "limitResponse": {"type": "Reject"}}},
            "spec.limited.lendablePercent",
        ),
        (
            {
                "type": "Limited",
                "limited": {
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {"queues": 128, "handSize": 10, "queueLengthLimit": 5},
                    }
                },
            },
            "spec.limited.limitResponse.queuing.handSize",  # 10 * log2(128) = 70 bits > 60
        ),
    ],
)
def test_priority_level_validation(spec, field):
    assert field in [e.field for e in priority_level_spec_errors(spec)]


def test_bootstrap_objects_are_valid():
    for spec in {**MANDATORY_FLOW_SCHEMAS, **SUGGESTED_FLOW_SCHEMAS}.values():
        assert flow_schema_spec_errors(spec) == []
    for spec in {**MANDATORY_PRIORITY_LEVELS, **SUGGESTED_PRIORITY_LEVELS}.values():
        assert priority_level_spec_errors(spec) == []


@pytest.mark.parametrize(
    "annotations, generation, expected",
    [
        ({names.APF_AUTOUPDATE_ANNOTATION: "true"}, 5, True),
        ({names.APF_AUTOUPDATE_ANNOTATION: "false"}, 1, False),
        ({}, 1, True),
        ({}, 2, False),
        ({names.APF_AUTOUPDATE_ANNOTATION: "maybe"}, 1, True),
    ],
)
def test_autoupdate_annotation(annotations, generation, expected):
    assert auto_update({"metadata": {"annotations": annotations, "generation": generation}}) is expected


def test_plain_inflight_limits():
    limits = InflightLimits(read_only=1, mutating=1)
    kind = limits.enter(UserInfo("a", groups=(AUTH,)), "get")
    with pytest.raises(st.ApiError) as exc:
        limits.enter(UserInfo("b", groups=(AUTH,)), "list")
    assert exc.value.code == 429 and exc.value.headers["Retry-After"] == "1"
    assert limits.enter(UserInfo("c", groups=(AUTH,)), "create") == "mutating"
    assert limits.enter(UserInfo("root", groups=(names.GROUP_MASTERS,)), "get") is None  # not counted
    assert kind is not None
    limits.leave(kind)
    assert limits.enter(UserInfo("b", groups=(AUTH,)), "list") == "readOnly"
    assert InflightLimits(0, 0).enter(None, "get") is None  # 0: no limit


class _TimedOutAfter:
    """``asyncio.timeout`` whose limit passes just as the awaited seats come: the body runs
    to its end, then the block raises TimeoutError (the race the loop can produce when the
    timeout's callback and the seats' grant fall in one iteration)."""

    def __init__(self, _delay: float) -> None:
        pass

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            raise TimeoutError
        return False


def test_seats_granted_as_the_wait_limit_passes_are_the_requests(monkeypatch):
    from apiserver_min.server.flowcontrol import controller as fc

    async def run():
        lv = _queuing_level(seats=1)
        first = lv.admit(1, "s", "a")
        waiting = lv.admit(1, "s", "b")
        assert waiting.future is not None and not waiting.future.done()
        control = type("Control", (), {"metrics": fc._Metrics(), "wait_limit": 0.01})()
        schema = fc.Schema("s", "uid", 1000, lv.name, "", ())
        key = ("s", lv.name)
        queued = fc.Queued(control, lv, schema, waiting, key, {})
        monkeypatch.setattr(fc.asyncio, "timeout", _TimedOutAfter)
        lv.finish(first, 0.01)  # the seats pass to the waiting request
        assert waiting.future.done()
        ticket = await queued.wait()  # not a 429: the seats are this request's
        assert control.metrics.dispatched[key] == 1 and control.metrics.inqueue[key] == 0
        assert not control.metrics.rejected
        assert lv.executing_seats == 1 and lv.waiting == 0
        assert ticket.req is waiting
        lv.finish(waiting, 0.01)
        assert lv.executing_seats == 0

    asyncio.run(run())


def test_a_request_still_waiting_at_the_wait_limit_gets_429_and_leaves_the_queue(monkeypatch):
    from apiserver_min.server.flowcontrol import controller as fc

    async def run():
        lv = _queuing_level(seats=1)
        first = lv.admit(1, "s", "a")
        waiting = lv.admit(1, "s", "b")
        control = type("Control", (), {"metrics": fc._Metrics(), "wait_limit": 0.01})()
        schema = fc.Schema("s", "uid", 1000, lv.name, "", ())
        queued = fc.Queued(control, lv, schema, waiting, ("s", lv.name), {"X-Flow": "s"})
        with pytest.raises(st.ApiError) as exc:
            await queued.wait()
        assert exc.value.code == 429 and exc.value.headers.get("X-Flow") == "s"
        assert control.metrics.rejected == {(lv.name, "s", "time-out"): 1}
        assert lv.waiting == 0
        lv.finish(first, 0.01)
        assert lv.executing_seats == 0

    asyncio.run(run())
