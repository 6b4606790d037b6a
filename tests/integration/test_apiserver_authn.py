"""Authentication end to end against real orch-apiserver processes: client certificates,
the static token file, bootstrap tokens, service-account JWTs (TokenRequest, TokenReview,
revocation), anonymous requests, the ServiceAccount admission plugin with its controller,
and the real kubectl (``auth whoami``, ``create token``).

A request "succeeds" here when the authenticated identity reaches the handler:
``SelfSubjectReview`` answers with it (every authenticated user may create one under
the default RBAC policy), so the tests do not depend on other permissions."""

from __future__ import annotations

import base64
import datetime as _dt
import http.client
import json
import os
import re
import ssl
import stat
import subprocess
import time
import uuid

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from apiserver_min.api import names
from apiserver_min.authn import jwt
from apiserver_min.pki import Pki, cert_pem, connection_config, key_pem, make_ca, new_key, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, KUBECTL, ApiServerError, ApiServerProcess
from tests.components import free_port
from tests.helpers import uniq, wait_for

AUTHN = f"/apis/{names.AUTHENTICATION_GROUP}/v1"
WHOAMI = f"{AUTHN}/selfsubjectreviews"
ISSUER = "https://issuer.test"
OLD_ISSUER = "https://old-issuer.test"
NS = "authn"
TOKENS_CSV = 'alice-token-0001,alice,uid-alice,"system:masters,devs"\n\nbob-token-0002,bob,uid-bob\n'
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"


