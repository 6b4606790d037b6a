"""The controllers' client (``client/local.py``) and informers (``client/informer.py``):
a write is authorized as the client's user (403 otherwise), admitted as that user and
recorded under its field manager; informers show the watch cache and relay its events,
with a replay on subscription and after a relist, and go quiet when stopped."""

from __future__ import annotations

import ast
import pathlib

import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.authz import policy
from apiserver_min.authz.authorizer import AlwaysAllow, AlwaysDeny, PrivilegedGroups, Union
from apiserver_min.authz.rbac import RbacAuthorizer, RbacIndex
from apiserver_min.client.informer import InformerFactory
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers.bootstrappolicy import reconcile_default_policy
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

CM = REGISTRY.by_resource("", "v1", "configmaps")
NS = REGISTRY.by_resource("", "v1", "namespaces")
SA = REGISTRY.by_resource("", "v1", "serviceaccounts")
PODS = REGISTRY.by_resource("", "v1", "pods")
MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER


class Recorder:
    """An admission plugin noting who writes what."""

    name = "Recorder"

    def __init__(self):
        self.seen: list[tuple[str, str, str, str]] = []

    async def admit(self, attrs) -> None:
        self.seen.append((attrs.operation, attrs.kind.resource, attrs.subresource, attrs.user.name))

    async def validate(self, attrs) -> None:
        return None


@pytest.fixture
async def server(tmp_path):
    """A store on SQLite with its watch cache running, RBAC over the default policy."""
    backend = SqliteBackend(str(tmp_path / "state.db"))
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    index = RbacIndex.attach(cache, REGISTRY)
    recorder = Recorder()
    store = Store(backend, REGISTRY, cache, Chain([recorder]))
    await backend.start()
    await cache.start()
    await reconcile_default_policy(store)
    await store.create(NS, "", {"metadata": {"name": "team"}}, SYSTEM_USER)
    await cache.sync()
    recorder.seen.clear()
    rbac = Union([PrivilegedGroups(), RbacAuthorizer(index)])
    yield store, cache, rbac, recorder
    await cache.stop()
    await backend.close()


def client(store, authorizer, controller: str, manager: str = MANAGER) -> LocalClient:
    return LocalClient(store, authorizer, controller_user(controller), manager)


def test_controller_identity_is_its_service_account():
    user = controller_user("namespace-controller")
    assert user.name == "system:serviceaccount:orch-system:namespace-controller"
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:orch-system", "system:authenticated")


async def test_a_write_the_role_does_not_grant_is_a_403_and_never_reaches_admission(server):
    store, _, rbac, recorder = server
    publisher = client(store, rbac, "root-ca-cert-publisher")
    # Its role grants configmaps create/update, not secrets, nor deletes.
    with pytest.raises(st.ApiError) as info:
        await publisher.create(REGISTRY.by_resource("", "v1", "secrets"), "team", {"metadata": {"name": "s"}})
    assert info.value.code == 403 and info.value.reason == "Forbidden"
    assert 'User "system:serviceaccount:orch-system:root-ca-cert-publisher" cannot create resource "secrets"' in (
        info.value.message
    )
    await publisher.create(CM, "team", {"metadata": {"name": "c"}})
    with pytest.raises(st.ApiError) as info:
        await publisher.delete(CM, "team", "c")
    assert info.value.code == 403
    # A controller with no binding at all may do nothing.
    with pytest.raises(st.ApiError) as info:
        await client(store, rbac, "nobody").get(CM, "team", "c")
    assert info.value.code == 403
    assert [s[:2] for s in recorder.seen] == [("CREATE", "configmaps")]


