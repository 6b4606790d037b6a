"""Authentication for an organisation, end to end against a real orch-apiserver: OpenID
Connect ID tokens (with kubectl), a token review webhook and a front proxy.

The identity provider (tests/identity_provider.py) is an HTTPS server on loopback
with a CA the test makes; it is both the OIDC issuer and the webhook backend. The
front proxy is played by a client certificate from a CA of its own."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import time

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec

from apiserver_min.api import names
from apiserver_min.pki import cert_pem, key_pem, make_ca, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, KUBECTL, ApiServerProcess
from tests.components import free_port
from tests.identity_provider import IdentityProvider

WHOAMI = f"/apis/{names.AUTHENTICATION_GROUP}/v1/selfsubjectreviews"
CLIENT_ID = "orch"


class Org:
    def __init__(self, proc: ApiServerProcess, idp: IdentityProvider, proxy_ctx, stranger_ctx):
        self.proc, self.idp, self.proxy_ctx, self.stranger_ctx = proc, idp, proxy_ctx, stranger_ctx

    def whoami(self, token: str | None = None, headers: dict | None = None, ctx: ssl.SSLContext | None = None):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if ctx is None:
            return self.proc.json("POST", WHOAMI, {}, h, client_cert=False)
        conn = http.client.HTTPSConnection(self.proc.host, self.proc.port, timeout=10, context=ctx)
        conn.request("POST", WHOAMI, body=b"{}", headers={"Content-Type": "application/json", **h})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, json.loads(data)


def _client_ctx(proc: ApiServerProcess, d, name: str, cert, key) -> ssl.SSLContext:
    (d / f"{name}.crt").write_bytes(cert_pem(cert))
    (d / f"{name}.key").write_bytes(key_pem(key))
    ctx = ssl.create_default_context(cafile=str(proc.ca_cert))
    ctx.load_cert_chain(str(d / f"{name}.crt"), str(d / f"{name}.key"))
    return ctx


@pytest.fixture(scope="module")
def org(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    d = tmp_path_factory.mktemp("authn-org")
    proxy_ca, proxy_ca_key = make_ca("front-proxy-ca")
    (d / "proxy-ca.crt").write_bytes(cert_pem(proxy_ca))
    with IdentityProvider() as idp:
        idp.add_key("ps-1", "PS256")
        proc = ApiServerProcess(
            d / "data",
            free_port(),
            extra_args=[
                "--oidc-issuer-url",
                idp.issuer,
                "--oidc-client-id",
                CLIENT_ID,
                "--oidc-username-prefix",
                "oidc:",
                "--oidc-groups-claim",
                "groups",
                "--oidc-groups-prefix",
                "oidc:",
                "--oidc-ca-file",
                idp.ca_file,
                "--oidc-signing-algs",
                "RS256,PS256",
                "--authentication-token-webhook-config-file",
                str(idp.webhook_orchconfig(d / "webhook.orchconfig")),
                "--authentication-token-webhook-cache-ttl",
                "30s",
                "--requestheader-client-ca-file",
                str(d / "proxy-ca.crt"),
                "--requestheader-allowed-names",
                "front-proxy",
                "--requestheader-username-headers",
                "X-Remote-User",
                "--requestheader-group-headers",
                "X-Remote-Group",
                "--requestheader-extra-headers-prefix",
                "X-Remote-Extra-",
            ],
        )
        with proc:
            k = ec.generate_private_key(ec.SECP256R1())
            proxy_ctx = _client_ctx(
                proc, d, "proxy", sign_leaf(proxy_ca, proxy_ca_key, k.public_key(), "front-proxy", client=True), k
            )
            k2 = ec.generate_private_key(ec.SECP256R1())
            stranger = _client_ctx(
                proc, d, "other", sign_leaf(proxy_ca, proxy_ca_key, k2.public_key(), "someone", client=True), k2
            )
            yield Org(proc, idp, proxy_ctx, stranger)


def user_of(doc: dict) -> dict:
    assert doc["kind"] == "SelfSubjectReview", doc
    return doc["status"]["userInfo"]


def assert_401(status: int, doc) -> None:
    assert status == 401, doc
    assert doc["message"] == "Unauthorized" and doc["reason"] == "Unauthorized", doc


# --- OpenID Connect ------------------------------------------------------------------------------


def test_oidc_token_with_kubectl(org, tmp_path):
    if not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    token = org.idp.mint(org.idp.claims("jane", groups=["devs", "ops"]))
    admin = yaml.safe_load(org.proc.kubeconfig.read_text())
    admin["users"] = [{"name": "jane", "user": {"token": token}}]
    for c in admin["contexts"]:
        c["context"]["user"] = "jane"
    cfg = tmp_path / "jane.orchconfig"
    cfg.write_text(yaml.safe_dump(admin))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["HOME"] = str(tmp_path)
    r = subprocess.run(
        [KUBECTL, "--kubeconfig", str(cfg), "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["status"]["userInfo"]
    assert info["username"] == "oidc:jane"
    assert info["groups"] == ["oidc:devs", "oidc:ops", "system:authenticated"]


def test_oidc_keys_fetched_at_start_not_per_request(org):
    before = org.idp.requests["/keys"]
    assert before >= 1  # fetched when the server started
    token = org.idp.mint(org.idp.claims("kim", groups="solo"))
    for _ in range(5):
        status, doc = org.whoami(token)
        assert status == 201, doc
    assert user_of(doc)["username"] == "oidc:kim" and user_of(doc)["groups"][0] == "oidc:solo"
    assert org.idp.requests["/keys"] == before


def test_oidc_other_algorithms_and_rotated_keys(org):
    status, doc = org.whoami(org.idp.mint(org.idp.claims("pat"), kid="ps-1"))
    assert status == 201 and user_of(doc)["username"] == "oidc:pat", doc
    # A key published after start is found by a refresh of the set when a token names it.
    org.idp.add_key("rsa-2")
    status, doc = org.whoami(org.idp.mint(org.idp.claims("rot"), kid="rsa-2"))
    assert status == 201 and user_of(doc)["username"] == "oidc:rot", doc


@pytest.mark.parametrize(
    "case",
    ["other-issuer", "wrong-audience", "expired", "not-yet", "es256-not-allowed", "none", "forged", "unknown-kid"],
)
def test_oidc_bad_tokens_are_401(org, case):
    idp = org.idp
    claims = idp.claims("mallory")
    if case == "other-issuer":
        token = idp.mint({**claims, "iss": "https://elsewhere.test"})
    elif case == "wrong-audience":
        token = idp.mint({**claims, "aud": "someone-else"})
    elif case == "expired":
        token = idp.mint({**claims, "iat": int(time.time()) - 7200, "exp": int(time.time()) - 3600})
    elif case == "not-yet":
        token = idp.mint({**claims, "nbf": int(time.time()) + 3600})
    elif case == "es256-not-allowed":
        token = idp.mint(claims, kid="ec-1")
    elif case == "none":
        token = jwt.encode(claims, None, algorithm="none")
    elif case == "forged":
        idp.add_key("forger", publish=False)
        # rsa-1's header on a payload signed by a key the issuer never published.
        signed_elsewhere = idp.mint(claims, kid="forger").split(".")
        token = ".".join([idp.mint(claims, kid="rsa-1").split(".")[0], *signed_elsewhere[1:]])
    else:
        idp.add_key(f"hidden-{time.time_ns()}", publish=False)
        token = idp.mint(claims, kid=list(idp.keys)[-1])
    assert_401(*org.whoami(token))  # the body says no more than "Unauthorized"
    assert "unable to authenticate" in org.proc.log_path.read_text(errors="replace")


# --- webhook -------------------------------------------------------------------------------------


def test_webhook_maps_a_token_to_a_user(org):
    org.idp.webhook_users["opaque-token-1"] = {
        "username": "hook-user",
        "uid": "u-42",
        "groups": ["hookers"],
        "extra": {"team": ["blue"]},
    }
    calls = len(org.idp.reviews)
    status, doc = org.whoami("opaque-token-1")
    assert status == 201, doc
    info = user_of(doc)
    assert info["username"] == "hook-user" and info["uid"] == "u-42"
    assert info["groups"] == ["hookers", "system:authenticated"] and info["extra"] == {"team": ["blue"]}
    review = org.idp.reviews[calls]
    assert review["apiVersion"] == f"{names.AUTHENTICATION_GROUP}/v1" and review["kind"] == "TokenReview"
    assert review["spec"]["token"] == "opaque-token-1" and review["spec"]["audiences"]
    # Cached for the TTL: the backend is not asked again.
    assert org.whoami("opaque-token-1")[0] == 201
    assert len(org.idp.reviews) == calls + 1


def test_webhook_refusals_and_failures_are_401(org):
    assert_401(*org.whoami("nobody-knows-this"))
    org.idp.webhook_users["other-audience"] = {"username": "x", "audiences": ["not-this-api"]}
    assert_401(*org.whoami("other-audience"))
    org.idp.webhook_fail = True
    try:
        org.idp.webhook_users["broken-backend"] = {"username": "y"}
        calls = len(org.idp.reviews)
        assert_401(*org.whoami("broken-backend"))
        assert len(org.idp.reviews) - calls == 5  # retried with backoff, then given up
    finally:
        org.idp.webhook_fail = False
    assert "token webhook" in org.proc.log_path.read_text(errors="replace")


# --- front proxy ---------------------------------------------------------------------------------

PROXY_HEADERS = {
    "X-Remote-User": "proxied-alice",
    "X-Remote-Group": "proxied-devs",
    "X-Remote-Extra-Scopes": "read",
    "X-Remote-Extra-Acme.com%2Fproject": "p1",
}


def test_front_proxy_user_from_headers(org):
    status, doc = org.whoami(headers=PROXY_HEADERS, ctx=org.proxy_ctx)
    assert status == 201, doc
    info = user_of(doc)
    assert info["username"] == "proxied-alice"
    assert info["groups"] == ["proxied-devs", "system:authenticated"]
    assert info["extra"] == {"scopes": ["read"], "acme.com/project": ["p1"]}


def test_front_proxy_headers_ignored_without_its_certificate(org):
    # No client certificate: the headers are not believed (anonymous).
    status, doc = org.whoami(headers=PROXY_HEADERS)
    assert status != 201 or user_of(doc)["username"] == names.USER_ANONYMOUS, doc
    # A bearer token plus the headers: the token's user, the headers dropped.
    token = org.idp.mint(org.idp.claims("bea"))
    status, doc = org.whoami(token, headers=PROXY_HEADERS)
    assert status == 201 and user_of(doc)["username"] == "oidc:bea" and not user_of(doc).get("extra"), doc
    # The admin's certificate (the cluster CA, not the proxy's): the admin.
    status, doc = org.proc.json("POST", WHOAMI, {}, PROXY_HEADERS)
    assert status == 201 and user_of(doc)["username"] == names.ADMIN_USER, doc
    # A certificate of the proxy CA whose name is not allowed: refused.
    assert_401(*org.whoami(headers=PROXY_HEADERS, ctx=org.stranger_ctx))


def test_extension_authentication_configmap_published(org):
    _, cm = org.proc.json(
        "GET", f"/api/v1/namespaces/{names.NS_SYSTEM}/configmaps/{names.EXTENSION_AUTHENTICATION_CONFIGMAP}", expect=200
    )
    data = cm["data"]
    assert data["client-ca-file"] == org.proc.ca_cert.read_text()
    assert "BEGIN CERTIFICATE" in data["requestheader-client-ca-file"]
    assert json.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
    assert json.loads(data["requestheader-group-headers"]) == ["X-Remote-Group"]
    assert json.loads(data["requestheader-extra-headers-prefix"]) == ["X-Remote-Extra-"]
    assert json.loads(data["requestheader-allowed-names"]) == ["front-proxy"]
