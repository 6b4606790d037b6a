"""The API server's remaining in-process writers record their writes in managedFields
under upstream's user-agent names (orch-controller-manager for the default
ServiceAccount, the root-CA ConfigMap, ClusterRole aggregation and the controllers'
Lease; orch-apiserver for the default RBAC policy and the initial namespaces), a
client's ``PUT namespaces/<name>/finalize`` is recorded as its manager's Update of the
finalize sub-resource, and unknown ``dryRun``/``fieldValidation`` values are upstream's
422 Invalid naming the options kind."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import make_mocked_request

from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.authz.authorizer import AlwaysAllow, Union
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers import bootstrappolicy
from apiserver_min.controllers.clusterroleaggregation import ClusterRoleAggregator
from apiserver_min.controllers.leaderelection import LeaderElector
from apiserver_min.controllers.serviceaccounts import ServiceAccountsController
from apiserver_min.registry import managedfields as mf
from apiserver_min.registry.core import NamespaceFinalizeREST
from apiserver_min.registry.rest import RequestContext
from apiserver_min.server import handlers
from apiserver_min.server.app import ApiServer

CM = names.CONTROLLER_MANAGER_FIELD_MANAGER
API = names.APISERVER_FIELD_MANAGER
META = names.META_GROUP


class MemoryStore:
    """Just enough of the generic store: objects by (resource, namespace, name); a
    write with ``field_manager`` is recorded in managedFields as the real store does
    (``managedfields.record_update``), so the tests read the entries it leaves."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, str, str, str | None, str]] = []  # (verb, resource, name, manager, sub)

    def put(self, kind, namespace: str, obj: dict) -> None:
        self.objects[(kind.resource, namespace, obj["metadata"]["name"])] = copy.deepcopy(obj)

    def entries(self, resource: str, namespace: str, name: str) -> list[dict]:
        return self.objects[(resource, namespace, name)]["metadata"].get("managedFields") or []

    async def get_object(self, kind, namespace, name):
        obj = self.objects.get((kind.resource, namespace, name))
        if obj is None:
            raise st.not_found(kind.resource, name, kind.group)
        return copy.deepcopy(obj)

    async def create(self, kind, namespace, obj, user, *, dry_run=False, subresource="", field_manager=None):
        name = obj["metadata"]["name"]
        self.calls.append(("create", kind.resource, name, field_manager, subresource))
        if (kind.resource, namespace, name) in self.objects:
            raise st.already_exists(kind.resource, name, kind.group)
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if field_manager is not None:
            mf.record_update(kind, None, obj, field_manager, subresource)
        self.put(kind, namespace, obj)
        return obj, b"{}"

    async def update(
        self,
        kind,
        namespace,
        name,
        compute,
        user,
        *,
        subresource="",
        dry_run=False,
        create_on_missing=False,
        operation="UPDATE",
        on_missing=None,
        field_manager=None,
    ):
        old = self.objects.get((kind.resource, namespace, name))
        if old is None:
            if create_on_missing and on_missing is not None:
                obj, raw = await self.create(kind, namespace, on_missing(), user, field_manager=field_manager)
                return obj, raw, True
            raise st.not_found(kind.resource, name, kind.group)
        self.calls.append(("update", kind.resource, name, field_manager, subresource))
        new = compute(copy.deepcopy(old))
        if field_manager is not None:
            mf.record_update(kind, old, new, field_manager, subresource)
        if not dry_run:
            self.put(kind, namespace, new)
        return new, b"{}", False

    async def delete(self, kind, namespace, name, opts, user):
        self.calls.append(("delete", kind.resource, name, None, ""))
        return self.objects.pop((kind.resource, namespace, name)), b"{}", True


def kind(group: str, resource: str):
    return REGISTRY.by_resource(group, "v1", resource)


def server_with(store: MemoryStore):
    store.registry = REGISTRY  # what the store-level writers look kinds up in
    return SimpleNamespace(registry=REGISTRY, store=store)


def client_of(store: MemoryStore, controller: str = "test-controller") -> LocalClient:
    """A controller's client over ``store``, everything allowed, as the controller manager."""
    store.registry = REGISTRY
    return LocalClient(store, Union([AlwaysAllow()]), controller_user(controller), CM)


class FakeInformer:
    """An informer holding the given entries by (namespace, name)."""

    def __init__(self, entries: dict | None = None):
        self.entries = entries or {}

    def get(self, namespace, name):
        return self.entries.get((namespace, name))

    def list(self, namespace=None):
        return list(self.entries.values())

    def add_handler(self, fn):
        fn(None)


class FakeInformers:
    """Informers by resource name; ``registry`` for the kinds."""

    registry = REGISTRY

    def __init__(self, **by_resource: FakeInformer):
        self.by_resource = by_resource

    def kind(self, group, version, resource):
        return REGISTRY.by_resource(group, version, resource)

    def for_kind(self, kind):
        return self.by_resource.setdefault(kind.resource, FakeInformer())


