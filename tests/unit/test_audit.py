"""Audit logging's pure parts: policy parsing and rule matching, the events' fields
and what they never hold, the log file's rotation and the batch mode."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from apiserver_min.api import names
from apiserver_min.api.user import UserInfo
from apiserver_min.audit.event import REDACTED, RequestAudit, audit_id, redact, response_status
from apiserver_min.audit.logbackend import AuditWriteError, LogBackend, LogOptions, RotatingFile
from apiserver_min.audit.policy import PolicyError, RequestFacts, load_policy, parse_policy
from apiserver_min.options import OptionsError, parse

AV = names.AUDIT_API_VERSION


def policy(*rules, **top):
    return parse_policy({"apiVersion": AV, "kind": "Policy", "rules": list(rules), **top})


def req(verb="get", resource="pods", sub="", ns="default", name="", group="", user="alice", groups=("dev",), path=""):
    return RequestFacts(user, groups, verb, not path, path or "/api", group, resource, sub, ns, name)


def test_the_first_matching_rule_decides_and_none_matched_is_not_recorded():
    p = policy(
        {"level": "None", "users": ["system:kube-proxy"]},
        {"level": "RequestResponse", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods"]}]},
        {"level": "Metadata", "userGroups": ["dev"]},
    )
    assert p.decide(req(user="system:kube-proxy")).level == "None"
    assert p.decide(req(verb="create")).level == "RequestResponse"
    assert p.decide(req(verb="create", resource="secrets")).level == "Metadata"
    assert p.decide(req(groups=("ops",))).level == "None"


def test_resources_sub_resources_wildcards_and_names():
    p = policy(
        {"level": "Request", "resources": [{"group": "", "resources": ["pods/log"]}]},
        {"level": "Metadata", "resources": [{"group": "", "resources": ["pods/*"]}]},
        {"level": "RequestResponse", "resources": [{"group": "apps", "resources": ["*"]}]},
        {"level": "Request", "resources": [{"group": "", "resources": ["configmaps"], "resourceNames": ["cfg"]}]},
        {"level": "Metadata", "resources": [{"group": "", "resources": ["*/status"]}]},
    )
    assert p.decide(req(sub="log")).level == "Request"
    assert p.decide(req(sub="exec")).level == "Metadata"
    assert p.decide(req()).level == "None"  # pods/* does not hold pods itself
    assert p.decide(req(group="apps", resource="deployments", sub="scale")).level == "RequestResponse"
    assert p.decide(req(resource="configmaps", name="cfg")).level == "Request"
    assert p.decide(req(resource="configmaps", name="other")).level == "None"
    assert p.decide(req(resource="services", sub="status")).level == "Metadata"


def test_namespaces_and_non_resource_urls():
    p = policy(
        {"level": "Metadata", "namespaces": [""]},
        {"level": "Request", "namespaces": ["orch-system"]},
        {"level": "RequestResponse", "nonResourceURLs": ["/healthz*", "/version"]},
    )
    assert p.decide(req(ns="")).level == "Metadata"  # cluster-scoped
    assert p.decide(req(ns="orch-system")).level == "Request"
    assert p.decide(req(ns="default")).level == "None"
    assert p.decide(req(path="/healthz/etcd")).level == "RequestResponse"
    assert p.decide(req(path="/version")).level == "RequestResponse"
    assert p.decide(req(path="/versions")).level == "None"


def test_omit_stages_and_managed_fields_policy_wide_and_per_rule():
    p = policy(
        {"level": "Metadata", "verbs": ["get"], "omitStages": ["ResponseComplete"], "omitManagedFields": False},
        {"level": "Metadata"},
        omitStages=["RequestReceived"],
        omitManagedFields=True,
    )
    d = p.decide(req())
    assert d.omit_stages == {"RequestReceived", "ResponseComplete"} and not d.omit_managed_fields
    d = p.decide(req(verb="list"))
    assert d.omit_stages == {"RequestReceived"} and d.omit_managed_fields


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "None"}]}, "expected apiVersion"),
        ({"apiVersion": AV, "kind": "Policy", "rules": []}, "at least one rule"),
        ({"apiVersion": AV, "kind": "Policy", "rules": [{"level": "Everything"}]}, "rules[0].level"),
        ({"apiVersion": AV, "kind": "Policy", "rules": [{"level": "None", "verb": ["get"]}]}, "unknown field 'verb'"),
        ({"apiVersion": AV, "kind": "Policy", "omitStages": ["Done"], "rules": [{"level": "None"}]}, "unknown stage"),
        (
            {"apiVersion": AV, "kind": "Policy", "rules": [{"level": "None", "nonResourceURLs": ["/a*b"]}]},
            "only at its end",
        ),
        (
            {
                "apiVersion": AV,
                "kind": "Policy",
                "rules": [{"level": "None", "nonResourceURLs": ["/x"], "namespaces": ["a"]}],
            },
            "may not be given with",
        ),
    ],
)
def test_bad_policies_are_refused_with_the_field(doc, message):
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_policy(doc)


def test_policy_files_yaml_or_json_and_errors_name_the_file(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"apiVersion": AV, "kind": "Policy", "rules": [{"level": "Metadata"}]}))
    assert load_policy(str(f)).rules[0].level == "Metadata"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(PolicyError, match="bad.yaml"):
        load_policy(str(bad))
    with pytest.raises(OptionsError, match="--audit-policy-file.*missing.yaml"):
        parse(["--audit-policy-file", str(tmp_path / "missing.yaml")])


def test_flags_defaults_and_refusals():
    opts = parse([])
    assert opts.audit_policy is None and opts.audit_log is None and opts.audit_webhook is None
    with pytest.raises(OptionsError, match="--audit-log-format"):
        parse(["--audit-log-format", "legacy"])
    with pytest.raises(OptionsError, match="--audit-log-mode"):
        parse(["--audit-log-mode", "fast"])
    with pytest.raises(OptionsError, match="--audit-webhook-mode"):
        parse(["--audit-webhook-mode", "blocking"])
    opts = parse(["--audit-log-path", "/tmp/x.log", "--audit-log-maxsize", "5", "--audit-log-batch-max-wait", "2s"])
    assert opts.audit_log == LogOptions("/tmp/x.log", max_size_mb=5, batch_max_wait=2.0)


def test_client_audit_ids_are_kept_when_valid():
    assert audit_id("abc-123") == "abc-123"
    for bad in ("", "a b", "x" * 200, "id\n"):
        assert audit_id(bad) != bad and len(audit_id(bad)) == 36


def test_secret_configmap_and_token_contents_never_appear():
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}, "stringData": {"x": "y"}}
    assert redact(secret, "", "secrets", "") == {
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"k": REDACTED},
        "stringData": {"x": REDACTED},
    }
    listed = redact({"kind": "SecretList", "items": [secret]}, "", "secrets", "")
    assert listed["items"][0]["data"] == {"k": REDACTED}
    assert secret["data"] == {"k": "c2VjcmV0"}  # the served object is left alone
    cm = redact({"kind": "ConfigMap", "data": {"a": "b"}, "binaryData": {"c": "ZA=="}}, "", "configmaps", "")
    assert cm["data"] == {"a": REDACTED} and cm["binaryData"] == {"c": REDACTED}
    review = redact({"spec": {"token": "abc"}, "status": {}}, names.AUTHENTICATION_GROUP, "tokenreviews", "")
    assert review["spec"]["token"] == REDACTED
    tr = redact({"status": {"token": "jwt", "expirationTimestamp": "t"}}, "", "serviceaccounts", "token")
    assert tr["status"] == {"token": REDACTED, "expirationTimestamp": "t"}


def record(level="RequestResponse", resource="secrets", omit=frozenset(), omf=False):
    p = policy({"level": level, "omitStages": sorted(omit), "omitManagedFields": omf})
    d = p.decide(req(resource=resource))
    return RequestAudit(
        d,
        "id-1",
        verb="create",
        request_uri="/api/v1/namespaces/default/" + resource,
        user=UserInfo("alice", "u1", ("dev",)),
        source_ips=["127.0.0.1"],
        user_agent="test",
        object_ref={"resource": resource, "namespace": "default", "apiVersion": "v1"},
    )


def test_events_carry_the_stage_fields_and_levels():
    r = record(resource="pods", omf=True)
    body = {"kind": "Pod", "metadata": {"name": "p", "managedFields": [{"manager": "m"}]}}
    r.set_request_object(body)
    r.set_response_object(body)
    r.response_status = response_status(201, None)
    received = r.event("RequestReceived")
    assert received["stage"] == "RequestReceived" and "requestObject" not in received
    done = r.event("ResponseComplete")
    assert done["apiVersion"] == AV and done["kind"] == "Event" and done["auditID"] == "id-1"
    assert done["user"] == {"username": "alice", "uid": "u1", "groups": ["dev"]}
    assert done["responseStatus"] == {"metadata": {}, "code": 201}
    assert done["requestObject"]["metadata"] == {"name": "p"}  # omitManagedFields
    assert "responseObject" in done
    meta = record(level="Metadata", resource="pods")
    meta.set_request_object(body)
    meta.set_response_object(body)
    assert "requestObject" not in meta.event("ResponseComplete")
    request_level = record(level="Request", resource="pods")
    request_level.set_request_object(body)
    request_level.set_response_object(body)
    ev = request_level.event("ResponseComplete")
    assert "requestObject" in ev and "responseObject" not in ev
    assert response_status(404, {"status": "Failure", "message": "gone", "reason": "NotFound"}) == {
        "metadata": {},
        "code": 404,
        "status": "Failure",
        "message": "gone",
        "reason": "NotFound",
    }


def test_rotation_keeps_timestamped_backups_up_to_the_limit(tmp_path):
    path = tmp_path / "audit.log"
    f = RotatingFile(str(path), max_bytes=100, max_backups=2, max_age_days=0)
    for i in range(10):
        f.write(f"{i:02d}".encode() * 20 + b"\n")  # 41 bytes: two lines a file
    f.close()
    backups = sorted(p.name for p in tmp_path.iterdir() if p.name != "audit.log")
    assert len(backups) == 2
    for name in backups:
        assert name.startswith("audit-") and name.endswith(".log")
        stamp = name[len("audit-") : -len(".log")]
        assert stamp[4] == "-" and stamp[10] == "T" and stamp[13] == "-"  # 2006-01-02T15-04-05.000
    assert path.read_bytes().startswith(b"08")


def test_rotation_removes_backups_older_than_maxage(tmp_path):
    path = tmp_path / "audit.log"
    old = tmp_path / "audit-2000-01-01T00-00-00.000.log"
    old.write_text("old\n")
    os.utime(old, (0, 0))
    f = RotatingFile(str(path), max_bytes=10, max_backups=0, max_age_days=1)
    f.write(b"x" * 8 + b"\n")
    f.write(b"y" * 8 + b"\n")  # rotates, then prunes
    f.close()
    assert not old.exists()
    assert len(list(tmp_path.iterdir())) == 2


async def test_batch_mode_writes_in_batches_and_counts_drops(tmp_path):
    path = tmp_path / "a.log"
    b = LogBackend(LogOptions(str(path), mode="batch", batch_buffer_size=5, batch_max_size=3, batch_max_wait=0.05))
    b.start()
    for i in range(7):
        b.process({"auditID": str(i), "stage": "ResponseComplete"})
    assert b.dropped == 2  # the buffer holds five
    await asyncio.sleep(0.2)
    assert [json.loads(x)["auditID"] for x in path.read_text().splitlines()] == ["0", "1", "2", "3", "4"]
    b.process({"auditID": "late", "stage": "ResponseComplete"})
    await b.shutdown()
    assert path.read_text().splitlines()[-1] == '{"auditID":"late","stage":"ResponseComplete"}'


def test_blocking_strict_fails_an_unwritable_request_received():
    b = LogBackend(LogOptions("/dev/full", mode="blocking-strict"))  # every write fails (ENOSPC)
    with pytest.raises(AuditWriteError):
        b.process({"auditID": "1", "stage": "RequestReceived"})
    b.process({"auditID": "1", "stage": "ResponseComplete"})  # later stages only count
    assert b.dropped == 2
    lenient = LogBackend(LogOptions("/dev/full", mode="blocking"))
    lenient.process({"auditID": "1", "stage": "RequestReceived"})
    assert lenient.dropped == 1


def test_json_bodies_are_spliced_whole_and_secrets_still_redacted(tmp_path):
    pod = record(resource="pods")
    pod.set_response_object(b'{"kind":"Pod","metadata":{"name":"p"}}')
    secret = record(resource="secrets")
    secret.set_response_object(b'{"kind":"Secret","data":{"k":"c2VjcmV0"}}')
    b = LogBackend(LogOptions(str(tmp_path / "a.log")))
    b.process(pod.event("ResponseComplete"))
    b.process(secret.event("ResponseComplete"))
    lines = [json.loads(x) for x in (tmp_path / "a.log").read_text().splitlines()]
    assert lines[0]["responseObject"] == {"kind": "Pod", "metadata": {"name": "p"}}
    assert lines[1]["responseObject"] == {"kind": "Secret", "data": {"k": REDACTED}}
