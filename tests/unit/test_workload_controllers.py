"""The pure parts of the ReplicaSet and Deployment controllers: the template hash, the
surge and unavailability arithmetic, proportional scaling, slow-start creates,
expectations against a stale informer, status, and the apps validation."""

from __future__ import annotations

import asyncio
import copy
import json
import re

import pytest

from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.controllers import deployment as dc
from apiserver_min.controllers import podcontrol as pc
from apiserver_min.controllers import replicaset as rsc
from apiserver_min.controllers.history import template_hash
from apiserver_min.controllers.queue import RateLimitedQueue
from apiserver_min.registry import apps
from apiserver_min.storage.cacher import Entry

RS_KIND = REGISTRY.by_resource("apps", "v1", "replicasets")
POD_KIND = REGISTRY.by_resource("", "v1", "pods")
TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}


def deployment(replicas=10, surge="25%", unavailable="25%", strategy="RollingUpdate", **extra) -> dict:
    spec = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": copy.deepcopy(TEMPLATE),
        "strategy": {"type": strategy},
    }
    if strategy == "RollingUpdate":
        spec["strategy"]["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    spec.update(extra)
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "d-uid", "generation": 1}, "spec": spec}


def replica_set(name, replicas, created="2026-01-01T00:00:00Z", available=0, annotations=None) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": dict(annotations or {}),
            "resourceVersion": "1",
        },
        "spec": {"replicas": replicas, "template": copy.deepcopy(TEMPLATE)},
        "status": {"replicas": replicas, "availableReplicas": available},
    }


# --- template hash -----------------------------------------------------------------------------


def test_template_hash_is_stable_safe_and_salted():
    h = template_hash(TEMPLATE, None)
    assert re.fullmatch(r"[bcdfghjklmnpqrstvwxz2456789]{1,10}", h)
    reordered = json.loads(json.dumps({"spec": TEMPLATE["spec"], "metadata": TEMPLATE["metadata"]}))
    assert template_hash(reordered, None) == h
    changed = copy.deepcopy(TEMPLATE)
    changed["spec"]["containers"][0]["image"] = "busybox:2"
    assert template_hash(changed, None) != h
    assert template_hash(TEMPLATE, 0) != h  # a collision count (even 0) salts the hash
    assert template_hash(TEMPLATE, 1) != template_hash(TEMPLATE, 0)


def test_equal_ignore_hash_reads_empty_fields_as_absent():
    kubectl_copy = copy.deepcopy(TEMPLATE)
    kubectl_copy["metadata"]["creationTimestamp"] = None
    kubectl_copy["spec"]["containers"][0]["resources"] = {}
    kubectl_copy["metadata"]["labels"][names.LABEL_POD_TEMPLATE_HASH] = "abc"
    assert dc.equal_ignore_hash(kubectl_copy, TEMPLATE)
    other = copy.deepcopy(TEMPLATE)
    other["spec"]["containers"][0]["image"] = "x"
    assert not dc.equal_ignore_hash(other, TEMPLATE)


# --- surge and unavailability --------------------------------------------------------------------


@pytest.mark.parametrize(
    "surge, unavailable, desired, want",
    [
        ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailable down
        ("25%", "25%", 3, (1, 0)),
        ("50%", "50%", 5, (3, 2)),
        (1, 1, 4, (1, 1)),
        ("0%", "0%", 10, (0, 1)),  # both 0: one may be unavailable, so the rollout moves
        ("1%", "1%", 10, (1, 0)),
        (0, "10%", 5, (0, 0 + 1)),
    ],
)
def test_fenceposts(surge, unavailable, desired, want):
    assert dc.resolve_fenceposts(surge, unavailable, desired) == want


def test_max_unavailable_never_beyond_replicas_and_zero_for_recreate():
    assert dc.max_unavailable(deployment(replicas=3, unavailable=10)) == 3
    assert dc.max_unavailable(deployment(replicas=0)) == 0
    assert dc.max_unavailable(deployment(strategy="Recreate")) == 0
    assert dc.max_surge(deployment(strategy="Recreate")) == 0
    with pytest.raises(ValueError):
        dc.scaled_value("ten", 10, True)


