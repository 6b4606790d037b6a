"""Group aliases in the router: an upstream group name kubectl hard-codes resolves to
the orch group's kind, and only the edges (body apiVersion, response apiVersion) see
the spelling the client used."""

from __future__ import annotations

import pytest

from apiserver_min.api import codec, names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schemas import schema_for
from apiserver_min.server.routing import GroupAlias, command_alias, parse, require_kind


def _parse(method: str, path: str, query=None):
    return parse(method, path, query or {}, REGISTRY, lambda *_: True)


@pytest.mark.parametrize(
    "alias,served,resource",
    [
        (names.UPSTREAM_RBAC_GROUP, names.RBAC_GROUP, "clusterroles"),
        (names.UPSTREAM_CERTIFICATES_GROUP, names.CERTIFICATES_GROUP, "certificatesigningrequests"),
        (names.UPSTREAM_AUTHORIZATION_GROUP, names.AUTHORIZATION_GROUP, "selfsubjectaccessreviews"),
        (names.UPSTREAM_AUTHENTICATION_GROUP, names.AUTHENTICATION_GROUP, "tokenreviews"),
    ],
)
def test_an_alias_resolves_to_the_orch_kind(alias, served, resource):
    info = _parse("GET", f"/apis/{alias}/v1/{resource}")
    assert info.kind is REGISTRY.by_resource(served, "v1", resource)
    assert (info.group, info.alias_group, info.requested_group) == (served, alias, alias)
    assert info.alias == GroupAlias(alias, served, "v1") and info.verb == "list"


def test_orch_paths_have_no_alias():
    info = _parse("GET", f"/apis/{names.RBAC_GROUP}/v1/namespaces/default/roles/r")
    assert info.alias is None and info.alias_group == "" and info.requested_group == names.RBAC_GROUP
    assert info.kind is REGISTRY.by_resource(names.RBAC_GROUP, "v1", "roles")