def pem_private(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem_public(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class Server:
    """The module's server with what the tests need to forge credentials: its
    signing key, a verification-only key and a key it does not trust."""

    def __init__(self, proc: ApiServerProcess, signing, extra, stranger):
        self.proc, self.signing, self.extra, self.stranger = proc, signing, extra, stranger

    def anon(self, method: str, path: str, body=None, token: str | None = None, headers: dict | None = None):
        """A request without a client certificate, with an optional bearer token."""
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        return self.proc.json(method, path, body if body is not None or method != "POST" else {}, h, client_cert=False)

    def admin(self, method: str, path: str, body=None, expect=None):
        return self.proc.json(method, path, body, expect=expect)[1]

    def whoami(self, token: str) -> tuple[int, dict]:
        return self.anon("POST", WHOAMI, {}, token)


@pytest.fixture(scope="module")
def main(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    d = tmp_path_factory.mktemp("authn")
    signing, extra = ec.generate_private_key(ec.SECP256R1()), rsa.generate_private_key(65537, 2048)
    stranger = ec.generate_private_key(ec.SECP256R1())
    (d / "sign.pem").write_bytes(pem_private(signing))
    (d / "extra.pub").write_bytes(pem_public(extra))
    (d / "tokens.csv").write_text(TOKENS_CSV)
    proc = ApiServerProcess(
        d / "data",
        free_port(),
        extra_args=[
            "--token-auth-file",
            str(d / "tokens.csv"),
            "--enable-bootstrap-token-auth",
            "--service-account-signing-key-file",
            str(d / "sign.pem"),
            "--service-account-key-file",
            str(d / "extra.pub"),
            "--service-account-issuer",
            ISSUER,
            "--service-account-issuer",
            OLD_ISSUER,
        ],
    )
    with proc:
        proc.json("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}, expect=201)
        yield Server(proc, signing, extra, stranger)


def assert_401(status: int, doc):
    assert status == 401, doc
    assert doc == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def user_of(doc: dict) -> dict:
    assert doc["kind"] == "SelfSubjectReview", doc
    return doc["status"]["userInfo"]


# --- client certificates ------------------------------------------------------------------------------


def _cert_context(server: ApiServerProcess, cert, key) -> ssl.SSLContext:
    d = server.data_dir
    name = uuid.uuid4().hex[:8]
    (d / f"{name}.crt").write_bytes(cert_pem(cert))
    (d / f"{name}.key").write_bytes(key_pem(key))
    ctx = ssl.create_default_context(cafile=str(server.ca_cert))
    ctx.load_cert_chain(str(d / f"{name}.crt"), str(d / f"{name}.key"))
    return ctx


def _request_with(
    server: ApiServerProcess, ctx: ssl.SSLContext, method: str, path: str, token: str | None = None
) -> tuple[int, dict]:
    conn = http.client.HTTPSConnection(server.host, server.port, timeout=10, context=ctx)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _post_with(server: ApiServerProcess, ctx: ssl.SSLContext, path: str) -> tuple[int, dict]:
    return _request_with(server, ctx, "POST", path)


def _client_certificates(server: ApiServerProcess) -> dict[str, ssl.SSLContext]:
    """Client TLS contexts presenting: a valid certificate of the cluster CA (in
    system:masters), one of another CA claiming the same identity, one of ours that has
    expired, one not valid yet, one for server auth only, and the CA certificate itself."""
    ca_cert, ca_key = Pki(str(server.data_dir)).load_ca()
    key = new_key()
    now = _dt.datetime.now(_dt.timezone.utc)

    def ours(cn: str, nb: _dt.datetime, na: _dt.datetime, eku=x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH):
        return (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                        x509.NameAttribute(NameOID.COMMON_NAME, cn),
                    ]
                )
            )
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(nb)
            .not_valid_after(na)
            .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )

    other_ca, other_key = make_ca("not-the-cluster-ca")
    certs = {
        "valid": (sign_leaf(ca_cert, ca_key, key.public_key(), "cert-admin", ["system:masters"], client=True), key),
        "forged": (
            sign_leaf(other_ca, other_key, key.public_key(), "cert-admin", ["system:masters"], client=True),
            key,
        ),
        "expired": (ours("late", now - _dt.timedelta(days=2), now - _dt.timedelta(days=1)), key),
        "not yet valid": (ours("early", now + _dt.timedelta(days=1), now + _dt.timedelta(days=2)), key),
        "server auth only": (
            ours(
                "server",
                now - _dt.timedelta(days=1),
                now + _dt.timedelta(days=1),
                x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
            ),
            key,
        ),
        "CA certificate": (ca_cert, ca_key),
    }
    return {what: _cert_context(server, cert, k) for what, (cert, k) in certs.items()}


def _check_certificate_matrix(server: ApiServerProcess, token: str | None = None) -> None:
    """The matrix for one server: a valid certificate is served (200), every bad one
    is a 401 Status whatever --anonymous-auth says (never a failed handshake), and a
    valid bearer token next to a bad certificate still authenticates."""
    contexts = _client_certificates(server)
    status, doc = _request_with(server, contexts["valid"], "GET", "/api/v1/namespaces")
    assert status == 200 and doc["kind"] == "NamespaceList", doc
    status, doc = _post_with(server, contexts["valid"], WHOAMI)
    assert status == 201 and user_of(doc) == {
        "username": "cert-admin",
        "groups": ["system:masters", "system:authenticated"],
    }
    for what, ctx in contexts.items():
        if what == "valid":
            continue
        for method, path in (("GET", "/api/v1/namespaces"), ("POST", WHOAMI), ("GET", "/version")):
            status, doc = _request_with(server, ctx, method, path)
            assert status == 401, (what, method, path, status, doc)
            assert_401(status, doc)
        if token is not None:
            status, doc = _request_with(server, ctx, "POST", WHOAMI, token=token)
            assert status == 201 and user_of(doc)["username"] == "alice", (what, doc)
    # The reason is in the server's log (the client only sees "Unauthorized").
    text = server.log_path.read_text(errors="replace")
    for reason in (
        "x509: certificate signed by unknown authority",
        "has expired or is not yet valid",
        "is before",
        "incompatible key usage",
        "CA certificate cannot be used as a client certificate",
    ):
        assert reason in text, reason
    assert "stay verified in the TLS handshake" not in text


def test_client_certificates(main):
    p = main.proc
    status, doc = p.json("POST", WHOAMI, {})
    assert status == 201 and user_of(doc) == {
        "username": names.ADMIN_USER,
        "groups": ["system:masters", "system:authenticated"],
    }
    ca_cert, ca_key = Pki(str(p.data_dir)).load_ca()
    key = new_key()
    jane = sign_leaf(ca_cert, ca_key, key.public_key(), "jane", ["devs", "ops"], client=True)
    status, doc = _post_with(p, _cert_context(p, jane, key), WHOAMI)
    assert status == 201 and user_of(doc) == {"username": "jane", "groups": ["devs", "ops", "system:authenticated"]}
    # Forged, expired and otherwise unusable certificates: a 401 from the x509
    # authenticator (the handshake accepts any certificate, as upstream's), even
    # though anonymous requests are allowed here.
    _check_certificate_matrix(p, token="alice-token-0001")


def test_client_certificates_without_anonymous(tmp_path):
    proc = ApiServerProcess(tmp_path / "closed", free_port(), extra_args=["--anonymous-auth=false"])
    with proc:
        _check_certificate_matrix(proc)


# --- static token file ---------------------------------------------------------------------------------


def test_static_token_file(main):
    status, doc = main.whoami("alice-token-0001")
    assert status == 201 and user_of(doc) == {
        "username": "alice",
        "uid": "uid-alice",
        "groups": ["system:masters", "devs", "system:authenticated"],
    }
    status, doc = main.anon("GET", "/api/v1/namespaces", token="alice-token-0001")
    assert status == 200 and doc["kind"] == "NamespaceList"
    status, doc = main.whoami("bob-token-0002")
    assert status == 201 and user_of(doc) == {"username": "bob", "uid": "uid-bob", "groups": ["system:authenticated"]}
    # A bad token is 401 everywhere, even though anonymous requests are allowed.
    for method, path in (("POST", WHOAMI), ("GET", "/api/v1/namespaces"), ("GET", "/version")):
        assert_401(*main.anon(method, path, token="alice-token-0002"))
    # Not a bearer credential at all: anonymous, which the authorizer then refuses.
    for header in ("Bearer ", "Basic YWxpY2U6cHc="):
        status, doc = main.anon("POST", WHOAMI, {}, headers={"Authorization": header})
        assert status == 403 and 'User "system:anonymous"' in doc["message"], doc


# --- bootstrap tokens ---------------------------------------------------------------------------------


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _bootstrap_secret(main, token_id: str, secret: str, **data) -> None:
    values = {
        "token-id": token_id,
        "token-secret": secret,
        "usage-bootstrap-authentication": "true",
        **{k.replace("_", "-"): v for k, v in data.items()},
    }
    main.admin(
        "POST",
        f"/api/v1/namespaces/{names.NS_SYSTEM}/secrets",
        {
            "metadata": {"name": f"{names.BOOTSTRAP_TOKEN_SECRET_PREFIX}{token_id}"},
            "type": names.BOOTSTRAP_TOKEN_SECRET_TYPE,
            "data": {k: _b64(v) for k, v in values.items()},
        },
        expect=201,
    )


def test_bootstrap_tokens(main):
    future = (_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _bootstrap_secret(
        main, "abcdef", "0123456789abcdef", expiration=future, auth_extra_groups="system:bootstrappers:workers"
    )
    status, doc = main.whoami("abcdef.0123456789abcdef")
    assert status == 201, doc
    assert user_of(doc) == {
        "username": "system:bootstrap:abcdef",
        "groups": ["system:bootstrappers", "system:bootstrappers:workers", "system:authenticated"],
    }
    assert_401(*main.whoami("abcdef.0123456789abcdee"))  # wrong secret
    assert_401(*main.whoami("zzzzzz.0123456789abcdef"))  # no such token
    _bootstrap_secret(main, "expire", "0123456789abcdef", expiration="2020-01-01T00:00:00Z")
    assert_401(*main.whoami("expire.0123456789abcdef"))
    _bootstrap_secret(main, "signer", "0123456789abcdef", usage_bootstrap_authentication="false")
    assert_401(*main.whoami("signer.0123456789abcdef"))
    _bootstrap_secret(main, "badgrp", "0123456789abcdef", auth_extra_groups="system:masters")
    assert_401(*main.whoami("badgrp.0123456789abcdef"))
    # Revoked: deleting the secret ends the token.
    main.admin("DELETE", f"/api/v1/namespaces/{names.NS_SYSTEM}/secrets/bootstrap-token-abcdef", expect=200)
    wait_for(lambda: main.whoami("abcdef.0123456789abcdef")[0] == 401, what="the deleted bootstrap token to fail")


# --- service-account tokens -----------------------------------------------------------------------------


def _service_account(main, name: str, ns: str = NS, **fields) -> dict:
    return main.admin(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": name}, **fields}, expect=201
    )


def _token_request(main, name: str, spec: dict | None = None, ns: str = NS, expect=201) -> dict:
    body = {"apiVersion": f"{names.AUTHENTICATION_GROUP}/v1", "kind": "TokenRequest", "spec": spec or {}}
    return main.admin("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token", body, expect=expect)


def _claims(ns: str, name: str, uid: str, *, iss: str = ISSUER, aud=(ISSUER,), exp_in: int = 3600) -> dict:
    now = int(time.time())
    return {
        "iss": iss,
        "sub": f"system:serviceaccount:{ns}:{name}",
        "aud": list(aud),
        "iat": now,
        "nbf": now,
        "exp": now + exp_in,
        "orch.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": uid}},
    }


