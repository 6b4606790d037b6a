"""Custom resource schemas with junctors, formats and typed validation rules against
the real server and kubectl: a definition using oneOf/anyOf/not is applied and
becomes Established; its objects are accepted or refused with upstream's messages;
definitions breaking the junctors' structural rules or misusing a field's type in a
rule are refused when applied."""

from __future__ import annotations

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import Kubectl, create_namespace
from tests.helpers import uniq

GROUP = "junctors.example.com"
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def route_crd(plural: str = "routes", kind: str = "Route", spec_extra: dict | None = None) -> dict:
    spec = {
        "type": "object",
        "description": "Where traffic goes: a host or an address, never both.",
        "properties": {
            "host": {"type": "string", "format": "hostname"},
            "address": {"type": "string", "format": "ipv4"},
            "weight": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 0"}]},
            "id": {"type": "string", "format": "uuid"},
        },
        "oneOf": [{"required": ["host"]}, {"required": ["address"]}],
        "anyOf": [{"properties": {"weight": {"maximum": 100}}}, {"properties": {"weight": {"multipleOf": 1000}}}],
        "not": {"properties": {"host": {"enum": ["forbidden.example.com"]}}, "required": ["host"]},
        **(spec_extra or {}),
    }
    return {
        "apiVersion": f"{names.APIEXTENSIONS_GROUP}/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
                }
            ],
        },
    }


def route(name: str, **spec) -> str:
    return yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": "Route", "metadata": {"name": name}, "spec": spec})


@pytest.fixture(scope="module")
def kctl(apiserver, tmp_path_factory):
    k = Kubectl(apiserver, tmp_path_factory.mktemp("kubectl-junctors"))
    k("apply", "-f", "-", input=yaml.safe_dump(route_crd()), check=True)
    k("wait", "--for=condition=Established", f"crd/routes.{GROUP}", "--timeout=10s", check=True)
    return k


@pytest.fixture(scope="module")
def ns(apiserver):
    name = uniq("junctors")
    create_namespace(apiserver, name)
    return name


def test_objects_accepted_and_refused_by_junctors_and_formats(kctl, ns):
    ok = kctl("-n", ns, "apply", "-f", "-", input=route("by-host", host="a.example.com", weight=5))
    assert ok.returncode == 0, ok.stderr
    ok = kctl("-n", ns, "apply", "-f", "-", input=route("by-address", address="10.1.2.3", weight=3000))
    assert ok.returncode == 0, ok.stderr
    cases = [
        (route("both", host="a.example.com", address="10.1.2.3"), "(oneOf). Found 2 valid alternatives"),
        (route("neither", weight=1), '"spec" must validate one and only one schema (oneOf). Found none valid'),
        (route("heavy", host="a.example.com", weight=150), '"spec" must validate at least one schema (anyOf)'),
        (route("banned", host="forbidden.example.com"), '"spec" must not validate the schema (not)'),
        (route("bad-ip", address="10.1.2"), 'spec.address in body must be of type ipv4: "10.1.2"'),
        (route("bad-host", host="-x-"), 'spec.host in body must be of type hostname: "-x-"'),
        (route("bad-id", host="a.example.com", id="nope"), 'spec.id in body must be of type uuid: "nope"'),
    ]
    for body, message in cases:
        r = kctl("-n", ns, "apply", "-f", "-", input=body)
        assert r.returncode != 0 and message in r.stderr, (message, r.stderr)
    listed = kctl("-n", ns, "get", "routes", "-o", "name", check=True).stdout.split()
    assert sorted(listed) == [f"route.{GROUP}/by-address", f"route.{GROUP}/by-host"]


def test_schema_documents_and_explain(apiserver, kctl):
    assert "a host or an address, never both" in kctl("explain", "routes.spec", check=True).stdout
    _, doc = apiserver.json("GET", f"/openapi/v3/apis/{GROUP}/v1", expect=200)
    spec = doc["components"]["schemas"]["com.example.junctors.v1.Route"]["properties"]["spec"]
    assert spec["oneOf"] == [{"required": ["host"]}, {"required": ["address"]}]
    status, _, body = apiserver.request("GET", "/openapi/v2", headers={"Accept": PROTOBUF_V2})
    assert status == 200 and body  # Swagger 2.0 has no oneOf/anyOf/not: they are left out, not an error
    _, v2 = apiserver.json("GET", "/openapi/v2", expect=200)
    v2_spec = v2["definitions"]["com.example.junctors.v1.Route"]["properties"]["spec"]
    assert not {"oneOf", "anyOf", "not"} & set(v2_spec)


def test_definitions_breaking_the_rules_are_refused(kctl):
    typed = route_crd("typos", "Typo")
    typed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "self.weight > 'a'"}
    ]
    r = kctl("apply", "-f", "-", input=yaml.safe_dump(typed))
    assert r.returncode != 0
    assert (
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: "
        "Invalid value: \"self.weight > 'a'\": compilation failed: ERROR: <input>:1:13: found no matching overload "
        "for '_>_' applied to '(int, string)'"
    ) in r.stderr, r.stderr
    typed_in_junctor = route_crd("typeds", "Typed", {"allOf": [{"type": "object", "properties": {"extra": {}}}]})
    r = kctl("apply", "-f", "-", input=yaml.safe_dump(typed_in_junctor))
    assert r.returncode != 0
    prefix = "spec.versions[0].schema.openAPIV3Schema.properties[spec]"
    assert f"{prefix}.allOf[0].type: Forbidden: must be empty to be structural" in r.stderr, r.stderr
    assert (
        f"{prefix}.properties[extra]: Required value: because it is defined in {prefix}.allOf[0].properties[extra]"
    ) in r.stderr, r.stderr
    assert kctl("get", "crd", "-o", "name", check=True).stdout.count(GROUP) == 1
