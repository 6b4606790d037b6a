"""Strategic merge patch: upstream's classic cases on a test schema shaped like
upstream's ``MergeItem``, and the cases kubectl produces on real kinds."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from apiserver_min.api.schema import Boolean, Field, Integer, List, Map, Opaque, String, Struct
from apiserver_min.api.schemas import schema_for
from apiserver_min.registry.strategicpatch import PatchApplyError, PatchError, strategic_merge_patch

STR = String()

# --- a schema like upstream's MergeItem test type ---------------------------------------------

LEAF = Struct(
    "test.Leaf",
    [
        Field("name", STR, 1),
        Field("value", STR, 2),
        Field("other", STR, 3),
    ],
)

ITEM = Struct(
    "test.Item",
    [
        Field("name", STR, 1),
        Field("value", STR, 2),
        Field("other", STR, 3),
        Field("mergingList", List(LEAF, patch_strategy="merge", patch_merge_key="name"), 4),
        Field("nonMergingList", List(LEAF), 5),
        Field("mergingIntList", List(Integer(64), patch_strategy="merge"), 6),
        Field("simpleMap", Map(STR), 7),
    ],
)

RETAIN_KEYS_ITEM = Struct(
    "test.RetainKeysItem",
    [
        Field("name", STR, 1),
        Field("value", STR, 2),
        Field("other", STR, 3),
        Field("simpleMap", Map(STR), 4),
        Field("mergingIntList", List(Integer(64), patch_strategy="merge"), 5),
        Field("mergingList", List(LEAF, patch_strategy="merge", patch_merge_key="name"), 6),
    ],
)

MERGE_ITEM = Struct(
    "test.MergeItem",
    [
        Field("name", STR, 1),
        Field("value", STR, 2),
        Field("other", STR, 3),
        Field("mergingList", List(ITEM, patch_strategy="merge", patch_merge_key="name"), 4),
        Field("nonMergingList", List(ITEM), 5),
        Field("mergingIntList", List(Integer(64), patch_strategy="merge"), 6),
        Field("nonMergingIntList", List(Integer(64)), 7),
        Field("simpleMap", Map(STR), 8),
        Field("replacingItem", Opaque(), 9, patch_strategy="replace"),
        Field("replacingMap", ITEM, 10, patch_strategy="replace"),
        Field("retainKeysMap", RETAIN_KEYS_ITEM, 11, patch_strategy="retainKeys"),
        Field("retainKeysMergingList", List(ITEM, patch_strategy="merge,retainKeys", patch_merge_key="name"), 12),
        Field("opaque", Opaque(), 13),
        Field("flag", Boolean(), 14),
    ],
)


def smp(original, patch, schema=MERGE_ITEM):
    return strategic_merge_patch(original, patch, schema)


# Upstream's customStrategicMergePatchTestCaseData and createStrategicMergePatchTestCaseData
# (the patch application half): (description, original, patch, expected).
UPSTREAM_CASES = [
    (
        "unique scalars when merging lists",
        {"mergingIntList": [1, 2]},
        {"mergingIntList": [2, 3]},
        {"mergingIntList": [1, 2, 3]},
    ),
    (
        "delete map from nested map",
        {"simpleMap": {"key1": "1", "key2": "1"}},
        {"simpleMap": {"$patch": "delete"}},
        {"simpleMap": {}},
    ),
    (
        "delete all items from merging list",
        {"mergingList": [{"name": "1"}, {"name": "2"}]},
        {"mergingList": [{"$patch": "replace"}]},
        {"mergingList": []},
    ),
    ("merge empty merging lists", {"mergingList": []}, {"mergingList": []}, {"mergingList": []}),
    ("delete all keys from map", {"name": "1", "value": "1"}, {"$patch": "replace"}, {}),
    (
        "add key and delete all keys from map",
        {"name": "1", "value": "1"},
        {"other": "a", "$patch": "replace"},
        {"other": "a"},
    ),
    (
        "delete all duplicate entries in a merging list",
        {"mergingList": [{"name": "1"}, {"name": "1"}, {"name": "2", "value": "a"}, {"name": "3"}, {"name": "3"}]},
        {"mergingList": [{"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}]},
        {"mergingList": [{"name": "2", "value": "a"}]},
    ),
    (
        "retainKeys map can add a field when no retainKeys directive present",
        {"retainKeysMap": {"name": "foo"}},
        {"retainKeysMap": {"value": "bar"}},
        {"retainKeysMap": {"name": "foo", "value": "bar"}},
    ),
    (
        "retainKeys map can change a field when no retainKeys directive present",
        {"retainKeysMap": {"name": "foo", "value": "a"}},
        {"retainKeysMap": {"value": "b"}},
        {"retainKeysMap": {"name": "foo", "value": "b"}},
    ),
    (
        "retainKeys map can delete a field when no retainKeys directive present",
        {"retainKeysMap": {"name": "foo", "value": "a"}},
        {"retainKeysMap": {"value": None}},
        {"retainKeysMap": {"name": "foo"}},
    ),
    (
        "retainKeys map merge an empty map",
        {"retainKeysMap": {"name": "foo", "value": "a"}},
        {"retainKeysMap": {}},
        {"retainKeysMap": {"name": "foo", "value": "a"}},
    ),
    (
        "retainKeys list can add a field when no retainKeys directive present",
        {"retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}]},
        {"retainKeysMergingList": [{"name": "foo", "value": "a"}]},
        {"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]},
    ),
    (
        "retainKeys list can delete a field when no retainKeys directive present",
        {"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]},
        {"retainKeysMergingList": [{"name": "foo", "value": None}]},
        {"retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}]},
    ),
    (
        "preserve the order from the patch in a merging list",
        {"mergingList": [{"name": "1"}, {"name": "2", "value": "b"}, {"name": "3"}]},
        {"mergingList": [{"name": "3", "value": "c"}, {"name": "1", "value": "a"}, {"name": "2", "other": "x"}]},
        {
            "mergingList": [
                {"name": "3", "value": "c"},
                {"name": "1", "value": "a"},
                {"name": "2", "value": "b", "other": "x"},
            ]
        },
    ),
    (
        "preserve the order from the patch in a merging list 2",
        {"mergingList": [{"name": "1"}, {"name": "2", "value": "b"}, {"name": "3"}]},
        {"mergingList": [{"name": "3", "value": "c"}, {"name": "1", "value": "a"}]},
        {"mergingList": [{"name": "2", "value": "b"}, {"name": "3", "value": "c"}, {"name": "1", "value": "a"}]},
    ),
    (
        "preserve the order from the patch in a merging int list",
        {"mergingIntList": [1, 2, 3]},
        {"mergingIntList": [3, 1, 2]},
        {"mergingIntList": [3, 1, 2]},
    ),
    (
        "preserve the order from the patch in a merging int list 2",
        {"mergingIntList": [1, 2, 3]},
        {"mergingIntList": [3, 1]},
        {"mergingIntList": [2, 3, 1]},
    ),
    (
        "$setElementOrder contains item that is not present in the list to be merged",
        {"mergingList": [{"name": "1"}, {"name": "3"}]},
        {
            "$setElementOrder/mergingList": [{"name": "3"}, {"name": "2"}, {"name": "1"}],
            "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}],
        },
        {"mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]},
    ),
    (
        "$setElementOrder contains item that is not present in the int list to be merged",
        {"mergingIntList": [1, 3]},
        {"$setElementOrder/mergingIntList": [3, 2, 1]},
        {"mergingIntList": [3, 1]},
    ),
    ("add field to map", {"name": "1", "other": "a"}, {"value": "1"}, {"name": "1", "value": "1", "other": "a"}),
    (
        "replace list of scalars that is not merged",
        {"nonMergingIntList": [1, 2]},
        {"nonMergingIntList": [2, 3]},
        {"nonMergingIntList": [2, 3]},
    ),
    (
        "replace list of maps that is not merged",
        {"nonMergingList": [{"name": "1", "value": "a"}, {"name": "2"}]},
        {"nonMergingList": [{"name": "1", "value": "b"}]},
        {"nonMergingList": [{"name": "1", "value": "b"}]},
    ),
    (
        "delete field from a nested merging list item",
        {"mergingList": [{"name": "1", "value": "1", "other": "a"}, {"name": "2", "value": "2"}]},
        {"mergingList": [{"name": "1", "value": None}]},
        {"mergingList": [{"name": "1", "other": "a"}, {"name": "2", "value": "2"}]},
    ),
    (
        "merge a merging list nested in a merging list item",
        {"mergingList": [{"name": "1", "mergingList": [{"name": "x", "value": "1"}, {"name": "y"}]}]},
        {"mergingList": [{"name": "1", "mergingList": [{"name": "y", "value": "2"}]}]},
        {"mergingList": [{"name": "1", "mergingList": [{"name": "x", "value": "1"}, {"name": "y", "value": "2"}]}]},
    ),
    (
        "replace a map whose field says replace",
        {"replacingMap": {"name": "1", "value": "a"}},
        {"replacingMap": {"other": "b"}},
        {"replacingMap": {"other": "b"}},
    ),
    ("delete a map by null", {"simpleMap": {"a": "1"}, "name": "n"}, {"simpleMap": None}, {"name": "n"}),
    ("null for an absent key is ignored", {"name": "n"}, {"value": None}, {"name": "n"}),
    (
        "new items of a merging list go before the server-only items",
        {"mergingList": [{"name": "1"}, {"name": "2"}]},
        {"mergingList": [{"name": "3"}]},
        {"mergingList": [{"name": "3"}, {"name": "1"}, {"name": "2"}]},
    ),
]


@pytest.mark.parametrize("desc,original,patch,expected", UPSTREAM_CASES, ids=[c[0] for c in UPSTREAM_CASES])
def test_upstream_cases(desc, original, patch, expected):
    assert smp(original, patch) == expected


def test_set_element_order_mismatch_is_a_bad_patch():
    with pytest.raises(PatchError, match="does not match"):
        smp(
            {"mergingList": [{"name": "1"}, {"name": "3"}, {"name": "2"}]},
            {
                "$setElementOrder/mergingList": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
                "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}],
            },
        )
    with pytest.raises(PatchError, match="does not match"):
        smp({"mergingIntList": [1, 3, 2]}, {"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]})


def test_missing_merge_key_is_a_bad_patch():
    with pytest.raises(PatchError, match="merge key 'name'"):
        smp({"mergingList": [{"name": "1", "value": "a"}]}, {"mergingList": [{"value": "b"}]})
    with pytest.raises(PatchError, match="merge key 'name'"):
        smp({"mergingList": [{"name": "1"}]}, {"mergingList": [{"$patch": "delete", "value": "b"}]})


def test_retain_keys_directive():
    original = {"retainKeysMap": {"name": "foo", "value": "a", "other": "x"}}
    got = smp(original, {"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "b"}})
    assert got == {"retainKeysMap": {"name": "foo", "value": "b"}}
    # A key the patch sets must be retained.
    with pytest.raises(PatchError, match="retainKeys"):
        smp(original, {"retainKeysMap": {"$retainKeys": ["name"], "value": "b"}})
    with pytest.raises(PatchError, match="retainKeys"):
        smp(original, {"retainKeysMap": {"$retainKeys": "name"}})
    # In the items of a merge,retainKeys list.
    got = smp(
        {"retainKeysMergingList": [{"name": "a", "value": "1", "other": "2"}, {"name": "b", "value": "3"}]},
        {"retainKeysMergingList": [{"name": "a", "$retainKeys": ["name", "other"], "other": "9"}]},
    )
    assert got == {"retainKeysMergingList": [{"name": "a", "other": "9"}, {"name": "b", "value": "3"}]}


def test_delete_from_primitive_list():
    got = smp({"mergingIntList": [1, 2, 3, 2]}, {"$deleteFromPrimitiveList/mergingIntList": [2, 4]})
    assert got == {"mergingIntList": [1, 3]}
    # Absent list: nothing to delete, nothing created.
    assert smp({"name": "x"}, {"$deleteFromPrimitiveList/mergingIntList": [2]}) == {"name": "x"}
    # Added and deleted in one patch (kubectl sends both with the order list).
    got = smp(
        {"mergingIntList": [1, 2]},
        {
            "$setElementOrder/mergingIntList": [2, 5],
            "mergingIntList": [5],
            "$deleteFromPrimitiveList/mergingIntList": [1],
        },
    )
    assert got == {"mergingIntList": [2, 5]}
    with pytest.raises(PatchError):
        smp({"mergingIntList": [1]}, {"$deleteFromPrimitiveList/mergingIntList": 1})
    with pytest.raises(PatchError, match="not a merged list"):
        smp({"nonMergingIntList": [1]}, {"$deleteFromPrimitiveList/nonMergingIntList": [1]})


def test_bad_directives_are_bad_patches():
    with pytest.raises(PatchError, match="unknown \\$patch directive"):
        smp({"simpleMap": {"a": "b"}}, {"simpleMap": {"$patch": "explode"}})
    with pytest.raises(PatchError, match="unknown \\$patch directive"):
        smp({"mergingList": [{"name": "a"}]}, {"mergingList": [{"name": "a", "$patch": "explode"}]})
    with pytest.raises(PatchError, match="unknown strategic merge patch directive"):
        smp({}, {"$frobnicate": 1})
    with pytest.raises(PatchError, match="JSON object"):
        smp({}, ["not", "a", "map"])  # type: ignore[arg-type]
    with pytest.raises(PatchError, match="lists of lists"):
        smp({"mergingIntList": [1]}, {"mergingIntList": [[1]]})
    with pytest.raises(PatchError, match="mixes"):
        smp({"mergingIntList": [1]}, {"mergingIntList": [1, {"a": 1}]})


def test_patch_that_does_not_fit_the_object_cannot_apply():
    # The object holds scalars where the patch merges objects by key.
    with pytest.raises(PatchApplyError):
        smp({"mergingList": ["a", "b"]}, {"mergingList": [{"name": "a"}]})


def test_patch_merge_directive_is_the_default():
    assert smp({"simpleMap": {"a": "1"}}, {"simpleMap": {"$patch": "merge", "b": "2"}}) == {
        "simpleMap": {"a": "1", "b": "2"}
    }
    assert smp({"mergingList": [{"name": "a"}]}, {"mergingList": [{"$patch": "merge"}, {"name": "b"}]}) == {
        "mergingList": [{"name": "b"}, {"name": "a"}]
    }


def test_opaque_and_unknown_values_use_json_merge_semantics():
    original = {"opaque": {"a": [1, 2], "b": {"c": 1, "d": 2}}, "unknownField": {"x": 1, "y": [1]}}
    patch = {
        "opaque": {"a": [3], "b": {"c": None, "$patch": "delete"}},
        "unknownField": {"x": None, "y": [2], "z": {"n": None, "m": 1}},
    }
    got = smp(original, patch)
    # Inside opaque data "$patch" is data, lists are replaced, nulls delete.
    assert got["opaque"] == {"a": [3], "b": {"d": 2, "$patch": "delete"}}
    assert got["unknownField"] == {"y": [2], "z": {"m": 1}}
    # The replace strategy on an opaque field replaces it.
    assert smp({"replacingItem": {"a": 1}}, {"replacingItem": {"b": 2}}) == {"replacingItem": {"b": 2}}


def test_new_values_are_stored_without_nulls_or_directives():
    got = smp(
        {},
        {
            "simpleMap": {"a": "1", "b": None},
            "mergingList": [{"name": "x", "value": None}, {"$patch": "delete", "name": "gone"}],
            "retainKeysMap": {"$retainKeys": ["name"], "name": "n"},
        },
    )
    assert got == {"simpleMap": {"a": "1"}, "mergingList": [{"name": "x"}], "retainKeysMap": {"name": "n"}}
    # A value replacing one of another shape is cleaned the same way.
    assert smp({"simpleMap": "oops"}, {"simpleMap": {"a": None, "b": "2"}}) == {"simpleMap": {"b": "2"}}


def test_inputs_are_not_modified():
    original = {"mergingList": [{"name": "1", "value": "a"}], "simpleMap": {"k": "v"}}
    patch = {
        "$setElementOrder/mergingList": [{"name": "2"}, {"name": "1"}],
        "mergingList": [{"name": "2"}, {"name": "1", "value": None}],
        "simpleMap": {"k": None},
    }
    o, p = copy.deepcopy(original), copy.deepcopy(patch)
    got = smp(original, patch)
    assert original == o and patch == p
    assert got == {"mergingList": [{"name": "2"}, {"name": "1"}], "simpleMap": {}}
    got["mergingList"][1]["value"] = "changed"
    assert original["mergingList"][0]["value"] == "a"


def test_scalars_of_different_types_are_different_values():
    # Upstream compares decoded JSON with Go's interface equality: 1 and 1.0 and true differ.
    assert smp({"mergingIntList": [1, True]}, {"mergingIntList": [1.0, 1]}) == {"mergingIntList": [1.0, 1, True]}


# --- real kinds: what kubectl sends ----------------------------------------------------------

POD = schema_for("", "v1", "Pod")
DEPLOYMENT = schema_for("apps", "v1", "Deployment")


def pod(**spec_extra):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "labels": {"app": "web", "tier": "front"},
            "finalizers": ["a.orch.io/x", "b.orch.io/y"],
            "resourceVersion": "7",
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                },
                {"name": "sidecar", "image": "busybox:1", "command": ["sleep", "1d"]},
            ],
            **spec_extra,
        },
    }


def test_pod_container_image_by_name():
    got = strategic_merge_patch(pod(), {"spec": {"containers": [{"name": "sidecar", "image": "busybox:2"}]}}, POD)
    web, side = got["spec"]["containers"]
    assert web == pod()["spec"]["containers"][0]
    assert side == {"name": "sidecar", "image": "busybox:2", "command": ["sleep", "1d"]}


def test_pod_ports_by_container_port_and_env_by_name():
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
            "containers": [
                {
                    "name": "web",
                    "$setElementOrder/ports": [{"containerPort": 80}, {"containerPort": 8080}],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}, {"$patch": "delete", "containerPort": 443}],
                    "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
                    "env": [{"name": "A", "value": "one"}],
                }
            ],
        }
    }
    got = strategic_merge_patch(pod(), patch, POD)
    web = got["spec"]["containers"][0]
    assert web["ports"] == [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 8080, "protocol": "TCP"}]
    assert web["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "one"}]
    assert web["imagePullPolicy"] == "IfNotPresent"  # server-side fields kept
    assert [c["name"] for c in got["spec"]["containers"]] == ["web", "sidecar"]


def test_pod_delete_container_and_replace_list():
    got = strategic_merge_patch(pod(), {"spec": {"containers": [{"$patch": "delete", "name": "sidecar"}]}}, POD)
    assert [c["name"] for c in got["spec"]["containers"]] == ["web"]
    got = strategic_merge_patch(
        pod(), {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}, POD
    )
    assert got["spec"]["containers"] == [{"name": "only", "image": "x"}]


def test_labels_null_and_replace_on_a_map():
    got = strategic_merge_patch(pod(), {"metadata": {"labels": {"tier": None, "new": "1"}}}, POD)
    assert got["metadata"]["labels"] == {"app": "web", "new": "1"}
    got = strategic_merge_patch(pod(), {"metadata": {"labels": {"$patch": "replace", "only": "me"}}}, POD)
    assert got["metadata"]["labels"] == {"only": "me"}
    got = strategic_merge_patch(pod(), {"metadata": {"labels": {"$patch": "delete"}}}, POD)
    assert got["metadata"]["labels"] == {}


def test_finalizers_delete_from_primitive_list():
    patch = {
        "metadata": {
            "$deleteFromPrimitiveList/finalizers": ["a.orch.io/x"],
            "$setElementOrder/finalizers": ["b.orch.io/y", "c.orch.io/z"],
            "finalizers": ["c.orch.io/z"],
        }
    }
    got = strategic_merge_patch(pod(), patch, POD)
    assert got["metadata"]["finalizers"] == ["b.orch.io/y", "c.orch.io/z"]
    # Finalizers merge as a set.
    got = strategic_merge_patch(pod(), {"metadata": {"finalizers": ["b.orch.io/y", "d.orch.io/w"]}}, POD)
    assert got["metadata"]["finalizers"] == ["a.orch.io/x", "b.orch.io/y", "d.orch.io/w"]


def test_volumes_retain_keys_switch_source():
    original = pod(volumes=[{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}])
    patch = {
        "spec": {
            "$setElementOrder/volumes": [{"name": "data"}, {"name": "cfg"}],
            "volumes": [
                {"name": "data", "$retainKeys": ["hostPath", "name"], "hostPath": {"path": "/srv"}, "emptyDir": None}
            ],
        }
    }
    got = strategic_merge_patch(original, patch, POD)
    assert got["spec"]["volumes"] == [
        {"name": "data", "hostPath": {"path": "/srv"}},
        {"name": "cfg", "configMap": {"name": "c"}},
    ]


def test_deployment_strategy_retain_keys():
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 2,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": None}}}
    got = strategic_merge_patch(dep, patch, DEPLOYMENT)
    assert got["spec"]["strategy"] == {"type": "Recreate"}
    assert got["spec"]["template"] == dep["spec"]["template"]
    # Ports inside the template merge by containerPort there too.
    dep["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 1}, {"containerPort": 2}]
    patch = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "ports": [{"$patch": "delete", "containerPort": 1}]}]}}
        }
    }
    got = strategic_merge_patch(dep, patch, DEPLOYMENT)
    assert got["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 2}]


def test_status_conditions_merge_by_type():
    original = pod()
    original["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
    }
    got = strategic_merge_patch(original, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, POD)
    assert got["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


# --- random patches: a result or a clean patch error, never anything else --------------------


_KEYS = hst.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        "labels",
        "finalizers",
        "containers",
        "name",
        "image",
        "ports",
        "containerPort",
        "env",
        "value",
        "volumes",
        "emptyDir",
        "$patch",
        "$retainKeys",
        "$setElementOrder/containers",
        "$setElementOrder/ports",
        "$deleteFromPrimitiveList/finalizers",
        "conditions",
        "type",
        "unknown",
    ]
)
_SCALARS = hst.one_of(
    hst.none(),
    hst.booleans(),
    hst.integers(-3, 3),
    hst.sampled_from(["a", "b", "replace", "delete", "merge", "web", "sidecar"]),
)
_JSON = hst.recursive(
    _SCALARS,
    lambda inner: hst.one_of(hst.lists(inner, max_size=4), hst.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(hst.dictionaries(_KEYS, _JSON, max_size=4))
def test_random_patches_give_a_result_or_a_patch_error(patch):
    original = pod(volumes=[{"name": "v", "emptyDir": {}}])
    original["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    before = copy.deepcopy(original)
    try:
        got = strategic_merge_patch(original, patch, POD)
    except (PatchError, PatchApplyError) as exc:
        assert str(exc)
    else:
        assert isinstance(got, dict)
    assert original == before


def test_deep_nesting_is_a_patch_error():
    deep: dict = {}
    cur = deep
    for _ in range(3000):
        cur["unknown"] = {}
        cur = cur["unknown"]
    with pytest.raises(PatchError, match="too deeply"):
        strategic_merge_patch({"unknown": {}}, {"spec": deep}, POD)
