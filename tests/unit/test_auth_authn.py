"""Authentication pieces without a server: JWT framing, keys, the token file, bootstrap
tokens, service-account tokens, the request chain and the pod mutation of the
ServiceAccount admission plugin."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from apiserver_min.admission.plugins.serviceaccount import (
    PROJECTED_TOKEN_EXPIRATION_SECONDS,
    mount_service_account_token,
    should_automount,
)
from apiserver_min.api import names
from apiserver_min.api.tlsverify import ClientCertificateVerifier
from apiserver_min.api.user import UserInfo
from apiserver_min.authn import jwt
from apiserver_min.authn.authenticator import ANONYMOUS, AuthConfigError, Unauthorized, with_authenticated_group
from apiserver_min.authn.bearer import AudienceAgnostic, BearerTokenAuthenticator, bearer_token
from apiserver_min.authn.serviceaccount import ServiceAccountTokenAuthenticator, TokenIssuer, load_keys, parse_claims
from apiserver_min.authn.tokens import BootstrapTokens, StaticTokens, bootstrap_groups, parse_token_csv
from apiserver_min.authn.union import AuthenticationChain
from apiserver_min.authn.x509 import X509Authenticator, user_from_certificate
from apiserver_min.options import parse
from apiserver_min.pki import cert_pem, make_ca, new_key, sign_leaf

AUD = ("https://orch.default.svc.cluster.local",)
ISS = "https://issuer.example"
NOW = 1_800_000_000.0


def pem_private(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem_public(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key():
    return ec.generate_private_key(ec.SECP256R1())


# --- JWT ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "curve, alg", [(None, "RS256"), (ec.SECP256R1(), "ES256"), (ec.SECP384R1(), "ES384"), (ec.SECP521R1(), "ES512")]
)
def test_jwt_round_trip_for_each_key_type(rsa_key, curve, alg):
    key = rsa_key if curve is None else ec.generate_private_key(curve)
    token = jwt.encode({"sub": "x", "n": 1}, key)
    header, claims = jwt.verify(token, [key.public_key()])
    assert header == {"alg": alg, "kid": jwt.key_id(key)}
    assert claims == {"sub": "x", "n": 1}
    assert jwt.decode_unverified(token)[1] == claims


def test_jwt_rejects_tampering_wrong_keys_and_bad_shapes(rsa_key, ec_key):
    token = jwt.encode({"sub": "x"}, rsa_key)
    h, p, s = token.split(".")
    forged_payload = jwt.b64url_encode(json.dumps({"sub": "root"}).encode())
    with pytest.raises(jwt.JwtError, match="does not verify"):
        jwt.verify(f"{h}.{forged_payload}.{s}", [rsa_key.public_key()])
    with pytest.raises(jwt.JwtError, match="does not verify"):
        jwt.verify(token, [ec_key.public_key(), rsa.generate_private_key(65537, 2048).public_key()])
    none_header = jwt.b64url_encode(b'{"alg":"none"}')
    with pytest.raises(jwt.JwtError, match="unsupported signing algorithm"):
        jwt.verify(f"{none_header}.{p}.", [rsa_key.public_key()])
    hs_header = jwt.b64url_encode(b'{"alg":"HS256"}')
    with pytest.raises(jwt.JwtError, match="unsupported"):
        jwt.verify(f"{hs_header}.{p}.{s}", [rsa_key.public_key()])
    for bad in ("abc", "a.b", "a.b.c.d", "!!.e30.x", f"{jwt.b64url_encode(b'[1]')}.{p}.{s}"):
        with pytest.raises(jwt.JwtError):
            jwt.verify(bad, [rsa_key.public_key()])
    # An ES256 signature never verifies as another curve's, nor with an RSA key.
    es = jwt.encode({"a": 1}, ec_key)
    with pytest.raises(jwt.JwtError):
        jwt.verify(es, [rsa_key.public_key(), ec.generate_private_key(ec.SECP384R1()).public_key()])


def test_key_files_load_public_and_private_blocks_and_name_the_file(tmp_path, rsa_key, ec_key):
    mixed = pem_public(rsa_key) + b"\n" + pem_private(ec_key)
    keys = jwt.load_public_keys(mixed, "keys.pem")
    assert [jwt.key_id(k) for k in keys] == [jwt.key_id(rsa_key), jwt.key_id(ec_key)]
    pkcs1 = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    assert jwt.key_id(jwt.load_private_key(pkcs1, "k")) == jwt.key_id(rsa_key)
    with pytest.raises(jwt.KeyFileError, match="nothing.pem: no RSA or ECDSA"):
        jwt.load_public_keys(b"hello", "nothing.pem")
    with pytest.raises(jwt.KeyFileError, match="ed.pem: Ed25519PrivateKey keys are not supported"):
        jwt.load_public_keys(pem_private(ed25519.Ed25519PrivateKey.generate()), "ed.pem")
    with pytest.raises(jwt.KeyFileError, match="two.pem: holds 2 private keys"):
        jwt.load_private_key(pem_private(rsa_key) + pem_private(ec_key), "two.pem")
    with pytest.raises(jwt.KeyFileError, match="pub.pem: no RSA or ECDSA private key"):
        jwt.load_private_key(pem_public(rsa_key), "pub.pem")
    broken = b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    with pytest.raises(jwt.KeyFileError, match="broken.pem: cannot parse the PUBLIC KEY block"):
        jwt.load_public_keys(broken, "broken.pem")


def test_generated_signing_key_is_private_and_kept(tmp_path):
    opts = parse(["--data-dir", str(tmp_path / "d")])
    keys = load_keys(opts)
    path = tmp_path / "d" / "pki" / "sa.key"
    assert keys.generated == str(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o700
    again = load_keys(opts)
    assert again.generated == ""
    assert jwt.key_id(again.signing_key) == jwt.key_id(keys.signing_key)
    assert [jwt.key_id(k) for k in again.verification_keys] == [jwt.key_id(keys.signing_key)]


def test_explicit_key_flags(tmp_path, rsa_key, ec_key):
    signing, verify = tmp_path / "sign.pem", tmp_path / "verify.pem"
    signing.write_bytes(pem_private(ec_key))
    verify.write_bytes(pem_public(rsa_key))
    keys = load_keys(
        parse(
            [
                "--data-dir",
                str(tmp_path / "d"),
                "--service-account-signing-key-file",
                str(signing),
                "--service-account-key-file",
                str(verify),
            ]
        )
    )
    assert jwt.key_id(keys.signing_key) == jwt.key_id(ec_key)
    assert {jwt.key_id(k) for k in keys.verification_keys} == {jwt.key_id(ec_key), jwt.key_id(rsa_key)}
    assert not (tmp_path / "d" / "pki" / "sa.key").exists()
    # Verification keys only: nothing signs, TokenRequest is off.
    keys = load_keys(parse(["--data-dir", str(tmp_path / "d"), "--service-account-key-file", str(verify)]))
    assert keys.signing_key is None and len(keys.verification_keys) == 1
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    with pytest.raises(AuthConfigError, match=f"--service-account-key-file {bad}: no RSA or ECDSA"):
        load_keys(parse(["--data-dir", str(tmp_path / "d"), "--service-account-key-file", str(bad)]))


def test_tls_key_verifies_when_no_key_file_is_given(tmp_path, rsa_key, ec_key):
    cert, tls_key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("unused here")
    tls_key.write_bytes(pem_private(rsa_key))
    keys = load_keys(
        parse(["--data-dir", str(tmp_path / "d"), "--tls-cert-file", str(cert), "--tls-private-key-file", str(tls_key)])
    )
    assert jwt.key_id(rsa_key) in {jwt.key_id(k) for k in keys.verification_keys}
    assert jwt.key_id(keys.signing_key) != jwt.key_id(rsa_key)  # the TLS key only verifies
    # An explicit --service-account-key-file replaces the fallback.
    pub = tmp_path / "sa.pub"
    pub.write_bytes(pem_public(ec_key))
    keys = load_keys(
        parse(
            [
                "--data-dir",
                str(tmp_path / "d"),
                "--tls-cert-file",
                str(cert),
                "--tls-private-key-file",
                str(tls_key),
                "--service-account-key-file",
                str(pub),
            ]
        )
    )
    assert [jwt.key_id(k) for k in keys.verification_keys] == [jwt.key_id(ec_key)]


# --- static token file ----------------------------------------------------------------------------


def test_token_csv_format():
    users = parse_token_csv('t1,alice,u1,"system:masters,devs"\n\nt2,bob,u2\n,ignored,u9\nt3,carol,u3,ops\n', "f")
    assert len(users) == 3
    tokens = StaticTokens(users)
    import asyncio

    res = asyncio.run(tokens.authenticate_token("t1", AUD))
    assert res.user == UserInfo("alice", uid="u1", groups=("system:masters", "devs"))
    assert asyncio.run(tokens.authenticate_token("t2", AUD)).user == UserInfo("bob", uid="u2")
    assert asyncio.run(tokens.authenticate_token("t3", AUD)).user.groups == ("ops",)
    assert asyncio.run(tokens.authenticate_token("t4", AUD)) is None
    assert asyncio.run(tokens.authenticate_token("", AUD)) is None


@pytest.mark.parametrize(
    "text, where",
    [
        ("t1,alice,u1\nt2,bob\n", "line 2: needs at least 3 columns"),
        ("t1,alice,u1\n\nt3,carol,u3,a,b\n", "line 3: has 5 columns"),
        ('t1,alice,u1,"devs\n', "line 1"),  # an unterminated quote
        ("t 1,alice,u1\n", "line 1: the token contains whitespace"),
        ("t1,,u1\n", "line 1: the user name (column 2) is empty"),
    ],
)
def test_token_csv_errors_name_file_and_line(text, where):
    with pytest.raises(AuthConfigError) as info:
        parse_token_csv(text, "/etc/orch/tokens.csv")
    assert "/etc/orch/tokens.csv" in str(info.value) and where in str(info.value)


def test_token_file_from_disk(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("abc,alice,1\n")
    assert len(StaticTokens.from_file(str(f)).users) == 1
    with pytest.raises(AuthConfigError, match="cannot read"):
        StaticTokens.from_file(str(tmp_path / "missing.csv"))


# --- bootstrap tokens -------------------------------------------------------------------------------


class FakeLookup:
    """ObjectLookup stand-in: objects by (resource, namespace, name)."""

    def __init__(self, objects: dict | None = None):
        self.objects = objects or {}
        self.asked: list[tuple] = []

    async def get(self, resource, namespace, name):
        self.asked.append((resource, namespace, name))
        return self.objects.get((resource, namespace, name))

    async def live(self, resource, namespace, name):
        return self.objects.get((resource, namespace, name))

    async def live_state(self, resource, namespace, name, uid):
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            return "missing"
        md = obj["metadata"]
        if md.get("uid") != uid:
            return "uid"
        return "deleting" if md.get("deletionTimestamp") else "ok"


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def bootstrap_secret(
    token_id="abcdef", secret="0123456789abcdef", *, typ=names.BOOTSTRAP_TOKEN_SECRET_TYPE, **data
) -> dict:
    values = {"token-id": token_id, "token-secret": secret, "usage-bootstrap-authentication": "true", **data}
    return {
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": names.NS_SYSTEM},
        "type": typ,
        "data": {k.replace("_", "-"): b64(v) for k, v in values.items()},
    }


def bootstrap(secret: dict | None, now=_dt.datetime(2030, 1, 1, tzinfo=_dt.timezone.utc)) -> BootstrapTokens:
    objs = {("secrets", names.NS_SYSTEM, "bootstrap-token-abcdef"): secret} if secret else {}
    return BootstrapTokens(FakeLookup(objs), clock=lambda: now)


async def test_bootstrap_token_user_and_groups():
    auth = bootstrap(bootstrap_secret(auth_extra_groups="system:bootstrappers:worker,system:bootstrappers:a-b"))
    res = await auth.authenticate_token("abcdef.0123456789abcdef", AUD)
    assert res.user.name == "system:bootstrap:abcdef"
    assert res.user.groups == ("system:bootstrappers", "system:bootstrappers:a-b", "system:bootstrappers:worker")
    assert auth.lookup.asked == [("secrets", "orch-system", "bootstrap-token-abcdef")]


@pytest.mark.parametrize(
    "token",
    [
        "abcdef.0123456789abcdeX",
        "ABCDEF.0123456789abcdef",
        "abcdef0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcdef0",
        "abcdef.0123456789abcdef\n",
    ],
)
async def test_malformed_bootstrap_tokens_are_not_looked_up(token):
    auth = bootstrap(bootstrap_secret())
    assert await auth.authenticate_token(token, AUD) is None
    assert auth.lookup.asked == []


@pytest.mark.parametrize(
    "secret",
    [
        None,
        bootstrap_secret(secret="0123456789abcdee"),  # another secret
        bootstrap_secret(typ="Opaque"),
        bootstrap_secret(token_id="zzzzzz"),  # token-id disagrees with the name
        bootstrap_secret(expiration="2029-12-31T23:59:59Z"),
        bootstrap_secret(expiration="next tuesday"),
        bootstrap_secret(usage_bootstrap_authentication="false"),
        bootstrap_secret(auth_extra_groups="system:masters"),
        bootstrap_secret(auth_extra_groups="system:bootstrappers:ok,"),
        {
            **bootstrap_secret(),
            "metadata": {"name": "bootstrap-token-abcdef", "deletionTimestamp": "2029-01-01T00:00:00Z"},
        },
    ],
    ids=[
        "missing",
        "wrong-secret",
        "wrong-type",
        "id-mismatch",
        "expired",
        "bad-expiration",
        "not-for-auth",
        "bad-group",
        "empty-group",
        "deleting",
    ],
)
async def test_bootstrap_token_refusals(secret):
    assert await bootstrap(secret).authenticate_token("abcdef.0123456789abcdef", AUD) is None


async def test_bootstrap_token_not_yet_expired_and_string_data():
    secret = bootstrap_secret(expiration="2030-01-01T00:00:01Z")
    assert (await bootstrap(secret).authenticate_token("abcdef.0123456789abcdef", AUD)) is not None
    plain = {
        "metadata": {"name": "bootstrap-token-abcdef"},
        "type": names.BOOTSTRAP_TOKEN_SECRET_TYPE,
        "stringData": {
            "token-id": "abcdef",
            "token-secret": "0123456789abcdef",
            "usage-bootstrap-authentication": "true",
        },
    }
    assert (await bootstrap(plain).authenticate_token("abcdef.0123456789abcdef", AUD)) is not None
    assert bootstrap_groups("") == ("system:bootstrappers",)


# --- service-account tokens -------------------------------------------------------------------------


def sa_objects(uid="sa-uid", pod_uid=None) -> dict:
    objs = {("serviceaccounts", "ns1", "robot"): {"metadata": {"name": "robot", "uid": uid}}}
    if pod_uid:
        objs[("pods", "ns1", "p")] = {"metadata": {"name": "p", "uid": pod_uid}}
    return objs


class Clock:
    def __init__(self, t: float = NOW):
        self.t = t

    def __call__(self) -> float:
        return self.t


def sa_setup(key, lookup=None, clock=None):
    clock = clock or Clock()
    issuer = TokenIssuer(key, ISS, clock=clock)
    auth = ServiceAccountTokenAuthenticator([key.public_key()], (ISS, "https://old.example"), lookup, clock=clock)
    return issuer, auth, clock


async def test_service_account_token_round_trip_and_cache(ec_key):
    lookup = FakeLookup(sa_objects())
    issuer, auth, clock = sa_setup(ec_key, lookup)
    token, exp = issuer.issue("ns1", "robot", "sa-uid", list(AUD), 3600)
    assert exp == NOW + 3600
    claims = jwt.verify(token, [ec_key.public_key()])[1]
    assert claims["sub"] == "system:serviceaccount:ns1:robot" and claims["iss"] == ISS
    assert claims["iat"] == claims["nbf"] == NOW and claims["aud"] == list(AUD)
    assert claims["orch.io"] == {"namespace": "ns1", "serviceaccount": {"name": "robot", "uid": "sa-uid"}}
    res = await auth.authenticate_token(token, AUD)
    assert res.user == UserInfo(
        "system:serviceaccount:ns1:robot", uid="sa-uid", groups=("system:serviceaccounts", "system:serviceaccounts:ns1")
    )
    assert res.audiences == AUD
    for _ in range(3):
        await auth.authenticate_token(token, AUD)
    assert auth.signature_checks == 1  # verified once, then served from the cache
    # Expiry is checked on cached tokens too, with upstream's 60 s leeway.
    clock.t = exp + 59
    assert await auth.authenticate_token(token, AUD) is not None
    clock.t = exp + 61
    with pytest.raises(Unauthorized, match="service account token has expired"):
        await auth.authenticate_token(token, AUD)


async def test_service_account_token_refusals(ec_key, rsa_key):
    lookup = FakeLookup(sa_objects())
    issuer, auth, clock = sa_setup(ec_key, lookup)
    token, _ = issuer.issue("ns1", "robot", "sa-uid", ["api"], 3600)
    with pytest.raises(Unauthorized, match=r'token audiences \["api"\] is invalid for the target audiences'):
        await auth.authenticate_token(token, AUD)
    assert (await auth.authenticate_token(token, ("api", "x"))).audiences == ("api",)
    # Signed by a key the server does not trust.
    forged, _ = TokenIssuer(rsa_key, ISS, clock=clock).issue("ns1", "robot", "sa-uid", list(AUD), 3600)
    with pytest.raises(Unauthorized, match="does not verify"):
        await auth.authenticate_token(forged, AUD)
    # Another issuer's token, or no JWT at all: not ours, no opinion.
    other, _ = TokenIssuer(ec_key, "https://elsewhere", clock=clock).issue("ns1", "robot", "sa-uid", list(AUD), 3600)
    assert await auth.authenticate_token(other, AUD) is None
    assert await auth.authenticate_token("abcdef.0123456789abcdef", AUD) is None
    # Not valid yet.
    early, _ = TokenIssuer(ec_key, ISS, clock=Clock(NOW + 3600)).issue("ns1", "robot", "sa-uid", list(AUD), 3600)
    with pytest.raises(Unauthorized, match="not valid yet"):
        await auth.authenticate_token(early, AUD)
    # Claims not of our shape, though well signed.
    odd = jwt.encode({"iss": ISS, "sub": "system:serviceaccount:ns1:robot", "aud": list(AUD)}, ec_key)
    with pytest.raises(Unauthorized, match="unexpected private claim"):
        await auth.authenticate_token(odd, AUD)
    liar = jwt.encode(
        {
            "iss": ISS,
            "sub": "system:serviceaccount:ns1:admin",
            "aud": list(AUD),
            "orch.io": {"namespace": "ns1", "serviceaccount": {"name": "robot", "uid": "sa-uid"}},
        },
        ec_key,
    )
    with pytest.raises(Unauthorized, match="sub does not name"):
        await auth.authenticate_token(liar, AUD)


async def test_service_account_lookup_revokes(ec_key):
    lookup = FakeLookup(sa_objects(pod_uid="pod-uid"))
    issuer, auth, _ = sa_setup(ec_key, lookup)
    token, _ = issuer.issue("ns1", "robot", "sa-uid", list(AUD), 3600, pod=("p", "pod-uid"))
    res = await auth.authenticate_token(token, AUD)
    assert res.user.extra == {names.USER_EXTRA_POD_NAME: ("p",), names.USER_EXTRA_POD_UID: ("pod-uid",)}
    lookup.objects[("pods", "ns1", "p")]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    with pytest.raises(Unauthorized, match="pod ns1/p has been deleted"):
        await auth.authenticate_token(token, AUD)
    del lookup.objects[("pods", "ns1", "p")]
    with pytest.raises(Unauthorized, match='pods "p" not found'):
        await auth.authenticate_token(token, AUD)
    plain, _ = issuer.issue("ns1", "robot", "sa-uid", list(AUD), 3600)
    lookup.objects[("serviceaccounts", "ns1", "robot")]["metadata"]["uid"] = "new-uid"
    with pytest.raises(Unauthorized, match="does not match"):
        await auth.authenticate_token(plain, AUD)
    del lookup.objects[("serviceaccounts", "ns1", "robot")]
    with pytest.raises(Unauthorized, match='serviceaccounts "robot" not found'):
        await auth.authenticate_token(plain, AUD)
    # --service-account-lookup=false: only the signature and the times count.
    _, no_lookup, _ = sa_setup(ec_key, None)
    assert (await no_lookup.authenticate_token(plain, AUD)).user.uid == "sa-uid"


def test_claims_shapes():
    base = {
        "sub": "system:serviceaccount:a:b",
        "orch.io": {"namespace": "a", "serviceaccount": {"name": "b", "uid": "u"}},
    }
    assert parse_claims({**base, "aud": "one"}).audiences == ("one",)
    assert parse_claims(base).exp is None
    for bad in (
        {**base, "exp": "soon"},
        {**base, "aud": 3},
        {**base, "orch.io": {"namespace": "a", "serviceaccount": {"name": "b"}}},
        {**base, "orch.io": {**base["orch.io"], "pod": {"name": "p"}}},
    ):
        with pytest.raises(Unauthorized):
            parse_claims(bad)


# --- the request chain --------------------------------------------------------------------------------


class FakeRequest:
    def __init__(self, authorization: str | None = None, cert_der: bytes | None = None):
        self.headers = {"Authorization": authorization} if authorization is not None else {}
        self.cert_der = cert_der


def chain(anonymous=True, ca_file: str = "/nonexistent/ca.crt") -> AuthenticationChain:
    static = AudienceAgnostic(StaticTokens(parse_token_csv("good,alice,u1,devs\n")), AUD)
    bearer = BearerTokenAuthenticator([static], AUD)
    x509_auth = X509Authenticator(
        ClientCertificateVerifier(ca_file), peer=lambda r: (r.cert_der, ()) if r.cert_der else None
    )
    return AuthenticationChain([x509_auth, bearer], bearer, anonymous=anonymous)


def client_cert_der(tmp_path, cn: str, orgs) -> tuple[str, bytes]:
    """A CA file and a client certificate (DER) it issued."""
    ca, ca_key = make_ca("unit-ca")
    (tmp_path / "ca.crt").write_bytes(cert_pem(ca))
    leaf = sign_leaf(ca, ca_key, new_key().public_key(), cn, orgs, client=True)
    return str(tmp_path / "ca.crt"), leaf.public_bytes(serialization.Encoding.DER)


async def test_chain_outcomes(tmp_path):
    ca_file, jane_der = client_cert_der(tmp_path, "jane", ["system:masters", "ops"])
    c = chain(ca_file=ca_file)
    assert await c.authenticate(FakeRequest()) is ANONYMOUS
    assert await c.authenticate(FakeRequest("Basic dXNlcjpwdw==")) is ANONYMOUS  # not ours: no credential
    assert await c.authenticate(FakeRequest("Bearer ")) is ANONYMOUS
    alice = await c.authenticate(FakeRequest("Bearer good"))
    assert alice == UserInfo("alice", uid="u1", groups=("devs", "system:authenticated"))
    assert (await c.authenticate(FakeRequest("bearer good"))).name == "alice"
    with pytest.raises(Unauthorized, match="invalid bearer token"):
        await c.authenticate(FakeRequest("Bearer bad"))  # a bad credential is 401 even with anonymous on
    jane = await c.authenticate(FakeRequest(cert_der=jane_der))
    assert jane == UserInfo("jane", groups=("system:masters", "ops", "system:authenticated"))
    # A good certificate decides before a bad token is looked at (upstream's order).
    assert (await c.authenticate(FakeRequest("Bearer bad", jane_der))).name == "jane"
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    ca, ca_key = make_ca("x")
    no_cn = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "x")]))
        .issuer_name(ca.subject)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(_dt.datetime(2020, 1, 1))
        .not_valid_after(_dt.datetime(2030, 1, 1))
        .sign(ca_key, hashes.SHA256())
    )
    assert user_from_certificate(no_cn) is None
    with pytest.raises(Unauthorized, match="anonymous requests are disabled"):
        await chain(anonymous=False).authenticate(FakeRequest())
    assert bearer_token(FakeRequest("Bearer a b")) == "a"


async def test_review_token_audiences():
    c = chain()
    res = await c.review_token("good", ())
    assert res.user.groups == ("devs", "system:authenticated") and res.audiences == AUD
    with pytest.raises(Unauthorized):
        await c.review_token("good", ("some-other-api",))  # audience-agnostic tokens are this API's only
    assert (await c.review_token("good", ("x",) + AUD)).audiences == AUD


def test_authenticated_group_is_added_once():
    u = UserInfo("a", groups=("system:authenticated",))
    assert with_authenticated_group(u) is u
    assert with_authenticated_group(ANONYMOUS) is ANONYMOUS


# --- ServiceAccount admission: the pod mutation ------------------------------------------------------


def test_token_volume_is_mounted_everywhere_once():
    spec = {
        "initContainers": [{"name": "i"}],
        "containers": [
            {"name": "a"},
            {"name": "b", "volumeMounts": [{"name": "own", "mountPath": names.SERVICEACCOUNT_TOKEN_MOUNT_PATH}]},
        ],
    }
    mount_service_account_token(spec, lambda: "x2b4z")
    vol = spec["volumes"][0]
    assert vol["name"] == "orch-api-access-x2b4z"
    sources = vol["projected"]["sources"]
    assert sources[0] == {
        "serviceAccountToken": {"expirationSeconds": PROJECTED_TOKEN_EXPIRATION_SECONDS, "path": "token"}
    }
    assert sources[1]["configMap"]["name"] == "orch-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.namespace"
    mount = {"name": "orch-api-access-x2b4z", "readOnly": True, "mountPath": "/var/run/secrets/orch.io/serviceaccount"}
    assert spec["initContainers"][0]["volumeMounts"] == [mount]
    assert spec["containers"][0]["volumeMounts"] == [mount]
    assert spec["containers"][1]["volumeMounts"] == [
        {"name": "own", "mountPath": names.SERVICEACCOUNT_TOKEN_MOUNT_PATH}
    ]
    # A second pass (an existing volume of that prefix) adds nothing.
    mount_service_account_token(spec, lambda: "other")
    assert len(spec["volumes"]) == 1 and spec["containers"][0]["volumeMounts"] == [mount]
    # Nobody needs it: no volume.
    lone = {
        "containers": [
            {"name": "b", "volumeMounts": [{"name": "o", "mountPath": names.SERVICEACCOUNT_TOKEN_MOUNT_PATH}]}
        ]
    }
    mount_service_account_token(lone, lambda: "zzzzz")
    assert "volumes" not in lone


def test_automount_precedence():
    assert should_automount({}, {}) is True
    assert should_automount({"automountServiceAccountToken": False}, {}) is False
    assert should_automount({"automountServiceAccountToken": False}, {"automountServiceAccountToken": True}) is True
    assert should_automount({}, {"automountServiceAccountToken": False}) is False
