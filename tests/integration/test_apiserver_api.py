"""The API contract of orch-apiserver over raw HTTPS, against the real binary.

Every test talks to a real server process (tests/apiserver_fixtures.py). Where
the storage backend matters, tests run on both SQLite and etcd (the ``server``
fixture). Each test works in its own namespace (the ``ns`` fixture), so the
module-scoped servers can be shared.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from tests.apiserver_fixtures import ROOT_CA_CONFIGMAP, ApiServerProcess, create_namespace, without_root_ca
from tests.components import free_port
from tests.helpers import require_binary, uniq, wait_for

# --- helpers -----------------------------------------------------------------------------

TABLE_K8S = "application/json;as=Table;v=v1;g=meta.k8s.io"
TABLE_ORCH = "application/json;as=Table;v=v1;g=meta.orch.io"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


def assert_status(doc, code: int, reason: str | None = None):
    """An error body is a v1 Status with kind/apiVersion/status/reason/code/message."""
    assert isinstance(doc, dict), doc
    assert doc.get("kind") == "Status", doc
    assert doc.get("apiVersion") == "v1", doc
    assert doc.get("status") == "Failure", doc
    assert doc.get("code") == code, doc
    assert doc.get("message"), doc
    if reason is not None:
        assert doc.get("reason") == reason, doc
    return doc


def cm_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


def create_cm(server, ns, name, labels=None, data=None, **md):
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **({"labels": labels} if labels else {}), **md},
        "data": data or {"k": "v"},
    }
    _, obj = server.json("POST", cm_path(ns), body, expect=201)
    return obj


def pod_body(name, node=None, **spec):
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def exists(server, path) -> bool:
    status, _, _ = server.request("GET", path)
    assert status in (200, 404), status
    return status == 200


def gone(server, path):
    return lambda: not exists(server, path)


def list_names(server, path) -> list[str]:
    """The names listed at PATH, less the root CA ConfigMap every namespace holds (so a
    ConfigMap list shows what the test made; tests about that object read it directly)."""
    _, doc = server.json("GET", path, expect=200)
    return without_root_ca([i["metadata"]["name"] for i in doc["items"]])


def own_items(doc) -> list[dict]:
    """A list's items without the root CA ConfigMap."""
    return [i for i in doc["items"] if i["metadata"]["name"] != ROOT_CA_CONFIGMAP]


def own_events(events) -> list[tuple[str, str]]:
    """(type, name) of watch events, without the root CA ConfigMap's."""
    return [
        (e["type"], e["object"]["metadata"]["name"])
        for e in events
        if e["object"]["metadata"].get("name") != ROOT_CA_CONFIGMAP
    ]


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "etcd"])
def server(request):
    """The module's SQLite server, then its etcd server."""
    return request.getfixturevalue("apiserver" if request.param == "sqlite" else "apiserver_etcd")


@pytest.fixture
def ns(server):
    name = uniq("ns")
    create_namespace(server, name)
    return name


@pytest.fixture
def sq_ns(apiserver):
    """A fresh namespace on the SQLite server (for tests where the backend does not matter)."""
    name = uniq("ns")
    create_namespace(apiserver, name)
    return name


@pytest.fixture(scope="module")
def apiserver_watchlist(tmp_path_factory):
    """A SQLite server with the WatchList feature gate (streaming lists) and batch/v1 disabled."""
    server = ApiServerProcess(
        tmp_path_factory.mktemp("apiserver-watchlist"),
        free_port(),
        extra_args=("--feature-gates", "WatchList=true", "--runtime-config", "batch/v1=false"),
    )
    with server:
        yield server


# --- create / get / update ---------------------------------------------------------------


def test_create_sets_system_metadata(server, ns):
    status, obj = server.json("POST", cm_path(ns), {"metadata": {"generateName": "gen-"}, "data": {"a": "1"}})
    assert status == 201, obj
    md = obj["metadata"]
    assert md["name"].startswith("gen-") and len(md["name"]) > len("gen-")
    assert md["generateName"] == "gen-"
    assert md["namespace"] == ns
    assert md["uid"] and md["creationTimestamp"] and md["resourceVersion"]
    assert md["generation"] == 1
    assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1"
    # Two objects from the same generateName get different names.
    _, second = server.json("POST", cm_path(ns), {"metadata": {"generateName": "gen-"}}, expect=201)
    assert second["metadata"]["name"] != md["name"]
    assert second["metadata"]["uid"] != md["uid"]

    _, got = server.json("GET", cm_path(ns, md["name"]), expect=200)
    assert got["metadata"]["uid"] == md["uid"]
    assert got["metadata"]["resourceVersion"] == md["resourceVersion"]
    assert got["data"] == {"a": "1"}


def test_create_existing_is_409_already_exists(server, ns):
    create_cm(server, ns, "dup")
    status, doc = server.json("POST", cm_path(ns), {"metadata": {"name": "dup"}})
    assert status == 409
    assert_status(doc, 409, "AlreadyExists")
    assert doc["details"]["name"] == "dup"


def test_get_missing_is_404_status(server, ns):
    status, doc = server.json("GET", cm_path(ns, "nope"))
    assert status == 404
    assert_status(doc, 404, "NotFound")
    assert doc["details"]["name"] == "nope"
    assert doc["details"]["kind"] == "configmaps"


def test_update_optimistic_concurrency(server, ns):
    obj = create_cm(server, ns, "upd")
    rv1 = obj["metadata"]["resourceVersion"]
    obj["data"] = {"k": "v2"}
    _, new = server.json("PUT", cm_path(ns, "upd"), obj, expect=200)
    assert new["data"] == {"k": "v2"}
    assert new["metadata"]["resourceVersion"] != rv1
    assert new["metadata"]["uid"] == obj["metadata"]["uid"]

    # A stale resourceVersion is a 409 Conflict Status, and nothing changes.
    obj["data"] = {"k": "stale"}
    status, doc = server.json("PUT", cm_path(ns, "upd"), obj)
    assert status == 409
    assert_status(doc, 409, "Conflict")
    _, cur = server.json("GET", cm_path(ns, "upd"), expect=200)
    assert cur["data"] == {"k": "v2"}

    # Without a resourceVersion the PUT is unconditional.
    del obj["metadata"]["resourceVersion"]
    obj["data"] = {"k": "v3"}
    _, last = server.json("PUT", cm_path(ns, "upd"), obj, expect=200)
    assert last["data"] == {"k": "v3"}
    assert int(last["metadata"]["resourceVersion"]) > int(new["metadata"]["resourceVersion"])
    assert last["metadata"]["creationTimestamp"] == obj["metadata"]["creationTimestamp"]


def test_update_name_mismatch_is_400(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "mm")
    status, doc = apiserver.json("PUT", cm_path(sq_ns, "mm"), {"metadata": {"name": "other"}})
    assert status == 400
    assert_status(doc, 400, "BadRequest")


# --- patch -------------------------------------------------------------------------------


def test_merge_patch(server, ns):
    create_cm(server, ns, "mp", data={"a": "1", "b": "2"})
    _, obj = server.json(
        "PATCH",
        cm_path(ns, "mp"),
        {"data": {"a": None, "c": "3"}, "metadata": {"labels": {"x": "y"}}},
        headers=MERGE,
        expect=200,
    )
    assert obj["data"] == {"b": "2", "c": "3"}
    assert obj["metadata"]["labels"] == {"x": "y"}
    _, got = server.json("GET", cm_path(ns, "mp"), expect=200)
    assert got["data"] == {"b": "2", "c": "3"}


def test_merge_patch_with_stale_resource_version_conflicts(apiserver, sq_ns):
    obj = create_cm(apiserver, sq_ns, "mprv")
    rv = obj["metadata"]["resourceVersion"]
    apiserver.json("PATCH", cm_path(sq_ns, "mprv"), {"data": {"k": "2"}}, headers=MERGE, expect=200)
    status, doc = apiserver.json(
        "PATCH", cm_path(sq_ns, "mprv"), {"metadata": {"resourceVersion": rv}, "data": {"k": "3"}}, headers=MERGE
    )
    assert status == 409
    assert_status(doc, 409, "Conflict")


def test_json_patch(server, ns):
    create_cm(server, ns, "jp", data={"a": "1"})
    ops = [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "add", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "10"},
    ]
    _, obj = server.json("PATCH", cm_path(ns, "jp"), ops, headers=JSONPATCH, expect=200)
    assert obj["data"] == {"a": "10", "b": "2"}


def test_json_patch_failing_test_op_is_422(server, ns):
    create_cm(server, ns, "jpt", data={"a": "1"})
    ops = [{"op": "test", "path": "/data/a", "value": "nope"}, {"op": "replace", "path": "/data/a", "value": "changed"}]
    status, doc = server.json("PATCH", cm_path(ns, "jpt"), ops, headers=JSONPATCH)
    assert status == 422
    assert_status(doc, 422, "Invalid")
    _, got = server.json("GET", cm_path(ns, "jpt"), expect=200)
    assert got["data"] == {"a": "1"}


def test_patch_of_missing_object_is_404(apiserver, sq_ns):
    status, doc = apiserver.json("PATCH", cm_path(sq_ns, "missing"), {"data": {"a": "1"}}, headers=MERGE)
    assert status == 404
    assert_status(doc, 404, "NotFound")


@pytest.mark.parametrize(
    "ctype, query, body",
    [
        ("application/strategic-merge-patch+json", "", {"data": {"a": "1"}}),
        (
            "application/apply-patch+yaml",
            "?fieldManager=test",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "smp"}, "data": {"a": "1"}},
        ),
    ],
)
def test_strategic_merge_and_apply_patch(apiserver, sq_ns, ctype, query, body):
    create_cm(apiserver, sq_ns, "smp")
    status, doc = apiserver.json("PATCH", cm_path(sq_ns, "smp") + query, body, headers={"Content-Type": ctype})
    assert status == 200, doc
    assert doc["data"]["a"] == "1"
    # Apply needs a field manager (422 naming it, as upstream's PatchOptions validation).
    if "apply" in ctype:
        status, doc = apiserver.json("PATCH", cm_path(sq_ns, "smp"), body, headers={"Content-Type": ctype})
        assert status == 422 and "fieldManager" in doc["message"], doc


def test_unknown_patch_type_is_415(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "upt")
    status, doc = apiserver.json("PATCH", cm_path(sq_ns, "upt"), {"data": {}}, headers={"Content-Type": "text/plain"})
    assert status == 415
    assert_status(doc, 415)


# --- delete ------------------------------------------------------------------------------


def test_delete_returns_status_then_404(server, ns):
    obj = create_cm(server, ns, "del")
    status, doc = server.json("DELETE", cm_path(ns, "del"))
    assert status == 200, doc
    assert doc["kind"] == "Status" and doc["status"] == "Success", doc
    assert doc["details"]["name"] == "del"
    assert doc["details"]["uid"] == obj["metadata"]["uid"]
    assert not exists(server, cm_path(ns, "del"))
    status, doc = server.json("DELETE", cm_path(ns, "del"))
    assert status == 404
    assert_status(doc, 404, "NotFound")