def only_entry(entries: list[dict]) -> dict:
    assert len(entries) == 1, entries
    return entries[0]


def test_the_api_server_manager_is_its_orch_name():
    assert names.APISERVER_FIELD_MANAGER == "orch-apiserver" == names.APISERVER_NAME
    assert names.APISERVER_FIELD_MANAGER != names.CONTROLLER_MANAGER_FIELD_MANAGER


# --- orch-controller-manager -------------------------------------------------------------------


def sa_controller(store: MemoryStore, cached_sa=None, cached_cm=None) -> ServiceAccountsController:
    """The controller over ``store``, its watch cache faked: the namespace active, the
    ServiceAccount and ConfigMap cached as given (None: not there)."""
    informers = FakeInformers(
        namespaces=FakeInformer({("", "team"): SimpleNamespace(deleting=False)}),
        serviceaccounts=FakeInformer({("team", names.DEFAULT_SERVICE_ACCOUNT): cached_sa} if cached_sa else {}),
        configmaps=FakeInformer({("team", names.ROOT_CA_CONFIGMAP): cached_cm} if cached_cm else {}),
    )
    ctl = ServiceAccountsController(
        client_of(store, "service-account-controller"),
        client_of(store, "root-ca-cert-publisher"),
        informers,
        "/nonexistent/ca.crt",
    )
    ctl._ca_pem = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"
    return ctl


async def test_default_service_account_and_root_ca_configmap_are_the_controller_managers():
    store = MemoryStore()
    assert await sa_controller(store).sync("team") is True
    assert [c[:4] for c in store.calls] == [
        ("create", "serviceaccounts", names.DEFAULT_SERVICE_ACCOUNT, CM),
        ("create", "configmaps", names.ROOT_CA_CONFIGMAP, CM),
    ]
    # (The bare ServiceAccount sets no field a manager could own; the real store's
    # defaults are checked against a running server.)
    cm = only_entry(store.entries("configmaps", "team", names.ROOT_CA_CONFIGMAP))
    assert (cm["manager"], cm["operation"]) == (CM, "Update")
    assert "f:ca.crt" in cm["fieldsV1"]["f:data"]
    assert "subresource" not in cm


async def test_root_ca_configmap_repair_is_the_controller_managers_update():
    store = MemoryStore()
    cm_kind = kind("", "configmaps")
    tampered = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.ROOT_CA_CONFIGMAP,
            "namespace": "team",
            "managedFields": [
                {
                    "manager": "kubectl-edit",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2024-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:ca.crt": {}}},
                }
            ],
        },
        "data": {"ca.crt": "stale"},
    }
    store.put(cm_kind, "team", tampered)
    store.put(kind("", "serviceaccounts"), "team", {"metadata": {"name": names.DEFAULT_SERVICE_ACCOUNT}})
    ctl = sa_controller(store, cached_sa=object(), cached_cm=SimpleNamespace(object=lambda: copy.deepcopy(tampered)))
    assert await ctl.sync("team") is True
    assert store.calls == [("update", "configmaps", names.ROOT_CA_CONFIGMAP, CM, "")]
    by_manager = {e["manager"]: e for e in store.entries("configmaps", "team", names.ROOT_CA_CONFIGMAP)}
    # The controller now owns the data it rewrote and the annotation it added; kubectl-edit lost ca.crt.
    assert "f:ca.crt" in by_manager[CM]["fieldsV1"]["f:data"]
    assert names.ANNOTATION_DESCRIPTION in str(by_manager[CM]["fieldsV1"]["f:metadata"])
    assert by_manager[CM]["operation"] == "Update"
    assert "kubectl-edit" not in by_manager or "f:ca.crt" not in by_manager["kubectl-edit"]["fieldsV1"].get(
        "f:data", {}
    )


async def test_clusterrole_aggregation_is_the_controller_managers():
    store = MemoryStore()
    cr = kind(names.RBAC_GROUP, "clusterroles")
    agg = {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "agg"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"team": "x"}}]},
        "rules": [],
    }
    part = {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "part", "labels": {"team": "x"}},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    store.put(cr, "", agg)
    entries = {
        ("", o["metadata"]["name"]): SimpleNamespace(
            name=o["metadata"]["name"], rv=1, object=lambda o=o: copy.deepcopy(o)
        )
        for o in (agg, part)
    }
    aggregator = ClusterRoleAggregator(
        client_of(store, "clusterrole-aggregation-controller"), FakeInformers(clusterroles=FakeInformer(entries))
    )
    assert await aggregator.sync("agg") is True
    assert store.calls == [("update", "clusterroles", "agg", CM, "")]
    entry = only_entry(store.entries("clusterroles", "", "agg"))
    assert (entry["manager"], entry["operation"]) == (CM, "Update")
    assert "f:rules" in entry["fieldsV1"]


