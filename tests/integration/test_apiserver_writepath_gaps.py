"""Write-path gaps against a real orch-apiserver: YAML alias bombs refused with a 400,
upstream's PatchOptions/CreateOptions/UpdateOptions rules (422), Go-quoted field names
in Warning headers, strategic merge patches of the scale sub-resource, the bundled
controllers' writes recorded in managedFields under their manager names, and the cap of
ten Update managers ("ancient-changes")."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import time
import urllib.parse

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, create_namespace
from tests.components import free_port
from tests.helpers import uniq, wait_for

YAML = {"Content-Type": "application/yaml"}
APPLY = {"Content-Type": names.MEDIA_APPLY_PATCH}
MERGE = {"Content-Type": names.MEDIA_MERGE_PATCH}
SMP = {"Content-Type": names.MEDIA_STRATEGIC_MERGE_PATCH}
JSONPATCH = {"Content-Type": names.MEDIA_JSON_PATCH}
CM = names.CONTROLLER_MANAGER_FIELD_MANAGER
SCHED = names.SCHEDULER_FIELD_MANAGER
CSRS = f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(
        tmp_path_factory.mktemp("writepath"),
        free_port(),
        extra_args=["--node-monitor-period=1s", "--node-monitor-grace-period=2s"],
    )
    with s:
        yield s


@pytest.fixture
def ns(server):
    name = uniq("wp")
    create_namespace(server, name)
    return name


def cm_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


def deploy_path(ns: str, name: str = "") -> str:
    return f"/apis/apps/v1/namespaces/{ns}/deployments" + (f"/{name}" if name else "")


def entries(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {
        (e["manager"], e["operation"], e.get("subresource", "")): e["fieldsV1"]
        for e in obj["metadata"].get("managedFields", [])
    }


def laughs(levels: int) -> str:
    lines = ["a: &a [x,x,x,x,x,x,x,x,x,x]"]
    prev = "a"
    for name in "bcdefghi"[:levels]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
        prev = name
    return "\n".join(lines) + "\n"


def assert_status(doc, code: int, reason: str) -> None:
    assert doc["kind"] == "Status" and doc["status"] == "Failure", doc
    assert (doc["code"], doc["reason"]) == (code, reason), doc


# --- YAML alias expansion ------------------------------------------------------------------------


def test_alias_bombs_in_yaml_bodies_are_400(server, ns):
    bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\nbomb:\n  " + laughs(8).replace("\n", "\n  ")
    for method, path, headers in (
        ("POST", cm_path(ns), YAML),
        ("PATCH", cm_path(ns, "bomb") + "?fieldManager=x", APPLY),
        ("PUT", cm_path(ns, "bomb"), YAML),
        ("DELETE", cm_path(ns, "bomb"), YAML),
    ):
        started = time.monotonic()
        status, doc = server.json(method, path, bomb, headers)
        assert time.monotonic() - started < 10
        assert status == 400, (method, doc)
        assert_status(doc, 400, "BadRequest")
        assert doc["message"].startswith("error decoding YAML body: document contains excessive aliasing"), doc
    status, doc = server.json("POST", cm_path(ns), "metadata: &m {name: loop, labels: {a: *m}}\n", YAML)
    assert status == 400 and "an alias refers to an anchor whose value contains it" in doc["message"], doc
    # The server is still fine.
    server.json("GET", cm_path(ns), expect=200)


def test_manifests_with_anchors_create_independent_values(server, ns):
    manifest = """apiVersion: apps/v1
kind: Deployment
metadata: &md
  name: web
  labels: &labels {app: web}
spec:
  selector: {matchLabels: *labels}
  template:
    metadata: *md
    spec:
      containers:
      - &c {name: a, image: busybox}
      - {name: b, image: busybox, env: [{name: X, value: "1"}]}
