"""Write-path gaps closed after the schema work: YAML alias budgets, upstream's
PatchOptions rules, Go-quoted field names in field-validation warnings, strategic
merge patches of a Scale, the bundled controllers' field managers, and the cap on
Update entries in managedFields ("ancient-changes")."""

from __future__ import annotations

import time

import pytest
import yaml
from aiohttp.test_utils import make_mocked_request

from apiserver_min.api import codec, names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schemas import schema_for
from apiserver_min.authz.authorizer import AlwaysAllow, Union
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers.garbagecollector import GarbageCollector
from apiserver_min.registry import fieldvalidation
from apiserver_min.registry import managedfields as mf
from apiserver_min.registry.patching import apply_patch
from apiserver_min.registry.scale import ScaleREST
from apiserver_min.server import handlers
from apiserver_min.storage.cacher import Entry

# --- 1. YAML alias expansion -------------------------------------------------------------------


def laughs(levels: int, width: int = 10) -> bytes:
    """The "billion laughs" document: each level is ``width`` aliases of the previous."""
    lines = ["a: &a [" + ",".join(["x"] * width) + "]"]
    prev = "a"
    for name in "bcdefghijklmnop"[:levels]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]")
        prev = name
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("ctype", ["application/yaml", names.MEDIA_APPLY_PATCH])
def test_alias_bombs_are_refused_with_a_clear_400(ctype):
    for levels in (3, 8, 15):  # 10^4 .. 10^16 nodes once expanded
        started = time.monotonic()
        with pytest.raises(st.ApiError) as info:
            codec.decode_object_body(laughs(levels), ctype)
        assert time.monotonic() - started < 5  # refused before anything is expanded
        assert info.value.code == 400 and info.value.reason == "BadRequest"
        assert info.value.message.startswith("error decoding YAML body: document contains excessive aliasing")
    # decode_body (DeleteOptions, reviews, TokenRequest bodies) refuses them too.
    with pytest.raises(st.ApiError, match="excessive aliasing"):
        codec.decode_body(laughs(8), "application/yaml")


def test_go_yaml_budget_allows_small_expansions():
    # 2 levels expand to ~1,300 nodes, 98.5% through aliases: within go-yaml's 99%.
    obj = codec.decode_object_body(laughs(2), "application/yaml").obj
    assert len(obj["c"]) == 10 and obj["c"][0] == obj["b"] and obj["c"][0][0] == ["x"] * 10
    assert codec._allowed_alias_ratio(1000) == 0.99
    assert codec._allowed_alias_ratio(4_000_000) == pytest.approx(0.10)
    assert codec._allowed_alias_ratio(2_200_000) == pytest.approx(0.545)


def test_merge_key_bombs_are_refused():
    doc = "a0: &a0 {k: 1}\n" + "".join(f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}]}}\n" for i in range(1, 40))
    with pytest.raises(st.ApiError, match="excessive aliasing"):
        codec.decode_object_body(doc.encode(), "application/yaml")


@pytest.mark.parametrize("body", [b"a: &a [*a]\n", b"a: &a {b: [1, {c: *a}]}\n"])
def test_self_referencing_anchors_are_refused(body):
    with pytest.raises(st.ApiError) as info:
        codec.decode_object_body(body, "application/yaml")
    assert info.value.code == 400 and "an alias refers to an anchor whose value contains it" in info.value.message


def test_deeply_nested_yaml_is_a_400_not_a_crash():
    body = ("[" * 5000 + "]" * 5000).encode()
    for decode in (
        lambda: codec.decode_object_body(body, "application/yaml"),
        lambda: codec.decode_body(body, "application/yaml"),
    ):
        with pytest.raises(st.ApiError) as info:
            decode()
        assert info.value.code == 400 and "nested too deeply" in info.value.message


MANIFEST = b"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: &labels {app: web, tier: front}
spec:
  selector: {matchLabels: *labels}
  template:
    metadata: {labels: *labels}
    spec:
      containers:
      - &c {name: a, image: busybox, env: [{name: X, value: "1"}]}
      - <<: *c
        name: b