async def test_leader_election_lease_writes_are_the_controller_managers():
    store = MemoryStore()

    async def nothing():
        return None

    elector = LeaderElector(client_of(store), REGISTRY, identity="me", on_started=nothing, on_stopped=nothing)
    assert await elector._try_acquire_or_renew() is True  # creates the Lease
    assert await elector._try_acquire_or_renew() is True  # renews it
    elector.leading = True
    await elector._release()
    lease = (names.CONTROLLERS_LEASE_NAME, CM)
    assert [(c[0], c[2], c[3]) for c in store.calls] == [("create",) + lease, ("update",) + lease, ("update",) + lease]
    entry = only_entry(store.entries("leases", names.NS_SYSTEM, names.CONTROLLERS_LEASE_NAME))
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == (
        CM,
        "Update",
        f"{names.COORDINATION_GROUP}/v1",
    )
    assert "f:holderIdentity" in entry["fieldsV1"]["f:spec"]


# --- orch-apiserver ----------------------------------------------------------------------------


def cluster_role(name: str, verbs: list[str]) -> dict:
    return {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}],
    }


def cluster_binding(name: str, role: str, user: str) -> dict:
    return {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": names.RBAC_GROUP, "kind": "User", "name": user}],
    }


async def test_default_policy_reconciliation_is_the_api_servers():
    store = MemoryStore()
    server = server_with(store)
    assert (
        await bootstrappolicy._reconcile_one(server.store, "clusterroles", cluster_role("viewer", ["get"])) == "created"
    )
    entry = only_entry(store.entries("clusterroles", "", "viewer"))
    assert (entry["manager"], entry["operation"]) == (API, "Update")

    # A default role missing a rule is completed: an Update by the API server again.
    store.put(kind(names.RBAC_GROUP, "clusterroles"), "", cluster_role("editor", ["get"]))
    assert (
        await bootstrappolicy._reconcile_one(server.store, "clusterroles", cluster_role("editor", ["get", "list"]))
        == "updated"
    )
    entry = only_entry(store.entries("clusterroles", "", "editor"))
    assert (entry["manager"], entry["operation"]) == (API, "Update")

    # A binding whose roleRef changed is recreated, by the API server.
    store.put(kind(names.RBAC_GROUP, "clusterrolebindings"), "", cluster_binding("b", "old-role", "alice"))
    assert (
        await bootstrappolicy._reconcile_one(
            server.store, "clusterrolebindings", cluster_binding("b", "new-role", "bob")
        )
        == "recreated"
    )
    entry = only_entry(store.entries("clusterrolebindings", "", "b"))
    assert (entry["manager"], entry["operation"]) == (API, "Update")
    assert [c[0] for c in store.calls if c[2] == "b"] == ["delete", "create"]
    assert {c[3] for c in store.calls if c[0] != "delete"} == {API}


async def test_initial_namespaces_are_the_api_servers():
    store = MemoryStore()
    server = ApiServer.__new__(ApiServer)
    server.registry, server.store = REGISTRY, store
    await server.bootstrap_namespaces()
    # (What the entries own comes of the namespace strategy and defaults, which this
    # store does not run: checked against a running server.)
    assert store.calls == [("create", "namespaces", ns, API, "") for ns in names.INITIAL_NAMESPACES]
    # A second start finds them there (409) and writes nothing more.
    await server.bootstrap_namespaces()
    assert all(c[3] == API for c in store.calls)


# --- PUT namespaces/<name>/finalize --------------------------------------------------------------


async def test_finalize_records_the_clients_update_of_the_finalize_subresource():
    store = MemoryStore()
    ns_kind = kind("", "namespaces")
    store.put(
        ns_kind,
        "",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "gone"},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Terminating"},
        },
    )
    rest = NamespaceFinalizeREST(store, ns_kind)
    ctx = RequestContext(user=None, kind=ns_kind, verb="update", name="gone", field_manager="my-finalizer")
    body = {"metadata": {"name": "gone"}, "spec": {"finalizers": ["kubernetes", "example.com/hold"]}}
    code, _ = await rest.update(ctx, body)
    assert code == 200
    assert store.calls == [("update", "namespaces", "gone", "my-finalizer", "finalize")]
    entry = only_entry(store.entries("namespaces", "", "gone"))
    assert (entry["manager"], entry["operation"], entry["subresource"]) == ("my-finalizer", "Update", "finalize")
    assert entry["fieldsV1"] == {"f:spec": {"f:finalizers": {}}}


# --- dryRun and fieldValidation: 422 Invalid naming the options kind -------------------------------


