"""Impersonation end to end: the ``Impersonate-*`` headers (``kubectl --as``, ``--as-group``,
``--as-uid``) against a real orch-apiserver, as the admin (system:masters may impersonate
anyone) and as a user with client certificate whose RBAC rules allow some impersonation."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import subprocess
import uuid

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver_min.api import names
from apiserver_min.pki import Pki, cert_pem, connection_config, key_pem, new_key, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, KUBECTL, ApiServerProcess
from tests.components import free_port
from tests.helpers import wait_for

NS = "imp"
RBAC = f"/apis/{names.RBAC_GROUP}/v1"
WHOAMI = f"/apis/{names.AUTHENTICATION_GROUP}/v1/selfsubjectreviews"
CSRS = f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests"


class Client:
    """HTTPS with a client certificate (the admin's, or one signed by the server's CA),
    with any headers, repeated ones too."""

    def __init__(self, server: ApiServerProcess, cn: str | None = None):
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(server.ca_cert))
        if cn is None:
            self.kubeconfig = server.kubeconfig
            self.ctx.load_cert_chain(*(str(p) for p in server.client_cert_files()))
            return
        ca_cert, ca_key = Pki(str(server.data_dir)).load_ca()
        key = new_key()
        cert = sign_leaf(ca_cert, ca_key, key.public_key(), cn, (), client=True)
        crt, keyf = server.data_dir / f"{cn}.crt", server.data_dir / f"{cn}.key"
        crt.write_bytes(cert_pem(cert))
        keyf.write_bytes(key_pem(key))
        self.ctx.load_cert_chain(str(crt), str(keyf))
        self.kubeconfig = server.data_dir / f"{cn}.orchconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                connection_config(
                    server.url, server.ca_cert.read_bytes(), cn, cert_pem_data=cert_pem(cert), key_pem_data=key_pem(key)
                )
            )
        )

    def json(self, method: str, path: str, body=None, headers: list[tuple[str, str]] = ()) -> tuple[int, dict]:
        conn = http.client.HTTPSConnection(self.server.host, self.server.port, timeout=10, context=self.ctx)
        try:
            conn.putrequest(method, path)
            data = json.dumps(body).encode() if body is not None else b""
            for k, v in [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *headers]:
                conn.putheader(k, v)
            conn.endheaders(data)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else {})
        finally:
            conn.close()

    def whoami(self, headers: list[tuple[str, str]]) -> tuple[int, dict]:
        return self.json("POST", WHOAMI, {}, headers)


def kubectl(client: Client, home, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["HOME"] = str(home)
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(client.kubeconfig), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(tmp_path_factory.mktemp("impersonation"), free_port())
    with s:
        s.json("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}, expect=201)
        yield s


@pytest.fixture(scope="module")
def admin(server):
    return Client(server)


def _grant(server, name, rules, subject, ns=""):
    scope = f"/namespaces/{ns}" if ns else ""
    role_kind = "Role" if ns else "ClusterRole"
    server.json("POST", f"{RBAC}{scope}/{role_kind.lower()}s", {"metadata": {"name": name}, "rules": rules}, expect=201)
    server.json(
        "POST",
        f"{RBAC}{scope}/{role_kind.lower()}bindings",
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "User", "apiGroup": names.RBAC_GROUP, "name": subject}],
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": role_kind, "name": name},
        },
        expect=201,
    )


@pytest.fixture(scope="module")
def alice(server):
    """alice may impersonate the user bob and service accounts in NS, nothing else;
    bob may list config maps in NS, alice may not."""
    _grant(
        server,
        "alice-impersonates-bob",
        [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["bob"]}],
        "alice",
    )
    _grant(
        server,
        "alice-impersonates-sas",
        [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}],
        "alice",
        ns=NS,
    )
    _grant(
        server,
        "bob-lists-configmaps",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        "bob",
        ns=NS,
    )
    client = Client(server, "alice")
    wait_for(
        lambda: (
            client.json("GET", f"/api/v1/namespaces/{NS}/configmaps", headers=[("Impersonate-User", "bob")])[0] == 200
        ),
        5,
        "alice's and bob's bindings",
    )
    return client


def test_admin_as_nobody_is_nobody(server, admin, tmp_path):
    assert admin.json("GET", f"/api/v1/namespaces/{NS}/pods")[0] == 200
    status, doc = admin.json("GET", f"/api/v1/namespaces/{NS}/pods", headers=[("Impersonate-User", "nobody")])
    assert status == 403, doc
    assert doc["message"] == (
        f'pods is forbidden: User "nobody" cannot list resource "pods" in API group "" in the namespace "{NS}"'
    )
    # What the impersonated identity is: system:authenticated added unless asked for otherwise.
    status, doc = admin.whoami([("Impersonate-User", "nobody")])
    assert status == 201 and doc["status"]["userInfo"] == {"username": "nobody", "groups": [names.GROUP_AUTHENTICATED]}
    status, doc = admin.whoami(
        [
            ("Impersonate-User", "nobody"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Uid", "uid-1"),
            ("Impersonate-Extra-Acme.io%2FScopes", "read"),
            ("impersonate-extra-acme.io%2fscopes", "write"),
        ]
    )
    assert status == 201, doc
    assert doc["status"]["userInfo"] == {
        "username": "nobody",
        "uid": "uid-1",
        "groups": ["devs", "ops", names.GROUP_AUTHENTICATED],
        "extra": {"acme.io/scopes": ["read", "write"]},
    }
    status, doc = admin.whoami([("Impersonate-User", names.USER_ANONYMOUS)])
    assert status == 403 and f'User "{names.USER_ANONYMOUS}" cannot create' in doc["message"], doc
    status, doc = admin.whoami(
        [("Impersonate-User", names.USER_ANONYMOUS), ("Impersonate-Group", names.GROUP_AUTHENTICATED)]
    )
    assert doc["status"]["userInfo"] == {
        "username": names.USER_ANONYMOUS,
        "groups": [names.GROUP_AUTHENTICATED, names.GROUP_UNAUTHENTICATED],
    }
    status, doc = admin.whoami([("Impersonate-User", f"system:serviceaccount:{NS}:robot")])
    assert doc["status"]["userInfo"]["groups"] == [
        names.GROUP_SERVICEACCOUNTS,
        f"system:serviceaccounts:{NS}",
        names.GROUP_AUTHENTICATED,
    ]
    status, doc = admin.whoami(
        [("Impersonate-User", f"system:serviceaccount:{NS}:robot"), ("Impersonate-Group", "devs")]
    )  # given groups replace the fixed ones
    assert doc["status"]["userInfo"]["groups"] == ["devs", names.GROUP_AUTHENTICATED]

    if not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    r = kubectl(admin, tmp_path, "--as=nobody", "get", "pods", "-n", NS)
    assert r.returncode != 0 and 'User "nobody" cannot list resource "pods"' in r.stderr, r.stderr
    r = kubectl(admin, tmp_path, "--as=nobody", "auth", "whoami")
    assert r.returncode == 0, r.stderr
    assert re.search(r"Username\s+nobody\n", r.stdout) and names.GROUP_MASTERS not in r.stdout, r.stdout
    r = kubectl(admin, tmp_path, "--as=nobody", "--as-group=devs", "--as-uid=uid-2", "auth", "whoami", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"]["userInfo"] == {
        "username": "nobody",
        "uid": "uid-2",
        "groups": ["devs", names.GROUP_AUTHENTICATED],
    }


def test_impersonation_is_authorized_part_by_part(server, alice, tmp_path):
    cms = f"/api/v1/namespaces/{NS}/configmaps"
    assert alice.json("GET", cms)[0] == 403
    assert alice.json("GET", cms, headers=[("Impersonate-User", "bob")])[0] == 200
    status, doc = alice.json("GET", cms, headers=[("Impersonate-User", "nobody")])
    assert status == 403 and doc["reason"] == "Forbidden", doc
    assert doc["message"] == (
        'users "nobody" is forbidden: User "alice" cannot impersonate resource "users" '
        'in API group "" at the cluster scope'
    )
    assert doc["details"] == {"name": "nobody", "kind": "users"}
    status, doc = alice.json("GET", cms, headers=[("Impersonate-User", "bob"), ("Impersonate-Group", "devs")])
    assert status == 403
    assert doc["message"] == (
        'groups "devs" is forbidden: User "alice" cannot impersonate resource "groups" '
        'in API group "" at the cluster scope'
    )
    status, doc = alice.json("GET", cms, headers=[("Impersonate-User", "bob"), ("Impersonate-Uid", "u1")])
    assert status == 403
    auth = names.AUTHENTICATION_GROUP
    assert doc["message"] == (
        f'uids.{auth} "u1" is forbidden: User "alice" cannot impersonate resource "uids" '
        f'in API group "{auth}" at the cluster scope'
    )
    status, doc = alice.json("GET", cms, headers=[("Impersonate-User", "bob"), ("Impersonate-Extra-Scopes", "x")])
    assert status == 403
    assert doc["message"] == (
        f'userextras.{auth} "x" is forbidden: User "alice" cannot impersonate resource '
        f'"userextras/scopes" in API group "{auth}" at the cluster scope'
    )
    # Service accounts: the impersonate verb on serviceaccounts in their namespace.
    status, doc = alice.whoami([("Impersonate-User", f"system:serviceaccount:{NS}:robot")])
    assert status == 201 and doc["status"]["userInfo"]["username"] == f"system:serviceaccount:{NS}:robot"
    status, doc = alice.whoami([("Impersonate-User", "system:serviceaccount:other:robot")])
    assert status == 403
    assert doc["message"] == (
        'serviceaccounts "robot" is forbidden: User "alice" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "other"'
    )

    if not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    r = kubectl(alice, tmp_path, "--as=bob", "get", "configmaps", "-n", NS)
    assert r.returncode == 0, r.stderr
    r = kubectl(alice, tmp_path, "--as=bob", "--as-group=devs", "get", "configmaps", "-n", NS)
    assert r.returncode != 0 and 'User "alice" cannot impersonate resource "groups"' in r.stderr, r.stderr


def test_groups_uid_or_extras_without_a_user_are_refused(server, admin):
    auth_v1 = f"{names.AUTHENTICATION_GROUP}/v1"
    cases = [
        ([("Impersonate-Group", "devs")], "{Group  devs    }"),
        ([("Impersonate-Uid", "u1")], f"{{UID  u1  {auth_v1}  }}"),
        ([("Impersonate-Extra-Scopes", "x")], f"{{UserExtra  x  {auth_v1}  scopes}}"),
    ]
    for headers, listed in cases:
        status, doc = admin.json("GET", f"/api/v1/namespaces/{NS}/pods", headers=headers)
        assert status == 400 and doc["reason"] == "BadRequest", doc
        assert doc["message"] == f"requested [{listed}] without impersonating a user"


def _csr_pem(cn: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    req = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    return req.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def test_impersonated_writes_are_the_impersonated_users(server, admin):
    """Admission and the strategy see the impersonated user (a CSR records its requester);
    managedFields names the field manager as for any write."""
    _grant(
        server,
        "jane-csrs",
        [
            {
                "apiGroups": [names.CERTIFICATES_GROUP],
                "resources": ["certificatesigningrequests"],
                "verbs": ["create", "get"],
            }
        ],
        "jane",
    )
    name = f"imp-{uuid.uuid4().hex[:6]}"
    body = {
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(_csr_pem("jane")).decode(),
            "signerName": names.SIGNER_APISERVER_CLIENT,
            "usages": ["digital signature", "key encipherment", "client auth"],
        },
    }
    as_jane = [
        ("Impersonate-User", "jane"),
        ("Impersonate-Group", "devs"),
        ("Impersonate-Uid", "jane-uid"),
        ("Impersonate-Extra-Acme.io%2FTeam", "blue"),
    ]
    status, doc = wait_for(
        lambda: (r := admin.json("POST", f"{CSRS}?fieldManager=imp-test", body, as_jane))[0] != 403 and r,
        5,
        "jane's binding",
    )
    assert status == 201, doc
    spec = doc["spec"]
    assert spec["username"] == "jane" and spec["uid"] == "jane-uid"
    assert spec["groups"] == ["devs", names.GROUP_AUTHENTICATED]
    assert spec["extra"] == {"acme.io/team": ["blue"]}
    assert [(m["manager"], m["operation"]) for m in doc["metadata"]["managedFields"]] == [("imp-test", "Update")]
    # Without impersonation the admin is the requester.
    body["metadata"]["name"] = name + "-admin"
    status, doc = admin.json("POST", CSRS, body)
    assert status == 201 and doc["spec"]["username"] == names.ADMIN_USER
