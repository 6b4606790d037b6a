"""CertificateSigningRequests, bootstrap tokens and cluster-info against a real
orch-apiserver: validation and the approval/status sub-resources, the approval and
signing permission plugins, the bundled approver, signer and cleaner, the bootstrap
signer's detached JWS, the token cleaner, the ``orch-apiserver token`` CLI, and the
"normal user obtains a certificate" steps with the real kubectl."""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import http.client
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import time

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver_min.api import bootstraptoken as bt
from apiserver_min.api import names
from apiserver_min.controllers import certificates as cc
from apiserver_min.pki import Pki, cert_pem, connection_config, key_pem, make_ca, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, KUBECTL, ApiServerProcess
from tests.components import free_port
from tests.helpers import uniq, wait_for

CSRS = f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests"
WHOAMI = f"/apis/{names.AUTHENTICATION_GROUP}/v1/selfsubjectreviews"
SECRETS = f"/api/v1/namespaces/{names.NS_SYSTEM}/secrets"
CLUSTER_INFO = f"/api/v1/namespaces/{names.NS_PUBLIC}/configmaps/{names.CLUSTER_INFO_CONFIGMAP}"
NODE_CLIENT_USAGES = ["digital signature", "key encipherment", "client auth"]
UTC = _dt.timezone.utc


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def make_request(cn: str, orgs=(), dns=(), ips=(), key=None) -> tuple[object, bytes]:
    key = key or ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_body(name: str, pem: bytes, signer: str, usages=NODE_CLIENT_USAGES, **spec) -> dict:
    return {
        "apiVersion": f"{names.CERTIFICATES_GROUP}/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(pem), "signerName": signer, "usages": list(usages), **spec},
    }


class Identity:
    """Requests to the server as someone else: a client certificate or a bearer token."""

    def __init__(self, server: ApiServerProcess, *, cert: tuple[str, str] | None = None, token: str | None = None):
        self.server, self.cert, self.token = server, cert, token

    def json(self, method: str, path: str, body=None) -> tuple[int, dict]:
        ctx = ssl.create_default_context(cafile=str(self.server.ca_cert))
        if self.cert:
            ctx.load_cert_chain(*self.cert)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conn = http.client.HTTPSConnection(self.server.host, self.server.port, timeout=10, context=ctx)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        return resp.status, (json.loads(data) if data else None)

    def whoami(self) -> dict:
        status, doc = self.json("POST", WHOAMI, {})
        assert status == 201, doc
        return doc["status"]["userInfo"]