def test_upstream_namespace_spellings_name_ours_on_alias_paths_only():
    info = _parse("GET", f"/apis/{names.UPSTREAM_COORDINATION_GROUP}/v1/namespaces/kube-node-lease/leases/n1")
    assert (info.group, info.namespace, info.name, info.verb) == (
        names.COORDINATION_GROUP,
        names.NS_NODE_LEASE,
        "n1",
        "get",
    )
    assert (
        _parse("GET", f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/kube-node-lease/leases/n1").namespace
        == "kube-node-lease"
    )
    assert _parse("GET", "/api/v1/namespaces/kube-system/configmaps").namespace == "kube-system"


def test_the_metrics_alias_names_the_resource_metrics():
    info = _parse("GET", f"/apis/{names.UPSTREAM_METRICS_GROUP}/v1beta1/nodes")
    assert (
        info.kind is not None and info.kind.kind == "NodeMetrics" and info.alias_group == names.UPSTREAM_METRICS_GROUP
    )
    info = _parse("GET", f"/apis/{names.UPSTREAM_METRICS_GROUP}/v1beta1/namespaces/default/pods")
    assert info.kind is not None and info.kind.kind == "PodMetrics" and info.namespace == "default"


@pytest.mark.parametrize("alias,version", [(names.UPSTREAM_APIEXTENSIONS_GROUP, "v1")])
def test_an_alias_of_a_group_without_kinds_is_not_found_in_its_own_spelling(alias, version):
    info = _parse("GET", f"/apis/{alias}/{version}/nodes")
    assert info.kind is None and info.alias_group == alias
    with pytest.raises(st.ApiError) as err:
        require_kind(info)
    assert err.value.code == 404 and f"(nodes in {alias}/{version})" in err.value.message


def test_bodies_and_responses_follow_the_requested_spelling():
    alias = GroupAlias(names.UPSTREAM_RBAC_GROUP, names.RBAC_GROUP, "v1")
    served_av, requested_av = f"{names.RBAC_GROUP}/v1", f"{names.UPSTREAM_RBAC_GROUP}/v1"
    body = {
        "apiVersion": requested_av,
        "kind": "RoleBinding",
        "roleRef": {"apiGroup": names.UPSTREAM_RBAC_GROUP, "kind": "Role", "name": "r"},
        "subjects": [
            {"apiGroup": names.UPSTREAM_RBAC_GROUP, "kind": "User", "name": "u"},
            {"kind": "ServiceAccount", "name": "sa", "namespace": "d"},
        ],
    }
    alias.to_served(body)
    assert body["apiVersion"] == served_av and body["roleRef"]["apiGroup"] == names.RBAC_GROUP
    assert body["subjects"][0]["apiGroup"] == names.RBAC_GROUP and "apiGroup" not in body["subjects"][1]
    owner = {"apiVersion": served_av, "kind": "ClusterRole", "name": "x", "uid": "u"}
    lst = {
        "apiVersion": served_av,
        "kind": "RoleList",
        "metadata": {},
        "items": [{"apiVersion": served_av, "kind": "Role", "metadata": {"ownerReferences": [owner]}}],
    }
    alias.to_requested(lst)
    assert lst["apiVersion"] == requested_av and lst["items"][0]["apiVersion"] == requested_av
    assert owner["apiVersion"] == served_av  # references keep what is stored
    table = {
        "apiVersion": f"{names.UPSTREAM_META_GROUP}/v1",
        "kind": "Table",
        "rows": [{"cells": [], "object": {"apiVersion": served_av, "kind": "Role"}}],
    }
    alias.to_requested(table)
    assert table["apiVersion"] == f"{names.UPSTREAM_META_GROUP}/v1"
    assert table["rows"][0]["object"]["apiVersion"] == requested_av
    status = {"apiVersion": "v1", "kind": "Status", "details": {"group": names.RBAC_GROUP, "kind": "roles"}}
    assert alias.to_requested(status)["details"]["group"] == names.UPSTREAM_RBAC_GROUP
    frame = codec.dumps({"type": "ADDED", "object": {"apiVersion": served_av, "kind": "Role"}}) + b"\n"
    assert codec.load_json(alias.watch_frame(frame))["object"]["apiVersion"] == requested_av
    assert alias.watch_frame(frame).endswith(b"}\n")


def test_schemas_resolve_through_aliases():
    assert schema_for(names.UPSTREAM_RBAC_GROUP, "v1", "Role") is schema_for(names.RBAC_GROUP, "v1", "Role")
    assert schema_for(names.UPSTREAM_CERTIFICATES_GROUP, "v1", "CertificateSigningRequestList") is schema_for(
        names.CERTIFICATES_GROUP, "v1", "CertificateSigningRequestList"
    )
    assert schema_for("rbac.example.com", "v1", "Role") is None


def test_discovery_lists_no_alias_group():
    groups = {g for g, _ in REGISTRY.group_versions()}
    assert not groups & set(names.GROUP_ALIASES)
    assert set(names.GROUP_ALIASES.values()) - {names.APIEXTENSIONS_GROUP, names.METRICS_GROUP} <= groups


@pytest.mark.parametrize("command", ["kubectl certificate approve", "kubectl certificate deny"])
def test_kubectl_commands_that_check_the_group_are_answered_in_the_upstream_spelling(command):
    info = _parse("GET", f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests/c")
    command_alias(info, command)
    assert info.alias == GroupAlias(names.UPSTREAM_CERTIFICATES_GROUP, names.CERTIFICATES_GROUP, "v1")
    assert info.group == names.CERTIFICATES_GROUP  # authorized and stored as ours


@pytest.mark.parametrize(
    "path,command",
    [
        (f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests/c", "kubectl get"),
        (f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests/c", None),
        (f"/apis/{names.RBAC_GROUP}/v1/clusterroles/r", "kubectl certificate approve"),
    ],
)
def test_other_commands_and_groups_keep_the_orch_spelling(path, command):
    info = _parse("GET", path)
    command_alias(info, command)
    assert info.alias is None
