"""Audit logging against a real ``orch-apiserver`` and kubectl: one event per stage at
the policy's level, the Audit-ID header, a watch's ResponseStarted stage, a Secret's
data never recorded, rotation with a small --audit-log-maxsize, and a bad policy file
stopping the start with the file's name."""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, create_namespace
from tests.components import free_port
from tests.helpers import uniq, wait_for

POLICY = {
    "apiVersion": names.AUDIT_API_VERSION,
    "kind": "Policy",
    "omitStages": [],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*"]},
        # A Secret asks for everything: its data still never appears.
        {"level": "RequestResponse", "resources": [{"group": "", "resources": ["secrets", "configmaps"]}]},
        {"level": "RequestResponse", "resources": [{"group": "", "resources": ["pods"]}], "verbs": ["create"]},
        {"level": "Metadata", "omitStages": ["RequestReceived"], "verbs": ["list", "get"]},
        {"level": "Metadata"},
    ],
}


def events(path: Path) -> list[dict]:
    out = []
    for p in sorted(path.parent.glob(path.stem + "*" + path.suffix)):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    tmp = tmp_path_factory.mktemp("audit")
    policy = tmp / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    log = tmp / "logs" / "audit.log"
    s = ApiServerProcess(
        tmp / "data",
        free_port(),
        extra_args=[
            "--audit-policy-file",
            str(policy),
            "--audit-log-path",
            str(log),
            "--audit-log-maxsize",
            "1",
            "--audit-log-maxbackup",
            "3",
        ],
    )
    with s:
        yield s, log, tmp


def by_id(path: Path, audit_id: str) -> list[dict]:
    return [e for e in events(path) if e["auditID"] == audit_id]


def test_a_create_has_received_and_complete_events_at_the_policys_level(audited):
    server, log, tmp = audited
    ns = uniq("au")
    create_namespace(server, ns)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    result = Kubectl(server, tmp)("create", "-n", ns, "-f", "-", "-v=8", input=json.dumps(pod))
    assert result.returncode == 0, result.stderr
    creates = wait_for(
        lambda: (
            [
                e
                for e in events(log)
                if e["verb"] == "create"
                and e.get("objectRef", {}).get("resource") == "pods"
                and e["objectRef"].get("namespace") == ns
            ]
            or None
        ),
        what="the create's events",
    )
    assert [e["stage"] for e in creates] == ["RequestReceived", "ResponseComplete"]
    received, complete = creates
    assert received["auditID"] == complete["auditID"]
    assert f"audit-id: {complete['auditID']}" in result.stderr.lower()  # kubectl -v=8 prints response headers
    assert complete["apiVersion"] == names.AUDIT_API_VERSION and complete["kind"] == "Event"
    assert complete["level"] == "RequestResponse"
    assert complete["user"]["username"] == "orch-admin"
    assert complete["sourceIPs"] == ["127.0.0.1"]
    assert complete["userAgent"].startswith("kubectl")
    assert complete["objectRef"] == {"resource": "pods", "namespace": ns, "apiVersion": "v1"}
    assert complete["responseStatus"]["code"] == 201
    assert complete["requestObject"]["metadata"]["name"] == "p"
    assert complete["responseObject"]["metadata"]["uid"]
    assert complete["annotations"][names.AUDIT_DECISION_ANNOTATION] == "allow"
    assert names.AUDIT_REASON_ANNOTATION in complete["annotations"]
    assert "requestObject" not in received and "responseStatus" not in received
    assert received["requestReceivedTimestamp"] == complete["requestReceivedTimestamp"] <= complete["stageTimestamp"]


def test_a_client_audit_id_is_kept_and_a_failure_has_its_reason(audited):
    server, log, _ = audited
    status, headers, _body = server.request(
        "GET", "/api/v1/namespaces/nowhere-x/pods/none", headers={"Audit-ID": "abc-123"}
    )
    assert status == 404 and headers["audit-id"] == "abc-123"
    got = wait_for(lambda: by_id(log, "abc-123") or None, what="the get's event")
    assert [e["stage"] for e in got] == ["ResponseComplete"]  # the rule omits RequestReceived
    assert got[0]["level"] == "Metadata" and "responseObject" not in got[0]
    assert got[0]["responseStatus"]["code"] == 404 and got[0]["responseStatus"]["reason"] == "NotFound"