def test_delete_with_preconditions(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "pre")
    status, doc = apiserver.json(
        "DELETE",
        cm_path(sq_ns, "pre"),
        {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}},
    )
    assert status == 409
    assert_status(doc, 409, "Conflict")
    assert exists(apiserver, cm_path(sq_ns, "pre"))


def test_deletecollection_with_label_selector(server, ns):
    for i in range(3):
        create_cm(server, ns, f"a{i}", labels={"grp": "one"})
    for i in range(2):
        create_cm(server, ns, f"b{i}", labels={"grp": "two"})
    status, doc = server.json("DELETE", cm_path(ns) + "?labelSelector=grp%3Done")
    assert status == 200, doc
    assert doc["kind"] == "Status" and doc["status"] == "Success", doc
    assert sorted(list_names(server, cm_path(ns))) == ["b0", "b1"]


# --- list, selectors ---------------------------------------------------------------------


def test_list_label_selectors(server, ns):
    create_cm(server, ns, "l1", labels={"app": "web", "tier": "fe"})
    create_cm(server, ns, "l2", labels={"app": "web", "tier": "be"})
    create_cm(server, ns, "l3", labels={"app": "db"})
    create_cm(server, ns, "l4")
    cases = {
        "app=web": ["l1", "l2"],
        "app!=web": ["l3", "l4"],
        "app in (web,db),tier notin (be)": ["l1", "l3"],
        "tier": ["l1", "l2"],
        "!tier": ["l3", "l4"],
    }
    for sel, want in cases.items():
        names = list_names(server, cm_path(ns) + "?labelSelector=" + quote(sel))
        assert sorted(names) == want, sel
    status, doc = server.json("GET", cm_path(ns) + "?labelSelector=" + quote("app in web"))
    assert status == 400
    assert_status(doc, 400, "BadRequest")


def test_list_is_a_typed_list(server, ns):
    create_cm(server, ns, "x1")
    _, doc = server.json("GET", cm_path(ns), expect=200)
    assert doc["kind"] == "ConfigMapList" and doc["apiVersion"] == "v1"
    assert doc["metadata"]["resourceVersion"]
    assert "continue" not in doc["metadata"] or doc["metadata"]["continue"] == ""
    assert "remainingItemCount" not in doc["metadata"]


def test_field_selectors_pods_and_secrets(server, ns):
    pods = f"/api/v1/namespaces/{ns}/pods"
    server.json("POST", pods, pod_body("p-bound", node="node-a"), expect=201)
    server.json("POST", pods, pod_body("p-free"), expect=201)
    _, p = server.json("GET", f"{pods}/p-bound", expect=200)
    assert p["status"]["phase"] == "Pending"
    p["status"]["phase"] = "Running"
    server.json("PUT", f"{pods}/p-bound/status", p, expect=200)

    def names(sel):
        return sorted(list_names(server, pods + "?fieldSelector=" + quote(sel)))

    assert names("spec.nodeName=node-a") == ["p-bound"]
    assert names("spec.nodeName=") == ["p-free"]
    assert names("status.phase=Running") == ["p-bound"]
    assert names("status.phase!=Running") == ["p-free"]
    assert names("metadata.name=p-free") == ["p-free"]
    assert names(f"metadata.namespace={ns}") == ["p-bound", "p-free"]
    # Across all namespaces too.
    all_pods = list_names(server, "/api/v1/pods?fieldSelector=" + quote("spec.nodeName=node-a"))
    assert "p-bound" in all_pods and "p-free" not in all_pods

    secrets = f"/api/v1/namespaces/{ns}/secrets"
    server.json(
        "POST", secrets, {"metadata": {"name": "s-opaque"}, "type": "Opaque", "stringData": {"a": "b"}}, expect=201
    )
    server.json(
        "POST",
        secrets,
        {"metadata": {"name": "s-other"}, "type": "example.com/other", "data": {"a": base64.b64encode(b"b").decode()}},
        expect=201,
    )
    assert sorted(list_names(server, secrets + "?fieldSelector=type%3DOpaque")) == ["s-opaque"]
    assert sorted(list_names(server, secrets + "?fieldSelector=type%3Dexample.com%2Fother")) == ["s-other"]

    status, doc = server.json("GET", pods + "?fieldSelector=" + quote("spec.unknownField=x"))
    assert status == 400
    assert_status(doc, 400, "BadRequest")
    status, doc = server.json("GET", cm_path(ns) + "?fieldSelector=" + quote("type=Opaque"))
    assert status == 400
    assert_status(doc, 400, "BadRequest")


# --- paging ------------------------------------------------------------------------------


def test_paging_is_one_consistent_snapshot(server, ns):
    for i in range(25):
        create_cm(server, ns, f"cm-{i:02d}")
    # The snapshot also holds the namespace's root CA ConfigMap, which sorts last:
    # 26 items, the last page 6.
    assert ROOT_CA_CONFIGMAP > "cm-99"
    base = cm_path(ns)
    _, p1 = server.json("GET", f"{base}?limit=10", expect=200)
    rv = p1["metadata"]["resourceVersion"]
    assert len(p1["items"]) == 10
    assert p1["metadata"]["continue"]
    assert p1["metadata"]["remainingItemCount"] == 16

    # Changes after the first page are not in later pages.
    create_cm(server, ns, "cm-99-late")
    server.json("DELETE", cm_path(ns, "cm-24"), expect=200)

    _, p2 = server.json("GET", f"{base}?limit=10&continue={quote(p1['metadata']['continue'])}", expect=200)
    assert p2["metadata"]["resourceVersion"] == rv
    assert len(p2["items"]) == 10
    assert p2["metadata"]["remainingItemCount"] == 6
    _, p3 = server.json("GET", f"{base}?limit=10&continue={quote(p2['metadata']['continue'])}", expect=200)
    assert p3["metadata"]["resourceVersion"] == rv
    assert len(p3["items"]) == 6
    assert not p3["metadata"].get("continue")
    assert "remainingItemCount" not in p3["metadata"]
    names = [i["metadata"]["name"] for p in (p1, p2, p3) for i in p["items"]]
    assert names == [f"cm-{i:02d}" for i in range(25)] + [ROOT_CA_CONFIGMAP]

    # A fresh list sees the changes.
    fresh = list_names(server, base)
    assert "cm-99-late" in fresh and "cm-24" not in fresh


def test_paging_with_label_selector_omits_remaining_count(server, ns):
    for i in range(6):
        create_cm(server, ns, f"s{i}", labels={"even": str(i % 2 == 0).lower()})
    base = cm_path(ns) + "?labelSelector=even%3Dtrue&limit=2"
    _, p1 = server.json("GET", base, expect=200)
    assert [i["metadata"]["name"] for i in p1["items"]] == ["s0", "s2"]
    assert p1["metadata"]["continue"]
    assert "remainingItemCount" not in p1["metadata"]
    _, p2 = server.json("GET", f"{base}&continue={quote(p1['metadata']['continue'])}", expect=200)
    assert [i["metadata"]["name"] for i in p2["items"]] == ["s4"]
    assert not p2["metadata"].get("continue")


def test_continue_with_resource_version_is_400(server, ns):
    for i in range(3):
        create_cm(server, ns, f"c{i}")
    _, p1 = server.json("GET", cm_path(ns) + "?limit=1", expect=200)
    token = quote(p1["metadata"]["continue"])
    rv = p1["metadata"]["resourceVersion"]
    status, doc = server.json("GET", cm_path(ns) + f"?limit=1&continue={token}&resourceVersion={rv}")
    assert status == 400
    assert_status(doc, 400, "BadRequest")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_tampered_continue_token_is_400(server, ns):
    for i in range(3):
        create_cm(server, ns, f"t{i}")
    _, p1 = server.json("GET", cm_path(ns) + "?limit=1", expect=200)
    good = p1["metadata"]["continue"]
    raw = base64.urlsafe_b64decode(good + "=" * (-len(good) % 4))
    tokens = [
        "not-a-token",
        "%%%",
        good[:-3],
        good + "AAAA",
        _b64(b"{not json"),
        _b64(b"[]"),
        _b64(b'{"v":"meta.orch.io/v1"}'),
        _b64(b'{"v":"meta.orch.io/v1","rv":"abc","start":"x\\u0000"}'),
        _b64(b'{"v":"meta.orch.io/v1","rv":-5,"start":"x\\u0000"}'),
        _b64(raw.replace(b'"rv":', b'"rv":1e309,"x":')),
        _b64(raw[::-1]),
        _b64(json.dumps({"v": "meta.orch.io/v1", "rv": 1, "start": "../secrets/x\x00"}).encode()),
        _b64(json.dumps({"v": "meta.orch.io/v1", "rv": 1, "start": "other-ns/x\x00"}).encode()),
        _b64(b"\xff\xfe\x00binary"),
    ]
    for token in tokens:
        status, doc = server.json("GET", cm_path(ns) + f"?limit=1&continue={quote(token)}")
        assert status == 400, (token, status, doc)
        assert_status(doc, 400, "BadRequest")


def test_resource_version_match_rules(server, ns):
    obj = create_cm(server, ns, "rvm", data={"v": "old"})
    old_rv = obj["metadata"]["resourceVersion"]
    obj["data"] = {"v": "new"}
    _, new = server.json("PUT", cm_path(ns, "rvm"), obj, expect=200)
    base = cm_path(ns)

    for q in (
        "resourceVersionMatch=Exact",
        "resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch=Exact&resourceVersion=0",
        "resourceVersionMatch=Bogus&resourceVersion=1",
    ):
        status, doc = server.json("GET", f"{base}?{q}")
        assert status == 400, q
        assert_status(doc, 400, "BadRequest")

    # Exact at an old version: the old state, collection RV = the requested one.
    _, doc = server.json("GET", f"{base}?resourceVersion={old_rv}&resourceVersionMatch=Exact", expect=200)
    assert doc["metadata"]["resourceVersion"] == old_rv
    assert [i["data"] for i in own_items(doc)] == [{"v": "old"}]
    # RV + limit without a match is Exact too.
    _, doc = server.json("GET", f"{base}?resourceVersion={old_rv}&limit=5", expect=200)
    assert [i["data"] for i in own_items(doc)] == [{"v": "old"}]
    # NotOlderThan: the collection version is at least the requested one.
    _, doc = server.json("GET", f"{base}?resourceVersion={old_rv}&resourceVersionMatch=NotOlderThan", expect=200)
    assert int(doc["metadata"]["resourceVersion"]) >= int(new["metadata"]["resourceVersion"])
    assert [i["data"] for i in own_items(doc)] == [{"v": "new"}]

    # Exact in the future: 504 "Too large resource version".
    future = int(new["metadata"]["resourceVersion"]) + 1_000_000
    t0 = time.monotonic()
    status, hdrs, body = server.request(
        "GET", f"{base}?resourceVersion={future}&resourceVersionMatch=Exact", timeout=15
    )
    doc = json.loads(body)
    assert status == 504, doc
    assert_status(doc, 504)
    assert "Too large resource version" in doc["message"]
    assert time.monotonic() - t0 < 10