def test_token_request_and_review_round_trip(main):
    sa = _service_account(main, "robot")
    uid = sa["metadata"]["uid"]
    before = time.time()
    tr = _token_request(main, "robot")
    assert tr["kind"] == "TokenRequest" and tr["apiVersion"] == f"{names.AUTHENTICATION_GROUP}/v1"
    assert tr["spec"] == {"audiences": [ISSUER], "expirationSeconds": 3600}
    token = tr["status"]["token"]
    exp = _dt.datetime.fromisoformat(tr["status"]["expirationTimestamp"].replace("Z", "+00:00")).timestamp()
    assert before + 3600 - 2 <= exp <= time.time() + 3600 + 1
    claims = jwt.decode_unverified(token)[1]
    assert claims["iss"] == ISSUER and claims["sub"] == f"system:serviceaccount:{NS}:robot"
    assert claims["orch.io"] == {"namespace": NS, "serviceaccount": {"name": "robot", "uid": uid}}
    expected = {
        "username": f"system:serviceaccount:{NS}:robot",
        "uid": uid,
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
    }
    status, doc = main.whoami(token)
    assert status == 201 and user_of(doc) == expected
    review = main.admin("POST", f"{AUTHN}/tokenreviews", {"spec": {"token": token}}, expect=201)
    assert review["kind"] == "TokenReview"
    assert review["status"] == {"authenticated": True, "user": expected, "audiences": [ISSUER]}
    review = main.admin(
        "POST", f"{AUTHN}/tokenreviews", {"spec": {"token": token, "audiences": ["elsewhere"]}}, expect=201
    )
    assert review["status"]["authenticated"] is False
    assert "invalid for the target audiences" in review["status"]["error"]
    # A token for another audience does not open this API; TokenReview for that audience accepts it.
    other = _token_request(main, "robot", {"audiences": ["vault"], "expirationSeconds": 7200})
    assert other["spec"]["expirationSeconds"] == 7200
    assert_401(*main.whoami(other["status"]["token"]))
    review = main.admin(
        "POST",
        f"{AUTHN}/tokenreviews",
        {"spec": {"token": other["status"]["token"], "audiences": ["vault"]}},
        expect=201,
    )
    assert review["status"]["authenticated"] is True and review["status"]["audiences"] == ["vault"]
    status, doc = main.proc.json("POST", f"{AUTHN}/tokenreviews", {"spec": {}})
    assert status == 400, doc
    review = main.admin("POST", f"{AUTHN}/tokenreviews", {"spec": {"token": "garbage"}}, expect=201)
    assert review["status"]["authenticated"] is False and review["status"]["error"] == "invalid bearer token"