def test_an_impersonated_request_names_both_users(audited):
    server, log, _ = audited
    status, _headers, _body = server.request(
        "GET", "/api/v1/namespaces", headers={"Impersonate-User": "bob", "Audit-ID": "imp-1"}
    )
    assert status == 403
    got = wait_for(lambda: by_id(log, "imp-1") or None, what="the impersonated request's event")
    assert got[-1]["user"]["username"] == "orch-admin"
    assert got[-1]["impersonatedUser"]["username"] == "bob"
    assert got[-1]["annotations"][names.AUDIT_DECISION_ANNOTATION] == "forbid"
    assert got[-1]["responseStatus"]["code"] == 403


def test_a_failed_authentication_is_one_response_started_event(audited):
    server, log, _ = audited
    status, _headers, _body = server.request(
        "GET", "/api/v1/pods", headers={"Authorization": "Bearer nonsense", "Audit-ID": "authn-1"}, client_cert=False
    )
    assert status == 401
    got = wait_for(lambda: by_id(log, "authn-1") or None, what="the failed authentication's event")
    assert [e["stage"] for e in got] == ["ResponseStarted"]
    assert got[0]["user"] == {} and got[0]["responseStatus"]["code"] == 401


def test_a_watch_records_response_started(audited):
    server, log, tmp = audited
    ns = uniq("aw")
    create_namespace(server, ns)
    kubectl = Kubectl(server, tmp)
    proc = kubectl.popen("get", "pods", "-n", ns, "--watch", "--request-timeout=0")
    try:

        def watch_events():
            got = [e for e in events(log) if e["verb"] == "watch" and e["objectRef"].get("namespace") == ns]
            # RequestReceived is written before the reply starts; wait for both stages.
            return got if len(got) >= 2 else None

        watches = wait_for(watch_events, what="the watch's ResponseStarted", timeout=15)
        assert [e["stage"] for e in watches][:2] == ["RequestReceived", "ResponseStarted"]
        assert watches[1]["responseStatus"]["code"] == 200
    finally:
        proc.kill()
        proc.communicate()


def test_a_secrets_data_never_appears(audited):
    server, log, tmp = audited
    ns = uniq("as")
    create_namespace(server, ns)
    kubectl = Kubectl(server, tmp)
    secret_value = "s3cr3t-" + uniq("v")
    cm_value = "cfg-" + uniq("v")
    kubectl("create", "secret", "generic", "sec", "-n", ns, f"--from-literal=key={secret_value}", check=True)
    kubectl("create", "configmap", "cm", "-n", ns, f"--from-literal=key={cm_value}", check=True)
    kubectl("get", "secret", "sec", "-n", ns, "-o", "yaml", check=True)
    kubectl("get", "secrets", "-n", ns, "-o", "yaml", check=True)
    kubectl("get", "configmap", "cm", "-n", ns, "-o", "yaml", check=True)
    wait_for(
        lambda: (
            [
                e
                for e in events(log)
                if e.get("objectRef", {}).get("resource") == "configmaps"
                and e["objectRef"].get("namespace") == ns
                and e["verb"] == "get"
            ]
            or None
        ),
        what="the configmap get's event",
    )
    texts = "\n".join(p.read_text() for p in log.parent.iterdir())
    assert secret_value not in texts and base64.b64encode(secret_value.encode()).decode() not in texts
    assert cm_value not in texts
    secret_creates = [
        e
        for e in events(log)
        if e.get("objectRef", {}).get("resource") == "secrets"
        and e["objectRef"].get("namespace") == ns
        and e["stage"] == "ResponseComplete"
        and e["verb"] == "create"
    ]
    assert secret_creates[0]["requestObject"]["data"] == {"key": "<redacted>"}
    assert secret_creates[0]["responseObject"]["metadata"]["name"] == "sec"


def test_the_log_rotates_and_keeps_every_event(audited):
    server, log, _ = audited
    ns = uniq("ar")
    create_namespace(server, ns)
    big = "x" * 200_000
    for i in range(8):  # about 3 MB of RequestResponse events against a 1 MB limit
        server.json(
            "POST",
            f"/api/v1/namespaces/{ns}/configmaps",
            {"metadata": {"name": f"c{i}", "annotations": {"big": big}}},
            expect=201,
        )
    backups = sorted(p.name for p in log.parent.iterdir() if p.name != log.name)
    assert backups, "no rotation happened"
    assert len(backups) <= 3
    for name in backups:
        assert name.startswith("audit-") and name.endswith(".log")
    assert log.stat().st_size <= 1024 * 1024 + 1  # the live file holds at most one over-sized event
    for p in log.parent.iterdir():
        for line in p.read_text().splitlines():
            json.loads(line)  # every line whole