"""


def test_manifests_with_a_few_anchors_decode_into_independent_copies():
    obj = codec.decode_object_body(MANIFEST, "application/yaml").obj
    labels = obj["metadata"]["labels"]
    assert obj["spec"]["selector"]["matchLabels"] == labels == obj["spec"]["template"]["metadata"]["labels"]
    # Each alias is its own value, as upstream's YAML-to-JSON conversion makes it: a write
    # to the object's metadata (uid, defaults) must not show up in the pod template.
    assert obj["spec"]["selector"]["matchLabels"] is not labels
    assert obj["spec"]["template"]["metadata"]["labels"] is not labels
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["a", "b"]
    assert containers[0]["env"] == containers[1]["env"] and containers[0]["env"] is not containers[1]["env"]
    # (the merge's override of "name" is a duplicate key to strict decoding, as upstream's
    # strict YAML reader finds it "already set in map")
    assert [keys for _, keys in codec.decode_object_body(MANIFEST, "application/yaml").duplicates.values()] == [
        ["name"]
    ]
    plain = codec.decode_body(
        MANIFEST.replace(b"      - <<: *c\n        name: b\n", b"      - *c\n"), "application/yaml"
    )
    assert plain["spec"]["template"]["spec"]["containers"][0] is not plain["spec"]["template"]["spec"]["containers"][1]
    assert plain["metadata"]["labels"] is not plain["spec"]["selector"]["matchLabels"]


def test_duplicate_keys_are_tracked_in_every_copy_of_an_alias():
    decoded = codec.decode_object_body(b"a: &m {k: 1, k: 2}\nb: *m\n", "application/yaml")
    assert decoded.obj == {"a": {"k": 2}, "b": {"k": 2}} and decoded.obj["a"] is not decoded.obj["b"]
    tracked = sorted((id(d), keys) for d, keys in decoded.duplicates.values())
    assert [keys for _, keys in tracked] == [["k"], ["k"]]
    assert {i for i, _ in tracked} == {id(decoded.obj["a"]), id(decoded.obj["b"])}
    assert fieldvalidation.duplicate_fields(b"a: &m {k: 1, k: 2}\nb: *m\n", yaml=True) == [
        'duplicate field "a.k"',
        'duplicate field "b.k"',
    ]


def test_load_yaml_budget_is_opt_in_for_callers_with_their_own():
    # The node agent's manifest decoding walks the values with a budget of its own.
    shared = codec.load_yaml(laughs(8))
    assert shared["i"][0] is shared["h"]
    with pytest.raises(codec.DecodeError, match="excessive aliasing"):
        codec.load_yaml(laughs(8), limit_aliases=True)


def test_check_aliasing_counts_like_go_yaml():
    def compose(text: str) -> yaml.Node:
        loader = codec._NoDupLoader(text)
        loader.limit_aliases = False
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()

    # 300 aliases of a 300-node value: 90,000 of ~90,600 decodes come from aliases
    # (99.3%), over go-yaml's 99%; 1,000 plain nodes before them bring it to 98.2%.
    value = "[" + ",".join(["v"] * 299) + "]"
    aliases = "r: [" + ",".join(["*v"] * 300) + "]\n"
    with pytest.raises(yaml.YAMLError, match="excessive aliasing"):
        codec.check_aliasing(compose("v: &v " + value + "\n" + aliases))
    codec.check_aliasing(compose("p: [" + ",".join(["x"] * 1000) + "]\nv: &v " + value + "\n" + aliases))
    # The check runs as the decoder goes (go-yaml's): plain nodes after the aliases come too late.
    with pytest.raises(yaml.YAMLError, match="excessive aliasing"):
        codec.check_aliasing(compose("v: &v " + value + "\n" + aliases + "p: [" + ",".join(["x"] * 1000) + "]\n"))


# --- 2. PatchOptions, UpdateOptions and CreateOptions ---------------------------------------------


def req(query: str = "", headers: dict | None = None):
    return make_mocked_request(
        "PATCH",
        "/api/v1/namespaces/ns/configmaps/x" + (f"?{query}" if query else ""),
        headers=headers if headers is not None else {"User-Agent": "kubectl/v1.32.0 (linux/amd64)"},
    )


def invalid(exc: st.ApiError) -> tuple[int, str, str, list]:
    doc = exc.to_status()
    return exc.code, doc["reason"], doc["message"], doc["details"]["causes"]


@pytest.mark.parametrize("ctype", [names.MEDIA_MERGE_PATCH, names.MEDIA_JSON_PATCH, names.MEDIA_STRATEGIC_MERGE_PATCH])
@pytest.mark.parametrize("value", ["true", "false", "", "0", "maybe"])
def test_force_is_forbidden_for_non_apply_patches(ctype, value):
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req(f"force={value}"), "PatchOptions", ctype)
    code, reason, message, causes = invalid(info.value)
    assert (code, reason) == (422, "Invalid")
    assert message == (
        f'PatchOptions.{names.META_GROUP} "" is invalid: force: Forbidden: may not be specified for non-apply patch'
    )
    assert causes == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: may not be specified for non-apply patch",
            "field": "force",
        }
    ]
    details = info.value.to_status()["details"]
    assert details["kind"] == "PatchOptions" and details["group"] == names.META_GROUP and "name" not in details


def test_apply_needs_a_field_manager_and_reads_force_as_upstream():
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("force=true"), "PatchOptions", names.MEDIA_APPLY_PATCH)
    assert invalid(info.value)[:3] == (
        422,
        "Invalid",
        f'PatchOptions.{names.META_GROUP} "" is invalid: fieldManager: Required value: is required for apply patch',
    )
    for value, want in (
        ("true", True),
        ("True", True),
        ("maybe", True),
        ("", True),
        ("false", False),
        ("FALSE", False),
        ("0", False),
    ):
        wp = handlers.WriteParams.parse(req(f"fieldManager=me&force={value}"), "PatchOptions", names.MEDIA_APPLY_PATCH)
        assert (wp.field_manager, wp.force) == ("me", want), value
    assert handlers.WriteParams.parse(req("fieldManager=me"), "PatchOptions", names.MEDIA_APPLY_PATCH).force is False


@pytest.mark.parametrize("kind", ["CreateOptions", "UpdateOptions", "PatchOptions"])
def test_field_manager_length_and_characters(kind):
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("fieldManager=" + "m" * 129), kind, names.MEDIA_MERGE_PATCH)
    assert invalid(info.value)[:3] == (
        422,
        "Invalid",
        f'{kind}.{names.META_GROUP} "" is invalid: fieldManager: Too long: must have at most 128 bytes',
    )
    # 128 bytes is fine, counted in UTF-8 (64 two-byte characters are 128 bytes, 65 are not).
    assert handlers.WriteParams.parse(req("fieldManager=" + "é" * 64), kind, names.MEDIA_MERGE_PATCH)
    with pytest.raises(st.ApiError, match="Too long"):
        handlers.WriteParams.parse(req("fieldManager=" + "é" * 65), kind, names.MEDIA_MERGE_PATCH)
    # Non-printable characters, each named with its byte position (Go's %#U).
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("fieldManager=%C3%A9%01b%0A"), kind, names.MEDIA_MERGE_PATCH)
    code, _, message, causes = invalid(info.value)
    assert code == 422
    assert message == (
        f'{kind}.{names.META_GROUP} "" is invalid: ['
        'fieldManager: Invalid value: "é\\x01b\\n": invalid character U+0001 (at position 2), '
        'fieldManager: Invalid value: "é\\x01b\\n": invalid character U+000A (at position 4)]'
    )
    assert [c["reason"] for c in causes] == ["FieldValueInvalid", "FieldValueInvalid"]


def test_several_option_problems_are_reported_together():
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("force=1&fieldManager=" + "x" * 200), "PatchOptions", names.MEDIA_MERGE_PATCH)
    assert invalid(info.value)[2] == (
        f'PatchOptions.{names.META_GROUP} "" is invalid: ['
        "force: Forbidden: may not be specified for non-apply patch, "
        "fieldManager: Too long: must have at most 128 bytes]"
    )


def test_omitted_manager_is_the_user_agent_product():
    wp = handlers.WriteParams.parse(req(), "PatchOptions", names.MEDIA_MERGE_PATCH)
    assert (wp.field_manager, wp.force) == ("kubectl", False)
    assert handlers.WriteParams.parse(req(headers={})).field_manager == "unknown"


# --- 3. Go-quoted field names in field-validation warnings ---------------------------------------


def test_unknown_and_duplicate_fields_are_quoted_as_go_quotes_them():
    schema = schema_for("", "v1", "ConfigMap")
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", 'we"ird': 1},
        "back\\slash": 1,
        "new\nline": 1,
        "bell\x07": 1,
        "é": 1,
        "nb\u00a0sp": 1,
        "ctl\x85": 1,
    }
    warnings = fieldvalidation.validate_object(obj, schema, "Warn", kind="ConfigMap", version="v1")
    assert warnings == [
        'unknown field "metadata.we\\"ird"',
        'unknown field "back\\\\slash"',
        'unknown field "new\\nline"',
        'unknown field "bell\\a"',
        'unknown field "é"',
        'unknown field "nb\\u00a0sp"',
        'unknown field "ctl\\u0085"',
    ]
    # The header value escapes the quotes and backslashes once more (upstream's
    # makeQuotedString), so the quoted name survives intact.
    assert fieldvalidation.warning_header(warnings[0]) == '299 - "unknown field \\"metadata.we\\\\\\"ird\\""'
    assert fieldvalidation.warning_header(warnings[1]) == '299 - "unknown field \\"back\\\\\\\\slash\\""'
    assert fieldvalidation.duplicate_fields(b'{"data": {"a\\"b": "1", "a\\"b": "2"}}') == [
        'duplicate field "data.a\\"b"'
    ]


def test_strict_errors_quote_the_same_way():
    schema = schema_for("", "v1", "ConfigMap")
    with pytest.raises(st.ApiError) as info:
        fieldvalidation.validate_object(
            {"metadata": {"name": "x"}, 'a"b': 1}, schema, "Strict", kind="ConfigMap", version="v1"
        )
    assert info.value.message.endswith('strict decoding error: unknown field "a\\"b"')


def test_repeated_warnings_are_sent_once():
    request = req()
    request[handlers.FIELD_WARNINGS_KEY] = ['unknown field "x"', 'unknown field "y"', 'unknown field "x"']
    resp = handlers.ResourceHandlers._with_warnings(request, handlers.web.Response())
    assert resp.headers.getall("Warning") == ['299 - "unknown field \\"x\\""', '299 - "unknown field \\"y\\""']


# --- 4. strategic merge patch of a Scale ---------------------------------------------------------


def test_scale_accepts_strategic_merge_patches():
    assert names.MEDIA_STRATEGIC_MERGE_PATCH in ScaleREST.patch_types
    scale = {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "selector": "app=d"},
    }
    out = apply_patch(
        names.MEDIA_STRATEGIC_MERGE_PATCH,
        scale,
        {"spec": {"replicas": 4}},
        schema_for(names.AUTOSCALING_GROUP, "v1", "Scale"),
    )
    assert out["spec"] == {"replicas": 4} and out["status"] == scale["status"]
    out = apply_patch(
        names.MEDIA_STRATEGIC_MERGE_PATCH,
        scale,
        {"spec": {"$patch": "replace"}},
        schema_for(names.AUTOSCALING_GROUP, "v1", "Scale"),
    )
    assert out["spec"] == {}


# --- 5. the bundled controllers' field managers --------------------------------------------------


class RecordingStore:
    def __init__(self):
        self.calls: list[dict] = []

    async def update(self, kind, namespace, name, compute, user, **kw):
        self.calls.append(kw)
        return {}, b"", False


def recording_client(store: RecordingStore) -> LocalClient:
    return LocalClient(
        store,
        Union([AlwaysAllow()]),
        controller_user("generic-garbage-collector"),
        names.CONTROLLER_MANAGER_FIELD_MANAGER,
    )


def test_manager_names_are_distinct_orch_spellings():
    assert names.CONTROLLER_MANAGER_FIELD_MANAGER == "orch-controller-manager"
    assert names.SCHEDULER_FIELD_MANAGER == "orch-scheduler"


async def test_garbage_collector_and_namespace_controller_writes_name_their_manager():
    gc = GarbageCollector.__new__(GarbageCollector)
    store = RecordingStore()
    gc.client = recording_client(store)
    entry = Entry("/configmaps/ns/x", b"{}", 1, "ns", "x", {}, {})
    await gc._remove_finalizer(REGISTRY.by_resource("", "v1", "configmaps"), entry, names.FINALIZER_ORPHAN)
    assert store.calls == [{"subresource": "", "field_manager": names.CONTROLLER_MANAGER_FIELD_MANAGER}]


# --- 6. the cap on Update entries ----------------------------------------------------------------


def entry(
    manager: str, second: int | None, fields: dict, *, op: str = mf.UPDATE, version: str = "v1", sub: str = ""
) -> mf.ManagerEntry:
    stamp = None if second is None else f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}Z"
    return mf.ManagerEntry(manager, op, version, stamp, fields, sub)


def field(name: str) -> dict:
    return {"f:data": {f"f:{name}": {}}}


def test_eleven_update_managers_merge_the_two_oldest_into_ancient_changes():
    entries = [entry(f"m{i:02d}", 10 + i, field(f"k{i}")) for i in range(11)]
    entries.append(entry("applier", 1, field("applied"), op=mf.APPLY))
    out = mf.cap_update_managers(entries)
    updates = [e for e in out if e.operation == mf.UPDATE]
    assert len(updates) == 10
    bucket = next(e for e in out if e.manager == mf.ANCIENT_CHANGES)
    assert bucket.fields == {"f:data": {"f:k0": {}, "f:k1": {}}}
    assert bucket.time == "2024-01-01T00:00:11Z"  # the last merged entry's (m01)
    assert bucket.operation == mf.UPDATE and bucket.api_version == "v1" and not bucket.subresource
    assert {e.manager for e in updates} == {mf.ANCIENT_CHANGES} | {f"m{i:02d}" for i in range(2, 11)}
    assert any(e.manager == "applier" for e in out)  # Apply entries are never counted or merged


def test_ten_update_managers_and_any_number_of_appliers_are_left_alone():
    entries = [entry(f"m{i}", i, field(f"k{i}")) for i in range(10)]
    entries += [entry(f"a{i}", i, field(f"a{i}"), op=mf.APPLY) for i in range(20)]
    entries.append(entry("empty", 0, {}))  # owns nothing: dropped when stored, not counted
    assert mf.cap_update_managers(list(entries)) == entries


def test_buckets_are_per_api_version_and_an_existing_bucket_is_reused():
    entries = [
        entry(mf.ANCIENT_CHANGES, 5, field("old")),
        entry("old-v1", 6, field("o1")),
        entry("b-v2", 1, field("b2"), version="v2"),
        entry("c-v2", 2, field("c2"), version="v2"),
    ]
    entries += [entry(f"m{i}", 100 + i, field(f"k{i}")) for i in range(9)]
    out = mf.cap_update_managers(entries)  # 13 updaters: three must go
    byname = {(e.manager, e.api_version): e for e in out}
    assert len(out) == 10
    # v2: b-v2 (oldest of its version) becomes the v2 bucket with c-v2 merged in.
    assert byname[(mf.ANCIENT_CHANGES, "v2")].fields == {"f:data": {"f:b2": {}, "f:c2": {}}}
    # v1: the existing bucket is the first of v1 and takes old-v1, then m0.
    assert byname[(mf.ANCIENT_CHANGES, "v1")].fields == {"f:data": {"f:old": {}, "f:o1": {}, "f:k0": {}}}
    assert byname[(mf.ANCIENT_CHANGES, "v1")].time == "2024-01-01T00:01:40Z"


def test_ties_in_age_go_by_the_manager_identifier_and_subresources_join_the_bucket():
    # Same second: the order is upstream's manager identifier (JSON), so "a" < "a-b" ('"' < '-').
    entries = [entry("a-b", 7, field("ab")), entry("a", 7, field("a"), sub="status")]
    entries += [entry(f"z{i}", 50 + i, field(f"z{i}")) for i in range(9)]
    assert (
        mf.manager_identifier(entries[1]) == '{"manager":"a","operation":"Update","apiVersion":"v1",'
        '"subresource":"status"}'
    )
    assert (
        mf.manager_identifier(entry("<&>", 0, {}, op=mf.APPLY))
        == '{"manager":"\\u003c\\u0026\\u003e","operation":"Apply"}'
    )
    out = mf.cap_update_managers(entries)
    bucket = next(e for e in out if e.manager == mf.ANCIENT_CHANGES)
    assert bucket.fields == {"f:data": {"f:a": {}, "f:ab": {}}} and bucket.subresource == ""
    # No time counts as the epoch: the oldest of all.
    entries = [entry("late", 30, field("l")), entry("never", None, field("n"))]
    entries += [entry(f"m{i}", 40 + i, field(f"m{i}")) for i in range(9)]
    bucket = next(e for e in mf.cap_update_managers(entries) if e.manager == mf.ANCIENT_CHANGES)
    assert bucket.fields == {"f:data": {"f:l": {}, "f:n": {}}}


def test_record_update_caps_the_entries_it_stores():
    kind = REGISTRY.by_resource("", "v1", "configmaps")
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}, "data": {}}
    mf.record_update(kind, None, obj, "m00")
    for i in range(1, 12):
        old = obj
        new = {**old, "metadata": dict(old["metadata"]), "data": {**old["data"], f"k{i}": "v"}}
        mf.record_update(kind, old, new, f"m{i:02d}")
        obj = new
    entries = obj["metadata"]["managedFields"]
    assert len(entries) == 10
    assert [e["manager"] for e in entries].count(mf.ANCIENT_CHANGES) == 1
    owned = {k for e in entries for k in e["fieldsV1"].get("f:data", {})}
    assert owned == {"."} | {f"f:k{i}" for i in range(1, 12)}  # m00 created the (empty) data map