def test_service_account_token_forged_expired_revoked(main):
    uid = _service_account(main, "victim")["metadata"]["uid"]
    good = _token_request(main, "victim")["status"]["token"]
    assert main.whoami(good)[0] == 201
    # Signed by a verification-only key (--service-account-key-file): accepted; by the
    # signing key for the older issuer: accepted.
    assert main.whoami(jwt.encode(_claims(NS, "victim", uid), main.extra))[0] == 201
    assert main.whoami(jwt.encode(_claims(NS, "victim", uid, iss=OLD_ISSUER), main.signing))[0] == 201
    # Forged: a key the server does not know; a payload swapped under a valid signature.
    assert_401(*main.whoami(jwt.encode(_claims(NS, "victim", uid), main.stranger)))
    h, _, s = good.split(".")
    swapped = jwt.b64url_encode(json.dumps(_claims(NS, "default", uid)).encode())
    assert_401(*main.whoami(f"{h}.{swapped}.{s}"))
    # Expired (well beyond the 60 s leeway), though signed by the server's own key.
    assert_401(*main.whoami(jwt.encode(_claims(NS, "victim", uid, exp_in=-600), main.signing)))
    # The right signature but a uid that is not the account's.
    assert_401(*main.whoami(jwt.encode(_claims(NS, "victim", "another-uid"), main.signing)))
    # Revoked: deleting the account ends its tokens.
    main.admin("DELETE", f"/api/v1/namespaces/{NS}/serviceaccounts/victim", expect=200)
    wait_for(lambda: main.whoami(good)[0] == 401, what="the deleted account's token to fail")
    assert_401(*main.whoami(good))
    review = main.admin("POST", f"{AUTHN}/tokenreviews", {"spec": {"token": good}}, expect=201)
    assert review["status"]["authenticated"] is False and "not found" in review["status"]["error"]
    # An account of the same name made again does not bring the old tokens back.
    _service_account(main, "victim")
    assert_401(*main.whoami(good))


