"""Services against the real ``orch-apiserver`` with kubectl: cluster IPs in range,
unique and immutable; node ports in range and released on a type change; every row
of the spec's failure table refused with upstream's message; dry-run keeps nothing;
DenyServiceExternalIPs; the ``orch`` Service with its endpoints; and allocations that
survive a restart."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import shutil
import uuid

import pytest
import yaml

from apiserver_min.api import names
from apiserver_min.hostaddr import advertise_address
from tests.apiserver_fixtures import KUBECTL, ApiServerProcess, Kubectl, create_namespace
from tests.components import free_port
from tests.helpers import uniq

IP_RANGE = "10.97.0.0/26"
PORT_RANGE = "30100-30199"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ApiServerProcess(
        tmp_path_factory.mktemp("svc-apiserver"),
        free_port(),
        extra_args=(
            f"--service-cluster-ip-range={IP_RANGE}",
            f"--service-node-port-range={PORT_RANGE}",
            "--enable-admission-plugins=DenyServiceExternalIPs",
        ),
    )
    with s:
        yield s


@pytest.fixture(scope="module")
def kc(server, tmp_path_factory):
    if shutil.which(KUBECTL) is None:
        pytest.skip(f"{KUBECTL} not installed")
    return Kubectl(server, tmp_path_factory.mktemp("kubectl-home"))


@pytest.fixture(scope="module")
def ns(server):
    name = uniq("svc")
    create_namespace(server, name)
    return name


def get_svc(kc: Kubectl, ns: str, name: str) -> dict:
    return json.loads(kc("get", "service", name, "-n", ns, "-o", "json", check=True).stdout)


def test_the_orch_service_has_the_first_address(server):
    _, svc = server.json("GET", "/api/v1/namespaces/default/services/orch", expect=200)
    assert svc["spec"]["clusterIP"] == "10.97.0.1" and svc["spec"]["clusterIPs"] == ["10.97.0.1"]
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": server.port}]
    # Bound to 127.0.0.1, the server advertises its default-route interface's address, as
    # upstream (endpoints may not be loopback ones).
    host = advertise_address("127.0.0.1")
    _, ep = server.json("GET", "/api/v1/namespaces/default/endpoints/orch", expect=200)
    assert ep["subsets"] == [
        {"addresses": [{"ip": host}], "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}]}
    ]
    _, sl = server.json("GET", f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/default/endpointslices/orch", expect=200)
    assert sl["metadata"]["labels"][names.LABEL_SERVICE_NAME] == "orch"
    assert sl["addressType"] == "IPv4" and [e["addresses"] for e in sl["endpoints"]] == [[host]]


def test_cluster_ips_are_in_range_unique_and_immutable(kc, ns):
    net = ipaddress.ip_network(IP_RANGE)
    made = [f"c{i}" for i in range(8)]
    for name in made:
        kc("create", "service", "clusterip", name, "--tcp=80:8080", "-n", ns, check=True)
    kc("run", "web", "--image=busybox", "--labels=app=web", "-n", ns, check=True)
    kc("expose", "pod", "web", "--port=80", "--name=exposed", "-n", ns, check=True)
    ips = [get_svc(kc, ns, n)["spec"]["clusterIP"] for n in [*made, "exposed"]]
    assert len(set(ips)) == len(ips) and "10.97.0.1" not in ips
    assert all(ipaddress.ip_address(ip) in net for ip in ips)
    out = kc("get", "service", "exposed", "-n", ns, check=True).stdout
    assert ips[-1] in out
    other = next(str(a) for a in net.hosts() if str(a) not in ips)
    patch = json.dumps({"spec": {"clusterIP": other, "clusterIPs": [other]}})
    r = kc("patch", "service", "c0", "-n", ns, "-p", patch)
    assert r.returncode != 0
    assert f'spec.clusterIPs[0]: Invalid value: ["{other}"]: may not change once set' in r.stderr
    assert get_svc(kc, ns, "c0")["spec"]["clusterIP"] == ips[0]


def test_node_ports_are_in_range_and_released_on_type_change(kc, ns):
    kc("create", "service", "nodeport", "np", "--tcp=80:8080", "-n", ns, check=True)
    port = get_svc(kc, ns, "np")["spec"]["ports"][0]["nodePort"]
    assert 30100 <= port <= 30199
    r = kc("create", "service", "nodeport", "np2", "--tcp=80:8080", f"--node-port={port}", "-n", ns)
    assert r.returncode != 0 and "provided port is already allocated" in r.stderr
    kc("patch", "service", "np", "-n", ns, "-p", '{"spec":{"type":"ClusterIP"}}', check=True)
    assert "nodePort" not in get_svc(kc, ns, "np")["spec"]["ports"][0]
    kc("create", "service", "nodeport", "np2", "--tcp=80:8080", f"--node-port={port}", "-n", ns, check=True)
    assert get_svc(kc, ns, "np2")["spec"]["ports"][0]["nodePort"] == port


FAILURES = [
    (
        {"clusterIP": "10.0.0.1"},
        'spec.clusterIPs: Invalid value: ["10.0.0.1"]: failed to allocate IP 10.0.0.1: the provided IP (10.0.0.1) '
        "is not in the valid range. The range of valid IPs is 10.97.0.0/26",
    ),
    (
        {"clusterIP": "10.97.0.1"},
        'spec.clusterIPs: Invalid value: ["10.97.0.1"]: failed to allocate IP 10.97.0.1: provided IP is already '
        "allocated",
    ),
    (
        {"type": "NodePort", "ports": [{"port": 80, "nodePort": 5}]},
        "spec.ports[0].nodePort: Invalid value: 5: provided port is not in the valid range. The range of valid ports "
        "is 30100-30199",
    ),
    (
        {"ports": [{"port": 80, "nodePort": 30150}]},
        "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
    ),
    (
        {"type": "ExternalName", "externalName": "db.example.com", "clusterIP": "10.97.0.9"},
        "spec.clusterIPs: Forbidden: may not be set for ExternalName services",
    ),
    (
        {"type": "LoadBalancer", "healthCheckNodePort": 30160},
        "spec.healthCheckNodePort: Invalid value: 30160: may only be set when `type` is 'LoadBalancer' and "
        "`externalTrafficPolicy` is 'Local'",
    ),
    (
        {"ipFamilyPolicy": "RequireDualStack"},
        'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services',
    ),
    ({"ipFamilies": ["IPv6"]}, 'spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
]


@pytest.mark.parametrize("spec,message", FAILURES)
def test_failure_table(kc, ns, spec, message):
    name = uniq("bad")
    body = {"ports": [{"port": 80}], **spec}
    if body.get("type") == "ExternalName":
        body.pop("ports")
    doc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": body}
    r = kc("create", "-f", "-", input=yaml.safe_dump(doc))
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert kc("get", "service", name, "-n", ns).returncode != 0


def test_immutable_after_set(server, ns):
    path = f"/api/v1/namespaces/{ns}/services"
    body = {
        "metadata": {"name": "lb"},
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Local",
            "loadBalancerClass": "example.com/lb",
            "ports": [{"port": 80}],
        },
    }
    _, lb = server.json("POST", path, body, expect=201)
    hc = lb["spec"]["healthCheckNodePort"]
    assert 30100 <= hc <= 30199
    merge = {"Content-Type": "application/merge-patch+json"}
    status, doc = server.json("PATCH", f"{path}/lb", {"spec": {"loadBalancerClass": "example.com/other"}}, merge)
    assert (
        status == 422
        and 'spec.loadBalancerClass: Invalid value: "example.com/other": may not change once set' in (doc["message"])
    )
    status, doc = server.json(
        "PATCH", f"{path}/lb", {"spec": {"healthCheckNodePort": 30199 if hc != 30199 else 30198}}, merge
    )
    assert status == 422 and "cannot change healthCheckNodePort" in doc["message"]
    # Changing the type erases and releases it.
    _, cip = server.json("PATCH", f"{path}/lb", {"spec": {"type": "ClusterIP"}}, merge, expect=200)
    assert "healthCheckNodePort" not in cip["spec"] and "loadBalancerClass" not in cip["spec"]
    body = {"metadata": {"name": "reuse"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": hc}]}}
    server.json("POST", path, body, expect=201)


def test_dry_run_keeps_nothing(kc, ns):
    r = kc("create", "service", "nodeport", "dry", "--tcp=80:80", "--dry-run=server", "-o", "json", "-n", ns)
    spec = json.loads(r.stdout)["spec"]
    ip, port = spec["clusterIP"], spec["ports"][0]["nodePort"]
    assert ip and port
    assert kc("get", "service", "dry", "-n", ns).returncode != 0
    doc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "takes-dry", "namespace": ns},
        "spec": {"type": "NodePort", "clusterIP": ip, "ports": [{"port": 80, "nodePort": port}]},
    }
    kc("create", "-f", "-", input=yaml.safe_dump(doc), check=True)


def test_deny_external_ips(server, ns):
    path = f"/api/v1/namespaces/{ns}/services"
    body = {"metadata": {"name": "ext"}, "spec": {"ports": [{"port": 80}], "externalIPs": ["192.0.2.10"]}}
    status, doc = server.json("POST", path, body)
    assert status == 403
    assert doc["message"] == 'services "ext" is forbidden: Use of external IPs is denied by admission control'


def test_allocations_survive_a_restart(tmp_path):
    # A /28 holds 14 addresses: the orch Service and 13 more fill it.
    s = ApiServerProcess(tmp_path / "d", free_port(), extra_args=("--service-cluster-ip-range=10.98.0.0/28",))
    s.start()
    try:
        path = "/api/v1/namespaces/default/services"
        before = set()
        for i in range(7):
            _, svc = s.json(
                "POST", path, {"metadata": {"name": f"a{i}"}, "spec": {"ports": [{"port": 80}]}}, expect=201
            )
            before.add(svc["spec"]["clusterIP"])
        s.stop()
        s.start()
        after = set()
        for i in range(6):
            _, svc = s.json(
                "POST", path, {"metadata": {"name": f"b{i}"}, "spec": {"ports": [{"port": 80}]}}, expect=201
            )
            after.add(svc["spec"]["clusterIP"])
        assert len(after) == 6 and not after & before and "10.98.0.1" not in before | after
        status, doc = s.json("POST", path, {"metadata": {"name": "full"}, "spec": {"ports": [{"port": 80}]}})
        assert status == 500
        assert doc["message"] == "Internal error occurred: failed to allocate a serviceIP: range is full"
        # Deleting one frees its address for the next.
        s.json("DELETE", f"{path}/a0", expect=200)
        _, svc = s.json("POST", path, {"metadata": {"name": "again"}, "spec": {"ports": [{"port": 80}]}}, expect=201)
        assert svc["spec"]["clusterIP"] not in after | before - {svc["spec"]["clusterIP"]}
    finally:
        s.stop()


def test_two_servers_on_one_etcd_share_the_ranges_and_the_endpoints(etcd, tmp_path):
    prefix = f"/orch-test/{uuid.uuid4().hex}"
    common = {"backend": "etcd", "etcd_endpoint": etcd.endpoint, "etcd_prefix": prefix}
    s1 = ApiServerProcess(tmp_path / "one", free_port(), **common)
    s2 = ApiServerProcess(tmp_path / "two", free_port(), extra_args=("--advertise-address=198.51.100.2",), **common)
    s1.start()
    try:
        s2.start()
        try:
            _, orch = s2.json("GET", "/api/v1/namespaces/default/services/orch", expect=200)
            assert orch["spec"]["clusterIP"] == "10.96.0.1"
            _, ep = s1.json("GET", "/api/v1/namespaces/default/endpoints/orch", expect=200)
            served = {(a["ip"], sub["ports"][0]["port"]) for sub in ep["subsets"] for a in sub["addresses"]}
            assert served == {(advertise_address("127.0.0.1"), s1.port), ("198.51.100.2", s2.port)}

            def make(i: int) -> str:
                server = (s1, s2)[i % 2]
                body = {"metadata": {"name": f"s{i}"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
                _, svc = server.json("POST", "/api/v1/namespaces/default/services", body, expect=201)
                return f"{svc['spec']['clusterIP']}/{svc['spec']['ports'][0]['nodePort']}"

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                got = list(pool.map(make, range(24)))
            ips = [g.split("/")[0] for g in got]
            ports = [g.split("/")[1] for g in got]
            assert len(set(ips)) == 24 and len(set(ports)) == 24
        finally:
            s2.stop()
        # The stopped server took itself out; the live one stays.
        _, ep = s1.json("GET", "/api/v1/namespaces/default/endpoints/orch", expect=200)
        assert [a["ip"] for sub in ep["subsets"] for a in sub["addresses"]] == [advertise_address("127.0.0.1")]
    finally:
        s1.stop()


def test_apply_twice_keeps_the_allocated_values(kc, ns):
    doc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "applied", "namespace": ns},
        "spec": {"type": "NodePort", "selector": {"app": "a"}, "ports": [{"name": "http", "port": 80}]},
    }
    for extra in ((), ("--server-side",)):
        name = "applied" + ("-ssa" if extra else "")
        doc["metadata"]["name"] = name
        kc("apply", *extra, "-f", "-", input=yaml.safe_dump(doc), check=True)
        first = get_svc(kc, ns, name)["spec"]
        doc["spec"]["selector"] = {"app": "b"}
        kc("apply", *extra, "-f", "-", input=yaml.safe_dump(doc), check=True)
        second = get_svc(kc, ns, name)["spec"]
        assert second["selector"] == {"app": "b"}
        assert second["clusterIP"] == first["clusterIP"]
        assert second["ports"][0]["nodePort"] == first["ports"][0]["nodePort"]
        doc["spec"]["selector"] = {"app": "a"}
