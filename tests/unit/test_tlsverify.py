"""Client certificates verified by the x509 authenticator (apiserver_min/auth/tlsverify.py):
the DER chain verification with certificates made here, the verification cache and the
CA bundle reload, the always-accept handshake callback (a real in-memory TLS handshake)
and its fallback, and the authenticator's 401s."""

from __future__ import annotations

import datetime as _dt
import logging
import os
import ssl
import types

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver_min.api import tlsverify
from apiserver_min.api.tlsverify import (
    CaBundle,
    CertificateError,
    ClientCertificateVerifier,
    peer_certificates,
    request_client_certificates,
    verify_chain,
)
from apiserver_min.api.user import UserInfo
from apiserver_min.authn.authenticator import ANONYMOUS, Unauthorized
from apiserver_min.authn.bearer import AudienceAgnostic, BearerTokenAuthenticator
from apiserver_min.authn.tokens import StaticTokens, parse_token_csv
from apiserver_min.authn.union import AuthenticationChain
from apiserver_min.authn.x509 import X509Authenticator, user_from_certificate

NOW = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
DAY = _dt.timedelta(days=1)


def name(cn: str, *orgs: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        + ([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])
    )


def make_ca(
    cn="test-ca",
    key=None,
    issuer=None,
    *,
    path_length=None,
    ca=True,
    key_cert_sign=True,
    not_before=NOW - DAY,
    not_after=NOW + 30 * DAY,
    eku=None,
):
    """A CA certificate: self-signed, or signed by ``issuer`` = (cert, key)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    b = (
        x509.CertificateBuilder()
        .subject_name(name(cn))
        .issuer_name(issuer[0].subject if issuer else name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, key_cert_sign, key_cert_sign, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if eku is not None:
        b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    signer = issuer[1] if issuer else key
    algo = None if isinstance(signer, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return b.sign(signer, algo), key


def make_leaf(
    issuer,
    cn="jane",
    orgs=("devs",),
    *,
    eku=(ExtendedKeyUsageOID.CLIENT_AUTH,),
    ku="sign",
    ca=False,
    not_before=NOW - DAY,
    not_after=NOW + 10 * DAY,
    critical_unknown=False,
):
    key = ec.generate_private_key(ec.SECP256R1())
    b = (
        x509.CertificateBuilder()
        .subject_name(name(cn, *orgs))
        .issuer_name(issuer[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), critical=False)
    )
    if ku == "sign":
        b = b.add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
    elif ku == "no-signature":
        b = b.add_extension(x509.KeyUsage(False, False, True, False, False, False, False, False, False), critical=True)
    if eku is not None:
        b = b.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    if critical_unknown:
        b = b.add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"), b"\x05\x00"), critical=True
        )
    algo = None if isinstance(issuer[1], ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return b.sign(issuer[1], algo), key


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


@pytest.fixture(scope="module")
def ca():
    return make_ca()


# --- chain verification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        ec.generate_private_key(ec.SECP384R1()),
        rsa.generate_private_key(65537, 2048),
        ed25519.Ed25519PrivateKey.generate(),
    ],
    ids=["ecdsa", "rsa-pkcs1v15", "ed25519"],
)
def test_valid_certificate_for_each_ca_key_type(key):
    issuer = make_ca("ca-" + type(key).__name__, key)
    leaf, _ = make_leaf(issuer, "jane", ("devs", "ops"))
    res = verify_chain(der(leaf), CaBundle([issuer[0]]))
    assert res.certificate == leaf
    assert user_from_certificate(res.certificate) == UserInfo("jane", groups=("devs", "ops"))
    assert res.valid_until == leaf.not_valid_after_utc.timestamp()


def test_certificate_from_another_ca_is_refused(ca):
    stranger = make_ca("stranger")
    with pytest.raises(CertificateError, match="signed by unknown authority"):
        verify_chain(der(make_leaf(stranger)[0]), CaBundle([ca[0]]))
    # The same issuer name but another key: the forgery is caught by the signature.
    impostor = make_ca(ca[0].subject.rfc4514_string().removeprefix("CN="))
    assert impostor[0].subject == ca[0].subject
    forged, _ = make_leaf(impostor, "system:admin", ("system:masters",))
    with pytest.raises(CertificateError, match=r"verifying certificate SN=\d+.*signed by unknown authority"):
        verify_chain(der(forged), CaBundle([ca[0]]))
    # Several CAs in the bundle: the right one is found.
    assert verify_chain(der(forged), CaBundle([ca[0], impostor[0]])).certificate == forged


def test_validity_period(ca):
    expired, _ = make_leaf(ca, not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    with pytest.raises(CertificateError, match="expired or is not yet valid: current time .* is after") as e:
        verify_chain(der(expired), CaBundle([ca[0]]))
    assert e.value.transient
    early, _ = make_leaf(ca, not_before=NOW + DAY, not_after=NOW + 3 * DAY)
    with pytest.raises(CertificateError, match="is before"):
        verify_chain(der(early), CaBundle([ca[0]]))
    assert verify_chain(der(early), CaBundle([ca[0]]), now=NOW + 2 * DAY).certificate == early
    # An expired CA makes its certificates fail too.
    old_ca = make_ca("old", not_before=NOW - 30 * DAY, not_after=NOW - DAY)
    leaf, _ = make_leaf(old_ca, not_before=NOW - 20 * DAY, not_after=NOW + DAY)
    with pytest.raises(CertificateError, match="CA CN=old has expired"):
        verify_chain(der(leaf), CaBundle([old_ca[0]]))


def test_usages_and_ca_certificates(ca):
    bundle = CaBundle([ca[0]])
    with pytest.raises(CertificateError, match="CA certificate cannot be used as a client certificate"):
        verify_chain(der(ca[0]), bundle)  # the CA itself
    sub_ca, _ = make_leaf(ca, ca=True)
    with pytest.raises(CertificateError, match="CA certificate cannot"):
        verify_chain(der(sub_ca), bundle)
    server_only, _ = make_leaf(ca, eku=(ExtendedKeyUsageOID.SERVER_AUTH,))
    with pytest.raises(CertificateError, match="incompatible key usage .*without client auth"):
        verify_chain(der(server_only), bundle)
    with pytest.raises(CertificateError, match="neither digital signature"):
        verify_chain(der(make_leaf(ca, ku="no-signature")[0]), bundle)
    with pytest.raises(CertificateError, match="unhandled critical extension 1.3.6.1.4.1.99999.1"):
        verify_chain(der(make_leaf(ca, critical_unknown=True)[0]), bundle)
    # No usage extensions at all, or "any": fine (upstream checks only what is there).
    for leaf in (
        make_leaf(ca, eku=None, ku=None)[0],
        make_leaf(ca, eku=(ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,))[0],
    ):
        assert verify_chain(der(leaf), bundle).certificate == leaf
    with pytest.raises(CertificateError, match="unreadable client certificate"):
        verify_chain(b"\x30\x03\x02\x01\x00", bundle)
    # A bundle entry that is not a CA, or may not sign certificates, is no anchor.
    not_ca = make_ca("not-a-ca", ca=False)
    with pytest.raises(CertificateError, match="CN=not-a-ca is not a CA"):
        verify_chain(der(make_leaf(not_ca)[0]), CaBundle([not_ca[0]]))
    no_sign = make_ca("no-sign", key_cert_sign=False)
    with pytest.raises(CertificateError, match="may not sign certificates"):
        verify_chain(der(make_leaf(no_sign)[0]), CaBundle([no_sign[0]]))


def test_intermediates(ca):
    inter = make_ca("intermediate", issuer=ca)
    leaf, _ = make_leaf(inter)
    bundle = CaBundle([ca[0]])
    with pytest.raises(CertificateError, match="unknown authority"):
        verify_chain(der(leaf), bundle)  # not sent (Python < 3.13 never has them)
    assert verify_chain(der(leaf), bundle, [der(inter[0])]).certificate == leaf
    assert verify_chain(der(leaf), CaBundle([inter[0]])).certificate == leaf  # an intermediate as anchor
    # Path length: a root allowing no intermediates refuses the chain.
    strict_root = make_ca("strict", path_length=0)
    inter2 = make_ca("inter2", issuer=strict_root)
    with pytest.raises(CertificateError, match="path length constraint of CA CN=strict"):
        verify_chain(der(make_leaf(inter2)[0]), CaBundle([strict_root[0]]), [der(inter2[0])])
    # An intermediate restricted to server auth cannot vouch for client certificates.
    server_inter = make_ca("server-inter", issuer=ca, eku=[ExtendedKeyUsageOID.SERVER_AUTH])
    with pytest.raises(CertificateError, match="intermediate CN=server-inter specifies an incompatible"):
        verify_chain(der(make_leaf(server_inter)[0]), bundle, [der(server_inter[0])])
    not_ca_inter = make_ca("leafy", issuer=ca, ca=False)
    with pytest.raises(CertificateError, match="intermediate CN=leafy is not a CA"):
        verify_chain(der(make_leaf(not_ca_inter)[0]), bundle, [der(not_ca_inter[0])])


# --- the verifier: bundle file and cache ---------------------------------------------------------


class Clock:
    def __init__(self):
        self.mono = 1000.0
        self.wall = NOW.timestamp()


def test_verifier_caches_and_rechecks_validity(tmp_path, ca):
    (tmp_path / "ca.crt").write_bytes(pem(ca[0]))
    clock = Clock()
    v = ClientCertificateVerifier(str(tmp_path / "ca.crt"), monotonic=lambda: clock.mono, wall=lambda: clock.wall)
    leaf, _ = make_leaf(ca, not_after=NOW + DAY)
    first = v.verify(der(leaf))
    assert v.verify(der(leaf)) is first and v.full_checks == 1
    clock.wall += 2 * DAY.total_seconds()  # expired while cached: refused at once
    with pytest.raises(CertificateError, match="is after"):
        v.verify(der(leaf))
    with pytest.raises(CertificateError, match="is after"):
        v.verify(der(leaf))
    assert v.full_checks == 3  # clock-dependent failures are not cached
    clock.wall = NOW.timestamp()
    stranger, _ = make_leaf(make_ca("stranger"))
    for _ in range(3):
        with pytest.raises(CertificateError, match="unknown authority"):
            v.verify(der(stranger))
    assert v.full_checks == 4  # the failure was cached
    clock.mono += tlsverify.VERIFY_CACHE_TTL_SECONDS + 1
    v.verify(der(leaf))
    assert v.full_checks == 5  # past the TTL: verified again


def test_verifier_reads_the_bundle_lazily_and_follows_changes(tmp_path, ca, caplog):
    path = tmp_path / "ca.crt"
    clock = Clock()
    v = ClientCertificateVerifier(str(path), monotonic=lambda: clock.mono, wall=lambda: clock.wall)
    leaf, _ = make_leaf(ca)
    with pytest.raises(CertificateError, match=f"client CA bundle {path}: No such file"):
        v.verify(der(leaf))
    path.write_bytes(pem(ca[0]))
    assert v.verify(der(leaf)).certificate == leaf  # no bundle yet: looked at again at once
    other = make_ca("rotated")
    other_leaf, _ = make_leaf(other)
    with pytest.raises(CertificateError, match="unknown authority"):
        v.verify(der(other_leaf))
    path.write_bytes(pem(other[0], ca[0]))
    os.utime(path, ns=(1, 1))  # a distinct stamp even within the file system's time granularity
    with pytest.raises(CertificateError, match="unknown authority"):
        v.verify(der(other_leaf))  # not re-read before the recheck interval
    clock.mono += tlsverify.BUNDLE_RECHECK_SECONDS
    assert v.verify(der(other_leaf)).certificate == other_leaf  # the new bundle voids cached outcomes
    path.write_bytes(b"not a certificate")
    clock.mono += tlsverify.BUNDLE_RECHECK_SECONDS
    with caplog.at_level(logging.WARNING, "orch-apiserver.tlsverify"):
        assert v.verify(der(leaf)).certificate == leaf  # the last good bundle stays
    assert "no readable PEM certificates; keeping the last good bundle" in caplog.text


# --- the handshake --------------------------------------------------------------------------------


def _write(tmp_path, stem: str, cert: x509.Certificate, key) -> tuple[str, str]:
    (tmp_path / f"{stem}.crt").write_bytes(pem(cert))
    (tmp_path / f"{stem}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(tmp_path / f"{stem}.crt"), str(tmp_path / f"{stem}.key")


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> ssl.SSLObject:
    """A TLS handshake in memory; returns the server's SSLObject or raises ssl.SSLError."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for side, obj, out, peer_in in (("c", client, c_out, s_in), ("s", server, s_out, c_in)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                peer_in.write(data)
        if all(done.values()):
            # TLS 1.3: the client finishes first; the server's verdict comes with its read.
            try:
                server.read(1)
            except ssl.SSLWantReadError:
                pass
            return server
    raise AssertionError("handshake did not finish")


