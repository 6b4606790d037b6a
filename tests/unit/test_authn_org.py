"""Units of the organisation's authenticators: OpenID Connect claim rules, the token
review webhook's configuration and answers, the front proxy's headers, and their flags."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import jwt
import pytest
from aiohttp.test_utils import make_mocked_request
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from multidict import CIMultiDict

from apiserver_min.api.user import UserInfo
from apiserver_min.authn import oidc, requestheader, webhook
from apiserver_min.authn.authenticator import AuthConfigError, TokenResult, Unauthorized
from apiserver_min.options import OptionsError, parse
from apiserver_min.pki import cert_pem, make_ca, sign_leaf

ISSUER = "https://idp.test"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk_of(key, alg: str, kid: str) -> dict:
    d = json.loads(jwt.get_algorithm_by_name(alg).to_jwk(key.public_key()))
    return {**d, "kid": kid, "use": "sig"}


class FixedKeys(oidc.ProviderKeys):
    """The provider's keys without a network; refresh() counts and reloads `published`."""

    def __init__(self, published: list[dict]):
        super().__init__(ISSUER)
        self.published = published
        self.refreshes = 0

    async def _fetch(self) -> None:
        self.refreshes += 1
        self.keys = oidc.parse_key_set({"keys": self.published})


def make(published=None, clock=time.time, **cfg) -> tuple[oidc.OIDCAuthenticator, FixedKeys]:
    keys = FixedKeys(published if published is not None else [jwk_of(RSA_KEY, "RS256", "k1")])
    config = oidc.OIDCConfig(issuer_url=ISSUER, client_id="orch", **cfg)
    return oidc.OIDCAuthenticator(config, keys, clock=clock), keys


def token(key=RSA_KEY, alg="RS256", kid="k1", **claims) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": "orch", "sub": "jane", "iat": now, "exp": now + 300, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg, headers={"kid": kid})


async def user(a: oidc.OIDCAuthenticator, t: str) -> UserInfo:
    res = await a.authenticate_token(t, ("orch",))
    assert res is not None
    return res.user


@pytest.mark.parametrize(
    "claim,prefix,want",
    [
        ("sub", None, f"{ISSUER}#jane"),
        ("sub", "-", "jane"),
        ("sub", "oidc:", "oidc:jane"),
        ("email", None, "jane@example.org"),
        ("email", "mail:", "mail:jane@example.org"),
    ],
)
async def test_username_prefix_defaults(claim, prefix, want):
    a, _ = make(username_claim=claim, username_prefix=prefix)
    assert (await user(a, token(email="jane@example.org"))).name == want


async def test_email_needs_email_verified_true_when_present():
    a, _ = make(username_claim="email", username_prefix="-")
    assert (await user(a, token(email="j@x.org", email_verified=True))).name == "j@x.org"
    assert (await user(a, token(email="k@x.org"))).name == "k@x.org"  # absent: upstream accepts
    with pytest.raises(Unauthorized, match="email not verified"):
        await a.authenticate_token(token(email="l@x.org", email_verified=False), ("orch",))
    with pytest.raises(Unauthorized, match="not a boolean"):
        await a.authenticate_token(token(email="m@x.org", email_verified="true"), ("orch",))


async def test_groups_string_or_list_with_prefix_and_bad_types():
    a, _ = make(groups_claim="groups", groups_prefix="g:", username_prefix="-")
    assert (await user(a, token(groups=["a", "b"]))).groups == ("g:a", "g:b")
    assert (await user(a, token(sub="s", groups="solo"))).groups == ("g:solo",)
    assert (await user(a, token(sub="t"))).groups == ()
    with pytest.raises(Unauthorized, match="neither a string nor a list"):
        await a.authenticate_token(token(sub="u", groups=[1, 2]), ("orch",))


