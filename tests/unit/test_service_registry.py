"""Services through the generic store with the allocators (registry/services.py):
defaults, allocation, the type-change table, the failure table with upstream's
messages, no leak on a failed write, dry-run, release on delete, and the repair loop."""

from __future__ import annotations

import contextlib
import copy

import orjson
import pytest

from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.registry.core import ServiceStrategy
from apiserver_min.registry.rest import DeleteOptions
from apiserver_min.registry.servicerepair import LEAK_ROUNDS, ServiceRangeRepair
from apiserver_min.registry.services import ServiceAllocators
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

SVC = REGISTRY.by_resource("", "v1", "services")
EVENTS = REGISTRY.by_resource("", "v1", "events")


@contextlib.asynccontextmanager
async def service_store(path, cidrs: list[str], ports: tuple[int, int] = (30000, 100)):
    """A generic store on a fresh SQLite file with the Service allocators wired as the
    server wires them: (store, allocators)."""
    backend = SqliteBackend(str(path), compaction_interval=0)
    await backend.start()
    try:
        store = Store(backend, REGISTRY, WatchCache(backend, list(REGISTRY.kinds), key_prefix))
        allocs = ServiceAllocators(backend, cidrs, *ports)
        strategy = store.strategy(SVC)
        assert isinstance(strategy, ServiceStrategy)
        strategy.allocators = allocs
        yield store, allocs
    finally:
        await backend.close()


@pytest.fixture
async def env(tmp_path):
    async with service_store(tmp_path / "state.db", ["10.96.0.0/24"]) as parts:
        yield parts


def svc(name="s", **spec) -> dict:
    body = {"ports": [{"port": 80}], "selector": {"app": "x"}}
    body.update(spec)
    return {"metadata": {"name": name, "namespace": "default"}, "spec": body}


async def create(store, obj, dry_run=False):
    out, _ = await store.create(SVC, "default", copy.deepcopy(obj), SYSTEM_USER, dry_run=dry_run)
    return out


async def update(store, name, change, dry_run=False):
    def compute(old):
        change(old["spec"])
        return old

    out, _, _ = await store.update(SVC, "default", name, compute, SYSTEM_USER, dry_run=dry_run)
    return out


async def refused(coro) -> list[str]:
    with pytest.raises(st.ApiError) as e:
        await coro
    assert e.value.code in (422, 500), e.value.message
    return [f"{c['field']}: {c['message']}" for c in (e.value.details or {}).get("causes", [])] or [e.value.message]


