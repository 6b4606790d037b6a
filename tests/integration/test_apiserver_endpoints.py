"""Against a running orch-apiserver: Endpoints and EndpointSlices follow the pods of a
Service (pods made by API, their IP and readiness written through pods/status as the
administrator, no agent), slices are mirrored from hand-written Endpoints of a Service
without a selector, both kinds are validated, and kubectl shows them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from apiserver_min.api import names
from apiserver_min.hostaddr import advertise_address
from tests.apiserver_fixtures import Kubectl, create_namespace, kubectl_binary
from tests.helpers import uniq, wait_for

SLICES = f"/apis/{names.DISCOVERY_GROUP}/v1"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def ns(apiserver):
    name = uniq("eps")
    create_namespace(apiserver, name)
    _, node = apiserver.json(
        "POST",
        "/api/v1/nodes",
        {"metadata": {"name": f"{name}-node", "labels": {names.LABEL_ZONE: "zone-a"}}},
        expect=201,
    )
    return name


def make_pod(apiserver, ns: str, name: str, ip: str, ready: bool, labels: dict | None = None) -> dict:
    pod = {
        "metadata": {"name": name, "labels": labels or {"app": "web"}},
        "spec": {
            "nodeName": f"{ns}-node",
            "containers": [{"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}],
        },
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    return set_status(apiserver, ns, name, ip, ready)


def set_status(apiserver, ns: str, name: str, ip: str, ready: bool) -> dict:
    status = {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    _, pod = apiserver.json(
        "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": status}, MERGE, expect=200
    )
    return pod


def make_service(apiserver, ns: str, name: str, **spec) -> dict:
    body = {
        "metadata": {"name": name, "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}], **spec},
    }
    _, svc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/services", body, expect=201)
    return svc


def endpoints(apiserver, ns: str, name: str) -> dict | None:
    code, ep = apiserver.json("GET", f"/api/v1/namespaces/{ns}/endpoints/{name}")
    return ep if code == 200 else None


def ips(ep: dict | None, field: str = "addresses") -> list[str]:
    if ep is None:
        return []
    return sorted(a["ip"] for ss in ep.get("subsets") or [] for a in ss.get(field) or [])


def slices(apiserver, ns: str, svc: str) -> list[dict]:
    _, lst = apiserver.json(
        "GET", f"{SLICES}/namespaces/{ns}/endpointslices?labelSelector={names.LABEL_SERVICE_NAME}={svc}", expect=200
    )
    return lst["items"]


def slice_endpoints(apiserver, ns: str, svc: str, ready: bool | None = None) -> list[str]:
    out = []
    for s in slices(apiserver, ns, svc):
        if s["addressType"] != "IPv4":
            continue
        for ep in s.get("endpoints") or []:
            if ready is None or ep["conditions"]["ready"] is ready:
                out += ep["addresses"]
    return sorted(out)


def test_endpoints_and_slices_follow_pod_readiness(apiserver, ns):
    make_pod(apiserver, ns, "web-1", "10.10.0.1", True)
    make_pod(apiserver, ns, "web-2", "10.10.0.2", False)
    make_pod(apiserver, ns, "other", "10.10.0.9", True, labels={"app": "db"})
    svc = make_service(apiserver, ns, "web")

    ep = wait_for(lambda: (e := endpoints(apiserver, ns, "web")) and ips(e) == ["10.10.0.1"] and e, 5, "endpoints")
    assert ips(ep, "notReadyAddresses") == ["10.10.0.2"]
    assert ep["metadata"]["labels"]["tier"] == "front"
    assert names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME in ep["metadata"]["annotations"]
    [subset] = ep["subsets"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    addr = subset["addresses"][0]
    assert addr["nodeName"] == f"{ns}-node"
    assert addr["targetRef"]["kind"] == "Pod" and addr["targetRef"]["name"] == "web-1"
    assert addr["targetRef"]["namespace"] == ns and addr["targetRef"]["uid"]

    wait_for(lambda: slice_endpoints(apiserver, ns, "web", True) == ["10.10.0.1"], 5, "ready slice endpoint")
    [s] = [s for s in slices(apiserver, ns, "web") if s["addressType"] == "IPv4"]
    md = s["metadata"]
    assert md["generateName"] == "web-" and md["name"].startswith("web-")
    assert md["labels"][names.LABEL_MANAGED_BY_SLICE] == names.ENDPOINTSLICE_CONTROLLER_NAME
    assert md["labels"]["tier"] == "front"
    [owner] = md["ownerReferences"]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "web",
        "uid": svc["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert s["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    by_ip = {e["addresses"][0]: e for e in s["endpoints"]}
    assert by_ip["10.10.0.2"]["conditions"] == {"ready": False, "serving": False, "terminating": False}
    assert by_ip["10.10.0.1"]["zone"] == "zone-a" and by_ip["10.10.0.1"]["nodeName"] == f"{ns}-node"

    # The ready pod goes unready and back: both kinds follow within a second each way.
    slice_rv = s["metadata"]["resourceVersion"]
    set_status(apiserver, ns, "web-1", "10.10.0.1", False)
    wait_for(lambda: ips(endpoints(apiserver, ns, "web")) == [], 1.0, "endpoints without ready pods")
    wait_for(lambda: slice_endpoints(apiserver, ns, "web", True) == [], 1.0, "slice without ready pods")
    set_status(apiserver, ns, "web-1", "10.10.0.1", True)
    set_status(apiserver, ns, "web-2", "10.10.0.2", True)
    want = ["10.10.0.1", "10.10.0.2"]
    wait_for(lambda: ips(endpoints(apiserver, ns, "web")) == want, 1.0, "both ready in endpoints")
    wait_for(lambda: slice_endpoints(apiserver, ns, "web", True) == want, 1.0, "both ready in the slice")
    [s2] = [s for s in slices(apiserver, ns, "web") if s["addressType"] == "IPv4"]
    assert s2["metadata"]["name"] == s["metadata"]["name"] and s2["metadata"]["resourceVersion"] != slice_rv

    # Nothing changes: nothing is written.
    ep_rv = endpoints(apiserver, ns, "web")["metadata"]["resourceVersion"]
    slice_rv = s2["metadata"]["resourceVersion"]
    apiserver.json("PATCH", f"/api/v1/namespaces/{ns}/pods/web-1", {"metadata": {"annotations": {"x": "y"}}}, MERGE)
    time.sleep(0.5)
    assert endpoints(apiserver, ns, "web")["metadata"]["resourceVersion"] == ep_rv
    assert [s for s in slices(apiserver, ns, "web") if s["addressType"] == "IPv4"][0]["metadata"][
        "resourceVersion"
    ] == slice_rv

    # A deleted pod leaves both.
    apiserver.json("DELETE", f"/api/v1/namespaces/{ns}/pods/web-2?gracePeriodSeconds=0", expect=200)
    wait_for(lambda: ips(endpoints(apiserver, ns, "web")) == ["10.10.0.1"], 5, "deleted pod gone from endpoints")
    wait_for(lambda: slice_endpoints(apiserver, ns, "web") == ["10.10.0.1"], 5, "deleted pod gone from the slice")

    # The Service goes: its Endpoints and slices go with it.
    apiserver.json("DELETE", f"/api/v1/namespaces/{ns}/services/web", expect=200)
    wait_for(lambda: endpoints(apiserver, ns, "web") is None, 5, "endpoints deleted")
    wait_for(lambda: slices(apiserver, ns, "web") == [], 10, "slices collected")


def test_publish_not_ready_and_missing_named_port(apiserver, ns):
    make_pod(apiserver, ns, "peer-1", "10.20.0.1", False, labels={"app": "peer"})
    bare = {
        "metadata": {"name": "peer-2", "labels": {"app": "peer"}},
        "spec": {"nodeName": f"{ns}-node", "containers": [{"name": "c", "image": "busybox"}]},
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", bare, expect=201)
    set_status(apiserver, ns, "peer-2", "10.20.0.2", True)
    make_service(apiserver, ns, "peers", selector={"app": "peer"}, publishNotReadyAddresses=True)
    # peer-2 lacks the named port "http": it is not listed for that port.
    ep = wait_for(lambda: (e := endpoints(apiserver, ns, "peers")) and ips(e) and e, 5, "endpoints")
    assert ips(ep) == ["10.20.0.1"] and ips(ep, "notReadyAddresses") == []
    # In slices, pods are grouped by the ports they offer: peer-2 lands in a slice without ports.
    wait_for(lambda: slice_endpoints(apiserver, ns, "peers", True) == ["10.20.0.1", "10.20.0.2"], 5, "peer slices")
    by_ports = {
        tuple(p["port"] for p in s["ports"]): [e["addresses"][0] for e in s["endpoints"]]
        for s in slices(apiserver, ns, "peers")
        if s["addressType"] == "IPv4"
    }
    assert by_ports == {(8080,): ["10.20.0.1"], (): ["10.20.0.2"]}


def test_external_name_and_selectorless_services_get_no_endpoints(apiserver, ns):
    apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.com"}},
        expect=201,
    )
    time.sleep(0.5)
    assert endpoints(apiserver, ns, "ext") is None
    assert slices(apiserver, ns, "ext") == []


def test_mirroring_of_selectorless_service_endpoints(apiserver, ns):
    apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "legacy"}, "spec": {"ports": [{"port": 5432}]}},
        expect=201,
    )
    body = {
        "metadata": {"name": "legacy", "labels": {"team": "db"}},
        "subsets": [
            {
                "addresses": [{"ip": "192.0.2.10"}],
                "notReadyAddresses": [{"ip": "192.0.2.11"}],
                "ports": [{"port": 5432}],
            }
        ],
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/endpoints", body, expect=201)
    got = wait_for(lambda: slices(apiserver, ns, "legacy"), 5, "mirrored slice")
    [s] = got
    assert s["metadata"]["labels"][names.LABEL_MANAGED_BY_SLICE] == names.ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME
    assert s["metadata"]["labels"]["team"] == "db"
    assert s["metadata"]["ownerReferences"][0]["kind"] == "Endpoints"
    assert s["addressType"] == "IPv4"
    assert s["ports"] == [{"name": "", "port": 5432, "protocol": "TCP"}]
    assert sorted((e["addresses"][0], e["conditions"]["ready"]) for e in s["endpoints"]) == [
        ("192.0.2.10", True),
        ("192.0.2.11", False),
    ]
    # Marked not to be mirrored: the mirrored slices go.
    apiserver.json(
        "PATCH",
        f"/api/v1/namespaces/{ns}/endpoints/legacy",
        {"metadata": {"labels": {names.LABEL_SKIP_MIRROR: "true"}}},
        MERGE,
        expect=200,
    )
    wait_for(lambda: slices(apiserver, ns, "legacy") == [], 5, "mirrored slice removed")


@pytest.mark.parametrize(
    "address, message",
    [
        ("127.0.0.1", "may not be in the loopback range (127.0.0.0/8, ::1/128)"),
        ("169.254.1.1", "may not be in the link-local range (169.254.0.0/16, fe80::/10)"),
        ("224.0.0.1", "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"),
        ("0.0.0.0", "may not be unspecified (0.0.0.0)"),
        ("fd00::1", "must be a valid IPv4 address"),
    ],
)
def test_slice_address_validation(apiserver, ns, address, message):
    body = {
        "metadata": {"name": uniq("bad")},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address]}],
    }
    code, status = apiserver.json("POST", f"{SLICES}/namespaces/{ns}/endpointslices", body)
    assert code == 422, status
    causes = status["details"]["causes"]
    assert {
        "reason": "FieldValueInvalid",
        "message": f'Invalid value: "{address}": {message}',
        "field": "endpoints[0].addresses[0]",
    } in causes


def test_slice_limits_and_immutable_address_type(apiserver, ns):
    base = SLICES + f"/namespaces/{ns}/endpointslices"
    too_many = {
        "metadata": {"name": uniq("many")},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.1"]}] * 1001,
    }
    code, status = apiserver.json("POST", base, too_many)
    assert code == 422 and "endpoints: Too many: 1001: must have at most 1000 items" in status["message"]
    ports = {
        "metadata": {"name": uniq("ports")},
        "addressType": "IPv4",
        "endpoints": [],
        "ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}, {"name": "Bad_Name", "port": 3}],
    }
    code, status = apiserver.json("POST", base, ports)
    assert code == 422
    fields = {(c["field"], c["reason"]) for c in status["details"]["causes"]}
    assert ("ports[1].name", "FieldValueDuplicate") in fields
    assert ("ports[2].name", "FieldValueInvalid") in fields
    name = uniq("ok")
    ok = {"metadata": {"name": name}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"]}]}
    _, created = apiserver.json("POST", base, ok, expect=201)
    assert created["ports"] if "ports" in created else True
    created["addressType"] = "IPv6"
    created["endpoints"] = [{"addresses": ["fd00::1"]}]
    code, status = apiserver.json("PUT", f"{base}/{name}", created)
    assert code == 422
    assert {
        "reason": "FieldValueInvalid",
        "message": 'Invalid value: "IPv6": field is immutable',
        "field": "addressType",
    } in status["details"]["causes"]


def test_endpoints_validation(apiserver, ns):
    body = {
        "metadata": {"name": uniq("bad-ep")},
        "subsets": [
            {"ports": [{"port": 80}]},
            {"addresses": [{"ip": "not-an-ip"}], "ports": [{"port": 70000, "name": "a"}, {"port": 81}]},
        ],
    }
    code, status = apiserver.json("POST", f"/api/v1/namespaces/{ns}/endpoints", body)
    assert code == 422
    causes = {(c["field"], c["message"]) for c in status["details"]["causes"]}
    assert ("subsets[0]", "Required value: must specify `addresses` or `notReadyAddresses`") in causes
    assert (
        "subsets[1].addresses[0].ip",
        'Invalid value: "not-an-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)',
    ) in causes
    assert ("subsets[1].ports[0].port", "Invalid value: 70000: must be between 1 and 65535, inclusive") in causes
    assert ("subsets[1].ports[1].name", "Required value") in causes


@pytest.fixture(params=["1.27", "1.32"])
def kubectl_version(request, apiserver, tmp_path):
    binary = kubectl_binary(request.param)
    if not Path(binary).exists():
        pytest.skip(f"{binary} not installed")
    return Kubectl(apiserver, tmp_path, binary=binary)


def test_kubectl_shows_endpoints_and_slices(apiserver, kubectl_version, ns):
    kubectl = kubectl_version
    app = uniq("kc")
    ip = "10.30.0.1" if kubectl.binary.endswith("1.27") else "10.30.0.2"
    make_pod(apiserver, ns, f"{app}-1", ip, True, labels={"app": app})
    make_service(apiserver, ns, app, selector={"app": app})
    wait_for(lambda: ips(endpoints(apiserver, ns, app)) == [ip], 5, "endpoints of the service")
    wait_for(lambda: slice_endpoints(apiserver, ns, app, True) == [ip], 5, "slice of the service")
    out = kubectl("get", "endpoints", app, "-n", ns, check=True).stdout
    assert out.split("\n")[0].split() == ["NAME", "ENDPOINTS", "AGE"]
    assert f"{ip}:8080" in out
    out = kubectl("get", "endpointslices", "-n", ns, "-l", f"{names.LABEL_SERVICE_NAME}={app}", check=True).stdout
    header = out.split("\n")[0].split()
    assert header == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    row = [line for line in out.split("\n")[1:] if "IPv4" in line][0].split()
    assert row[0].startswith(f"{app}-") and row[2] == "8080" and row[3] == ip
    # describe service lists the endpoints (from the Endpoints or, in newer kubectl, the slices).
    out = kubectl("describe", "service", app, "-n", ns, check=True).stdout
    line = [x for x in out.split("\n") if x.startswith("Endpoints:")][0]
    assert f"{ip}:8080" in line


def test_the_api_servers_own_endpoints_are_not_mirrored_nor_loopback(apiserver):
    ep = wait_for(lambda: endpoints(apiserver, names.NS_DEFAULT, names.DEFAULT_SERVICE_NAME), 10, "orch endpoints")
    assert ep["metadata"]["labels"][names.LABEL_SKIP_MIRROR] == "true"
    # Bound to 127.0.0.1, the server lists its default-route interface's address instead.
    assert [a["ip"] for s in ep["subsets"] for a in s["addresses"]] == [advertise_address("127.0.0.1")]
    mirrored = [
        s
        for s in slices(apiserver, names.NS_DEFAULT, names.DEFAULT_SERVICE_NAME)
        if s["metadata"]["labels"].get(names.LABEL_MANAGED_BY_SLICE) == names.ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME
    ]
    assert mirrored == []
    # Writing a loopback address into it is refused as for any Endpoints (dry run: nothing changes).
    ep["subsets"] = [{"addresses": [{"ip": "127.0.0.9"}], "ports": [{"name": "https", "port": 443}]}]
    path = f"/api/v1/namespaces/{names.NS_DEFAULT}/endpoints/{names.DEFAULT_SERVICE_NAME}?dryRun=All"
    code, status = apiserver.json("PUT", path, ep)
    assert code == 422, status
    assert status["details"]["causes"][0]["field"] == "subsets[0].addresses[0].ip"
