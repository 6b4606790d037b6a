"""kubectl commands that compile upstream group names in, with the real kubectl at the
oldest and the default installed versions (1.27, 1.32) called directly: ``create
role|clusterrole|rolebinding|clusterrolebinding`` (rbac.authorization.k8s.io),
``describe node`` (its lease at coordination.k8s.io, namespace kube-node-lease) and
``certificate approve|deny`` (certificates.k8s.io). The server answers those groups as
aliases of the orch groups; discovery lists only the orch groups, so kubectl still maps
``roles`` to ``rbac.orch.io``."""

from __future__ import annotations

import base64
import os
import subprocess

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver_min.api import names
from tests.apiserver_fixtures import Kubectl, create_namespace, kubectl_binary
from tests.helpers import uniq, wait_for

VERSIONS = ("1.27", "1.32")


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module", params=VERSIONS)
def kubectl_at(request, apiserver, tmp_path_factory):
    binary = kubectl_binary(request.param)
    if not os.path.exists(binary):
        pytest.skip(f"{binary} not installed")
    return Kubectl(apiserver, tmp_path_factory.mktemp(f"kubectl-{request.param}"), binary=binary)


@pytest.fixture
def ns(apiserver):
    name = uniq("ns")
    create_namespace(apiserver, name)
    return name


def test_create_rbac_objects(kubectl_at, apiserver, ns):
    k = kubectl_at
    role, crole, binding, cbinding = uniq("role"), uniq("crole"), uniq("rb"), uniq("crb")
    out = ok(k("create", "role", role, "--verb=get,list", "--resource=pods,configmaps", "-n", ns))
    assert f"{role} created" in out
    out = ok(k("create", "clusterrole", crole, "--verb=get", "--resource=nodes"))
    assert f"{crole} created" in out
    out = ok(
        k(
            "create",
            "rolebinding",
            binding,
            f"--role={role}",
            "--user=alice",
            "--group=devs",
            f"--serviceaccount={ns}:default",
            "-n",
            ns,
        )
    )
    assert f"{binding} created" in out
    out = ok(k("create", "clusterrolebinding", cbinding, f"--clusterrole={crole}", "--user=alice"))
    assert f"{cbinding} created" in out

    # The objects are ours: listed under rbac.orch.io, by kubectl's own mapping too.
    assert ok(k("get", "roles.rbac.orch.io", "-n", ns, "-o", "name")).split() == [f"role.rbac.orch.io/{role}"]
    assert ok(k("get", "roles", "-n", ns, "-o", "name")).split() == [f"role.rbac.orch.io/{role}"]
    assert f"rolebinding.rbac.orch.io/{binding}" in ok(k("get", "rolebindings.rbac.orch.io", "-n", ns, "-o", "name"))
    assert f"clusterrole.rbac.orch.io/{crole}" in ok(k("get", "clusterroles.rbac.orch.io", "-o", "name")).split()
    assert (
        f"clusterrolebinding.rbac.orch.io/{cbinding}"
        in ok(k("get", "clusterrolebindings.rbac.orch.io", "-o", "name")).split()
    )
    rb = yaml.safe_load(ok(k("get", "rolebinding", binding, "-n", ns, "-o", "yaml")))
    assert rb["apiVersion"] == f"{names.RBAC_GROUP}/v1"
    assert rb["roleRef"] == {"apiGroup": names.RBAC_GROUP, "kind": "Role", "name": role}
    assert {(s["kind"], s.get("apiGroup", "")) for s in rb["subjects"]} == {
        ("User", names.RBAC_GROUP),
        ("Group", names.RBAC_GROUP),
        ("ServiceAccount", ""),
    }
    # Discovery lists no alias: kubectl knows the upstream spelling of the group not at all.
    result = k("get", f"roles.{names.UPSTREAM_RBAC_GROUP}", "-n", ns)
    assert result.returncode != 0 and "doesn't have a resource type" in result.stderr, result.stderr
    assert names.UPSTREAM_RBAC_GROUP not in ok(k("api-resources"))
    # What was granted works (the binding's subjects and roleRef are in our spelling).
    review = {
        "spec": {"user": "alice", "resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": ns}}
    }
    wait_for(
        lambda: apiserver.json(
            "POST", f"/apis/{names.AUTHORIZATION_GROUP}/v1/subjectaccessreviews", review, expect=201
        )[1]["status"]["allowed"],
        5,
        "alice's binding to take effect",
    )


def test_describe_node_shows_its_lease(kubectl_at, apiserver):
    node = uniq("node")
    apiserver.json("POST", "/api/v1/nodes", {"metadata": {"name": node}}, expect=201)
    lease = {
        "apiVersion": f"{names.COORDINATION_GROUP}/v1",
        "kind": "Lease",
        "metadata": {"name": node},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": "2026-01-02T03:04:05.000000Z"},
    }
    apiserver.json(
        "POST", f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{names.NS_NODE_LEASE}/leases", lease, expect=201
    )
    out = ok(kubectl_at("describe", "node", node))
    assert "Failed to get lease" not in out, out
    lease_part = out.split("Lease:", 1)[1]
    assert f"HolderIdentity:  {node}" in lease_part and "RenewTime:       Fri, 02 Jan 2026 03:04:05" in lease_part


def _create_csr(apiserver, name: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    req = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    apiserver.json(
        "POST",
        f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests",
        {
            "metadata": {"name": name},
            "spec": {
                "request": base64.b64encode(req).decode(),
                "signerName": "example.com/custom",
                "usages": ["client auth"],
            },
        },
        expect=201,
    )


@pytest.mark.parametrize("verb,condition", [("approve", "Approved"), ("deny", "Denied")])
def test_certificate_approve_and_deny(kubectl_at, apiserver, verb, condition):
    """kubectl reads the CSR through discovery (the orch group) and refuses any but
    certificates.k8s.io/v1: it names its command in Kubectl-Command, and the server
    answers that command in the upstream spelling."""
    name = uniq(verb)
    _create_csr(apiserver, name)
    out = ok(kubectl_at("certificate", verb, name))
    assert f"{name} {condition.lower()}" in out
    _, csr = apiserver.json("GET", f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests/{name}", expect=200)
    assert [c["type"] for c in csr["status"]["conditions"]] == [condition]