def req(query: str, method: str = "POST"):
    return make_mocked_request(
        method, "/api/v1/namespaces/ns/configmaps?" + query, headers={"User-Agent": "kubectl/v1.32.0 (linux/amd64)"}
    )


def invalid(exc: st.ApiError) -> tuple[int, str, str, list, str]:
    doc = exc.to_status()
    return exc.code, doc["reason"], doc["message"], doc["details"]["causes"], doc["details"]["kind"]


@pytest.mark.parametrize("kind_name", ["CreateOptions", "UpdateOptions", "PatchOptions"])
def test_unsupported_dry_run_is_422_with_the_values_as_go_prints_them(kind_name):
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("dryRun=Some"), kind_name, names.MEDIA_MERGE_PATCH)
    code, reason, message, causes, details_kind = invalid(info.value)
    assert (code, reason, details_kind) == (422, "Invalid", kind_name)
    assert (
        message == f'{kind_name}.{META} "" is invalid: dryRun: Unsupported value: []string{{"Some"}}: '
        'supported values: "All"'
    )
    assert causes == [
        {
            "reason": "FieldValueNotSupported",
            "field": "dryRun",
            "message": 'Unsupported value: []string{"Some"}: supported values: "All"',
        }
    ]
    # Every value is named (an empty one is not "All" either), Go-quoted.
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("dryRun=All&dryRun=&dryRun=a%22b"), kind_name, names.MEDIA_MERGE_PATCH)
    assert invalid(info.value)[2].endswith(
        'dryRun: Unsupported value: []string{"All", "", "a\\"b"}: supported values: "All"'
    )
    assert handlers.WriteParams.parse(req("dryRun=All&dryRun=All"), kind_name, names.MEDIA_MERGE_PATCH).dry_run
    assert not handlers.WriteParams.parse(req("x=1"), kind_name, names.MEDIA_MERGE_PATCH).dry_run


@pytest.mark.parametrize("kind_name", ["CreateOptions", "UpdateOptions", "PatchOptions"])
def test_unsupported_field_validation_is_422_listing_upstreams_values(kind_name):
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(req("fieldValidation=strict"), kind_name, names.MEDIA_MERGE_PATCH)
    code, reason, message, causes, details_kind = invalid(info.value)
    assert (code, reason, details_kind) == (422, "Invalid", kind_name)
    assert message == (
        f'{kind_name}.{META} "" is invalid: fieldValidation: Unsupported value: "strict": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )
    assert causes[0]["reason"] == "FieldValueNotSupported" and causes[0]["field"] == "fieldValidation"
    for value, want in (("", "Warn"), ("Ignore", "Ignore"), ("Warn", "Warn"), ("Strict", "Strict")):
        assert (
            handlers.WriteParams.parse(
                req(f"fieldValidation={value}"), kind_name, names.MEDIA_MERGE_PATCH
            ).field_validation
            == want
        )


def test_all_option_problems_come_in_upstreams_order():
    # ValidatePatchOptions: force, fieldManager, dryRun, fieldValidation - in one 422.
    with pytest.raises(st.ApiError) as info:
        handlers.WriteParams.parse(
            req("fieldValidation=Loud&dryRun=x&force=1&fieldManager=" + "m" * 129),
            "PatchOptions",
            names.MEDIA_MERGE_PATCH,
        )
    _, _, message, causes, _ = invalid(info.value)
    assert [c["field"] for c in causes] == ["force", "fieldManager", "dryRun", "fieldValidation"]
    assert message == (
        f'PatchOptions.{META} "" is invalid: ['
        "force: Forbidden: may not be specified for non-apply patch, "
        "fieldManager: Too long: must have at most 128 bytes, "
        'dryRun: Unsupported value: []string{"x"}: supported values: "All", '
        'fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"]'
    )


def test_delete_and_body_only_creates_name_their_options_kind():
    with pytest.raises(st.ApiError) as info:
        handlers._dry_run(req("dryRun=true", "DELETE").query, "DeleteOptions")
    code, reason, message, _, details_kind = invalid(info.value)
    assert (code, reason, details_kind) == (422, "Invalid", "DeleteOptions")
    assert message == (
        f'DeleteOptions.{META} "" is invalid: dryRun: Unsupported value: []string{{"true"}}: supported values: "All"'
    )
    assert handlers._dry_run(req("dryRun=All").query, "DeleteOptions") is True
    assert handlers._dry_run(req("").query, "DeleteOptions") is False
    # Creates that only decode a body (reviews, bindings, evictions) read the level here.
    with pytest.raises(st.ApiError) as info:
        handlers._field_validation(req("fieldValidation=Loud").query)
    assert invalid(info.value)[:2] + (invalid(info.value)[4],) == (422, "Invalid", "CreateOptions")
    assert handlers._field_validation(req("").query) == "Warn"
