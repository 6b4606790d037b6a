"""Admission webhooks against a real ``orch-apiserver``, kubectl and HTTPS webhook
servers on 127.0.0.1: a mutating webhook's JSONPatch reaches the stored object, a
webhook that cannot be reached fails closed or open by its failurePolicy (only for
the namespaces its selector matches), a hanging webhook is cut off at
timeoutSeconds, denials and warnings reach kubectl, configuration changes take
effect within a second, dry-run requests carry the flag, /metrics counts the
calls, match conditions decide which objects a webhook sees (an expression that
does not compile is refused on create), a call takes no longer than the request's own
deadline, and a webhook naming another version of a two-version custom resource gets
the object converted to it (``matchPolicy: Equivalent``). Each test scopes its webhooks to a namespace
of its own by label."""

from __future__ import annotations

import json
import time

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, create_namespace, kubectl_binary
from tests.components import free_port
from tests.helpers import uniq, wait_for
from tests.webhook_server import DENY_MESSAGE, WARNING, WebhookServer

GROUP = names.ADMISSIONREGISTRATION_GROUP
SCOPE_LABEL = "webhook-test"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(tmp_path_factory.mktemp("webhooks") / "data", free_port())
    with s:
        yield s


@pytest.fixture(scope="module")
def hook_server():
    with WebhookServer() as w:
        yield w


@pytest.fixture(params=["default", "1.27"])
def kubectl(request, server, tmp_path):
    if request.param == "default":
        return Kubectl(server, tmp_path)
    return Kubectl(server, tmp_path, binary=kubectl_binary(request.param))


def namespace(server, scoped: bool = True) -> str:
    name = uniq("wh")
    create_namespace(server, name)
    if scoped:
        server.json(
            "PATCH",
            f"/api/v1/namespaces/{name}",
            {"metadata": {"labels": {SCOPE_LABEL: name}}},
            {"Content-Type": "application/merge-patch+json"},
            expect=200,
        )
    return name


def webhook(name: str, client_config: dict, ns: str, **extra) -> dict:
    hook = {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
        ],
        "namespaceSelector": {"matchLabels": {SCOPE_LABEL: ns}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    hook.update(extra)
    return hook


def install(server, resource: str, hooks: list[dict]) -> str:
    name = uniq("cfg")
    kind = "MutatingWebhookConfiguration" if resource.startswith("mutating") else "ValidatingWebhookConfiguration"
    server.json(
        "POST",
        f"/apis/{GROUP}/v1/{resource}",
        {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name}, "webhooks": hooks},
        expect=201,
    )
    return name


def remove(server, resource: str, name: str) -> None:
    server.json("DELETE", f"/apis/{GROUP}/v1/{resource}/{name}", expect=200)


def configmap(name: str, labels: dict | None = None) -> dict:
    md: dict = {"name": name}
    if labels is not None:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {"a": "b"}}