def test_new_replica_set_grows_within_max_surge():
    d = deployment(replicas=10)  # maxSurge 3
    old, new = replica_set("old", 10), replica_set("new", 0)
    assert dc.new_rs_new_replicas(d, [old, new], new) == 3
    old["spec"]["replicas"], new["spec"]["replicas"] = 8, 4
    assert dc.new_rs_new_replicas(d, [old, new], new) == 5  # 13 - 12 = 1 more
    old["spec"]["replicas"] = 9
    assert dc.new_rs_new_replicas(d, [old, new], new) == 4  # at 13 already
    old["spec"]["replicas"], new["spec"]["replicas"] = 0, 9
    assert dc.new_rs_new_replicas(d, [old, new], new) == 10  # never beyond replicas
    assert dc.new_rs_new_replicas(deployment(replicas=7, strategy="Recreate"), [old, new], new) == 7


# --- proportional scaling ---------------------------------------------------------------------


class FakeEvents:
    def __init__(self):
        self.recorded: list[tuple[str, str]] = []

    async def record(self, ref, type_, reason, message, action=""):
        self.recorded.append((reason, message))


class FakeClient:
    """Stores what the controller writes; a stale resourceVersion conflicts."""

    def __init__(self):
        self.writes: list[dict] = []
        self.creates: list[dict] = []
        self.fail_creates_after: int | None = None
        self.stored: dict[str, dict] = {}

    async def update(self, kind, namespace, name, obj, *, subresource=""):
        if callable(obj):  # read-modify-write of what is stored
            obj = obj(copy.deepcopy(self.stored[name]))
        out = copy.deepcopy(obj)
        out["metadata"]["resourceVersion"] = str(int(out["metadata"].get("resourceVersion", "1")) + 1)
        self.writes.append(out)
        return out

    async def create(self, kind, namespace, obj, *, subresource=""):
        if self.fail_creates_after is not None and len(self.creates) >= self.fail_creates_after:
            raise st.ApiError(403, "Forbidden", 'pods "x" is forbidden: exceeded quota')
        out = copy.deepcopy(obj)
        out["metadata"]["name"] = out["metadata"].get("name") or f"{out['metadata']['generateName']}{len(self.creates)}"
        self.creates.append(out)
        return out


def deployment_controller(client) -> dc.DeploymentController:
    c = dc.DeploymentController.__new__(dc.DeploymentController)
    c.client = client
    c.kind = REGISTRY.by_resource("apps", "v1", "deployments")
    c.rs_kind = RS_KIND
    c.events = FakeEvents()
    return c


def test_scaling_during_a_rollout_is_shared_in_proportion():
    d = deployment(replicas=15)  # maxSurge 4: allowed 19
    ann = {names.ANNOTATION_DEPLOYMENT_MAX_REPLICAS: "13", names.ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS: "10"}
    old = replica_set("old", 8, "2026-01-01T00:00:00Z", annotations=ann)
    new = replica_set("new", 5, "2026-01-01T00:01:00Z", annotations=ann)
    client = FakeClient()
    c = deployment_controller(client)
    asyncio.run(c.scale(d, new, [old]))
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (12, 7)  # 8*19/13 = 11.7, 5*19/13 = 7.3
    for rs in (old, new):
        assert rs["metadata"]["annotations"][names.ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS] == "15"
        assert rs["metadata"]["annotations"][names.ANNOTATION_DEPLOYMENT_MAX_REPLICAS] == "19"
    assert ("ScalingReplicaSet", "Scaled up replica set old to 12 from 8") in c.events.recorded

    # back down to 5 (maxSurge 2: allowed 7): 12 of 19 and 7 of 19, the leftover to the largest
    d = deployment(replicas=5)
    asyncio.run(c.scale(d, new, [old]))
    assert old["spec"]["replicas"] + new["spec"]["replicas"] == 7
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (4, 3)