def test_pod_bound_tokens(main):
    _service_account(main, "bound")
    pod = main.admin(
        "POST",
        f"/api/v1/namespaces/{NS}/pods",
        {
            "metadata": {"name": "bp"},
            "spec": {"serviceAccountName": "bound", "containers": [{"name": "c", "image": "busybox"}]},
        },
        expect=201,
    )
    pod_uid = pod["metadata"]["uid"]
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "bp", "uid": pod_uid}
    token = _token_request(main, "bound", {"boundObjectRef": ref})["status"]["token"]
    status, doc = main.whoami(token)
    assert status == 201, doc
    assert user_of(doc)["extra"] == {names.USER_EXTRA_POD_NAME: ["bp"], names.USER_EXTRA_POD_UID: [pod_uid]}
    assert jwt.decode_unverified(token)[1]["orch.io"]["pod"] == {"name": "bp", "uid": pod_uid}
    assert (
        "UID in record" in _token_request(main, "bound", {"boundObjectRef": {**ref, "uid": "x"}}, expect=409)["message"]
    )
    assert "different serviceaccount" in _token_request(main, "default", {"boundObjectRef": ref}, expect=400)["message"]
    msg = _token_request(
        main, "bound", {"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}}, expect=400
    )["message"]
    assert "cannot bind token to object of type v1, Kind=ConfigMap" in msg
    _token_request(main, "bound", {"boundObjectRef": {**ref, "name": "missing-pod"}}, expect=404)
    msg = _token_request(main, "bound", {"expirationSeconds": 599}, expect=422)["message"]
    assert "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes" in msg
    assert "2^32" in _token_request(main, "bound", {"expirationSeconds": 2**32 + 1}, expect=422)["message"]
    _token_request(main, "nobody", expect=404)
    # The pod goes: the token bound to it goes with it.
    main.admin("DELETE", f"/api/v1/namespaces/{NS}/pods/bp?gracePeriodSeconds=0", expect=200)
    wait_for(lambda: main.whoami(token)[0] == 401, what="the pod-bound token to fail")


# --- anonymous requests and a server with generated keys ----------------------------------------------


def test_anonymous_requests(main, tmp_path):
    status, doc = main.anon("POST", WHOAMI, {})
    assert status == 403 and 'User "system:anonymous" cannot create resource "selfsubjectreviews"' in doc["message"]
    assert main.anon("GET", "/readyz")[0] != 401
    proc = ApiServerProcess(tmp_path / "closed", free_port(), extra_args=["--anonymous-auth=false"])
    with proc:
        for method, path in (("GET", "/version"), ("GET", "/api/v1/namespaces"), ("POST", WHOAMI)):
            status, doc = proc.json(method, path, {} if method == "POST" else None, client_cert=False)
            assert_401(status, doc)
        status, doc = proc.json("POST", WHOAMI, {})
        assert status == 201 and user_of(doc)["username"] == names.ADMIN_USER
        # No key flags: a signing key was generated, private, and TokenRequest works with the default issuer.
        key_file = tmp_path / "closed" / "pki" / "sa.key"
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        wait_for(
            lambda: proc.json("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            what="the default service account",
        )
        status, tr = proc.json("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", {"spec": {}})
        assert status == 201, tr
        token = tr["status"]["token"]
        assert jwt.decode_unverified(token)[1]["iss"] == names.DEFAULT_SERVICE_ACCOUNT_ISSUER
        jwt.verify(token, jwt.load_public_keys(key_file.read_bytes(), "sa.key"))
        status, doc = proc.json("POST", WHOAMI, {}, {"Authorization": f"Bearer {token}"}, client_cert=False)
        assert status == 201 and user_of(doc)["username"] == "system:serviceaccount:default:default"


def test_bad_authentication_files_stop_the_start(tmp_path):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    bad_csv = tmp_path / "tokens.csv"
    bad_csv.write_text("t1,alice,u1\nt2,bob\n")
    with pytest.raises(ApiServerError) as info:
        ApiServerProcess(tmp_path / "a", free_port(), extra_args=["--token-auth-file", str(bad_csv)]).start()
    assert f"token file {bad_csv}, line 2: needs at least 3 columns" in str(info.value)
    bad_key = tmp_path / "sa.pub"
    bad_key.write_text("not a key\n")
    with pytest.raises(ApiServerError) as info:
        ApiServerProcess(tmp_path / "b", free_port(), extra_args=["--service-account-key-file", str(bad_key)]).start()
    assert f"--service-account-key-file {bad_key}: no RSA or ECDSA" in str(info.value)


# --- the ServiceAccount admission plugin and the default-account controller ------------------------


def test_default_account_and_root_ca_in_every_namespace(main):
    ns = uniq("fresh")
    main.admin("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, expect=201)
    p = main.proc
    sa = wait_for(
        lambda: (
            p.json("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200
            and p.json("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[1]
        ),
        what="the default account",
    )
    cm_path = f"/api/v1/namespaces/{ns}/configmaps/{names.ROOT_CA_CONFIGMAP}"
    cm = wait_for(lambda: p.json("GET", cm_path)[0] == 200 and p.json("GET", cm_path)[1], what="the root CA map")
    assert cm["data"] == {"ca.crt": p.ca_cert.read_text()}
    assert cm["metadata"]["annotations"][names.ANNOTATION_DESCRIPTION]
    # Deleted or changed, both come back.
    main.admin("DELETE", f"/api/v1/namespaces/{ns}/serviceaccounts/default", expect=200)
    main.proc.json(
        "PATCH", cm_path, {"data": {"ca.crt": "tampered"}}, {"Content-Type": "application/merge-patch+json"}, expect=200
    )
    wait_for(
        lambda: (lambda r: r[0] == 200 and r[1]["metadata"]["uid"] != sa["metadata"]["uid"])(
            p.json("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
        ),
        what="a new default account",
    )
    wait_for(lambda: p.json("GET", cm_path)[1]["data"] == {"ca.crt": p.ca_cert.read_text()}, what="the CA restored")


def _pod(name: str, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_service_account_admission(main):
    path = f"/api/v1/namespaces/{NS}/pods"
    pod = main.admin("POST", path, _pod("plain", initContainers=[{"name": "i", "image": "busybox"}]), expect=201)
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "default"
    (volume,) = spec["volumes"]
    assert re.fullmatch(f"{names.SERVICEACCOUNT_VOLUME_PREFIX}{SUFFIX}", volume["name"]), volume["name"]
    sources = volume["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"] == {"name": names.ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert sources[2]["downwardAPI"]["items"] == [
        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    ]
    mount = {"name": volume["name"], "readOnly": True, "mountPath": "/var/run/secrets/orch.io/serviceaccount"}
    assert spec["containers"][0]["volumeMounts"] == [mount] and spec["initContainers"][0]["volumeMounts"] == [mount]
    status, doc = main.proc.json("POST", path, _pod("lost", serviceAccountName="nope"))
    assert status == 403 and doc["message"] == (
        f'pods "lost" is forbidden: error looking up service account {NS}/nope: serviceaccount "nope" not found'
    )
    _service_account(main, "quiet", automountServiceAccountToken=False, imagePullSecrets=[{"name": "regcred"}])
    quiet = main.admin("POST", path, _pod("quiet", serviceAccountName="quiet"), expect=201)["spec"]
    assert "volumes" not in quiet and quiet["imagePullSecrets"] == [{"name": "regcred"}]
    opted_out = main.admin("POST", path, _pod("optout", automountServiceAccountToken=False), expect=201)["spec"]
    assert "volumes" not in opted_out and opted_out["serviceAccountName"] == "default"
    mirror = {
        "metadata": {"name": "mirror", "annotations": {names.ANNOTATION_CONFIG_MIRROR: "h"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
    }
    created = main.admin("POST", path, mirror, expect=201)["spec"]
    assert "serviceAccountName" not in created and "volumes" not in created
    mirror["metadata"]["name"], mirror["spec"]["serviceAccountName"] = "mirror2", "default"
    status, doc = main.proc.json("POST", path, mirror)
    assert status == 403 and "a mirror pod may not reference service accounts" in doc["message"]


# --- kubectl ------------------------------------------------------------------------------------------


def test_kubectl_whoami_and_create_token(main, tmp_path):
    if not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["HOME"] = str(tmp_path)

    def kubectl(config, *args):
        r = subprocess.run(
            [KUBECTL, "--kubeconfig", str(config), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stdout}\n{r.stderr}"
        return r.stdout

    p = main.proc
    out = kubectl(p.kubeconfig, "auth", "whoami")
    assert re.search(rf"Username\s+{names.ADMIN_USER}", out) and "system:masters" in out, out
    _service_account(main, "cli")
    token = kubectl(p.kubeconfig, "create", "token", "cli", "-n", NS, "--duration=15m").strip()
    claims = jwt.decode_unverified(token)[1]
    assert claims["exp"] - claims["iat"] == 900 and claims["sub"] == f"system:serviceaccount:{NS}:cli"
    cfg = tmp_path / "cli.orchconfig"
    cfg.write_text(yaml.safe_dump(connection_config(p.url, p.ca_cert.read_bytes(), "cli", token=token)))
    doc = json.loads(kubectl(cfg, "auth", "whoami", "-o", "json"))
    assert doc["apiVersion"] == "authentication.k8s.io/v1"
    assert doc["status"]["userInfo"]["username"] == f"system:serviceaccount:{NS}:cli"
    assert f"system:serviceaccounts:{NS}" in doc["status"]["userInfo"]["groups"]
