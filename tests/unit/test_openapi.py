"""OpenAPI documents derived from the kind schema declarations.

The documents are checked against the declarations they are generated from
(every list marker, every required field, every $ref resolvable) and against
upstream facts kubectl relies on (definition names, markers of well-known
fields, the patch operation with ``fieldValidation``); the HTTP side (hash
URLs, ETag, 304, 301, 406, gzip) through aiohttp's mocked requests.
"""

from __future__ import annotations

import gzip
import hashlib

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from apiserver_min.api import names
from apiserver_min.api import schema as S
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schemas import KIND_SCHEMAS
from apiserver_min.server import openapi as oa

REF = "#/components/schemas/"


def all_enabled(group: str, version: str, resource: str) -> bool:
    return True


@pytest.fixture(scope="module")
def api() -> oa.OpenAPI:
    return oa.OpenAPI(REGISTRY, all_enabled, REGISTRY.group_versions())


@pytest.fixture(scope="module")
def docs(api) -> dict[str, dict]:
    return {key: orjson.loads(body) for key, body in api.docs.items()}


@pytest.fixture(scope="module")
def core(docs) -> dict:
    return docs["api/v1"]


def schemas_of(doc: dict) -> dict:
    return doc["components"]["schemas"]


def resolve(doc: dict, schema: dict) -> dict:
    """Follow a $ref or a one-element allOf to the named definition."""
    if "allOf" in schema:
        schema = schema["allOf"][0]
    if "$ref" in schema:
        return schemas_of(doc)[schema["$ref"][len(REF) :]]
    return schema


def walk_refs(node, out: list[str]) -> list[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                out.append(v)
            else:
                walk_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            walk_refs(v, out)
    return out


# --- documents and index ---------------------------------------------------------------


def test_one_document_per_group_version_and_index_with_hashes(api, docs):
    expected = {("api/v1" if not g else f"apis/{g}/{v}") for g, v in REGISTRY.group_versions()}
    assert set(docs) == expected
    index = api.index()
    assert set(index["paths"]) == expected
    for key, entry in index["paths"].items():
        digest = hashlib.sha512(api.docs[key]).hexdigest().upper()
        assert entry["serverRelativeURL"] == f"/openapi/v3/{key}?hash={digest}"
    for doc in docs.values():
        assert doc["openapi"] == "3.0.0"
        assert doc["info"]["title"] == "orch" and doc["info"]["version"].startswith("v1.")


def test_every_reference_resolves_inside_its_document(docs):
    for key, doc in docs.items():
        refs = walk_refs(doc, [])
        assert refs, key
        for ref in refs:
            assert ref.startswith(REF), ref
            assert ref[len(REF) :] in schemas_of(doc), f"{key}: dangling {ref}"


def test_disabled_group_versions_and_resources_are_left_out():
    def enabled(group: str, version: str, resource: str) -> bool:
        return group != "batch" and resource != "secrets"

    gvs = [(g, v) for g, v in REGISTRY.group_versions() if g != "batch"]
    api = oa.OpenAPI(REGISTRY, enabled, gvs)
    assert "apis/batch/v1" not in api.docs
    core = orjson.loads(api.docs["api/v1"])
    assert not any("/secrets" in p for p in core["paths"])
    assert "/api/v1/namespaces/{namespace}/configmaps" in core["paths"]
    assert "/apis/batch/v1/namespaces/{namespace}/jobs" not in orjson.loads(api.v2)["paths"]


# --- component schemas ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,name,gvk",
    [
        ("api/v1", "io.k8s.api.core.v1.Pod", {"group": "", "kind": "Pod", "version": "v1"}),
        ("api/v1", "io.k8s.api.core.v1.PodList", {"group": "", "kind": "PodList", "version": "v1"}),
        ("apis/apps/v1", "io.k8s.api.apps.v1.Deployment", {"group": "apps", "kind": "Deployment", "version": "v1"}),
        ("apis/rbac.orch.io/v1", "io.k8s.api.rbac.v1.Role", {"group": "rbac.orch.io", "kind": "Role", "version": "v1"}),
        (
            "apis/coordination.orch.io/v1",
            "io.k8s.api.coordination.v1.Lease",
            {"group": "coordination.orch.io", "kind": "Lease", "version": "v1"},
        ),
        ("apis/apps/v1", "io.k8s.api.autoscaling.v1.Scale", {"group": "autoscaling", "kind": "Scale", "version": "v1"}),
    ],
)
def test_kinds_are_named_as_upstream_and_carry_their_gvk(docs, key, name, gvk):
    schema = schemas_of(docs[key])[name]
    assert gvk in schema["x-kubernetes-group-version-kind"]
    assert schema["type"] == "object"
    assert schema["properties"]["apiVersion"]["type"] == "string"
    assert schema["properties"]["kind"]["type"] == "string"