def test_get_with_resource_version(server, ns):
    obj = create_cm(server, ns, "grv")
    _, got = server.json("GET", cm_path(ns, "grv") + "?resourceVersion=0", expect=200)
    assert got["metadata"]["uid"] == obj["metadata"]["uid"]
    _, got = server.json(
        "GET", cm_path(ns, "grv") + f"?resourceVersion={obj['metadata']['resourceVersion']}", expect=200
    )
    assert got["metadata"]["uid"] == obj["metadata"]["uid"]
    status, doc = server.json("GET", cm_path(ns, "grv") + "?resourceVersion=abc")
    assert status == 400
    assert_status(doc, 400, "BadRequest")


# --- watch -------------------------------------------------------------------------------


def test_watch_without_rv_sends_initial_added_then_changes(server, ns):
    create_cm(server, ns, "w1")
    create_cm(server, ns, "w2")
    with server.watch(cm_path(ns) + "?watch=true&timeoutSeconds=10") as w:
        assert w.status == 200
        assert w.headers["content-type"].startswith("application/json")
        assert w.headers.get("transfer-encoding") == "chunked"
        initial = w.events(3)  # w1, w2 and the namespace's root CA ConfigMap
        assert own_events(initial) == [("ADDED", "w1"), ("ADDED", "w2")]
        assert ("ADDED", ROOT_CA_CONFIGMAP) in [(e["type"], e["object"]["metadata"]["name"]) for e in initial]
        assert all(e["object"]["kind"] == "ConfigMap" for e in initial)
        create_cm(server, ns, "w3")
        server.json("PATCH", cm_path(ns, "w1"), {"data": {"k": "changed"}}, headers=MERGE, expect=200)
        server.json("DELETE", cm_path(ns, "w2"), expect=200)
        evs = w.events(3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [
        ("ADDED", "w3"),
        ("MODIFIED", "w1"),
        ("DELETED", "w2"),
    ]
    assert evs[1]["object"]["data"] == {"k": "changed"}
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    assert rvs == sorted(rvs)


def test_watch_from_rv_sends_only_later_events(server, ns):
    create_cm(server, ns, "before")
    _, lst = server.json("GET", cm_path(ns), expect=200)
    rv = lst["metadata"]["resourceVersion"]
    server.json("PATCH", cm_path(ns, "before"), {"data": {"k": "2"}}, headers=MERGE, expect=200)
    create_cm(server, ns, "after")
    with server.watch(cm_path(ns) + f"?watch=1&resourceVersion={rv}&timeoutSeconds=10") as w:
        evs = w.events(2)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [
            ("MODIFIED", "before"),
            ("ADDED", "after"),
        ]
        server.json("DELETE", cm_path(ns, "after"), expect=200)
        ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("DELETED", "after")


def test_watch_timeout_seconds_ends_the_stream(server, ns):
    t0 = time.monotonic()
    with server.watch(cm_path(ns) + "?watch=true&timeoutSeconds=1", timeout=10) as w:
        assert w.status == 200
        events = w.read_all()
    # Only the initial state (the namespace's root CA ConfigMap), then the end.
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", ROOT_CA_CONFIGMAP)]
    assert time.monotonic() - t0 < 5


def test_watch_label_selector_sees_object_leave_as_deleted(server, ns):
    obj = create_cm(server, ns, "sel", labels={"watched": "yes"})
    rv = obj["metadata"]["resourceVersion"]
    with server.watch(
        cm_path(ns) + f"?watch=true&labelSelector=watched%3Dyes&resourceVersion={rv}&timeoutSeconds=10"
    ) as w:
        create_cm(server, ns, "other", labels={"watched": "no"})
        create_cm(server, ns, "sel2", labels={"watched": "yes"})
        server.json("PATCH", cm_path(ns, "sel"), {"metadata": {"labels": {"watched": "no"}}}, headers=MERGE, expect=200)
        server.json(
            "PATCH", cm_path(ns, "other"), {"metadata": {"labels": {"watched": "yes"}}}, headers=MERGE, expect=200
        )
        evs = w.events(3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [
        ("ADDED", "sel2"),
        ("DELETED", "sel"),
        ("ADDED", "other"),
    ]


def test_watch_field_selector_metadata_name(server, ns):
    create_cm(server, ns, "fs-a")
    with server.watch(cm_path(ns) + "?watch=true&fieldSelector=metadata.name%3Dfs-b&timeoutSeconds=10") as w:
        create_cm(server, ns, "fs-c")
        create_cm(server, ns, "fs-b")
        ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "fs-b")


def test_watch_send_initial_events_with_bookmark(apiserver_watchlist):
    server = apiserver_watchlist
    ns = uniq("ns")
    create_namespace(server, ns)
    for i in range(3):
        create_cm(server, ns, f"i{i}")
    q = (
        "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        "&timeoutSeconds=10"
    )
    with server.watch(cm_path(ns) + q) as w:
        assert w.status == 200
        evs = w.events(5)  # i0..i2 and the namespace's root CA ConfigMap, then the bookmark
        assert [e["type"] for e in evs[:4]] == ["ADDED"] * 4
        assert own_events(evs[:4]) == [("ADDED", "i0"), ("ADDED", "i1"), ("ADDED", "i2")]
        bm = evs[4]
        assert bm["type"] == "BOOKMARK"
        assert bm["object"]["metadata"]["annotations"] == {"orch.io/initial-events-end": "true"}
        assert int(bm["object"]["metadata"]["resourceVersion"]) >= max(
            int(e["object"]["metadata"]["resourceVersion"]) for e in evs[:4]
        )
        create_cm(server, ns, "i3")
        ev = w.next()
        while ev["type"] == "BOOKMARK":
            ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "i3")


def test_watch_send_initial_events_needs_not_older_than(apiserver_watchlist):
    status, doc = apiserver_watchlist.json(
        "GET", "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true"
    )
    assert status == 400
    assert_status(doc, 400, "BadRequest")


# --- dry run -----------------------------------------------------------------------------


def test_dry_run_stores_nothing(server, ns):
    status, obj = server.json("POST", cm_path(ns) + "?dryRun=All", {"metadata": {"name": "dry"}, "data": {"a": "1"}})
    assert status == 201, obj
    assert obj["metadata"]["name"] == "dry" and obj["data"] == {"a": "1"}
    assert obj["metadata"]["uid"] and obj["metadata"]["creationTimestamp"]
    assert not exists(server, cm_path(ns, "dry"))

    real = create_cm(server, ns, "dry", data={"a": "1"})
    rv = real["metadata"]["resourceVersion"]
    real["data"] = {"a": "put"}
    _, put = server.json("PUT", cm_path(ns, "dry") + "?dryRun=All", real, expect=200)
    assert put["data"] == {"a": "put"}
    _, patched = server.json(
        "PATCH", cm_path(ns, "dry") + "?dryRun=All", {"data": {"a": "patch"}}, headers=MERGE, expect=200
    )
    assert patched["data"] == {"a": "patch"}
    status, doc = server.json("DELETE", cm_path(ns, "dry") + "?dryRun=All")
    assert status == 200, doc
    _, got = server.json("GET", cm_path(ns, "dry"), expect=200)
    assert got["data"] == {"a": "1"}
    assert got["metadata"]["resourceVersion"] == rv

    status, doc = server.json("POST", cm_path(ns) + "?dryRun=Some", {"metadata": {"name": "dry2"}})
    assert status == 422
    assert_status(doc, 422, "Invalid")
    assert "dryRun: Unsupported value" in doc["message"]


def test_dry_run_delete_of_namespace_and_pod(apiserver, sq_ns):
    pods = f"/api/v1/namespaces/{sq_ns}/pods"
    apiserver.json("POST", pods, pod_body("drypod", node="n1"), expect=201)
    apiserver.json("DELETE", f"{pods}/drypod?dryRun=All&gracePeriodSeconds=0", expect=200)
    _, pod = apiserver.json("GET", f"{pods}/drypod", expect=200)
    assert "deletionTimestamp" not in pod["metadata"]
    apiserver.json("DELETE", f"/api/v1/namespaces/{sq_ns}?dryRun=All", expect=200)
    _, nsobj = apiserver.json("GET", f"/api/v1/namespaces/{sq_ns}", expect=200)
    assert nsobj["status"]["phase"] == "Active"
    assert "deletionTimestamp" not in nsobj["metadata"]


# --- finalizers and graceful deletion ----------------------------------------------------


def test_finalizer_holds_object_until_removed(server, ns):
    create_cm(server, ns, "fin", finalizers=["example.com/hold"])
    status, doc = server.json("DELETE", cm_path(ns, "fin"))
    assert status in (200, 202), doc
    assert doc["kind"] == "ConfigMap", doc
    assert doc["metadata"]["deletionTimestamp"]
    _, got = server.json("GET", cm_path(ns, "fin"), expect=200)
    assert got["metadata"]["deletionTimestamp"]
    assert got["metadata"]["finalizers"] == ["example.com/hold"]
    # Another delete changes nothing.
    server.json("DELETE", cm_path(ns, "fin"), expect=(200, 202))
    assert exists(server, cm_path(ns, "fin"))
    # No new finalizers on a terminating object.
    status, doc = server.json(
        "PATCH",
        cm_path(ns, "fin"),
        {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
        headers=MERGE,
    )
    assert status == 422, doc
    assert_status(doc, 422, "Invalid")
    server.json("PATCH", cm_path(ns, "fin"), {"metadata": {"finalizers": None}}, headers=MERGE, expect=200)
    assert not exists(server, cm_path(ns, "fin"))


def test_finalizer_removed_by_json_patch_and_put(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "fin2", finalizers=["example.com/a", "example.com/b"])
    apiserver.json("DELETE", cm_path(sq_ns, "fin2"), expect=(200, 202))
    apiserver.json(
        "PATCH",
        cm_path(sq_ns, "fin2"),
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        headers=JSONPATCH,
        expect=200,
    )
    _, obj = apiserver.json("GET", cm_path(sq_ns, "fin2"), expect=200)
    assert obj["metadata"]["finalizers"] == ["example.com/b"]
    obj["metadata"]["finalizers"] = []
    apiserver.json("PUT", cm_path(sq_ns, "fin2"), obj, expect=200)
    assert not exists(apiserver, cm_path(sq_ns, "fin2"))


def test_bound_pod_deletes_gracefully(server, ns):
    pods = f"/api/v1/namespaces/{ns}/pods"
    server.json("POST", pods, pod_body("bound", node="node-1"), expect=201)
    status, doc = server.json("DELETE", f"{pods}/bound")
    assert status in (200, 202), doc
    assert doc["kind"] == "Pod"
    assert doc["metadata"]["deletionTimestamp"]
    assert doc["metadata"]["deletionGracePeriodSeconds"] == 30
    _, got = server.json("GET", f"{pods}/bound", expect=200)
    assert got["metadata"]["deletionGracePeriodSeconds"] == 30
    # A shorter grace period shortens it; grace 0 (the node agent) removes it.
    _, doc = server.json("DELETE", f"{pods}/bound?gracePeriodSeconds=5", expect=(200, 202))
    assert doc["metadata"]["deletionGracePeriodSeconds"] == 5
    assert exists(server, f"{pods}/bound")
    status, doc = server.json("DELETE", f"{pods}/bound", {"gracePeriodSeconds": 0})
    assert status == 200, doc
    assert not exists(server, f"{pods}/bound")


def test_pod_termination_grace_period_from_spec(apiserver, sq_ns):
    pods = f"/api/v1/namespaces/{sq_ns}/pods"
    apiserver.json("POST", pods, pod_body("tg", node="n", terminationGracePeriodSeconds=7), expect=201)
    _, doc = apiserver.json("DELETE", f"{pods}/tg", expect=(200, 202))
    assert doc["metadata"]["deletionGracePeriodSeconds"] == 7
    apiserver.json("DELETE", f"{pods}/tg?gracePeriodSeconds=0", expect=200)
    assert not exists(apiserver, f"{pods}/tg")


def test_unbound_pod_goes_at_once(server, ns):
    pods = f"/api/v1/namespaces/{ns}/pods"
    server.json("POST", pods, pod_body("unbound"), expect=201)
    status, doc = server.json("DELETE", f"{pods}/unbound")
    assert status == 200, doc
    assert not exists(server, f"{pods}/unbound")


def test_pod_binding(apiserver, sq_ns):
    pods = f"/api/v1/namespaces/{sq_ns}/pods"
    apiserver.json("POST", pods, pod_body("tobind"), expect=201)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "tobind"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-x"},
    }
    status, doc = apiserver.json("POST", f"{pods}/tobind/binding", binding)
    assert status == 201, doc
    _, pod = apiserver.json("GET", f"{pods}/tobind", expect=200)
    assert pod["spec"]["nodeName"] == "node-x"
    status, doc = apiserver.json("POST", f"{pods}/tobind/binding", binding)
    assert status == 409
    assert_status(doc, 409, "Conflict")


