"""Custom resource definitions without a server: the value checks with upstream's
messages, pruning and defaults, the structural-schema and definition checks, the
kind registry growing at run time, and the watch cache adding a kind's cache."""

from __future__ import annotations

import asyncio
import copy

import orjson
import pytest

from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.apiextensions import values
from apiserver_min.apiextensions.definition import DefinitionStrategy, validate_spec
from apiserver_min.apiextensions.resource import CustomResourceStrategy, Definition, parse_path
from apiserver_min.apiextensions.structural import validate_schema
from apiserver_min.server.openapi import OpenAPI
from apiserver_min.server.routing import RequestInfo, StorageVersionAlias, storage_version_alias
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "string", "minLength": 1, "maxLength": 5},
                "cron": {"type": "string", "pattern": "^[0-9*]+$"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                "ratio": {"type": "number", "exclusiveMaximum": True, "maximum": 1, "multipleOf": 0.25},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "port": {"x-kubernetes-int-or-string": True},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "x-kubernetes-list-type": "set"},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "opt": {"type": "string", "nullable": True},
                "nested": {
                    "type": "object",
                    "default": {},
                    "properties": {"level": {"type": "integer", "default": 3}},
                },
            },
        }
    },
}


def messages(obj: dict) -> list[str]:
    return [e.message() for e in values.validate(obj, SCHEMA)]


def test_value_errors_read_as_upstream_writes_them():
    assert messages({"spec": {"image": "x", "replicas": 20}}) == [
        "spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10"
    ]
    assert messages({"spec": {"image": "x", "replicas": 0}}) == [
        "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
    ]
    assert messages({"spec": {"image": "x", "replicas": "two"}}) == [
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"'
    ]
    assert messages({"spec": {}}) == ["spec.image: Required value"]
    assert messages({"spec": {"image": "toolong"}}) == ["spec.image: Too long: may not be longer than 5"]
    assert messages({"spec": {"image": ""}}) == [
        'spec.image: Invalid value: "": spec.image in body should be at least 1 chars long'
    ]
    assert messages({"spec": {"image": "x", "cron": "often"}}) == [
        "spec.cron: Invalid value: \"often\": spec.cron in body should match '^[0-9*]+$'"
    ]
    assert messages({"spec": {"image": "x", "mode": "c"}}) == [
        'spec.mode: Unsupported value: "c": supported values: "a", "b"'
    ]
    assert messages({"spec": {"image": "x", "ratio": 1}}) == [
        "spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1"
    ]
    assert messages({"spec": {"image": "x", "ratio": 0.3}}) == [
        "spec.ratio: Invalid value: 0.3: spec.ratio in body should be a multiple of 0.25"
    ]
    assert messages({"spec": {"image": "x", "tags": ["a", "a"]}}) == ['spec.tags[1]: Duplicate value: "a"']
    assert messages({"spec": {"image": "x", "tags": ["a", "b", "c"]}}) == [
        "spec.tags: Too many: 3: must have at most 2 items"
    ]
    assert messages({"spec": {"image": "x", "ports": [{"name": "p"}, {"name": "p", "n": 1}]}}) == [
        'spec.ports[1]: Duplicate value: {"name":"p"}'
    ]
    assert messages({"spec": {"image": "x", "labels": {"a": "1", "b": 2}}}) == [
        "spec.labels: Too many: 2: must have at most 1 items",
        'spec.labels[b]: Invalid value: "integer": spec.labels[b] in body must be of type string: "integer"',
    ]
    assert messages({"spec": {"image": "x", "when": "yesterday"}}) == [
        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"'
    ]
    assert messages({"spec": {"image": "x", "port": True}}) == [
        'spec.port: Invalid value: "boolean": spec.port in body must be of type integer-or-string: "boolean"'
    ]
    assert (
        messages({"spec": {"image": "x", "image2": 1, "port": 80, "opt": None, "when": "2024-01-02T03:04:05Z"}}) == []
    )
    assert messages({"spec": {"image": None}}) == [
        'spec.image: Invalid value: "null": spec.image in body must be of type string: "null"'
    ]