async def test_required_claims():
    a, _ = make(required_claims=(("tenant", "blue"),))
    assert (await user(a, token(tenant="blue"))).name.endswith("#jane")
    with pytest.raises(Unauthorized, match="required claim tenant not present"):
        await a.authenticate_token(token(sub="x"), ("orch",))
    with pytest.raises(Unauthorized, match="required value"):
        await a.authenticate_token(token(sub="y", tenant="red"), ("orch",))


async def test_other_issuers_and_non_jwts_are_not_ours():
    a, _ = make()
    assert await a.authenticate_token(token(iss="https://elsewhere.test"), ("orch",)) is None
    assert await a.authenticate_token("plain-static-token", ("orch",)) is None


@pytest.mark.parametrize(
    "claims,match",
    [
        (lambda now: {"aud": "other"}, "audience"),
        (lambda now: {"aud": ["a", "b"]}, "audience"),
        (lambda now: {"exp": now - 120}, "has expired"),
        (lambda now: {"nbf": now + 600}, "not valid yet"),
        (lambda now: {"iat": now + 600}, "not valid yet"),
        (lambda now: {"exp": None}, "no exp claim"),
        (lambda now: {"sub": None}, "'sub' is missing"),
    ],
)
async def test_bad_claims(claims, match):
    # Times relative to when the test runs, not to when the suite was collected.
    a, _ = make()
    with pytest.raises(Unauthorized, match=match):
        await a.authenticate_token(token(**claims(int(time.time()))), ("orch",))


async def test_algorithms_only_from_the_allowed_list():
    published = [jwk_of(RSA_KEY, "RS256", "k1"), jwk_of(EC_KEY, "ES256", "e1")]
    a, _ = make(published)
    with pytest.raises(Unauthorized, match="'ES256', not one of the accepted"):
        await a.authenticate_token(token(EC_KEY, "ES256", "e1"), ("orch",))
    with pytest.raises(Unauthorized, match="'none'"):
        await a.authenticate_token(jwt.encode({"iss": ISSUER, "aud": "orch", "sub": "x"}, None, "none"), ("orch",))
    with pytest.raises(Unauthorized, match="'PS256'"):
        await a.authenticate_token(token(alg="PS256"), ("orch",))
    b, _ = make(published, signing_algs=("ES256", "PS256"))
    assert (await user(b, token(EC_KEY, "ES256", "e1"))).name.endswith("#jane")
    assert (await user(b, token(alg="PS256"))).name.endswith("#jane")


async def test_forged_signature_refused():
    a, _ = make()
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(Unauthorized, match="signature does not verify"):
        await a.authenticate_token(token(other), ("orch",))


async def test_unknown_kid_refreshes_the_set_rate_limited():
    a, keys = make()
    await a.start()
    assert keys.refreshes == 1
    new = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys.published.append(jwk_of(new, "RS256", "k2"))
    assert (await user(a, token(new, kid="k2"))).name.endswith("#jane")
    assert keys.refreshes == 2
    # Another unknown kid right after: no new fetch (rate limit), refused.
    with pytest.raises(Unauthorized, match="no key with id 'k3'"):
        await a.authenticate_token(token(new, kid="k3"), ("orch",))
    assert keys.refreshes == 2


async def test_verified_tokens_cached_until_expiry():
    now = [time.time()]
    a, _ = make(clock=lambda: now[0])
    t = token(exp=int(now[0]) + 100)
    res = await a.authenticate_token(t, ("orch",))
    assert res is not None and res.still_valid is not None and res.still_valid()
    await a.authenticate_token(t, ("orch",))
    assert a.signature_checks == 1
    now[0] += 100 + oidc.LEEWAY_SECONDS + 1
    assert not res.still_valid()
    with pytest.raises(Unauthorized, match="has expired"):
        await a.authenticate_token(t, ("orch",))