# --- garbage collection ------------------------------------------------------------------


def _owner_and_dependent(server, ns, owner_name, dep_name, dep_finalizers=None):
    owner = create_cm(server, ns, owner_name)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner_name, "uid": owner["metadata"]["uid"]}
    md = {"name": dep_name, "ownerReferences": [ref]}
    if dep_finalizers:
        md["finalizers"] = dep_finalizers
    server.json("POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": md, "stringData": {"a": "b"}}, expect=201)
    return owner


def test_propagation_background(server, ns):
    _owner_and_dependent(server, ns, "owner-bg", "dep-bg")
    server.json("DELETE", cm_path(ns, "owner-bg"), {"propagationPolicy": "Background"}, expect=200)
    assert not exists(server, cm_path(ns, "owner-bg"))
    wait_for(gone(server, f"/api/v1/namespaces/{ns}/secrets/dep-bg"), 5, what="dependent deleted")


def test_dependent_of_missing_owner_is_collected(apiserver, sq_ns):
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "never", "uid": str(uuid.uuid4())}
    apiserver.json(
        "POST",
        f"/api/v1/namespaces/{sq_ns}/secrets",
        {"metadata": {"name": "orphan-ref", "ownerReferences": [ref]}},
        expect=201,
    )
    wait_for(
        gone(apiserver, f"/api/v1/namespaces/{sq_ns}/secrets/orphan-ref"),
        5,
        what="dependent of a missing owner deleted",
    )


def test_propagation_orphan(server, ns):
    _owner_and_dependent(server, ns, "owner-or", "dep-or")
    status, doc = server.json("DELETE", cm_path(ns, "owner-or") + "?propagationPolicy=Orphan")
    assert status in (200, 202), doc
    wait_for(gone(server, cm_path(ns, "owner-or")), 5, what="owner deleted")

    def dep_orphaned():
        _, dep = server.json("GET", f"/api/v1/namespaces/{ns}/secrets/dep-or", expect=200)
        return not dep["metadata"].get("ownerReferences")

    wait_for(dep_orphaned, 5, what="ownerReference removed")
    time.sleep(0.3)  # the collector must not delete it a moment later
    assert exists(server, f"/api/v1/namespaces/{ns}/secrets/dep-or")


def test_propagation_foreground(server, ns):
    _owner_and_dependent(server, ns, "owner-fg", "dep-fg", dep_finalizers=["example.com/hold"])
    dep_path = f"/api/v1/namespaces/{ns}/secrets/dep-fg"
    status, doc = server.json("DELETE", cm_path(ns, "owner-fg"), {"propagationPolicy": "Foreground"})
    assert status in (200, 202), doc
    assert "foregroundDeletion" in doc["metadata"]["finalizers"]
    assert doc["metadata"]["deletionTimestamp"]

    def dep_terminating():
        _, dep = server.json("GET", dep_path, expect=200)
        return dep["metadata"].get("deletionTimestamp")

    wait_for(dep_terminating, 5, what="dependent terminating")
    time.sleep(0.3)
    _, owner = server.json("GET", cm_path(ns, "owner-fg"), expect=200)
    assert owner["metadata"]["deletionTimestamp"]
    server.json("PATCH", dep_path, {"metadata": {"finalizers": None}}, headers=MERGE, expect=200)
    wait_for(gone(server, dep_path), 5, what="dependent deleted")
    wait_for(gone(server, cm_path(ns, "owner-fg")), 5, what="owner deleted after its dependent")


# --- namespaces --------------------------------------------------------------------------


def test_initial_namespaces(server):
    names = list_names(server, "/api/v1/namespaces")
    for n in ("default", "orch-system", "orch-public", "orch-node-lease"):
        assert n in names
    _, d = server.json("GET", "/api/v1/namespaces/default", expect=200)
    assert d["status"]["phase"] == "Active"


@pytest.mark.parametrize("name", ["default", "orch-system", "orch-public"])
def test_reserved_namespaces_cannot_be_deleted(server, name):
    status, doc = server.json("DELETE", f"/api/v1/namespaces/{name}")
    assert status == 403
    assert_status(doc, 403, "Forbidden")
    _, d = server.json("GET", f"/api/v1/namespaces/{name}", expect=200)
    assert "deletionTimestamp" not in d["metadata"]


def test_create_in_missing_namespace_is_404(server):
    status, doc = server.json("POST", cm_path("no-such-ns-" + uuid.uuid4().hex[:6]), {"metadata": {"name": "x"}})
    assert status == 404
    assert_status(doc, 404, "NotFound")


def test_namespace_deletion_empties_it(server, ns):
    create_cm(server, ns, "content")
    server.json("POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s"}}, expect=201)
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("p"), expect=201)
    lease_path = f"/apis/coordination.orch.io/v1/namespaces/{ns}/leases"
    server.json("POST", lease_path, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "x"}}, expect=201)
    status, doc = server.json("DELETE", f"/api/v1/namespaces/{ns}")
    assert status in (200, 202), doc
    assert doc["kind"] == "Namespace"
    assert doc["status"]["phase"] == "Terminating"
    assert doc["metadata"]["deletionTimestamp"]
    # (Right after the DELETE the etcd-backed server occasionally still admits one: its
    # admission reads the namespace from the watch cache, which lags the write.)
    rejected = []

    def late_create_rejected():
        status, err = server.json("POST", cm_path(ns), {"metadata": {"generateName": "late-"}})
        if status == 403:
            rejected.append(err)
        return status in (403, 404)

    wait_for(late_create_rejected, 3, what="creation in the terminating namespace rejected")
    if rejected:
        assert_status(rejected[0], 403, "Forbidden")
        assert "terminat" in rejected[0]["message"]
    wait_for(gone(server, cm_path(ns, "content")), 5, what="namespaced objects deleted")
    wait_for(gone(server, f"/api/v1/namespaces/{ns}"), 5, what="namespace deleted")
    assert list_names(server, cm_path(ns)) == []
    assert list_names(server, lease_path) == []
    assert list_names(server, f"/api/v1/namespaces/{ns}/pods") == []


def test_namespace_with_finalized_content_waits(apiserver):
    ns = uniq("ns")
    apiserver.json("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, expect=201)
    create_cm(apiserver, ns, "held", finalizers=["example.com/hold"])
    apiserver.json("DELETE", f"/api/v1/namespaces/{ns}", expect=(200, 202))
    time.sleep(0.5)
    _, nsobj = apiserver.json("GET", f"/api/v1/namespaces/{ns}", expect=200)
    assert nsobj["status"]["phase"] == "Terminating"
    status, _ = apiserver.json("POST", cm_path(ns), {"metadata": {"name": "late"}})
    assert status == 403
    apiserver.json("PATCH", cm_path(ns, "held"), {"metadata": {"finalizers": None}}, headers=MERGE, expect=200)
    wait_for(gone(apiserver, f"/api/v1/namespaces/{ns}"), 5, what="namespace deleted")


# --- discovery ---------------------------------------------------------------------------


def test_discovery(apiserver):
    _, api = apiserver.json("GET", "/api", expect=200)
    assert api["kind"] == "APIVersions" and "v1" in api["versions"]
    _, apis = apiserver.json("GET", "/apis", expect=200)
    assert apis["kind"] == "APIGroupList"
    groups = {g["name"]: g for g in apis["groups"]}
    for g in ("apps", "batch", "coordination.orch.io", "rbac.orch.io", "policy"):
        assert g in groups, g
        assert groups[g]["preferredVersion"]["groupVersion"].startswith(g + "/")
    _, apps = apiserver.json("GET", "/apis/apps", expect=200)
    assert apps["kind"] == "APIGroup" and apps["name"] == "apps"
    _, appsv1 = apiserver.json("GET", "/apis/apps/v1", expect=200)
    assert appsv1["kind"] == "APIResourceList" and appsv1["groupVersion"] == "apps/v1"
    res = {r["name"]: r for r in appsv1["resources"]}
    assert res["deployments"]["kind"] == "Deployment"
    assert res["deployments"]["namespaced"] is True
    assert "deploy" in res["deployments"]["shortNames"]
    assert set(res["deployments"]["verbs"]) >= {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    }
    assert "deployments/status" in res
    _, v1 = apiserver.json("GET", "/api/v1", expect=200)
    core = {r["name"]: r for r in v1["resources"]}
    assert "po" in core["pods"]["shortNames"]
    assert core["namespaces"]["namespaced"] is False
    for sub in ("pods/status", "pods/binding", "pods/eviction", "pods/log"):
        assert sub in core, sub
    _, coord = apiserver.json("GET", "/apis/coordination.orch.io/v1", expect=200)
    assert "leases" in {r["name"] for r in coord["resources"]}
    status, doc = apiserver.json("GET", "/apis/nosuch.orch.io/v1")
    assert status == 404


def test_version(apiserver):
    _, v = apiserver.json("GET", "/version", expect=200)
    assert v["major"] and v["minor"]
    assert v["gitVersion"].startswith("v")
    parts = v["gitVersion"][1:].split("+")[0].split("-")[0].split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)