def test_embedded_resources_keep_and_need_their_type():
    schema = {
        "type": "object",
        "properties": {
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}},
            }
        },
    }
    obj = {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": "1", "y": 2}}}
    assert values.prune(obj, schema) == ["template.spec.y"]
    assert obj["template"]["metadata"] == {"name": "p"} and values.validate(obj, schema) == []
    assert [e.message() for e in values.validate({"template": {"spec": {}}}, schema)] == [
        "template.apiVersion: Required value: must not be empty",
        "template.kind: Required value: must not be empty",
    ]


def test_pruning_keeps_type_meta_metadata_and_preserved_fields():
    obj = {
        "apiVersion": "x/v1",
        "kind": "K",
        "metadata": {"name": "n"},
        "top": 1,
        "spec": {"image": "i", "junk": {"a": 1}, "free": {"any": {"thing": [1]}}, "ports": [{"name": "a", "x": 1}]},
    }
    pruned = values.prune(obj, SCHEMA)
    assert sorted(pruned) == ["spec.junk", "spec.ports[0].x", "top"]
    assert obj == {
        "apiVersion": "x/v1",
        "kind": "K",
        "metadata": {"name": "n"},
        "spec": {"image": "i", "free": {"any": {"thing": [1]}}, "ports": [{"name": "a"}]},
    }
    probe = {"spec": {"image": "i", "bogus": 1}}
    assert values.unknown_fields(probe, SCHEMA) == ["spec.bogus"] and "bogus" in probe["spec"]


def test_defaults_fill_absent_fields_and_defaults_of_defaults():
    obj = {"spec": {"image": "i"}}
    values.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["replicas"] == 1 and obj["spec"]["nested"] == {"level": 3}
    obj = {"spec": {"image": "i", "replicas": 4, "nested": {"level": 7}}}
    values.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["replicas"] == 4 and obj["spec"]["nested"] == {"level": 7}
    obj = {"spec": {"image": "i", "replicas": None}}
    values.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["replicas"] == 1  # null where not nullable takes the default


def crd(**changes) -> dict:
    obj = {
        "apiVersion": "apiextensions.orch.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": SCHEMA}}],
        },
    }
    obj["spec"].update(changes)
    return obj


def spec_messages(obj: dict) -> list[str]:
    return [e.message() for e in validate_spec(obj)]


def test_definition_checks():
    assert spec_messages(crd()) == []
    assert spec_messages(crd(scope="Global")) == [
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"'
    ]
    assert spec_messages(crd(group="example")) == [
        'spec.group: Invalid value: "example": should be a domain with at least one dot',
        'metadata.name: Invalid value: "widgets.example.com": must be spec.names.plural+"."+spec.group',
    ]
    two = crd()
    two["spec"]["versions"].append(copy.deepcopy(two["spec"]["versions"][0]) | {"name": "v2"})
    assert any("must have exactly one version marked as storage version" in m for m in spec_messages(two))
    names_bad = crd(names={"plural": "Widgets", "kind": "Widget", "listKind": "Widget"})
    msgs = spec_messages(names_bad)
    assert any(m.startswith('spec.names.plural: Invalid value: "Widgets"') for m in msgs)
    assert 'spec.names.listKind: Invalid value: "Widget": kind and listKind may not be the same' in msgs
    assert spec_messages(crd(preserveUnknownFields=True)) == [
        "spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields "
        "to true in spec.versions[*].schema instead"
    ]
    assert spec_messages(crd(conversion={"strategy": "Webhook"})) == [
        "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
        "spec.conversion.conversionReviewVersions: Required value",
    ]
    both = {"url": "https://a.example/x", "service": {"namespace": "n", "name": "s"}}
    assert spec_messages(crd(conversion={"strategy": "Webhook", "webhook": {"clientConfig": both}})) == [
        "spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required",
        "spec.conversion.conversionReviewVersions: Required value",
    ]
    bad_url = {"clientConfig": {"url": "http://a.example/x?y=1"}, "conversionReviewVersions": ["v2", "v2"]}
    assert spec_messages(crd(conversion={"strategy": "Webhook", "webhook": bad_url})) == [
        "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
        'spec.conversion.webhookClientConfig.url: Invalid value: "y=1": query parameters are not permitted in the URL',
        'spec.conversion.conversionReviewVersions[1]: Invalid value: "v2": duplicate version',
        'spec.conversion.conversionReviewVersions: Invalid value: "v2,v2": must include at least one of v1, v1beta1',
    ]
    svc = {"clientConfig": {"service": {"name": "conv", "port": 0}}, "conversionReviewVersions": ["v1beta1"]}
    assert spec_messages(crd(conversion={"strategy": "Webhook", "webhook": svc})) == [
        "spec.conversion.webhookClientConfig.service.namespace: Required value: service namespace is required",
        "spec.conversion.webhookClientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 "
        "and 65535, inclusive",
    ]
    good = {"clientConfig": {"url": "https://a.example/convert"}, "conversionReviewVersions": ["v9", "v1"]}
    assert spec_messages(crd(conversion={"strategy": "Webhook", "webhook": good})) == []
    assert spec_messages(crd(conversion={"strategy": "None", "webhook": good})) == [
        "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook",
        "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook",
    ]