def create_cm(server, ns: str, name: str, **kw) -> tuple[int, dict]:
    return server.json("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap(name), **kw)


def test_mutating_patch_reaches_the_stored_object_and_the_review_is_complete(server, hook_server, kubectl):
    ns = namespace(server)
    cfg = install(
        server,
        "mutatingwebhookconfigurations",
        [webhook("patch.hooks.orch.test", hook_server.client_config("/patch"), ns)],
    )
    try:
        result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(configmap("m1")), check=True)
        assert "configmap/m1 created" in result.stdout
        _, stored = server.json("GET", f"/api/v1/namespaces/{ns}/configmaps/m1", expect=200)
        assert stored["metadata"]["labels"] == {"patched": "yes"}
        assert stored["data"] == {"a": "b", "added-by-webhook": "1"}
        review = [r for r in hook_server.reviews_for("/patch") if r["request"].get("namespace") == ns][-1]
        assert review["apiVersion"] == f"{names.ADMISSION_GROUP}/v1" and review["kind"] == "AdmissionReview"
        req = review["request"]
        assert req["uid"]
        assert req["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
        assert req["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
        assert req["requestKind"] == req["kind"] and req["requestResource"] == req["resource"]
        assert (req["name"], req["namespace"], req["operation"]) == ("m1", ns, "CREATE")
        assert req["userInfo"]["username"] == "orch-admin"
        assert "system:masters" in req["userInfo"]["groups"]
        assert req["object"]["data"] == {"a": "b"} and req["oldObject"] is None
        assert req["dryRun"] is False
        assert req["options"]["kind"] == "CreateOptions"
        assert req["options"]["apiVersion"] == f"{names.META_GROUP}/v1"
        # An update is sent with the stored object as oldObject.
        server.json(
            "PATCH",
            f"/api/v1/namespaces/{ns}/configmaps/m1",
            {"data": {"c": "d"}},
            {"Content-Type": "application/merge-patch+json"},
            expect=200,
        )
        upd = [r for r in hook_server.reviews_for("/patch") if r["request"].get("namespace") == ns][-1]["request"]
        assert upd["operation"] == "UPDATE" and upd["options"]["kind"] == "UpdateOptions"
        assert upd["oldObject"]["metadata"]["labels"] == {"patched": "yes"}
    finally:
        remove(server, "mutatingwebhookconfigurations", cfg)


def test_unreachable_webhook_fails_closed_only_where_it_matches_and_ignore_admits(server):
    closed = free_port()  # nothing listens there
    fail_ns, other_ns, ignore_ns = namespace(server), namespace(server), namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [
            webhook("fail.hooks.orch.test", {"url": f"https://127.0.0.1:{closed}/check"}, fail_ns),
            webhook(
                "ignore.hooks.orch.test",
                {"url": f"https://127.0.0.1:{closed}/check"},
                ignore_ns,
                failurePolicy="Ignore",
            ),
        ],
    )
    try:
        names_ = iter(range(1000))
        status, doc = wait_for(
            lambda: (r := create_cm(server, fail_ns, f"c{next(names_)}"))[0] == 500 and r,
            timeout=5,
            what="the Fail webhook to reject",
        )
        assert doc["reason"] == "InternalError"
        assert doc["message"] == (
            'Internal error occurred: failed calling webhook "fail.hooks.orch.test": failed to call webhook: '
            f'Post "https://127.0.0.1:{closed}/check?timeout=10s": dial tcp 127.0.0.1:{closed}: connect: connection refused'
        )
        create_cm(server, other_ns, "ok", expect=201)
        create_cm(server, ignore_ns, "ok", expect=201)
        # The server carries on: the next request in the failing namespace gets the same answer.
        assert create_cm(server, fail_ns, "again")[0] == 500
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


def test_a_hanging_webhook_is_cut_off_at_its_timeout(server, hook_server):
    ns = namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [webhook("hang.hooks.orch.test", hook_server.client_config("/hang"), ns, timeoutSeconds=1)],
    )
    try:
        wait_for(lambda: hook_server.reviews_for("/hang") or create_cm(server, ns, uniq("p"))[0] == 500, timeout=5)
        started = time.monotonic()
        status, doc = create_cm(server, ns, "slow")
        took = time.monotonic() - started
        assert status == 500, doc
        assert doc["message"] == (
            'Internal error occurred: failed calling webhook "hang.hooks.orch.test": failed to call webhook: '
            f'Post "{hook_server.url("/hang")}?timeout=1s": context deadline exceeded'
        )
        assert 0.9 <= took < 2.5, took
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


def test_a_webhook_call_takes_no_longer_than_the_requests_own_deadline(server, hook_server):
    ns = namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [webhook("slow.hooks.orch.test", hook_server.client_config("/hang"), ns, timeoutSeconds=30)],
    )
    try:
        seen: list = []

        def cut_off() -> bool:  # (until the configuration is in effect, the create succeeds)
            before = len(hook_server.timeouts)
            path = f"/api/v1/namespaces/{ns}/configmaps?timeout=2s"
            status, doc = server.json("POST", path, configmap(uniq("cut")), timeout=15)
            seen.append((status, doc, hook_server.timeouts[before:]))
            return status == 504

        wait_for(cut_off, timeout=10, what="the request cut off at its own deadline")
        _, doc, told = seen[-1]
        assert (doc["reason"], doc["message"]) == (
            "Timeout",
            "Timeout: request did not complete within the allotted timeout",
        )
        # The webhook is told what was left of the request's 2 s, not its own 30 s.
        assert told in ([("/hang", "2s")], [("/hang", "1s")]), told
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


