"""Stored-object encoding, resourceVersion splicing and the strict YAML loader."""

from __future__ import annotations

import json

import orjson
import pytest

from apiserver_min.api import codec
from apiserver_min.api.status import ApiError


def test_splice_rv_into_empty_metadata():
    raw = b'{"apiVersion":"v1","kind":"Namespace","metadata":{}}'
    out = codec.splice_rv(raw, 7)
    assert out == b'{"apiVersion":"v1","kind":"Namespace","metadata":{"resourceVersion":"7"}}'
    assert json.loads(out)["metadata"] == {"resourceVersion": "7"}


def test_splice_rv_into_metadata_with_fields():
    raw = codec.encode_for_storage(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }
    )
    out = codec.splice_rv(raw, 123456)
    obj = json.loads(out)
    assert obj["metadata"] == {"resourceVersion": "123456", "name": "web", "namespace": "default"}
    assert obj["spec"] == {"containers": [{"name": "c", "image": "i"}]}
    assert list(obj) == ["apiVersion", "kind", "metadata", "spec"]


def test_splice_rv_only_touches_the_top_level_metadata():
    # A nested "metadata":{ (a pod template) comes after the object's own metadata.
    raw = codec.encode_for_storage(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}}},
        }
    )
    obj = json.loads(codec.splice_rv(raw, 5))
    assert obj["metadata"]["resourceVersion"] == "5"
    assert "resourceVersion" not in obj["spec"]["template"]["metadata"]


def test_splice_rv_leaves_foreign_bytes_alone():
    assert codec.splice_rv(b'{"a":1}', 3) == b'{"a":1}'
    assert codec.splice_rv(b"", 3) == b""


def test_decode_stored_sets_the_version():
    obj = codec.decode_stored(b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}', 9)
    assert obj["metadata"] == {"name": "c", "resourceVersion": "9"}
    obj = codec.decode_stored(b'{"kind":"X"}', 2)
    assert obj["metadata"] == {"resourceVersion": "2"}


def test_encode_for_storage_drops_resource_version_and_orders_keys():
    obj = {
        "spec": {"x": 1},
        "status": {},
        "metadata": {"resourceVersion": "42", "name": "n", "uid": "u"},
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "data": {"k": "v"},
    }
    raw = codec.encode_for_storage(obj)
    assert raw.startswith(b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{')
    decoded = json.loads(raw)
    assert list(decoded) == ["apiVersion", "kind", "metadata", "spec", "status", "data"]
    assert decoded["metadata"] == {"name": "n", "uid": "u"}
    # The caller's object is not changed.
    assert obj["metadata"]["resourceVersion"] == "42"


def test_encode_for_storage_without_metadata():
    raw = codec.encode_for_storage({"kind": "Namespace", "apiVersion": "v1"})
    assert raw == b'{"apiVersion":"v1","kind":"Namespace","metadata":{}}'
    assert codec.splice_rv(raw, 1) == b'{"apiVersion":"v1","kind":"Namespace","metadata":{"resourceVersion":"1"}}'


def test_round_trip_through_storage():
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "labels": {"a": "b"}},
        "type": "Opaque",
        "data": {"k": "dg=="},
    }
    stored = codec.encode_for_storage(obj)
    assert orjson.loads(codec.splice_rv(stored, 11)) == codec.decode_stored(stored, 11)
    assert codec.decode_stored(stored, 11) == {**obj, "metadata": {**obj["metadata"], "resourceVersion": "11"}}


def test_yaml_loader_rejects_duplicate_keys_naming_the_key():
    body = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n"
    with pytest.raises(codec.DecodeError) as info:
        codec.load_yaml(body)
    message = str(info.value)
    assert "duplicate field 'name'" in message
    assert "line 5" in message  # where the second one is


def test_yaml_loader_rejects_duplicate_top_level_keys():
    with pytest.raises(codec.DecodeError, match="duplicate field 'kind'"):
        codec.load_yaml(b"kind: Pod\nkind: Service\n")


def test_yaml_loader_keeps_timestamps_and_dates_as_strings():
    obj = codec.load_yaml(
        b"metadata:\n  creationTimestamp: 2024-05-01T12:00:00Z\n"
        b"  day: 2024-05-01\n  spaced: 2001-12-14 21:59:43.10 -5\n"
    )
    assert obj["metadata"] == {
        "creationTimestamp": "2024-05-01T12:00:00Z",
        "day": "2024-05-01",
        "spaced": "2001-12-14 21:59:43.10 -5",
    }


def test_yaml_loader_is_safe_and_keeps_other_scalars():
    obj = codec.load_yaml(b"a: 1\nb: true\nc: null\nd: '1'\ne: 1.5\nf: [x, y]\n")
    assert obj == {"a": 1, "b": True, "c": None, "d": "1", "e": 1.5, "f": ["x", "y"]}
    with pytest.raises(codec.DecodeError):
        codec.load_yaml(b"a: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(codec.DecodeError, match="not UTF-8"):
        codec.load_yaml(b"a: \xff\xfe\n")


def test_decode_body_by_media_type():
    assert codec.decode_body(b'{"a": 1}', "application/json") == {"a": 1}
    assert codec.decode_body(b"a: 1\n", "application/yaml") == {"a": 1}
    with pytest.raises(ApiError) as info:
        codec.decode_body(b"   ", "application/json")
    assert info.value.code == 400
    with pytest.raises(ApiError) as info:
        codec.decode_body(b"{not json", "application/json")
    assert info.value.code == 400 and "error decoding JSON body" in info.value.message
    with pytest.raises(ApiError) as info:
        codec.decode_body(b"a: 1\na: 2\n", "application/yaml")
    assert info.value.code == 400 and "duplicate field 'a'" in info.value.message


def test_dumps():
    assert codec.dumps({"a": [1, "x"]}) == b'{"a":[1,"x"]}'
    assert codec.dumps_pretty({"a": 1}) == b'{\n  "a": 1\n}\n'
    assert codec.dump_yaml({"kind": "Pod", "apiVersion": "v1"}) == b"kind: Pod\napiVersion: v1\n"