class Env:
    def __init__(self, proc: ApiServerProcess, tmp):
        self.proc, self.tmp = proc, tmp
        self.ca_cert, self.ca_key = Pki(str(proc.data_dir)).load_ca()

    def admin(self, method: str, path: str, body=None, expect=None):
        return self.proc.json(method, path, body, expect=expect)[1]

    def mint(self, cn: str, orgs=()) -> Identity:
        """A client certificate signed directly by the cluster CA, as files."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = sign_leaf(self.ca_cert, self.ca_key, key.public_key(), cn, orgs, client=True)
        stem = self.tmp / uniq("id")
        (stem.with_suffix(".crt")).write_bytes(cert_pem(cert))
        (stem.with_suffix(".key")).write_bytes(key_pem(key))
        return Identity(self.proc, cert=(str(stem.with_suffix(".crt")), str(stem.with_suffix(".key"))))

    def identity_from(self, key, cert_pem_data: bytes) -> Identity:
        stem = self.tmp / uniq("issued")
        stem.with_suffix(".crt").write_bytes(cert_pem_data)
        stem.with_suffix(".key").write_bytes(key_pem(key))
        return Identity(self.proc, cert=(str(stem.with_suffix(".crt")), str(stem.with_suffix(".key"))))

    def get_csr(self, name: str) -> dict:
        return self.admin("GET", f"{CSRS}/{name}", expect=200)

    def issued(self, name: str, timeout: float = 2.0) -> bytes:
        doc = wait_for(
            lambda: (lambda d: d if (d.get("status") or {}).get("certificate") else None)(self.get_csr(name)),
            timeout,
            f"csr {name} to be issued",
        )
        return base64.b64decode(doc["status"]["certificate"])

    def token_secret(self, token: str, **kw) -> None:
        self.admin("POST", SECRETS, bt.secret_for_token(bt.parse_token(token), **kw), expect=201)


@functools.lru_cache(maxsize=None)
def _has_flag(flag: str) -> bool:
    out = subprocess.run([str(APISERVER_BIN), "--help"], capture_output=True, text=True, timeout=30).stdout
    return flag in out


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    args = ["--auto-approve-node-serving-certificates", "--cluster-signing-duration", "720h"]
    if _has_flag("--enable-bootstrap-token-auth"):
        args.append("--enable-bootstrap-token-auth")
    tmp = tmp_path_factory.mktemp("csr")
    proc = ApiServerProcess(tmp / "data", free_port(), extra_args=args)
    with proc:
        yield Env(proc, tmp)


def _cert_usages(cert: x509.Certificate) -> tuple[x509.KeyUsage | None, list]:
    try:
        ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        ku = None
    return ku, list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


# --- node client certificates -----------------------------------------------------------------------


def _node_flow(env: Env, requester: Identity, node: str) -> None:
    key, pem = make_request(f"system:node:{node}", ["system:nodes"])
    name = uniq("node-csr")
    t0 = time.monotonic()
    status, doc = requester.json("POST", CSRS, csr_body(name, pem, names.SIGNER_NODE_AGENT_CLIENT))
    assert status == 201, doc
    assert doc["spec"]["username"] == requester.whoami()["username"]
    assert names.GROUP_BOOTSTRAPPERS in doc["spec"]["groups"] and doc.get("status") in ({}, None)
    cert_data = env.issued(name, timeout=2.0)
    assert time.monotonic() - t0 < 2.0
    csr = env.get_csr(name)
    [cond] = csr["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "Approved",
        "True",
        "AutoApproved",
        "Auto approving node-agent client certificate after SubjectAccessReview.",
    )
    cert = x509.load_pem_x509_certificate(cert_data)
    assert cert.subject.rfc4514_string() == f"CN=system:node:{node},O=system:nodes"
    assert cert.issuer == env.ca_cert.subject
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ku, eku = _cert_usages(cert)
    assert ku.digital_signature and ku.key_encipherment and not ku.key_cert_sign
    assert eku == [ExtendedKeyUsageOID.CLIENT_AUTH]
    now = _dt.datetime.now(UTC)
    assert abs((now - cert.not_valid_before_utc).total_seconds() - 300) < 30  # backdated 5 minutes
    # --cluster-signing-duration 720h (long-lived: the end is backdated too).
    assert abs((cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() - 720 * 3600) < 5
    node_id = env.identity_from(key, cert_data)
    assert node_id.whoami() == {"username": f"system:node:{node}", "groups": ["system:nodes", "system:authenticated"]}
    # The node renews its own certificate: approved through selfnodeclient.
    key2, pem2 = make_request(f"system:node:{node}", ["system:nodes"])
    renew = uniq("renew")
    status, doc = node_id.json("POST", CSRS, csr_body(renew, pem2, names.SIGNER_NODE_AGENT_CLIENT))
    assert status == 201, doc
    env.issued(renew)
    assert env.get_csr(renew)["status"]["conditions"][0]["message"] == cc.MSG_SELF_NODE_CLIENT


def test_bootstrap_client_certificate_gets_node_certificate(env):
    bootstrapper = env.mint("system:bootstrap:abcdef", ["system:bootstrappers"])
    _node_flow(env, bootstrapper, uniq("n"))


def test_bootstrap_token_gets_node_certificate(env):
    if not _has_flag("--enable-bootstrap-token-auth"):
        pytest.skip("bootstrap token authentication is not available in this build")
    token = str(bt.generate_token())
    env.token_secret(token, ttl=_dt.timedelta(hours=1), usages=["authentication"])
    _node_flow(env, Identity(env.proc, token=token), uniq("n"))


def test_requests_not_auto_approved(env):
    # Someone allowed to create requests but not bound to nodeclient: stays pending.
    user = env.mint(uniq("eve"))
    role = uniq("csr-creator")
    env.admin(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/clusterroles",
        {
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [names.CERTIFICATES_GROUP],
                    "resources": ["certificatesigningrequests"],
                    "verbs": ["create", "get"],
                }
            ],
        },
        expect=201,
    )
    who = user.whoami()["username"]
    env.admin(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings",
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "apiGroup": names.RBAC_GROUP, "name": who}],
        },
        expect=201,
    )
    _, pem = make_request("system:node:x1", ["system:nodes"])
    unauthorized = uniq("eve-csr")
    wait_for(
        lambda: user.json("POST", CSRS, csr_body(unauthorized, pem, names.SIGNER_NODE_AGENT_CLIENT))[0] == 201,
        what="eve's RBAC binding",
    )
    # A bootstrapper asking with the wrong usages is not recognized either.
    bootstrapper = env.mint("system:bootstrap:qqqqqq", ["system:bootstrappers"])
    wrong = uniq("wrong-usages")
    assert (
        bootstrapper.json(
            "POST", CSRS, csr_body(wrong, pem, names.SIGNER_NODE_AGENT_CLIENT, ["digital signature", "server auth"])
        )[0]
        == 201
    )
    # A good request created after both is issued; by then the two were looked at.
    _, pem_ok = make_request("system:node:x2", ["system:nodes"])
    ok = uniq("ok")
    assert bootstrapper.json("POST", CSRS, csr_body(ok, pem_ok, names.SIGNER_NODE_AGENT_CLIENT))[0] == 201
    env.issued(ok)
    time.sleep(0.2)
    for name in (unauthorized, wrong):
        assert env.get_csr(name).get("status") in ({}, None), name


def test_masters_through_client_signer_rejected(env):
    _, pem = make_request("mallory", ["system:masters"])
    # A bootstrapper may create requests, but not this one.
    status, doc = env.mint("system:bootstrap:mmmmmm", ["system:bootstrappers"]).json(
        "POST", CSRS, csr_body(uniq("m"), pem, names.SIGNER_APISERVER_CLIENT, ["client auth"])
    )
    assert status == 403, doc
    assert "use of orch.io/apiserver-client signer with system:masters group is not allowed" in doc["message"]
    # Even the administrator may not.
    status, doc = env.proc.json("POST", CSRS, csr_body(uniq("m"), pem, names.SIGNER_APISERVER_CLIENT, ["client auth"]))
    assert status == 403, doc


# --- validation and sub-resources ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "change,field,text",
    [
        (lambda s: s.pop("signerName"), "spec.signerName", "Required value"),
        (
            lambda s: s.update(signerName=names.SIGNER_LEGACY_UNKNOWN),
            "spec.signerName",
            "the legacy signerName is not allowed via this API version",
        ),
        (lambda s: s.update(signerName="nodomain"), "spec.signerName", "must be a fully qualified domain"),
        (lambda s: s.pop("usages"), "spec.usages", "usages must be provided"),
        (lambda s: s.update(usages=["client auth", "client auth"]), "spec.usages[1]", "Duplicate value"),
        (lambda s: s.update(usages=["client auth", "teleport"]), "spec.usages[1]", "Unsupported value"),
        (lambda s: s.update(expirationSeconds=599), "spec.expirationSeconds", "less than 600 seconds"),
        (lambda s: s.update(request=b64("not a pem")), "spec.request", "PEM block type must be CERTIFICATE REQUEST"),
    ],
)
def test_create_validation(env, change, field, text):
    _, pem = make_request("someone")
    body = csr_body(uniq("bad"), pem, "example.com/custom", ["client auth"])
    change(body["spec"])
    status, doc = env.proc.json("POST", CSRS, body)
    assert status == 422, doc
    assert any(c["field"] == field and text in c["message"] for c in doc["details"]["causes"]), doc


def _expired_cert() -> bytes:
    ca, ca_key = make_ca("other-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(days=2))
        .not_valid_after(now - _dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    return cert_pem(cert)


def test_subresources_and_cleaner(env):
    _, pem = make_request("custom-user")
    name = uniq("custom")
    created = env.admin("POST", CSRS, csr_body(name, pem, "example.com/custom", ["client auth"]), expect=201)
    assert created["spec"]["username"] == names.ADMIN_USER
    url = f"{CSRS}/{name}"
    # The main resource changes metadata only: spec and status stay.
    cur = env.get_csr(name)
    cur["spec"]["usages"] = ["server auth"]
    cur["metadata"]["labels"] = {"a": "b"}
    cur["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    upd = env.admin("PUT", url, cur, expect=200)
    assert upd["spec"]["usages"] == ["client auth"] and upd["metadata"]["labels"] == {"a": "b"}
    assert upd.get("status") in ({}, None)
    # status may not add Approved.
    cur = env.get_csr(name)
    cur["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "x"}]}
    assert "conditions" not in (env.admin("PUT", f"{url}/status", cur, expect=200).get("status") or {})
    # Conditions must be unique and Approved/Denied exclusive.
    cur = env.get_csr(name)
    cur["status"] = {"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}
    status, doc = env.proc.json("PUT", f"{url}/approval", cur)
    assert status == 422 and "mutually exclusive" in doc["message"], doc
    cur["status"] = {"conditions": [{"type": "Approved", "status": "True"}, {"type": "Approved", "status": "True"}]}
    status, doc = env.proc.json("PUT", f"{url}/approval", cur)
    assert status == 422 and "Duplicate value" in doc["message"], doc
    # approval sets conditions (timestamps filled in) but never the certificate.
    cur = env.get_csr(name)
    cur["status"] = {
        "conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}],
        "certificate": b64(_expired_cert()),
    }
    approved = env.admin("PUT", f"{url}/approval", cur, expect=200)
    cond = approved["status"]["conditions"][0]
    assert cond["lastUpdateTime"] and cond["lastTransitionTime"]
    assert "certificate" not in approved["status"]
    # Approved may not be removed.
    cur = env.get_csr(name)
    cur["status"]["conditions"] = []
    status, doc = env.proc.json("PUT", f"{url}/approval", cur)
    assert status == 422 and 'may not remove a condition of type "Approved"' in doc["message"], doc
    # status.certificate holds CERTIFICATE blocks only.
    cur = env.get_csr(name)
    cur["status"]["certificate"] = b64(key_pem(ec.generate_private_key(ec.SECP256R1())))
    status, doc = env.proc.json("PUT", f"{url}/status", cur)
    assert status == 422 and 'only CERTIFICATE PEM blocks are allowed, found "PRIVATE KEY"' in doc["message"], doc
    cur["status"]["certificate"] = b64("no pem at all")
    status, doc = env.proc.json("PUT", f"{url}/status", cur)
    assert status == 422 and "at least one CERTIFICATE PEM block" in doc["message"], doc
    # A custom signer's request is never signed here; an expired certificate set by its
    # signer makes the cleaner delete the request.
    time.sleep(0.2)
    assert "certificate" not in env.get_csr(name)["status"]
    cur = env.get_csr(name)
    cur["status"]["certificate"] = b64(b"leading text\n" + _expired_cert())
    env.admin("PUT", f"{url}/status", cur, expect=200)
    wait_for(lambda: env.proc.json("GET", url)[0] == 404, 5.0, "the cleaner to delete the expired request")


def test_cleanup_deadlines():
    created = _dt.datetime(2030, 1, 1, tzinfo=UTC)
    stamp = "2030-01-01T00:00:00Z"
    pending = {"metadata": {"creationTimestamp": stamp}}
    assert cc.cleanup_deadline(pending) == created + _dt.timedelta(hours=24)
    for t in ("Approved", "Denied", "Failed"):
        obj = {
            "metadata": {"creationTimestamp": stamp},
            "status": {"conditions": [{"type": t, "status": "True", "lastUpdateTime": "2030-01-01T05:00:00Z"}]},
        }
        assert cc.cleanup_deadline(obj) == created + _dt.timedelta(hours=6), t
    issued = {
        "metadata": {"creationTimestamp": stamp},
        "status": {
            "conditions": [{"type": "Approved", "status": "True", "lastUpdateTime": stamp}],
            "certificate": b64(_expired_cert()),
        },
    }
    assert cc.cleanup_deadline(issued) < _dt.datetime.now(UTC)
    assert cc.lifetime(_dt.timedelta(hours=720), None) == _dt.timedelta(hours=720)
    assert cc.lifetime(_dt.timedelta(hours=1), 86400) == _dt.timedelta(hours=1)
    assert cc.lifetime(_dt.timedelta(hours=720), 600) == _dt.timedelta(minutes=10)


def test_signer_rules(env):
    # Approved by hand but breaking the node client row: Failed, SignerValidationFailure.
    _, pem = make_request("system:node:z", ["system:nodes"], dns=["z.example"])
    name = uniq("sanreq")
    env.admin("POST", CSRS, csr_body(name, pem, names.SIGNER_NODE_AGENT_CLIENT), expect=201)
    body = env.get_csr(name)
    body["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    env.admin("PUT", f"{CSRS}/{name}/approval", body, expect=200)
    failed = wait_for(
        lambda: [c for c in (env.get_csr(name).get("status") or {}).get("conditions") or [] if c["type"] == "Failed"],
        2.0,
        "the Failed condition",
    )
    assert failed[0]["reason"] == "SignerValidationFailure"
    assert failed[0]["message"] == "DNS subjectAltNames are not allowed"
    assert "certificate" not in env.get_csr(name)["status"]
    # The client signer with a short expirationSeconds: exactly that long, start backdated,
    # alt-names kept, usages as asked, no CA bit; RSA keys work too.
    key = rsa.generate_private_key(65537, 2048)
    _, pem = make_request("svc-user", ["devs"], dns=["svc.example"], key=key)
    name = uniq("short")
    env.admin(
        "POST",
        CSRS,
        csr_body(name, pem, names.SIGNER_APISERVER_CLIENT, ["client auth", "digital signature"], expirationSeconds=600),
        expect=201,
    )
    body = env.get_csr(name)
    body["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    env.admin("PUT", f"{CSRS}/{name}/approval", body, expect=200)
    t_approve = _dt.datetime.now(UTC)
    cert = x509.load_pem_x509_certificate(env.issued(name))
    assert abs((cert.not_valid_after_utc - t_approve).total_seconds() - 600) < 5
    assert abs((t_approve - cert.not_valid_before_utc).total_seconds() - 300) < 5
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == ["svc.example"]
    ku, eku = _cert_usages(cert)
    assert ku.digital_signature and not ku.key_encipherment and eku == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # The client signer refuses other usages.
    _, pem = make_request("svc-user")
    name = uniq("serverauth")
    env.admin(
        "POST", CSRS, csr_body(name, pem, names.SIGNER_APISERVER_CLIENT, ["client auth", "server auth"]), expect=201
    )
    body = env.get_csr(name)
    body["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    env.admin("PUT", f"{CSRS}/{name}/approval", body, expect=200)
    failed = wait_for(
        lambda: [c for c in (env.get_csr(name).get("status") or {}).get("conditions") or [] if c["type"] == "Failed"],
        2.0,
        "the Failed condition",
    )
    assert failed[0]["message"] == "invalid usage for client certificate: server auth"


def test_approve_and_sign_need_signer_permissions(env):
    user = env.mint(uniq("helper"))
    who = user.whoami()["username"]
    role = uniq("csr-writer")
    env.admin(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/clusterroles",
        {
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [names.CERTIFICATES_GROUP],
                    "resources": ["certificatesigningrequests"],
                    "verbs": ["get"],
                },
                {
                    "apiGroups": [names.CERTIFICATES_GROUP],
                    "verbs": ["update"],
                    "resources": ["certificatesigningrequests/approval", "certificatesigningrequests/status"],
                },
            ],
        },
        expect=201,
    )
    env.admin(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings",
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "apiGroup": names.RBAC_GROUP, "name": who}],
        },
        expect=201,
    )
    _, pem = make_request("someone")
    name = uniq("perm")
    env.admin("POST", CSRS, csr_body(name, pem, "example.com/custom", ["client auth"]), expect=201)
    body = env.get_csr(name)
    body["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    status, doc = wait_for(
        lambda: (lambda r: r if r[0] != 403 or "signerName" in r[1]["message"] else None)(
            user.json("PUT", f"{CSRS}/{name}/approval", body)
        ),
        what="the RBAC binding",
    )
    assert (
        status == 403
        and 'user not permitted to approve requests with signerName "example.com/custom"' in doc["message"]
    ), doc
    body = env.get_csr(name)
    body["status"] = {"certificate": b64(_expired_cert())}
    status, doc = user.json("PUT", f"{CSRS}/{name}/status", body)
    assert (
        status == 403 and 'user not permitted to sign requests with signerName "example.com/custom"' in doc["message"]
    ), doc
    # Granting approve on <domain>/* is enough.
    env.admin(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/clusterroles",
        {
            "metadata": {"name": role + "-signer"},
            "rules": [
                {
                    "apiGroups": [names.CERTIFICATES_GROUP],
                    "resources": ["signers"],
                    "verbs": ["approve"],
                    "resourceNames": ["example.com/*"],
                }
            ],
        },
        expect=201,
    )
    env.admin(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings",
        {
            "metadata": {"name": role + "-signer"},
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": role + "-signer"},
            "subjects": [{"kind": "User", "apiGroup": names.RBAC_GROUP, "name": who}],
        },
        expect=201,
    )
    body = env.get_csr(name)
    body["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    wait_for(lambda: user.json("PUT", f"{CSRS}/{name}/approval", body)[0] == 200, what="approval with approve on */")


def test_serving_certificates(env):
    node = uniq("srv")
    env.admin(
        "POST",
        "/api/v1/nodes",
        {
            "metadata": {"name": node},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "Hostname", "address": node}]
            },
        },
        expect=201,
    )
    node_id = env.mint(f"system:node:{node}", ["system:nodes"])
    usages = ["digital signature", "key encipherment", "server auth"]
    _, bad = make_request(f"system:node:{node}", ["system:nodes"], dns=[node], ips=["10.9.9.9"])
    _, good = make_request(f"system:node:{node}", ["system:nodes"], dns=[node], ips=["10.1.2.3"])
    bad_name, good_name = uniq("serving-bad"), uniq("serving-good")
    assert node_id.json("POST", CSRS, csr_body(bad_name, bad, names.SIGNER_NODE_AGENT_SERVING, usages))[0] == 201
    assert node_id.json("POST", CSRS, csr_body(good_name, good, names.SIGNER_NODE_AGENT_SERVING, usages))[0] == 201
    cert = x509.load_pem_x509_certificate(env.issued(good_name))
    assert env.get_csr(good_name)["status"]["conditions"][0]["message"] == cc.MSG_NODE_SERVING
    assert _cert_usages(cert)[1] == [ExtendedKeyUsageOID.SERVER_AUTH]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [node]
    assert [str(i) for i in sans.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    time.sleep(0.2)
    assert env.get_csr(bad_name).get("status") in ({}, None)
    # Once the node reports that address too, the pending request is approved.
    cur = env.admin("GET", f"/api/v1/nodes/{node}", expect=200)
    cur["status"]["addresses"].append({"type": "ExternalIP", "address": "10.9.9.9"})
    env.admin("PUT", f"/api/v1/nodes/{node}/status", cur, expect=200)
    env.issued(bad_name)


def test_serving_approval_rules_without_the_flag():
    _, pem = make_request("system:node:n", ["system:nodes"], dns=["n"])
    csr = x509.load_pem_x509_csr(pem)
    usages = ["digital signature", "key encipherment", "server auth"]
    assert cc.node_serving_problem(csr, usages) == ""
    assert cc.node_serving_problem(csr, ["digital signature", "server auth"]) == ""
    assert cc.node_serving_problem(csr, usages + ["client auth"]).startswith("usages did not match")
    assert (
        cc.node_serving_problem(x509.load_pem_x509_csr(make_request("system:node:n", ["system:nodes"])[1]), usages)
        == "DNS or IP subjectAltName is required"
    )
    assert (
        cc.node_serving_problem(x509.load_pem_x509_csr(make_request("n", ["system:nodes"], dns=["n"])[1]), usages)
        == "subject common name does not begin with system:node:"
    )
    node = {"metadata": {"name": "n"}, "status": {"addresses": [{"type": "Hostname", "address": "n"}]}}
    assert cc.serving_sans_match(csr, node)
    assert not cc.serving_sans_match(csr, {"metadata": {"name": "n"}, "status": {"addresses": []}})
    # The approver's decision for a matching serving request when the flag is off.
    ctl = cc.CsrControllers.__new__(cc.CsrControllers)
    ctl.auto_approve_serving = False
    obj = {
        "spec": {
            "request": b64(pem),
            "signerName": names.SIGNER_NODE_AGENT_SERVING,
            "usages": usages,
            "username": "system:node:n",
            "groups": ["system:nodes"],
        }
    }
    assert ctl.approval_message(obj) is None  # never auto-approved without the flag


# --- the normal user's certificate with kubectl --------------------------------------------------------


def test_normal_user_certificate_with_kubectl(env, tmp_path):
    if not os.path.exists(KUBECTL) and shutil.which(KUBECTL) is None:
        pytest.skip(f"{KUBECTL} not installed")
    home = tmp_path / "home"
    home.mkdir()
    envv = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    envv["HOME"] = str(home)

    def kubectl(*args, config=env.proc.kubeconfig, input=None):
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(config), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=30,
            env=envv,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    user = uniq("jane")
    key, pem = make_request(user, ["devs"], key=rsa.generate_private_key(65537, 2048))
    manifest = yaml.safe_dump(
        {
            "apiVersion": f"{names.CERTIFICATES_GROUP}/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": user},
            "spec": {
                "request": b64(pem),
                "signerName": names.SIGNER_APISERVER_CLIENT,
                "expirationSeconds": 86400,
                "usages": ["client auth"],
            },
        }
    )
    r = kubectl("create", "-f", "-", input=manifest)
    assert r.returncode == 0, r.stderr
    r = kubectl(
        "patch",
        "csr",
        user,
        "--subresource=approval",
        "--type=merge",
        "-p",
        '{"status":{"conditions":[{"type":"Approved","status":"True","reason":"Test","message":"ok"}]}}',
    )
    assert r.returncode == 0, r.stderr
    env.issued(user)
    r = kubectl("get", "csr", user, "-o", "jsonpath={.status.certificate}")
    assert r.returncode == 0, r.stderr
    cert_data = base64.b64decode(r.stdout)
    cert = x509.load_pem_x509_certificate(cert_data)
    assert cert.subject.rfc4514_string() == f"CN={user},O=devs"
    # A day (over 8 h): the end is backdated 5 minutes like the start.
    assert abs((cert.not_valid_after_utc - _dt.datetime.now(UTC)).total_seconds() - (86400 - 300)) < 60
    r = kubectl("get", "csr", user)
    assert r.returncode == 0 and "Approved,Issued" in r.stdout, r.stdout + r.stderr
    rbac = yaml.safe_dump_all(
        [
            {
                "apiVersion": f"{names.RBAC_GROUP}/v1",
                "kind": "Role",
                "metadata": {"name": user, "namespace": "default"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
            },
            {
                "apiVersion": f"{names.RBAC_GROUP}/v1",
                "kind": "RoleBinding",
                "metadata": {"name": user, "namespace": "default"},
                "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "Role", "name": user},
                "subjects": [{"apiGroup": names.RBAC_GROUP, "kind": "User", "name": user}],
            },
        ]
    )
    r = kubectl("apply", "-f", "-", input=rbac)
    assert r.returncode == 0, r.stderr
    cfg = connection_config(
        env.proc.url, cert_pem(env.ca_cert), user, cert_pem_data=cert_data, key_pem_data=key_pem(key)
    )
    conf = tmp_path / "jane.orchconfig"
    conf.write_text(yaml.safe_dump(cfg))
    r = wait_for(
        lambda: (lambda r: r if r.returncode == 0 else None)(kubectl("get", "pods", "-n", "default", config=conf)),
        what="jane to list pods",
    )
    r = kubectl("get", "secrets", "-n", "default", config=conf)
    assert r.returncode != 0 and "Forbidden" in r.stderr and f'User "{user}" cannot list resource "secrets"' in r.stderr


# --- bootstrap tokens and cluster-info -----------------------------------------------------------------


def test_cluster_info_signatures(env):
    anon = Identity(env.proc)
    status, cm = anon.json("GET", CLUSTER_INFO)
    assert status == 200, cm
    content = cm["data"]["kubeconfig"]
    server, ca = bt.kubeconfig_cluster(content)
    assert server == env.proc.url and ca == cert_pem(env.ca_cert)
    signing, auth_only = str(bt.generate_token()), str(bt.generate_token())
    env.token_secret(signing, ttl=_dt.timedelta(hours=1), usages=["signing", "authentication"])
    env.token_secret(auth_only, ttl=_dt.timedelta(hours=1), usages=["authentication"])
    key = bt.JWS_KEY_PREFIX + signing.split(".")[0]
    data = wait_for(
        lambda: (lambda d: d if key in d else None)(anon.json("GET", CLUSTER_INFO)[1]["data"]), what="the signature"
    )
    bt.verify_detached(data[key], data["kubeconfig"], signing)
    with pytest.raises(bt.JwsError):
        bt.verify_detached(data[key], data["kubeconfig"], signing[:-1] + ("a" if signing[-1] != "a" else "b"))
    with pytest.raises(bt.JwsError):
        bt.verify_detached(data[key], data["kubeconfig"], auth_only)
    assert bt.JWS_KEY_PREFIX + auth_only.split(".")[0] not in data
    # The verified document pins the CA the token CLI's join command names.
    assert bt.ca_matches(bt.kubeconfig_cluster(data["kubeconfig"])[1], [bt.ca_cert_hash(env.ca_cert)])
    # Deleting the token removes its signature.
    env.admin("DELETE", f"{SECRETS}/bootstrap-token-{signing.split('.')[0]}", expect=200)
    wait_for(lambda: key not in anon.json("GET", CLUSTER_INFO)[1]["data"], what="the signature to go")


def test_expired_token_refused_unsigned_and_cleaned(env):
    token = str(bt.generate_token())
    tid = token.split(".")[0]
    exp = (_dt.datetime.now(UTC) + _dt.timedelta(seconds=2)).replace(microsecond=0) + _dt.timedelta(seconds=1)
    secret = bt.secret_for_token(bt.parse_token(token), usages=["signing", "authentication"])
    secret["data"]["expiration"] = b64(exp.strftime("%Y-%m-%dT%H:%M:%SZ"))
    env.admin("POST", SECRETS, secret, expect=201)
    anon = Identity(env.proc)
    wait_for(lambda: bt.JWS_KEY_PREFIX + tid in anon.json("GET", CLUSTER_INFO)[1]["data"], what="the signature")
    if _has_flag("--enable-bootstrap-token-auth"):
        assert Identity(env.proc, token=token).json("POST", WHOAMI, {})[0] == 201
    wait_for(
        lambda: env.proc.json("GET", f"{SECRETS}/bootstrap-token-{tid}")[0] == 404,
        6.0,
        "the token cleaner to delete the expired secret",
    )
    assert bt.JWS_KEY_PREFIX + tid not in anon.json("GET", CLUSTER_INFO)[1]["data"]
    if _has_flag("--enable-bootstrap-token-auth"):
        assert Identity(env.proc, token=token).json("POST", WHOAMI, {})[0] == 401
    # Already expired when created: deleted at once.
    old = str(bt.generate_token())
    secret = bt.secret_for_token(bt.parse_token(old))
    secret["data"]["expiration"] = b64("2020-01-01T00:00:00Z")
    env.admin("POST", SECRETS, secret, expect=201)
    wait_for(
        lambda: env.proc.json("GET", f"{SECRETS}/bootstrap-token-{old.split('.')[0]}")[0] == 404,
        3.0,
        "the expired secret to go",
    )


def _token_cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(APISERVER_BIN), "token", *args, "--data-dir", str(env.proc.data_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_token_cli(env):
    r = _token_cli(env, "create", "--ttl", "2h", "--description", "for n7", "--groups", "system:bootstrappers:w")
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert bt.TOKEN_RE.match(token), r.stdout
    tid = token.split(".")[0]
    secret = env.admin("GET", f"{SECRETS}/bootstrap-token-{tid}", expect=200)
    ts = bt.token_from_secret(secret)
    assert str(ts.token) == token and ts.usages == ("authentication", "signing")
    assert ts.groups == ("system:bootstrappers:w",) and ts.description == "for n7"
    assert abs((ts.expiration - _dt.datetime.now(UTC)).total_seconds() - 7200) < 30
    r = _token_cli(env, "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split() == ["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA", "GROUPS"]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith(token))
    assert "authentication,signing" in line and "for n7" in line and "system:bootstrappers:w" in line
    r = _token_cli(env, "create", "--print-join-command", "--ttl", "0")
    assert r.returncode == 0, r.stderr
    parts = r.stdout.strip().split(" ")
    assert parts[:3] == ["orch-agent", "join", "--server"] and parts[3] == f"https://127.0.0.1:{env.proc.port}"
    assert parts[4] == "--token" and bt.TOKEN_RE.match(parts[5])
    assert parts[6:] == ["--discovery-token-ca-cert-hash", bt.ca_cert_hash(env.ca_cert)]
    assert "expiration" not in env.admin("GET", f"{SECRETS}/bootstrap-token-{parts[5][:6]}", expect=200)["data"]
    r = _token_cli(env, "create", token)
    assert r.returncode == 1 and f"a bootstrap token with id '{tid}' already exists" in r.stderr
    r = _token_cli(env, "delete", tid)
    assert r.returncode == 0 and f"bootstrap token '{tid}' deleted" in r.stdout, r.stderr
    assert env.proc.json("GET", f"{SECRETS}/bootstrap-token-{tid}")[0] == 404
    r = _token_cli(env, "delete", parts[5])
    assert r.returncode == 0, r.stderr
    r = _token_cli(env, "delete", tid)
    assert r.returncode == 1 and "not found" in r.stderr
    # Clear errors.
    r = _token_cli(env, "create", "--ttl", "forever")
    assert r.returncode == 2 and "invalid value 'forever' for --ttl" in r.stderr, r.stderr
    r = _token_cli(env, "create", "--groups", "system:masters")
    assert r.returncode == 2 and "must start with system:bootstrappers:" in r.stderr, r.stderr
    r = _token_cli(env, "create", "--usages", "everything")
    assert r.returncode == 2 and "'everything'" in r.stderr, r.stderr
    cfg = yaml.safe_load(env.proc.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead = env.tmp / "dead.orchconfig"
    dead.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [str(APISERVER_BIN), "token", "list", "--orchconfig", str(dead)], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 1 and "cannot reach the API server at https://127.0.0.1:" in r.stderr, r.stderr
    r = subprocess.run(
        [str(APISERVER_BIN), "token", "list", "--data-dir", str(env.tmp / "nowhere")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1 and "cannot read the connection config" in r.stderr, r.stderr


def test_server_log_is_clean(env):
    """Run last: no controller hit an unexpected error while the tests above ran."""
    text = env.proc.log_path.read_text(errors="replace")
    assert "Traceback" not in text and "sync failed" not in text, env.proc.log_tail(80)
    assert "csr" in text and "signed by" in text


def test_signing_options_and_ca_reload(tmp_path):
    from apiserver_min.options import OptionsError, parse

    o = parse([])
    assert o.cluster_signing_duration == 365 * 86400 and o.cluster_signing_files == ()
    assert o.auto_approve_node_serving_certificates is False
    ca1, key1 = make_ca("signer-one")
    crt, key = tmp_path / "s.crt", tmp_path / "s.key"
    crt.write_bytes(cert_pem(ca1))
    key.write_bytes(key_pem(key1))
    o = parse(
        [
            "--cluster-signing-cert-file",
            str(crt),
            "--cluster-signing-key-file",
            str(key),
            "--cluster-signing-duration",
            "1h",
        ]
    )
    assert o.cluster_signing_duration == 3600
    assert {s for s, _, _ in o.cluster_signing_files} == {
        names.SIGNER_APISERVER_CLIENT,
        names.SIGNER_NODE_AGENT_CLIENT,
        names.SIGNER_NODE_AGENT_SERVING,
    }
    o = parse(
        [
            "--cluster-signing-node-agent-serving-cert-file",
            str(crt),
            "--cluster-signing-node-agent-serving-key-file",
            str(key),
        ]
    )
    assert o.cluster_signing_files == ((names.SIGNER_NODE_AGENT_SERVING, str(crt), str(key)),)
    for argv, text in (
        (["--cluster-signing-duration=-1h"], "must not be negative"),
        (["--cluster-signing-cert-file", str(crt)], "must be given together"),
        (
            [
                "--cluster-signing-cert-file",
                str(crt),
                "--cluster-signing-key-file",
                str(key),
                "--cluster-signing-apiserver-client-cert-file",
                str(crt),
                "--cluster-signing-apiserver-client-key-file",
                str(key),
            ],
            "cannot be given together",
        ),
        (["--cluster-signing-cert-file", "/nonexistent", "--cluster-signing-key-file", str(key)], "no such file"),
    ):
        with pytest.raises(OptionsError, match=text):
            parse(argv)
    # The signing CA is re-read when its files change.
    authority = cc.CertificateAuthority(str(crt), str(key))
    csr = x509.load_pem_x509_csr(make_request("u")[1])
    first = x509.load_pem_x509_certificate(authority.sign(csr, ["client auth"], _dt.timedelta(hours=1)))
    assert first.issuer == ca1.subject
    ca2, key2 = make_ca("signer-two")
    crt.write_bytes(cert_pem(ca2))
    key.write_bytes(key_pem(key2))
    os.utime(crt, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    second = x509.load_pem_x509_certificate(authority.sign(csr, ["client auth"], _dt.timedelta(hours=1)))
    assert second.issuer == ca2.subject
    second.verify_directly_issued_by(ca2)