def test_denial_and_warnings_reach_kubectl(server, hook_server, kubectl):
    ns = namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [
            webhook("warn.hooks.orch.test", hook_server.client_config("/warn"), ns),
            webhook(
                "deny.hooks.orch.test",
                hook_server.client_config("/deny"),
                ns,
                objectSelector={"matchLabels": {"deny": "yes"}},
            ),
        ],
    )
    try:
        wait_for(lambda: hook_server.reviews_for("/warn") or create_cm(server, ns, uniq("p"))[0] == 201, timeout=5)
        ok = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(configmap("fine")))
        assert ok.returncode == 0, ok.stderr
        assert f"Warning: {WARNING}" in ok.stderr
        bad = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(configmap("bad", {"deny": "yes"})))
        assert bad.returncode != 0
        assert (
            # No reason in the webhook's status: kubectl names none, as with upstream.
            f'Error from server: error when creating "STDIN": admission webhook "deny.hooks.orch.test" denied the request: {DENY_MESSAGE}'
            in bad.stderr
        )
        status, doc = server.json("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("bad2", {"deny": "yes"}))
        assert (status, doc["code"]) == (403, 403)
        assert doc["message"] == f'admission webhook "deny.hooks.orch.test" denied the request: {DENY_MESSAGE}'
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


def test_configuration_changes_take_effect_within_a_second(server, hook_server):
    ns = namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [webhook("deny.hooks.orch.test", hook_server.client_config("/deny"), ns)],
    )
    started = time.monotonic()
    wait_for(lambda: create_cm(server, ns, uniq("d"))[0] == 403, timeout=5, what="the new webhook to deny")
    assert time.monotonic() - started < 1.0
    remove(server, "validatingwebhookconfigurations", cfg)
    started = time.monotonic()
    wait_for(lambda: create_cm(server, ns, uniq("a"))[0] == 201, timeout=5, what="the removed webhook to stop")
    assert time.monotonic() - started < 1.0


def test_dry_run_sends_the_flag_and_stores_nothing(server, hook_server, kubectl):
    ns = namespace(server)
    cfg = install(
        server,
        "mutatingwebhookconfigurations",
        [webhook("dry.hooks.orch.test", hook_server.client_config("/patch"), ns, sideEffects="NoneOnDryRun")],
    )
    try:
        wait_for(lambda: create_cm(server, ns, uniq("p"))[1].get("metadata", {}).get("labels"), timeout=5)
        result = kubectl(
            "create", "-n", ns, "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(configmap("dry"))
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["metadata"]["labels"] == {"patched": "yes"}
        req = [r for r in hook_server.reviews_for("/patch") if r["request"].get("name") == "dry"][-1]["request"]
        assert req["dryRun"] is True and req["options"]["dryRun"] == ["All"]
        assert server.request("GET", f"/api/v1/namespaces/{ns}/configmaps/dry")[0] == 404
    finally:
        remove(server, "mutatingwebhookconfigurations", cfg)


def test_webhook_configuration_validation(server):
    base = webhook("ok.hooks.orch.test", {"url": "https://127.0.0.1:1/x"}, "ns")
    cases = [
        (
            {**base, "name": "short"},
            'webhooks[0].name: Invalid value: "short": should be a domain with at least three segments separated by dots',
        ),
        (
            {**base, "timeoutSeconds": 31},
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        ),
        (
            {**base, "clientConfig": {}},
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
        ),
        (
            {**base, "clientConfig": {"url": "http://a.b/x"}},
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
        ),
        (
            {**base, "clientConfig": {"url": "https://a.b/x?q=1"}},
            'webhooks[0].clientConfig.url: Invalid value: "q=1": query parameters are not permitted in the URL',
        ),
        (
            {**base, "admissionReviewVersions": ["v2"]},
            'webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1',
        ),
        (
            {**base, "sideEffects": "Some"},
            'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
        ),
        (
            {**base, "matchConditions": [{"name": "a", "expression": "true"}, {"name": "a", "expression": "true"}]},
            'webhooks[0].matchConditions[1].name: Duplicate value: "a"',
        ),
        (
            {**base, "matchConditions": [{"name": "web", "expression": "object.metadata.name.startsWith("}]},
            'webhooks[0].matchConditions[0].expression: Invalid value: "object.metadata.name.startsWith(": '
            "compilation failed: ERROR: <input>:1:33: Syntax error:",
        ),
    ]
    for hook, message in cases:
        status, doc = server.json(
            "POST",
            f"/apis/{GROUP}/v1/validatingwebhookconfigurations",
            {"metadata": {"name": uniq("bad")}, "webhooks": [hook]},
        )
        assert status == 422, (hook, doc)
        assert message in doc["message"], (message, doc["message"])
    status, doc = server.json(
        "POST",
        f"/apis/{GROUP}/v1/validatingwebhookconfigurations",
        {"metadata": {"name": uniq("dup")}, "webhooks": [base, base]},
    )
    assert status == 422 and 'webhooks[1].name: Duplicate value: "ok.hooks.orch.test"' in doc["message"]


def test_metrics_count_calls_and_rejections(server, hook_server):
    ns = namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [webhook("metered.hooks.orch.test", hook_server.client_config("/deny"), ns)],
    )
    try:
        wait_for(lambda: create_cm(server, ns, uniq("d"))[0] == 403, timeout=5)
        _, _, body = server.request("GET", "/metrics")
        text = body.decode()
        assert (
            'apiserver_admission_webhook_request_total{code="200",name="metered.hooks.orch.test",operation="CREATE",'
            'rejected="true",type="validating"}'
        ) in text
        assert (
            'apiserver_admission_webhook_rejection_count{error_type="no_error",name="metered.hooks.orch.test",'
            'operation="CREATE",rejection_code="403",type="validating"}'
        ) in text
        assert 'apiserver_admission_webhook_admission_duration_seconds_count{name="metered.hooks.orch.test"' in text
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