def test_a_bad_policy_stops_the_start_naming_the_file(tmp_path):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    policy = tmp_path / "bad-policy.yaml"
    policy.write_text(
        yaml.safe_dump({"apiVersion": names.AUDIT_API_VERSION, "kind": "Policy", "rules": [{"level": "Loud"}]})
    )
    result = subprocess.run(
        [
            str(APISERVER_BIN),
            "--data-dir",
            str(tmp_path / "d"),
            "--secure-port",
            str(free_port()),
            "--audit-policy-file",
            str(policy),
            "--audit-log-path",
            str(tmp_path / "a.log"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert "bad-policy.yaml" in result.stderr and "rules[0].level" in result.stderr


class Receiver:
    """An audit webhook on 127.0.0.1: answers ``fail_first`` POSTs with 500, then 200,
    keeping every EventList it accepted."""

    def __init__(self, fail_first: int):
        self.fail_left = fail_first
        self.failed = 0
        self.batches: list[dict] = []
        self.auth: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the name http.server calls
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.auth.append(self.headers.get("Authorization", ""))
                if outer.fail_left > 0:
                    outer.fail_left -= 1
                    outer.failed += 1
                    self.send_response(500)
                else:
                    outer.batches.append(json.loads(body))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/audit"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def webhook_server(tmp: Path, url: str) -> ApiServerProcess:
    policy = tmp / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"apiVersion": names.AUDIT_API_VERSION, "kind": "Policy", "rules": [{"level": "Metadata"}]})
    )
    config = tmp / "webhook.orchconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "audit", "cluster": {"server": url}}],
                "users": [{"name": "apiserver", "user": {"token": "audit-token"}}],
                "contexts": [{"name": "default", "context": {"cluster": "audit", "user": "apiserver"}}],
                "current-context": "default",
            }
        )
    )
    return ApiServerProcess(
        tmp / "data",
        free_port(),
        extra_args=[
            "--audit-policy-file",
            str(policy),
            "--audit-webhook-config-file",
            str(config),
            "--audit-webhook-batch-max-wait",
            "200ms",
            "--audit-webhook-batch-max-size",
            "50",
            "--audit-webhook-initial-backoff",
            "100ms",
        ],
    )


def audit_errors(server: ApiServerProcess) -> int:
    _, _, body = server.request("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith('apiserver_audit_error_total{plugin="webhook"}'):
            return int(line.split()[-1])
    raise AssertionError("no webhook error counter")


def test_an_unreachable_webhook_never_fails_requests(tmp_path):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    with webhook_server(tmp_path, f"http://127.0.0.1:{free_port()}/audit") as server:  # connection refused
        ns = uniq("awr")
        create_namespace(server, ns)
        for i in range(20):
            server.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": f"c{i}"}}, expect=201)
        # Four attempts 0.1s, 0.2s, 0.4s apart, then the batch is dropped and counted.
        wait_for(lambda: audit_errors(server) > 0, timeout=15, what="dropped events counted")
        server.json("GET", f"/api/v1/namespaces/{ns}/configmaps", expect=200)


def test_a_failing_then_working_webhook_receives_batches(tmp_path):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    receiver = Receiver(fail_first=2)
    try:
        with webhook_server(tmp_path, receiver.url) as server:
            ns = uniq("awb")
            create_namespace(server, ns)
            started = time.monotonic()
            for i in range(20):
                server.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": f"c{i}"}}, expect=201)
            assert time.monotonic() - started < 10  # nobody waited for the webhook's 500s

            def creates() -> list[dict]:
                return [
                    e
                    for b in receiver.batches
                    for e in b["items"]
                    if e["verb"] == "create"
                    and e.get("objectRef", {}).get("namespace") == ns
                    and e["stage"] == "ResponseComplete"
                ]

            wait_for(lambda: len(creates()) == 20 or None, timeout=20, what="the 20 creates' events")
            assert receiver.failed == 2  # the 500s were retried
            batch = receiver.batches[0]
            assert batch["kind"] == "EventList" and batch["apiVersion"] == names.AUDIT_API_VERSION
            assert max(len(b["items"]) for b in receiver.batches) > 1  # events travel in batches
            assert all(len(b["items"]) <= 50 for b in receiver.batches)
            assert set(receiver.auth) == {"Bearer audit-token"}
            assert audit_errors(server) == 0
    finally:
        receiver.close()