async def test_admission_runs_as_the_controller_and_managed_fields_name_its_manager(server):
    store, _, rbac, recorder = server
    sa_controller = client(store, rbac, "service-account-controller")
    created = await sa_controller.create(SA, "team", {"metadata": {"name": "default"}})
    assert recorder.seen == [("CREATE", "serviceaccounts", "", sa_controller.user.name)]
    publisher = client(store, rbac, "root-ca-cert-publisher")
    await publisher.create(CM, "team", {"metadata": {"name": "c"}, "data": {"a": "1"}})

    def bump(old: dict) -> dict:
        old["data"]["b"] = "2"
        return old

    updated = await publisher.update(CM, "team", "c", bump)
    assert updated["data"] == {"a": "1", "b": "2"}
    entries = updated["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [(MANAGER, "Update")]
    assert recorder.seen[-1] == ("UPDATE", "configmaps", "", publisher.user.name)
    assert created["metadata"]["name"] == "default"


async def test_update_with_an_object_is_optimistic_and_a_function_retries(server):
    store, _, rbac, _ = server
    publisher = client(store, rbac, "root-ca-cert-publisher")
    first = await publisher.create(CM, "team", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    stale = dict(first, data={"a": "stale"})
    await publisher.update(CM, "team", "c", dict(first, data={"a": "2"}))
    with pytest.raises(st.ApiError) as info:
        await publisher.update(CM, "team", "c", stale)  # its resourceVersion is no longer current
    assert info.value.code == 409
    gc = client(store, rbac, "generic-garbage-collector")
    patched = await gc.patch(CM, "team", "c", {"data": {"z": "9"}}, names.MEDIA_MERGE_PATCH)
    assert patched["data"] == {"a": "2", "z": "9"}
    assert [c["metadata"]["name"] for c in await gc.list(CM, "team")] == ["c"]
    assert await gc.list(CM, "team", field_selector="metadata.name=other") == []
    await gc.delete(CM, "team", "c")
    with pytest.raises(st.ApiError) as info:
        await gc.get(CM, "team", "c")
    assert info.value.code == 404


async def test_the_scheduler_binds_through_the_binding_subresource(server):
    store, _, rbac, recorder = server
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    created, _ = await store.create(PODS, "team", pod, SYSTEM_USER)
    scheduler = client(store, rbac, "scheduler", names.SCHEDULER_FIELD_MANAGER)
    binding = {
        "metadata": {"name": "p", "namespace": "team", "uid": created["metadata"]["uid"]},
        "target": {"kind": "Node", "name": "n1"},
    }
    bound = await scheduler.create(PODS, "team", binding, subresource="binding")
    assert bound["spec"]["nodeName"] == "n1"
    assert recorder.seen[-1] == ("UPDATE", "pods", "binding", scheduler.user.name)
    # The node controller may not bind.
    with pytest.raises(st.ApiError) as info:
        await client(store, rbac, "node-controller").create(PODS, "team", binding, subresource="binding")
    assert info.value.code == 403


async def test_without_rbac_the_authorization_mode_decides(server):
    store, _, _, _ = server
    allow = client(store, Union([PrivilegedGroups(), AlwaysAllow()]), "nobody")
    await allow.create(CM, "team", {"metadata": {"name": "c"}})
    deny = client(store, Union([PrivilegedGroups(), AlwaysDeny()]), "namespace-controller")
    with pytest.raises(st.ApiError) as info:
        await deny.get(CM, "team", "c")
    assert info.value.code == 403


def test_every_controller_identity_has_a_role_and_binding():
    roles = {r["metadata"]["name"] for r in policy.default_cluster_roles()}
    bound = {
        (s["kind"], s["name"], b["roleRef"]["name"])
        for b in policy.default_cluster_role_bindings()
        for s in b["subjects"]
    }
    for controller in (
        "namespace-controller",
        "generic-garbage-collector",
        "certificate-controller",
        "clusterrole-aggregation-controller",
        "service-account-controller",
        "root-ca-cert-publisher",
        "node-controller",
        "resourcequota-controller",
        "scheduler",
    ):
        role = names.CONTROLLER_ROLE_PREFIX + controller
        assert role in roles
        assert ("ServiceAccount", controller, role) in bound
    assert ("User", names.CONTROLLER_MANAGER_USER, names.CONTROLLER_MANAGER_USER) in bound


# --- informers ------------------------------------------------------------------------------


async def test_informer_reads_the_cache_and_relays_its_events_with_a_replay(server):
    store, cache, _, _ = server
    factory = InformerFactory(cache, REGISTRY)
    cms = factory.for_kind(CM)
    await store.create(CM, "team", {"metadata": {"name": "before"}}, SYSTEM_USER)
    await cache.sync()
    seen: list = []
    cms.add_handler(lambda ev: seen.append(None if ev is None else (ev.type, ev.entry.name)))
    assert seen == [None]  # the replay at subscription
    assert cms.get("team", "before") is not None and cms.get("team", "nope") is None
    assert [e.name for e in cms.list("team")] == ["before"]
    await store.create(CM, "team", {"metadata": {"name": "after"}}, SYSTEM_USER)
    await store.create(SA, "team", {"metadata": {"name": "other-kind"}}, SYSTEM_USER)
    await cache.sync()
    assert seen == [None, ("ADDED", "after")]  # only its own kind
    assert cms.get_by_key(cms.get("team", "after").key).name == "after"
    # A relist of the cache replays to every handler.
    for listener in list(cache.listeners):
        listener(None, None)
    assert seen[-1] is None
    # Stopped: nothing more, and the cache no longer knows the factory.
    factory.stop()
    await store.create(CM, "team", {"metadata": {"name": "late"}}, SYSTEM_USER)
    await cache.sync()
    assert seen[-1] is None and ("ADDED", "late") not in seen
    assert factory._on_cache_event not in cache.listeners


def test_controllers_and_the_scheduler_never_reach_the_store_or_the_server():
    """Only the manager (which makes the clients) and the default-policy bootstrap (which
    runs as the API server) may touch the store; nobody uses the system user."""
    root = pathlib.Path(__file__).resolve().parents[2] / "apiserver_min"
    allowed = {"manager.py", "bootstrappolicy.py"}
    bad = []
    for path in sorted((root / "controllers").glob("*.py")) + sorted((root / "scheduler").glob("*.py")):
        if path.name in allowed:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = {a.name for a in node.names}
                if node.module.endswith("registry.store") or node.module.endswith("client.host"):
                    bad.append(f"{path.name}: imports {node.module}")
                if "SYSTEM_USER" in imported:
                    bad.append(f"{path.name}: imports SYSTEM_USER")
            if isinstance(node, ast.Attribute) and node.attr in ("store", "server"):
                bad.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert not bad, "\n".join(bad)