def test_one_active_replica_set_takes_the_whole_size():
    d = deployment(replicas=4)
    old, new = replica_set("old", 0), replica_set("new", 2)
    c = deployment_controller(FakeClient())
    asyncio.run(c.scale(d, new, [old]))
    assert new["spec"]["replicas"] == 4 and old["spec"]["replicas"] == 0
    assert c.events.recorded == [("ScalingReplicaSet", "Scaled up replica set new to 4 from 2")]


def test_rolling_scale_down_respects_min_available():
    d = deployment(replicas=4, surge=1, unavailable=1)
    old = replica_set("old", 4, available=4)
    new = replica_set("new", 1, "2026-01-01T00:01:00Z", available=0)
    c = deployment_controller(FakeClient())
    # 5 pods, 3 must stay available, the new one is not: 5 - 3 - 1 = 1 may go
    assert asyncio.run(c.reconcile_old_rss([old, new], [old], new, d))
    assert old["spec"]["replicas"] == 3
    # now nothing more may go until the new pods are available
    old["status"]["availableReplicas"] = 3
    assert not asyncio.run(c.reconcile_old_rss([old, new], [old], new, d))


def test_cleanup_keeps_revision_history_limit():
    d = deployment(revisionHistoryLimit=1)
    rss = [replica_set(f"r{i}", 0, annotations={names.ANNOTATION_DEPLOYMENT_REVISION: str(i)}) for i in (3, 1, 2)]
    rss[0]["status"]["replicas"] = 1  # revision 3 still has a pod: kept
    deleted = []

    class Deleting(FakeClient):
        async def delete(self, kind, namespace, name, options=None):
            deleted.append(name)
            return {}

    c = deployment_controller(Deleting())
    asyncio.run(c.cleanup(d, rss))
    assert deleted == ["r1", "r2"]


# --- conditions ---------------------------------------------------------------------------------


def test_progress_and_timeout():
    d = deployment(replicas=2, progressDeadlineSeconds=10)
    d["status"] = {"replicas": 2, "updatedReplicas": 1}
    assert dc.deployment_progressing(d, {"replicas": 2, "updatedReplicas": 2})
    assert not dc.deployment_progressing(d, {"replicas": 2, "updatedReplicas": 1})
    cond = dc.new_condition(dc.PROGRESSING, "True", dc.RS_UPDATED, "x")
    status = {"conditions": [cond]}
    now = dc._cond_time(cond, "lastUpdateTime")
    assert not dc.deployment_timed_out(d, status, now + 5)
    assert dc.deployment_timed_out(d, status, now + 11)
    cond["reason"] = dc.NEW_RS_AVAILABLE
    assert not dc.deployment_timed_out(d, status, now + 100)


