"""The authentication caches: bearer-token successes (re-checked on every hit) and
client-certificate subjects. Revocation must stay immediate for what the watch
cache sees; failures are never cached."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import types

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from apiserver_min.api import names
from apiserver_min.api.tlsverify import ClientCertificateVerifier
from apiserver_min.api.user import UserInfo
from apiserver_min.authn.authenticator import TokenResult, Unauthorized
from apiserver_min.authn.bearer import AudienceAgnostic, BearerTokenAuthenticator
from apiserver_min.authn.serviceaccount import ServiceAccountTokenAuthenticator, TokenIssuer
from apiserver_min.authn.tokens import BootstrapTokens, StaticTokens, parse_token_csv
from apiserver_min.authn.union import AuthenticationChain
from apiserver_min.authn.x509 import X509Authenticator
from apiserver_min.pki import cert_pem, make_ca, new_key, sign_leaf

AUD = ("https://orch.default.svc.cluster.local",)
ISS = AUD[0]
NOW = 1_900_000_000.0


@dataclasses.dataclass
class FakeEntry:
    rv: int
    uid: str = ""
    deleting: bool = False


class EntryLookup:
    """An ObjectLookup stand-in with watch-cache entries: objects and their entries by
    (resource, namespace, name)."""

    def __init__(self):
        self.objects: dict[tuple, dict] = {}
        self.entries: dict[tuple, FakeEntry] = {}
        self.gets = 0

    def put(self, resource, namespace, name, obj, rv, uid=""):
        obj = {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": str(rv), "uid": uid}}
        self.objects[(resource, namespace, name)] = obj
        self.entries[(resource, namespace, name)] = FakeEntry(rv, uid)

    async def get(self, resource, namespace, name):
        self.gets += 1
        return self.objects.get((resource, namespace, name))

    async def live_state(self, resource, namespace, name, uid):
        e = self.entries.get((resource, namespace, name))
        if e is None:
            return "missing"
        return "uid" if e.uid != uid else ("deleting" if e.deleting else "ok")

    def entry_getter(self, resource, namespace, name):
        return lambda: self.entries.get((resource, namespace, name))


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


class Flaky:
    """A token authenticator whose result's re-check is controlled by the test."""

    name = "flaky"

    def __init__(self):
        self.valid = True
        self.accept = True
        self.calls = 0

    async def authenticate_token(self, token, audiences):
        self.calls += 1
        if token != "t":
            return None
        if not self.accept:
            raise Unauthorized("revoked")
        return TokenResult(UserInfo("u"), audiences, still_valid=lambda: self.valid)


def request(token=None, cert_der=None):
    return types.SimpleNamespace(headers={"Authorization": f"Bearer {token}"} if token else {}, cert_der=cert_der)


def x509_authenticator(ca_file: str = "/nonexistent/ca.crt", **kw) -> X509Authenticator:
    return X509Authenticator(
        ClientCertificateVerifier(ca_file), peer=lambda r: (r.cert_der, ()) if r.cert_der else None, **kw
    )


async def test_static_token_success_is_cached_and_failures_are_not():
    static = AudienceAgnostic(StaticTokens(parse_token_csv("good,alice,u1,devs\n")), AUD)
    bearer = BearerTokenAuthenticator([static], AUD)
    chain = AuthenticationChain([x509_authenticator(), bearer], bearer)
    for _ in range(3):
        user = await chain.authenticate(request("good"))
        assert user == UserInfo("alice", uid="u1", groups=("devs", "system:authenticated"))
    assert bearer.full_checks == 1
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await chain.authenticate(request("bad"))
    assert bearer.full_checks == 3
    # The audiences are part of the key: a review for another audience is checked afresh.
    with pytest.raises(Unauthorized):
        await bearer.authenticate_token("good", ("elsewhere",))
    assert bearer.full_checks == 4


async def test_recheck_and_ttl_decide_reuse():
    flaky = Flaky()
    now = Clock(100.0)
    bearer = BearerTokenAuthenticator([flaky], AUD, cache_ttl=10.0, monotonic=now)
    await bearer.authenticate_token("t")
    await bearer.authenticate_token("t")
    assert flaky.calls == 1
    flaky.valid, flaky.accept = False, False  # the object behind it changed: full check, which refuses
    with pytest.raises(Unauthorized, match="revoked"):
        await bearer.authenticate_token("t")
    flaky.valid, flaky.accept = True, True
    await bearer.authenticate_token("t")
    assert flaky.calls == 3
    now.t += 11  # past the TTL even though the re-check still passes
    await bearer.authenticate_token("t")
    assert flaky.calls == 4


async def test_uncacheable_results_are_checked_every_time():
    class NoRecheck(Flaky):
        async def authenticate_token(self, token, audiences):
            res = await super().authenticate_token(token, audiences)
            return dataclasses.replace(res, still_valid=None)

    inner = NoRecheck()
    bearer = BearerTokenAuthenticator([inner], AUD)
    await bearer.authenticate_token("t")
    await bearer.authenticate_token("t")
    assert inner.calls == 2