def test_every_response_names_its_audit_id_with_auditing_off(apiserver):
    """As upstream's outermost filter does: each response carries an Audit-ID (the
    client's own when it sent one), audited or not; this server has no audit policy."""
    ids = set()
    for path, cert, code in (
        ("/version", True, 200),
        ("/api/v1/namespaces/nowhere-x/pods/none", True, 404),
        ("/api/v1/pods", False, 403),  # anonymous
        ("/openapi/v2", True, 200),  # a large body: sent in slices
    ):
        status, hdrs, body = apiserver.request("GET", path, client_cert=cert)
        assert status == code, (path, body[:200])
        ids.add(str(uuid.UUID(hdrs["audit-id"])))
    assert len(body) > 256 * 1024 and len(ids) == 4
    status, hdrs, _ = apiserver.request("GET", "/readyz", headers={"Audit-ID": "client-chosen-1"})
    assert (status, hdrs["audit-id"]) == (200, "client-chosen-1")


# --- negotiation -------------------------------------------------------------------------


def test_yaml_representation(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "y", data={"a": "1"})
    status, hdrs, body = apiserver.request("GET", cm_path(sq_ns, "y"), headers={"Accept": "application/yaml"})
    assert status == 200
    assert hdrs["content-type"].startswith("application/yaml")
    doc = yaml.safe_load(body)
    assert doc["kind"] == "ConfigMap" and doc["data"] == {"a": "1"}
    status, hdrs, body = apiserver.request("GET", cm_path(sq_ns), headers={"Accept": "application/yaml"})
    assert status == 200 and yaml.safe_load(body)["kind"] == "ConfigMapList"
    # A YAML request body.
    status, hdrs, body = apiserver.request(
        "POST",
        cm_path(sq_ns),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  b: '2'\n",
        headers={"Content-Type": "application/yaml"},
    )
    assert status == 201, body
    assert json.loads(body)["data"] == {"b": "2"}


@pytest.mark.parametrize("group", ["meta.k8s.io", "meta.orch.io"])
def test_table_representation_of_pods(apiserver, sq_ns, group):
    pods = f"/api/v1/namespaces/{sq_ns}/pods"
    body = pod_body("tp")
    body["metadata"]["labels"] = {"a": "b"}
    apiserver.json("POST", pods, body, expect=201)
    accept = f"application/json;as=Table;v=v1;g={group}, application/json"
    _, tbl = apiserver.json("GET", pods, headers={"Accept": accept}, expect=200)
    assert tbl["kind"] == "Table"
    assert tbl["apiVersion"] == f"{group}/v1"
    cols = [c["name"] for c in tbl["columnDefinitions"]]
    for c in ("Name", "Ready", "Status", "Restarts", "Age"):
        assert c in cols, cols
    for c in tbl["columnDefinitions"]:
        assert c["type"]
    assert tbl["metadata"]["resourceVersion"]
    assert len(tbl["rows"]) == 1
    row = tbl["rows"][0]
    assert len(row["cells"]) == len(cols)
    assert row["cells"][cols.index("Name")] == "tp"
    assert row["cells"][cols.index("Status")] == "Pending"
    assert row["object"]["metadata"]["name"] == "tp"
    assert row["object"]["metadata"]["labels"] == {"a": "b"}
    # One object as a Table too.
    _, one = apiserver.json("GET", f"{pods}/tp", headers={"Accept": accept}, expect=200)
    assert one["kind"] == "Table" and len(one["rows"]) == 1


def test_default_table_columns(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "dt")
    _, tbl = apiserver.json(
        "GET", "/apis/coordination.orch.io/v1/namespaces/default/leases", headers={"Accept": TABLE_ORCH}, expect=200
    )
    assert tbl["kind"] == "Table"
    _, tbl = apiserver.json("GET", cm_path(sq_ns), headers={"Accept": TABLE_ORCH}, expect=200)
    cols = [(c["name"], c["type"]) for c in tbl["columnDefinitions"]]
    assert cols[0] == ("Name", "string")


def test_table_watch_events_are_one_row_tables(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "tw")
    with apiserver.watch(cm_path(sq_ns) + "?watch=true&timeoutSeconds=5", headers={"Accept": TABLE_K8S}) as w:
        evs = w.events(2)  # tw and the namespace's root CA ConfigMap
    for ev in evs:
        assert ev["type"] == "ADDED"
        assert ev["object"]["kind"] == "Table" and ev["object"]["apiVersion"] == "meta.k8s.io/v1"
        assert len(ev["object"]["rows"]) == 1
    assert sorted(ev["object"]["rows"][0]["object"]["metadata"]["name"] for ev in evs) == [ROOT_CA_CONFIGMAP, "tw"]


def test_unservable_media_type_is_406(apiserver, sq_ns):
    for accept in (
        "text/html",
        "application/json;as=Table;v=v1;g=example.com",
        "application/vnd.orch.protobuf;as=Table;v=v1;g=meta.orch.io",
    ):
        status, hdrs, body = apiserver.request("GET", cm_path(sq_ns), headers={"Accept": accept})
        assert status == 406, accept
        assert_status(json.loads(body), 406, "NotAcceptable")
    # A protobuf Table is not served; with JSON as the next choice the Table comes in JSON.
    status, hdrs, body = apiserver.request(
        "GET",
        cm_path(sq_ns),
        headers={"Accept": "application/vnd.orch.protobuf;as=Table;v=v1;g=meta.orch.io, application/json"},
    )
    assert status == 200 and hdrs["content-type"].startswith("application/json")


def test_protobuf_body_with_a_wrong_prefix_is_400(apiserver, sq_ns):
    status, hdrs, body = apiserver.request(
        "POST", cm_path(sq_ns), b"k8s\x01junk", headers={"Content-Type": "application/vnd.kubernetes.protobuf"}
    )
    assert status == 400, body
    assert_status(json.loads(body), 400, "BadRequest")


def test_pretty(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "pr")
    _, _, plain = apiserver.request("GET", cm_path(sq_ns, "pr"))
    _, _, pretty = apiserver.request("GET", cm_path(sq_ns, "pr") + "?pretty=true")
    assert b"\n" not in plain.strip()
    assert b"\n  " in pretty
    assert json.loads(pretty) == json.loads(plain)


# --- health, metrics ---------------------------------------------------------------------


def test_health_endpoints(server):
    backend_check = "sqlite" if server.backend == "sqlite" else "etcd"
    for path in ("/healthz", "/livez", "/readyz"):
        status, _, body = server.request("GET", path)
        assert (status, body) == (200, b"ok"), path
    status, _, body = server.request("GET", "/readyz?verbose")
    text = body.decode()
    assert status == 200
    for check in ("ping", "log", backend_check, "shutdown"):
        assert f"[+]{check} ok" in text, text
    assert "[+]poststarthook/" in text
    assert text.rstrip().endswith("readyz check passed")
    status, _, body = server.request("GET", f"/readyz?verbose&exclude={backend_check}")
    assert status == 200
    assert f"[+]{backend_check} excluded: ok" in body.decode()
    status, _, body = server.request("GET", "/livez?verbose=")
    assert status == 200 and "livez check passed" in body.decode()
    assert "[+]shutdown" not in body.decode()
    assert server.request("GET", "/livez/ping")[:3:2] == (200, b"ok")
    assert server.request("GET", f"/readyz/{backend_check}")[0] == 200
    assert server.request("GET", "/readyz/no-such-check")[0] == 404
    assert server.request("GET", "/livez/no-such-check")[0] == 404


def test_metrics(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "m")
    apiserver.json("GET", cm_path(sq_ns), expect=200)
    apiserver.json("GET", cm_path(sq_ns, "nope"), expect=404)
    status, hdrs, body = apiserver.request("GET", "/metrics")
    assert status == 200
    assert hdrs["content-type"].startswith("text/plain")
    text = body.decode()
    assert "# TYPE apiserver_request_total counter" in text
    assert "# TYPE apiserver_request_duration_seconds histogram" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("apiserver_request_total{")]
    assert lines
    for label in ("verb", "group", "version", "resource", "subresource", "code"):
        assert f'{label}="' in lines[0], (label, lines[0])
    assert any('verb="LIST"' in ln and 'resource="configmaps"' in ln and 'code="200"' in ln for ln in lines)
    assert any('verb="GET"' in ln and 'resource="configmaps"' in ln and 'code="404"' in ln for ln in lines)
    assert "apiserver_request_duration_seconds_bucket{" in text
    assert "apiserver_storage_objects{" in text
    # SQLite's own heap (its page cache holds pages of the database just read): a positive gauge.
    sqlite_lines = [ln for ln in text.splitlines() if ln.startswith("orch_storage_sqlite_memory_bytes ")]
    assert len(sqlite_lines) == 1 and int(sqlite_lines[0].split()[1]) > 0, sqlite_lines
    assert "# TYPE orch_storage_sqlite_memory_bytes gauge" in text


# --- errors, authentication --------------------------------------------------------------


def test_invalid_object_is_422_with_causes(server, ns):
    status, doc = server.json("POST", cm_path(ns), {"metadata": {"name": "Not_A_Valid_Name"}})
    assert status == 422, doc
    assert_status(doc, 422, "Invalid")
    assert doc["details"]["kind"] == "ConfigMap"
    assert doc["details"]["name"] == "Not_A_Valid_Name"
    causes = doc["details"]["causes"]
    assert causes and all("field" in c and "reason" in c and "message" in c for c in causes)
    assert "metadata.name" in [c["field"] for c in causes]


def test_bad_requests_are_status_objects(apiserver, sq_ns):
    cases = [
        ("POST", cm_path(sq_ns), b"{not json", {"Content-Type": "application/json"}, 400),
        (
            "POST",
            cm_path(sq_ns),
            b'{"kind":"Secret","metadata":{"name":"x"}}',
            {"Content-Type": "application/json"},
            400,
        ),
        (
            "POST",
            cm_path(sq_ns),
            b'{"metadata":{"name":"x","namespace":"other"}}',
            {"Content-Type": "application/json"},
            400,
        ),
        ("GET", cm_path(sq_ns) + "?limit=abc", None, {}, 400),
        ("GET", "/api/v1/nosuchresources", None, {}, 404),
        ("GET", "/apis/apps/v1/namespaces/default/nosuch", None, {}, 404),
        ("POST", cm_path(sq_ns, "named"), b"{}", {"Content-Type": "application/json"}, 405),
    ]
    for method, path, body, headers, code in cases:
        status, hdrs, data = apiserver.request(method, path, body, headers)
        assert status == code, (method, path, status, data)
        assert hdrs["content-type"].startswith("application/json"), (path, hdrs)
        assert_status(json.loads(data), code)


def test_anonymous_requests(apiserver):
    status, hdrs, body = apiserver.request("GET", "/api/v1/pods", client_cert=False)
    assert status == 403
    assert_status(json.loads(body), 403, "Forbidden")
    status, _, body = apiserver.request("GET", "/readyz", client_cert=False)
    assert (status, body) == (200, b"ok")
    status, _, body = apiserver.request("GET", "/version", client_cert=False)
    assert status == 200


