"""Against a running orch-apiserver: the API server's own writes (initial namespaces,
default RBAC policy) are recorded in managedFields as orch-apiserver's Updates, the
bundled controllers' (the root CA ConfigMap and its repair, ClusterRole aggregation,
the controllers' Lease) as orch-controller-manager's;
``PUT namespaces/<name>/finalize`` records the client's Update of the finalize
sub-resource; unknown ``dryRun``/``fieldValidation`` values are 422 Invalid naming
the options kind, as upstream answers."""

from __future__ import annotations

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq, wait_for

CM = names.CONTROLLER_MANAGER_FIELD_MANAGER
API = names.APISERVER_FIELD_MANAGER
META = names.META_GROUP
RBAC = f"/apis/{names.RBAC_GROUP}/v1"
MERGE = {"Content-Type": names.MEDIA_MERGE_PATCH}
LEASE = f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{names.NS_SYSTEM}/leases/{names.CONTROLLERS_LEASE_NAME}"
DRY_RUN_X = 'dryRun: Unsupported value: []string{"x"}: supported values: "All"'
LEVEL_LOUD = 'fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"'


def managers(obj: dict) -> dict[tuple[str, str], dict]:
    """managedFields by (manager, subresource)."""
    return {(e["manager"], e.get("subresource", "")): e for e in obj["metadata"].get("managedFields") or []}


def get(server, path: str) -> dict:
    return server.json("GET", path, expect=200)[1]


@pytest.fixture(scope="module")
def ns(apiserver) -> str:
    name = uniq("mgr")
    create_namespace(apiserver, name)
    return name


# --- orch-apiserver ----------------------------------------------------------------------------


def test_initial_namespaces_are_orch_apiserver_updates(apiserver):
    for name in names.INITIAL_NAMESPACES:
        entries = managers(get(apiserver, f"/api/v1/namespaces/{name}"))
        assert list(entries) == [(API, "")], (name, entries)
        e = entries[(API, "")]
        assert (e["operation"], e["apiVersion"], e["fieldsType"]) == ("Update", "v1", "FieldsV1")
        assert "f:labels" in e["fieldsV1"]["f:metadata"]


def test_default_rbac_policy_is_orch_apiservers(apiserver):
    for path in (
        f"{RBAC}/clusterroles/{names.ROLE_CLUSTER_ADMIN}",
        f"{RBAC}/clusterrolebindings/{names.ROLE_CLUSTER_ADMIN}",
    ):
        entries = managers(get(apiserver, path))
        assert list(entries) == [(API, "")], (path, entries)
        assert entries[(API, "")]["operation"] == "Update"
        assert entries[(API, "")]["apiVersion"] == f"{names.RBAC_GROUP}/v1"


def test_aggregated_rules_are_the_controller_managers(apiserver):
    # "admin" is a default aggregated role: the API server wrote its selectors, the
    # aggregator its rules.
    role = wait_for(
        lambda: (r := get(apiserver, f"{RBAC}/clusterroles/admin")).get("rules") and r,
        10,
        "the admin role's aggregated rules",
    )
    entries = managers(role)
    assert set(entries) == {(API, ""), (CM, "")}, entries
    assert entries[(CM, "")]["operation"] == "Update"
    assert entries[(CM, "")]["fieldsV1"] == {"f:rules": {}}
    assert "f:aggregationRule" in entries[(API, "")]["fieldsV1"]


# --- orch-controller-manager -------------------------------------------------------------------


