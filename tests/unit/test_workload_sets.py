"""The pure parts of the DaemonSet and StatefulSet controllers: revision hashing and
history, which nodes run a daemon pod, rolling-update steps, ordered scaling and
partitions, claim retention, and the sets' validation."""

from __future__ import annotations

import datetime as _dt

import pytest

from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.controllers import daemonset as dsc
from apiserver_min.controllers import history
from apiserver_min.controllers import statefulset as ssc
from apiserver_min.registry.apps_daemonset import validate_daemon_set_spec
from apiserver_min.registry.apps_statefulset import validate_stateful_set_spec
from apiserver_min.registry.families import strategy_for

TEMPLATE = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}


def ts(seconds_ago: float = 0) -> str:
    t = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=seconds_ago)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- history ---------------------------------------------------------------------------------


def test_hashes_are_stable_safe_and_move_with_the_collision_count():
    h = history.template_hash(TEMPLATE, 0)
    assert h == history.template_hash({"spec": TEMPLATE["spec"], "metadata": TEMPLATE["metadata"]}, 0)
    assert set(h) <= set(history.SAFE_ALPHABET)
    assert history.template_hash(TEMPLATE, 1) != h
    assert history.template_hash(TEMPLATE, None) != h
    assert history.data_hash({"x": 1}, 0) != history.data_hash({"x": 2}, 0)
    assert history.data_hash({"x": 1}, 0) != history.data_hash({"x": 1}, 1)
    assert history.fnv1a_32(b"") == 0x811C9DC5 and history.fnv1a_32(b"a") == 0xE40C292C
    assert history.fnv1_32(b"a") == 0x050C5D7E
    assert history.revision_name("x" * 300, "abc") == "x" * 223 + "-abc"


def test_revision_holds_a_replace_patch_of_the_template():
    owner = {
        "metadata": {"name": "s", "namespace": "n", "uid": "u1"},
        "spec": {"template": TEMPLATE},
    }
    kind = type("K", (), {"group": "apps", "version": "v1", "kind": "StatefulSet"})()
    rev = history.new_revision(owner, kind, 3)
    assert rev["data"] == {"spec": {"template": {**TEMPLATE, "$patch": "replace"}}}
    assert rev["revision"] == 3 and rev["metadata"]["labels"] == {"app": "a"}
    assert rev["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert history.template_of(rev) == TEMPLATE


def test_history_keeps_live_revisions_and_deletes_the_oldest_beyond_the_limit():
    revs = [{"metadata": {"name": f"r{i}"}, "revision": i} for i in (5, 1, 3, 2, 4)]
    gone = history.history_to_delete(revs, live={"r1", "r5"}, limit=1)
    assert [r["metadata"]["name"] for r in gone] == ["r2", "r3"]
    assert history.history_to_delete(revs, live=set(), limit=10) == []
    assert history.next_revision(revs) == 6


# --- DaemonSet -------------------------------------------------------------------------------


def node(name, labels=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def ds(spec_extra=None, template_spec=None):
    tspec = {"containers": [{"name": "c", "image": "i"}], **(template_spec or {})}
    return {
        "metadata": {"name": "d", "namespace": "n", "uid": "u"},
        "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": tspec}, **(spec_extra or {})},
    }