"""
    _, created = server.json("POST", deploy_path(ns), manifest, YAML, expect=201)
    assert created["metadata"]["uid"] and created["metadata"]["labels"] == {"app": "web"}
    template_md = created["spec"]["template"]["metadata"]
    # The template's copy of the anchored metadata did not take the object's uid and timestamps.
    assert "uid" not in template_md and "creationTimestamp" not in template_md, template_md
    assert template_md["labels"] == {"app": "web"}


# --- PatchOptions, CreateOptions, UpdateOptions --------------------------------------------------


def test_force_on_a_non_apply_patch_is_422(server, ns):
    server.json("POST", cm_path(ns), {"metadata": {"name": "f"}, "data": {"a": "1"}}, expect=201)
    for headers, body in (
        (MERGE, {"data": {"a": "2"}}),
        (SMP, {"data": {"a": "2"}}),
        (JSONPATCH, [{"op": "replace", "path": "/data/a", "value": "2"}]),
    ):
        for value in ("true", "false"):
            status, doc = server.json("PATCH", cm_path(ns, "f") + f"?force={value}", body, headers)
            assert status == 422, doc
            assert_status(doc, 422, "Invalid")
            assert doc["message"] == (
                f'PatchOptions.{names.META_GROUP} "" is invalid: '
                "force: Forbidden: may not be specified for non-apply patch"
            )
            assert doc["details"] == {
                "group": names.META_GROUP,
                "kind": "PatchOptions",
                "causes": [
                    {
                        "reason": "FieldValueForbidden",
                        "message": "Forbidden: may not be specified for non-apply patch",
                        "field": "force",
                    }
                ],
            }
    assert server.json("GET", cm_path(ns, "f"), expect=200)[1]["data"] == {"a": "1"}
    # Apply takes force (any value but false/0 is true, as upstream reads it).
    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}, "data": {"a": "3"}}
    status, doc = server.json("PATCH", cm_path(ns, "f") + "?fieldManager=other", json.dumps(cfg), APPLY)
    assert status == 409, doc
    server.json("PATCH", cm_path(ns, "f") + "?fieldManager=other&force=yes", json.dumps(cfg), APPLY, expect=200)


def test_field_manager_rules_are_422(server, ns):
    status, doc = server.json(
        "PATCH",
        cm_path(ns, "nofm"),
        json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nofm"}}),
        APPLY,
    )
    assert status == 422 and doc["message"] == (
        f'PatchOptions.{names.META_GROUP} "" is invalid: fieldManager: Required value: is required for apply patch'
    ), doc
    status, doc = server.json("POST", cm_path(ns) + "?fieldManager=" + "m" * 129, {"metadata": {"name": "long"}})
    assert status == 422 and doc["message"] == (
        f'CreateOptions.{names.META_GROUP} "" is invalid: fieldManager: Too long: must have at most 128 bytes'
    ), doc
    server.json("POST", cm_path(ns) + "?fieldManager=" + "m" * 128, {"metadata": {"name": "long"}}, expect=201)
    status, doc = server.json(
        "PUT", cm_path(ns, "long") + "?fieldManager=" + urllib.parse.quote("bad\x7f"), {"metadata": {"name": "long"}}
    )
    assert status == 422 and doc["message"] == (
        f'UpdateOptions.{names.META_GROUP} "" is invalid: fieldManager: '
        'Invalid value: "bad\\x7f": invalid character U+007F (at position 3)'
    ), doc


# --- Warning headers ------------------------------------------------------------------------------


def test_warning_headers_quote_field_names_as_go_does(server, ns):
    body = json.dumps({"metadata": {"name": "w"}, "data": {}, 'we"ird': 1, "back\\slash": 1, "new\nline": 1})
    conn = server.connection()
    try:
        conn.request("POST", cm_path(ns), body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        status, warnings = resp.status, resp.msg.get_all("Warning")
    finally:
        conn.close()
    assert status == 201
    assert warnings == [
        '299 - "unknown field \\"we\\\\\\"ird\\""',
        '299 - "unknown field \\"back\\\\\\\\slash\\""',
        '299 - "unknown field \\"new\\\\nline\\""',
    ]
    status, doc = server.json(
        "POST",
        cm_path(ns) + "?fieldValidation=Strict",
        json.dumps({"metadata": {"name": "w2"}, 'a"b': 1}),
        {"Content-Type": "application/json"},
    )
    assert status == 400 and doc["message"].endswith('strict decoding error: unknown field "a\\"b"'), doc


# --- scale -----------------------------------------------------------------------------------------


def test_scale_takes_a_strategic_merge_patch(server, ns):
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sc"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sc"}},
            "template": {
                "metadata": {"labels": {"app": "sc"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    server.json("POST", deploy_path(ns), deploy, expect=201)
    _, scale = server.json("PATCH", deploy_path(ns, "sc") + "/scale", {"spec": {"replicas": 3}}, SMP, expect=200)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    assert server.json("GET", deploy_path(ns, "sc"), expect=200)[1]["spec"]["replicas"] == 3
    status, doc = server.json("PATCH", deploy_path(ns, "sc") + "/scale?force=true", {"spec": {"replicas": 4}}, SMP)
    assert status == 422 and "force: Forbidden" in doc["message"], doc
    status, doc = server.json(
        "PATCH", deploy_path(ns, "sc") + "/scale", "spec: {replicas: 4}", {"Content-Type": "text/plain"}
    )
    assert status == 415, doc


# --- the bundled controllers' field managers -----------------------------------------------------


def test_bootstrap_signer_writes_as_the_controller_manager(server):
    path = f"/api/v1/namespaces/{names.NS_PUBLIC}/configmaps/{names.CLUSTER_INFO_CONFIGMAP}"
    cm = wait_for(lambda: (lambda r: r[1] if r[0] == 200 else None)(server.json("GET", path)), 10, "cluster-info")
    assert (CM, "Update", "") in entries(cm), cm["metadata"].get("managedFields")
    assert "f:data" in entries(cm)[(CM, "Update", "")]


def test_node_lifecycle_writes_as_the_controller_manager(server):
    name = uniq("silent")
    ts = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    server.json(
        "POST",
        "/api/v1/nodes",
        {
            "metadata": {"name": name, "labels": {"t": "1"}},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": names.NODE_REASON_READY,
                        "message": "ok",
                        "lastHeartbeatTime": ts,
                        "lastTransitionTime": ts,
                    }
                ]
            },
        },
        headers={"User-Agent": "agent-test/1"},
        expect=201,
    )

    def node_with_both():
        node = server.json("GET", f"/api/v1/nodes/{name}", expect=200)[1]
        e = entries(node)
        return node if (CM, "Update", "status") in e and (CM, "Update", "") in e else None

    node = wait_for(node_with_both, 20, "the node to go Unknown and be tainted")
    e = entries(node)
    assert "f:conditions" in e[(CM, "Update", "status")]["f:status"]
    assert "f:taints" in e[(CM, "Update", "")]["f:spec"]
    assert "f:labels" in e[("agent-test", "Update", "")]["f:metadata"]  # the creator keeps what it still owns


def test_scheduler_writes_as_the_scheduler_and_binding_records_nothing(server, ns):
    pods = f"/api/v1/namespaces/{ns}/pods"
    server.json(
        "POST",
        pods,
        {
            "metadata": {"name": "lost"},
            "spec": {"nodeSelector": {"no-such": "node"}, "containers": [{"name": "c", "image": "busybox"}]},
        },
        expect=201,
    )

    def marked():
        pod = server.json("GET", f"{pods}/lost", expect=200)[1]
        return pod if (SCHED, "Update", "status") in entries(pod) else None

    pod = wait_for(marked, 15, "PodScheduled=False from the scheduler")
    owned = entries(pod)[(SCHED, "Update", "status")]["f:status"]["f:conditions"]
    assert 'k:{"type":"PodScheduled"}' in owned
    sel = urllib.parse.quote("involvedObject.name=lost,reason=FailedScheduling")
    events = wait_for(
        lambda: server.json("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={sel}", expect=200)[1]["items"],
        10,
        "the FailedScheduling event",
    )
    assert [(e["manager"], e["operation"]) for e in events[0]["metadata"]["managedFields"]] == [(SCHED, "Update")]
    # A binding writes storage directly, as upstream's: managedFields stay as they were.
    _, other = server.json(
        "POST",
        pods,
        {
            "metadata": {"name": "bindme"},
            "spec": {"schedulerName": "someone-else", "containers": [{"name": "c", "image": "busybox"}]},
        },
        expect=201,
    )
    server.json(
        "POST",
        f"{pods}/bindme/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "bindme"},
            "target": {"kind": "Node", "name": "somewhere"},
        },
        expect=201,
    )
    bound = server.json("GET", f"{pods}/bindme", expect=200)[1]
    assert bound["spec"]["nodeName"] == "somewhere"
    assert bound["metadata"]["managedFields"] == other["metadata"]["managedFields"]


def test_csr_signer_writes_as_the_controller_manager(server):
    key = ec.generate_private_key(ec.SECP256R1())
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, uniq("jane"))]))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    name = uniq("csr")
    server.json(
        "POST",
        CSRS,
        {
            "metadata": {"name": name},
            "spec": {
                "request": base64.b64encode(pem).decode(),
                "signerName": names.SIGNER_APISERVER_CLIENT,
                "usages": ["client auth"],
            },
        },
        expect=201,
    )
    cur = server.json("GET", f"{CSRS}/{name}", expect=200)[1]
    cur["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]}
    server.json("PUT", f"{CSRS}/{name}/approval?fieldManager=approver", cur, expect=200)
    issued = wait_for(
        lambda: (lambda c: c if (c.get("status") or {}).get("certificate") else None)(
            server.json("GET", f"{CSRS}/{name}", expect=200)[1]
        ),
        10,
        "the certificate",
    )
    e = entries(issued)
    assert "f:certificate" in e[(CM, "Update", "status")]["f:status"]
    assert "f:conditions" in e[("approver", "Update", "approval")]["f:status"]


# --- the cap on Update managers ----------------------------------------------------------------------


def test_more_than_ten_update_managers_merge_into_ancient_changes(server, ns):
    server.json(
        "POST", cm_path(ns) + "?fieldManager=m00", {"metadata": {"name": "many"}, "data": {"k0": "v"}}, expect=201
    )
    for i in range(1, 12):
        server.json(
            "PATCH", cm_path(ns, "many") + f"?fieldManager=m{i:02d}", {"data": {f"k{i}": "v"}}, MERGE, expect=200
        )
    _, cm = server.json("GET", cm_path(ns, "many"), expect=200)
    mf = cm["metadata"]["managedFields"]
    assert len(mf) == 10 and all(e["operation"] == "Update" for e in mf)
    by_manager = {e["manager"]: e["fieldsV1"]["f:data"] for e in mf}
    # m00 became the bucket when m10 wrote (m01 merged in), then m02 joined it when m11 wrote.
    assert set(by_manager) == {"ancient-changes"} | {f"m{i:02d}" for i in range(3, 12)}
    assert set(by_manager["ancient-changes"]) == {".", "f:k0", "f:k1", "f:k2"}  # m00 created the map
    # Apply entries are not capped.
    for i in range(3):
        server.json(
            "PATCH",
            cm_path(ns, "many") + f"?fieldManager=a{i}",
            json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "many"}, "data": {f"a{i}": "v"}}),
            APPLY,
            expect=200,
        )
    mf = server.json("GET", cm_path(ns, "many"), expect=200)[1]["metadata"]["managedFields"]
    assert [e["operation"] for e in mf].count("Apply") == 3 and len(mf) == 13


def test_server_log_has_no_tracebacks(server):
    assert "Traceback" not in server.log_path.read_text(errors="replace")