@pytest.fixture()
def tls(tmp_path, ca):
    server_cert, server_key = make_leaf(ca, "localhost", (), eku=(ExtendedKeyUsageOID.SERVER_AUTH,))
    stranger = make_ca("stranger")
    client_cert, client_key = make_leaf(stranger, "system:admin", ("system:masters",))
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(pem(ca[0]))

    def server_ctx() -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*_write(tmp_path, "server", server_cert, server_key))
        ctx.load_verify_locations(str(ca_file))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    client.load_cert_chain(*_write(tmp_path, "client", client_cert, client_key))
    return types.SimpleNamespace(server_ctx=server_ctx, client=client, client_cert=client_cert, ca_file=str(ca_file))


def test_handshake_accepts_any_client_certificate_and_the_authenticator_refuses_it(tls):
    ctx = tls.server_ctx()
    assert request_client_certificates(ctx) is True
    assert ctx.verify_mode == ssl.CERT_OPTIONAL and request_client_certificates(ctx) is True  # idempotent
    server = _handshake(ctx, tls.client)
    transport = types.SimpleNamespace(get_extra_info=lambda k: server if k == "ssl_object" else None)
    presented = peer_certificates(transport)
    assert presented is not None and presented[0] == der(tls.client_cert)
    verifier = ClientCertificateVerifier(tls.ca_file)
    with pytest.raises(CertificateError, match="signed by unknown authority"):
        verifier.verify(*presented)
    assert peer_certificates(None) is None
    assert peer_certificates(types.SimpleNamespace(get_extra_info=lambda k: None)) is None