def test_cluster_scoped_and_grouped_kinds(apiserver):
    name = uniq("lease")
    lease = {
        "apiVersion": "coordination.orch.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 40},
    }
    _, obj = apiserver.json(
        "POST", "/apis/coordination.orch.io/v1/namespaces/orch-node-lease/leases", lease, expect=201
    )
    assert obj["apiVersion"] == "coordination.orch.io/v1"
    pc = {
        "apiVersion": "scheduling.orch.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": uniq("pc")},
        "value": 1000,
    }
    _, obj = apiserver.json("POST", "/apis/scheduling.orch.io/v1/priorityclasses", pc, expect=201)
    assert "namespace" not in obj["metadata"]
    _, lst = apiserver.json("GET", "/apis/coordination.orch.io/v1/leases", expect=200)
    assert name in [i["metadata"]["name"] for i in lst["items"]]
    status, doc = apiserver.json("GET", "/apis/scheduling.orch.io/v1/namespaces/default/priorityclasses")
    assert status == 404


# --- process lifecycle -------------------------------------------------------------------


def test_sigterm_readyz_fails_during_shutdown_delay_then_exit_0(tmp_path):
    server = ApiServerProcess(tmp_path / "d", free_port(), extra_args=("--shutdown-delay-duration", "2s"))
    server.start()
    try:
        proc = server.proc
        ctx = server.ssl_context()
        assert ctx is not None
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)

        def readyz_failing():
            try:
                status, _, _ = server.request("GET", "/readyz", timeout=2)
            except OSError:
                return False
            return status == 500

        wait_for(readyz_failing, 1.5, what="/readyz to fail during the shutdown delay")
        # Still serving other requests during the delay.
        status, _, _ = server.request("GET", "/livez", timeout=2)
        assert status == 200
        status, _, body = server.request("GET", "/readyz?verbose", timeout=2)
        assert status == 500 and "[-]shutdown failed" in body.decode()
        code = proc.wait(10)
        elapsed = time.monotonic() - t0
        assert code == 0, server.log_tail()
        assert 1.5 <= elapsed < 8, elapsed
    finally:
        server.stop()


def test_sigterm_closes_watches_and_exits_0(tmp_path):
    server = ApiServerProcess(tmp_path / "d", free_port())
    server.start()
    try:
        w = server.watch("/api/v1/namespaces/default/configmaps?watch=true", timeout=10)
        assert w.status == 200
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        w.read_all()  # ends when the server closes the stream
        w.close()
        assert server.proc.wait(10) == 0, server.log_tail()
        assert time.monotonic() - t0 < 5
    finally:
        server.stop()


def test_crash_safety_kill_9(tmp_path):
    data = tmp_path / "d"
    server = ApiServerProcess(data, free_port())
    server.start()
    try:
        ns = "crash"
        create_namespace(server, ns)
        uids = {}
        for i in range(50):
            obj = create_cm(server, ns, f"c{i:02d}", data={"i": str(i)})
            uids[obj["metadata"]["name"]] = obj["metadata"]["uid"]
        # The last acknowledged write must survive too.
        _, last = server.json("PATCH", cm_path(ns, "c49"), {"data": {"i": "patched"}}, headers=MERGE, expect=200)
        server.kill()
        server.start()
        _, lst = server.json("GET", cm_path(ns), expect=200)
        got = {i["metadata"]["name"]: i for i in own_items(lst)}
        assert {n: o["metadata"]["uid"] for n, o in got.items()} == uids
        assert got["c49"]["data"] == {"i": "patched"}
        assert got["c49"]["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]
        # Resource versions keep increasing after the restart.
        after = create_cm(server, ns, "after-restart")
        assert int(after["metadata"]["resourceVersion"]) > int(last["metadata"]["resourceVersion"])
        # A list at an old version is still served from the revision log...
        first_rv = got["c00"]["metadata"]["resourceVersion"]
        _, old = server.json("GET", cm_path(ns) + f"?resourceVersion={first_rv}&resourceVersionMatch=Exact", expect=200)
        assert [i["metadata"]["name"] for i in own_items(old)] == ["c00"]
        # ...while a watch from before the restart is older than the new watch history: 410 as an ERROR event.
        with server.watch(cm_path(ns) + f"?watch=true&resourceVersion={first_rv}&timeoutSeconds=5") as w:
            assert w.status == 200
            ev = w.next()
        assert ev["type"] == "ERROR", ev
        assert ev["object"]["kind"] == "Status" and ev["object"]["code"] == 410
        assert ev["object"]["reason"] in ("Expired", "Gone")
    finally:
        server.stop()


def test_bad_flags_fail_with_clear_errors(tmp_path):
    from tests.apiserver_fixtures import APISERVER_BIN

    cases = [
        (["--storage-backend", "mysql"], "--storage-backend"),
        (["--storage-backend", "etcd3"], "--etcd-servers"),
        (["--secure-port", "notaport"], "--secure-port"),
        (["--feature-gates", "NoSuchGate=true"], "NoSuchGate"),
        (["--shutdown-delay-duration", "forever"], "--shutdown-delay-duration"),
    ]
    for args, needle in cases:
        res = subprocess.run(
            [str(APISERVER_BIN), "--data-dir", str(tmp_path / "x"), *args], capture_output=True, text=True, timeout=20
        )
        assert res.returncode != 0, args
        assert needle in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


# --- more contract details ---------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body, want",
    [
        ("/api/v1/namespaces/{ns}/configmaps/put-new", {"metadata": {"name": "put-new"}}, 404),
        ("/api/v1/namespaces/{ns}/secrets/put-new", {"metadata": {"name": "put-new"}}, 404),
        ("/api/v1/namespaces/{ns}/endpoints/put-new", {"metadata": {"name": "put-new"}}, 201),
        pytest.param(
            "/apis/coordination.orch.io/v1/namespaces/{ns}/leases/put-new",
            {"metadata": {"name": "put-new"}, "spec": {"holderIdentity": "x"}},
            201,
        ),
        pytest.param(
            "/api/v1/namespaces/{ns}/events/put-new",
            {
                "metadata": {"name": "put-new"},
                "involvedObject": {"kind": "Pod", "name": "p", "namespace": "{ns}"},
                "reason": "Test",
                "message": "m",
                "type": "Normal",
            },
            201,
        ),
    ],
)
def test_put_of_missing_object_creates_where_the_kind_allows(apiserver, sq_ns, path, body, want):
    body = json.loads(json.dumps(body).replace("{ns}", sq_ns))
    status, doc = apiserver.json("PUT", path.format(ns=sq_ns), body)
    assert status == want, doc
    if want == 404:
        assert_status(doc, 404, "NotFound")
    else:
        assert doc["metadata"]["uid"] and doc["metadata"]["resourceVersion"]
        assert exists(apiserver, path.format(ns=sq_ns))


def test_noop_update_keeps_resource_version(server, ns):
    obj = create_cm(server, ns, "noop")
    _, same = server.json("PUT", cm_path(ns, "noop"), obj, expect=200)
    assert same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    _, same = server.json("PATCH", cm_path(ns, "noop"), {"data": {"k": "v"}}, headers=MERGE, expect=200)
    assert same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