def test_which_nodes_run_a_daemon_pod():
    d = ds(template_spec={"nodeSelector": {"disk": "ssd"}})
    assert dsc.should_run(d, node("a", {"disk": "ssd"})) == (True, True)
    assert dsc.should_run(d, node("b", {"disk": "hdd"})) == (False, False)
    # An untolerated NoSchedule taint: no new pod, but one already there stays.
    tainted = node("c", {"disk": "ssd"}, [{"key": "k", "value": "v", "effect": "NoSchedule"}])
    assert dsc.should_run(d, tainted) == (False, True)
    evict = node("c", {"disk": "ssd"}, [{"key": "k", "effect": "NoExecute"}])
    assert dsc.should_run(d, evict) == (False, False)
    # The taints every daemon pod tolerates.
    troubled = node(
        "e",
        {"disk": "ssd"},
        [
            {"key": names.TAINT_NOT_READY, "effect": "NoExecute"},
            {"key": names.TAINT_UNREACHABLE, "effect": "NoExecute"},
            {"key": names.TAINT_UNSCHEDULABLE, "effect": "NoSchedule"},
            {"key": names.TAINT_DISK_PRESSURE, "effect": "NoSchedule"},
        ],
    )
    assert dsc.should_run(d, troubled) == (True, True)
    net = node("f", {"disk": "ssd"}, [{"key": names.TAINT_NETWORK_UNAVAILABLE, "effect": "NoSchedule"}])
    assert dsc.should_run(d, net) == (False, True)
    host_net = ds(template_spec={"nodeSelector": {"disk": "ssd"}, "hostNetwork": True})
    assert dsc.should_run(host_net, net) == (True, True)
    # A template naming a node runs there only; required node affinity counts.
    assert dsc.should_run(ds(template_spec={"nodeName": "x"}), node("y")) == (False, False)
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
            }
        }
    }
    assert dsc.should_run(ds(template_spec={"affinity": aff}), node("g", {"zone": "z1"})) == (True, True)
    assert dsc.should_run(ds(template_spec={"affinity": aff}), node("h", {"zone": "z2"})) == (False, False)


def test_daemon_pods_are_bound_by_node_affinity_on_the_node_name():
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
                        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}],
                    }
                ]
            }
        }
    }
    out = dsc.affinity_for_node(aff, "n1")
    term = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["z1"]}]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
    assert dsc.target_node({"spec": {"affinity": out}}) == "n1"
    assert dsc.target_node({"spec": {"affinity": dsc.affinity_for_node(None, "n2")}}) == "n2"
    spec: dict = {"tolerations": [{"key": names.TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute"}]}
    dsc.add_daemon_tolerations(spec)
    assert len(spec["tolerations"]) == len(dsc.DAEMON_TOLERATIONS)
    assert all("tolerationSeconds" not in t for t in spec["tolerations"])


@pytest.mark.parametrize(
    "value, total, up, want", [(1, 10, True, 1), ("10%", 15, True, 2), ("10%", 15, False, 1), ("0%", 5, True, 0)]
)
def test_int_or_percent(value, total, up, want):
    assert dsc.scaled_value(value, total, up) == want


def daemon_pod(name, node_name, hash_, ready=True, age=100):
    cond = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ts(age)}]
    return {
        "metadata": {"name": name, "labels": {history.HASH_LABEL: hash_}, "creationTimestamp": ts(age)},
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running", "conditions": cond},
    }


def rolling(max_unavailable=1, max_surge=0):
    return ds(
        {
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge},
            }
        }
    )


def test_rolling_update_deletes_within_max_unavailable():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    pods = {f"n{i}": [daemon_pod(f"p{i}", f"n{i}", "old")] for i in range(4)}
    delete, surge = dsc.rolling_update_plan(rolling(), pods, 4, "new", now)
    assert [p["metadata"]["name"] for p in delete] == ["p0"] and surge == []
    delete, _ = dsc.rolling_update_plan(rolling("50%"), pods, 4, "new", now)
    assert len(delete) == 2
    # A new pod not yet ready uses up the budget; an unavailable old pod is replaced anyway.
    pods["n0"] = [daemon_pod("q0", "n0", "new", ready=False)]
    pods["n3"] = [daemon_pod("p3", "n3", "old", ready=False)]
    delete, _ = dsc.rolling_update_plan(rolling(), pods, 4, "new", now)
    assert [p["metadata"]["name"] for p in delete] == ["p3"]
    # A node without its pod counts as unavailable.
    pods = {"n0": [], "n1": [daemon_pod("p1", "n1", "old")]}
    assert dsc.rolling_update_plan(rolling(), pods, 2, "new", now) == ([], [])


def test_rolling_update_with_surge_starts_new_pods_first():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    pods = {f"n{i}": [daemon_pod(f"p{i}", f"n{i}", "old")] for i in range(3)}
    delete, surge = dsc.rolling_update_plan(rolling(0, 1), pods, 3, "new", now)
    assert delete == [] and surge == ["n0"]
    pods["n0"].append(daemon_pod("q0", "n0", "new"))
    delete, surge = dsc.rolling_update_plan(rolling(0, 1), pods, 3, "new", now)
    assert [p["metadata"]["name"] for p in delete] == ["p0"] and surge == ["n1"]


