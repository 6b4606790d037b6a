"""Authorization end to end: a real orch-apiserver (Node,RBAC with NodeRestriction on),
users with client certificates signed by its CA, the real kubectl for ``auth can-i``."""

from __future__ import annotations

import functools
import http.client
import json
import os
import shutil
import ssl
import subprocess
import time
import uuid

import pytest
import yaml

from apiserver_min.api import names
from apiserver_min.pki import Pki, cert_pem, connection_config, key_pem, new_key, sign_leaf
from tests.apiserver_fixtures import APISERVER_BIN, KUBECTL, ApiServerProcess
from tests.components import free_port

RBAC = f"/apis/{names.RBAC_GROUP}/v1"
AUTHZ = f"/apis/{names.AUTHORIZATION_GROUP}/v1"
NS = "authz"


class User:
    """HTTPS as one user, by a client certificate the server's CA signed."""

    def __init__(self, server: ApiServerProcess, cn: str, orgs: tuple[str, ...] = ()):
        self.server, self.cn, self.orgs = server, cn, orgs
        ca_cert, ca_key = Pki(str(server.data_dir)).load_ca()
        key = new_key()
        cert = sign_leaf(ca_cert, ca_key, key.public_key(), cn, orgs, client=True)
        safe = cn.replace(":", "_")
        self.cert_path, self.key_path = server.data_dir / f"{safe}.crt", server.data_dir / f"{safe}.key"
        self.cert_path.write_bytes(cert_pem(cert))
        self.key_path.write_bytes(key_pem(key))
        self.ctx = ssl.create_default_context(cafile=str(server.ca_cert))
        self.ctx.load_cert_chain(str(self.cert_path), str(self.key_path))
        self.kubeconfig = server.data_dir / f"{safe}.orchconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                connection_config(
                    server.url, server.ca_cert.read_bytes(), cn, cert_pem_data=cert_pem(cert), key_pem_data=key_pem(key)
                )
            )
        )

    def json(self, method: str, path: str, body=None, ctype: str = "application/json") -> tuple[int, dict]:
        conn = http.client.HTTPSConnection(self.server.host, self.server.port, timeout=10, context=self.ctx)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": ctype} if data else {})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else {})
        finally:
            conn.close()


def wait_status(fn, want: int, timeout: float = 5.0):
    """Authorization reads the watch cache: a fresh binding takes effect within moments."""
    deadline = time.monotonic() + timeout
    while True:
        status, doc = fn()
        if status == want or time.monotonic() > deadline:
            assert status == want, doc
            return doc
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(
        tmp_path_factory.mktemp("authz"), free_port(), extra_args=["--enable-admission-plugins=NodeRestriction"]
    )
    with s:
        s.json("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}, expect=201)
        yield s


def admin(server, method, path, body=None, expect=None, ctype=None):
    headers = {"Content-Type": ctype} if ctype else None
    return server.json(method, path, body, headers=headers, expect=expect)[1]


def make_role(server, name, rules, ns=NS, cluster=False):
    path = f"{RBAC}/clusterroles" if cluster else f"{RBAC}/namespaces/{ns}/roles"
    admin(server, "POST", path, {"metadata": {"name": name}, "rules": rules}, expect=201)


def make_binding(server, name, role_kind, role_name, subjects, ns=NS):
    path = f"{RBAC}/namespaces/{ns}/rolebindings" if ns else f"{RBAC}/clusterrolebindings"
    body = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }
    admin(server, "POST", path, body, expect=201)


def user_subject(name):
    return {"kind": "User", "apiGroup": names.RBAC_GROUP, "name": name}


@pytest.fixture(scope="module")
def alice(server):
    """May get the config map "allowed", list config maps, and read deployments/scale in NS."""
    make_role(
        server,
        "alice-role",
        [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["allowed"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get"]},
            {"apiGroups": ["apps"], "resources": ["*/status"], "verbs": ["get"]},
        ],
    )
    make_binding(server, "alice-binding", "Role", "alice-role", [user_subject("alice")])
    for name in ("allowed", "other"):
        admin(server, "POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": name}}, expect=201)
    return User(server, "alice", ("team",))


