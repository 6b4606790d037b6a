"""Field sets, the structured merge and field ownership (server-side apply), on the
kind schemas, without a server."""

from __future__ import annotations

import copy

import pytest

from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schemas import schema_for
from apiserver_min.registry import fieldpath as fp
from apiserver_min.registry import managedfields as mf

DEPLOY = REGISTRY.by_resource("apps", "v1", "deployments")
PODS = REGISTRY.by_resource("", "v1", "pods")
CM = REGISTRY.by_resource("", "v1", "configmaps")
POD_SCHEMA = schema_for("", "v1", "Pod")


def deployment(replicas=None, labels=None, containers=None) -> dict:
    spec: dict = {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": containers or [{"name": "c", "image": "img:1"}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    md: dict = {"name": "d", "namespace": "ns"}
    if labels is not None:
        md["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md, "spec": spec}


def entries(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def stored(obj: dict) -> dict:
    """What the store would hand the next write: a copy with a resourceVersion."""
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = "7"
    return out


# --- field sets ---------------------------------------------------------------------------


def test_field_set_uses_keys_for_map_lists_values_for_sets_and_dot_for_items():
    pod = {
        "metadata": {"labels": {"a": "1"}, "finalizers": ["x/y"]},
        "spec": {"containers": [{"name": "c", "image": "i", "args": ["a", "b"], "ports": [{"containerPort": 80}]}]},
    }
    s = fp.field_set(pod, POD_SCHEMA)
    c = s["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert "." in c and c["f:image"] == {} and c["f:args"] == {}  # an atomic list is one leaf
    # A missing list-map key takes its declared default (protocol TCP).
    assert "." in c["f:ports"]['k:{"containerPort":80,"protocol":"TCP"}']
    assert s["f:metadata"]["f:finalizers"] == {'v:"x/y"': {}}
    assert s["f:metadata"]["f:labels"] == {"f:a": {}}
    assert "." not in s["f:spec"]  # a non-empty struct field is not itself a member


def test_map_list_item_without_key_is_an_error():
    with pytest.raises(fp.FieldPathError, match="omits key field 'name'"):
        fp.field_set({"spec": {"containers": [{"image": "i"}]}}, POD_SCHEMA)


def test_set_algebra_keeps_trees_normalised_and_inputs_intact():
    a = {"f:a": {}, "f:b": {".": {}, "f:c": {}}}
    b = {"f:b": {"f:c": {}}, "f:d": {}}
    a0, b0 = copy.deepcopy(a), copy.deepcopy(b)
    assert fp.union(a, b) == {"f:a": {}, "f:b": {".": {}, "f:c": {}}, "f:d": {}}
    assert fp.difference(a, b) == {"f:a": {}, "f:b": {}}
    assert fp.intersection(a, b) == {"f:b": {"f:c": {}}}
    assert fp.difference(b, b) == {}
    assert (a, b) == (a0, b0)
    assert list(fp.iter_paths({"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}}})) == [
        ("f:spec", "f:containers", 'k:{"name":"c"}'),
        ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image"),
    ]
    assert fp.format_path(("f:spec", "f:containers", 'k:{"name":"c"}', "f:image")) == '.spec.containers[name="c"].image'
    assert fp.format_path(("f:metadata", "f:finalizers", 'v:"a"')) == '.metadata.finalizers[="a"]'


def test_validate_tree_rejects_bad_elements():
    fp.validate_tree({"f:a": {".": {}, 'k:{"x":1}': {}}})
    for bad in ([], {"x:a": {}}, {"f:a": []}, {"k:notjson": {}}):
        with pytest.raises(ValueError):
            fp.validate_tree(bad)


# --- merge ----------------------------------------------------------------------------------


def test_merge_by_list_type():
    live = {
        "spec": {
            "containers": [{"name": "a", "image": "1", "args": ["x"]}, {"name": "b", "image": "2"}],
            "tolerations": [{"key": "t1"}],
        },
        "metadata": {"finalizers": ["f1", "f2"]},
    }
    cfg = {
        "spec": {
            "containers": [{"name": "b", "image": "3"}, {"name": "c", "image": "4"}],
            "tolerations": [{"key": "t2"}],
        },
        "metadata": {"finalizers": ["f3", "f1"]},
    }
    out = fp.merge(live, cfg, POD_SCHEMA)
    assert [c["name"] for c in out["spec"]["containers"]] == ["a", "b", "c"]
    assert out["spec"]["containers"][1] == {"name": "b", "image": "3"}
    assert out["spec"]["tolerations"] == [{"key": "t2"}]  # atomic: replaced
    assert sorted(out["metadata"]["finalizers"]) == ["f1", "f2", "f3"]  # set: union
    assert live["spec"]["containers"][1]["image"] == "2"  # inputs untouched


def test_merge_rejects_duplicate_keys_in_the_configuration():
    with pytest.raises(fp.FieldPathError, match="duplicate entries"):
        fp.merge({"spec": {"containers": []}}, {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}, POD_SCHEMA)
    with pytest.raises(fp.FieldPathError, match="duplicate entries"):
        fp.field_set({"metadata": {"finalizers": ["a", "a"]}}, POD_SCHEMA)


# --- apply ----------------------------------------------------------------------------------


def test_apply_creates_with_one_apply_entry_without_system_metadata():
    obj = mf.apply(DEPLOY, None, deployment(replicas=2), "alice")
    ((key, fields),) = entries(obj).items()
    assert key == ("alice", "Apply")
    assert "f:metadata" not in fields and "f:apiVersion" not in fields
    assert fields["f:spec"]["f:replicas"] == {}
    e = obj["metadata"]["managedFields"][0]
    assert e["apiVersion"] == "apps/v1" and e["fieldsType"] == "FieldsV1" and e["time"].endswith("Z")


def test_conflict_then_force_moves_ownership():
    live = stored(mf.apply(DEPLOY, None, deployment(replicas=2), "alice"))
    with pytest.raises(st.ApiError) as ei:
        mf.apply(DEPLOY, live, deployment(replicas=3), "bob")
    err = ei.value
    assert err.code == 409 and err.reason == "Conflict"
    assert err.message == 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas'
    assert err.details["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "type": "FieldManagerConflict",
            "message": 'conflict with "alice"',
            "field": ".spec.replicas",
        }
    ]
    out = mf.apply(DEPLOY, live, deployment(replicas=3), "bob", force=True)
    assert out["spec"]["replicas"] == 3
    e = entries(out)
    assert "f:replicas" not in e[("alice", "Apply")]["f:spec"]
    assert "f:replicas" in e[("bob", "Apply")]["f:spec"]

    # Equal values are shared: both own the container image.
    def img(f):
        return f["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}']["f:image"]

    assert img(e[("alice", "Apply")]) == {} and img(e[("bob", "Apply")]) == {}


def test_conflict_message_lists_several_fields_by_manager():
    live = stored(mf.apply(DEPLOY, None, deployment(replicas=2, labels={"a": "1"}), "alice"))
    with pytest.raises(st.ApiError) as ei:
        mf.apply(DEPLOY, live, deployment(replicas=3, labels={"a": "2"}), "bob")
    assert ei.value.message == (
        'Apply failed with 2 conflicts: conflicts with "alice":\n- .metadata.labels.a\n- .spec.replicas'
    )


def test_update_manager_is_named_with_its_version_in_conflicts():
    live = stored(mf.apply(DEPLOY, None, deployment(replicas=2), "alice"))
    new = stored(live)
    new["spec"]["replicas"] = 5
    mf.record_update(DEPLOY, live, new, "kubectl-client-side-apply")
    with pytest.raises(st.ApiError) as ei:
        mf.apply(DEPLOY, stored(new), deployment(replicas=2), "alice")
    assert ei.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas'
    )


def test_dropping_fields_and_items_removes_only_unshared_ones():
    two = [{"name": "c", "image": "img:1"}, {"name": "side", "image": "s:1"}]
    live = stored(mf.apply(DEPLOY, None, deployment(labels={"a": "1", "b": "2"}, containers=two), "alice"))
    live = stored(mf.apply(DEPLOY, live, deployment(labels={"b": "2"}), "bob"))  # shares label b
    out = mf.apply(DEPLOY, live, deployment(containers=[{"name": "c", "image": "img:1"}]), "alice")
    assert out["metadata"]["labels"] == {"b": "2"}  # a removed; b kept (bob owns it)
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["c"]
    assert "f:labels" not in entries(out)[("alice", "Apply")].get("f:metadata", {})


def test_managers_owning_nothing_disappear():
    live = stored(
        mf.apply(
            CM, None, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "1"}}, "temp"
        )
    )
    new = stored(live)
    new["data"]["k"] = "2"
    mf.record_update(CM, live, new, "editor")
    assert list(entries(new)) == [("editor", "Update")]


def test_record_update_create_owns_defaults_but_not_status_or_system_fields():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "uid": "u", "labels": {"run": "p"}},
        "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "Always"}]},
        "status": {"phase": "Pending"},
    }
    mf.record_update(PODS, None, pod, "kubectl-create")
    ((key, f),) = entries(pod).items()
    assert key == ("kubectl-create", "Update")
    assert f["f:metadata"] == {"f:labels": {".": {}, "f:run": {}}}
    assert "." not in f["f:spec"]
    assert f["f:spec"]["f:containers"]['k:{"name":"c"}']["f:imagePullPolicy"] == {}
    assert "f:status" not in f


def test_record_update_status_subresource_owns_status_only():
    pod = stored(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }
    )
    new = stored(pod)
    new["status"] = {"phase": "Running"}
    new["metadata"]["managedFields"] = [
        {
            "manager": "forged",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {}},
        }
    ]
    mf.record_update(PODS, pod, new, "agent", "status")
    (e,) = new["metadata"]["managedFields"]  # sent managedFields are ignored on a sub-resource
    assert e["manager"] == "agent" and e["subresource"] == "status"
    assert e["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}


def test_managed_fields_reset_rules():
    live = stored(mf.apply(DEPLOY, None, deployment(replicas=2), "alice"))
    kept = live["metadata"]["managedFields"]
    for sent in ([], None):  # an empty list or no list keeps the stored ownership
        new = stored(live)
        new["metadata"]["managedFields"] = sent
        mf.record_update(DEPLOY, live, new, "x")
        assert new["metadata"]["managedFields"] == kept
    new = stored(live)
    new["metadata"]["managedFields"] = [{}]  # reset
    mf.record_update(DEPLOY, live, new, "x")
    assert "managedFields" not in new["metadata"]
    new = stored(live)
    new["metadata"]["managedFields"] = [{}]
    new["spec"]["replicas"] = 4  # reset plus a change: the writer owns its change only
    mf.record_update(DEPLOY, live, new, "x")
    assert entries(new) == {("x", "Update"): {"f:spec": {"f:replicas": {}}}}
    new = stored(live)
    new["metadata"]["managedFields"] = [{"manager": "m", "operation": "Bogus"}]  # does not decode
    mf.record_update(DEPLOY, live, new, "x")
    assert new["metadata"]["managedFields"] == kept


def test_apply_body_checks():
    with pytest.raises(st.ApiError, match="managedFields must be nil"):
        mf.parse_config(CM, b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"managedFields":[]}}', "n", "c")
    with pytest.raises(st.ApiError, match="Kind"):
        mf.parse_config(CM, b"apiVersion: v1\nmetadata: {name: c}\n", "n", "c")
    with pytest.raises(st.ApiError, match="does not match"):
        mf.parse_config(CM, b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n", "n", "c")
    with pytest.raises(st.ApiError, match="Incorrect version"):
        mf.parse_config(CM, b"apiVersion: v2\nkind: ConfigMap\nmetadata: {name: c}\n", "n", "c")
    cfg = mf.parse_config(CM, b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n", "n", "c")
    assert cfg["data"] == {"a": "b"}


def test_manager_from_user_agent():
    assert mf.manager_from_user_agent("kubectl/v1.27.3 (linux/amd64) kubernetes/abc") == "kubectl"
    assert mf.manager_from_user_agent("a\x01b") == "ab"
    assert len(mf.manager_from_user_agent("x" * 300)) == 128


@pytest.mark.parametrize(
    "item",
    ["a", "", "with space", "ä", 'q"uote', "back\\slash", "tab\there", "\x7f", "line\u2028sep", "x" * 300, 7, True],
)
def test_set_item_keys_are_the_items_compact_json(item):
    # The path element of a set item (the quick spelling of plain strings included) is
    # the item's compact JSON, as in the managedFields others wrote.
    assert fp._item_key(item, None, fp.LISTSET, ()) == "v:" + fp._canon(item)