def test_update_keeps_system_metadata(apiserver, sq_ns):
    obj = create_cm(apiserver, sq_ns, "sysmd")
    changed = json.loads(json.dumps(obj))
    changed["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
    changed["metadata"].pop("uid")
    changed["metadata"]["generateName"] = obj["metadata"].get("generateName")
    _, new = apiserver.json("PUT", cm_path(sq_ns, "sysmd"), changed, expect=200)
    assert new["metadata"]["creationTimestamp"] == obj["metadata"]["creationTimestamp"]
    assert new["metadata"]["uid"] == obj["metadata"]["uid"]
    # A different uid is a failed precondition.
    changed = json.loads(json.dumps(new))
    changed["metadata"]["uid"] = str(uuid.uuid4())
    status, doc = apiserver.json("PUT", cm_path(sq_ns, "sysmd"), changed)
    assert status == 409, doc
    assert_status(doc, 409, "Conflict")


def test_generation_counts_spec_changes(apiserver, sq_ns):
    path = f"/apis/apps/v1/namespaces/{sq_ns}/deployments"
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gen"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "gen"}},
            "template": {
                "metadata": {"labels": {"app": "gen"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    _, obj = apiserver.json("POST", path, dep, expect=201)
    assert obj["metadata"]["generation"] == 1
    _, obj = apiserver.json("PATCH", f"{path}/gen", {"metadata": {"labels": {"x": "y"}}}, headers=MERGE, expect=200)
    assert obj["metadata"]["generation"] == 1
    _, obj = apiserver.json("PATCH", f"{path}/gen", {"spec": {"replicas": 3}}, headers=MERGE, expect=200)
    assert obj["metadata"]["generation"] == 2
    # Status writes go through /status and leave spec (and generation) alone.
    _, obj = apiserver.json(
        "PATCH", f"{path}/gen/status", {"status": {"replicas": 3}, "spec": {"replicas": 9}}, headers=MERGE, expect=200
    )
    assert obj["status"]["replicas"] == 3
    assert obj["spec"]["replicas"] == 3
    assert obj["metadata"]["generation"] == 2
    # And the main resource ignores status (which the deployment controller keeps writing).
    _, obj = apiserver.json("PATCH", f"{path}/gen", {"status": {"replicas": 7}}, headers=MERGE, expect=200)
    assert obj["status"]["replicas"] != 7


def test_concurrent_patches_all_apply(server, ns):
    """Merge patches without a resourceVersion never conflict, however many writers race."""
    from concurrent.futures import ThreadPoolExecutor

    create_cm(server, ns, "conc", data={})

    def patch(i):
        return server.json("PATCH", cm_path(ns, "conc"), {"data": {f"k{i}": str(i)}}, headers=MERGE)[0]

    with ThreadPoolExecutor(32) as pool:
        codes = list(pool.map(patch, range(64)))
    assert codes == [200] * 64
    _, obj = server.json("GET", cm_path(ns, "conc"), expect=200)
    assert {f"k{i}": str(i) for i in range(64)}.items() <= obj["data"].items()


def test_concurrent_puts_with_one_resource_version_one_wins(server, ns):
    from concurrent.futures import ThreadPoolExecutor

    obj = create_cm(server, ns, "race")

    def put(i):
        body = json.loads(json.dumps(obj))
        body["data"] = {"winner": str(i)}
        return server.json("PUT", cm_path(ns, "race"), body)[0]

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(put, range(8)))
    assert sorted(codes) == [200] + [409] * 7


def test_watch_all_namespaces_and_resume(server, ns):
    obj = create_cm(server, ns, "wa")
    rv = obj["metadata"]["resourceVersion"]
    with server.watch(f"/api/v1/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=10") as w:
        server.json("DELETE", cm_path(ns, "wa"), expect=200)
        ev = w.next()
        while ev["object"]["metadata"].get("namespace") != ns:
            ev = w.next()
    assert ev["type"] == "DELETED" and ev["object"]["metadata"]["name"] == "wa"
    del_rv = ev["object"]["metadata"]["resourceVersion"]
    assert int(del_rv) > int(rv)
    # Resuming from the DELETED event's version sends nothing old.
    create_cm(server, ns, "wb")
    with server.watch(cm_path(ns) + f"?watch=true&resourceVersion={del_rv}&timeoutSeconds=10") as w:
        ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "wb")


def test_watch_rv_zero_sends_initial_added(server, ns):
    create_cm(server, ns, "z1")
    with server.watch(cm_path(ns) + "?watch=true&resourceVersion=0&timeoutSeconds=5") as w:
        evs = w.events(2)  # z1 and the namespace's root CA ConfigMap
    assert [e["type"] for e in evs] == ["ADDED", "ADDED"]
    assert own_events(evs) == [("ADDED", "z1")]


def test_watch_label_selector_initial_events_are_filtered(server, ns):
    create_cm(server, ns, "f-yes", labels={"pick": "1"})
    create_cm(server, ns, "f-no", labels={"pick": "0"})
    with server.watch(cm_path(ns) + "?watch=true&labelSelector=pick%3D1&timeoutSeconds=1") as w:
        evs = w.read_all()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("ADDED", "f-yes")]


def test_deletecollection_field_selector_and_dry_run(server, ns):
    for n in ("d1", "d2", "d3"):
        create_cm(server, ns, n)
    server.json("DELETE", cm_path(ns) + "?dryRun=All", expect=200)
    assert sorted(list_names(server, cm_path(ns))) == ["d1", "d2", "d3"]
    server.json("DELETE", cm_path(ns) + "?fieldSelector=metadata.name%3Dd2", expect=200)
    assert sorted(list_names(server, cm_path(ns))) == ["d1", "d3"]
    server.json("DELETE", cm_path(ns), expect=200)
    assert list_names(server, cm_path(ns)) == []


def test_pod_eviction_and_log_without_an_agent(apiserver, sq_ns):
    pods = f"/api/v1/namespaces/{sq_ns}/pods"
    apiserver.json("POST", pods, pod_body("ev"), expect=201)
    # No node runs the pod: its log is empty, as upstream.
    status, hdrs, body = apiserver.request("GET", f"{pods}/ev/log")
    assert (status, body) == (200, b"")
    # Bound to a node the server does not know: there is no agent to ask.
    apiserver.json("POST", pods, pod_body("ghost", node="no-such-node"), expect=201)
    status, doc = apiserver.json("GET", f"{pods}/ghost/log")
    assert status == 404, doc
    assert_status(doc, 404, "NotFound")
    assert "no-such-node" in doc["message"]
    status, doc = apiserver.json("GET", f"{pods}/missing/log")
    assert status == 404
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev", "namespace": sq_ns}}
    status, doc = apiserver.json("POST", f"{pods}/ev/eviction", eviction)
    assert status == 201, doc
    assert not exists(apiserver, f"{pods}/ev")


def test_request_body_too_large_is_413(apiserver, sq_ns):
    big = {"metadata": {"name": "big"}, "data": {"x": "a" * (4 * 1024 * 1024)}}
    status, hdrs, body = apiserver.request("POST", cm_path(sq_ns), big, timeout=30)
    assert status == 413
    assert_status(json.loads(body), 413, "RequestEntityTooLarge")


def test_status_subresource_of_pod(server, ns):
    pods = f"/api/v1/namespaces/{ns}/pods"
    server.json("POST", pods, pod_body("st"), expect=201)
    _, obj = server.json(
        "PATCH",
        f"{pods}/st/status",
        {"status": {"phase": "Running", "podIP": "10.0.0.5"}, "spec": {"nodeName": "sneaky"}},
        headers=MERGE,
        expect=200,
    )
    assert obj["status"]["phase"] == "Running"
    assert obj["spec"].get("nodeName") in (None, "")
    _, st = server.json("GET", f"{pods}/st/status", expect=200)
    assert st["kind"] == "Pod" and st["status"]["podIP"] == "10.0.0.5"


def test_runtime_config_disables_group_versions(apiserver_watchlist, apiserver):
    server = apiserver_watchlist
    _, apis = server.json("GET", "/apis", expect=200)
    assert "batch" not in [g["name"] for g in apis["groups"]]
    assert "apps" in [g["name"] for g in apis["groups"]]
    assert server.request("GET", "/apis/batch/v1")[0] == 404
    status, doc = server.json("GET", "/apis/batch/v1/namespaces/default/jobs")
    assert status == 404
    assert_status(doc, 404, "NotFound")
    _, idx = server.json("GET", "/openapi/v3", expect=200)
    assert "apis/batch/v1" not in idx["paths"]
    # Enabled by default elsewhere.
    assert apiserver.request("GET", "/apis/batch/v1/namespaces/default/jobs")[0] == 200


def test_openapi_v3_for_kubectl_validation(apiserver):
    _, idx = apiserver.json("GET", "/openapi/v3", expect=200)
    for gv in ("api/v1", "apis/apps/v1", "apis/coordination.orch.io/v1", "apis/rbac.orch.io/v1"):
        assert gv in idx["paths"], gv
        assert idx["paths"][gv]["serverRelativeURL"].startswith(f"/openapi/v3/{gv}")
    _, doc = apiserver.json("GET", idx["paths"]["apis/coordination.orch.io/v1"]["serverRelativeURL"], expect=200)
    patch = doc["paths"]["/apis/coordination.orch.io/v1/namespaces/{namespace}/leases/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "coordination.orch.io",
        "version": "v1",
        "kind": "Lease",
    }
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    schemas = doc["components"]["schemas"]
    assert any(
        s.get("x-kubernetes-group-version-kind")
        == [{"group": "coordination.orch.io", "version": "v1", "kind": "Lease"}]
        for s in schemas.values()
    )


def test_etcd_keys_live_under_the_prefix(apiserver_etcd, etcd):
    require_binary("etcdctl", "etcd-client")
    ns = uniq("ns")
    apiserver_etcd.json("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, expect=201)
    create_cm(apiserver_etcd, ns, "in-etcd")
    prefix = apiserver_etcd.etcd_prefix.rstrip("/") + "/"
    keys = etcd.etcdctl("get", "--prefix", "--keys-only", prefix).stdout.split()
    mine = [k for k in keys if ns in k]
    assert any(k.endswith(f"/configmaps/{ns}/in-etcd") for k in mine), mine
    # The object's resourceVersion is etcd's mod revision of that key.
    _, obj = apiserver_etcd.json("GET", cm_path(ns, "in-etcd"), expect=200)
    key = next(k for k in mine if k.endswith(f"/configmaps/{ns}/in-etcd"))
    out = json.loads(etcd.etcdctl("get", key, "-w", "json").stdout)
    assert str(out["kvs"][0]["mod_revision"]) == obj["metadata"]["resourceVersion"]


def test_two_etcd_servers_share_state_and_watches(apiserver_etcd, etcd, tmp_path):
    # Servers of one cluster share its CA and service-account key (as an HA pair does);
    # each makes its own serving certificate from that CA.
    pki = tmp_path / "second" / "pki"
    pki.mkdir(parents=True, mode=0o700)
    for f in ("ca.crt", "ca.key", "sa.key"):
        shutil.copy2(apiserver_etcd.data_dir / "pki" / f, pki / f)
    other = ApiServerProcess(
        tmp_path / "second",
        free_port(),
        backend="etcd",
        etcd_endpoint=etcd.endpoint,
        etcd_prefix=apiserver_etcd.etcd_prefix,
    )
    with other:
        ns = uniq("ns")
        create_namespace(apiserver_etcd, ns)
        obj = create_cm(apiserver_etcd, ns, "shared")
        _, got = other.json("GET", cm_path(ns, "shared"), expect=200)
        assert got["metadata"]["uid"] == obj["metadata"]["uid"]
        with other.watch(
            cm_path(ns) + f"?watch=true&resourceVersion={obj['metadata']['resourceVersion']}&timeoutSeconds=10"
        ) as w:
            apiserver_etcd.json(
                "PATCH", cm_path(ns, "shared"), {"data": {"k": "from-first"}}, headers=MERGE, expect=200
            )
            ev = w.next()
        assert ev["type"] == "MODIFIED" and ev["object"]["data"] == {"k": "from-first"}
        # Optimistic concurrency holds across servers.
        stale = dict(got, data={"k": "stale"})
        status, doc = other.json("PUT", cm_path(ns, "shared"), stale)
        assert status == 409
        assert_status(doc, 409, "Conflict")


def test_watch_pods_by_node_sees_binding_and_graceful_deletion(server, ns):
    """What the node agent relies on: a pod entering its field selection by binding is ADDED."""
    pods = f"/api/v1/namespaces/{ns}/pods"
    _, lst = server.json("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-w", expect=200)
    rv = lst["metadata"]["resourceVersion"]
    with server.watch(
        f"/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-w&resourceVersion={rv}&timeoutSeconds=10"
    ) as w:
        server.json("POST", pods, pod_body("other-node", node="node-z"), expect=201)
        server.json("POST", pods, pod_body("tobind"), expect=201)
        server.json(
            "POST",
            f"{pods}/tobind/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "tobind"},
                "target": {"kind": "Node", "name": "node-w"},
            },
            expect=201,
        )
        ev = w.next()
        assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "tobind")
        assert ev["object"]["spec"]["nodeName"] == "node-w"
        server.json("DELETE", f"{pods}/tobind", expect=(200, 202))
        ev = w.next()
        assert ev["type"] == "MODIFIED" and ev["object"]["metadata"]["deletionTimestamp"]
        server.json("DELETE", f"{pods}/tobind?gracePeriodSeconds=0", expect=200)
        ev = w.next()
        assert (ev["type"], ev["object"]["metadata"]["name"]) == ("DELETED", "tobind")


def test_event_field_selectors(apiserver, sq_ns):
    evs = f"/api/v1/namespaces/{sq_ns}/events"
    for name, obj in (("e1", "pod-a"), ("e2", "pod-b")):
        apiserver.json(
            "POST",
            evs,
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": obj, "namespace": sq_ns},
                "reason": "Started",
                "message": "m",
                "type": "Normal",
            },
            expect=201,
        )
    assert list_names(apiserver, evs + "?fieldSelector=" + quote("involvedObject.name=pod-b")) == ["e2"]
    assert sorted(list_names(apiserver, evs + "?fieldSelector=" + quote("involvedObject.kind=Pod"))) == ["e1", "e2"]


def test_table_include_object(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "inc", data={"a": "1"})
    _, tbl = apiserver.json("GET", cm_path(sq_ns) + "?includeObject=Object", headers={"Accept": TABLE_K8S}, expect=200)
    assert tbl["rows"][0]["object"]["kind"] == "ConfigMap"
    assert tbl["rows"][0]["object"]["data"] == {"a": "1"}
    _, tbl = apiserver.json("GET", cm_path(sq_ns) + "?includeObject=None", headers={"Accept": TABLE_K8S}, expect=200)
    assert "object" not in tbl["rows"][0]
    _, tbl = apiserver.json("GET", cm_path(sq_ns), headers={"Accept": TABLE_K8S}, expect=200)
    obj = tbl["rows"][0]["object"]
    assert obj["kind"] == "PartialObjectMetadata" and obj["metadata"]["name"] == "inc"
    assert "data" not in obj