IS_WEB = {"name": "is-web", "expression": "object.metadata.name.startsWith('web-')"}


def test_match_conditions_decide_which_objects_a_webhook_sees(server, hook_server):
    ns = namespace(server)
    cfg = install(
        server,
        "mutatingwebhookconfigurations",
        [webhook("web.patch.hooks.orch.test", hook_server.client_config("/patch"), ns, matchConditions=[IS_WEB])],
    )
    try:
        wait_for(
            lambda: create_cm(server, ns, uniq("web-p"), expect=201)[1]["metadata"].get("labels"),
            timeout=5,
            what="the mutating webhook to take effect",
        )
        _, other = create_cm(server, ns, "db-1", expect=201)
        assert "labels" not in other["metadata"]
        _, web = create_cm(server, ns, "web-1", expect=201)
        assert web["metadata"]["labels"] == {"patched": "yes"}
        seen = [r["request"]["name"] for r in hook_server.reviews_for("/patch") if r["request"]["namespace"] == ns]
        assert "web-1" in seen and all(name.startswith("web-") for name in seen), seen
    finally:
        remove(server, "mutatingwebhookconfigurations", cfg)
    # A validating webhook that denies: only the objects its condition selects are refused.
    ns = namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [webhook("web.deny.hooks.orch.test", hook_server.client_config("/deny"), ns, matchConditions=[IS_WEB])],
    )
    try:
        wait_for(lambda: create_cm(server, ns, uniq("web-d"))[0] == 403, timeout=5, what="the webhook to deny")
        create_cm(server, ns, "db-1", expect=201)
        status, doc = create_cm(server, ns, "web-1")
        assert (status, doc["message"]) == (
            403,
            f'admission webhook "web.deny.hooks.orch.test" denied the request: {DENY_MESSAGE}',
        )
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


def test_a_condition_that_fails_to_evaluate_follows_the_failure_policy(server, hook_server):
    broken = {"name": "tier", "expression": "object.metadata.labels.tier == 'web'"}  # no labels: an error
    fail_ns, ignore_ns = namespace(server), namespace(server)
    cfg = install(
        server,
        "validatingwebhookconfigurations",
        [
            webhook("fail.tier.hooks.orch.test", hook_server.client_config("/deny"), fail_ns, matchConditions=[broken]),
            webhook(
                "ignore.tier.hooks.orch.test",
                hook_server.client_config("/deny"),
                ignore_ns,
                failurePolicy="Ignore",
                matchConditions=[broken],
            ),
        ],
    )
    try:
        status, doc = wait_for(
            lambda: (r := create_cm(server, fail_ns, uniq("c")))[0] == 403 and r,
            timeout=5,
            what="the Fail webhook's condition to refuse",
        )
        assert doc["reason"] == "Forbidden"
        assert doc["message"].endswith(
            "is forbidden: expression 'object.metadata.labels.tier == 'web'' resulted in error: no such key: labels"
        ), doc["message"]
        create_cm(server, ignore_ns, "skipped", expect=201)  # Ignore: the webhook (which denies) is not called
        assert not [r for r in hook_server.reviews_for("/deny") if r["request"]["namespace"] in (fail_ns, ignore_ns)]
    finally:
        remove(server, "validatingwebhookconfigurations", cfg)


