"""API priority and fairness against a real orch-apiserver: the bootstrap objects, the
classification headers, a tiny Reject level answering 429 with Retry-After, and the
exempt level for system:masters and health checks.

One server for the module, with a single seat in all (``--max-requests-inflight=1``,
``--max-mutating-requests-inflight=0``), so that concurrent requests of a limited user
are rejected predictably.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess
from tests.components import free_port

FC = f"/apis/{names.FLOWCONTROL_GROUP}/{names.FLOWCONTROL_VERSION}"
TOKEN = "apf-limited-token"
USER = "apf-limited"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    d = tmp_path_factory.mktemp("apf")
    (d / "tokens.csv").write_text(f"{TOKEN},{USER},uid-apf\n")
    proc = ApiServerProcess(
        d / "data",
        free_port(),
        extra_args=[
            "--token-auth-file",
            str(d / "tokens.csv"),
            "--max-requests-inflight",
            "1",
            "--max-mutating-requests-inflight",
            "0",
        ],
    )
    with proc:
        proc.json(
            "POST",
            f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings",
            {
                "metadata": {"name": "apf-limited"},
                "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": names.RBAC_GROUP, "kind": "User", "name": USER}],
            },
            expect=201,
        )
        yield proc


def _items(server, resource: str) -> dict[str, dict]:
    status, _, body = server.request("GET", f"{FC}/{resource}")
    assert status == 200, body
    return {o["metadata"]["name"]: o for o in json.loads(body)["items"]}


def test_mandatory_and_suggested_objects_exist_with_status(server):
    levels = _items(server, "prioritylevelconfigurations")
    assert {"exempt", "catch-all", "system", "node-high", "leader-election", "workload-high", "workload-low"} <= set(
        levels
    )
    assert levels["exempt"]["spec"] == {"type": "Exempt"}
    assert levels["catch-all"]["spec"]["limited"]["limitResponse"] == {"type": "Reject"}
    assert levels["global-default"]["spec"]["limited"]["limitResponse"]["queuing"] == {
        "queues": 128,
        "handSize": 6,
        "queueLengthLimit": 50,
    }
    schemas = _items(server, "flowschemas")
    expected = {
        "exempt": 1,
        "probes": 2,
        "system-leader-election": 100,
        "endpoint-controller": 150,
        "workload-leader-election": 200,
        "system-node-high": 400,
        "system-nodes": 500,
        "orch-controller-manager": 800,
        "orch-scheduler": 800,
        "orch-system-service-accounts": 900,
        "service-accounts": 9000,
        "global-default": 9900,
        "catch-all": 10000,
    }
    assert {n: s["spec"]["matchingPrecedence"] for n, s in schemas.items()} == expected
    for s in schemas.values():
        assert s["metadata"]["annotations"][names.APF_AUTOUPDATE_ANNOTATION] == "true"
    deadline = time.monotonic() + 10
    while True:  # the Dangling condition is written just after start
        conds = (_items(server, "flowschemas")["global-default"].get("status") or {}).get("conditions") or []
        if conds or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(c["type"], c["status"], c["reason"]) for c in conds] == [("Dangling", "False", "Found")]


def test_admin_and_health_checks_are_exempt(server):
    schemas, levels = _items(server, "flowschemas"), _items(server, "prioritylevelconfigurations")
    _, headers, _ = server.request("GET", "/api/v1/namespaces")
    assert headers[names.APF_FLOWSCHEMA_UID_HEADER.lower()] == schemas["exempt"]["metadata"]["uid"]
    assert headers[names.APF_PRIORITY_LEVEL_UID_HEADER.lower()] == levels["exempt"]["metadata"]["uid"]
    status, headers, _ = server.request("GET", "/healthz", client_cert=False)
    assert status == 200
    assert headers[names.APF_FLOWSCHEMA_UID_HEADER.lower()] == schemas["probes"]["metadata"]["uid"]
    assert headers[names.APF_PRIORITY_LEVEL_UID_HEADER.lower()] == levels["exempt"]["metadata"]["uid"]


def test_invalid_objects_are_refused(server):
    status, _, body = server.request(
        "POST",
        f"{FC}/prioritylevelconfigurations",
        {
            "metadata": {"name": "bad"},
            "spec": {
                "type": "Limited",
                "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 8}}},
            },
        },
    )
    assert status == 422, body
    assert "spec.limited.limitResponse.queuing.handSize" in body.decode()
    status, _, body = server.request(
        "POST",
        f"{FC}/flowschemas",
        {"metadata": {"name": "bad"}, "spec": {"priorityLevelConfiguration": {"name": "x"}, "matchingPrecedence": 0}},
    )
    assert status == 201, body  # 0 is defaulted to 1000
    assert json.loads(body)["spec"]["matchingPrecedence"] == 1000
    server.request("DELETE", f"{FC}/flowschemas/bad")


def test_tiny_reject_level_answers_429_with_retry_after(server):
    server.json(
        "POST",
        f"{FC}/prioritylevelconfigurations",
        {
            "metadata": {"name": "tiny"},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}},
            },
        },
        expect=201,
    )
    _, fs = server.json(
        "POST",
        f"{FC}/flowschemas",
        {
            "metadata": {"name": "tiny-users"},
            "spec": {
                "priorityLevelConfiguration": {"name": "tiny"},
                "matchingPrecedence": 50,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": USER}}],
                        "resourceRules": [
                            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True}
                        ],
                    }
                ],
            },
        },
        expect=201,
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    deadline = time.monotonic() + 10
    while True:  # in effect once the watch cache has it
        _, headers, _ = server.request("GET", "/api/v1/configmaps", headers=auth, client_cert=False)
        if headers.get(names.APF_FLOWSCHEMA_UID_HEADER.lower()) == fs["metadata"]["uid"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert headers.get(names.APF_FLOWSCHEMA_UID_HEADER.lower()) == fs["metadata"]["uid"]

    def one(path: str) -> tuple[int, dict]:
        status, headers, _ = server.request("GET", path, headers=auth, client_cert=False)
        return status, headers

    # A list at a future resourceVersion waits (3 s) for the cache, holding the level's one
    # seat; the requests meanwhile are rejected.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        holder = pool.submit(one, "/api/v1/configmaps?resourceVersion=999999999")
        time.sleep(0.8)
        results = [one("/api/v1/configmaps") for _ in range(3)]
        results.append(holder.result())
    codes = [s for s, _ in results]
    assert codes[:3] == [429, 429, 429] and codes[3] == 504, codes
    rejected = next(h for s, h in results if s == 429)
    assert rejected["retry-after"] == "1"
    assert rejected[names.APF_FLOWSCHEMA_UID_HEADER.lower()] == fs["metadata"]["uid"]
    # The admin is exempt meanwhile, and the rejection is counted.
    status, _, metrics = server.request("GET", "/metrics")
    assert status == 200
    assert (
        'apiserver_flowcontrol_rejected_requests_total{flow_schema="tiny-users",priority_level="tiny",'
        'reason="concurrency-limit"}' in metrics.decode()
    )
    # A schema whose level is gone is Dangling, and its requests fall to the next schema.
    server.request("DELETE", f"{FC}/prioritylevelconfigurations/tiny")
    deadline = time.monotonic() + 10
    while True:
        conds = (_items(server, "flowschemas")["tiny-users"].get("status") or {}).get("conditions") or []
        if [c["status"] for c in conds] == ["True"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(c["type"], c["status"], c["reason"]) for c in conds] == [("Dangling", "True", "NotFound")]
    _, headers, _ = server.request("GET", "/api/v1/configmaps", headers=auth, client_cert=False)
    assert (
        headers[names.APF_FLOWSCHEMA_UID_HEADER.lower()]
        == _items(server, "flowschemas")["global-default"]["metadata"]["uid"]
    )
