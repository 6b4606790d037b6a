"""The endpoints controllers' logic without a server: packing of Endpoints subsets,
the 1000-address cap, the EndpointSlice reconciler's minimal churn, mirroring, and the
validation of both kinds."""

from __future__ import annotations

import copy
import itertools

from apiserver_min.api import endpointvalidation as ev
from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.controllers.endpoints import build_subsets, desired_endpoints, repack_subsets, truncate_subsets
from apiserver_min.controllers.endpointslice import Plan, reconcile
from apiserver_min.controllers.endpointslicemirroring import mirror
from apiserver_min.controllers.endpointsutil import TriggerTimeTracker, pod_view, service_view
from apiserver_min.registry.endpoints import EndpointSliceStrategy


def pod(name: str, ip: str, ready: bool = True, *, labels=None, ports=None, deleting=False, phase="Running", node="n1"):
    md: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {"app": "web"}}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod_view(
        {
            "metadata": md,
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "c", "ports": ports if ports is not None else [{"name": "http", "containerPort": 8080}]}
                ],
            },
            "status": {
                "phase": phase,
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def service(**spec):
    body = {
        "selector": {"app": "web"},
        "clusterIP": "10.96.0.10",
        "ipFamilies": ["IPv4"],
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
    }
    body.update(spec)
    return service_view(
        {
            "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"tier": "front"}},
            "spec": body,
        }
    )


# --- Endpoints ---------------------------------------------------------------------------------


def test_subsets_split_ready_and_not_ready_and_skip_pods_without_the_named_port():
    pods = [
        pod("a", "10.0.0.2"),
        pod("b", "10.0.0.1", ready=False),
        pod("c", "10.0.0.3", ports=[]),  # no port named http
        pod("d", "10.0.0.4", deleting=True),
        pod("e", "10.0.0.5", phase="Succeeded"),
        pod("f", "", ready=True),
    ]
    [subset] = build_subsets(service(), pods)
    assert [a["ip"] for a in subset["addresses"]] == ["10.0.0.2"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["10.0.0.1"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert subset["addresses"][0]["targetRef"] == {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"}
    assert subset["addresses"][0]["nodeName"] == "n1"


def test_publish_not_ready_lists_every_pod_as_ready_including_terminating():
    pods = [pod("a", "10.0.0.1", ready=False), pod("b", "10.0.0.2", deleting=True)]
    [subset] = build_subsets(service(publishNotReadyAddresses=True), pods)
    assert [a["ip"] for a in subset["addresses"]] == ["10.0.0.1", "10.0.0.2"]
    assert "notReadyAddresses" not in subset


def test_protocol_must_match_for_named_ports_and_numbers_are_taken_as_is():
    udp = service(ports=[{"name": "dns", "port": 53, "targetPort": "http", "protocol": "UDP"}])
    assert build_subsets(udp, [pod("a", "10.0.0.1")]) == []
    numeric = service(ports=[{"name": "x", "port": 80, "targetPort": 9090, "protocol": "TCP"}])
    [subset] = build_subsets(numeric, [pod("a", "10.0.0.1", ports=[])])
    assert subset["ports"][0]["port"] == 9090


def test_headless_service_without_ports_lists_addresses_only():
    headless = service(clusterIP="None", ports=[])
    [subset] = build_subsets(headless, [pod("a", "10.0.0.1")])
    assert subset == {
        "addresses": [
            {
                "ip": "10.0.0.1",
                "nodeName": "n1",
                "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"},
            }
        ]
    }


def test_repack_groups_addresses_by_identical_port_sets_and_not_ready_trumps():
    a = {"ip": "10.0.0.1"}
    b = {"ip": "10.0.0.2"}
    p80 = {"name": "a", "port": 80, "protocol": "TCP"}
    p81 = {"name": "b", "port": 81, "protocol": "TCP"}
    packed = repack_subsets(
        [
            {"addresses": [b], "ports": [p80]},
            {"addresses": [a], "ports": [p80]},
            {"addresses": [a], "ports": [p81]},
            {"notReadyAddresses": [a], "ports": [p81]},
        ]
    )
    assert packed == [
        {"addresses": [a, b], "ports": [p80]},
        {"notReadyAddresses": [a], "ports": [p81]},
    ]


def test_over_capacity_is_truncated_and_annotated():
    pods = [pod(f"p{i}", f"10.1.{i // 250}.{i % 250 + 1}") for i in range(1200)]
    svc = service()
    subsets = build_subsets(svc, pods)
    ep = desired_endpoints(svc, subsets, None, 0.0)
    assert ep is not None
    assert sum(len(ss.get("addresses") or []) for ss in ep["subsets"]) == 1000
    assert ep["metadata"]["annotations"][names.ANNOTATION_ENDPOINTS_OVER_CAPACITY] == "truncated"
    assert ep["metadata"]["labels"] == {"tier": "front"}
    # As stored, it is up to date: nothing to write.
    assert desired_endpoints(svc, build_subsets(svc, pods), ep, 0.0) is None


def test_truncation_prefers_ready_addresses():
    subsets = [
        {"addresses": [{"ip": f"10.0.{i // 200}.{i % 200}"} for i in range(900)], "notReadyAddresses": []},
        {"notReadyAddresses": [{"ip": f"10.9.{i // 200}.{i % 200}"} for i in range(300)]},
    ]
    assert truncate_subsets(subsets)
    assert len(subsets[0]["addresses"]) == 900
    assert len(subsets[1]["notReadyAddresses"]) == 100


def test_headless_label_and_trigger_time():
    svc = service(clusterIP="None")
    ep = desired_endpoints(svc, build_subsets(svc, [pod("a", "10.0.0.1")]), None, 1700000000.5)
    assert ep is not None
    assert ep["metadata"]["labels"] == {"tier": "front", names.LABEL_HEADLESS_SERVICE: ""}
    assert (
        ep["metadata"]["annotations"][names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME] == "2023-11-14T22:13:20.5Z"
    )


def test_trigger_time_tracker():
    tracker = TriggerTimeTracker()
    svc = service()
    p = pod("a", "10.0.0.1")
    assert tracker.compute(svc, [p]) == svc.created  # first sync: the Service's creation
    assert tracker.compute(svc, [p]) == 0.0  # nothing changed
    p.ready_since = 1700000100.0
    assert tracker.compute(svc, [p]) == 1700000100.0


# --- EndpointSlices ----------------------------------------------------------------------------

_names = itertools.count(1)


def store(plan: Plan, slices: list[dict]) -> list[dict]:
    """Apply a plan as the API server would: creates get names, writes new revisions."""
    by_name = {s["metadata"]["name"]: s for s in slices}
    for s in plan.delete:
        by_name.pop(s["metadata"]["name"])
    for s in plan.update:
        s = copy.deepcopy(s)
        s["metadata"]["resourceVersion"] = str(next(_names))
        by_name[s["metadata"]["name"]] = s
    for s in plan.create:
        s = copy.deepcopy(s)
        s["metadata"]["name"] = s["metadata"].pop("generateName") + str(next(_names))
        s["metadata"]["resourceVersion"] = str(next(_names))
        by_name[s["metadata"]["name"]] = s
    return list(by_name.values())


def zones(name: str) -> str | None:
    return {"n1": "zone-a", "n2": ""}.get(name)


def addresses(slices: list[dict]) -> list[str]:
    return sorted(a for s in slices for e in s["endpoints"] for a in e["addresses"])


def test_slices_hold_at_most_max_endpoints_and_changing_one_pod_touches_one_slice():
    svc = service()
    pods = [pod(f"p{i}", f"10.2.{i // 200}.{i % 200 + 1}") for i in range(250)]
    plan = reconcile(svc, pods, [], zones, max_per_slice=100)
    assert len(plan.create) == 3 and not plan.update and not plan.delete
    slices = store(plan, [])
    assert sorted(len(s["endpoints"]) for s in slices) == [50, 100, 100]
    s0 = slices[0]
    assert s0["addressType"] == "IPv4"
    assert s0["metadata"]["labels"] == {
        "tier": "front",
        names.LABEL_SERVICE_NAME: "web",
        names.LABEL_MANAGED_BY_SLICE: names.ENDPOINTSLICE_CONTROLLER_NAME,
    }
    assert s0["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    ep = s0["endpoints"][0]
    assert ep["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert ep["zone"] == "zone-a" and ep["nodeName"] == "n1"

    # Nothing changed: nothing to do.
    assert reconcile(svc, pods, slices, zones, max_per_slice=100).empty

    # One pod turns unready: exactly the slice holding it is updated.
    pods[7] = pod("p7", pods[7].ips[0], ready=False)
    plan = reconcile(svc, pods, slices, zones, max_per_slice=100)
    assert len(plan.update) == 1 and not plan.create and not plan.delete
    holder = [s for s in slices if any(e["targetRef"]["name"] == "p7" for e in s["endpoints"])][0]
    assert plan.update[0]["metadata"]["name"] == holder["metadata"]["name"]
    slices = store(plan, slices)

    # A new pod goes into the unchanged slice it fills closest to full (the one with 50).
    pods.append(pod("new", "10.3.0.1"))
    plan = reconcile(svc, pods, slices, zones, max_per_slice=100)
    assert len(plan.update) == 1 and not plan.create
    assert len(plan.update[0]["endpoints"]) == 51
    slices = store(plan, slices)

    # A pod removed: one slice updated; the removed pod's place is not refilled elsewhere.
    gone = pods.pop(3)
    plan = reconcile(svc, pods, slices, zones, max_per_slice=100)
    assert len(plan.update) == 1 and not plan.create and not plan.delete
    slices = store(plan, slices)
    assert gone.ips[0] not in addresses(slices)
    assert len(addresses(slices)) == 250


def test_a_service_without_endpoints_keeps_one_placeholder_slice():
    svc = service()
    plan = reconcile(svc, [], [], zones)
    [placeholder] = plan.create
    assert placeholder["endpoints"] == [] and placeholder["ports"] == []
    slices = store(plan, [])
    assert reconcile(svc, [], slices, zones).empty
    # Pods arrive: the placeholder is reused (a create and a delete become one update).
    plan = reconcile(svc, [pod("a", "10.0.0.1")], slices, zones)
    assert not plan.create and not plan.delete and len(plan.update) == 1
    assert plan.update[0]["metadata"]["name"] == slices[0]["metadata"]["name"]


def test_terminating_pods_stay_serving_but_not_ready_and_missing_nodes_are_skipped():
    svc = service()
    pods = [pod("t", "10.0.0.1", deleting=True), pod("lost", "10.0.0.2", node="gone")]
    plan = reconcile(svc, pods, [], zones)
    [s] = plan.create
    [ep] = s["endpoints"]
    assert ep["conditions"] == {"ready": False, "serving": True, "terminating": True}
    assert plan.missing_nodes == ["gone"]
    # Published not-ready addresses include the pod of the missing node, without a zone.
    plan = reconcile(service(publishNotReadyAddresses=True), pods, [], zones)
    assert addresses(plan.create) == ["10.0.0.1", "10.0.0.2"]


def test_headless_service_without_families_gets_both_address_types():
    svc = service(clusterIP="None", ipFamilies=[])
    plan = reconcile(svc, [pod("a", "10.0.0.1")], [], zones)
    assert sorted(s["addressType"] for s in plan.create) == ["IPv4", "IPv6"]
    v6 = [s for s in plan.create if s["addressType"] == "IPv6"][0]
    assert v6["endpoints"] == []
    assert all(s["metadata"]["labels"][names.LABEL_HEADLESS_SERVICE] == "" for s in plan.create)


def test_service_label_change_updates_slices_without_touching_endpoints():
    svc = service()
    slices = store(reconcile(svc, [pod("a", "10.0.0.1")], [], zones), [])
    relabelled = service_view(
        {
            "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"tier": "back"}},
            "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"], "ports": []},
        }
    )
    plan = reconcile(relabelled, [], slices, zones)
    # The ports changed too (none now), so the old slice's endpoints move: one update.
    assert len(plan.update) == 1 and not plan.create and not plan.delete
    assert plan.update[0]["metadata"]["labels"]["tier"] == "back"


# --- mirroring ---------------------------------------------------------------------------------


def test_mirroring_and_no_change_means_no_write():
    endpoints = {
        "metadata": {"name": "legacy", "namespace": "ns", "uid": "ep-uid", "labels": {"a": "b"}},
        "subsets": [
            {
                "addresses": [{"ip": "192.0.2.1"}, {"ip": "2001:db8::1"}, {"ip": "bogus"}],
                "notReadyAddresses": [{"ip": "192.0.2.2", "nodeName": "n1"}],
                "ports": [{"name": "", "port": 5432, "protocol": "TCP"}],
            }
        ],
    }
    plan = mirror(endpoints, [])
    assert plan.invalid == 1
    assert sorted(s["addressType"] for s in plan.create) == ["IPv4", "IPv6"]
    v4 = [s for s in plan.create if s["addressType"] == "IPv4"][0]
    assert v4["metadata"]["labels"] == {
        "a": "b",
        names.LABEL_SERVICE_NAME: "legacy",
        names.LABEL_MANAGED_BY_SLICE: names.ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME,
    }
    assert v4["metadata"]["ownerReferences"][0]["kind"] == "Endpoints"
    assert sorted((e["addresses"][0], e["conditions"]["ready"]) for e in v4["endpoints"]) == [
        ("192.0.2.1", True),
        ("192.0.2.2", False),
    ]
    slices = store(plan, [])  # type: ignore[arg-type]
    again = mirror(endpoints, slices)
    assert not (again.create or again.update or again.delete)


def test_mirroring_caps_addresses_per_subset():
    endpoints = {
        "metadata": {"name": "big", "namespace": "ns", "uid": "u"},
        "subsets": [{"addresses": [{"ip": f"10.0.{i // 200}.{i % 200 + 1}"} for i in range(30)]}],
    }
    plan = mirror(endpoints, [], max_per_subset=10)
    [s] = plan.create
    assert len(s["endpoints"]) == 10 and plan.skipped == 20


# --- validation --------------------------------------------------------------------------------


def test_non_special_ip_rules_for_ipv6():
    assert [e.detail for e in ev.validate_non_special_ip("::1", "x")] == [
        "may not be in the loopback range (127.0.0.0/8, ::1/128)"
    ]
    assert [e.detail for e in ev.validate_non_special_ip("fe80::1", "x")] == [
        "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
    ]
    assert [e.detail for e in ev.validate_non_special_ip("ff02::1", "x")] == [
        "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"
    ]
    assert [e.detail for e in ev.validate_non_special_ip("::", "x")] == ["may not be unspecified (::)"]
    assert ev.validate_non_special_ip("2001:db8::1", "x") == []


def test_slice_validation_messages():
    errs = ev.validate_endpoint_slice(
        {
            "addressType": "FQDN",
            "endpoints": [{"addresses": ["nodots"]}, {"addresses": []}, {"addresses": ["a.example.com"] * 101}],
            "ports": [{"name": "x", "protocol": "TCP"}, {"name": "x", "protocol": "TCP"}],
        }
    )
    got = [e.message() for e in errs]
    assert (
        'endpoints[0].addresses[0]: Invalid value: "nodots": should be a domain with at least two segments separated by dots'
        in got
    )
    assert "endpoints[1].addresses: Required value: must contain at least 1 address" in got
    assert "endpoints[2].addresses: Too many: 101: must have at most 100 items" in got
    assert 'ports[1].name: Duplicate value: "x"' in got
    errs = ev.validate_endpoint_slice({"addressType": "IPv4", "endpoints": [], "ports": [{}] * 101})
    assert [e.message() for e in errs] == ["ports: Too many: 101: must have at most 100 items"]


def test_deprecated_topology_is_read_only_in_v1():
    strategy = EndpointSliceStrategy(REGISTRY.by_resource(names.DISCOVERY_GROUP, "v1", "endpointslices"))
    topo = {names.LABEL_HOSTNAME: "node-a", "rack": "r1"}
    created = {"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}]}
    created["endpoints"][0]["deprecatedTopology"] = dict(topo)
    strategy.prepare_for_create(created)
    assert "deprecatedTopology" not in created["endpoints"][0]
    # Stored (as by an older version) with a topology: an update that leaves the endpoints alone keeps it ...
    old = {
        "metadata": {"name": "s", "uid": "u", "generation": 1},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "deprecatedTopology": dict(topo)}],
    }
    same = copy.deepcopy(old)
    same["metadata"]["labels"] = {"x": "y"}
    strategy.prepare_for_update(same, old)
    assert same["endpoints"][0]["deprecatedTopology"] == topo and same["metadata"]["generation"] == 1
    # ... one that changes them drops it, keeping the node it named as nodeName.
    changed = copy.deepcopy(old)
    changed["endpoints"][0]["conditions"] = {"ready": False}
    strategy.prepare_for_update(changed, old)
    assert "deprecatedTopology" not in changed["endpoints"][0]
    assert changed["endpoints"][0]["nodeName"] == "node-a"
    assert changed["metadata"]["generation"] == 2
