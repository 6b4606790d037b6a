"""The 'orch' Service and its endpoints (registry/defaultservice.py): the first address of
the range, the port to the secure port, and the live API servers by their lease records
(a server that stopped renewing drops out after the TTL; one that shuts down at once)."""

from __future__ import annotations

import pytest

from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.registry.defaultservice import LEASE_TTL_SECONDS, DefaultService
from apiserver_min.registry.rest import DeleteOptions
from tests.unit.test_service_registry import service_store

SVC = REGISTRY.by_resource("", "v1", "services")
EP = REGISTRY.by_resource("", "v1", "endpoints")
SLICES = REGISTRY.by_resource(names.DISCOVERY_GROUP, "v1", "endpointslices")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def parts(tmp_path):
    async with service_store(tmp_path / "state.db", ["10.96.0.0/12"], (30000, 2768)) as pair:
        yield pair


async def addresses(store) -> list[tuple[str, int]]:
    ep = await store.get_object(EP, "default", "orch")
    return [(a["ip"], s["ports"][0]["port"]) for s in ep["subsets"] for a in s["addresses"]]


async def test_service_and_endpoints_follow_the_live_servers(parts):
    store, allocs = parts
    clock = Clock()
    one = DefaultService(store, REGISTRY, allocs, "192.0.2.1", 6443, clock)
    two = DefaultService(store, REGISTRY, allocs, "192.0.2.2", 6443, clock)
    await one.start()
    await two.start()
    svc = await store.get_object(SVC, "default", "orch")
    assert svc["spec"]["clusterIP"] == "10.96.0.1"
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "orch"}
    assert await addresses(store) == [("192.0.2.1", 6443), ("192.0.2.2", 6443)]
    sl = await store.get_object(SLICES, "default", "orch")
    assert sl["metadata"]["labels"] == {names.LABEL_SERVICE_NAME: "orch"}
    assert [e["addresses"] for e in sl["endpoints"]] == [["192.0.2.1"], ["192.0.2.2"]]
    # Server two stops renewing (crashed): after the TTL the next reconcile drops it.
    clock.now += LEASE_TTL_SECONDS + 1
    await one.renew_lease()
    await one.reconcile_endpoints()
    assert await addresses(store) == [("192.0.2.1", 6443)]
    # A clean shutdown takes a server out at once.
    await two.start()
    assert len(await addresses(store)) == 2
    await two.shutdown()
    assert await addresses(store) == [("192.0.2.1", 6443)]


async def test_a_deleted_orch_service_comes_back_with_its_address(parts):
    store, allocs = parts
    ds = DefaultService(store, REGISTRY, allocs, "192.0.2.1", 6443, Clock())
    await ds.start()
    await store.delete(SVC, "default", "orch", DeleteOptions(), SYSTEM_USER)
    await ds.ensure_service(reconcile_ports=False)
    assert (await store.get_object(SVC, "default", "orch"))["spec"]["clusterIP"] == "10.96.0.1"
    # A second start (a restart) finds it and keeps it.
    await ds.start()
    assert (await store.get_object(SVC, "default", "orch"))["spec"]["clusterIP"] == "10.96.0.1"


async def test_a_taken_first_address_is_logged_not_fatal(parts, caplog):
    store, allocs = parts
    taken = {"metadata": {"name": "squatter"}, "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}}
    await store.create(SVC, "default", taken, SYSTEM_USER)
    ds = DefaultService(store, REGISTRY, allocs, "192.0.2.1", 6443, Clock())
    await ds.start()
    assert "cannot create the Service default/orch" in caplog.text
    assert "provided IP is already allocated" in caplog.text
    assert await addresses(store) == [("192.0.2.1", 6443)]
    # Once the address is free again, the next renewal creates it.
    await store.delete(SVC, "default", "squatter", DeleteOptions(), SYSTEM_USER)
    await ds.ensure_service(reconcile_ports=False)
    assert (await store.get_object(SVC, "default", "orch"))["spec"]["clusterIP"] == "10.96.0.1"
