"""Custom resource definitions against the real server, kubectl and the kubernetes
Python client: a CronTab definition is applied, becomes Established, and its objects
are created, listed with the printer columns, defaulted, pruned, refused with the
schema's messages; status changes only through the status sub-resource; the scale
sub-resource serves ``kubectl scale``; deleting the definition deletes its objects.
A restarted server serves the definition again; a second server on the same etcd
serves a definition created on the first."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import ApiServerProcess, Kubectl, create_namespace, free_port, kubectl_binary
from tests.helpers import uniq, wait_for

GROUP = "stable.example.com"
CRD_PATH = f"/apis/{names.APIEXTENSIONS_GROUP}/v1/customresourcedefinitions"


def crontab_crd(plural: str = "crontabs", kind: str = "CronTab", short: str = "ct") -> dict:
    return {
        "apiVersion": f"{names.APIEXTENSIONS_GROUP}/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "shortNames": [short],
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.labelSelector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                        {"name": "Image", "type": "string", "jsonPath": ".spec.image", "priority": 1},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A CronTab runs an image on a schedule.",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "cronSpec": {
                                            "type": "string",
                                            "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$",
                                            "description": "The schedule, in cron format.",
                                        },
                                        "image": {"type": "string", "description": "The image to run."},
                                        "replicas": {
                                            "type": "integer",
                                            "minimum": 1,
                                            "maximum": 10,
                                            "default": 1,
                                        },
                                        "tags": {
                                            "type": "array",
                                            "items": {"type": "string"},
                                            "x-kubernetes-list-type": "set",
                                        },
                                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                        "ports": {
                                            "type": "array",
                                            "x-kubernetes-list-type": "map",
                                            "x-kubernetes-list-map-keys": ["name"],
                                            "items": {
                                                "type": "object",
                                                "required": ["name"],
                                                "properties": {
                                                    "name": {"type": "string"},
                                                    "port": {"type": "integer"},
                                                },
                                            },
                                        },
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "replicas": {"type": "integer"},
                                        "labelSelector": {"type": "string"},
                                        "phase": {"type": "string"},
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def crontab(name: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": "CronTab", "metadata": {"name": name}, "spec": spec}


def wait_established(server: ApiServerProcess, name: str, timeout: float = 10.0) -> dict:
    def established():
        status, crd = server.json("GET", f"{CRD_PATH}/{name}")
        if status != 200:
            return None
        for c in (crd.get("status") or {}).get("conditions") or ():
            if c["type"] == "Established" and c["status"] == "True":
                return crd
        return None

    return wait_for(established, timeout=timeout, what=f"{name} Established")


def served(server: ApiServerProcess, plural: str = "crontabs") -> bool:
    status, doc = server.json("GET", f"/apis/{GROUP}/v1")
    return status == 200 and any(r["name"] == plural for r in doc["resources"])


@pytest.fixture(scope="module")
def kctl(apiserver, tmp_path_factory):
    return Kubectl(apiserver, tmp_path_factory.mktemp("kubectl-crd"))


@pytest.fixture(scope="module")
def crd(apiserver, kctl):
    kctl("apply", "-f", "-", input=yaml.safe_dump(crontab_crd()), check=True)
    kctl("wait", "--for=condition=Established", f"crd/crontabs.{GROUP}", "--timeout=10s", check=True)
    yield f"crontabs.{GROUP}"


@pytest.fixture
def ns(apiserver):
    name = uniq("crd")
    create_namespace(apiserver, name)
    return name


def test_definition_status_names_and_finalizer(apiserver, kctl, crd):
    assert "The plural name of the resource" in kctl("explain", "crd.spec.names.plural", check=True).stdout
    _, obj = apiserver.json("GET", f"{CRD_PATH}/{crd}", expect=200)
    assert names.CRD_CLEANUP_FINALIZER in obj["metadata"]["finalizers"]
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["NamesAccepted"]["status"] == "True" and conds["NamesAccepted"]["reason"] == "NoConflicts"
    assert conds["Established"]["reason"] == "InitialNamesAccepted"
    assert obj["status"]["acceptedNames"]["plural"] == "crontabs"
    assert obj["status"]["acceptedNames"]["shortNames"] == ["ct"]
    assert obj["status"]["storedVersions"] == ["v1"]
    assert obj["spec"]["names"]["listKind"] == "CronTabList"
    # The upstream spelling kubectl hard-codes serves the same definitions.
    _, lst = apiserver.json("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", expect=200)
    assert lst["apiVersion"] == "apiextensions.k8s.io/v1" and crd in [i["metadata"]["name"] for i in lst["items"]]
    _, doc = apiserver.json("GET", f"/apis/{GROUP}/v1", expect=200)
    res = {r["name"]: r for r in doc["resources"]}
    assert res["crontabs"]["shortNames"] == ["ct"] and res["crontabs"]["categories"] == ["all"]
    assert res["crontabs"]["kind"] == "CronTab" and res["crontabs"]["namespaced"] is True
    assert set(res) == {"crontabs", "crontabs/status", "crontabs/scale"}


def test_kubectl_objects_columns_defaults_and_errors(apiserver, kctl, crd, ns):
    good = crontab("nightly", cronSpec="* * * * */5", image="busybox")
    kctl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(good), check=True)
    out = kctl("-n", ns, "get", "ct", check=True).stdout.split("\n")
    assert out[0].split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
    assert out[1].split()[:4] == ["nightly", "*", "*", "*"] and out[1].split()[6] == "1"
    kctl("-n", ns, "label", "ct", "nightly", "tier=batch", check=True)
    kctl("-n", ns, "annotate", "ct", "nightly", "note=x", check=True)
    assert kctl("-n", ns, "get", "ct", "-l", "tier=batch", "-o", "name", check=True).stdout.strip() == (
        "crontab.stable.example.com/nightly"
    )
    r = kctl("-n", ns, "patch", "ct", "nightly", "-p", '{"spec":{"image":"z"}}')
    assert r.returncode != 0 and "application/merge-patch+json" in r.stderr, r.stderr
    wide = kctl("-n", ns, "get", "crontabs", "-o", "wide", check=True).stdout.split("\n")[0].split()
    assert wide == ["NAME", "SPEC", "REPLICAS", "IMAGE", "AGE"]
    assert "crontab.stable.example.com/nightly" in kctl("-n", ns, "get", "all", check=True).stdout
    got = json.loads(kctl("-n", ns, "get", "ct", "nightly", "-o", "json", check=True).stdout)
    assert got["spec"]["replicas"] == 1  # the schema's default
    good["spec"]["image"] = "busybox:2"
    kctl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(good), check=True)  # a merge patch
    assert json.loads(kctl("-n", ns, "get", "ct", "nightly", "-o", "json", check=True).stdout)["spec"]["image"] == (
        "busybox:2"
    )
    bad = crontab("toomany", cronSpec="* * * * */5", replicas=20)
    r = kctl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(bad))
    assert r.returncode != 0
    assert "spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10" in r.stderr
    r = kctl("-n", ns, "create", "-f", "-", input=yaml.safe_dump(crontab("badspec", cronSpec="often")))
    assert "spec.cronSpec in body should match" in r.stderr, r.stderr
    # kubectl leaves field validation to the server (Strict): unknown fields are refused.
    r = kctl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(crontab("strict", cronSpec="* * * * *", bogus=1)))
    assert r.returncode != 0 and 'strict decoding error: unknown field "spec.bogus"' in r.stderr, r.stderr
    r = kctl(
        "-n", ns, "apply", "--validate=warn", "-f", "-",
        input=yaml.safe_dump(crontab("warned", cronSpec="* * * * *", bogus=1)),
    )  # fmt: skip
    assert r.returncode == 0 and 'unknown field "spec.bogus"' in r.stderr, r.stderr
    # Unknown fields sent past kubectl's own check are pruned (extra keeps its own).
    unknown = crontab("pruned", cronSpec="* * * * *", bogus=1, extra={"anything": {"goes": True}})
    unknown["topLevel"] = "x"
    kctl("-n", ns, "create", "--validate=false", "-f", "-", input=yaml.safe_dump(unknown), check=True)
    _, stored = apiserver.json("GET", f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs/pruned", expect=200)
    assert "bogus" not in stored["spec"] and "topLevel" not in stored
    assert stored["spec"]["extra"] == {"anything": {"goes": True}}


def test_repeated_keys_are_duplicate_fields_per_field_validation(apiserver, crd, ns):
    path = f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs"
    ctype = {"Content-Type": "application/json"}

    def body(name: str) -> bytes:
        return (
            b'{"apiVersion":"%s/v1","kind":"CronTab","metadata":{"name":"%s"},'
            b'"spec":{"cronSpec":"* * * * *","image":"a","image":"b"}}' % (GROUP.encode(), name.encode())
        )

    status, _, data = apiserver.request("POST", f"{path}?fieldValidation=Strict", body("strict"), ctype)
    assert status == 400 and b'strict decoding error: duplicate field \\"spec.image\\"' in data, data
    status, headers, _ = apiserver.request("POST", f"{path}?fieldValidation=Warn", body("warned"), ctype)
    assert status == 201 and 'duplicate field \\"spec.image\\"' in headers.get("warning", ""), headers
    status, headers, _ = apiserver.request("POST", f"{path}?fieldValidation=Ignore", body("ignored"), ctype)
    assert status == 201 and "warning" not in headers, headers
    for name in ("warned", "ignored"):  # the last value of a repeated key stands
        assert apiserver.json("GET", f"{path}/{name}", expect=200)[1]["spec"]["image"] == "b"
    # A merge patch repeating a key is judged the same way.
    patch = b'{"spec":{"image":"c","image":"d"}}'
    merge = {"Content-Type": "application/merge-patch+json"}
    status, _, data = apiserver.request("PATCH", f"{path}/warned?fieldValidation=Strict", patch, merge)
    assert status == 400 and b'duplicate field \\"spec.image\\"' in data, data
    status, headers, _ = apiserver.request("PATCH", f"{path}/warned?fieldValidation=Warn", patch, merge)
    assert status == 200 and 'duplicate field \\"spec.image\\"' in headers.get("warning", ""), headers


def test_status_subresource_and_scale(apiserver, kctl, crd, ns):
    base = f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs"
    apiserver.json("POST", base, crontab("s1", cronSpec="* * * * *", replicas=2), expect=201)
    # The main resource ignores status; the status sub-resource ignores everything else.
    patch = {"spec": {"image": "x"}, "status": {"phase": "Running"}}
    hdr = {"Content-Type": "application/merge-patch+json"}
    _, obj = apiserver.json("PATCH", f"{base}/s1", patch, hdr, expect=200)
    assert obj["spec"]["image"] == "x" and "status" not in obj
    kctl(
        "-n", ns, "patch", "ct", "s1", "--subresource=status", "--type=merge", "-p",
        json.dumps({"spec": {"image": "y"}, "status": {"phase": "Running", "replicas": 2}}), check=True,
    )  # fmt: skip
    _, obj = apiserver.json("GET", f"{base}/s1", expect=200)
    assert obj["status"] == {"phase": "Running", "replicas": 2} and obj["spec"]["image"] == "x"
    kctl("-n", ns, "scale", "crontab/s1", "--replicas=5", check=True)
    _, scale = apiserver.json("GET", f"{base}/s1/scale", expect=200)
    assert scale["spec"]["replicas"] == 5 and scale["status"]["replicas"] == 2
    # Protobuf is not offered for custom resources.
    status, _, _ = apiserver.request("GET", f"{base}/s1", headers={"Accept": names.MEDIA_PROTOBUF_UPSTREAM})
    assert status == 406
    status, _, _ = apiserver.request(
        "PATCH", f"{base}/s1", b"{}", headers={"Content-Type": "application/strategic-merge-patch+json"}
    )
    assert status == 415


def test_namespace_deletion_deletes_its_custom_resources(apiserver, kctl, crd):
    ns = uniq("crdns")
    create_namespace(apiserver, ns)
    apiserver.json("POST", f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs", crontab("c", cronSpec="* * * * *"), expect=201)
    assert kctl("get", "crd", check=True).stdout.split("\n")[0].split() == ["NAME", "CREATED", "AT"]
    apiserver.json("DELETE", f"/api/v1/namespaces/{ns}", expect=200)
    wait_for(lambda: apiserver.json("GET", f"/api/v1/namespaces/{ns}")[0] == 404, timeout=15, what="namespace gone")
    assert apiserver.json("GET", f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs/c")[0] == 404


def test_server_side_apply_merges_by_the_schemas_list_map_keys(apiserver, crd, ns):
    path = f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs/ssa"
    hdr = {"Content-Type": "application/apply-patch+yaml"}

    def apply(manager: str, ports: list, expect=200, force=False):
        body = crontab("ssa", cronSpec="* * * * *", ports=ports)
        q = f"?fieldManager={manager}" + ("&force=true" if force else "")
        return apiserver.json("PATCH", path + q, body, hdr, expect=expect)

    apply("alpha", [{"name": "http", "port": 80}], expect=201)
    _, obj = apply("beta", [{"name": "https", "port": 443}])
    # A list-map: each manager owns its own entry, both are kept.
    assert sorted(p["name"] for p in obj["spec"]["ports"]) == ["http", "https"]
    managers = {m["manager"]: m for m in obj["metadata"]["managedFields"]}
    assert 'k:{"name":"https"}' in managers["beta"]["fieldsV1"]["f:spec"]["f:ports"]
    status, doc = apply("beta", [{"name": "http", "port": 8080}], expect=409)
    assert doc["reason"] == "Conflict" and "alpha" in doc["message"]


def test_python_client_custom_objects(apiserver, k8s_client, crd, ns):
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.client.CustomObjectsApi(k8s_client)
    api.create_namespaced_custom_object(GROUP, "v1", ns, "crontabs", crontab("py1", cronSpec="0 * * * *"))
    api.create_namespaced_custom_object(GROUP, "v1", ns, "crontabs", crontab("py2", cronSpec="0 * * * *"))
    lst = api.list_namespaced_custom_object(GROUP, "v1", ns, "crontabs", field_selector="metadata.name=py2")
    assert [i["metadata"]["name"] for i in lst["items"]] == ["py2"]
    page = api.list_namespaced_custom_object(GROUP, "v1", ns, "crontabs", limit=1)
    assert len(page["items"]) == 1 and page["metadata"]["continue"]
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.create_namespaced_custom_object(GROUP, "v1", ns, "crontabs", crontab("py3", replicas=0))
    assert err.value.status == 422
    assert "spec.replicas in body should be greater than or equal to 1" in err.value.body


def test_definition_validation_messages(apiserver):
    bad = crontab_crd("widgets", "Widget", "wd")
    bad["metadata"]["name"] = "wrong.example.com"
    spec = bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec["untyped"] = {"description": "no type"}
    status, doc = apiserver.json("POST", CRD_PATH, bad)
    assert status == 422, doc
    msgs = [f"{c['field']}: {c['message']}" for c in doc["details"]["causes"]]
    path = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties"
    assert 'metadata.name: Invalid value: "wrong.example.com": must be spec.names.plural+"."+spec.group' in msgs
    assert f"{path}[untyped].type: Required value: must not be empty for specified object fields" in msgs
    webhook = crontab_crd("gadgets", "Gadget", "gd")
    webhook["spec"]["conversion"] = {"strategy": "Webhook"}
    status, doc = apiserver.json("POST", CRD_PATH, webhook)
    assert status == 422
    assert (
        "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook"
        in (doc["message"])
    )


def test_name_conflict_is_not_accepted(apiserver, crd):
    other = crontab_crd("crontabs2", "CronTabTwo", "ct2")
    other["spec"]["names"]["singular"] = "crontab"  # taken by the first definition
    apiserver.json("POST", CRD_PATH, other, expect=201)

    def refused():
        _, obj = apiserver.json("GET", f"{CRD_PATH}/crontabs2.{GROUP}")
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
        return conds.get("NamesAccepted", {}).get("status") == "False" and conds["NamesAccepted"]

    cond = wait_for(refused, timeout=5, what="NamesAccepted False")
    assert cond["reason"] == "SingularConflict" and cond["message"] == '"crontab" is already in use'
    assert not served(apiserver, "crontabs2")
    apiserver.json("DELETE", f"{CRD_PATH}/crontabs2.{GROUP}", expect=200)


def test_explain_and_delete_definition_removes_objects(apiserver, kctl, crd, ns):
    r = kctl("explain", "crontabs.spec.cronSpec", check=True)
    assert "The schedule, in cron format." in r.stdout
    assert "A CronTab runs an image on a schedule." in kctl("explain", "ct", check=True).stdout
    kctl("-n", ns, "create", "-f", "-", input=yaml.safe_dump(crontab("doomed", cronSpec="* * * * *")), check=True)
    kctl("delete", "crd", crd, "--timeout=20s", check=True)
    assert apiserver.json("GET", f"{CRD_PATH}/{crd}")[0] == 404
    wait_for(lambda: not served(apiserver), timeout=5, what="crontabs no longer served")
    # Created again: no object of the old definition is left.
    apiserver.json("POST", CRD_PATH, crontab_crd(), expect=201)
    wait_established(apiserver, crd)
    wait_for(lambda: served(apiserver), timeout=5, what="crontabs served again")
    _, lst = apiserver.json("GET", f"/apis/{GROUP}/v1/crontabs", expect=200)
    assert lst["items"] == [] and lst["kind"] == "CronTabList"


def test_restart_serves_definitions_and_objects(tmp_path):
    with ApiServerProcess(tmp_path / "data", free_port()) as server:
        server.json("POST", CRD_PATH, crontab_crd(), expect=201)
        wait_established(server, f"crontabs.{GROUP}")
        create_namespace(server, "keep")
        server.json(
            "POST", f"/apis/{GROUP}/v1/namespaces/keep/crontabs", crontab("a", cronSpec="* * * * *"), expect=201
        )
        server.stop()
        server.start()
        _, obj = server.json("GET", f"/apis/{GROUP}/v1/namespaces/keep/crontabs/a", expect=200)
        assert obj["spec"]["replicas"] == 1


def test_second_server_on_the_same_etcd(etcd, tmp_path):
    prefix = f"/orch-test/{uuid.uuid4().hex}"
    kw = {"backend": "etcd", "etcd_endpoint": etcd.endpoint, "etcd_prefix": prefix}
    with (
        ApiServerProcess(tmp_path / "one", free_port(), **kw) as one,
        ApiServerProcess(tmp_path / "two", free_port(), **kw) as two,
    ):
        assert not served(two)
        one.json("POST", CRD_PATH, crontab_crd(), expect=201)
        t0 = time.monotonic()
        wait_for(lambda: served(two), timeout=5, what="the second server serves crontabs")
        assert time.monotonic() - t0 < 2.0
        create_namespace(one, "shared")
        one.json("POST", f"/apis/{GROUP}/v1/namespaces/shared/crontabs", crontab("x", cronSpec="* * * * *"), expect=201)
        wait_for(
            lambda: two.json("GET", f"/apis/{GROUP}/v1/namespaces/shared/crontabs/x")[0] == 200,
            timeout=5,
            what="the object on the second server",
        )


def test_versions_convert_by_api_version_and_store_the_storage_version(apiserver, ns):
    crd = crontab_crd("dials", "Dial", "dl")
    v1 = crd["spec"]["versions"][0]
    v1beta1 = json.loads(json.dumps(v1))
    v1beta1.update(name="v1beta1", storage=False)
    v1beta1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["legacy"] = {"type": "string"}
    crd["spec"]["versions"] = [v1beta1, v1]
    apiserver.json("POST", CRD_PATH, crd, expect=201)
    wait_established(apiserver, f"dials.{GROUP}")
    wait_for(lambda: served(apiserver, "dials"), timeout=5, what="dials served")
    old = f"/apis/{GROUP}/v1beta1/namespaces/{ns}/dials"
    new = f"/apis/{GROUP}/v1/namespaces/{ns}/dials"
    body = {**crontab("d1", cronSpec="* * * * *", legacy="kept"), "apiVersion": f"{GROUP}/v1beta1", "kind": "Dial"}
    _, created = apiserver.json("POST", old, body, expect=201)
    # Validated and pruned by v1beta1's schema; answered in v1beta1; stored in v1.
    assert created["apiVersion"] == f"{GROUP}/v1beta1" and created["spec"]["legacy"] == "kept"
    _, got = apiserver.json("GET", f"{new}/d1", expect=200)
    assert got["apiVersion"] == f"{GROUP}/v1"
    _, lst = apiserver.json("GET", old, expect=200)
    assert lst["apiVersion"] == f"{GROUP}/v1beta1" and lst["items"][0]["apiVersion"] == f"{GROUP}/v1beta1"
    hdr = {"Content-Type": "application/merge-patch+json"}
    _, patched = apiserver.json("PATCH", f"{old}/d1", {"spec": {"replicas": 3}}, hdr, expect=200)
    assert patched["apiVersion"] == f"{GROUP}/v1beta1" and patched["spec"]["replicas"] == 3
    with apiserver.watch(f"{old}?watch=1&resourceVersion=0") as w:
        ev = w.next()
    assert ev["type"] == "ADDED" and ev["object"]["apiVersion"] == f"{GROUP}/v1beta1"
    _, obj = apiserver.json("GET", f"{CRD_PATH}/dials.{GROUP}", expect=200)
    assert obj["status"]["storedVersions"] == ["v1"]


def test_defaults_apply_to_objects_read_from_storage(apiserver, ns):
    crd = crontab_crd("knobs", "Knob", "kn")
    apiserver.json("POST", CRD_PATH, crd, expect=201)
    wait_established(apiserver, f"knobs.{GROUP}")
    wait_for(lambda: served(apiserver, "knobs"), timeout=5, what="knobs served")
    base = f"/apis/{GROUP}/v1/namespaces/{ns}/knobs"
    apiserver.json("POST", base, {**crontab("k1", cronSpec="* * * * *"), "kind": "Knob"}, expect=201)
    # A default declared later: the stored object reads with it (get, list, watch), unwritten.
    _, current = apiserver.json("GET", f"{CRD_PATH}/knobs.{GROUP}", expect=200)
    spec_props = current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec_props["level"] = {"type": "string", "default": "medium"}
    apiserver.json("PUT", f"{CRD_PATH}/knobs.{GROUP}", current, expect=200)

    def defaulted():
        return apiserver.json("GET", f"{base}/k1")[1]["spec"].get("level") == "medium"

    wait_for(defaulted, timeout=5, what="the new default on read")
    _, lst = apiserver.json("GET", base, expect=200)
    assert lst["items"][0]["spec"]["level"] == "medium"
    with apiserver.watch(f"{base}?watch=1&resourceVersion=0") as w:
        assert w.next()["object"]["spec"]["level"] == "medium"
    status, _, body = apiserver.request("GET", base, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert status == 200 and json.loads(body)["rows"][0]["cells"][0] == "k1"


def test_kubectl_1_27_reads_and_writes_custom_resources(apiserver, crd, ns, tmp_path):
    binary = kubectl_binary("1.27")
    if not os.path.exists(binary):
        pytest.skip(f"{binary} not installed")
    k = Kubectl(apiserver, tmp_path, binary)
    k("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(crontab("old", cronSpec="*/5 * * * *")), check=True)
    out = k("-n", ns, "get", "ct", "-o", "wide", check=True).stdout.split("\n")
    assert out[0].split() == ["NAME", "SPEC", "REPLICAS", "IMAGE", "AGE"] and out[1].startswith("old ")
    assert "The schedule, in cron format." in k("explain", "crontab.spec.cronSpec", check=True).stdout
    r = k("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(crontab("old2", cronSpec="* * * * *", replicas=11)))
    assert "spec.replicas in body should be less than or equal to 10" in r.stderr, r.stderr
    again = crontab("old", cronSpec="*/5 * * * *", image="busybox:2")
    k("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(again), check=True)  # a merge patch this time
    k(
        "-n",
        ns,
        "apply",
        "--server-side",
        "-f",
        "-",
        input=yaml.safe_dump(crontab("ssa127", cronSpec="* * * * *")),
        check=True,
    )
    k("-n", ns, "scale", "ct/old", "--replicas=3", check=True)
    got = json.loads(k("-n", ns, "get", "ct", "old", "-o", "json", check=True).stdout)
    assert got["spec"]["replicas"] == 3 and got["spec"]["image"] == "busybox:2"


def test_definition_waits_for_objects_with_finalizers_and_refuses_creates(apiserver, ns):
    apiserver.json("POST", CRD_PATH, crontab_crd("holds", "Hold", "hd"), expect=201)
    wait_established(apiserver, f"holds.{GROUP}")
    wait_for(lambda: served(apiserver, "holds"), timeout=5, what="holds served")
    base = f"/apis/{GROUP}/v1/namespaces/{ns}/holds"
    held = {**crontab("h", cronSpec="* * * * *"), "kind": "Hold"}
    held["metadata"]["finalizers"] = ["example.com/hold"]
    apiserver.json("POST", base, held, expect=201)
    apiserver.json("DELETE", f"{CRD_PATH}/holds.{GROUP}", expect=200)

    def terminating():
        _, obj = apiserver.json("GET", f"{CRD_PATH}/holds.{GROUP}")
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
        return conds.get("Terminating", {}).get("reason") == "InstanceDeletionInProgress"

    wait_for(terminating, timeout=5, what="Terminating InstanceDeletionInProgress")
    status, doc = apiserver.json("POST", base, {**crontab("new", cronSpec="* * * * *"), "kind": "Hold"})
    assert status == 405 and doc["message"] == "create not allowed while custom resource definition is terminating"
    hdr = {"Content-Type": "application/merge-patch+json"}
    apiserver.json("PATCH", f"{base}/h", {"metadata": {"finalizers": None}}, hdr, expect=200)
    wait_for(lambda: apiserver.json("GET", f"{CRD_PATH}/holds.{GROUP}")[0] == 404, timeout=10, what="definition gone")
    wait_for(lambda: not served(apiserver, "holds"), timeout=5, what="holds no longer served")


def test_garbage_collector_knows_custom_resource_owners(apiserver, crd, ns):
    _, owner = apiserver.json(
        "POST", f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs", crontab("owner", cronSpec="* * * * *"), expect=201
    )
    ref = {"apiVersion": f"{GROUP}/v1", "kind": "CronTab", "name": "owner", "uid": owner["metadata"]["uid"]}
    cm = {"metadata": {"name": "dependent", "ownerReferences": [ref]}, "data": {"a": "b"}}
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/configmaps", cm, expect=201)
    time.sleep(1.5)  # a live owner: the dependent stays
    assert apiserver.json("GET", f"/api/v1/namespaces/{ns}/configmaps/dependent")[0] == 200
    apiserver.json("DELETE", f"/apis/{GROUP}/v1/namespaces/{ns}/crontabs/owner", expect=200)
    wait_for(
        lambda: apiserver.json("GET", f"/api/v1/namespaces/{ns}/configmaps/dependent")[0] == 404,
        timeout=10,
        what="the dependent collected",
    )


def rules_crd(rules: list, size_rules: list, plural: str = "ruletabs", kind: str = "RuleTab") -> dict:
    """A CronTab-like definition whose spec carries validation rules."""
    out = crontab_crd(plural, kind, plural[:3])
    version = out["spec"]["versions"][0]
    version.pop("additionalPrinterColumns")
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["minReplicas"] = {"type": "integer"}
    spec["properties"]["size"] = {"type": "integer", "x-kubernetes-validations": size_rules}
    spec["x-kubernetes-validations"] = rules
    return out


def test_validation_rules_refuse_objects_with_their_messages(apiserver, kctl, ns):
    rules = [{"rule": "self.minReplicas <= self.replicas", "message": "minReplicas must not exceed replicas"}]
    size_rules = [{"rule": "self >= oldSelf", "message": "size may not be lowered"}]
    kctl("apply", "-f", "-", input=yaml.safe_dump(rules_crd(rules, size_rules)), check=True)
    kctl("wait", "--for=condition=Established", f"crd/ruletabs.{GROUP}", "--timeout=10s", check=True)
    wait_for(lambda: served(apiserver, "ruletabs"), timeout=10, what="ruletabs served")
    good = {**crontab("ok", replicas=3, minReplicas=2, size=5), "kind": "RuleTab"}
    kctl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(good), check=True)
    bad = {**crontab("bad", replicas=2, minReplicas=5), "kind": "RuleTab"}
    r = kctl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(bad))
    assert r.returncode != 0
    assert 'spec: Invalid value: "object": minReplicas must not exceed replicas' in r.stderr, r.stderr
    # A transition rule: raising is fine, lowering is refused; the create ran no transition rule.
    kctl("-n", ns, "patch", "ruletab", "ok", "--type=merge", "-p", '{"spec":{"size":7}}', check=True)
    r = kctl("-n", ns, "patch", "ruletab", "ok", "--type=merge", "-p", '{"spec":{"size":4}}')
    assert r.returncode != 0
    assert 'spec.size: Invalid value: "integer": size may not be lowered' in r.stderr, r.stderr
    _, stored = apiserver.json("GET", f"/apis/{GROUP}/v1/namespaces/{ns}/ruletabs/ok", expect=200)
    assert stored["spec"]["size"] == 7
    apiserver.json("DELETE", f"{CRD_PATH}/ruletabs.{GROUP}", expect=200)


def test_definitions_with_rules_that_fail_to_compile_or_cost_too_much_are_refused(apiserver, kctl):
    expensive = rules_crd([], [], "costtabs", "CostTab")
    spec = expensive["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["tags"]["x-kubernetes-validations"] = [{"rule": "self.all(x, self.all(y, x != y || x == y))"}]
    r = kctl("apply", "-f", "-", input=yaml.safe_dump(expensive))
    assert r.returncode != 0
    path = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].x-kubernetes-validations[0]"
    assert f"{path}.rule: Forbidden: estimated rule cost exceeds budget by factor of" in r.stderr, r.stderr
    # maxItems and maxLength bound the estimate: the same rule is accepted.
    spec["properties"]["tags"]["maxItems"] = 50
    spec["properties"]["tags"]["items"]["maxLength"] = 20
    kctl("apply", "-f", "-", input=yaml.safe_dump(expensive), check=True)
    broken = rules_crd([{"rule": "self.replicas >"}], [], "brokentabs", "BrokenTab")
    status, doc = apiserver.json("POST", CRD_PATH, broken)
    assert status == 422, doc
    msgs = [f"{c['field']}: {c['message']}" for c in doc["details"]["causes"]]
    assert any(
        m.startswith(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: "
            'Invalid value: "self.replicas >": compilation failed: ERROR: <input>:'
        )
        for m in msgs
    ), msgs
    apiserver.json("DELETE", f"{CRD_PATH}/costtabs.{GROUP}", expect=200)