def test_rbac_allows_and_denies_by_name_and_subresource(server, alice):
    wait_status(lambda: alice.json("GET", f"/api/v1/namespaces/{NS}/configmaps/allowed"), 200)
    status, doc = alice.json("GET", f"/api/v1/namespaces/{NS}/configmaps/other")
    assert status == 403 and doc["reason"] == "Forbidden" and doc["kind"] == "Status"
    assert doc["message"] == (
        'configmaps "other" is forbidden: User "alice" cannot get resource "configmaps" in API '
        f'group "" in the namespace "{NS}"'
    )
    assert alice.json("GET", f"/api/v1/namespaces/{NS}/configmaps")[0] == 200
    assert alice.json("GET", "/api/v1/namespaces/default/configmaps")[0] == 403
    assert alice.json("DELETE", f"/api/v1/namespaces/{NS}/configmaps/allowed")[0] == 403
    dep = {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }
    admin(server, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", dep, expect=201)
    status, scale = alice.json("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/web/scale")
    assert status == 200 and scale["spec"]["replicas"] == 2
    status, doc = alice.json("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/web")
    assert status == 403
    # "*/status" matches any resource's status sub-resource, and nothing else.
    assert alice.json("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/web/status")[0] == 200
    status, doc = alice.json(
        "PUT",
        f"/apis/apps/v1/namespaces/{NS}/deployments/web/scale",
        {"metadata": {"name": "web"}, "spec": {"replicas": 3}},
    )
    assert status == 403 and 'cannot update resource "deployments/scale" in API group "apps"' in doc["message"]
    # Defaults: discovery for every authenticated user, health for everyone, nothing else.
    assert alice.json("GET", "/api")[0] == 200
    assert alice.json("GET", "/metrics")[0] == 403
    assert server.request("GET", "/readyz", client_cert=False)[0] == 200
    status, _, body = server.request("GET", "/api/v1/namespaces", client_cert=False)
    assert status == 403 and b'User \\"system:anonymous\\" cannot list resource \\"namespaces\\"' in body


def test_escalate_and_bind_protection(server):
    make_role(
        server,
        "role-manager",
        [
            {
                "apiGroups": [names.RBAC_GROUP],
                "resources": ["roles", "rolebindings"],
                "verbs": ["create", "update", "get"],
            },
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        ],
        cluster=True,
    )
    make_binding(server, "bob-manager", "ClusterRole", "role-manager", [user_subject("bob")])
    bob = User(server, "bob")
    pods_role = {
        "metadata": {"name": "bob-pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    wait_status(lambda: bob.json("POST", f"{RBAC}/namespaces/{NS}/roles", pods_role), 201)
    secrets_role = {
        "metadata": {"name": "bob-secrets"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }
    status, doc = bob.json("POST", f"{RBAC}/namespaces/{NS}/roles", secrets_role)
    assert status == 403, doc
    assert "attempting to grant RBAC permissions not currently held" in doc["message"]
    assert '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}' in doc["message"]
    # Bob may bind what he holds, not what he does not.
    ok = {
        "metadata": {"name": "carol-pods"},
        "subjects": [user_subject("carol")],
        "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "Role", "name": "bob-pods"},
    }
    assert bob.json("POST", f"{RBAC}/namespaces/{NS}/rolebindings", ok)[0] == 201
    wide = {
        "metadata": {"name": "carol-edit"},
        "subjects": [user_subject("carol")],
        "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": "edit"},
    }
    status, doc = bob.json("POST", f"{RBAC}/namespaces/{NS}/rolebindings", wide)
    assert status == 403 and "not currently held" in doc["message"]
    # The bind verb on that very role, and escalate on roles, lift the checks.
    make_role(
        server,
        "bob-delegate",
        [
            {
                "apiGroups": [names.RBAC_GROUP],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": ["edit"],
            },
            {"apiGroups": [names.RBAC_GROUP], "resources": ["roles"], "verbs": ["escalate"]},
        ],
    )
    make_binding(server, "bob-delegate", "Role", "bob-delegate", [user_subject("bob")])
    wait_status(lambda: bob.json("POST", f"{RBAC}/namespaces/{NS}/rolebindings", wide), 201)
    assert bob.json("POST", f"{RBAC}/namespaces/{NS}/roles", secrets_role)[0] == 201
    # Carol now holds edit's (aggregated) rights in NS.
    carol = User(server, "carol")
    wait_status(lambda: carol.json("GET", f"/api/v1/namespaces/{NS}/secrets"), 200)


def _pod(name, node, **spec):
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], **spec}}