def test_fallback_keeps_handshake_verification(tls, monkeypatch, caplog):
    monkeypatch.setattr(ssl, "OPENSSL_VERSION_NUMBER", ssl.OPENSSL_VERSION_NUMBER + 1)
    ctx = tls.server_ctx()
    with caplog.at_level(logging.WARNING, "orch-apiserver.tlsverify"):
        assert request_client_certificates(ctx) is False
    assert [r.message for r in caplog.records if "stay verified in the TLS handshake" in r.message]
    assert "libssl found by ctypes" in caplog.text
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(ssl.SSLError):
        _handshake(ctx, tls.client)


def test_fallback_when_the_pointer_does_not_answer(tls, monkeypatch):
    """A wrong SSL_CTX pointer is detected by the verify-mode read-back, before any write."""
    real = tlsverify._LibSsl

    class Lying(real):
        def __init__(self):
            super().__init__()
            self.get_verify_mode = lambda ptr: 1

            def no_write(*args):
                raise AssertionError("must not write")

            self.set_verify = no_write

    monkeypatch.setattr(tlsverify, "_LibSsl", Lying)
    ctx = tls.server_ctx()
    assert request_client_certificates(ctx) is False
    with pytest.raises(ssl.SSLError):
        _handshake(ctx, tls.client)


