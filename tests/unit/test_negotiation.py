"""Accept-header negotiation and Table rendering."""

from __future__ import annotations

import pytest

from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.status import ApiError
from apiserver_min.server.negotiation import (
    JSON,
    YAML,
    Target,
    negotiate,
    parse_accept,
    table,
    validate_include_object,
)

# What kubectl get sends.
KUBECTL_TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def test_parse_accept():
    assert parse_accept(KUBECTL_TABLE_ACCEPT) == [
        ("application/json", {"as": "Table", "v": "v1", "g": "meta.k8s.io"}),
        ("application/json", {"as": "Table", "v": "v1beta1", "g": "meta.k8s.io"}),
        ("application/json", {}),
    ]
    assert parse_accept('Application/YAML; Q="0.5" , ,*/*') == [("application/yaml", {"q": "0.5"}), ("*/*", {})]
    assert parse_accept("application/json;q=0,application/yaml") == [("application/yaml", {})]


def test_kubectl_get_gets_a_v1_table_in_the_group_it_asked_for():
    t = negotiate(KUBECTL_TABLE_ACCEPT)
    assert t == Target("table", "meta.k8s.io", "v1")
    assert t.content_type == "application/json"


def test_table_in_the_project_group_and_v1beta1():
    assert negotiate(f"application/json;as=Table;v=v1;g={names.META_GROUP}") == Target("table", "meta.orch.io", "v1")
    assert negotiate("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == Target("table", "meta.k8s.io", "v1beta1")


def test_table_not_offered_falls_back_to_the_next_entry():
    assert negotiate(KUBECTL_TABLE_ACCEPT, table_ok=False) == JSON
    with pytest.raises(ApiError) as info:
        negotiate("application/json;as=Table;v=v1;g=meta.k8s.io", table_ok=False)
    assert info.value.code == 406


def test_unknown_table_group_or_version_is_skipped():
    assert negotiate("application/json;as=Table;v=v2;g=meta.k8s.io,application/yaml") == YAML
    with pytest.raises(ApiError) as info:
        negotiate("application/json;as=Table;v=v1;g=example.org")
    assert info.value.code == 406


@pytest.mark.parametrize(
    "header",
    [None, "", "  ", "*/*", "application/*", "application/json", "application/json, */*", "text/html;q=0.9,*/*;q=0.8"],
)
def test_json_by_default(header):
    assert negotiate(header) == JSON


@pytest.mark.parametrize(
    "header",
    [
        "application/yaml",
        "application/x-yaml",
        "text/yaml",
        "application/yaml;charset=utf-8",
        "application/yaml, application/json",
    ],
)
def test_yaml(header):
    t = negotiate(header)
    assert t == YAML and t.content_type == "application/yaml"


def test_yaml_not_offered():
    assert negotiate("application/yaml,application/json", yaml_ok=False) == JSON
    with pytest.raises(ApiError):
        negotiate("application/yaml", yaml_ok=False)


@pytest.mark.parametrize("header", ["text/html", "application/vnd.orch.protobuf;as=Table;v=v1;g=meta.k8s.io"])
def test_unservable_types_are_406_with_a_status(header):
    with pytest.raises(ApiError) as info:
        negotiate(header)
    e = info.value
    assert (e.code, e.reason) == (406, "NotAcceptable")
    assert "application/json" in e.message
    assert e.to_status()["kind"] == "Status"


def test_protobuf_both_spellings_and_table_fallback():
    for media in (names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM):
        target = negotiate(f"{media}, application/json")
        assert target.form == "protobuf"
    # No protobuf Table: the next choice, JSON.
    assert negotiate(f"{names.MEDIA_PROTOBUF};as=Table;v=v1;g=meta.k8s.io, application/json") == JSON
    # Callers that cannot encode protobuf (no schema) fall back the same way.
    assert negotiate(f"{names.MEDIA_PROTOBUF}, application/json", protobuf_ok=False) == JSON


def test_q_zero_entries_are_skipped():
    assert negotiate("application/json;q=0,application/yaml") == YAML
    assert negotiate("application/yaml;q=0,*/*") == JSON
    assert negotiate("application/json;as=Table;v=v1;g=meta.k8s.io;q=0.0,application/yaml") == YAML


def test_table_rendering():
    pods = REGISTRY.by_resource("", "v1", "pods")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "5"},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }
    target = Target("table", "meta.k8s.io", "v1")
    t = table(
        pods, [pod], target, validate_include_object(None), resource_version="9", continue_token="abc", remaining=3
    )
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 3}
    assert [c["name"] for c in t["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    (row,) = t["rows"]
    assert row["cells"][:4] == ["web", "0/1", "Pending", "0"]
    assert row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": pod["metadata"],
    }
    full = table(pods, [pod], target, "Object", with_columns=False)
    assert full["columnDefinitions"] == [] and full["rows"][0]["object"] is pod
    assert "object" not in table(pods, [pod], target, "None")["rows"][0]


def test_include_object_values():
    assert validate_include_object("") == "Metadata"
    assert validate_include_object("Object") == "Object"
    with pytest.raises(ApiError) as info:
        validate_include_object("Everything")
    assert info.value.code == 400 and "Everything" in info.value.message
