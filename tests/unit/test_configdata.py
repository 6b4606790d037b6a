"""Secrets and ConfigMaps in the registry: stringData, keys, immutability, required keys."""

from __future__ import annotations

from apiserver_min.api.kinds import REGISTRY
from apiserver_min.registry.families import strategy_for

SECRETS = strategy_for(REGISTRY.by_resource("", "v1", "secrets"))
CONFIGMAPS = strategy_for(REGISTRY.by_resource("", "v1", "configmaps"))


def fields(errs):
    return {(e.field, e.type) for e in errs}


def test_string_data_is_merged_into_data_and_dropped():
    obj = {"metadata": {"name": "s", "namespace": "n"}, "data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "hi"}}
    SECRETS.prepare_for_create(obj)
    assert "stringData" not in obj
    assert obj["data"] == {"a": "eA==", "b": "aGk="}
    old = dict(obj, metadata=dict(obj["metadata"], resourceVersion="1"))
    new = {"metadata": {"name": "s", "namespace": "n"}, "stringData": {"c": "x"}}
    SECRETS.prepare_for_update(new, old)
    assert new["data"] == {"c": "eA=="} and "stringData" not in new


def test_secret_keys_types_and_immutability():
    bad = {"metadata": {"name": "s", "namespace": "n"}, "data": {"bad key": "eA=="}}
    assert ("data[bad key]", "FieldValueInvalid") in fields(SECRETS.validate(bad))
    for spelling in ("kubernetes.io/tls", "orch.io/tls"):
        tls = {"metadata": {"name": "t", "namespace": "n"}, "type": spelling, "data": {"tls.crt": "eA=="}}
        assert ("data[tls.key]", "FieldValueRequired") in fields(SECRETS.validate(tls))
    old = {"metadata": {"name": "s", "namespace": "n"}, "type": "Opaque", "data": {"a": "eA=="}, "immutable": True}
    new = dict(old, data={"a": "eQ=="}, type="orch.io/basic-auth")
    got = fields(SECRETS.validate_update(new, old))
    assert ("data", "FieldValueForbidden") in got and ("type", "FieldValueInvalid") in got


def test_configmap_keys_and_duplicates():
    cm = {"metadata": {"name": "c", "namespace": "n"}, "data": {"k": "v", "../x": "v"}, "binaryData": {"k": "eA=="}}
    got = fields(CONFIGMAPS.validate(cm))
    assert ("data[../x]", "FieldValueInvalid") in got and ("data[k]", "FieldValueInvalid") in got
    old = {"metadata": {"name": "c", "namespace": "n"}, "data": {"k": "v"}, "immutable": True}
    assert ("data", "FieldValueForbidden") in fields(CONFIGMAPS.validate_update(dict(old, data={"k": "w"}), old))
    assert fields(CONFIGMAPS.validate_update(dict(old), old)) == set()