# --- the authenticator ----------------------------------------------------------------------------


class FakeRequest:
    def __init__(self, cert: x509.Certificate | None = None, authorization: str | None = None):
        self.cert = cert
        self.headers = {"Authorization": authorization} if authorization else {}


def _authenticator(tmp_path, ca) -> X509Authenticator:
    (tmp_path / "bundle.crt").write_bytes(pem(ca[0]))
    return X509Authenticator(
        ClientCertificateVerifier(str(tmp_path / "bundle.crt")),
        peer=lambda r: (der(r.cert), ()) if r.cert is not None else None,
    )


async def test_authenticator_users_and_401s(tmp_path, ca):
    x = _authenticator(tmp_path, ca)
    jane, _ = make_leaf(ca, "jane", ("system:masters", "ops"))
    assert await x.authenticate(FakeRequest(jane)) == UserInfo(
        "jane", groups=("system:masters", "ops", "system:authenticated")
    )
    assert await x.authenticate(FakeRequest(jane)) is await x.authenticate(FakeRequest(jane))
    assert await x.authenticate(FakeRequest()) is None
    assert await x.authenticate(FakeRequest(make_leaf(ca, "", ("only-org",))[0])) is None  # no CN: no opinion
    static = AudienceAgnostic(StaticTokens(parse_token_csv("good,alice,u1\n")), ("api",))
    bearer = BearerTokenAuthenticator([static], ("api",))
    expired, _ = make_leaf(ca, not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    forged, _ = make_leaf(make_ca("stranger"), "system:admin", ("system:masters",))
    for anonymous in (True, False):
        chain = AuthenticationChain([x, bearer], bearer, anonymous=anonymous)
        if anonymous:
            assert await chain.authenticate(FakeRequest()) is ANONYMOUS
        else:
            with pytest.raises(Unauthorized, match="anonymous requests are disabled"):
                await chain.authenticate(FakeRequest())
        for bad, reason in ((expired, "is after"), (forged, "unknown authority")):
            with pytest.raises(Unauthorized, match=reason):
                await chain.authenticate(FakeRequest(bad))  # 401 even with anonymous on
            # A good token next to a bad certificate still authenticates (upstream's union).
            assert (await chain.authenticate(FakeRequest(bad, "Bearer good"))).name == "alice"
        assert (await chain.authenticate(FakeRequest(jane, "Bearer bad"))).name == "jane"


async def test_outcome_kept_per_connection_while_the_verifier_says_it_holds(tmp_path, ca):
    """A connection's certificate is read and hashed once; the outcome is reused while the
    bundle, the outcome's lifetime and the validity window allow, as a verifier cache hit."""
    path = tmp_path / "ca.crt"
    path.write_bytes(pem(ca[0]))
    clock = Clock()
    verifier = ClientCertificateVerifier(str(path), monotonic=lambda: clock.mono, wall=lambda: clock.wall)
    reads = []

    def peer(r):
        reads.append(r)
        return (der(r.cert), ()) if r.cert is not None else None

    x = X509Authenticator(verifier, peer=peer, connection=lambda r: r.conn)
    jane, _ = make_leaf(ca, "jane", ("ops",), not_after=NOW + DAY)
    bob, _ = make_leaf(ca, "bob")

    class Conn:  # stands for a connection's ssl object
        pass

    conn_a, conn_b = Conn(), Conn()

    def on(conn, cert):
        r = FakeRequest(cert)
        r.conn = conn
        return r

    assert (await x.authenticate(on(conn_a, jane))).name == "jane"
    assert (await x.authenticate(on(conn_a, jane))).name == "jane"
    assert len(reads) == 1 and verifier.full_checks == 1
    assert (await x.authenticate(on(conn_b, bob))).name == "bob"  # another connection: its own
    assert len(reads) == 2
    clock.mono += tlsverify.VERIFY_CACHE_TTL_SECONDS + 1  # the outcome's lifetime is over: verified again
    assert (await x.authenticate(on(conn_a, jane))).name == "jane"
    assert len(reads) == 3 and verifier.full_checks == 3
    other = make_ca("rotated")
    path.write_bytes(pem(other[0]))  # jane's CA leaves the bundle: refused on the same connection
    os.utime(path, ns=(1, 1))
    clock.mono += tlsverify.BUNDLE_RECHECK_SECONDS
    with pytest.raises(Unauthorized, match="unknown authority"):
        await x.authenticate(on(conn_a, jane))
    path.write_bytes(pem(ca[0]))
    os.utime(path, ns=(2, 2))
    clock.mono += tlsverify.BUNDLE_RECHECK_SECONDS
    assert (await x.authenticate(on(conn_a, jane))).name == "jane"
    clock.wall += 2 * DAY.total_seconds()  # expired during the connection: 401 at once
    with pytest.raises(Unauthorized, match="is after"):
        await x.authenticate(on(conn_a, jane))
    reads.clear()
    del conn_b
    assert len(x._by_connection) == 1  # an entry goes with its connection


def test_server_contexts_refuse_renegotiation(tls):
    """The per-connection outcome rests on a connection's certificate never changing."""
    ctx = tls.server_ctx()
    request_client_certificates(ctx)
    assert ctx.options & ssl.OP_NO_RENEGOTIATION