def test_key_set_parsing():
    keys = oidc.parse_key_set(
        {
            "keys": [
                jwk_of(RSA_KEY, "RS256", "a"),
                {**jwk_of(EC_KEY, "ES256", "enc"), "use": "enc"},
                {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
                {"kty": "weird"},
            ]
        }
    )
    assert list(keys) == ["a"]
    with pytest.raises(ValueError, match="no usable"):
        oidc.parse_key_set({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})
    with pytest.raises(ValueError, match="keys list"):
        oidc.parse_key_set([])


# --- webhook --------------------------------------------------------------------------------------


def test_webhook_orchconfig(tmp_path):
    ca, _ = make_ca("x")
    (tmp_path / "ca.crt").write_bytes(cert_pem(ca))
    cfg = {
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:9/review", "certificate-authority": "ca.crt"}}
        ],
        "users": [{"name": "u", "user": {"token": "secret"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "w.yaml").write_text(json.dumps(cfg))
    b = webhook.load_backend(str(tmp_path / "w.yaml"))
    assert b.url == "https://127.0.0.1:9/review" and b.token == "secret" and b.ca_pem == cert_pem(ca)
    cfg["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9/"
    (tmp_path / "w.yaml").write_text(json.dumps(cfg))
    with pytest.raises(AuthConfigError, match="HTTPS"):
        webhook.load_backend(str(tmp_path / "w.yaml"))
    with pytest.raises(AuthConfigError, match="v1 or v1beta1"):
        webhook.WebhookTokenAuthenticator(b, "v2")


def test_webhook_user_from_status():
    u = webhook.user_from_status({"user": {"username": "a", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}}})
    assert u == UserInfo("a", "1", ("g",), {"k": ("v",)})
    with pytest.raises(ValueError, match="groups"):
        webhook.user_from_status({"user": {"username": "a", "groups": "g"}})


async def test_webhook_caches_both_answers_not_failures():
    now = [0.0]
    w = webhook.WebhookTokenAuthenticator(
        webhook.Backend("https://127.0.0.1:9/"), cache_ttl=60, monotonic=lambda: now[0]
    )
    answers = iter([None, Unauthorized("down"), None])

    async def review(token, audiences):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    w._review = review  # type: ignore[method-assign]
    assert await w.authenticate_token("t", ("api",)) is None
    assert await w.authenticate_token("t", ("api",)) is None  # cached "no"
    with pytest.raises(Unauthorized):
        await w.authenticate_token("u", ("api",))  # failure, not cached
    assert await w.authenticate_token("u", ("api",)) is None
    now[0] = 61
    answers = iter([TokenResultFor("t")])
    res = await w.authenticate_token("t", ("api",))  # the cached answer expired: asked again
    assert res is not None and res.user.name == "t"


def TokenResultFor(name: str) -> TokenResult:
    return TokenResult(UserInfo(name), ("api",))


# --- front proxy ----------------------------------------------------------------------------------

CONFIG = requestheader.RequestHeaderConfig(
    client_ca_file="unused",
    allowed_names=("front-proxy",),
    username_headers=("X-Remote-User",),
    group_headers=("X-Remote-Group",),
    extra_headers_prefixes=("X-Remote-Extra-",),
)


class FakeVerifier:
    def __init__(self, cert):
        self.cert = cert

    def verify(self, der, chain):
        return SimpleNamespace(certificate=self.cert)


def proxy(cn: str, with_cert: bool = True) -> requestheader.RequestHeaderAuthenticator:
    ca, ca_key = make_ca("p")
    k = ec.generate_private_key(ec.SECP256R1())
    cert = sign_leaf(ca, ca_key, k.public_key(), cn, client=True)
    return requestheader.RequestHeaderAuthenticator(
        CONFIG, FakeVerifier(cert), peer=lambda r: (b"der", ()) if with_cert else None
    )


HEADERS = [
    ("X-Remote-User", "alice"),
    ("X-Remote-User", "ignored-second"),
    ("X-Remote-Group", "a"),
    ("X-Remote-Group", "b"),
    ("X-Remote-Extra-Scopes", "r"),
    ("x-remote-extra-scopes", "w"),
    ("X-Remote-Extra-Acme.com%2Fp", "1"),
    ("Accept", "application/json"),
]


def request(headers=HEADERS):
    return make_mocked_request("GET", "/api", headers=CIMultiDict(headers))


async def test_proxy_user_groups_and_extra():
    u = await proxy("front-proxy").authenticate(request())
    assert u is not None and u.name == "alice" and u.groups == ("a", "b")
    assert u.extra == {"scopes": ("r", "w"), "acme.com/p": ("1",)}


async def test_proxy_needs_certificate_and_allowed_name():
    assert await proxy("front-proxy", with_cert=False).authenticate(request()) is None
    with pytest.raises(Unauthorized, match="allowed-names"):
        await proxy("somebody").authenticate(request())
    assert await proxy("front-proxy").authenticate(request([("Accept", "x")])) is None


def test_proxy_headers_stripped():
    p = proxy("front-proxy")
    r = request()
    stripped = p.strip(r)
    assert list(stripped.headers.items()) == [("Accept", "application/json")]
    plain = request([("Accept", "x")])
    assert p.strip(plain) is plain


# --- flags ----------------------------------------------------------------------------------------


def test_flags(tmp_path):
    (tmp_path / "ca").write_text("x")
    o = parse(
        [
            "--oidc-issuer-url=https://idp.test",
            "--oidc-client-id=orch",
            "--oidc-required-claim=a=1,b=2",
            "--oidc-required-claim=c=3",
            "--oidc-signing-algs=RS256,ES256",
            f"--requestheader-client-ca-file={tmp_path / 'ca'}",
            "--requestheader-username-headers=X-Remote-User",
            f"--authentication-token-webhook-config-file={tmp_path / 'ca'}",
            "--authentication-token-webhook-cache-ttl=30s",
        ]
    )
    assert o.oidc_required_claims == (("a", "1"), ("b", "2"), ("c", "3"))
    assert o.oidc_signing_algs == ("RS256", "ES256") and o.oidc_username_claim == "sub"
    assert o.authentication_token_webhook_cache_ttl == 30.0 and o.authentication_token_webhook_version == "v1"
    assert parse([]).authentication_token_webhook_cache_ttl == 120.0 and parse([]).oidc_signing_algs == ("RS256",)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--oidc-issuer-url=http://idp.test", "--oidc-client-id=x"], "must be an https:// URL"),
        (["--oidc-issuer-url=https://idp.test"], "--oidc-client-id must be given"),
        (["--oidc-client-id=x"], "needs --oidc-issuer-url"),
        (["--oidc-issuer-url=https://i", "--oidc-client-id=x", "--oidc-signing-algs=none"], "--oidc-signing-algs"),
        (["--oidc-issuer-url=https://i", "--oidc-client-id=x", "--oidc-signing-algs=HS256"], "--oidc-signing-algs"),
        (["--oidc-issuer-url=https://i", "--oidc-client-id=x", "--oidc-required-claim=novalue"], "key=value"),
        (["--requestheader-username-headers=X-Remote-User"], "needs --requestheader-client-ca-file"),
        (
            [f"--authentication-token-webhook-config-file={__file__}", "--authentication-token-webhook-version=v2"],
            "v1 or v1beta1",
        ),
        (["--authentication-token-webhook-cache-ttl=1m"], "needs --authentication-token-webhook-config-file"),
        (["--oidc-groups-prefix=g:"], "needs --oidc-issuer-url"),
        (["--oidc-issuer-url=https://i", "--oidc-client-id=x", "--oidc-groups-prefix=g:"], "needs --oidc-groups-claim"),
        (["--authentication-token-webhook-config-file=/nonexistent"], "no such file"),
    ],
)
def test_bad_flags(argv, message):
    with pytest.raises(OptionsError, match=message):
        parse(argv)