def test_root_ca_configmap_is_the_controller_managers_and_so_is_its_repair(apiserver, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps/{names.ROOT_CA_CONFIGMAP}"
    cm = get(apiserver, path)
    entries = managers(cm)
    assert list(entries) == [(CM, "")], entries
    assert entries[(CM, "")]["operation"] == "Update"
    assert "f:ca.crt" in entries[(CM, "")]["fieldsV1"]["f:data"]
    # (The bare default ServiceAccount sets no field anyone could own.)
    assert (
        "managedFields"
        not in get(apiserver, f"/api/v1/namespaces/{ns}/serviceaccounts/{names.DEFAULT_SERVICE_ACCOUNT}")["metadata"]
    )

    # A client rewrites ca.crt: the controller puts it back, taking the field back.
    apiserver.json("PATCH", path + "?fieldManager=tamperer", {"data": {"ca.crt": "x"}}, headers=MERGE, expect=200)

    def repaired():
        obj = get(apiserver, path)
        return obj if obj["data"]["ca.crt"] == cm["data"]["ca.crt"] else None

    entries = managers(wait_for(repaired, 10, "the root CA ConfigMap's repair"))
    assert "f:ca.crt" in entries[(CM, "")]["fieldsV1"]["f:data"]
    assert ("tamperer", "") not in entries, entries  # its only field went back to the controller


def test_controllers_lease_is_the_controller_managers(apiserver_etcd):
    lease = wait_for(lambda: (r := apiserver_etcd.json("GET", LEASE))[0] == 200 and r[1], 20, "the controllers' Lease")
    entries = managers(lease)
    assert list(entries) == [(CM, "")], entries
    e = entries[(CM, "")]
    assert (e["operation"], e["apiVersion"]) == ("Update", f"{names.COORDINATION_GROUP}/v1")
    assert {"f:holderIdentity", "f:renewTime"} <= set(e["fieldsV1"]["f:spec"])


# --- PUT namespaces/<name>/finalize ----------------------------------------------------------------


def test_finalize_is_recorded_as_the_clients_update_of_the_subresource(apiserver):
    name = uniq("fin")
    create_namespace(apiserver, name)
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
        "spec": {"finalizers": ["kubernetes", "example.com/hold"]},
    }
    _, obj = apiserver.json("PUT", f"/api/v1/namespaces/{name}/finalize?fieldManager=finalizer-test", body, expect=200)
    entry = managers(obj)[("finalizer-test", "finalize")]
    assert (entry["operation"], entry["apiVersion"], entry["subresource"]) == ("Update", "v1", "finalize")
    assert entry["fieldsV1"] == {"f:spec": {"f:finalizers": {}}}
    assert managers(get(apiserver, f"/api/v1/namespaces/{name}")) == managers(obj)

    # No fieldManager: the user agent's product names the writer, as for other writes.
    body["spec"]["finalizers"] = ["kubernetes"]
    _, obj = apiserver.json(
        "PUT",
        f"/api/v1/namespaces/{name}/finalize",
        body,
        headers={"User-Agent": "ns-cleaner/1.2 (linux/amd64)"},
        expect=200,
    )
    entries = managers(obj)
    assert entries[("ns-cleaner", "finalize")]["fieldsV1"] == {"f:spec": {"f:finalizers": {}}}
    assert ("finalizer-test", "finalize") not in entries  # its only field passed to ns-cleaner

    # A dry run stores nothing.
    body["spec"]["finalizers"] = []
    _, dry = apiserver.json("PUT", f"/api/v1/namespaces/{name}/finalize?dryRun=All&fieldManager=dry", body, expect=200)
    assert ("dry", "finalize") in managers(dry)
    assert ("dry", "finalize") not in managers(get(apiserver, f"/api/v1/namespaces/{name}"))


# --- dryRun and fieldValidation: 422 Invalid naming the options kind -------------------------------


def assert_invalid(status: int, doc: dict, kind: str, *messages: str) -> None:
    assert status == 422, doc
    assert (doc["kind"], doc["status"], doc["reason"], doc["code"]) == ("Status", "Failure", "Invalid", 422), doc
    assert doc["details"]["kind"] == kind and doc["details"]["group"] == META, doc
    body = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    assert doc["message"] == f'{kind}.{META} "" is invalid: {body}', doc
    assert [c["reason"] for c in doc["details"]["causes"]] == ["FieldValueNotSupported"] * len(messages)


def test_bad_dry_run_and_field_validation_on_every_write(apiserver, ns):
    coll = f"/api/v1/namespaces/{ns}/configmaps"
    apiserver.json("POST", coll, {"metadata": {"name": "opts"}}, expect=201)
    cm = {"metadata": {"name": "opts"}, "data": {"a": "1"}}
    for method, path, body, headers, kind in (
        ("POST", coll, {"metadata": {"name": "opts2"}}, None, "CreateOptions"),
        ("PUT", f"{coll}/opts", cm, None, "UpdateOptions"),
        ("PATCH", f"{coll}/opts", {"data": {"a": "2"}}, MERGE, "PatchOptions"),
    ):
        status, doc = apiserver.json(method, f"{path}?dryRun=x", body, headers=headers)
        assert_invalid(status, doc, kind, DRY_RUN_X)
        status, doc = apiserver.json(method, f"{path}?fieldValidation=Loud", body, headers=headers)
        assert_invalid(status, doc, kind, LEVEL_LOUD)
        status, doc = apiserver.json(method, f"{path}?fieldValidation=Loud&dryRun=x", body, headers=headers)
        assert_invalid(status, doc, kind, DRY_RUN_X, LEVEL_LOUD)
    status, doc = apiserver.json("DELETE", f"{coll}/opts?dryRun=x")
    assert_invalid(status, doc, "DeleteOptions", DRY_RUN_X)
    # Nothing was written by any of them.
    assert get(apiserver, f"{coll}/opts").get("data") is None
    assert apiserver.json("GET", f"{coll}/opts2")[0] == 404
    # An empty dryRun is not "All" either (upstream reads it as [""]).
    status, doc = apiserver.json("POST", f"{coll}?dryRun=", {"metadata": {"name": "opts3"}})
    assert_invalid(status, doc, "CreateOptions", 'dryRun: Unsupported value: []string{""}: supported values: "All"')