# --- StatefulSet -----------------------------------------------------------------------------


def sts(replicas=3, policy="OrderedReady", partition=0, strategy="RollingUpdate", **spec):
    up: dict = {"type": strategy}
    if strategy == "RollingUpdate":
        up["rollingUpdate"] = {"partition": partition}
    return {
        "metadata": {"name": "web", "namespace": "n", "uid": "su"},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": policy,
            "updateStrategy": up,
            "selector": {"matchLabels": {"app": "web"}},
            "template": TEMPLATE,
            **spec,
        },
    }


def spod(ordinal, rev="r1", ready=True, phase="Running", deleting=False):
    md: dict = {
        "name": f"web-{ordinal}",
        "namespace": "n",
        "uid": f"p{ordinal}",
        "labels": {history.HASH_LABEL: rev, names.LABEL_STATEFULSET_POD_NAME: f"web-{ordinal}"},
    }
    if deleting:
        md["deletionTimestamp"] = ts()
    cond = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ts(60)}]
    return {"metadata": md, "spec": {}, "status": {"phase": phase, "conditions": cond}}


def actions(p):
    return [(s.action, s.ordinal) for s in p.steps]


def test_ordered_ready_creates_one_at_a_time_after_the_previous_is_ready():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    assert actions(ssc.plan(sts(), [], "r1", "r1", now)) == [("create", 0)]
    assert actions(ssc.plan(sts(), [spod(0, ready=False)], "r1", "r1", now)) == []
    assert actions(ssc.plan(sts(), [spod(0)], "r1", "r1", now)) == [("create", 1)]
    assert actions(ssc.plan(sts(), [spod(0), spod(1, phase="Pending")], "r1", "r1", now)) == []
    assert actions(ssc.plan(sts(policy="Parallel"), [], "r1", "r1", now)) == [
        ("create", 0),
        ("create", 1),
        ("create", 2),
    ]
    # A failed pod is deleted and made again.
    assert actions(ssc.plan(sts(), [spod(0, phase="Failed")], "r1", "r1", now)) == [("recreate", 0), ("create", 0)]
    # minReadySeconds: ready for a minute is not enough for 120 s.
    assert actions(ssc.plan(sts(minReadySeconds=120), [spod(0)], "r1", "r1", now)) == []


def test_ordered_scale_down_from_the_highest_ordinal_one_at_a_time():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    pods = [spod(i) for i in range(5)]
    assert actions(ssc.plan(sts(replicas=2), pods, "r1", "r1", now)) == [("delete", 4)]
    pods[4] = spod(4, deleting=True)
    assert actions(ssc.plan(sts(replicas=2), pods, "r1", "r1", now)) == []
    assert actions(ssc.plan(sts(replicas=2, policy="Parallel"), [spod(i) for i in range(5)], "r1", "r1", now)) == [
        ("delete", 4),
        ("delete", 3),
        ("delete", 2),
    ]
    # An unhealthy lower pod blocks scaling down, unless it is the one to go.
    pods = [spod(0, ready=False), spod(1), spod(2)]
    assert actions(ssc.plan(sts(replicas=1), pods, "r1", "r1", now)) == []
    pods = [spod(0), spod(1), spod(2, ready=False)]
    assert actions(ssc.plan(sts(replicas=2), pods, "r1", "r1", now)) == [("delete", 2)]