def test_the_one_struct_under_two_group_spellings_lists_both(docs):
    review = schemas_of(docs["apis/authentication.orch.io/v1"])["io.k8s.api.authentication.v1.TokenReview"]
    groups = {g["group"] for g in review["x-kubernetes-group-version-kind"]}
    assert groups == {names.AUTHENTICATION_GROUP, names.UPSTREAM_AUTHENTICATION_GROUP}


def test_pod_schema_follows_declarations(core):
    pod = schemas_of(core)["io.k8s.api.core.v1.Pod"]
    assert (
        resolve(core, pod["properties"]["metadata"])
        is schemas_of(core)["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
    )
    spec = resolve(core, pod["properties"]["spec"])
    containers = spec["properties"]["containers"]
    assert containers["type"] == "array"
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert "x-kubernetes-list-type" not in containers  # upstream v1.27 marks patch markers only
    assert containers["items"] == {"default": {}, "allOf": [{"$ref": REF + "io.k8s.api.core.v1.Container"}]}
    assert containers["description"]
    container = schemas_of(core)["io.k8s.api.core.v1.Container"]
    assert container["required"] == ["name"]
    assert container["properties"]["imagePullPolicy"]["enum"] == ["Always", "IfNotPresent", "Never"]
    ports = container["properties"]["ports"]
    assert ports["x-kubernetes-list-type"] == "map"
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert ports["x-kubernetes-patch-merge-key"] == "containerPort"
    port = schemas_of(core)["io.k8s.api.core.v1.ContainerPort"]
    assert port["required"] == ["containerPort"]
    assert port["properties"]["containerPort"]["type"] == "integer"
    assert port["properties"]["containerPort"]["format"] == "int32"
    assert port["properties"]["protocol"]["default"] == "TCP"
    volumes = spec["properties"]["volumes"]
    assert volumes["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    assert spec["properties"]["nodeSelector"]["x-kubernetes-map-type"] == "atomic"
    assert spec["properties"]["nodeSelector"]["additionalProperties"] == {"type": "string", "default": ""}


def test_meta_markers(core):
    meta = schemas_of(core)["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]
    assert meta["ownerReferences"]["x-kubernetes-patch-merge-key"] == "uid"
    assert meta["finalizers"]["x-kubernetes-patch-strategy"] == "merge"
    assert meta["creationTimestamp"]["allOf"] == [{"$ref": REF + "io.k8s.apimachinery.pkg.apis.meta.v1.Time"}]
    owner = schemas_of(core)["io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"]
    assert owner["x-kubernetes-map-type"] == "atomic"
    assert owner["required"] == ["apiVersion", "kind", "name", "uid"]


def test_named_scalars_as_upstream(core, docs):
    s = schemas_of(core)
    assert s["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    assert s["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["oneOf"] == [{"type": "integer"}, {"type": "string"}]
    assert s["io.k8s.apimachinery.pkg.api.resource.Quantity"]["oneOf"] == [{"type": "string"}, {"type": "number"}]
    time_def = s["io.k8s.apimachinery.pkg.apis.meta.v1.Time"]
    assert (time_def["type"], time_def["format"]) == ("string", "date-time")
    secret = s["io.k8s.api.core.v1.Secret"]["properties"]
    assert secret["data"]["additionalProperties"]["format"] == "byte"
    limits = s["io.k8s.api.core.v1.ResourceRequirements"]["properties"]["limits"]
    assert limits["additionalProperties"] == {"$ref": REF + "io.k8s.apimachinery.pkg.api.resource.Quantity"}
    apps = docs["apis/apps/v1"]
    rev = schemas_of(apps)["io.k8s.api.apps.v1.ControllerRevision"]["properties"]["data"]
    assert resolve(apps, rev) is schemas_of(apps)["io.k8s.apimachinery.pkg.runtime.RawExtension"]
    assert resolve(apps, rev)["type"] == "object"


def test_markers_and_required_match_every_declaration(docs):
    """Every declared struct in every document: required names and list markers as declared."""
    checked = 0
    for doc in docs.values():
        by_name = schemas_of(doc)
        for struct in S.iter_structs(list(KIND_SCHEMAS.values())):
            d = by_name.get(oa.definition_name(struct.name))
            if d is None:
                continue
            assert d.get("required", []) == list(struct.required), struct.name
            assert (d.get("x-kubernetes-map-type") == "atomic") == struct.atomic, struct.name
            for name, field in struct.json_fields().items():
                prop = d["properties"][name]
                t = field.type
                if isinstance(t, S.List):
                    checked += 1
                    assert prop["type"] == "array", (struct.name, name)
                    assert prop.get("x-kubernetes-list-type") == (t.list_type if t.marked else None)
                    if t.marked and t.list_type == "map":
                        assert prop["x-kubernetes-list-map-keys"] == list(t.map_keys)
                    assert prop.get("x-kubernetes-patch-merge-key") == t.patch_merge_key, (struct.name, name)
                    assert prop.get("x-kubernetes-patch-strategy") == t.patch_strategy, (struct.name, name)
                elif isinstance(t, S.Map):
                    assert prop["type"] == "object" and "additionalProperties" in prop
                elif isinstance(t, S.String) and t.enum:
                    assert prop["enum"] == list(t.enum)
                elif isinstance(t, S.Integer):
                    assert (prop["type"], prop["format"]) == ("integer", f"int{t.bits}")
                if field.map_type is not None:
                    assert prop["x-kubernetes-map-type"] == field.map_type
    assert checked > 100


def test_struct_patch_strategy_on_a_field(docs):
    spec = schemas_of(docs["apis/apps/v1"])["io.k8s.api.apps.v1.DeploymentSpec"]
    assert spec["properties"]["strategy"]["x-kubernetes-patch-strategy"] == "retainKeys"
    assert spec["properties"]["strategy"]["allOf"] == [{"$ref": REF + "io.k8s.api.apps.v1.DeploymentStrategy"}]
    assert spec["required"] == ["selector", "template"]


# --- paths ---------------------------------------------------------------------------------


def param_names(op: dict) -> list[str]:
    return [p["name"] for p in op.get("parameters", [])]


def test_pod_paths_and_the_patch_operation_kubectl_validates_with(core):
    coll = core["paths"]["/api/v1/namespaces/{namespace}/pods"]
    item = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
    assert {m for m in coll if m != "parameters"} == {"get", "post", "delete"}
    assert {m for m in item if m != "parameters"} == {"get", "put", "patch", "delete"}
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    patch = item["patch"]
    assert patch["x-kubernetes-group-version-kind"] == gvk
    assert patch["x-kubernetes-action"] == "patch"
    assert patch["operationId"] == "patchCoreV1NamespacedPod"
    assert {"dryRun", "fieldManager", "fieldValidation", "force"} <= set(param_names(patch))
    assert set(patch["requestBody"]["content"]) == {
        names.MEDIA_JSON_PATCH,
        names.MEDIA_MERGE_PATCH,
        names.MEDIA_STRATEGIC_MERGE_PATCH,
        names.MEDIA_APPLY_PATCH,
    }
    assert {"fieldValidation", "fieldManager", "dryRun"} <= set(param_names(coll["post"]))
    assert coll["post"]["responses"]["201"]["content"][names.MEDIA_JSON]["schema"] == {
        "$ref": REF + "io.k8s.api.core.v1.Pod"
    }
    assert {"labelSelector", "fieldSelector", "limit", "continue", "watch"} <= set(param_names(coll["get"]))
    assert coll["get"]["responses"]["200"]["content"][names.MEDIA_JSON]["schema"] == {
        "$ref": REF + "io.k8s.api.core.v1.PodList"
    }
    assert [p["name"] for p in item["parameters"]] == ["name", "namespace", "pretty"]
    assert core["paths"]["/api/v1/pods"]["get"]["operationId"] == "listCoreV1PodForAllNamespaces"
    assert core["paths"]["/api/v1/watch/namespaces/{namespace}/pods"]["get"]["x-kubernetes-action"] == "watchlist"


def test_subresources(core, docs):
    p = core["paths"]
    status = p["/api/v1/namespaces/{namespace}/pods/{name}/status"]
    assert {m for m in status if m != "parameters"} == {"get", "put", "patch"}
    assert "fieldValidation" in param_names(status["patch"])
    eviction = p["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]
    assert set(eviction) == {"post", "parameters"}
    assert eviction["post"]["x-kubernetes-group-version-kind"] == {
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
    }
    assert "io.k8s.api.policy.v1.Eviction" in schemas_of(core)
    binding = p["/api/v1/namespaces/{namespace}/pods/{name}/binding"]["post"]
    assert binding["x-kubernetes-group-version-kind"]["kind"] == "Binding"
    assert p["/api/v1/namespaces/{name}/finalize"].keys() == {"put", "parameters"}
    ephemeral = p["/api/v1/namespaces/{namespace}/pods/{name}/ephemeralcontainers"]
    assert {m for m in ephemeral if m != "parameters"} == {"get", "put", "patch"}
    assert ephemeral["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Pod"
    # The proxy sub-resources: one connect operation per HTTP method.
    for path in (
        "/api/v1/nodes/{name}/proxy",
        "/api/v1/namespaces/{namespace}/services/{name}/proxy",
        "/api/v1/namespaces/{namespace}/pods/{name}/proxy",
    ):
        assert {m for m in p[path] if m != "parameters"} == {"get", "post", "put", "patch", "delete"}, path
        assert p[path]["get"]["x-kubernetes-action"] == "connect"
    scale = docs["apis/apps/v1"]["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]
    assert scale["patch"]["x-kubernetes-group-version-kind"] == {
        "group": "autoscaling",
        "version": "v1",
        "kind": "Scale",
    }
    log = p["/api/v1/namespaces/{namespace}/pods/{name}/log"]["get"]
    assert {"container", "follow", "tailLines"} <= set(param_names(log))


def test_namespace_verbs_follow_the_registry(core):
    # Namespaces declare no deletecollection: the collection path has no DELETE.
    assert set(core["paths"]["/api/v1/namespaces"]) == {"get", "post", "parameters"}


@pytest.mark.parametrize(
    "key,path",
    [
        ("apis/authentication.orch.io/v1", "/apis/authentication.orch.io/v1/tokenreviews"),
        ("apis/authorization.orch.io/v1", "/apis/authorization.orch.io/v1/subjectaccessreviews"),
        (
            "apis/authorization.orch.io/v1",
            "/apis/authorization.orch.io/v1/namespaces/{namespace}/localsubjectaccessreviews",
        ),
    ],
)
def test_create_only_review_kinds_get_post_only(docs, key, path):
    doc = docs[key]
    assert set(doc["paths"][path]) == {"post", "parameters"}
    assert not any(p.startswith(path + "/") for p in doc["paths"])
    for entry in doc["paths"].values():
        assert "patch" not in entry and "get" not in entry and "delete" not in entry


def test_every_patch_operation_has_field_validation_and_a_gvk(docs):
    n = 0
    for doc in docs.values():
        for path, entry in doc["paths"].items():
            op = entry.get("patch")
            if op is None or op["x-kubernetes-action"] == "connect":
                continue
            n += 1
            assert "fieldValidation" in param_names(op), path
            assert set(op["x-kubernetes-group-version-kind"]) == {"group", "version", "kind"}
    assert n > 40


def test_operation_ids_are_unique(docs):
    for key, doc in docs.items():
        ids = [op["operationId"] for entry in doc["paths"].values() for m, op in entry.items() if m != "parameters"]
        assert len(ids) == len(set(ids)), key


# --- Swagger 2.0 ---------------------------------------------------------------------------


def test_swagger_document(api):
    doc = orjson.loads(api.v2)
    assert doc["swagger"] == "2.0"
    defs = doc["definitions"]
    for ref in walk_refs(doc, []):
        assert ref.startswith("#/definitions/") and ref[len("#/definitions/") :] in defs, ref
    assert defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"] == "string"
    assert defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    assert defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] == "string"
    meta = defs["io.k8s.api.core.v1.Pod"]["properties"]["metadata"]
    assert meta["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert "allOf" not in meta
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert names.MEDIA_STRATEGIC_MERGE_PATCH in patch["consumes"]
    body = [p for p in patch["parameters"] if p["in"] == "body"]
    assert body and body[0]["schema"]["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    fv = next(p for p in patch["parameters"] if p["name"] == "fieldValidation")
    assert fv == {**fv, "in": "query", "type": "string"}
    assert "/api/v1/namespaces/{namespace}/pods" in doc["paths"]
    assert "/apis/rbac.orch.io/v1/clusterroles" in doc["paths"]


# --- serving -------------------------------------------------------------------------------


def get(api, url: str, **headers):
    return api.handle(make_mocked_request("GET", url, headers=headers))


def test_index_and_documents_served_with_etags(api):
    resp = get(api, "/openapi/v3")
    assert resp.status == 200 and resp.content_type == "application/json"
    index = orjson.loads(resp.body)
    assert index == api.index()
    etag = resp.headers["Etag"]
    assert etag == '"' + hashlib.sha512(resp.body).hexdigest().upper() + '"'
    assert get(api, "/openapi/v3", **{"If-None-Match": etag}).status == 304

    url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
    resp = get(api, url)
    assert resp.status == 200
    assert resp.body == api.docs["apis/apps/v1"]
    assert resp.headers["Cache-Control"] == "public, immutable"
    assert "Expires" in resp.headers and resp.headers["Vary"].startswith("Accept")
    assert get(api, url, **{"If-None-Match": resp.headers["Etag"]}).status == 304

    plain = get(api, "/openapi/v3/apis/apps/v1")  # no hash: no long-lived caching
    assert plain.status == 200 and "Cache-Control" not in plain.headers
    assert plain.headers["Etag"] == resp.headers["Etag"]


def test_stale_hash_redirects_to_the_current_document(api):
    resp = get(api, "/openapi/v3/api/v1?hash=0123")
    assert resp.status == 301
    assert resp.headers["Location"] == api.index()["paths"]["api/v1"]["serverRelativeURL"]


def test_unknown_document_is_not_answered(api):
    assert get(api, "/openapi/v3/apis/nosuch/v1") is None
    assert not api.handles("/openapi/v4")


def test_v2_negotiation(api):
    resp = get(api, "/openapi/v2", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF)
    assert resp.status == 200 and resp.content_type == oa.MEDIA_OPENAPI_V2_PROTOBUF_OLD  # test_openapi_v2_protobuf
    resp = get(api, "/openapi/v2", Accept=f"{oa.MEDIA_OPENAPI_V2_PROTOBUF};q=0.5, application/json")
    assert resp.status == 200 and resp.content_type == "application/json"
    assert orjson.loads(resp.body)["swagger"] == "2.0"
    assert get(api, "/openapi/v2").status == 200  # no Accept: anything
    assert get(api, "/openapi/v2", Accept="application/json;q=0").status == 406
    assert get(api, "/openapi/v3/api/v1", Accept=oa.MEDIA_OPENAPI_V3_PROTOBUF).status == 406


def test_gzip_when_asked(api):
    resp = get(api, "/openapi/v3/api/v1", **{"Accept-Encoding": "gzip, deflate"})
    assert resp.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(resp.body) == api.docs["api/v1"]
    assert "Content-Encoding" not in get(api, "/openapi/v3/api/v1").headers


def test_only_reads_are_served(api):
    resp = api.handle(make_mocked_request("POST", "/openapi/v3"))
    assert resp.status == 405


def test_accept_parsing():
    assert oa._negotiate("application/xml, */*;q=0.1", ["application/json"]) == "application/json"
    assert oa._negotiate("text/html", ["application/json"]) is None
    assert oa._negotiate("application/*", ["application/json"]) == "application/json"
    assert oa._negotiate("", ["application/json"]) == "application/json"
