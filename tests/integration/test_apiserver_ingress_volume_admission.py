"""Ingress rules and the cluster-reading admission plugins against a real
``orch-apiserver`` with kubectl: an Ingress without a class gets the default class,
a ``Prefix`` path without a leading ``/`` is refused with upstream's message, a pod
with a RuntimeClass gets the class's overhead and node selector, a claim gets its
protection finalizer and goes once no pod uses it, and EventRateLimit (configured in
the admission configuration file) refuses a burst of events with 429."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, create_namespace, kubectl_binary
from tests.components import free_port
from tests.helpers import uniq, wait_for

NET = f"/apis/{names.NETWORKING_GROUP}/v1"
BURST = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    tmp = tmp_path_factory.mktemp("ingress-admission")
    config = tmp / "admission.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": f"apiserver.config.{names.DOMAIN}/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {
                        "name": "EventRateLimit",
                        "configuration": {
                            "apiVersion": f"{names.EVENT_RATE_LIMIT_CONFIG_GROUP}/v1alpha1",
                            "kind": "Configuration",
                            "limits": [{"type": "Namespace", "qps": 1, "burst": BURST}],
                        },
                    }
                ],
            }
        )
    )
    s = ApiServerProcess(
        tmp / "data",
        free_port(),
        extra_args=["--admission-control-config-file", str(config), "--enable-admission-plugins=EventRateLimit"],
    )
    with s:
        yield s


@pytest.fixture(params=["default", "1.27"])
def kubectl(request, server, tmp_path):
    """The installed kubectl, and kubectl 1.27 itself."""
    if request.param == "default":
        return Kubectl(server, tmp_path)
    return Kubectl(server, tmp_path, binary=kubectl_binary(request.param))


def namespace(server) -> str:
    name = uniq("ing")
    create_namespace(server, name)
    return name


def ingress(name: str, path: str = "/", path_type: str = "Prefix", class_name: str | None = None) -> dict:
    spec: dict = {
        "rules": [
            {
                "host": "web.example.com",
                "http": {
                    "paths": [
                        {
                            "path": path,
                            "pathType": path_type,
                            "backend": {"service": {"name": "web", "port": {"number": 80}}},
                        }
                    ]
                },
            }
        ]
    }
    if class_name:
        spec["ingressClassName"] = class_name
    return {"apiVersion": f"{names.NETWORKING_GROUP}/v1", "kind": "Ingress", "metadata": {"name": name}, "spec": spec}


def test_ingress_without_class_gets_the_default_class(server, kubectl):
    ns = namespace(server)
    default = uniq("default")
    server.json(
        "POST",
        f"{NET}/ingressclasses",
        {
            "metadata": {"name": default, "annotations": {names.ANNOTATION_IS_DEFAULT_INGRESS_CLASS: "true"}},
            "spec": {"controller": "example.com/ingress"},
        },
        expect=201,
    )
    # The plugin reads the watch cache: wait until a list served from it shows the class.
    wait_for(
        lambda: (
            default
            in [
                c["metadata"]["name"] for c in server.json("GET", f"{NET}/ingressclasses?resourceVersion=0")[1]["items"]
            ]
        ),
        what="the default class in the watch cache",
    )
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(ingress("web")))
    assert result.returncode == 0, result.stderr
    status, obj = server.json("GET", f"{NET}/namespaces/{ns}/ingresses/web")
    assert obj["spec"]["ingressClassName"] == default
    # A class the client names is kept.
    server.json("POST", f"{NET}/namespaces/{ns}/ingresses", ingress("own", class_name="other"), expect=201)
    assert server.json("GET", f"{NET}/namespaces/{ns}/ingresses/own")[1]["spec"]["ingressClassName"] == "other"
    table = kubectl("get", "ingress", "-n", ns, "web", check=True).stdout.splitlines()
    assert table[0].split() == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert table[1].split()[:4] == ["web", default, "web.example.com", "80"]
    server.request("DELETE", f"{NET}/ingressclasses/{default}")


def test_prefix_path_must_be_absolute(server, kubectl):
    ns = namespace(server)
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(ingress("rel", path="foo")))
    assert result.returncode != 0
    message = 'spec.rules[0].http.paths[0].path: Invalid value: "foo": must be an absolute path'
    assert f'The Ingress "rel" is invalid: {message}' in result.stderr
    status, doc = server.json("POST", f"{NET}/namespaces/{ns}/ingresses", ingress("rel", path="foo"))
    assert status == 422
    assert doc["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "foo": must be an absolute path',
            "field": "spec.rules[0].http.paths[0].path",
        }
    ]


def test_pod_with_a_runtime_class_gets_its_overhead_and_node_selector(server, kubectl):
    ns = namespace(server)
    rc = uniq("sandbox")
    server.json(
        "POST",
        f"/apis/{names.NODE_GROUP}/v1/runtimeclasses",
        {
            "metadata": {"name": rc},
            "handler": "runsc",
            "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
            "scheduling": {"nodeSelector": {"sandbox": "yes"}},
        },
        expect=201,
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "boxed"},
        "spec": {"runtimeClassName": rc, "containers": [{"name": "c", "image": "busybox"}]},
    }
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod))
    assert result.returncode == 0, result.stderr
    obj = server.json("GET", f"/api/v1/namespaces/{ns}/pods/boxed")[1]
    assert obj["spec"]["overhead"] == {"cpu": "250m", "memory": "64Mi"}
    assert obj["spec"]["nodeSelector"] == {"sandbox": "yes"}
    missing = {**pod, "metadata": {"name": "lost"}, "spec": {**pod["spec"], "runtimeClassName": "nope"}}
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(missing))
    assert result.returncode != 0
    assert 'pods "lost" is forbidden: pod rejected: RuntimeClass "nope" not found' in result.stderr


def test_claim_is_protected_while_a_pod_uses_it(server, kubectl):
    ns = namespace(server)
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    kubectl("create", "-n", ns, "-f", "-", input=json.dumps(claim), check=True)
    obj = server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")[1]
    assert obj["metadata"]["finalizers"] == [names.FINALIZER_PVC_PROTECTION]
    pod = {
        "metadata": {"name": "user"},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    kubectl("delete", "-n", ns, "pvc", "data", "--wait=false", check=True)
    # Still there, terminating, while the pod uses it.
    wait_for(
        lambda: server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")[1]["metadata"].get(
            "deletionTimestamp"
        ),
        what="the claim to be terminating",
    )
    status, obj = server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
    assert status == 200 and obj["metadata"]["finalizers"] == [names.FINALIZER_PVC_PROTECTION]
    kubectl("delete", "-n", ns, "pod", "user", "--grace-period=0", "--force", check=True)
    wait_for(
        lambda: server.request("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")[0] == 404,
        what="the claim to go once no pod uses it",
    )


def test_event_rate_limit_refuses_a_burst_with_429(server, kubectl):
    ns = namespace(server)

    def event(name: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"},
            "reason": "Tested",
            "message": "burst",
            "type": "Normal",
        }

    for i in range(BURST):
        server.json("POST", f"/api/v1/namespaces/{ns}/events", event(f"e{i}"), expect=201)
    status, headers, body = server.request("POST", f"/api/v1/namespaces/{ns}/events", event("over"))
    assert status == 429, body
    doc = json.loads(body)
    assert doc["reason"] == "TooManyRequests"
    assert doc["message"] == f"Too many requests: limit reached on type Namespace for key {ns}"
    assert "retry-after" not in {k.lower() for k in headers}
    # kubectl as a client: the bucket refills one token a second, and kubectl's discovery
    # before its POST can take longer than that on a busy machine, so a thread keeps the
    # bucket empty while kubectl runs (its POST then finds a refilled token only if it
    # comes within the thread's few-millisecond loop of the refill), and kubectl gets a
    # few tries.
    stop = threading.Event()

    def keep_empty() -> None:
        n = 0
        while not stop.is_set():
            server.request("POST", f"/api/v1/namespaces/{ns}/events", event(f"drain{n}"))
            n += 1

    flood = threading.Thread(target=keep_empty, daemon=True)
    flood.start()
    try:
        for attempt in range(5):
            result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(event(f"again{attempt}")))
            if result.returncode != 0:
                break
    finally:
        stop.set()
        flood.join(timeout=30)
    assert result.returncode != 0, "kubectl was never refused"
    assert "Error from server (TooManyRequests)" in result.stderr
    # Other namespaces have buckets of their own.
    other = namespace(server)
    server.json(
        "POST",
        f"/api/v1/namespaces/{other}/events",
        {**event("x"), "involvedObject": {"kind": "Pod", "namespace": other, "name": "p"}},
        expect=201,
    )