@pytest.mark.parametrize(
    "node, message",
    [
        (
            {"properties": {"a": {}}},
            "X.properties[a].type: Required value: must not be empty for specified object fields",
        ),
        (
            {"properties": {"a": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}}},
            "X.properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
        ),
        (
            {"properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}},
            "X.properties[metadata].properties[labels]: Forbidden: must not specify anything other than name and "
            "generateName",
        ),
        (
            {"properties": {"a": {"type": "string", "x-kubernetes-validations": [{"rule": "1"}]}}},
            'X.properties[a].x-kubernetes-validations[0].rule: Invalid value: "1": cel expression must evaluate to '
            "a bool",
        ),
        (
            {"properties": {"a": {"type": "string", "x-bogus": 1}}},
            "X.properties[a].x-bogus: Forbidden: unknown schema field 'x-bogus'",
        ),
        ({"properties": {"a": {"type": "array"}}}, "X.properties[a].items: Required value: must be specified"),
        (
            {"properties": {"a": {"type": "integer", "maximum": 3, "default": 5}}},
            "X.properties[a].default: Invalid value: 5: a in body should be less than or equal to 3",
        ),
        (
            {"properties": {"a": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "map"}}},
            "X.properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type "
            "is map",
        ),
    ],
)
def test_structural_schema_rules(node, message):
    msgs = [e.message() for e in validate_schema({"type": "object", **node}, "X")]
    assert message in msgs, msgs


def test_definition_strategy_adds_finalizer_defaults_and_stored_versions():
    kind = REGISTRY.by_resource("apiextensions.orch.io", "v1", "customresourcedefinitions")
    strategy = DefinitionStrategy(kind)
    obj = crd()
    strategy.prepare_for_create(obj)
    assert obj["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.orch.io"]
    assert obj["status"]["storedVersions"] == ["v1"]
    assert obj["spec"]["names"]["singular"] == "widget" and obj["spec"]["names"]["listKind"] == "WidgetList"
    assert obj["spec"]["conversion"] == {"strategy": "None"}
    new = copy.deepcopy(obj)
    new["spec"]["versions"][0]["storage"] = False
    new["spec"]["versions"].append({**copy.deepcopy(obj["spec"]["versions"][0]), "name": "v2", "storage": True})
    strategy.prepare_for_update(new, obj)
    assert new["status"]["storedVersions"] == ["v1", "v2"]


def test_custom_strategy_prunes_defaults_and_validates_by_version():
    obj = crd()
    obj["status"] = {"acceptedNames": {"plural": "widgets", "kind": "Widget"}}
    d = Definition.from_object(obj)
    kind = d.kinds()[0]
    assert (kind.resource, kind.kind, kind.list_kind, kind.namespaced) == ("widgets", "Widget", "WidgetList", True)
    assert [c.name for c in kind.columns] == ["Name", "Age"]
    s = CustomResourceStrategy(kind, d)
    w = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}}
    w["spec"] = {"image": "i", "junk": 1}
    w["metadata"]["bogus"] = 1
    assert s.unknown_fields(w) == ["metadata.bogus", "spec.junk"]
    s.prepare_for_create(w)
    assert "bogus" not in w["metadata"]
    assert w["spec"] == {"image": "i", "replicas": 1, "nested": {"level": 3}}
    assert s.validate(w) == []
    w["spec"]["replicas"] = 11
    assert [e.field for e in s.validate(w)] == ["spec.replicas"]


def test_simple_json_paths():
    assert parse_path(".spec.items[0].name") == ["spec", "items", 0, "name"]
    assert parse_path("{.status.replicas}") == ["status", "replicas"]
    assert parse_path("spec") is None