def test_rolling_update_from_the_highest_ordinal_down_to_the_partition():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    pods = [spod(i) for i in range(3)]
    p = ssc.plan(sts(partition=1), pods, "r1", "r2", now)
    assert actions(p) == [("update", 2)] and p.status["currentReplicas"] == 2
    pods[2] = spod(2, rev="r2", ready=False)
    assert actions(ssc.plan(sts(partition=1), pods, "r1", "r2", now)) == []
    pods[2] = spod(2, rev="r2")
    assert actions(ssc.plan(sts(partition=1), pods, "r1", "r2", now)) == [("update", 1)]
    pods[1] = spod(1, rev="r2")
    assert actions(ssc.plan(sts(partition=1), pods, "r1", "r2", now)) == []
    assert actions(ssc.plan(sts(strategy="OnDelete"), [spod(i) for i in range(3)], "r1", "r2", now)) == []
    # Made again: below the partition at the current revision, above at the update revision.
    assert ssc.revision_for_new_pod(sts(partition=1), 0) == "current"
    assert ssc.revision_for_new_pod(sts(partition=1), 1) == "update"
    status = ssc.plan(sts(partition=1), pods, "r1", "r2", now).status
    assert status == {
        "replicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "currentReplicas": 1,
        "updatedReplicas": 2,
    }