def test_invalid_delete_options_are_400(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "ido")
    status, doc = apiserver.json("DELETE", cm_path(sq_ns, "ido") + "?propagationPolicy=Sideways")
    assert status == 400
    assert_status(doc, 400, "BadRequest")
    status, doc = apiserver.json("DELETE", cm_path(sq_ns, "ido"), {"gracePeriodSeconds": "soon"})
    assert status == 400
    assert_status(doc, 400, "BadRequest")
    assert exists(apiserver, cm_path(sq_ns, "ido"))


def test_post_to_all_namespaces_collection_is_405(apiserver):
    status, doc = apiserver.json("POST", "/api/v1/pods", pod_body("x"))
    assert status == 405, doc
    assert_status(doc, 405, "MethodNotAllowed")


def test_field_validation_strict_rejects_unknown_fields(apiserver, sq_ns):
    status, doc = apiserver.json(
        "POST", cm_path(sq_ns) + "?fieldValidation=Strict", {"metadata": {"name": "fv"}, "bogus": 1, "data": {"a": "b"}}
    )
    assert status == 400, doc
    assert_status(doc, 400, "BadRequest")
    assert "bogus" in doc["message"]


def test_field_types_are_checked(apiserver, sq_ns):
    status, doc = apiserver.json("POST", cm_path(sq_ns), {"metadata": {"name": "ft"}, "data": {"a": 1}})
    assert status == 400, doc
    assert_status(doc, 400, "BadRequest")


def test_noop_update_with_reordered_keys_keeps_resource_version(server, ns):
    obj = create_cm(server, ns, "reorder", labels={"a": "1", "b": "2"}, data={"x": "1", "y": "2"})
    md = obj["metadata"]
    body = {
        "data": {"y": "2", "x": "1"},
        "metadata": {
            "labels": {"b": "2", "a": "1"},
            "resourceVersion": md["resourceVersion"],
            **{k: md[k] for k in reversed(list(md)) if k not in ("labels", "resourceVersion")},
        },
        "kind": "ConfigMap",
        "apiVersion": "v1",
    }
    _, same = server.json("PUT", cm_path(ns, "reorder"), body, expect=200)
    assert same["metadata"]["resourceVersion"] == md["resourceVersion"]


def test_paged_list_across_namespaces_counts_remaining(server, ns):
    for i in range(3):
        create_cm(server, ns, f"x{i}")
    _, full = server.json("GET", "/api/v1/configmaps", expect=200)
    rv, total = full["metadata"]["resourceVersion"], len(full["items"])
    assert total >= 3
    _, page = server.json(
        "GET", f"/api/v1/configmaps?limit=1&resourceVersion={rv}&resourceVersionMatch=Exact", expect=200
    )
    assert page["metadata"]["resourceVersion"] == rv
    assert page["metadata"]["remainingItemCount"] == total - 1
    names, token = (
        [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]],
        page["metadata"]["continue"],
    )
    while token:
        _, page = server.json("GET", f"/api/v1/configmaps?limit=2&continue={quote(token)}", expect=200)
        assert page["metadata"]["resourceVersion"] == rv
        names += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
        token = page["metadata"].get("continue")
    assert names == [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in full["items"]]


def test_scale_subresource(apiserver, sq_ns):
    path = f"/apis/apps/v1/namespaces/{sq_ns}/deployments"
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sc"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sc"}},
            "template": {
                "metadata": {"labels": {"app": "sc"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    apiserver.json("POST", path, dep, expect=201)
    _, scale = apiserver.json("GET", f"{path}/sc/scale", expect=200)
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"]["replicas"] == 1
    apiserver.json("PATCH", f"{path}/sc/scale", {"spec": {"replicas": 4}}, headers=MERGE, expect=200)
    _, obj = apiserver.json("GET", f"{path}/sc", expect=200)
    assert obj["spec"]["replicas"] == 4


def test_legacy_watch_path(apiserver, sq_ns):
    obj = create_cm(apiserver, sq_ns, "lw")
    with apiserver.watch(f"/api/v1/watch/namespaces/{sq_ns}/configmaps?timeoutSeconds=5") as w:
        ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["uid"]) == ("ADDED", obj["metadata"]["uid"])


def test_namespace_watch_sees_terminating_then_deleted(apiserver):
    name = uniq("ns")
    _, nsobj = apiserver.json("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=201)
    rv = nsobj["metadata"]["resourceVersion"]
    with apiserver.watch(
        f"/api/v1/namespaces?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={rv}&timeoutSeconds=10"
    ) as w:
        apiserver.json("DELETE", f"/api/v1/namespaces/{name}", expect=(200, 202))
        evs = [w.next()]
        while evs[-1]["type"] != "DELETED":
            evs.append(w.next())
    assert evs[0]["type"] == "MODIFIED" and evs[0]["object"]["status"]["phase"] == "Terminating"
    assert evs[-1]["object"]["metadata"]["name"] == name


def test_objects_created_during_namespace_deletion_do_not_leak(server):
    names = []
    for _ in range(5):
        ns = uniq("ns")
        names.append(ns)
        server.json("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, expect=201)
        create_cm(server, ns, "a")
        server.json("DELETE", f"/api/v1/namespaces/{ns}", expect=(200, 202))
        for i in range(3):
            server.json("POST", cm_path(ns), {"metadata": {"name": f"late{i}"}})
    for ns in names:
        wait_for(gone(server, f"/api/v1/namespaces/{ns}"), 5, what=f"namespace {ns} deleted")
        assert list_names(server, f"/api/v1/configmaps?fieldSelector=metadata.namespace%3D{ns}") == []


def _post_in_two_parts(server, path: str, body: bytes, pause: float = 0.2) -> tuple[int, dict]:
    """POST with the body sent in two TCP writes, as any client may do for a large body."""
    conn = server.connection(10)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        half = len(body) // 2
        conn.endheaders(body[:half])
        time.sleep(pause)
        conn.send(body[half:])
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_body_sent_in_two_parts_is_read_whole(apiserver, sq_ns):
    body = json.dumps({"metadata": {"name": "split"}, "data": {"v": "y" * 1000}}).encode()
    status, doc = _post_in_two_parts(apiserver, cm_path(sq_ns), body)
    assert status == 201, doc
    assert doc["data"]["v"] == "y" * 1000


def test_json_patch_operations_and_escaping(apiserver, sq_ns):
    create_cm(apiserver, sq_ns, "jpe", data={"a": "1", "b": "2"}, finalizers=["example.com/one"])
    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/example.com~1note", "value": "hi"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/two"},
        {"op": "copy", "from": "/data/a", "path": "/data/c"},
        {"op": "move", "from": "/data/b", "path": "/data/d"},
        {"op": "remove", "path": "/data/a"},
    ]
    _, obj = apiserver.json("PATCH", cm_path(sq_ns, "jpe"), ops, headers=JSONPATCH, expect=200)
    assert obj["metadata"]["annotations"] == {"example.com/note": "hi"}
    assert obj["metadata"]["finalizers"] == ["example.com/one", "example.com/two"]
    assert obj["data"] == {"c": "1", "d": "2"}
    status, doc = apiserver.json(
        "PATCH", cm_path(sq_ns, "jpe"), [{"op": "remove", "path": "/data/missing"}], headers=JSONPATCH
    )
    assert status == 422, doc
    assert_status(doc, 422)
    status, doc = apiserver.json("PATCH", cm_path(sq_ns, "jpe"), {"op": "not-a-list"}, headers=JSONPATCH)
    assert status == 400, doc
    assert_status(doc, 400, "BadRequest")
    apiserver.json("PATCH", cm_path(sq_ns, "jpe"), {"metadata": {"finalizers": None}}, headers=MERGE, expect=200)


def test_compacted_versions_are_410_gone(apiserver_etcd, etcd):
    """After storage compaction: Exact lists and continue tokens at older versions answer 410."""
    require_binary("etcdctl", "etcd-client")
    server = apiserver_etcd
    ns = uniq("ns")
    create_namespace(server, ns)
    for i in range(3):
        create_cm(server, ns, f"k{i}")
    _, page = server.json("GET", cm_path(ns) + "?limit=1", expect=200)
    old_rv = page["metadata"]["resourceVersion"]
    token = page["metadata"]["continue"]
    last = server.json("PATCH", cm_path(ns, "k0"), {"data": {"k": "new"}}, headers=MERGE, expect=200)[1]
    etcd.etcdctl("compact", last["metadata"]["resourceVersion"])

    status, doc = server.json("GET", cm_path(ns) + f"?resourceVersion={old_rv}&resourceVersionMatch=Exact")
    assert status == 410, doc
    assert_status(doc, 410, "Expired")
    status, doc = server.json("GET", cm_path(ns) + f"?limit=1&continue={quote(token)}")
    assert status == 410, doc
    assert_status(doc, 410, "Expired")
    # Fresh lists still work.
    assert list_names(server, cm_path(ns)) == ["k0", "k1", "k2"]


def test_create_right_after_namespace_deletion_is_refused(server):
    """Once a namespace's deletion is acknowledged, a create in it is refused at once,
    even before the watch cache has seen the deletion."""
    for i in range(10):
        name = f"race-{uuid.uuid4().hex[:8]}"
        server.json("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=201)
        create_cm(server, name, "keep")
        server.json("DELETE", f"/api/v1/namespaces/{name}", expect=(200, 202))
        status, doc = server.json("POST", cm_path(name), {"metadata": {"name": "late"}})
        assert status == 403, (i, doc)
        assert doc["reason"] == "Forbidden" and "being terminated" in doc["message"]


def test_created_objects_carry_upstream_defaults(apiserver, sq_ns):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "defaults"},
        "spec": {
            "containers": [
                {"name": "c", "image": "orch.local/busybox:1", "ports": [{"containerPort": 80}]},
                {"name": "latest", "image": "orch.local/busybox"},
            ]
        },
    }
    _, obj = apiserver.json("POST", f"/api/v1/namespaces/{sq_ns}/pods", pod, expect=201)
    spec = obj["spec"]
    assert spec["restartPolicy"] == "Always" and spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    first, second = spec["containers"]
    assert first["imagePullPolicy"] == "IfNotPresent" and second["imagePullPolicy"] == "Always"
    assert first["terminationMessagePath"] == "/dev/termination-log"
    assert first["ports"][0]["protocol"] == "TCP"
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "defaults"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]},
    }
    _, obj = apiserver.json("POST", f"/api/v1/namespaces/{sq_ns}/services", svc, expect=201)
    assert obj["spec"]["type"] == "ClusterIP" and obj["spec"]["sessionAffinity"] == "None"
    assert obj["spec"]["ports"][0]["protocol"] == "TCP" and obj["spec"]["ports"][0]["targetPort"] == 80
    # A PUT of what was read back is a no-op: defaults are stable.
    _, again = apiserver.json("PUT", f"/api/v1/namespaces/{sq_ns}/services/defaults", obj, expect=200)
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


def test_a_server_without_expressions_never_loads_the_engine(apiserver):
    # After this module's requests (none declares a policy, match condition or
    # validation rule), the expression engine and RE2 are not mapped into the server.
    maps = Path(f"/proc/{apiserver.pid}/maps").read_text()
    assert "cel_expr_python" not in maps and "/re2/" not in maps and "_re2" not in maps
