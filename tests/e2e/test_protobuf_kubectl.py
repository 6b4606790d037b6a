"""Protobuf against a real orch-apiserver: kubectl's protobuf writes with default
flags, and the wire (bodies, lists, watch frames, error Status, negotiation)
checked byte-level with the encoder in ``apiserver_min.api.protobuf``.

The kubectl commands below send ``application/vnd.kubernetes.protobuf`` bodies
and accept protobuf replies; they have no JSON fallback, so each passing is
the server decoding and encoding upstream's wire format.
"""

from __future__ import annotations

import json

import pytest

from apiserver_min.api import names
from apiserver_min.api import protobuf as pb
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq

PB = names.MEDIA_PROTOBUF_UPSTREAM


def ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def get_json(server, path: str) -> dict:
    status, _, body = server.request("GET", path)
    assert status == 200, body
    return json.loads(body)


@pytest.fixture
def ns(apiserver):
    name = uniq("pb")
    create_namespace(apiserver, name)
    return name


# --- kubectl, default flags --------------------------------------------------------------------


def test_kubectl_create_namespace(kubectl, apiserver):
    name = uniq("pbns")
    assert f"namespace/{name} created" in ok(kubectl("create", "namespace", name))
    obj = get_json(apiserver, f"/api/v1/namespaces/{name}")
    assert obj["metadata"]["name"] == name
    assert obj["status"]["phase"] == "Active"


def test_kubectl_create_configmap_and_secret(kubectl, apiserver, ns):
    ok(kubectl("-n", ns, "create", "configmap", "cm1", "--from-literal=a=1", "--from-literal=b=two"))
    cm = get_json(apiserver, f"/api/v1/namespaces/{ns}/configmaps/cm1")
    assert cm["data"] == {"a": "1", "b": "two"}
    ok(kubectl("-n", ns, "create", "secret", "generic", "s1", "--from-literal=password=hunter2"))
    secret = get_json(apiserver, f"/api/v1/namespaces/{ns}/secrets/s1")
    assert secret["data"] == {"password": "aHVudGVyMg=="}
    assert secret["type"] == "Opaque"


def test_kubectl_create_service_and_deployment(kubectl, apiserver, ns):
    ok(kubectl("-n", ns, "create", "service", "clusterip", "web", "--tcp=80:8080"))
    svc = get_json(apiserver, f"/api/v1/namespaces/{ns}/services/web")
    port = svc["spec"]["ports"][0]
    assert (port["port"], port["targetPort"], port["protocol"]) == (80, 8080, "TCP")
    assert svc["spec"]["type"] == "ClusterIP"
    ok(kubectl("-n", ns, "create", "deployment", "web", "--image=busybox:1", "--replicas=2"))
    dep = get_json(apiserver, f"/apis/apps/v1/namespaces/{ns}/deployments/web")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1"
    assert dep["spec"]["selector"]["matchLabels"] == {"app": "web"}


def test_kubectl_create_conflict_prints_status(kubectl, ns):
    ok(kubectl("-n", ns, "create", "configmap", "dup", "--from-literal=a=1"))
    res = kubectl("-n", ns, "create", "configmap", "dup", "--from-literal=a=1")
    assert res.returncode != 0
    # The message comes from the protobuf Status the server answered with.
    assert 'configmaps "dup" already exists' in res.stderr, res.stderr


def test_kubectl_auth_can_i(kubectl):
    assert ok(kubectl("auth", "can-i", "create", "pods")).strip() == "yes"


# --- the wire ----------------------------------------------------------------------------------


def _raw(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    return server.request(method, path, body, headers or {})


def test_protobuf_round_trip_over_http(apiserver, ns):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "pbcm", "labels": {"x": "y"}},
        "data": {"k": "v"},
        "binaryData": {"bin": "AAEC"},
    }
    status, headers, body = _raw(
        apiserver, "POST", f"/api/v1/namespaces/{ns}/configmaps", pb.encode(cm), {"Content-Type": PB, "Accept": PB}
    )
    assert status == 201, body
    assert headers["content-type"].startswith(PB)
    got = pb.decode(body)
    assert got["metadata"]["namespace"] == ns and got["data"] == {"k": "v"} and got["binaryData"] == {"bin": "AAEC"}
    # The same object asked for in our spelling, and in JSON: one object.
    status, headers, body = _raw(
        apiserver, "GET", f"/api/v1/namespaces/{ns}/configmaps/pbcm", headers={"Accept": names.MEDIA_PROTOBUF}
    )
    assert status == 200 and headers["content-type"].startswith(names.MEDIA_PROTOBUF)
    assert pb.decode(body) == get_json(apiserver, f"/api/v1/namespaces/{ns}/configmaps/pbcm")
    # A protobuf body answered in JSON when JSON is asked for.
    cm2 = dict(cm, metadata={"name": "pbcm2"})
    status, headers, body = _raw(
        apiserver,
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        pb.encode(cm2),
        {"Content-Type": names.MEDIA_PROTOBUF, "Accept": "application/json"},
    )
    assert status == 201 and json.loads(body)["metadata"]["name"] == "pbcm2"
    # PUT in protobuf.
    got["data"] = {"k": "v2"}
    status, _, body = _raw(
        apiserver, "PUT", f"/api/v1/namespaces/{ns}/configmaps/pbcm", pb.encode(got), {"Content-Type": PB, "Accept": PB}
    )
    assert status == 200, body
    assert pb.decode(body)["data"] == {"k": "v2"}