def test_start_ordinal_and_names():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    assert actions(ssc.plan(sts(ordinals={"start": 5}), [], "r1", "r1", now)) == [("create", 5)]
    assert ssc.parent_and_ordinal("web-12") == ("web", 12)
    assert ssc.parent_and_ordinal("web-01") == ("", -1)
    assert ssc.parent_and_ordinal("web") == ("", -1)
    claims = [{"metadata": {"name": "data", "labels": {"t": "1"}}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
    s = sts(volumeClaimTemplates=claims)
    pod = ssc.new_pod(s, type("K", (), {"group": "apps", "version": "v1", "kind": "StatefulSet"})(), TEMPLATE, 2, "r1")
    assert pod["metadata"]["name"] == "web-2" and pod["spec"]["hostname"] == "web-2"
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-2"}} in pod["spec"]["volumes"]
    (claim,) = ssc.new_claims(s, 2)
    assert claim["metadata"]["name"] == "data-web-2" and claim["metadata"]["labels"] == {"t": "1", "app": "web"}


def test_claim_retention_owner_references():
    claim: dict = {"metadata": {"name": "data-web-4"}}
    keep = sts(replicas=2)
    assert ssc.claim_owner_changes(keep, claim, spod(4)) is None
    scaled = sts(replicas=2, persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"})
    refs = ssc.claim_owner_changes(scaled, claim, spod(4))
    assert refs == [{"apiVersion": "v1", "kind": "Pod", "name": "web-4", "uid": "p4"}]
    assert ssc.claim_owner_changes(scaled, claim, spod(1)) is None
    deleted = sts(replicas=2, persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Retain"})
    refs = ssc.claim_owner_changes(deleted, {"metadata": {}}, spod(1))
    assert refs == [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "su"}]
    assert ssc.claim_owner_changes(keep, {"metadata": {"ownerReferences": refs}}, spod(1)) == []
    # A claim still owned by the pod that went is not taken by the new pod of that name.
    owned = {"metadata": {"ownerReferences": [{"kind": "Pod", "name": "web-4", "uid": "old"}]}}
    assert ssc.stale_claim(scaled, owned, "web-4") and not ssc.stale_claim(keep, owned, "web-4")
    assert not ssc.stale_claim(scaled, owned, "web-4", "old")


def test_pending_pods_get_their_missing_claims():
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    claims = [{"metadata": {"name": "data"}, "spec": {}}]
    steps = actions(ssc.plan(sts(volumeClaimTemplates=claims), [spod(0, phase="Pending")], "r1", "r1", now))
    assert steps == [("claims", 0)]


# --- validation ------------------------------------------------------------------------------


def fields(errs):
    return [(e.field, e.detail) for e in errs]


def test_daemonset_validation():
    spec = ds()["spec"]
    spec.update(selector={"matchLabels": {"app": "d"}}, updateStrategy={"type": "OnDelete"})
    spec["template"]["spec"]["restartPolicy"] = "Always"
    assert validate_daemon_set_spec(spec) == []
    spec["selector"] = {"matchLabels": {"app": "other"}}
    assert ("spec.template.metadata.labels", "`selector` does not match template `labels`") in fields(
        validate_daemon_set_spec(spec)
    )
    spec["selector"] = {"matchLabels": {"app": "d"}}
    spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}
    assert fields(validate_daemon_set_spec(spec)) == [
        ("spec.updateStrategy.rollingUpdate.maxUnavailable", "cannot be 0 when maxSurge is 0")
    ]
    spec["updateStrategy"]["rollingUpdate"] = {"maxUnavailable": 1, "maxSurge": "10%"}
    assert fields(validate_daemon_set_spec(spec)) == [
        ("spec.updateStrategy.rollingUpdate.maxSurge", "may not be set when maxUnavailable is non-zero")
    ]
    spec["updateStrategy"]["rollingUpdate"] = {"maxUnavailable": "150%", "maxSurge": 0}
    assert fields(validate_daemon_set_spec(spec)) == [
        ("spec.updateStrategy.rollingUpdate.maxUnavailable", "must not be greater than 100%")
    ]
    # A string that is a number but no percentage ("5"); one that is neither reads as 0.
    spec["updateStrategy"]["rollingUpdate"] = {"maxUnavailable": "5", "maxSurge": 0}
    assert [e.message() for e in validate_daemon_set_spec(spec)] == [
        "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 5: a valid percent string must be a "
        "numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
    ]


def test_statefulset_validation():
    spec = sts()["spec"]
    spec["template"] = {
        **TEMPLATE,
        "metadata": {"labels": {"app": "web"}},
        "spec": {**TEMPLATE["spec"], "restartPolicy": "Always"},
    }
    assert validate_stateful_set_spec(spec) == []
    spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = 1
    assert [e.field for e in validate_stateful_set_spec(spec)] == ["spec.updateStrategy.rollingUpdate.maxUnavailable"]
    del spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    spec["replicas"] = -1
    spec["template"]["spec"]["restartPolicy"] = "Never"
    assert fields(validate_stateful_set_spec(spec)) == [
        ("spec.replicas", "must be greater than or equal to 0"),
        ("spec.template.spec.restartPolicy", 'supported values: "Always"'),
    ]


def test_controller_revision_validation():
    strategy = strategy_for(REGISTRY.by_resource("apps", "v1", "controllerrevisions"))
    rev = {"metadata": {"name": "r-1", "namespace": "n"}, "revision": -1}
    assert fields(strategy.validate(rev)) == [
        ("data", "data is mandatory"),
        ("revision", "must be greater than or equal to 0"),
    ]
    old = {**rev, "revision": 1, "data": {"a": 1}}
    new = {**old, "data": {"a": 2}}
    assert fields(strategy.validate_update(new, old)) == [("data", "field is immutable")]


def test_status_writes_are_validated():
    ds_strategy = strategy_for(REGISTRY.by_resource("apps", "v1", "daemonsets"))
    old = {"metadata": {"name": "d", "namespace": "n"}, "spec": {}, "status": {"collisionCount": 2}}
    new = {**old, "status": {"numberReady": -1, "collisionCount": 1}}
    assert fields(ds_strategy.validate_update(new, old)) == [
        ("status.numberReady", "must be greater than or equal to 0"),
        ("status.collisionCount", "cannot be decremented"),
    ]
    sts_strategy = strategy_for(REGISTRY.by_resource("apps", "v1", "statefulsets"))
    old = {"metadata": {"name": "s", "namespace": "n"}, "spec": {}, "status": {"replicas": 0}}
    new = {**old, "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 2}}
    assert fields(sts_strategy.validate_update(new, old)) == [
        ("status.availableReplicas", "cannot be greater than status.readyReplicas")
    ]


def test_daemonset_selector_is_immutable():
    strategy = strategy_for(REGISTRY.by_resource("apps", "v1", "daemonsets"))
    spec = ds()["spec"]
    spec.update(selector={"matchLabels": {"app": "d"}}, updateStrategy={"type": "OnDelete"})
    spec["template"]["spec"]["restartPolicy"] = "Always"
    old = {"metadata": {"name": "d", "namespace": "n"}, "spec": spec}
    new_spec = {**spec, "selector": {"matchLabels": {"app": "d"}, "matchExpressions": []}}
    new = {"metadata": {"name": "d", "namespace": "n"}, "spec": new_spec}
    assert fields(strategy.validate_update(new, old)) == [("spec.selector", "field is immutable")]
