"""The Webhook and ABAC authorization modes, their flags, and --request-timeout's deadlines."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.orchconfig import Target
from apiserver_min.api.user import UserInfo
from apiserver_min.authz import abac, webhook
from apiserver_min.authz.authorizer import AlwaysDeny, AuthzAttributes, Decision, Union
from apiserver_min.options import OptionsError
from apiserver_min.options import parse as parse_args
from apiserver_min.server.timeouts import TIMEOUT_MESSAGE, Deadlines, requested_timeout, timed_out
from apiserver_min.webhookclient.client import CallError, JsonWebhook
from tests.components import free_port

ALICE = UserInfo("alice", uid="u-1", groups=("dev", names.GROUP_AUTHENTICATED), extra={"scope": ("a",)})
BOB = UserInfo("bob", groups=("ops", names.GROUP_AUTHENTICATED))


def res(user, verb, resource, namespace="", group="", name="") -> AuthzAttributes:
    return AuthzAttributes(
        user, verb, True, namespace=namespace, api_group=group, api_version="v1", resource=resource, name=name
    )


def path(user, verb, p) -> AuthzAttributes:
    return AuthzAttributes(user, verb, False, path=p)


# --- ABAC -----------------------------------------------------------------------------------------

POLICY_FILE = "\n".join(
    [
        "# readers",
        "",
        json.dumps(
            {
                "apiVersion": abac.API_VERSION,
                "kind": "Policy",
                "spec": {"user": "alice", "namespace": "default", "resource": "*", "apiGroup": "*", "readonly": True},
            }
        ),
        json.dumps(
            {
                "apiVersion": abac.API_VERSION,
                "kind": "Policy",
                "spec": {"group": "ops", "namespace": "*", "resource": "deployments", "apiGroup": "apps"},
            }
        ),
        "   "
        + json.dumps(
            {
                "apiVersion": abac.API_VERSION,
                "kind": "Policy",
                "spec": {"user": "*", "nonResourcePath": "/healthz/*", "readonly": True},
            }
        ),
        json.dumps({"user": "carol", "namespace": "lab"}),
    ]
)


def test_abac_file_and_matching(tmp_path):
    f = tmp_path / "policy.jsonl"
    f.write_text(POLICY_FILE)
    a = abac.AbacAuthorizer.from_file(str(f))
    assert len(a.policies) == 4
    assert a.authorize(res(ALICE, "get", "pods", "default"))[0] is Decision.ALLOW
    assert a.authorize(res(ALICE, "watch", "secrets", "default"))[0] is Decision.ALLOW
    assert a.authorize(res(ALICE, "create", "pods", "default")) == (Decision.NO_OPINION, "No policy matched.")
    assert a.authorize(res(ALICE, "get", "pods", "other"))[0] is Decision.NO_OPINION
    assert a.authorize(res(BOB, "delete", "deployments", "x", "apps"))[0] is Decision.ALLOW
    assert a.authorize(res(BOB, "delete", "deployments", "x", "extensions"))[0] is Decision.NO_OPINION
    # "*" user is every authenticated user; the trailing * is a prefix of non-resource paths
    assert a.authorize(path(BOB, "get", "/healthz/etcd"))[0] is Decision.ALLOW
    assert a.authorize(path(BOB, "get", "/metrics"))[0] is Decision.NO_OPINION
    anonymous = UserInfo(names.USER_ANONYMOUS, groups=(names.GROUP_UNAUTHENTICATED,))
    assert a.authorize(path(anonymous, "get", "/healthz/etcd"))[0] is Decision.NO_OPINION
    # the unversioned form: a namespace alone is every resource, every group, all verbs there
    carol = UserInfo("carol")
    assert a.authorize(res(carol, "delete", "deployments", "lab", "apps"))[0] is Decision.ALLOW
    assert a.authorize(path(carol, "get", "/version"))[0] is Decision.NO_OPINION
    rules = a.rules_for(ALICE, "default")
    assert [(r.verbs, r.resources) for r in rules.resource_rules] == [(("get", "list", "watch"), ("*",))]
    assert rules.non_resource_rules == []  # as upstream: a path policy has no namespace, so no namespace's rules
    assert [r.non_resource_urls for r in a.rules_for(BOB, "").non_resource_rules] == [("/healthz/*",)]


def test_abac_unversioned_defaults():
    p = abac.parse_policy({})
    assert (p.group, p.namespace, p.resource, p.api_group, p.non_resource_path) == (
        names.GROUP_AUTHENTICATED,
        "*",
        "*",
        "*",
        "*",
    )
    p = abac.parse_policy({"user": "*", "resource": "pods"})
    assert (p.user, p.group, p.non_resource_path) == ("", names.GROUP_AUTHENTICATED, "")


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line 3: {not json"),
        ('{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {}}', "is not a policy"),
        (
            '{"apiVersion": "%s", "kind": "Policy", "spec": {"namspace": "x"}}' % abac.API_VERSION,
            "unknown field spec.'namspace'",
        ),
        (
            '{"apiVersion": "%s", "kind": "Policy", "spec": {"readonly": "yes"}}' % abac.API_VERSION,
            "spec.readonly must be a boolean",
        ),
        ('{"user": "a", "nonResourcePath": "/x"}', "unknown field 'nonResourcePath'"),
        ("[1]", "must be a JSON object"),
    ],
)
def test_abac_bad_lines_name_file_and_line(tmp_path, line, message):
    f = tmp_path / "p.jsonl"
    f.write_text("# c\n\n" + line + "\n")
    with pytest.raises(abac.PolicyFileError, match=f"error reading policy file {f}, line 3") as e:
        abac.load_policy_file(str(f))
    assert message in str(e.value)


# --- webhook --------------------------------------------------------------------------------------


def test_webhook_review_spec_versions():
    a = res(ALICE, "list", "deployments", "default", "apps")
    spec = webhook.review_spec(a, "v1")
    assert spec == {
        "resourceAttributes": {
            "namespace": "default",
            "verb": "list",
            "group": "apps",
            "version": "v1",
            "resource": "deployments",
        },
        "user": "alice",
        "groups": ["dev", names.GROUP_AUTHENTICATED],
        "extra": {"scope": ["a"]},
        "uid": "u-1",
    }
    assert "group" in webhook.review_spec(a, "v1beta1") and "groups" not in webhook.review_spec(a, "v1beta1")
    assert webhook.review_spec(path(BOB, "get", "/logs"), "v1")["nonResourceAttributes"] == {
        "path": "/logs",
        "verb": "get",
    }


def test_webhook_verdicts():
    assert webhook.verdict({"allowed": True, "reason": "ok"}) == (Decision.ALLOW, "ok", "")
    assert webhook.verdict({"allowed": False, "denied": True, "reason": "no"}) == (Decision.DENY, "no", "")
    assert webhook.verdict({}) == (Decision.NO_OPINION, "", "")
    assert webhook.verdict({"allowed": True, "denied": True})[0] is Decision.DENY
    assert "both allow and deny" in webhook.verdict({"allowed": True, "denied": True})[2]


def _authorizer(answers: list, now: list[float]) -> tuple[webhook.WebhookAuthorizer, list[dict]]:
    w = webhook.WebhookAuthorizer(
        Target("https://127.0.0.1:9/authorize"), authorized_ttl=300, unauthorized_ttl=30, monotonic=lambda: now[0]
    )
    sent: list[dict] = []

    async def post(doc: dict) -> dict:
        sent.append(doc)
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return {"apiVersion": doc["apiVersion"], "kind": "SubjectAccessReview", "status": a}

    w.client.post = post  # type: ignore[method-assign]
    return w, sent


async def test_webhook_caches_by_answer_not_failures():
    now = [0.0]
    w, sent = _authorizer(
        [
            {"allowed": True},
            {"allowed": False, "reason": "nope"},
            CallError("down"),
            {"allowed": False},
            {"allowed": True},
            {"allowed": False},
        ],
        now,
    )
    get = res(ALICE, "get", "pods", "default")
    assert w.authorize(get) == (Decision.NO_OPINION, webhook.NOT_ASKED_REASON)  # nothing asked yet
    assert await w.decide(get) == (Decision.ALLOW, "", "")
    assert sent[0]["apiVersion"] == f"{names.AUTHORIZATION_GROUP}/v1" and sent[0]["kind"] == "SubjectAccessReview"
    assert await w.decide(get) == (Decision.ALLOW, "", "") and len(sent) == 1  # cached
    assert w.authorize(get) == (Decision.ALLOW, "")  # the synchronous checks see the cache
    other = res(BOB, "get", "pods", "default")
    assert await w.decide(other) == (Decision.NO_OPINION, "nope", "")
    decision, reason, error = await w.decide(res(BOB, "delete", "pods", "default"))
    assert decision is Decision.NO_OPINION and error == "down"  # failures: no opinion with an error
    assert (await w.decide(res(BOB, "delete", "pods", "default")))[0] is Decision.NO_OPINION and len(sent) == 4
    now[0] = 31  # the "no" expired, the "yes" not
    assert await w.decide(get) == (Decision.ALLOW, "", "") and len(sent) == 4
    assert await w.decide(other) == (Decision.ALLOW, "", "") and len(sent) == 5
    now[0] = 301
    assert await w.decide(get) == (Decision.NO_OPINION, "", "") and len(sent) == 6
    assert w.rules_for(ALICE, "default").incomplete


async def test_union_decide_passes_no_opinion_and_aggregates_errors():
    now = [0.0]
    w1, _ = _authorizer([CallError("one"), {"allowed": True, "reason": "fine"}], now)
    w2, _ = _authorizer([CallError("two")], now)
    u = Union([w1, w2])
    assert await u.decide(res(ALICE, "get", "pods", "d")) == (Decision.NO_OPINION, "", "[one, two]")
    assert await u.decide(res(ALICE, "get", "pods", "e")) == (Decision.ALLOW, "fine", "")
    abac_then_deny = Union([abac.AbacAuthorizer([]), AlwaysDeny()])
    assert await abac_then_deny.decide(res(ALICE, "get", "pods")) == (Decision.DENY, "Everything is forbidden.", "")


def test_webhook_version_refused():
    with pytest.raises(ValueError, match="unsupported webhook authorizer version"):
        webhook.WebhookAuthorizer(Target("https://127.0.0.1:9/"), "v2")


# --- flags ----------------------------------------------------------------------------------------


def _orchconfig(tmp_path) -> str:
    cfg = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9/authorize"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "w.yaml").write_text(json.dumps(cfg))
    return str(tmp_path / "w.yaml")


def test_authorization_flags(tmp_path):
    cfg = _orchconfig(tmp_path)
    (tmp_path / "p.jsonl").write_text(POLICY_FILE)
    o = parse_args(
        [
            "--authorization-mode=Node,RBAC,ABAC,Webhook",
            f"--authorization-policy-file={tmp_path}/p.jsonl",
            f"--authorization-webhook-config-file={cfg}",
            "--authorization-webhook-version=v1beta1",
            "--authorization-webhook-cache-authorized-ttl=1m",
            "--request-timeout=2s",
        ]
    )
    assert o.authorization_modes == ("Node", "RBAC", "ABAC", "Webhook") and len(o.authorization_policies) == 4
    assert o.authorization_webhook is not None and o.authorization_webhook.token == "t"
    assert (
        o.authorization_webhook_version,
        o.authorization_webhook_cache_authorized_ttl,
        o.authorization_webhook_cache_unauthorized_ttl,
        o.request_timeout,
    ) == ("v1beta1", 60.0, 30.0, 2.0)
    d = parse_args([])
    assert d.request_timeout == 60.0 and d.authorization_webhook is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--authorization-mode=RBAC,ABAC"], "authorization-mode ABAC's authorization policy file not passed"),
        (["--authorization-mode=Webhook"], "authorization-mode Webhook's authorization config file not passed"),
        (["--authorization-policy-file=/x"], "cannot specify --authorization-policy-file without mode ABAC"),
        (
            ["--authorization-webhook-config-file=/x"],
            "cannot specify --authorization-webhook-config-file without mode Webhook",
        ),
        (["--authorization-webhook-cache-unauthorized-ttl=1s"], "needs mode Webhook"),
        (["--authorization-mode=RBAC,RBAC"], "more than once"),
        (["--authorization-mode=ABAC", "--authorization-policy-file=/nonexistent"], "error reading policy file"),
        (
            ["--authorization-mode=Webhook", "--authorization-webhook-config-file=/nonexistent"],
            "--authorization-webhook-config-file /nonexistent: cannot read",
        ),
        (["--request-timeout=0s"], "must be greater than 0"),
        (["--request-timeout=soon"], "--request-timeout"),
    ],
)
def test_authorization_flag_errors(args, message):
    with pytest.raises(OptionsError, match=message.replace("(", r"\(")):
        parse_args(args)


def test_webhook_version_flag_error(tmp_path):
    with pytest.raises(OptionsError, match="must be v1 or v1beta1"):
        parse_args(
            [
                "--authorization-mode=Webhook",
                f"--authorization-webhook-config-file={_orchconfig(tmp_path)}",
                "--authorization-webhook-version=v2",
            ]
        )


# --- request timeout ------------------------------------------------------------------------------


def test_requested_timeout():
    assert requested_timeout({}, 60) == 60
    assert requested_timeout({"timeout": "5s"}, 60) == 5
    assert requested_timeout({"timeout": "0s"}, 60) == 60  # no timeout of the client's own
    assert requested_timeout({"timeout": "2m"}, 60) == 60  # never above the server's
    with pytest.raises(st.ApiError) as e:
        requested_timeout({"timeout": "soon"}, 60)
    assert e.value.code == 400 and e.value.message.startswith("invalid timeout specified in the request URL - ")
    t = timed_out().to_status()
    assert (t["code"], t["reason"], t["message"]) == (504, "Timeout", TIMEOUT_MESSAGE)


async def test_deadlines_cancel_late_work_only():
    deadlines = Deadlines(0.05)
    outcome: dict[str, str] = {}

    async def work(name: str, seconds: float, limit: float):
        d = deadlines.start(limit)
        try:
            await asyncio.sleep(seconds)
            deadlines.finish(d)
            outcome[name] = "done"
        except asyncio.CancelledError:
            assert d.expired
            outcome[name] = "expired"
        finally:
            deadlines.finish(d)

    await asyncio.gather(
        work("quick", 0, 0.05), work("slow", 5, 0.05), work("short", 5, 0.01), work("quick-short", 0, 0.01)
    )
    assert outcome == {"quick": "done", "slow": "expired", "short": "expired", "quick-short": "done"}
    assert not deadlines._fifo and deadlines._timer is None


# --- the shared JSON webhook client ---------------------------------------------------------------


async def test_json_webhook_retries_then_answers_and_words_failures():
    answers = [503, 429, 200]

    async def handle(request: web.Request) -> web.Response:
        code = answers.pop(0)
        doc = await request.json()
        assert request.headers["Authorization"] == "Bearer t"
        return web.json_response({"echo": doc}, status=code)

    app = web.Application()
    app.router.add_post("/review", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        client = JsonWebhook(Target(f"http://127.0.0.1:{port}/review", token="t"), retry_backoff=0.01)
        assert await client.post({"a": 1}) == {"echo": {"a": 1}}
        assert client.calls == 3
        answers[:] = [400]
        with pytest.raises(CallError, match=r"the server answered HTTP 400"):
            await client.post({})  # not retried
        assert client.calls == 4
        await client.close()
    finally:
        await runner.cleanup()
    gone = JsonWebhook(Target(f"http://127.0.0.1:{free_port()}/review"), retry_backoff=0.01)
    with pytest.raises(CallError, match=r'^Post "http://127.0.0.1:\d+/review": dial tcp .*connection refused'):
        await gone.post({})
    assert gone.calls == 5
    await gone.close()


def test_example_files_read():
    examples = Path(__file__).resolve().parents[2] / "configs" / "examples"
    policies = abac.load_policy_file(str(examples / "abac-policy.jsonl"))
    a = abac.AbacAuthorizer(policies)
    auditor = UserInfo("eve", groups=("auditors",))
    assert a.authorize(res(auditor, "list", "secrets", "x"))[0] is Decision.ALLOW
    assert a.authorize(res(auditor, "delete", "secrets", "x"))[0] is Decision.NO_OPINION
    assert a.authorize(res(UserInfo("alice"), "delete", "pods", "projects"))[0] is Decision.ALLOW
    with pytest.raises(ValueError, match="/etc/orch/authz-client.crt: No such file"):
        webhook.load_config(str(examples / "authz-webhook.orchconfig"))  # the paths are to be edited