def test_registry_grows_and_shrinks_with_listeners():
    reg = REGISTRY.copy()
    seen = []
    reg.listeners.append(lambda added, removed: seen.append(([k.kind for k in added], [k.kind for k in removed])))
    d = Definition.from_object(crd())
    kinds = d.kinds()
    reg.replace(add=kinds)
    assert reg.by_resource("example.com", "v1", "widgets") is kinds[0]
    assert ("example.com", "v1") in reg.group_versions() and reg.resolve("widget") == kinds
    reg.replace(remove=kinds)
    assert reg.by_resource("example.com", "v1", "widgets") is None
    assert seen == [(["Widget"], []), ([], ["Widget"])]
    assert REGISTRY.by_resource("example.com", "v1", "widgets") is None  # the shared one is untouched


async def test_watch_cache_adds_a_kind_with_what_storage_holds(tmp_path):
    backend = SqliteBackend(str(tmp_path / "s.db"))
    await backend.start()
    kind = Definition.from_object(crd()).kinds()[0]
    prefix = key_prefix(kind)
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a", "namespace": "n"}}
    await backend.create(f"{prefix}n/a", encode_for_storage(obj))
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    await cache.start()
    try:
        assert cache.cache_for_key(f"{prefix}n/a") is None
        c = await cache.add_kind(kind)
        assert [e.name for e in c.sorted_entries()] == ["a"]
        obj["metadata"]["name"] = "b"
        rev = await backend.create(f"{prefix}n/b", encode_for_storage(obj))
        assert await cache.wait_for(rev, 5)
        await asyncio.sleep(0)
        assert [e.name for e in c.sorted_entries()] == ["a", "b"]
        cache.remove_kind(kind)
        assert cache.cache_for_key(f"{prefix}n/a") is None and prefix not in cache.caches
    finally:
        await cache.stop()
        await backend.close()


def test_openapi_serves_custom_kinds_from_their_schemas():
    reg = REGISTRY.copy()
    docs = OpenAPI(reg, lambda g, v, r="": True, [(g, v) for g, v in reg.group_versions()][:3])
    before = set(docs.hashes)
    obj = crd()
    obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {**SCHEMA, "description": "A widget."}
    kinds = Definition.from_object(obj).kinds()
    docs.set_custom_kinds(kinds)
    assert set(docs.hashes) - before == {"apis/example.com/v1"}
    v3 = orjson.loads(docs.docs["apis/example.com/v1"])
    widget = v3["components"]["schemas"]["com.example.v1.Widget"]
    assert widget["description"] == "A widget." and widget["x-kubernetes-group-version-kind"] == [
        {"group": "example.com", "version": "v1", "kind": "Widget"}
    ]
    assert widget["properties"]["spec"]["properties"]["replicas"]["maximum"] == 10
    patch = v3["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert any(p["name"] == "fieldValidation" for p in patch["parameters"])
    # No strategic merge patch for custom resources: kubectl's apply sends a merge patch.
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    v2 = orjson.loads(docs.v2)
    assert "com.example.v1.Widget" in v2["definitions"] and "/apis/example.com/v1/widgets" in v2["paths"]
    docs.set_custom_kinds([])
    assert set(docs.hashes) == before and "com.example.v1.Widget" not in orjson.loads(docs.v2)["definitions"]


def test_reads_in_another_version_are_rewritten_and_defaulted():
    alias = StorageVersionAlias("example.com", "example.com", "v1beta1", "v1", SCHEMA, "Widget")
    stored = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"image": "i"}}
    lst = {"apiVersion": "example.com/v1beta1", "kind": "WidgetList", "items": [copy.deepcopy(stored)]}
    alias.to_requested(lst)
    assert lst["items"][0]["apiVersion"] == "example.com/v1beta1" and lst["items"][0]["spec"]["replicas"] == 1
    assert "spec" not in lst  # the list itself is not an object of the kind
    assert alias.to_served({"apiVersion": "example.com/v1beta1"}) == {"apiVersion": "example.com/v1beta1"}


def test_writes_in_the_storage_version_answer_with_the_object_written():
    obj = crd()
    obj["status"] = {"acceptedNames": {"plural": "widgets", "kind": "Widget"}}
    kind = Definition.from_object(obj).kinds()[0]
    # Reads default what was stored before a default was declared; a create or update
    # answers with what it just pruned and defaulted in this version.
    for verb in ("get", "list", "watch", "patch", "delete"):
        assert isinstance(storage_version_alias(RequestInfo(True, "", verb, kind=kind)), StorageVersionAlias)
    for verb in ("create", "update"):
        assert storage_version_alias(RequestInfo(True, "", verb, kind=kind)) is None
