"""The workload controllers' shared parts: expectations, pods from templates, claims, ranking."""

from __future__ import annotations

import asyncio
import copy

from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.selectors import LabelSelector
from apiserver_min.controllers import podcontrol as pc
from apiserver_min.controllers.queue import RateLimitedQueue

PODS = REGISTRY.by_resource("", "v1", "pods")
RS = REGISTRY.by_resource("apps", "v1", "replicasets")


def _pod(name, labels=None, refs=None, **status):
    md = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {}}
    if refs:
        md["ownerReferences"] = refs
    return {"metadata": md, "spec": {}, "status": status}


OWNER = {"metadata": {"name": "web", "namespace": "ns", "uid": "rs-uid"}}


class FakeClient:
    def __init__(self, objs):
        self.objs = {o["metadata"]["name"]: o for o in objs}
        self.updates = []

    async def update(self, kind, namespace, name, mutate, *, subresource=""):
        self.updates.append(name)
        if name not in self.objs:
            raise st.ApiError(404, "NotFound", "gone")
        new = mutate(copy.deepcopy(self.objs[name]))
        self.objs[name] = new
        return new


def test_expectations_block_until_observed_and_expire():
    now = [0.0]
    e = pc.Expectations(clock=lambda: now[0])
    assert e.satisfied("a")
    e.expect_creations("a", 2)
    assert not e.satisfied("a")
    e.creation_observed("a")
    assert not e.satisfied("a")
    e.creation_observed("a")
    assert e.satisfied("a")
    e.expect_deletions("a", ["ns/p1"])
    e.deletion_observed("a", "ns/p1")
    e.deletion_observed("a", "ns/p1")  # seen twice, counted once
    assert e.satisfied("a")
    e.expect_creations("a", 1)
    now[0] += pc.Expectations.TTL + 1
    assert e.satisfied("a")


def test_pod_from_template_is_controlled_and_generated():
    tpl = {"metadata": {"labels": {"app": "web"}, "annotations": {"x": "y"}}, "spec": {"containers": [{"name": "c"}]}}
    pod = pc.pod_from_template(tpl, OWNER, RS)
    assert pod["metadata"]["generateName"] == "web-"
    assert pod["metadata"]["labels"] == {"app": "web"}
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": "rs-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod["spec"]["containers"][0]["name"] = "changed"
    assert tpl["spec"]["containers"][0]["name"] == "c"  # a copy
    named = pc.pod_from_template(tpl, OWNER, RS, name="web-0")
    assert named["metadata"]["name"] == "web-0" and "generateName" not in named["metadata"]


def test_claim_adopts_releases_and_leaves_others():
    mine = pc.controller_ref(OWNER, "apps/v1", "ReplicaSet")
    other = dict(mine, uid="other")
    pods = [
        _pod("orphan", {"app": "web"}),
        _pod("owned", {"app": "web"}, [mine]),
        _pod("owned-nomatch", {"app": "db"}, [mine]),
        _pod("foreign", {"app": "web"}, [other]),
        _pod("orphan-nomatch", {"app": "db"}),
    ]
    client = FakeClient(pods)
    res = asyncio.run(pc.claim(client, PODS, OWNER, RS, LabelSelector.from_set({"app": "web"}), pods))
    assert sorted(p["metadata"]["name"] for p in res.pods) == ["orphan", "owned"]
    assert sorted(client.updates) == ["orphan", "owned-nomatch"]
    assert pc.controller_of(client.objs["orphan"])["uid"] == "rs-uid"
    assert "ownerReferences" not in client.objs["owned-nomatch"]["metadata"]
    assert not res.errors


def test_claim_adopts_nothing_when_owner_was_replaced():
    pods = [_pod("orphan", {"app": "web"})]
    client = FakeClient(pods)

    async def fresh():
        return {"metadata": {"name": "web", "uid": "new-uid"}}

    res = asyncio.run(
        pc.claim(client, PODS, OWNER, RS, LabelSelector.from_set({"app": "web"}), pods, owner_fresh=fresh)
    )
    assert res.pods == [] and client.updates == []


def test_deletion_order_least_valuable_first():
    ready = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    recent = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T00:00:00Z"}]
    unscheduled = _pod("unscheduled", phase="Pending")
    pending = dict(_pod("pending", phase="Pending"), spec={"nodeName": "n1"})
    running_unready = dict(_pod("unready", phase="Running"), spec={"nodeName": "n1"})
    old_ready = dict(_pod("old", phase="Running", conditions=ready), spec={"nodeName": "n2"})
    new_ready = dict(_pod("new", phase="Running", conditions=recent), spec={"nodeName": "n2"})
    costly = dict(_pod("costly", phase="Running", conditions=recent), spec={"nodeName": "n2"})
    costly["metadata"]["annotations"] = {"controller.orch.io/pod-deletion-cost": "100"}
    order = pc.deletion_order([old_ready, costly, new_ready, running_unready, pending, unscheduled])
    assert [p["metadata"]["name"] for p in order] == ["unscheduled", "pending", "unready", "new", "old", "costly"]


def test_pod_state_helpers():
    assert pc.is_active(_pod("a", phase="Running"))
    assert not pc.is_active(_pod("a", phase="Succeeded"))
    p = _pod(
        "a",
        phase="Running",
        conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    )
    assert pc.is_ready(p)
    t = pc.ready_since(p)
    assert pc.is_available(p, 10, t + 11) and not pc.is_available(p, 10, t + 5)


def test_rate_limited_queue_backs_off_and_forgets():
    async def main():
        q = RateLimitedQueue(base_delay=0.001)
        assert q.add_rate_limited("a") == 0.001
        assert q.add_rate_limited("a") == 0.002
        assert await asyncio.wait_for(q.get(), 1) == "a"
        q.forget("a")
        assert q.failures("a") == 0

    asyncio.run(main())