def test_node_identity_is_confined(server):
    n1 = User(server, "system:node:n1", (names.GROUP_NODES,))
    status, doc = n1.json("POST", "/api/v1/nodes", {"metadata": {"name": "n1", "labels": {names.LABEL_HOSTNAME: "n1"}}})
    assert status == 201, doc
    status, doc = n1.json("POST", "/api/v1/nodes", {"metadata": {"name": "n2"}})
    assert status == 403 and 'not allowed to modify node "n2"' in doc["message"]
    admin(server, "POST", "/api/v1/nodes", {"metadata": {"name": "n2"}}, expect=201)
    merge = "application/merge-patch+json"
    status, doc = n1.json("PATCH", "/api/v1/nodes/n2", {"metadata": {"labels": {"x": "y"}}}, merge)
    assert status == 403
    status, doc = n1.json(
        "PATCH",
        "/api/v1/nodes/n1",
        {"metadata": {"labels": {names.NODE_RESTRICTION_LABEL_PREFIX + "gpu": "yes"}}},
        merge,
    )
    assert status == 403 and "node-restriction" in doc["message"]
    assert n1.json("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"node.orch.io/pool": "a"}}}, merge)[0] == 200
    assert n1.json("DELETE", "/api/v1/nodes/n1")[0] == 403

    for s in ("mine", "theirs"):
        admin(
            server,
            "POST",
            f"/api/v1/namespaces/{NS}/secrets",
            {"metadata": {"name": s}, "data": {"k": "dg=="}},
            expect=201,
        )
    admin(
        server,
        "POST",
        f"/api/v1/namespaces/{NS}/pods",
        _pod("p1", "n1", volumes=[{"name": "v", "secret": {"secretName": "mine"}}]),
        expect=201,
    )
    theirs = _pod("p2", "n2")
    theirs["spec"]["containers"][0]["env"] = [
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "theirs", "key": "k"}}}
    ]
    admin(server, "POST", f"/api/v1/namespaces/{NS}/pods", theirs, expect=201)
    wait_status(lambda: n1.json("GET", f"/api/v1/namespaces/{NS}/secrets/mine"), 200)
    status, doc = n1.json("GET", f"/api/v1/namespaces/{NS}/secrets/theirs")
    assert status == 403 and "no relationship found between node 'n1' and this object" in doc["message"]
    assert n1.json("GET", f"/api/v1/namespaces/{NS}/secrets")[0] == 403
    assert n1.json("GET", f"/api/v1/namespaces/{NS}/secrets?fieldSelector=metadata.name%3Dmine")[0] == 200
    assert n1.json("GET", f"/api/v1/namespaces/{NS}/pods")[0] == 200
    # Pods: status of its own only; no deletes of others; no ordinary pods.
    status_patch = {"status": {"phase": "Running"}}
    assert n1.json("PATCH", f"/api/v1/namespaces/{NS}/pods/p1/status", status_patch, merge)[0] == 200
    assert n1.json("PATCH", f"/api/v1/namespaces/{NS}/pods/p2/status", status_patch, merge)[0] == 403
    assert n1.json("DELETE", f"/api/v1/namespaces/{NS}/pods/p2")[0] == 403
    status, doc = n1.json("POST", f"/api/v1/namespaces/{NS}/pods", _pod("sneaky", "n1"))
    assert status == 403 and "can only create mirror pods" in doc["message"]

    # Its own lease only.
    def lease(n):
        return {"metadata": {"name": n}, "spec": {"holderIdentity": n}}

    leases = f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{names.NS_NODE_LEASE}/leases"
    assert n1.json("POST", leases, lease("n1"))[0] == 201
    assert n1.json("POST", leases, lease("n2"))[0] == 403
    assert n1.json("GET", f"{leases}/n1")[0] == 200


