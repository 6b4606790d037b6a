"""The webhook plugins' logic without a server: rule matching, the dry-run refusal
of webhooks with side effects, reinvocation, answers that cannot be used, the
credential look-up by host name and service endpoint resolution, and match
conditions (evaluation, failure policy, the authorizer, their validation on write and
their compilation once per configuration generation)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
from pathlib import Path

import pytest

from apiserver_min import pki
from apiserver_min.admission import chain
from apiserver_min.admission.chain import Attributes
from apiserver_min.admission.equivalence import Equivalence
from apiserver_min.admission.plugins import equivalentresources
from apiserver_min.admission.plugins import imagepolicywebhook as imagepolicy
from apiserver_min.admission.webhook.client import CallError, WebhookClients
from apiserver_min.admission.webhook.credentials import (
    ClientCredentials,
    CredentialResolver,
    parse_webhook_admission_config,
)
from apiserver_min.admission.webhook.dispatcher import MutatingWebhookPlugin, ValidatingWebhookPlugin
from apiserver_min.admission.webhook.matching import parse_selector, rule_matches, rules_match_shape
from apiserver_min.admission.webhook.metrics import WebhookMetrics
from apiserver_min.admission.webhook.source import ClusterLookup, ResolveError, Webhook, WebhookSource
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY, KindInfo, Registry
from apiserver_min.api.user import UserInfo
from apiserver_min.authz.authorizer import Decision
from apiserver_min.registry import autoscaling_v1
from apiserver_min.registry.admissionregistration import validate_webhooks
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix, object_key
from tests.webhook_server import WebhookServer

CONFIGMAPS = REGISTRY.by_resource("", "v1", "configmaps")
ADMIN = UserInfo("alice", groups=("devs",))


def rule(**kw) -> dict:
    r = {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "*"}
    r.update(kw)
    return r


@pytest.mark.parametrize(
    "resources, sub, expected",
    [
        (["*"], "", True),
        (["*"], "status", False),
        (["*/*"], "status", True),
        (["pods/*"], "status", True),
        (["pods/*"], "", True),  # upstream: "/*" also covers the resource itself
        (["*/status"], "status", True),
        (["pods/status"], "binding", False),
        (["pods"], "", True),
    ],
)
def test_resource_patterns(resources, sub, expected):
    assert rule_matches(rule(resources=resources), "UPDATE", "", "v1", "pods", sub, True) is expected


def test_scope_operations_groups_and_versions():
    assert rule_matches(rule(scope="Cluster"), "CREATE", "", "v1", "namespaces", "", False)
    assert not rule_matches(rule(scope="Namespaced"), "CREATE", "", "v1", "namespaces", "", False)
    assert rule_matches(rule(scope="Namespaced"), "CREATE", "", "v1", "pods", "", True)
    assert not rule_matches(rule(operations=["CREATE"]), "DELETE", "", "v1", "pods", "", True)
    assert rule_matches(rule(operations=["CONNECT"]), "CONNECT", "", "v1", "pods", "", True)
    assert not rule_matches(rule(apiGroups=["apps"]), "CREATE", "", "v1", "pods", "", True)
    assert not rule_matches(rule(apiVersions=["v1beta1"]), "CREATE", "", "v1", "pods", "", True)


class FakeSource:
    def __init__(self, specs: list[dict]):
        self.on_change: list = []
        self._hooks = [
            Webhook(
                "cfg",
                i,
                s,
                parse_selector(s.get("namespaceSelector")),
                parse_selector(s.get("objectSelector")),
                f"k{i}",
            )
            for i, s in enumerate(specs)
        ]

    def hooks(self) -> list[Webhook]:
        return self._hooks

    equivalence = None

    def matching_rules(self, shape: tuple) -> list[tuple[Webhook, None]]:
        return [(h, None) for h in self._hooks if rules_match_shape(h.spec, *shape)]


class ScriptedClients(WebhookClients):
    """Answers by URL path with a function of the review."""

    def __init__(self, answers: dict):
        super().__init__(None, CredentialResolver())  # type: ignore[arg-type]
        self.answers = answers
        self.calls: list[str] = []
        self.timeouts: list[tuple[float, float | None]] = []  # (told, waited) per call

    async def post(self, key, client_config, body, timeout, wait=None):
        path = client_config["url"].rsplit("/", 1)[-1]
        self.calls.append(path)
        self.timeouts.append((timeout, wait))
        review = json.loads(body)
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        response = answer(review["request"])
        return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}


def hook(name: str, path: str, **extra) -> dict:
    h = {
        "name": name,
        "clientConfig": {"url": f"https://127.0.0.1/{path}"},
        "rules": [rule()],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Fail",
    }
    h.update(extra)
    return h


def attrs(obj: dict | None = None, dry_run: bool = False) -> Attributes:
    obj = obj if obj is not None else {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    return Attributes("CREATE", CONFIGMAPS, "", "c", "", obj, None, ADMIN, dry_run)


def patch_answer(ops: list):
    def answer(req):
        return {
            "uid": req["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
        }

    return answer


def allow(req):
    return {"uid": req["uid"], "allowed": True}


def plugin(cls, specs, answers, authorizer=None):
    clients = ScriptedClients(answers)
    return cls(FakeSource(specs), None, clients, WebhookMetrics(), lambda: authorizer), clients


def test_dry_run_refuses_a_webhook_with_side_effects_before_calling_it():
    p, clients = plugin(ValidatingWebhookPlugin, [hook("fx.hooks.test", "fx", sideEffects="Some")], {"fx": allow})
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.validate(attrs(dry_run=True)))
    assert (err.value.code, err.value.message) == (400, 'admission webhook "fx.hooks.test" does not support dry run')
    assert clients.calls == []
    asyncio.run(p.validate(attrs()))  # a real request calls it
    assert clients.calls == ["fx"]


def test_if_needed_webhooks_are_reinvoked_once_after_a_later_change():
    specs = [
        hook("first.hooks.test", "first", reinvocationPolicy="IfNeeded"),
        hook("second.hooks.test", "second"),
    ]
    answers = {"first": allow, "second": patch_answer([{"op": "add", "path": "/data/x", "value": "1"}])}
    p, clients = plugin(MutatingWebhookPlugin, specs, answers)
    a = attrs()
    assert asyncio.run(p.admit(a)) is True
    assert a.obj["data"] == {"x": "1"}
    assert clients.calls == ["first", "second", "first"]


def test_webhooks_that_change_nothing_are_not_reinvoked_and_report_no_change():
    specs = [hook("first.hooks.test", "first", reinvocationPolicy="IfNeeded"), hook("second.hooks.test", "second")]
    p, clients = plugin(MutatingWebhookPlugin, specs, {"first": allow, "second": allow})
    assert asyncio.run(p.admit(attrs())) is False
    assert clients.calls == ["first", "second"]


def test_a_call_is_told_what_is_left_of_the_requests_deadline():
    p, clients = plugin(ValidatingWebhookPlugin, [hook("t.hooks.test", "t", timeoutSeconds=10)], {"t": allow})

    async def call(left: float | None) -> None:
        record, token = chain.begin_request()
        if left is not None:
            record.deadline = asyncio.get_running_loop().time() + left
        try:
            await p.validate(attrs())
        finally:
            chain.end_request(token)

    asyncio.run(call(None))  # no deadline: the webhook's own timeout
    asyncio.run(call(2.3))  # less left than the webhook's timeout: told 3s, the deadline ends the call
    asyncio.run(call(25.0))  # more left: the webhook's own timeout
    assert clients.timeouts == [(10, 10), (3, 10), (10, 10)]


@pytest.mark.parametrize(
    "response, detail",
    [
        (lambda req: {"uid": "other", "allowed": True}, 'expected response.uid="{uid}", got "other"'),
        (
            lambda req: {"uid": req["uid"], "allowed": True, "patch": "W10="},
            "webhook returned response.patch but not response.patchType",
        ),
        (
            lambda req: {"uid": req["uid"], "allowed": True, "patchType": "JSONPatch", "patch": "W10="},
            "validating webhook may not return response.patch",
        ),
    ],
)
def test_unusable_answers_fail_closed_with_upstreams_words(response, detail):
    seen: list[str] = []

    def answer(req):
        seen.append(req["uid"])
        return response(req)

    p, _ = plugin(ValidatingWebhookPlugin, [hook("v.hooks.test", "v")], {"v": answer})
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.validate(attrs()))
    assert err.value.code == 500
    assert err.value.message == (
        'Internal error occurred: failed calling webhook "v.hooks.test": received invalid webhook response: '
        + detail.format(uid=seen[0])
    )


def test_ignore_admits_on_call_errors_and_a_patch_that_does_not_apply_is_an_internal_error():
    p, _ = plugin(
        ValidatingWebhookPlugin, [hook("i.hooks.test", "i", failurePolicy="Ignore")], {"i": CallError("Post: boom")}
    )
    asyncio.run(p.validate(attrs()))
    p, _ = plugin(
        MutatingWebhookPlugin,
        [hook("m.hooks.test", "m", failurePolicy="Ignore")],
        {"m": patch_answer([{"op": "replace", "path": "/nope/x", "value": 1}])},
    )
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.admit(attrs()))
    assert err.value.code == 500 and err.value.reason == "InternalError"


def test_denial_passes_the_status_through():
    def deny(req):
        return {"uid": req["uid"], "allowed": False, "status": {"code": 422, "reason": "Invalid", "message": "bad"}}

    def deny_silently(req):
        return {"uid": req["uid"], "allowed": False, "status": {"code": 200}}

    p, _ = plugin(ValidatingWebhookPlugin, [hook("d.hooks.test", "d")], {"d": deny})
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.validate(attrs()))
    assert (err.value.code, err.value.reason) == (422, "Invalid")
    assert err.value.message == 'admission webhook "d.hooks.test" denied the request: bad'
    p, _ = plugin(ValidatingWebhookPlugin, [hook("d.hooks.test", "d")], {"d": deny_silently})
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.validate(attrs()))
    assert err.value.code == 400
    assert err.value.message == 'admission webhook "d.hooks.test" denied the request without explanation'


def test_configuration_objects_are_never_sent_to_webhooks():
    p, clients = plugin(ValidatingWebhookPlugin, [hook("all.hooks.test", "all")], {"all": allow})
    kind = REGISTRY.by_resource(names.ADMISSIONREGISTRATION_GROUP, "v1", "validatingwebhookconfigurations")
    a = Attributes("CREATE", kind, "", "x", "", {"metadata": {"name": "x"}}, None, ADMIN, False)
    asyncio.run(p.validate(a))
    assert clients.calls == []


def test_credentials_by_host_name_with_wildcards_and_default():
    token = ClientCredentials(token="t")
    cert = ClientCredentials(cert_pem=b"c", key_pem=b"k")
    default = ClientCredentials(username="u", password="p")
    r = CredentialResolver({"hook.ns.svc": token, "*.other.svc": cert, "*": default})
    assert r.resolve("hook.ns.svc") is token
    assert r.resolve("hook.ns.svc:443") is token
    assert r.resolve("x.other.svc") is cert
    assert r.resolve("hook.ns.svc:8443") is default
    assert token.headers() == {"Authorization": "Bearer t"}
    assert default.headers() == {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}


def test_a_service_without_ready_endpoints_fails_as_upstream():
    class Lookup:
        def resolve_service(self, namespace, name, port):
            raise ResolveError(f'no endpoints available for service "{name}"')

    clients = WebhookClients(Lookup(), CredentialResolver())  # type: ignore[arg-type]
    config = {"service": {"namespace": "ops", "name": "hook", "path": "/check", "port": 443}}
    with pytest.raises(CallError) as err:
        asyncio.run(clients.post("k", config, b"{}", 10))
    assert (
        str(err.value) == 'Post "https://hook.ops.svc:443/check?timeout=10s": no endpoints available for service "hook"'
    )


# --- ImagePolicyWebhook -----------------------------------------------------------------


def backend_config(tmp_path, server: str = "https://127.0.0.1:1/review") -> str:
    path = tmp_path / "backend.orchconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "b", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "b", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return str(path)


def test_image_policy_configuration_defaults_and_bounds(tmp_path):
    path = backend_config(tmp_path)
    cfg = imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": path}})
    assert (cfg.allow_ttl, cfg.deny_ttl, cfg.retry_backoff, cfg.default_allow) == (300.0, 30.0, 0.5, False)
    cfg = imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": path, "allowTTL": -1}})
    assert cfg.allow_ttl == 0.0
    with pytest.raises(ValueError, match=r"valid value is between 1s and 30m0s, got 40m0s for allow cache"):
        imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": path, "allowTTL": 2400}})
    with pytest.raises(ValueError, match=r"unknown field\(s\) cacheSize"):
        imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": path, "cacheSize": 3}})
    with pytest.raises(ValueError, match="must be served over TLS"):
        imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": backend_config(tmp_path, "http://a/b")}})


def pod_attrs(image: str = "good/app") -> Attributes:
    pods = REGISTRY.by_resource("", "v1", "pods")
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"image": image}]}}
    return Attributes("CREATE", pods, "ns", "p", "", obj, None, ADMIN, False)


def test_image_policy_backend_failure_fails_closed_or_open_by_default_allow(tmp_path):
    path = backend_config(tmp_path)  # nothing listens on port 1
    closed = imagepolicy.ImagePolicyWebhook(
        imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": path, "retryBackoff": 1}})
    )
    with pytest.raises(st.ApiError) as err:
        asyncio.run(closed.validate(pod_attrs()))
    assert err.value.code == 403
    assert err.value.message == (
        'pods "p" is forbidden: Post "https://127.0.0.1:1/review": dial tcp 127.0.0.1:1: connect: connection refused'
    )
    open_ = imagepolicy.ImagePolicyWebhook(
        imagepolicy.parse_configuration({"imagePolicy": {"kubeConfigFile": path, "defaultAllow": True}})
    )
    a = pod_attrs()
    asyncio.run(open_.validate(a))
    assert a.obj["metadata"]["annotations"] == {names.IMAGE_POLICY_FAILED_OPEN_ANNOTATION: "true"}


def test_credentials_from_the_kubeconfig_file_reach_the_webhook(tmp_path):
    ca, ca_key = pki.make_ca("client-ca")
    key = pki.new_key()
    cert = pki.sign_leaf(ca, ca_key, key.public_key(), "orch-apiserver", client=True)
    config = tmp_path / "webhook.orchconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {
                        "name": "127.0.0.1:*",
                        "user": {"token": "unused"},
                    },
                    {
                        "name": "*",
                        "user": {
                            "client-certificate-data": base64.b64encode(pki.cert_pem(cert)).decode(),
                            "client-key-data": base64.b64encode(pki.key_pem(key)).decode(),
                            "token": "t0ken",
                        },
                    },
                ],
            }
        )
    )
    path = parse_webhook_admission_config(
        {
            "apiVersion": f"apiserver.config.{names.DOMAIN}/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(config),
        }
    )
    with WebhookServer(client_ca_pem=pki.cert_pem(ca)) as hook_server:
        clients = WebhookClients(None, CredentialResolver.from_file(path))  # type: ignore[arg-type]

        async def call():
            try:
                return await clients.post(
                    "k",
                    hook_server.client_config("/allow"),
                    json.dumps({"apiVersion": "x", "kind": "AdmissionReview", "request": {"uid": "u"}}).encode(),
                    5,
                )
            finally:
                await clients.close()

        answer = asyncio.run(call())
    assert answer["response"] == {"uid": "u", "allowed": True}
    assert hook_server.authorizations == ["Bearer t0ken"]
    assert dict(x[0] for x in hook_server.client_certs[0]["subject"])["commonName"] == "orch-apiserver"
    with pytest.raises(ValueError, match="must be an absolute file path"):
        parse_webhook_admission_config(
            {
                "apiVersion": f"apiserver.config.{names.DOMAIN}/v1",
                "kind": "WebhookAdmissionConfiguration",
                "kubeConfigFile": "rel",
            }
        )


def test_a_kept_alive_connection_the_webhook_closed_is_replaced_and_chunked_answers_read():
    """The webhook closes every connection after answering (without saying so) and
    answers in chunks: each call still gets its answer."""
    ca, ca_key = pki.make_ca("t")
    key = pki.new_key()
    cert = pki.sign_leaf(ca, ca_key, key.public_key(), "hook", server=True, ips=["127.0.0.1"])
    d = tempfile.mkdtemp(prefix="orch-wt-test-")
    Path(d, "c.pem").write_bytes(pki.cert_pem(cert) + pki.key_pem(key))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(Path(d, "c.pem")))
    connections = 0

    async def handle(reader, writer):
        nonlocal connections
        connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        req = json.loads(await reader.readexactly(length))
        body = json.dumps({"response": {"uid": req["request"]["uid"], "allowed": True}}).encode()
        half = len(body) // 2
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:])
        )
        await writer.drain()
        writer.close()

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
        port = srv.sockets[0].getsockname()[1]
        clients = WebhookClients(None, CredentialResolver())  # type: ignore[arg-type]
        config = {"url": f"https://127.0.0.1:{port}/x", "caBundle": base64.b64encode(pki.cert_pem(ca)).decode()}
        answers = []
        for uid in ("a", "b", "c"):
            body = json.dumps({"request": {"uid": uid}}).encode()
            answers.append(await clients.post("k", config, body, 5))
        await clients.close()
        srv.close()
        await srv.wait_closed()
        return answers

    answers = asyncio.run(main())
    assert [a["response"]["uid"] for a in answers] == ["a", "b", "c"]
    assert connections == 3


def test_a_service_reference_is_called_at_a_ready_endpoint_with_the_service_name_for_tls():
    cache = WatchCache(None, list(REGISTRY.kinds), key_prefix)  # type: ignore[arg-type]
    services = REGISTRY.by_resource("", "v1", "services")
    endpoints = REGISTRY.by_resource("", "v1", "endpoints")

    def put(kind, obj):
        key = object_key(kind, "ops", obj["metadata"]["name"])
        c = cache.cache(key_prefix(kind))
        c.items[key] = c.make_entry(key, json.dumps(obj).encode(), 7)

    with WebhookServer(dns=("hook.ops.svc",)) as hook_server:
        put(
            services,
            {"metadata": {"name": "hook", "namespace": "ops"}, "spec": {"ports": [{"name": "https", "port": 443}]}},
        )
        put(
            endpoints,
            {
                "metadata": {"name": "hook", "namespace": "ops"},
                "subsets": [
                    {
                        "notReadyAddresses": [{"ip": "127.0.0.2"}],
                        "addresses": [{"ip": "127.0.0.1"}],
                        "ports": [{"name": "https", "port": hook_server.port}],
                    }
                ],
            },
        )
        put(
            services,
            {"metadata": {"name": "sliced", "namespace": "ops"}, "spec": {"ports": [{"name": "https", "port": 443}]}},
        )
        put(
            REGISTRY.by_resource(names.DISCOVERY_GROUP, "v1", "endpointslices"),
            {
                "metadata": {"name": "sliced-x1", "namespace": "ops", "labels": {names.LABEL_SERVICE_NAME: "sliced"}},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["127.0.0.3"], "conditions": {"ready": False}},
                    {"addresses": ["127.0.0.1"], "conditions": {"ready": True}},
                ],
                "ports": [{"name": "https", "port": 9443}],
            },
        )
        lookup = ClusterLookup(cache, REGISTRY, None)
        assert lookup.resolve_service("ops", "hook", 443) == ("127.0.0.1", hook_server.port)
        assert lookup.resolve_service("ops", "sliced", 443) == ("127.0.0.1", 9443)
        with pytest.raises(ResolveError, match='no service port 8443 found for service "hook"'):
            lookup.resolve_service("ops", "hook", 8443)
        clients = WebhookClients(lookup, CredentialResolver())
        config = {"service": {"namespace": "ops", "name": "hook", "path": "/allow"}, "caBundle": hook_server.ca_bundle}

        async def call():
            body = json.dumps({"apiVersion": "x", "kind": "AdmissionReview", "request": {"uid": "s"}}).encode()
            try:
                return await clients.post("k", config, body, 5)
            finally:
                await clients.close()

        assert asyncio.run(call())["response"] == {"uid": "s", "allowed": True}


def test_patched_objects_lose_unknown_fields_and_wrong_types_are_internal_errors():
    specs = [hook("m.hooks.test", "m")]
    p, _ = plugin(
        MutatingWebhookPlugin,
        specs,
        {
            "m": patch_answer(
                [{"op": "add", "path": "/data/x", "value": "1"}, {"op": "add", "path": "/bogus", "value": 1}]
            )
        },
    )
    a = attrs()
    assert asyncio.run(p.admit(a)) is True
    assert a.obj == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "1"}}
    p, _ = plugin(MutatingWebhookPlugin, specs, {"m": patch_answer([{"op": "add", "path": "/data/x", "value": 5}])})
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.admit(attrs()))
    assert err.value.code == 500 and err.value.reason == "InternalError"


# --- match conditions -------------------------------------------------------------------

IS_WEB = {"name": "is-web", "expression": "object.metadata.name.startsWith('web-')"}


def named(name: str, **data) -> Attributes:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    return Attributes("CREATE", CONFIGMAPS, "ops", name, "", obj, None, ADMIN, False)


def test_a_false_condition_skips_the_webhook_and_true_ones_call_it():
    specs = [hook("v.hooks.test", "v", matchConditions=[{"name": "always", "expression": "true"}, IS_WEB])]
    p, clients = plugin(ValidatingWebhookPlugin, specs, {"v": allow})
    asyncio.run(p.validate(named("db-1")))
    assert clients.calls == []
    asyncio.run(p.validate(named("web-1")))
    assert clients.calls == ["v"]
    assert p.metrics.condition_exclusions == {("webhook", "v.hooks.test", "CREATE", "validating"): 1}
    assert not p.metrics.condition_errors


def test_the_request_and_old_object_are_there_to_read():
    cond = {
        "name": "update-by-alice",
        "expression": "request.operation == 'UPDATE' && request.userInfo.username == 'alice'"
        " && oldObject.data.v != object.data.v && request.resource.resource == 'configmaps'",
    }
    p, clients = plugin(ValidatingWebhookPlugin, [hook("v.hooks.test", "v", matchConditions=[cond])], {"v": allow})
    a = named("c", v="2")
    asyncio.run(p.validate(a))  # a create (oldObject null): false on the operation
    assert clients.calls == []
    a.operation, a.old = "UPDATE", {"metadata": {"name": "c"}, "data": {"v": "1"}}
    asyncio.run(p.validate(a))
    assert clients.calls == ["v"]


@pytest.mark.parametrize("cls", [ValidatingWebhookPlugin, MutatingWebhookPlugin])
def test_an_evaluation_error_fails_closed_or_skips_the_webhook_by_failure_policy(cls):
    broken = {"name": "has-tier", "expression": "object.metadata.labels.tier == 'web'"}
    p, clients = plugin(cls, [hook("f.hooks.test", "f", matchConditions=[broken])], {"f": allow})
    run = p.validate if cls is ValidatingWebhookPlugin else p.admit
    with pytest.raises(st.ApiError) as err:
        asyncio.run(run(named("web-1")))
    assert (err.value.code, err.value.reason) == (403, "Forbidden")
    assert err.value.message == (
        "configmaps \"web-1\" is forbidden: expression 'object.metadata.labels.tier == 'web'' resulted in error: "
        "no such key: labels"
    )
    assert clients.calls == []
    phase = "validating" if cls is ValidatingWebhookPlugin else "admit"
    assert p.metrics.condition_errors == {("webhook", "f.hooks.test", "CREATE", phase): 1}
    p, clients = plugin(
        cls, [hook("i.hooks.test", "i", failurePolicy="Ignore", matchConditions=[broken])], {"i": allow}
    )
    run = p.validate if cls is ValidatingWebhookPlugin else p.admit
    asyncio.run(run(named("web-1")))
    assert clients.calls == []
    # A false condition wins over an error, whatever the failure policy says.
    p, clients = plugin(cls, [hook("f.hooks.test", "f", matchConditions=[broken, IS_WEB])], {"f": allow})
    run = p.validate if cls is ValidatingWebhookPlugin else p.admit
    asyncio.run(run(named("db-1")))
    assert clients.calls == []


def test_several_errors_are_reported_together_and_the_first_failing_webhook_decides():
    conds = [
        {"name": "a", "expression": "object.nope == 1"},
        {"name": "b", "expression": "1 / object.data.size() == 1"},
    ]
    specs = [hook("ok.hooks.test", "ok"), hook("f.hooks.test", "f", matchConditions=conds)]
    p, clients = plugin(ValidatingWebhookPlugin, specs, {"ok": allow, "f": allow})
    with pytest.raises(st.ApiError) as err:
        asyncio.run(p.validate(named("web-1")))
    assert err.value.message == (
        "configmaps \"web-1\" is forbidden: [expression 'object.nope == 1' resulted in error: no such key: nope, "
        "expression '1 / object.data.size() == 1' resulted in error: division by zero]"
    )
    assert clients.calls == []  # refused before any webhook is called


def test_the_authorizer_checks_the_requesting_user():
    class FakeAuthorizer:
        def __init__(self):
            self.seen = []

        def authorize(self, attrs):
            self.seen.append(attrs)
            allowed = attrs.user.name == "alice" and attrs.verb == "breakglass"
            return (Decision.ALLOW if allowed else Decision.NO_OPINION), ""

    authorizer = FakeAuthorizer()
    breakglass = {
        "name": "breakglass",
        "expression": "!authorizer.group('orch.test').resource('webhooks').name('v').check('breakglass').allowed()",
    }
    may_update = {"name": "may-update", "expression": "!authorizer.requestResource.check('update').allowed()"}
    specs = [hook("v.hooks.test", "v", matchConditions=[breakglass, may_update])]
    p, clients = plugin(ValidatingWebhookPlugin, specs, {"v": allow}, authorizer)
    asyncio.run(p.validate(named("web-1")))  # alice may break the glass: not sent
    assert clients.calls == []
    assert [(a.verb, a.api_group, a.resource, a.name) for a in authorizer.seen] == [
        ("breakglass", "orch.test", "webhooks", "v")
    ]
    bob = named("web-1")
    bob.user = UserInfo("bob")
    asyncio.run(p.validate(bob))
    assert clients.calls == ["v"]
    last = authorizer.seen[-1]
    assert (last.user.name, last.verb, last.api_group, last.resource, last.namespace, last.name) == (
        "bob",
        "update",
        "",
        "configmaps",
        "ops",
        "web-1",
    )
    # Without an authorizer the decision is an error: the check is denied, not failed.
    p, clients = plugin(ValidatingWebhookPlugin, specs, {"v": allow}, None)
    asyncio.run(p.validate(named("web-1")))
    assert clients.calls == ["v"]


def test_mutating_conditions_see_the_object_as_earlier_webhooks_left_it():
    specs = [
        hook("first.hooks.test", "first"),
        hook("second.hooks.test", "second", matchConditions=[{"name": "x", "expression": "has(object.data.x)"}]),
    ]
    answers = {"first": patch_answer([{"op": "add", "path": "/data/x", "value": "1"}]), "second": allow}
    p, clients = plugin(MutatingWebhookPlugin, specs, answers)
    assert asyncio.run(p.admit(named("c"))) is True
    assert clients.calls == ["first", "second"]
    p, clients = plugin(MutatingWebhookPlugin, specs[1:], answers)
    assert asyncio.run(p.admit(named("c"))) is False
    assert clients.calls == []


@pytest.mark.parametrize("cls", [ValidatingWebhookPlugin, MutatingWebhookPlugin])
def test_dry_run_is_refused_only_by_webhooks_whose_conditions_match(cls):
    specs = [hook("fx.hooks.test", "fx", sideEffects="Some", matchConditions=[IS_WEB])]
    p, clients = plugin(cls, specs, {"fx": allow})
    run = p.validate if cls is ValidatingWebhookPlugin else p.admit
    a = named("db-1")
    a.dry_run = True
    asyncio.run(run(a))
    a = named("web-1")
    a.dry_run = True
    with pytest.raises(st.ApiError) as err:
        asyncio.run(run(a))
    assert err.value.message == 'admission webhook "fx.hooks.test" does not support dry run'
    assert clients.calls == []


def test_conditions_are_compiled_once_per_configuration_generation():
    cache = WatchCache(None, list(REGISTRY.kinds), key_prefix)  # type: ignore[arg-type]
    source = WebhookSource(cache, REGISTRY, "validatingwebhookconfigurations")
    kind = source.kind

    def put(generation: int, expression: str):
        obj = {
            "metadata": {"name": "cfg", "uid": "u1", "generation": generation},
            "webhooks": [hook("v.hooks.test", "v", matchConditions=[{"name": "c", "expression": expression}])],
        }
        key = object_key(kind, "", "cfg")
        c = cache.cache(key_prefix(kind))
        c.items[key] = c.make_entry(key, json.dumps(obj).encode(), generation)
        source._on_cache_event(None, None)  # what the cache's fan-out does on a change

    source.hooks()
    put(1, "true")
    first = source.hooks()[0].conditions
    assert first is not None and [c.expression for c in first.conditions] == ["true"]
    put(1, "true")  # another event (a label, say): the same generation
    assert source.hooks()[0].conditions is first
    put(2, "false")
    second = source.hooks()[0].conditions
    assert second is not first and second is not None and [c.expression for c in second.conditions] == ["false"]


def webhook_errors(conditions) -> list[str]:
    cfg = {"metadata": {"name": "cfg"}, "webhooks": [hook("v.hooks.test", "v", matchConditions=conditions)]}
    return [f"{e.field}: {e.type}: {e.detail}" for e in validate_webhooks(cfg)]


def test_conditions_are_validated_and_compiled_on_write():
    assert (
        webhook_errors([IS_WEB, {"name": "example.com/ok", "expression": "authorizer.requestResource != null"}]) == []
    )
    errs = webhook_errors(
        [
            {"name": "syntax", "expression": "object.metadata.name.startsWith("},
            {"name": "ns", "expression": "namespaceObject.metadata.name == 'x'"},
            {"name": "params", "expression": "params.x == 1"},
            {"name": "not-bool", "expression": "'x' + 'y'"},
            {"name": "costly", "expression": "object.a.all(x, object.b.all(y, x == y))"},
            {"name": "ns", "expression": "true"},
            {"name": "-bad-", "expression": "true"},
            {"name": "", "expression": " "},
        ]
    )
    text = "\n".join(errs)
    p = "webhooks[0].matchConditions"
    assert f"{p}[0].expression: FieldValueInvalid: compilation failed: ERROR: <input>:1:" in text
    assert (
        f"{p}[1].expression: FieldValueInvalid: compilation failed: ERROR: <input>:1:25: undeclared reference to 'namespaceObject"
        in text
    )
    assert (
        f"{p}[2].expression: FieldValueInvalid: compilation failed: ERROR: <input>:1:7: undeclared reference to 'params"
        in text
    )
    assert f"{p}[3].expression: FieldValueInvalid: compilation failed: must evaluate to bool" in text
    assert f"{p}[4].expression: FieldValueForbidden: estimated rule cost exceeds budget" in text
    assert f"{p}[5].name: FieldValueDuplicate" in text
    assert f"{p}[6].name: FieldValueInvalid: name part must consist of alphanumeric characters" in text
    assert f"{p}[7].name: FieldValueRequired" in text and f"{p}[7].expression: FieldValueRequired" in text
    many = [{"name": f"c{i}", "expression": "true"} for i in range(65)]
    assert webhook_errors(many) == [f"{p}: FieldValueTooMany: must have at most 64 items"]
    assert webhook_errors(many[:64]) == []


# --- matchPolicy: Equivalent ------------------------------------------------------------

WIDGETS = "stable.example.com"
WIDGET_V1 = KindInfo(WIDGETS, "v1", "widgets", "Widget", True, custom=True, custom_storage_version="v1")
WIDGET_V2 = KindInfo(WIDGETS, "v2", "widgets", "Widget", True, custom=True, custom_storage_version="v1")


def widget_registry() -> Registry:
    registry = REGISTRY.copy()
    registry.replace(add=(WIDGET_V1, WIDGET_V2))
    return registry


def test_equivalent_resources_are_other_served_versions_and_alias_groups():
    registry = widget_registry()
    eq = Equivalence(registry, equivalentresources.converters())

    def found(group, version, resource, sub=""):
        return [(e.group, e.version) for e in eq.of(group, version, resource, sub)]

    assert found(WIDGETS, "v2", "widgets") == [(WIDGETS, "v1")]
    assert found("autoscaling", "v2", "horizontalpodautoscalers") == [("autoscaling", "v1")]
    assert found("autoscaling", "v2", "horizontalpodautoscalers", "status") == []  # v1 serves no status here
    assert found(names.DISCOVERY_GROUP, "v1", "endpointslices") == [(names.UPSTREAM_ENDPOINTSLICE_GROUP, "v1")]
    assert found("", "v1", "configmaps") == []
    registry.replace(remove=(WIDGET_V1,))  # a definition that stopped serving v1
    assert found(WIDGETS, "v2", "widgets") == []


def test_hpa_v1_view_converts_back_to_the_v2_object():
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h", "annotations": {"a": "b"}},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "d", "apiVersion": "apps/v1"},
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}},
                },
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                },
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
        },
        "status": {
            "currentReplicas": 2,
            "desiredReplicas": 3,
            "conditions": [{"type": "AbleToScale", "status": "True"}],
        },
    }
    v1 = autoscaling_v1.to_v1(hpa)
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 50
    assert autoscaling_v1.view_to_v2(v1) == hpa


def equivalence_plugin(cls, rule_version: str, answers: dict, match_policy: str = "Equivalent"):
    """A plugin over a real WebhookSource (widgets served as v1 and v2) with one webhook
    whose rule names widgets in RULE_VERSION."""
    registry = widget_registry()
    cache = WatchCache(None, list(registry.kinds), key_prefix)  # type: ignore[arg-type]
    source = WebhookSource(cache, registry, "mutatingwebhookconfigurations", Equivalence(registry))
    spec = hook(
        "w.hooks.test",
        "w",
        matchPolicy=match_policy,
        rules=[rule(apiGroups=[WIDGETS], apiVersions=[rule_version], resources=["widgets"])],
    )
    key = object_key(source.kind, "", "cfg")
    c = cache.cache(key_prefix(source.kind))
    c.items[key] = c.make_entry(
        key, json.dumps({"metadata": {"name": "cfg", "uid": "u"}, "webhooks": [spec]}).encode(), 1
    )
    clients = ScriptedClients(answers)
    return cls(source, None, clients, WebhookMetrics()), clients


def widget_attrs() -> Attributes:
    obj = {"apiVersion": f"{WIDGETS}/v2", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}}
    return Attributes("CREATE", WIDGET_V2, "ns", "w1", "", obj, None, ADMIN, False)


def test_a_webhook_naming_another_version_gets_the_object_in_it_and_its_patch_comes_back():
    seen: list[dict] = []

    def answer(req):
        seen.append(req)
        return patch_answer(
            [{"op": "add", "path": "/metadata/labels", "value": {"seen": req["object"]["apiVersion"]}}]
        )(req)

    p, clients = equivalence_plugin(MutatingWebhookPlugin, "v1", {"w": answer})
    a = widget_attrs()
    assert asyncio.run(p.admit(a)) is True
    (req,) = seen
    assert req["kind"] == {"group": WIDGETS, "version": "v1", "kind": "Widget"}
    assert req["resource"] == {"group": WIDGETS, "version": "v1", "resource": "widgets"}
    assert req["requestKind"] == {"group": WIDGETS, "version": "v2", "kind": "Widget"}
    assert req["requestResource"] == {"group": WIDGETS, "version": "v2", "resource": "widgets"}
    assert req["object"]["apiVersion"] == f"{WIDGETS}/v1"
    # The mutation, made to the v1 object, lands on the request's v2 object.
    assert a.obj == {
        "apiVersion": f"{WIDGETS}/v2",
        "kind": "Widget",
        "metadata": {"name": "w1", "labels": {"seen": f"{WIDGETS}/v1"}},
        "spec": {"size": 3},
    }
    # Exact: the rule names v1 only, the request is v2: not called.
    p, clients = equivalence_plugin(ValidatingWebhookPlugin, "v1", {"w": allow}, match_policy="Exact")
    asyncio.run(p.validate(widget_attrs()))
    assert clients.calls == []
    # A rule naming the request's own version is an exact match: nothing converted.
    seen.clear()
    p, clients = equivalence_plugin(ValidatingWebhookPlugin, "v2", {"w": lambda req: seen.append(req) or allow(req)})
    asyncio.run(p.validate(widget_attrs()))
    assert seen[0]["kind"] == seen[0]["requestKind"] == {"group": WIDGETS, "version": "v2", "kind": "Widget"}