async def test_defaults_and_allocation(env):
    store, allocs = env
    out = await create(store, svc())
    spec = out["spec"]
    assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
    assert spec["ipFamilyPolicy"] == "SingleStack" and spec["ipFamilies"] == ["IPv4"]
    assert spec["internalTrafficPolicy"] == "Cluster" and "externalTrafficPolicy" not in spec
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    ip = spec["clusterIP"]
    assert spec["clusterIPs"] == [ip] and allocs.primary().contains(ip)
    np = await create(store, svc("n", type="NodePort"))
    assert 30000 <= np["spec"]["ports"][0]["nodePort"] < 30100
    assert np["spec"]["externalTrafficPolicy"] == "Cluster"
    lb = await create(store, svc("lb", type="LoadBalancer", externalTrafficPolicy="Local"))
    assert lb["spec"]["allocateLoadBalancerNodePorts"] is True
    assert 30000 <= lb["spec"]["healthCheckNodePort"] < 30100
    nolb = await create(store, svc("nolb", type="LoadBalancer", allocateLoadBalancerNodePorts=False))
    assert "nodePort" not in nolb["spec"]["ports"][0]
    headless = await create(store, svc("h", clusterIP="None", selector=None))
    assert headless["spec"]["clusterIPs"] == ["None"] and headless["spec"]["ipFamilyPolicy"] == "RequireDualStack"
    ext = await create(store, {"metadata": {"name": "e"}, "spec": {"type": "ExternalName", "externalName": "a.b"}})
    assert "clusterIP" not in ext["spec"] and "ipFamilyPolicy" not in ext["spec"]
    affinity = await create(store, svc("aff", sessionAffinity="ClientIP"))
    assert affinity["spec"]["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}


@pytest.mark.parametrize(
    "spec,expected",
    [
        (
            {"clusterIP": "10.0.0.1"},
            'spec.clusterIPs: Invalid value: ["10.0.0.1"]: failed to allocate IP 10.0.0.1: the provided IP '
            "(10.0.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/24",
        ),
        (
            {"type": "NodePort", "ports": [{"port": 80, "nodePort": 5}]},
            "spec.ports[0].nodePort: Invalid value: 5: provided port is not in the valid range. "
            "The range of valid ports is 30000-30099",
        ),
        (
            {"ports": [{"port": 80, "nodePort": 30005}]},
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
        ),
        (
            {"type": "ExternalName", "externalName": "x.example", "clusterIP": "10.96.0.9", "selector": None},
            "spec.clusterIPs: Forbidden: may not be set for ExternalName services",
        ),
        (
            {"healthCheckNodePort": 30007},
            "spec.healthCheckNodePort: Invalid value: 30007: may only be set when `type` is 'LoadBalancer' and "
            "`externalTrafficPolicy` is 'Local'",
        ),
        (
            {"ipFamilyPolicy": "RequireDualStack"},
            'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack '
            "services",
        ),
        ({"ipFamilies": ["IPv6"]}, 'spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
        ({"type": "ExternalName", "selector": None}, "spec.externalName: Required value"),
        (
            {"type": "ExternalName", "externalName": "Not_A_Host"},
            'spec.externalName: Invalid value: "Not_A_Host": a lowercase RFC 1123 subdomain must consist of lower '
            "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        ({"ports": [{"port": 80}, {"port": 81}]}, "spec.ports[0].name: Required value"),
        (
            {"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}]},
            'spec.ports[1].name: Duplicate value: "a"',
        ),
        (
            {"ports": [{"port": 80, "targetPort": 70000}]},
            "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        (
            {"ports": [{"port": 80, "targetPort": "not_iana"}]},
            'spec.ports[0].targetPort: Invalid value: "not_iana": must contain only alpha-numeric characters '
            "(a-z, 0-9), and hyphens (-)",
        ),
        (
            {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86401}}},
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and "
            "less than 86400",
        ),
        (
            {"externalIPs": ["1.2.3"]},
            'spec.externalIPs[0]: Invalid value: "1.2.3": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)',
        ),
        (
            {"externalIPs": ["127.0.0.1"]},
            'spec.externalIPs[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8)',
        ),
        (
            {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.6"]},
            'spec.clusterIPs: Invalid value: ["10.96.0.6"]: first value must match `clusterIP`',
        ),
        (
            {
                "clusterIP": "10.96.0.5",
                "clusterIPs": ["10.96.0.5", "10.96.0.6", "10.96.0.7"],
                "ipFamilyPolicy": "PreferDualStack",
            },
            'spec.clusterIPs: Invalid value: ["10.96.0.5","10.96.0.6","10.96.0.7"]: may only hold up to 2 values',
        ),
        (
            {"loadBalancerClass": "x.io/lb"},
            "spec.loadBalancerClass: Forbidden: may only be used when service type is 'LoadBalancer'",
        ),
        (
            {"allocateLoadBalancerNodePorts": False},
            "spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'",
        ),
        ({"ports": []}, "spec.ports: Required value"),
        (
            {"type": "NodePort", "clusterIP": "None"},
            "spec.clusterIP: Invalid value: \"None\": may not be set to 'None' for NodePort services",
        ),
    ],
)
async def test_failure_table(env, spec, expected):
    store, allocs = env
    body = svc("bad", **spec)
    if body["spec"].get("selector") is None:
        body["spec"].pop("selector")
    msgs = await refused(create(store, body))
    assert expected in msgs, msgs
    # Nothing leaked: every range is empty again.
    assert await allocs.primary().allocated_indexes() == set()
    assert await allocs.ports.allocated_indexes() == set()


async def test_used_ip_and_port_are_refused(env):
    store, allocs = env
    await create(store, svc("a", clusterIP="10.96.0.10", type="NodePort", ports=[{"port": 80, "nodePort": 30010}]))
    msgs = await refused(create(store, svc("b", clusterIP="10.96.0.10")))
    assert msgs == [
        'spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already '
        "allocated"
    ]
    msgs = await refused(create(store, svc("c", type="NodePort", ports=[{"port": 80, "nodePort": 30010}])))
    assert msgs == ["spec.ports[0].nodePort: Invalid value: 30010: provided port is already allocated"]
    assert await allocs.primary().allocated_indexes() == {allocs.primary().index_of("10.96.0.10")}


async def test_a_failed_create_after_allocation_leaks_nothing(env):
    store, allocs = env
    await create(store, svc("dup"))
    before = await allocs.primary().allocated_indexes()
    with pytest.raises(st.ApiError) as e:
        await create(store, svc("dup", type="NodePort"))
    assert e.value.code == 409
    assert await allocs.primary().allocated_indexes() == before
    assert await allocs.ports.allocated_indexes() == set()


async def test_dry_run_keeps_no_allocation(env):
    store, allocs = env
    out = await create(store, svc("d", type="NodePort"), dry_run=True)
    assert out["spec"]["clusterIP"] and out["spec"]["ports"][0]["nodePort"]
    assert await allocs.primary().allocated_indexes() == set()
    assert await allocs.ports.allocated_indexes() == set()
    await create(store, svc("real"))
    await update(store, "real", lambda s: s.update(type="NodePort"), dry_run=True)
    assert await allocs.ports.allocated_indexes() == set()


async def test_immutability_and_type_changes(env):
    store, allocs = env
    out = await create(store, svc("t", type="LoadBalancer", externalTrafficPolicy="Local", loadBalancerClass="x.io/a"))
    ip = out["spec"]["clusterIP"]
    other = "10.96.0.200" if ip != "10.96.0.200" else "10.96.0.201"
    msgs = await refused(update(store, "t", lambda s: s.update(clusterIP=other, clusterIPs=[other])))
    assert f'spec.clusterIPs[0]: Invalid value: ["{other}"]: may not change once set' in msgs
    msgs = await refused(update(store, "t", lambda s: s.update(loadBalancerClass="x.io/b")))
    assert 'spec.loadBalancerClass: Invalid value: "x.io/b": may not change once set' in msgs
    hc = out["spec"]["healthCheckNodePort"]
    msgs = await refused(update(store, "t", lambda s: s.update(healthCheckNodePort=hc + 1 if hc < 30099 else hc - 1)))
    assert any("cannot change healthCheckNodePort" in m for m in msgs)
    # A PUT without the allocated values keeps them.
    kept = await update(store, "t", lambda s: [s.pop("clusterIP"), s.pop("clusterIPs"), s["ports"][0].pop("nodePort")])
    assert kept["spec"]["clusterIP"] == ip and kept["spec"]["ports"] == out["spec"]["ports"]
    # LoadBalancer -> ClusterIP: node ports, health check port, class and allocate flag erased and released.
    ports_before = await allocs.ports.allocated_indexes()
    assert len(ports_before) == 2
    cip = await update(store, "t", lambda s: s.update(type="ClusterIP"))
    spec = cip["spec"]
    assert "nodePort" not in spec["ports"][0] and "healthCheckNodePort" not in spec
    assert "loadBalancerClass" not in spec and "allocateLoadBalancerNodePorts" not in spec
    assert spec["clusterIP"] == ip and "externalTrafficPolicy" not in spec
    assert await allocs.ports.allocated_indexes() == set()
    # ClusterIP -> ExternalName erases and releases the addresses; and back allocates anew.
    ext = await update(store, "t", lambda s: s.update(type="ExternalName", externalName="db.example"))
    for f in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        assert f not in ext["spec"]
    assert await allocs.primary().allocated_indexes() == set()
    back = await update(store, "t", lambda s: [s.update(type="ClusterIP"), s.pop("externalName")])
    assert allocs.primary().contains(back["spec"]["clusterIP"])


async def test_delete_releases(env):
    store, allocs = env
    await create(store, svc("x", type="NodePort"))
    await store.delete(SVC, "default", "x", DeleteOptions(), SYSTEM_USER)
    assert await allocs.primary().allocated_indexes() == set()
    assert await allocs.ports.allocated_indexes() == set()


async def test_repair_frees_leaks_and_reports_duplicates(env):
    store, allocs = env
    await create(store, svc("keep", clusterIP="10.96.0.20"))
    leaked = allocs.primary().index_of("10.96.0.30")
    await allocs.primary().allocate_index(leaked)
    # A second Service on the same address, written behind the allocator's back.
    await create(store, svc("twin"))
    raw = await store.backend.get("/services/default/twin")
    twin = orjson.loads(raw.value)
    twin["spec"]["clusterIP"], twin["spec"]["clusterIPs"] = "10.96.0.20", ["10.96.0.20"]
    await store.backend.update("/services/default/twin", orjson.dumps(twin), raw.mod_revision)
    repair = ServiceRangeRepair(store, REGISTRY, allocs)
    for _ in range(LEAK_ROUNDS):
        await repair.repair()
    assert await allocs.primary().allocated_indexes() == {allocs.primary().index_of("10.96.0.20")}
    listed = await store.backend.list(key_prefix(EVENTS))
    reasons = [orjson.loads(kv.value)["reason"] for kv in listed.items]
    assert "ClusterIPAlreadyAllocated" in reasons


@pytest.fixture
async def dual(tmp_path):
    async with service_store(tmp_path / "dual.db", ["10.96.0.0/24", "fd00::/120"]) as parts:
        yield parts


async def test_dual_stack_policies(dual):
    store, allocs = dual
    single = (await create(store, svc("single")))["spec"]
    assert single["ipFamilies"] == ["IPv4"] and len(single["clusterIPs"]) == 1
    prefer = (await create(store, svc("prefer", ipFamilyPolicy="PreferDualStack")))["spec"]
    assert prefer["ipFamilies"] == ["IPv4", "IPv6"]
    assert allocs.ips["IPv4"].contains(prefer["clusterIPs"][0]) and allocs.ips["IPv6"].contains(prefer["clusterIPs"][1])
    v6 = (await create(store, svc("v6", ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv6", "IPv4"])))["spec"]
    assert v6["clusterIP"] == v6["clusterIPs"][0] and ":" in v6["clusterIP"] and "." in v6["clusterIPs"][1]
    msgs = await refused(create(store, svc("two", ipFamilies=["IPv4", "IPv6"])))
    assert (
        "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' "
        "when multiple IP families are specified"
    ) in msgs
    # Downgrade to one family releases the secondary address.
    down = await update(store, "prefer", lambda s: s.update(ipFamilyPolicy="SingleStack"))
    assert down["spec"]["ipFamilies"] == ["IPv4"] and len(down["spec"]["clusterIPs"]) == 1
    v6_alloc = allocs.ips["IPv6"]
    assert await v6_alloc.allocated_indexes() == {v6_alloc.index_of(v6["clusterIPs"][0])}


async def test_delete_takes_the_endpoints_of_the_same_name(env):
    store, _ = env
    endpoints = REGISTRY.by_resource("", "v1", "endpoints")
    await create(store, svc("withep"))
    await store.create(endpoints, "default", {"metadata": {"name": "withep"}, "subsets": []}, SYSTEM_USER)
    await store.create(endpoints, "default", {"metadata": {"name": "other"}, "subsets": []}, SYSTEM_USER)
    await store.delete(SVC, "default", "withep", DeleteOptions(), SYSTEM_USER)
    with pytest.raises(st.ApiError) as e:
        await store.get(endpoints, "default", "withep")
    assert e.value.code == 404
    await store.get(endpoints, "default", "other")


async def test_status_load_balancer_ingress_is_checked(env):
    store, _ = env
    await create(store, svc("st", type="LoadBalancer"))

    def set_status(ingress):
        def compute(obj):
            obj["status"] = {"loadBalancer": {"ingress": ingress}}
            return obj

        return compute

    msgs = await refused(
        store.update(
            SVC,
            "default",
            "st",
            set_status([{"ip": "300.1.1.1"}, {"hostname": "1.2.3.4"}]),
            SYSTEM_USER,
            subresource="status",
        )
    )
    assert 'status.loadBalancer.ingress[0].ip: Invalid value: "300.1.1.1": must be a valid IP address' in msgs
    assert (
        'status.loadBalancer.ingress[1].hostname: Invalid value: "1.2.3.4": must be a DNS name, not an IP address'
        in msgs
    )
    out, _, _ = await store.update(
        SVC,
        "default",
        "st",
        set_status([{"ip": "192.0.2.1"}, {"hostname": "lb.example"}]),
        SYSTEM_USER,
        subresource="status",
    )
    assert out["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.1"


async def test_a_failed_update_after_allocation_leaks_nothing(env):
    store, allocs = env
    await create(store, svc("u"))

    def bad_type_change(s):
        s.update(type="NodePort", sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 0}})

    msgs = await refused(update(store, "u", bad_type_change))
    assert msgs == [
        "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400"
    ]
    assert await allocs.ports.allocated_indexes() == set()
    # And a failed update never releases what the Service keeps.
    np = await create(store, svc("keeps", type="NodePort"))
    port = np["spec"]["ports"][0]["nodePort"]
    msgs = await refused(update(store, "keeps", lambda s: s.update(type="ClusterIP", sessionAffinity="Sticky")))
    assert await allocs.ports.allocated_indexes() == {port - 30000}


async def test_duplicate_ports_and_bad_source_ranges(env):
    store, _ = env
    msgs = await refused(create(store, svc("dp", ports=[{"port": 80, "name": "a"}, {"port": 80, "name": "b"}])))
    assert msgs == [
        'spec.ports[1]: Duplicate value: core.ServicePort{Name:"", Protocol:"TCP", AppProtocol:(*string)(nil), '
        'Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:""}, NodePort:0}'
    ]
    msgs = await refused(create(store, svc("sr", type="LoadBalancer", loadBalancerSourceRanges=["10.0.0.0/33"])))
    assert msgs == [
        'spec.LoadBalancerSourceRanges: Invalid value: "[10.0.0.0/33]": must be a list of IP ranges. '
        "For example, 10.240.0.0/24,10.250.0.0/24 "
    ]