EQUIV_GROUP = "equiv.example.com"


def test_a_webhook_naming_another_version_of_a_custom_resource_gets_it_converted(server, hook_server):
    """matchPolicy Equivalent (the default): a webhook whose rule names v1 of a two-version
    definition is called for a v2 create, with the object converted by the definition's
    conversion webhook; its patch comes back to the v2 object and is stored."""

    def version(name: str, storage: bool, props: dict) -> dict:
        schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}
        return {"name": name, "served": True, "storage": storage, "schema": {"openAPIV3Schema": schema}}

    crd = {
        "apiVersion": f"{names.APIEXTENSIONS_GROUP}/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"endpoints.{EQUIV_GROUP}"},
        "spec": {
            "group": EQUIV_GROUP,
            "scope": "Namespaced",
            "names": {"plural": "endpoints", "singular": "endpoint", "kind": "Endpoint"},
            "versions": [
                version("v1", True, {"host": {"type": "string"}, "port": {"type": "integer"}}),
                version("v2", False, {"hostPort": {"type": "string"}}),
            ],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {"clientConfig": hook_server.client_config("/convert"), "conversionReviewVersions": ["v1"]},
            },
        },
    }
    server.json("POST", f"/apis/{names.APIEXTENSIONS_GROUP}/v1/customresourcedefinitions", crd, expect=201)
    wait_for(lambda: server.json("GET", f"/apis/{EQUIV_GROUP}/v2")[0] == 200, timeout=10, what="v2 served")
    ns = namespace(server)
    rule = {"operations": ["CREATE"], "apiGroups": [EQUIV_GROUP], "apiVersions": ["v1"], "resources": ["endpoints"]}
    cfg = install(
        server,
        "mutatingwebhookconfigurations",
        [webhook("label.hooks.orch.test", hook_server.client_config("/label"), ns, rules=[rule])],
    )
    v2 = f"/apis/{EQUIV_GROUP}/v2/namespaces/{ns}/endpoints"
    try:
        before = len(hook_server.reviews_for("/label"))

        def created() -> dict | None:
            body = {"apiVersion": f"{EQUIV_GROUP}/v2", "kind": "Endpoint", "metadata": {"name": uniq("e")}}
            body["spec"] = {"hostPort": "x:80"}
            _, obj = server.json("POST", v2, body, expect=201)
            return obj if (obj["metadata"].get("labels") or {}).get("seen-version") else None

        obj = wait_for(created, timeout=10, what="the webhook in effect")
        assert obj["apiVersion"] == f"{EQUIV_GROUP}/v2" and obj["spec"] == {"hostPort": "x:80"}
        assert obj["metadata"]["labels"]["seen-version"] == "v1"
        req = hook_server.reviews_for("/label")[-1]["request"]
        assert len(hook_server.reviews_for("/label")) > before
        assert req["kind"] == {"group": EQUIV_GROUP, "version": "v1", "kind": "Endpoint"}
        assert req["resource"] == {"group": EQUIV_GROUP, "version": "v1", "resource": "endpoints"}
        assert req["requestKind"] == {"group": EQUIV_GROUP, "version": "v2", "kind": "Endpoint"}
        assert req["requestResource"] == {"group": EQUIV_GROUP, "version": "v2", "resource": "endpoints"}
        # Sent as the conversion webhook made it in v1.
        assert req["object"]["apiVersion"] == f"{EQUIV_GROUP}/v1"
        assert req["object"]["spec"] == {"host": "x", "port": 80}
        name = obj["metadata"]["name"]
        _, stored = server.json("GET", f"/apis/{EQUIV_GROUP}/v1/namespaces/{ns}/endpoints/{name}", expect=200)
        assert stored["spec"] == {"host": "x", "port": 80}
        assert stored["metadata"]["labels"]["seen-version"] == "v1"
    finally:
        remove(server, "mutatingwebhookconfigurations", cfg)