def test_access_reviews(server, alice):
    wait_status(lambda: alice.json("GET", f"/api/v1/namespaces/{NS}/configmaps/allowed"), 200)

    def ra(name):
        return {"namespace": NS, "verb": "get", "resource": "configmaps", "name": name}

    doc = admin(
        server,
        "POST",
        f"{AUTHZ}/subjectaccessreviews",
        {"spec": {"user": "alice", "resourceAttributes": ra("allowed")}},
        expect=201,
    )
    assert doc["status"]["allowed"] is True
    assert (
        doc["status"]["reason"]
        == 'RBAC: allowed by RoleBinding "alice-binding/authz" of Role "alice-role" to User "alice"'
    )
    doc = admin(
        server,
        "POST",
        f"{AUTHZ}/subjectaccessreviews",
        {"spec": {"user": "alice", "resourceAttributes": ra("other")}},
        expect=201,
    )
    assert doc["status"] == {"allowed": False}
    status, doc = server.json("POST", f"{AUTHZ}/subjectaccessreviews", {"spec": {"resourceAttributes": ra("x")}})
    assert status == 422 and "at least one of user or group must be specified" in doc["message"]
    status, doc = server.json(
        "POST",
        f"{AUTHZ}/namespaces/default/localsubjectaccessreviews",
        {"spec": {"user": "alice", "resourceAttributes": ra("allowed")}},
    )
    assert status == 400 and "must match namespace: default" in doc["message"]
    doc = admin(
        server,
        "POST",
        f"{AUTHZ}/namespaces/{NS}/localsubjectaccessreviews",
        {"spec": {"user": "alice", "resourceAttributes": ra("allowed")}},
        expect=201,
    )
    assert doc["status"]["allowed"] is True and doc["metadata"]["namespace"] == NS
    # Alice may not ask about others, but may ask about herself, on both group spellings.
    assert (
        alice.json("POST", f"{AUTHZ}/subjectaccessreviews", {"spec": {"user": "x", "resourceAttributes": ra("a")}})[0]
        == 403
    )
    for group in (names.AUTHORIZATION_GROUP, names.UPSTREAM_AUTHORIZATION_GROUP):
        status, doc = alice.json(
            "POST",
            f"/apis/{group}/v1/selfsubjectaccessreviews",
            {
                "kind": "SelfSubjectAccessReview",
                "apiVersion": f"{group}/v1",
                "spec": {"resourceAttributes": ra("allowed")},
            },
        )
        assert status == 201 and doc["status"]["allowed"] is True and doc["apiVersion"] == f"{group}/v1"
    status, doc = alice.json("POST", f"{AUTHZ}/selfsubjectrulesreviews", {"spec": {"namespace": NS}})
    assert status == 201
    rules = doc["status"]["resourceRules"]
    assert {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["allowed"]} in rules
    assert any("selfsubjectaccessreviews" in r["resources"] for r in rules)  # system:basic-user
    assert any("/api" in r["nonResourceURLs"] for r in doc["status"]["nonResourceRules"])
    assert doc["status"]["incomplete"] is False
    status, doc = alice.json("POST", f"{AUTHZ}/selfsubjectrulesreviews", {"spec": {"namespace": "default"}})
    assert not any("configmaps" in r["resources"] for r in doc["status"]["resourceRules"])
    # Reviews are create-only and never stored.
    assert server.json("GET", f"{AUTHZ}/subjectaccessreviews")[0] == 405


def test_kubectl_auth_can_i(server, alice, tmp_path):
    if shutil.which(KUBECTL) is None and not os.path.exists(KUBECTL):
        pytest.skip("kubectl is not installed")
    wait_status(lambda: alice.json("GET", f"/api/v1/namespaces/{NS}/configmaps/allowed"), 200)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["HOME"] = str(tmp_path)

    def can_i(*args, config=alice.kubeconfig):
        r = subprocess.run(
            [KUBECTL, "--kubeconfig", str(config), "auth", "can-i", *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        return r.returncode, r.stdout.strip(), r.stderr

    assert can_i("get", "configmaps/allowed", "-n", NS)[:2] == (0, "yes")
    code, out, err = can_i("get", "configmaps/other", "-n", NS)
    assert (code, out) == (1, "no"), err
    assert can_i("delete", "pods", "-n", NS)[:2] == (1, "no")
    assert can_i("create", "nodes", config=server.kubeconfig)[:2] == (0, "yes")
    # --list sends a SelfSubjectRulesReview (protobuf too) and prints the rules.
    code, out, err = can_i("--list", "-n", NS)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert ["configmaps", "[]", "[allowed]", "[get]"] in rows
    assert ["configmaps", "[]", "[]", "[list]"] in rows


def test_aggregation_and_reconcile_across_restart(server):
    widget_rule = {"apiGroups": ["example.io"], "resources": ["widgets"], "verbs": ["get"]}
    admin(
        server,
        "POST",
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": "widget-viewer", "labels": {names.LABEL_AGGREGATE_TO_VIEW: "true"}},
            "rules": [widget_rule],
        },
        expect=201,
    )

    def aggregated(role):
        doc = admin(server, "GET", f"{RBAC}/clusterroles/{role}")
        return (200 if widget_rule in (doc.get("rules") or []) else 404), doc

    wait_status(lambda: aggregated("view"), 200)
    wait_status(lambda: aggregated("admin"), 200)  # admin <- edit <- view
    # An operator's changes: the monitoring role protected and emptied, discovery emptied.
    merge = "application/merge-patch+json"
    admin(
        server,
        "PATCH",
        f"{RBAC}/clusterroles/system:monitoring",
        {"metadata": {"annotations": {names.ANNOTATION_RBAC_AUTOUPDATE: "false"}}, "rules": []},
        expect=200,
        ctype=merge,
    )
    admin(server, "PATCH", f"{RBAC}/clusterroles/system:discovery", {"rules": []}, expect=200, ctype=merge)
    admin(server, "DELETE", f"{RBAC}/clusterrolebindings/system:basic-user", expect=200)
    server.stop()
    server.start()
    assert admin(server, "GET", f"{RBAC}/clusterroles/system:monitoring").get("rules") in (None, [])
    assert any(
        "/api" in r.get("nonResourceURLs", [])
        for r in admin(server, "GET", f"{RBAC}/clusterroles/system:discovery")["rules"]
    )
    subjects = admin(server, "GET", f"{RBAC}/clusterrolebindings/system:basic-user")["subjects"]
    assert subjects == [{"kind": "Group", "apiGroup": names.RBAC_GROUP, "name": names.GROUP_AUTHENTICATED}]


# --- create through update: apply or PUT to a missing name -----------------------------------------

APPLY = "application/apply-patch+yaml"


@pytest.fixture(scope="module")
def writers(server):
    """dave may read, patch and update config maps and services in NS, never create them;
    erin may also create them."""
    rw = ["get", "list", "watch", "patch", "update"]
    make_role(server, "cm-svc-writer", [{"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": rw}])
    make_role(
        server,
        "cm-svc-creator",
        [{"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": rw + ["create"]}],
    )
    make_binding(server, "dave-writer", "Role", "cm-svc-writer", [user_subject("dave")])
    make_binding(server, "erin-creator", "Role", "cm-svc-creator", [user_subject("erin")])
    users = {"dave": User(server, "dave"), "erin": User(server, "erin")}
    for u in users.values():
        wait_status(functools.partial(u.json, "GET", f"/api/v1/namespaces/{NS}/configmaps"), 200)
    return users


def _configmap(name):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def _service(name):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"port": 80}], "selector": {"app": name}},
    }