def test_protobuf_list(apiserver, ns):
    for i in range(3):
        status, _, body = apiserver.request(
            "POST",
            f"/api/v1/namespaces/{ns}/configmaps",
            {"metadata": {"name": f"l{i}", "labels": {"set": "l"}}, "data": {"i": str(i)}},
        )
        assert status == 201, body
    status, headers, body = _raw(
        apiserver,
        "GET",
        f"/api/v1/namespaces/{ns}/configmaps?labelSelector=set%3Dl",
        headers={"Accept": f"{PB}, application/json"},
    )
    assert status == 200 and headers["content-type"].startswith(PB)
    lst = pb.decode(body)
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
    assert [i["metadata"]["name"] for i in lst["items"]] == ["l0", "l1", "l2"]
    assert lst["metadata"]["resourceVersion"]


def test_protobuf_errors(apiserver, ns):
    # A wrong prefix: 400 with a Status (in protobuf, as asked).
    status, headers, body = _raw(
        apiserver, "POST", f"/api/v1/namespaces/{ns}/configmaps", b'{"kind":1}', {"Content-Type": PB, "Accept": PB}
    )
    assert status == 400
    assert headers["content-type"].startswith(PB)
    err = pb.decode(body)
    assert err["kind"] == "Status" and err["code"] == 400 and "prefix" in err["message"]
    # A truncated message: 400, JSON Status when JSON is asked for.
    good = pb.encode({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t"}, "data": {"a": "b"}})
    status, headers, body = _raw(
        apiserver, "POST", f"/api/v1/namespaces/{ns}/configmaps", good[:-7], {"Content-Type": PB}
    )
    assert status == 400 and json.loads(body)["reason"] == "BadRequest"
    # 404 in protobuf.
    status, headers, body = _raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/configmaps/absent", headers={"Accept": PB})
    assert status == 404 and pb.decode(body)["reason"] == "NotFound"
    # A protobuf Table does not exist: 406 alone, JSON with a fallback.
    table_pb = f"{PB};as=Table;v=v1;g=meta.k8s.io"
    status, _, _ = _raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/configmaps", headers={"Accept": table_pb})
    assert status == 406
    status, headers, body = _raw(
        apiserver, "GET", f"/api/v1/namespaces/{ns}/configmaps", headers={"Accept": f"{table_pb}, application/json"}
    )
    assert status == 200 and headers["content-type"].startswith("application/json")


def test_protobuf_unknown_fields_skipped(apiserver, ns):
    msg = pb.encode_message({"metadata": {"name": "unk"}, "data": {"a": "b"}}, pb.schema_of("v1", "ConfigMap"))
    msg += b"\xa2\x06\x03xyz" + b"\xf8\x06\x05"  # field 100 (bytes), field 111 (varint): not ConfigMap's
    body = pb.encode_unknown("v1", "ConfigMap", msg)
    status, _, out = _raw(apiserver, "POST", f"/api/v1/namespaces/{ns}/configmaps", body, {"Content-Type": PB})
    assert status == 201, out
    assert json.loads(out)["data"] == {"a": "b"}


def _read_frames(resp, count: int) -> list[tuple[str, dict]]:
    out = []
    reader = pb.FrameReader()
    while len(out) < count:
        chunk = resp.read1(65536)
        assert chunk, f"stream ended after {len(out)} events"
        out += [pb.decode_watch_event(f) for f in reader.feed(chunk)]
    return out


def test_protobuf_watch(apiserver, ns):
    status, _, body = apiserver.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "w0"}, "data": {"a": "0"}}
    )
    assert status == 201
    rv = json.loads(body)["metadata"]["resourceVersion"]
    conn = apiserver.connection(10, True)
    try:
        conn.request(
            "GET",
            f"/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={int(rv) - 1}&allowWatchBookmarks=true",
            headers={"Accept": PB},
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == f"{PB};stream=watch"
        events = _read_frames(resp, 1)
        assert events[0][0] == "ADDED" and events[0][1]["metadata"]["name"] == "w0"
        assert events[0][1]["kind"] == "ConfigMap" and events[0][1]["data"] == {"a": "0"}
        apiserver.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/configmaps/w0",
            b'{"data":{"a":"1"}}',
            {"Content-Type": "application/merge-patch+json"},
        )
        apiserver.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/w0")
        events = _read_frames(resp, 2)
        assert [e[0] for e in events] == ["MODIFIED", "DELETED"]
        assert events[0][1]["data"] == {"a": "1"}
    finally:
        conn.close()
