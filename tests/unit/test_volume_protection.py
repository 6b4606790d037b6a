"""The pvc-protection and pv-protection controllers (controllers/volumeprotection.py),
as their own service accounts under the default RBAC policy, with the
StorageObjectInUseProtection plugin putting the finalizers on."""

from __future__ import annotations

import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.admission.plugins.storageprotection import StorageObjectInUseProtection
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.authz.authorizer import PrivilegedGroups, Union
from apiserver_min.authz.rbac import RbacAuthorizer, RbacIndex
from apiserver_min.client.informer import InformerFactory
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers.bootstrappolicy import reconcile_default_policy
from apiserver_min.controllers.volumeprotection import (
    PvcProtectionController,
    PvProtectionController,
    claim_names,
    pod_uses_claim,
)
from apiserver_min.registry.rest import DeleteOptions
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

NS = REGISTRY.by_resource("", "v1", "namespaces")
PODS = REGISTRY.by_resource("", "v1", "pods")
PVCS = REGISTRY.by_resource("", "v1", "persistentvolumeclaims")
PVS = REGISTRY.by_resource("", "v1", "persistentvolumes")


@pytest.fixture
async def cluster(tmp_path):
    backend = SqliteBackend(str(tmp_path / "state.db"))
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    index = RbacIndex.attach(cache, REGISTRY)
    store = Store(backend, REGISTRY, cache, Chain([StorageObjectInUseProtection()]))
    await backend.start()
    await cache.start()
    await reconcile_default_policy(store)
    await store.create(NS, "", {"metadata": {"name": "team"}}, SYSTEM_USER)
    await cache.sync()
    informers = InformerFactory(cache, REGISTRY)
    authorizer = Union([PrivilegedGroups(), RbacAuthorizer(index)])

    def client(name: str) -> LocalClient:
        return LocalClient(store, authorizer, controller_user(name), names.CONTROLLER_MANAGER_FIELD_MANAGER)

    yield store, cache, informers, client
    informers.stop()
    await cache.stop()
    await backend.close()


def claim(name: str = "data") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def pod(name: str, claim_name: str, node: str = "") -> dict:
    spec: dict = {
        "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_which_pods_use_a_claim():
    pvc = {"metadata": {"name": "data", "uid": "c1"}}
    assert pod_uses_claim(pod("p", "data", "n1"), pvc)
    assert not pod_uses_claim(pod("p", "data"), pvc)  # not scheduled: the agent never saw it
    assert not pod_uses_claim(pod("p", "other", "n1"), pvc)
    eph = {
        "metadata": {"name": "p", "uid": "p1"},
        "spec": {"nodeName": "n1", "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]},
    }
    assert claim_names(eph) == {"p-scratch"}
    mine = {"metadata": {"name": "p-scratch", "ownerReferences": [{"uid": "p1", "controller": True}]}}
    assert pod_uses_claim(eph, mine)
    assert not pod_uses_claim(eph, {"metadata": {"name": "p-scratch"}})  # not the pod's own claim
    shut_down = {**eph, "metadata": {**eph["metadata"], "deletionTimestamp": "x", "deletionGracePeriodSeconds": 0}}
    assert not pod_uses_claim(shut_down, mine)


async def test_claim_in_use_stays_until_its_pod_is_gone(cluster):
    store, cache, informers, client = cluster
    controller = PvcProtectionController(client("pvc-protection-controller"), informers)
    controller.start()
    obj, _ = await store.create(PVCS, "team", claim(), SYSTEM_USER)
    assert obj["metadata"]["finalizers"] == [names.FINALIZER_PVC_PROTECTION]
    await store.create(PODS, "team", pod("user", "data", "n1"), SYSTEM_USER)
    await store.create(PODS, "team", pod("pending", "data"), SYSTEM_USER)
    await store.delete(PVCS, "team", "data", DeleteOptions(), SYSTEM_USER)
    await cache.sync()
    await controller.sync(("team", "data"))
    kept = await store.get_object(PVCS, "team", "data")
    assert kept["metadata"]["deletionTimestamp"]
    assert kept["metadata"]["finalizers"] == [names.FINALIZER_PVC_PROTECTION]
    await store.delete(PODS, "team", "user", DeleteOptions(grace_period_seconds=0), SYSTEM_USER)
    await cache.sync()
    assert ("team", "data") in _queued(controller)
    await controller.sync(("team", "data"))
    with pytest.raises(st.ApiError) as exc:
        await store.get_object(PVCS, "team", "data")
    assert exc.value.code == 404


async def test_volume_stays_while_bound(cluster):
    store, cache, informers, client = cluster
    controller = PvProtectionController(client("pv-protection-controller"), informers)
    controller.start()
    pv = {
        "metadata": {"name": "pv1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv1"}},
    }
    obj, _ = await store.create(PVS, "", pv, SYSTEM_USER)
    assert obj["metadata"]["finalizers"] == [names.FINALIZER_PV_PROTECTION]

    def phase(value):
        def change(o):
            o["status"] = {"phase": value}
            return o

        return change

    await store.update(PVS, "", "pv1", phase("Bound"), SYSTEM_USER, subresource="status")
    await store.delete(PVS, "", "pv1", DeleteOptions(), SYSTEM_USER)
    await cache.sync()
    await controller.sync("pv1")
    assert (await store.get_object(PVS, "", "pv1"))["metadata"]["finalizers"] == [names.FINALIZER_PV_PROTECTION]
    await store.update(PVS, "", "pv1", phase("Released"), SYSTEM_USER, subresource="status")
    await cache.sync()
    await controller.sync("pv1")
    with pytest.raises(st.ApiError) as exc:
        await store.get_object(PVS, "", "pv1")
    assert exc.value.code == 404


def _queued(controller) -> list:
    return list(controller.queue._pending)