def test_set_condition_keeps_transition_time_of_the_same_status():
    status: dict = {}
    first = dc.new_condition(dc.AVAILABLE, "True", dc.MIN_AVAILABLE, "m")
    first["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    dc.set_condition(status, first)
    dc.set_condition(status, dc.new_condition(dc.AVAILABLE, "True", dc.MIN_AVAILABLE, "m"))
    assert status["conditions"] == [first]  # same status and reason: untouched
    dc.set_condition(status, dc.new_condition(dc.AVAILABLE, "True", "Other", "m"))
    assert status["conditions"][0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert status["conditions"][0]["reason"] == "Other"


def test_new_replica_set_annotations_and_revision_history():
    d = deployment(replicas=3)
    d["metadata"]["annotations"] = {"team": "a", names.ANNOTATION_LAST_APPLIED: "{}"}
    rs = replica_set("x", 0, annotations={names.ANNOTATION_DEPLOYMENT_REVISION: "1"})
    assert dc.set_new_rs_annotations(d, rs, "3", exists=True)
    ann = rs["metadata"]["annotations"]
    assert ann == {
        "team": "a",
        names.ANNOTATION_DEPLOYMENT_REVISION: "3",
        names.ANNOTATION_DEPLOYMENT_REVISION_HISTORY: "1",
    }
    assert not dc.set_new_rs_annotations(d, rs, "3", exists=True)
    fresh = replica_set("y", 0)
    dc.set_new_rs_annotations(d, fresh, "1", exists=False)
    assert fresh["metadata"]["annotations"][names.ANNOTATION_DEPLOYMENT_MAX_REPLICAS] == "4"


# --- the ReplicaSet controller ------------------------------------------------------------------


def test_slow_start_stops_after_the_first_failing_batch():
    calls = []

    async def fn():
        calls.append(1)
        if len(calls) > 3:
            raise st.ApiError(403, "Forbidden", "quota")

    successes, err = asyncio.run(pc.slow_start_batch(10, 1, fn))
    assert (successes, len(calls)) == (3, 7)  # batches of 1, 2, then 4 failing
    assert isinstance(err, st.ApiError)
    assert asyncio.run(pc.slow_start_batch(0, 1, fn)) == (0, None)


def _entry(obj: dict) -> Entry:
    md = obj["metadata"]
    owners = tuple(
        (r["uid"], r["apiVersion"], r["kind"], r["name"]) for r in md.get("ownerReferences", []) if isinstance(r, dict)
    )
    return Entry(
        key=f"/{md['namespace']}/{md['name']}",
        raw=json.dumps(obj).encode(),
        rv=1,
        namespace=md["namespace"],
        name=md["name"],
        labels=md.get("labels", {}),
        fields={"status.phase": obj.get("status", {}).get("phase", "")},
        uid=md.get("uid", ""),
        owners=owners,
        controller=next((r["uid"] for r in md.get("ownerReferences", []) if r.get("controller") is True), ""),
    )


class FakeInformer:
    def __init__(self, objs=()):
        self.entries = {o["metadata"]["name"]: _entry(o) for o in objs}

    def get(self, namespace, name):
        return self.entries.get(name)

    def list(self, namespace=None):
        return list(self.entries.values())

    def __len__(self):
        return len(self.entries)

    def claimable(self, namespace, owner_uid, selector):
        return [
            e
            for e in self.entries.values()
            if any(o[0] == owner_uid for o in e.owners) or (not e.controller and selector.matches(e.labels))
        ]


def rs_controller(client, rs: dict, pods=()) -> rsc.ReplicaSetController:
    c = rsc.ReplicaSetController.__new__(rsc.ReplicaSetController)
    client.stored[rs["metadata"]["name"]] = rs
    c.client = client
    c.kind, c.pod_kind = RS_KIND, POD_KIND
    c.sets, c.pods = FakeInformer([rs]), FakeInformer(pods)
    c.events = FakeEvents()
    c.expectations = pc.Expectations()
    c.queue = RateLimitedQueue()
    c._ready_memo = {}
    return c


def a_replica_set(replicas: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "rs-uid", "generation": 2},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
    }


def test_a_stale_informer_never_makes_it_create_twice():
    client = FakeClient()
    c = rs_controller(client, a_replica_set(5))

    async def go():
        await c.sync(("ns", "web"))
        assert len(client.creates) == 5
        await c.sync(("ns", "web"))  # the informer has seen none of them yet
        assert len(client.creates) == 5
        for _ in range(5):
            c.expectations.creation_observed("ns/web")
        await c.sync(("ns", "web"))  # satisfied, still no pods seen: creates again
        assert len(client.creates) == 10

    asyncio.run(go())
    pod = client.creates[0]
    assert pod["metadata"]["generateName"] == "web-"
    assert pod["metadata"]["labels"] == {"app": "web"}
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("ReplicaSet", "rs-uid", True)
    status = client.writes[-1]["status"]
    assert status == {"replicas": 0, "observedGeneration": 2}


def test_failed_creates_set_replica_failure_and_lower_expectations():
    client = FakeClient()
    client.fail_creates_after = 1
    c = rs_controller(client, a_replica_set(4))
    with pytest.raises(st.ApiError):
        asyncio.run(c.sync(("ns", "web")))
    assert len(client.creates) == 1
    assert not c.expectations.satisfied("ns/web")  # the one create that worked is still to be seen
    c.expectations.creation_observed("ns/web")
    assert c.expectations.satisfied("ns/web")  # the failed and skipped ones are not waited for
    cond = client.writes[-1]["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("ReplicaFailure", "True", "FailedCreate")
    assert "exceeded quota" in cond["message"]
    assert ("FailedCreate", 'Error creating: pods "x" is forbidden: exceeded quota') in c.events.recorded


def test_replica_set_status_counts():
    rs = a_replica_set(3)
    rs["spec"]["minReadySeconds"] = 10
    rs["status"] = {"conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]}
    ready = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    now = 1767225600.0 + 5  # 5 s after turning ready
    pods = [
        {"metadata": {"labels": {"app": "web"}}, "status": ready},
        {"metadata": {"labels": {"app": "other"}}, "status": {}},
    ]
    status = rsc.calculate_status(rs, pods, None, -1, now)
    assert status == {"replicas": 2, "fullyLabeledReplicas": 1, "readyReplicas": 1, "observedGeneration": 2}
    assert rsc.calculate_status(rs, pods, None, -1, now + 10)["availableReplicas"] == 1
    assert pc.ready_to_available_delay(pods, 10, now) == pytest.approx(5)


# --- validation -------------------------------------------------------------------------------


def _messages(errs) -> list[str]:
    return [e.message() for e in errs]


def test_deployment_validation_messages():
    spec = deployment(replicas=-1, surge="120%", unavailable="x")["spec"]
    spec["template"]["spec"]["restartPolicy"] = "OnFailure"
    spec["progressDeadlineSeconds"], spec["minReadySeconds"] = 5, 5
    msgs = _messages(apps.validate_deployment_spec(spec))
    assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in msgs
    assert 'spec.strategy.rollingUpdate.maxSurge: Invalid value: "120%": must not be greater than 100%' in msgs
    assert (
        "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"x\": must be an integer or percentage (e.g '5%')"
    ) in msgs
    assert 'spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"' in msgs
    assert "spec.progressDeadlineSeconds: Invalid value: 5: must be greater than minReadySeconds" in msgs
    empty = deployment()["spec"]
    empty["selector"] = {}
    assert "spec.selector: Invalid value: {}: empty selector is invalid for deployment" in _messages(
        apps.validate_deployment_spec(empty)
    )
    recreate = deployment(strategy="Recreate")["spec"]
    recreate["strategy"]["rollingUpdate"] = {}
    assert (
        "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"
        in _messages(apps.validate_deployment_spec(recreate))
    )


def test_replication_controller_validation():
    spec = {"replicas": 1, "selector": {"app": "a"}, "template": copy.deepcopy(TEMPLATE)}
    spec["template"]["spec"]["restartPolicy"] = "Always"
    msgs = _messages(apps.validate_replication_controller_spec(spec))
    assert msgs == [
        'spec.template.metadata.labels: Invalid value: {"app":"web"}: `selector` does not match template `labels`'
    ]
    assert _messages(apps.validate_replication_controller_spec({"template": spec["template"]})) == [
        "spec.selector: Required value"
    ]


def _status_update_messages(resource: str, status: dict, old_status: dict | None = None) -> list[str]:
    """The errors of a status write, through the kind's strategy as the store calls it."""
    kind = REGISTRY.by_resource("" if resource == "replicationcontrollers" else "apps", "v1", resource)
    strategy = {
        "deployments": apps.DeploymentStrategy,
        "replicasets": apps.ReplicaSetStrategy,
        "replicationcontrollers": apps.ReplicationControllerStrategy,
    }[resource](kind)
    old = {"metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "spec": {}}
    old["status"] = old_status or {}
    new = copy.deepcopy(old)
    new["status"] = status
    return _messages(strategy.validate_status_update(new, old))


def test_deployment_status_update_validation():
    ok = {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3}
    assert _status_update_messages("deployments", ok) == []
    # The spec is not checked again on a status write (it is the stored one).
    assert _status_update_messages("deployments", {}) == []
    negative = {k: -1 for k in apps.DEPLOYMENT_STATUS_COUNTS}
    assert _status_update_messages("deployments", negative) == [
        f"status.{k}: Invalid value: -1: must be greater than or equal to 0" for k in apps.DEPLOYMENT_STATUS_COUNTS
    ]
    assert _status_update_messages(
        "deployments", {"replicas": 2, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 3}
    ) == [
        "status.updatedReplicas: Invalid value: 3: cannot be greater than status.replicas",
        "status.availableReplicas: Invalid value: 3: cannot be greater than status.replicas",
        "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas",
    ]
    assert _status_update_messages("deployments", {"replicas": 3, "readyReplicas": 4}) == [
        "status.readyReplicas: Invalid value: 4: cannot be greater than status.replicas"
    ]
    assert _status_update_messages("deployments", {"replicas": 3, "readyReplicas": 2, "availableReplicas": 3}) == [
        "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas"
    ]
    # unavailableReplicas has no upper bound (a scaled-up deployment may miss all of them)
    assert _status_update_messages("deployments", {"replicas": 1, "unavailableReplicas": 5}) == []
    assert _status_update_messages("deployments", {"collisionCount": 1}, {"collisionCount": 2}) == [
        "status.collisionCount: Invalid value: 1: cannot be decremented"
    ]
    assert _status_update_messages("deployments", {"replicas": "3"}) == [
        'status.replicas: Invalid value: "3": must be an integer'
    ]


@pytest.mark.parametrize("resource", ["replicasets", "replicationcontrollers"])
def test_replica_set_and_controller_status_update_validation(resource):
    ok = {"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 2, "availableReplicas": 1, "observedGeneration": 4}
    assert _status_update_messages(resource, ok) == []
    negative = {k: -2 for k in apps.REPLICA_SET_STATUS_COUNTS}
    assert _status_update_messages(resource, negative) == [
        f"status.{k}: Invalid value: -2: must be greater than or equal to 0" for k in apps.REPLICA_SET_STATUS_COUNTS
    ]
    over = {"replicas": 1, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 3}
    assert _status_update_messages(resource, over) == [
        "status.fullyLabeledReplicas: Invalid value: 2: cannot be greater than status.replicas",
        "status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas",
        "status.availableReplicas: Invalid value: 3: cannot be greater than status.replicas",
        "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas",
    ]


def test_a_name_collision_bumps_collision_count_and_changes_the_hash():
    d = deployment(replicas=2, progressDeadlineSeconds=600)
    d["metadata"]["resourceVersion"] = "5"
    squatter = replica_set("other", 1)
    squatter["spec"]["template"]["spec"]["containers"][0]["image"] = "someone-else"

    class Colliding(FakeClient):
        async def create(self, kind, namespace, obj, *, subresource=""):
            self.creates.append(obj)
            if len(self.creates) == 1:
                raise st.ApiError(409, "AlreadyExists", "already exists")
            return copy.deepcopy(obj)

        async def get(self, kind, namespace, name):
            return squatter

    client = Colliding()
    c = deployment_controller(client)
    with pytest.raises(st.ApiError):
        asyncio.run(c.sync_revision(d, [], create=True))
    assert d["status"]["collisionCount"] == 1
    assert client.writes[-1]["status"]["collisionCount"] == 1
    first = client.creates[0]["metadata"]["name"]
    rs, _ = asyncio.run(c.sync_revision(d, [], create=True))
    assert rs["metadata"]["name"] != first
    assert rs["metadata"]["name"] == f"web-{template_hash(d['spec']['template'], 1)}"
    assert rs["spec"]["selector"]["matchLabels"][names.LABEL_POD_TEMPLATE_HASH] == rs["metadata"]["name"][4:]
    assert rs["spec"]["replicas"] == 2  # 25% surge of 2 rounds up to 1: room for both new pods
    progressing = dc.get_condition(d["status"], dc.PROGRESSING)
    assert progressing["reason"] == dc.NEW_RS_CREATED
    assert d["metadata"]["annotations"][names.ANNOTATION_DEPLOYMENT_REVISION] == "1"