def bootstrap_secret(expiration: str = "") -> dict:
    data = {"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true"}
    if expiration:
        data["expiration"] = expiration
    return {
        "metadata": {"name": "bootstrap-token-abcdef", "namespace": names.NS_SYSTEM},
        "type": names.BOOTSTRAP_TOKEN_SECRET_TYPE,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


async def test_bootstrap_token_cache_follows_the_secret_and_its_expiration():
    lookup = EntryLookup()
    key = ("secrets", names.NS_SYSTEM, "bootstrap-token-abcdef")
    lookup.put(*key, bootstrap_secret("2030-01-01T00:00:00Z"), rv=5)
    clock = Clock(_dt.datetime(2029, 12, 31, 23, 59, 0, tzinfo=_dt.timezone.utc))
    bearer = BearerTokenAuthenticator([AudienceAgnostic(BootstrapTokens(lookup, clock=clock), AUD)], AUD)
    token = "abcdef.0123456789abcdef"
    for _ in range(3):
        assert (await bearer.authenticate_token(token)).user.name == "system:bootstrap:abcdef"
    assert lookup.gets == 1
    lookup.entries[key] = FakeEntry(6)  # the secret was modified: checked again
    await bearer.authenticate_token(token)
    assert lookup.gets == 2
    lookup.put(*key, bootstrap_secret("2030-01-01T00:00:00Z"), rv=7)
    await bearer.authenticate_token(token)
    clock.t = _dt.datetime(2030, 1, 1, 0, 0, 1, tzinfo=_dt.timezone.utc)  # expired while cached
    with pytest.raises(Unauthorized):
        await bearer.authenticate_token(token)
    clock.t = _dt.datetime(2029, 1, 1, tzinfo=_dt.timezone.utc)
    await bearer.authenticate_token(token)
    del lookup.entries[key], lookup.objects[key]  # deleted: refused at once
    with pytest.raises(Unauthorized):
        await bearer.authenticate_token(token)


async def test_service_account_token_cache_follows_account_pod_and_expiry():
    key = ec.generate_private_key(ec.SECP256R1())
    clock = Clock(NOW)
    lookup = EntryLookup()
    lookup.put("serviceaccounts", "ns1", "robot", {}, rv=1, uid="sa-uid")
    lookup.put("pods", "ns1", "p", {}, rv=2, uid="pod-uid")
    sa = ServiceAccountTokenAuthenticator([key.public_key()], (ISS,), lookup, clock=clock)
    bearer = BearerTokenAuthenticator([sa], AUD)
    token, exp = TokenIssuer(key, ISS, clock=clock).issue(
        "ns1", "robot", "sa-uid", list(AUD), 3600, pod=("p", "pod-uid")
    )
    for _ in range(3):
        assert (await bearer.authenticate_token(token)).user.name == "system:serviceaccount:ns1:robot"
    assert bearer.full_checks == 1
    lookup.entries[("pods", "ns1", "p")].deleting = True
    with pytest.raises(Unauthorized, match="has been deleted"):
        await bearer.authenticate_token(token)
    lookup.entries[("pods", "ns1", "p")].deleting = False
    await bearer.authenticate_token(token)
    lookup.entries[("serviceaccounts", "ns1", "robot")] = FakeEntry(9, "other-uid")
    with pytest.raises(Unauthorized, match="does not match"):
        await bearer.authenticate_token(token)
    lookup.entries[("serviceaccounts", "ns1", "robot")] = FakeEntry(1, "sa-uid")
    await bearer.authenticate_token(token)
    clock.t = exp + 61  # past the leeway while cached
    with pytest.raises(Unauthorized, match="expired"):
        await bearer.authenticate_token(token)


async def test_client_certificate_user_is_remembered_per_certificate(tmp_path):
    from cryptography.hazmat.primitives import serialization

    ca, ca_key = make_ca("unit-ca")
    (tmp_path / "ca.crt").write_bytes(cert_pem(ca))
    x509 = x509_authenticator(str(tmp_path / "ca.crt"), cache_size=2)
    key = new_key()
    ders = [
        sign_leaf(ca, ca_key, key.public_key(), f"u{i}", [f"g{i}"], client=True).public_bytes(
            serialization.Encoding.DER
        )
        for i in range(3)
    ]
    for i, der in list(enumerate(ders)) * 2:
        user = await x509.authenticate(request(cert_der=der))
        assert user.name == f"u{i}" and user.groups == (f"g{i}", "system:authenticated")
    assert len(x509._users) == 2
    from cryptography import x509 as cx509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = _dt.datetime.now(_dt.timezone.utc)
    no_cn = (
        cx509.CertificateBuilder()
        .subject_name(cx509.Name([cx509.NameAttribute(NameOID.ORGANIZATION_NAME, "x")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - _dt.timedelta(days=1))
        .not_valid_after(now + _dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
        .public_bytes(serialization.Encoding.DER)
    )
    assert await x509.authenticate(request(cert_der=no_cn)) is None