# (who, how, kind, object exists beforehand, expected status). "apply" is server-side apply
# (PATCH application/apply-patch+yaml), "put" a PUT of the whole object; both create a
# missing object only with the create verb (upstream authorizes create-on-update as create).
CREATE_ON_UPDATE_MATRIX = [
    ("dave", "apply", "configmaps", False, 403),  # apply-create without create
    ("dave", "apply", "configmaps", True, 200),  # apply-update with patch
    ("erin", "apply", "configmaps", False, 201),  # apply-create with create
    ("dave", "apply-dry-run", "configmaps", False, 403),
    ("dave", "put", "services", False, 403),  # PUT-create without create
    ("dave", "put", "services", True, 200),  # PUT-update with update
    ("erin", "put", "services", False, 201),  # PUT-create with create
    ("erin", "put", "configmaps", False, 404),  # config maps are never created by PUT
    ("admin", "put", "roles", False, 201),  # roles are (upstream AllowCreateOnUpdate)
]


@pytest.mark.parametrize(
    "who,how,resource,exists,expect",
    CREATE_ON_UPDATE_MATRIX,
    ids=[f"{r[0]}-{r[1]}-{r[2]}-{'existing' if r[3] else 'missing'}" for r in CREATE_ON_UPDATE_MATRIX],
)
def test_create_through_update_needs_create(server, writers, who, how, resource, exists, expect):
    name = f"cu-{uuid.uuid4().hex[:8]}"
    if resource == "roles":
        base = f"{RBAC}/namespaces/{NS}/roles"
        obj = {
            "apiVersion": f"{names.RBAC_GROUP}/v1",
            "kind": "Role",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        }
    else:
        base = f"/api/v1/namespaces/{NS}/{resource}"
        obj = _configmap(name) if resource == "configmaps" else _service(name)
    if exists:
        admin(server, "POST", base, obj, expect=201)

    def send():
        if who == "admin":
            status, doc = server.json("PUT", f"{base}/{name}", obj)
            return status, doc
        user = writers[who]
        if how.startswith("apply"):
            query = "?fieldManager=matrix" + ("&dryRun=All" if how == "apply-dry-run" else "")
            return user.json("PATCH", f"{base}/{name}{query}", obj, ctype=APPLY)
        return user.json("PUT", f"{base}/{name}", obj)

    status, doc = send()
    assert status == expect, doc
    if expect == 403:
        assert doc["reason"] == "Forbidden"
        assert doc["message"] == (
            f'{resource} "{name}" is forbidden: User "{who}" cannot create resource '
            f'"{resource}" in API group "" in the namespace "{NS}"'
        )
    if expect in (403, 404) or how == "apply-dry-run":
        assert server.json("GET", f"{base}/{name}")[0] == 404, "nothing may be created"
    else:
        got = admin(server, "GET", f"{base}/{name}")
        assert got["metadata"]["name"] == name
