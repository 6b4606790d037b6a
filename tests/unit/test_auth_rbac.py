"""Authorization logic without a server: RBAC rules and index, escalation coverage,
the Node authorizer's graph, NodeRestriction and CSR admission, the default policy's
reconciliation and aggregation, and the review protobuf decoder."""

from __future__ import annotations

import asyncio
import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver_min.admission.chain import Attributes
from apiserver_min.admission.plugins import resolve_plugins
from apiserver_min.admission.plugins.certificates import (
    CertificateApproval,
    CertificateSigning,
    CertificateSubjectRestriction,
    parse_csr_request,
)
from apiserver_min.admission.plugins.defaulttolerationseconds import DefaultTolerationSeconds
from apiserver_min.admission.plugins.noderestriction import NodeRestriction, forbidden_labels
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.podrefs import pod_references
from apiserver_min.api.user import UserInfo
from apiserver_min.authz import authorizer as authz
from apiserver_min.authz import policy
from apiserver_min.authz.authorizer import AuthzAttributes, Decision, PolicyRule, Union
from apiserver_min.authz.node import NodeAuthorizer, NodeGraph
from apiserver_min.authz.rbac import RbacAuthorizer, RbacIndex, RbacWriteGuard, rule_allows, uncovered
from apiserver_min.controllers.clusterroleaggregation import aggregate_rules
from apiserver_min.server import reviews
from apiserver_min.server.routing import RequestInfo, parse
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.interface import Event, KeyValue
from apiserver_min.storage.keys import key_prefix

RBAC = names.RBAC_GROUP
KIND = {
    r: REGISTRY.by_resource(RBAC, "v1", r) for r in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
}
PODS = REGISTRY.by_resource("", "v1", "pods")
NODES = REGISTRY.by_resource("", "v1", "nodes")
LEASES = REGISTRY.by_resource(names.COORDINATION_GROUP, "v1", "leases")
CSRS = REGISTRY.by_resource(names.CERTIFICATES_GROUP, "v1", "certificatesigningrequests")

BOB = UserInfo("bob", groups=("devs", names.GROUP_AUTHENTICATED))
NODE1 = UserInfo("system:node:n1", groups=(names.GROUP_NODES, names.GROUP_AUTHENTICATED))


def res(user, verb, resource, ns="", name="", group="", sub=""):
    return AuthzAttributes(
        user, verb, True, namespace=ns, api_group=group, api_version="v1", resource=resource, subresource=sub, name=name
    )


def url(user, verb, path):
    return AuthzAttributes(user, verb, False, path=path)


class Cluster:
    """A watch cache fed by hand, so the indexes see real cache events."""

    def __init__(self):
        self.cache = WatchCache(None, list(REGISTRY.kinds), key_prefix)
        self.rev = 0

    def put(self, kind, obj: dict) -> None:
        md = obj["metadata"]
        key = key_prefix(kind) + (f"{md['namespace']}/" if kind.namespaced else "") + md["name"]
        self.rev += 1
        self.cache._dispatch(Event("PUT", KeyValue(key, encode_for_storage(obj), self.rev, self.rev), None))

    def delete(self, kind, name: str, ns: str = "") -> None:
        key = key_prefix(kind) + (f"{ns}/" if kind.namespaced else "") + name
        self.rev += 1
        self.cache._dispatch(Event("DELETE", KeyValue(key, b"", self.rev, 0), None))


def role(name, rules, ns="", labels=None, agg=None):
    obj = {"metadata": {"name": name, "labels": labels or {}}, "rules": rules}
    if ns:
        obj["metadata"]["namespace"] = ns
    if agg is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": agg}
    return obj


def bind(name, role_kind, role_name, subjects, ns=""):
    obj = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }
    if ns:
        obj["metadata"]["namespace"] = ns
    return obj


def user_subject(name):
    return {"kind": "User", "apiGroup": RBAC, "name": name}


# --- rule matching ---------------------------------------------------------------------------


def test_rule_matches_resources_subresources_names_and_urls():
    r = PolicyRule(("get", "update"), ("",), ("pods", "pods/status", "*/scale"), ("web",))
    assert rule_allows(res(BOB, "get", "pods", "d", "web"), r)
    assert not rule_allows(res(BOB, "get", "pods", "d", "db"), r)  # resourceNames
    assert not rule_allows(res(BOB, "list", "pods", "d"), r)  # list has no name: names cannot match
    assert rule_allows(res(BOB, "update", "pods", "d", "web", sub="status"), r)
    assert not rule_allows(res(BOB, "update", "pods", "d", "web", sub="log"), r)
    assert rule_allows(
        res(BOB, "get", "deployments", "d", "web", "apps", "scale"), PolicyRule(("get",), ("*",), ("*/scale",))
    )
    assert not rule_allows(res(BOB, "get", "pods", "d", "web", group="apps"), r)  # group
    assert not rule_allows(res(BOB, "delete", "pods", "d", "web"), r)  # verb
    star = PolicyRule(("*",), ("*",), ("*",))
    assert rule_allows(res(BOB, "deletecollection", "anything", group="x.y"), star)
    u = PolicyRule(("get",), non_resource_urls=("/healthz", "/apis/*"))
    assert rule_allows(url(BOB, "get", "/healthz"), u)
    assert not rule_allows(url(BOB, "get", "/healthz/ping"), u)
    assert rule_allows(url(BOB, "get", "/apis/apps/v1"), u)
    assert not rule_allows(url(BOB, "post", "/apis/apps"), u)
    assert not rule_allows(res(BOB, "get", "pods"), u)  # URL rules never match resources


def test_coverage_breaks_rules_into_atoms():
    owner = [
        PolicyRule(("get", "list"), ("",), ("pods", "*/status")),
        PolicyRule(("get",), ("",), ("secrets",), ("a", "b")),
        PolicyRule(("get",), non_resource_urls=("/logs/*",)),
    ]
    assert uncovered(owner, [PolicyRule(("get",), ("",), ("pods", "pods/status", "nodes/status"))]) == []
    assert uncovered(owner, [PolicyRule(("get",), ("",), ("secrets",), ("a",))]) == []
    # Unrestricted names are not covered by a name-restricted rule.
    assert uncovered(owner, [PolicyRule(("get",), ("",), ("secrets",))]) == [PolicyRule(("get",), ("",), ("secrets",))]
    missing = uncovered(owner, [PolicyRule(("get", "delete"), ("", "apps"), ("pods",))])
    assert sorted((m.verbs[0], m.api_groups[0]) for m in missing) == [
        ("delete", ""),
        ("delete", "apps"),
        ("get", "apps"),
    ]
    assert uncovered(owner, [PolicyRule(("get",), non_resource_urls=("/logs/x",))]) == []
    assert uncovered(owner, [PolicyRule(("*",), ("",), ("pods",))])  # "*" needs "*"


# --- the index and the authorizer -------------------------------------------------------------


@pytest.fixture()
def cluster():
    return Cluster()


def rbac_of(c: Cluster) -> RbacAuthorizer:
    return RbacAuthorizer(RbacIndex.attach(c.cache, REGISTRY))


def test_rbac_allows_through_bindings_and_follows_changes(cluster):
    rbac = rbac_of(cluster)
    cluster.put(
        KIND["clusterroles"], role("reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
    )
    cluster.put(KIND["roles"], role("cm", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}], ns="d"))
    assert rbac.authorize(res(BOB, "get", "pods", "d", "x"))[0] is Decision.NO_OPINION
    cluster.put(
        KIND["rolebindings"],
        bind("rb", "ClusterRole", "reader", [{"kind": "Group", "apiGroup": RBAC, "name": "devs"}], ns="d"),
    )
    decision, reason = rbac.authorize(res(BOB, "get", "pods", "d", "x"))
    assert decision is Decision.ALLOW
    assert reason == 'RBAC: allowed by RoleBinding "rb/d" of ClusterRole "reader" to Group "devs"'
    assert rbac.authorize(res(BOB, "get", "pods", "other", "x"))[0] is Decision.NO_OPINION  # namespaced grant
    assert rbac.authorize(res(BOB, "list", "pods"))[0] is Decision.NO_OPINION  # not cluster-wide
    cluster.put(KIND["rolebindings"], bind("rb2", "Role", "cm", [user_subject("bob")], ns="d"))
    assert rbac.authorize(res(BOB, "delete", "configmaps", "d", "c"))[0] is Decision.ALLOW
    cluster.delete(KIND["rolebindings"], "rb2", "d")
    assert rbac.authorize(res(BOB, "delete", "configmaps", "d", "c"))[0] is Decision.NO_OPINION
    # A binding whose subjects change is re-indexed.
    cluster.put(KIND["rolebindings"], bind("rb", "ClusterRole", "reader", [user_subject("alice")], ns="d"))
    assert rbac.authorize(res(BOB, "get", "pods", "d", "x"))[0] is Decision.NO_OPINION
    assert rbac.authorize(res(UserInfo("alice"), "get", "pods", "d", "x"))[0] is Decision.ALLOW
    # Cluster role bindings grant everywhere; a missing role is reported, not fatal.
    cluster.put(KIND["clusterrolebindings"], bind("crb", "ClusterRole", "gone", [user_subject("bob")]))
    decision, reason = rbac.authorize(res(BOB, "get", "pods", "d", "x"))
    assert decision is Decision.NO_OPINION and f'clusterrole.{RBAC} "gone" not found' in reason
    cluster.put(KIND["clusterroles"], role("gone", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]))
    assert rbac.authorize(res(BOB, "get", "pods", "elsewhere", "x"))[0] is Decision.ALLOW


def test_service_account_subjects_default_to_the_binding_namespace(cluster):
    rbac = rbac_of(cluster)
    cluster.put(KIND["clusterroles"], role("r", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]))
    cluster.put(
        KIND["rolebindings"], bind("b", "ClusterRole", "r", [{"kind": "ServiceAccount", "name": "app"}], ns="d")
    )
    sa = UserInfo("system:serviceaccount:d:app", groups=(names.GROUP_SERVICEACCOUNTS,))
    other = UserInfo("system:serviceaccount:e:app")
    assert rbac.authorize(res(sa, "get", "secrets", "d", "s"))[0] is Decision.ALLOW
    assert rbac.authorize(res(other, "get", "secrets", "d", "s"))[0] is Decision.NO_OPINION


def test_union_order_privileged_groups_and_always_deny(cluster):
    rbac = rbac_of(cluster)
    admin = UserInfo("root", groups=(names.GROUP_MASTERS,))
    chain = Union([authz.PrivilegedGroups(), authz.AlwaysDeny(), rbac])
    assert chain.authorize(res(admin, "delete", "nodes", name="n"))[0] is Decision.ALLOW
    assert chain.authorize(res(BOB, "get", "pods", "d"))[0] is Decision.DENY
    chain = Union([authz.PrivilegedGroups(), rbac])
    assert chain.authorize(res(BOB, "get", "pods", "d"))[0] is Decision.NO_OPINION
    assert Union([authz.AlwaysAllow()]).allowed(res(BOB, "get", "pods", "d"))
    with pytest.raises(ValueError, match="more than once"):
        authz.parse_modes("RBAC,Node,RBAC")
    with pytest.raises(ValueError, match="not one of"):
        authz.parse_modes("Magic")
    assert authz.parse_modes(" Node , RBAC ") == ("Node", "RBAC")


def test_request_attributes_and_forbidden_message():
    info = RequestInfo(True, "/api/v1/namespaces/d/secrets", "list", "", "v1", "secrets", namespace="d")
    a = authz.request_attributes(None, info, {"fieldSelector": "metadata.name=tok"})
    assert a.name == "tok" and a.user.name == names.USER_ANONYMOUS
    assert names.GROUP_UNAUTHENTICATED in a.user.groups
    ns_info = RequestInfo(True, "/api/v1/namespaces/d", "get", "", "v1", "namespaces", name="d")
    assert authz.request_attributes(BOB, ns_info).namespace == "d"
    # A path on an upstream alias of an orch group is authorized as the orch group (the
    # router resolves the alias).
    up = parse(
        "POST", f"/apis/{names.UPSTREAM_AUTHORIZATION_GROUP}/v1/selfsubjectaccessreviews", {}, REGISTRY, lambda *_: True
    )
    assert authz.request_attributes(BOB, up).api_group == names.AUTHORIZATION_GROUP
    lease = parse(
        "GET",
        f"/apis/{names.UPSTREAM_COORDINATION_GROUP}/v1/namespaces/kube-node-lease/leases/n1",
        {},
        REGISTRY,
        lambda *_: True,
    )
    a = authz.request_attributes(BOB, lease)
    assert (a.api_group, a.namespace, a.resource, a.name) == (
        names.COORDINATION_GROUP,
        names.NS_NODE_LEASE,
        "leases",
        "n1",
    )
    err = authz.forbidden_error(res(BOB, "get", "pods", "default", "x"))
    assert err.code == 403 and err.message == (
        'pods "x" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "default"'
    )
    err = authz.forbidden_error(res(BOB, "update", "deployments", name="x", group="apps", sub="scale"), "why")
    assert err.message == (
        'deployments.apps "x" is forbidden: User "bob" cannot update resource '
        '"deployments/scale" in API group "apps" at the cluster scope: why'
    )
    assert (
        authz.forbidden_error(url(BOB, "get", "/metrics")).message == 'forbidden: User "bob" cannot get path "/metrics"'
    )


# --- escalation checks -----------------------------------------------------------------------


def _attrs(kind, op, obj, user, old=None, ns=""):
    return Attributes(op, kind, ns, obj["metadata"]["name"], "", obj, old, user, False)


def test_write_guard_escalate_and_bind(cluster):
    index = RbacIndex.attach(cluster.cache, REGISTRY)
    chain = Union([authz.PrivilegedGroups(), RbacAuthorizer(index)])
    guard = RbacWriteGuard(chain, index)
    pods_get = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    cluster.put(
        KIND["clusterroles"],
        role(
            "role-admin",
            [
                {"apiGroups": [RBAC], "resources": ["roles", "rolebindings"], "verbs": ["create", "update"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            ],
        ),
    )
    cluster.put(KIND["rolebindings"], bind("ra", "ClusterRole", "role-admin", [user_subject("bob")], ns="d"))
    cluster.put(
        KIND["clusterroles"], role("secrets-reader", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
    )

    def run(a):
        return asyncio.run(guard.validate(a))

    run(_attrs(KIND["roles"], "CREATE", role("ok", pods_get, ns="d"), BOB, ns="d"))  # held: allowed
    with pytest.raises(st.ApiError) as e:
        run(
            _attrs(
                KIND["roles"],
                "CREATE",
                role("bad", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}], ns="d"),
                BOB,
                ns="d",
            )
        )
    assert e.value.code == 403
    assert (
        'user "bob" (groups=["devs" "system:authenticated"]) is attempting to grant RBAC permissions' in e.value.message
    )
    assert '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}' in e.value.message
    # Binding a role whose permissions bob lacks: refused; binding one he holds: allowed.
    with pytest.raises(st.ApiError) as e:
        run(
            _attrs(
                KIND["rolebindings"],
                "CREATE",
                bind("x", "ClusterRole", "secrets-reader", [user_subject("eve")], "d"),
                BOB,
                ns="d",
            )
        )
    assert e.value.code == 403
    cluster.put(KIND["clusterroles"], role("pod-reader", pods_get))
    run(
        _attrs(
            KIND["rolebindings"],
            "CREATE",
            bind("y", "ClusterRole", "pod-reader", [user_subject("eve")], "d"),
            BOB,
            ns="d",
        )
    )
    with pytest.raises(st.ApiError) as e:
        run(
            _attrs(
                KIND["rolebindings"],
                "CREATE",
                bind("z", "ClusterRole", "nope", [user_subject("eve")], "d"),
                BOB,
                ns="d",
            )
        )
    assert e.value.code == 404
    # The bind and escalate verbs short-circuit the coverage checks.
    cluster.put(
        KIND["clusterroles"],
        role(
            "binder",
            [
                {
                    "apiGroups": [RBAC],
                    "resources": ["clusterroles"],
                    "verbs": ["bind"],
                    "resourceNames": ["secrets-reader"],
                },
                {"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["escalate"]},
            ],
        ),
    )
    cluster.put(KIND["rolebindings"], bind("rb-binder", "ClusterRole", "binder", [user_subject("bob")], ns="d"))
    run(
        _attrs(
            KIND["rolebindings"],
            "CREATE",
            bind("x", "ClusterRole", "secrets-reader", [user_subject("eve")], "d"),
            BOB,
            ns="d",
        )
    )
    run(
        _attrs(
            KIND["roles"],
            "CREATE",
            role("bad", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], ns="d"),
            BOB,
            ns="d",
        )
    )
    # Shape errors are 422 before any permission check; roleRef cannot change.
    with pytest.raises(st.ApiError) as e:
        run(_attrs(KIND["roles"], "CREATE", role("r", [{"apiGroups": [""], "verbs": ["get"]}], ns="d"), BOB, ns="d"))
    assert e.value.code == 422
    old = bind("y", "ClusterRole", "pod-reader", [user_subject("eve")], "d")
    with pytest.raises(st.ApiError) as e:
        run(
            _attrs(
                KIND["rolebindings"],
                "UPDATE",
                bind("y", "ClusterRole", "other", [user_subject("eve")], "d"),
                BOB,
                old=old,
                ns="d",
            )
        )
    assert e.value.code == 422 and "cannot change roleRef" in e.value.message


# --- node authorizer -------------------------------------------------------------------------


def mkpod(name, node, ns="d", **spec):
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], **spec},
    }


def test_pod_references_cover_env_volumes_projected_and_pull_secrets():
    pod = mkpod(
        "p",
        "n1",
        serviceAccountName="sa",
        imagePullSecrets=[{"name": "pull"}],
        volumes=[
            {"name": "v1", "secret": {"secretName": "vol-secret"}},
            {"name": "v2", "configMap": {"name": "vol-cm"}},
            {"name": "v3", "persistentVolumeClaim": {"claimName": "claim"}},
            {
                "name": "v4",
                "projected": {"sources": [{"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}}]},
            },
            {"name": "v5", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}},
        ],
    )
    pod["spec"]["initContainers"] = [{"name": "i", "image": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}]
    pod["spec"]["containers"][0]["env"] = [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
    ]
    refs = pod_references(pod)
    assert refs["secret"] == {"pull", "vol-secret", "proj-secret", "csi-secret", "init-env", "env-secret"}
    assert refs["configmap"] == {"vol-cm", "proj-cm", "env-cm"}
    assert refs["pvc"] == {"claim"} and refs["serviceaccount"] == {"sa"}


def test_node_authorizer_uses_the_pod_graph(cluster):
    node = NodeAuthorizer(NodeGraph.attach(cluster.cache, REGISTRY))
    cluster.put(
        PODS, mkpod("mine", "n1", volumes=[{"name": "v", "secret": {"secretName": "s1"}}], serviceAccountName="sa1")
    )
    cluster.put(PODS, mkpod("theirs", "n2", volumes=[{"name": "v", "secret": {"secretName": "s2"}}]))

    def allow(a):
        return node.authorize(a)[0] is Decision.ALLOW

    assert allow(res(NODE1, "get", "secrets", "d", "s1"))
    assert allow(res(NODE1, "watch", "secrets", "d", "s1"))
    assert not allow(res(NODE1, "get", "secrets", "d", "s2"))
    assert "no relationship found between node 'n1'" in node.authorize(res(NODE1, "get", "secrets", "d", "s2"))[1]
    assert not allow(res(NODE1, "list", "secrets", "d"))
    assert not allow(res(NODE1, "update", "secrets", "d", "s1"))
    assert allow(res(NODE1, "create", "serviceaccounts", "d", "sa1", sub="token"))
    assert not allow(res(NODE1, "create", "serviceaccounts", "d", "sa2", sub="token"))
    # The pod moves away: the edge goes with it.
    cluster.put(PODS, mkpod("mine", "n3", volumes=[{"name": "v", "secret": {"secretName": "s1"}}]))
    assert not allow(res(NODE1, "get", "secrets", "d", "s1"))
    cluster.delete(PODS, "theirs", "d")
    assert not node.graph.has("n2", "secret", "d", "s2")
    # Fixed rules and own-object limits.
    assert allow(res(NODE1, "get", "nodes", name="n2"))
    assert allow(res(NODE1, "patch", "nodes", name="n1", sub="status"))
    assert not allow(res(NODE1, "patch", "nodes", name="n2", sub="status"))
    assert not allow(res(NODE1, "delete", "nodes", name="n1"))
    assert allow(res(NODE1, "update", "leases", names.NS_NODE_LEASE, "n1", names.COORDINATION_GROUP))
    assert not allow(res(NODE1, "update", "leases", names.NS_NODE_LEASE, "n2", names.COORDINATION_GROUP))
    assert allow(res(NODE1, "create", "events", "d"))
    assert allow(res(NODE1, "create", "certificatesigningrequests", group=names.CERTIFICATES_GROUP))
    assert not allow(res(NODE1, "delete", "deployments", "d", "x", "apps"))
    assert node.authorize(res(BOB, "get", "secrets", "d", "s1")) == (Decision.NO_OPINION, "")
    assert node.rules_for(NODE1, "d").incomplete


# --- NodeRestriction ----------------------------------------------------------------------


class FakeStore:
    def __init__(self, objects):
        self.objects = objects

    async def get_object(self, kind, ns, name):
        try:
            return self.objects[(kind.resource, ns, name)]
        except KeyError:
            raise st.not_found(kind.resource, name) from None


def test_forbidden_labels():
    assert forbidden_labels({"node-restriction.orch.io/x", "a.node-restriction.orch.io/y"}) == [
        "a.node-restriction.orch.io/y",
        "node-restriction.orch.io/x",
    ]
    assert (
        forbidden_labels(
            {
                names.LABEL_HOSTNAME,
                "node.orch.io/role",
                names.NODE_AGENT_LABEL_PREFIXES[0] + "x",
                "example.com/y",
                "plain",
            }
        )
        == []
    )
    assert forbidden_labels({"orch.io/made-up", "sub.orch.io/other"}) == ["orch.io/made-up", "sub.orch.io/other"]


def test_node_restriction_rules():
    node_obj = {"metadata": {"name": "n1", "uid": "node-uid"}}
    plugin = NodeRestriction(FakeStore({("nodes", "", "n1"): node_obj}), REGISTRY)

    def run(a):
        return asyncio.run(plugin.validate(a))

    def attrs(kind, op, obj=None, old=None, name="", ns="", sub="", user=NODE1):
        return Attributes(op, kind, ns, name, sub, obj, old, user, False)

    def refused(a, text):
        with pytest.raises(st.ApiError) as e:
            run(a)
        assert e.value.code == 403 and text in e.value.message, e.value.message

    def labels(d):
        return {"metadata": {"name": "n1", "labels": d}, "spec": {}}

    run(attrs(NODES, "CREATE", labels({names.LABEL_HOSTNAME: "n1"}), name="n1"))
    refused(attrs(NODES, "CREATE", labels({"node-restriction.orch.io/gpu": "y"}), name="n1"), "node-restriction")
    refused(attrs(NODES, "UPDATE", labels({}), labels({}), name="n2"), 'not allowed to modify node "n2"')
    refused(attrs(NODES, "DELETE", None, labels({}), name="n1"), "delete")
    tainted = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    refused(attrs(NODES, "UPDATE", labels({}), tainted, name="n1"), "taints")
    run(attrs(NODES, "UPDATE", labels({"node.orch.io/x": "1"}), labels({}), name="n1"))
    run(attrs(NODES, "UPDATE", labels({}), labels({}), name="n1", user=BOB))  # not a node: not restricted

    mirror = mkpod("m", "n1")
    mirror["metadata"]["annotations"] = {names.ANNOTATION_CONFIG_MIRROR: "h"}
    mirror["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid", "controller": True}
    ]
    run(attrs(PODS, "CREATE", mirror, name="m", ns="d"))
    plain = mkpod("p", "n1")
    refused(attrs(PODS, "CREATE", plain, name="p", ns="d"), "can only create mirror pods")
    other = {**mirror, "spec": {**mirror["spec"], "nodeName": "n2"}}
    refused(attrs(PODS, "CREATE", other, name="m", ns="d"), "spec.nodeName set to itself")
    with_secret = {**mirror, "spec": {**mirror["spec"], "volumes": [{"name": "v", "secret": {"secretName": "s"}}]}}
    refused(attrs(PODS, "CREATE", with_secret, name="m", ns="d"), "reference secrets")
    with_sa = {**mirror, "spec": {**mirror["spec"], "serviceAccountName": "default"}}
    refused(attrs(PODS, "CREATE", with_sa, name="m", ns="d"), "service account")
    run(attrs(PODS, "DELETE", None, mkpod("x", "n1"), name="x", ns="d"))
    refused(attrs(PODS, "DELETE", None, mkpod("x", "n2"), name="x", ns="d"), "can only delete pods")
    run(attrs(PODS, "UPDATE", mkpod("x", "n1"), mkpod("x", "n1"), name="x", ns="d", sub="status"))
    refused(attrs(PODS, "UPDATE", mkpod("x", "n2"), mkpod("x", "n2"), name="x", ns="d", sub="status"), "pod status")
    refused(attrs(PODS, "UPDATE", mkpod("x", "n1"), mkpod("x", "n1"), name="x", ns="d"), "unexpected operation")
    lease = {"metadata": {"name": "n1", "namespace": names.NS_NODE_LEASE}}
    run(attrs(LEASES, "CREATE", lease, name="n1", ns=names.NS_NODE_LEASE))
    refused(attrs(LEASES, "CREATE", {"metadata": {"name": "n2"}}, name="n2", ns=names.NS_NODE_LEASE), "same name")
    refused(attrs(LEASES, "UPDATE", lease, lease, name="n1", ns="default"), "system namespace")
    run(
        attrs(
            CSRS,
            "CREATE",
            {"metadata": {"name": "c"}, "spec": {"request": csr_b64("system:node:n1", ["system:nodes"])}},
            name="c",
        )
    )
    refused(
        attrs(
            CSRS,
            "CREATE",
            {"metadata": {"name": "c"}, "spec": {"request": csr_b64("system:node:n2", ["system:nodes"])}},
            name="c",
        ),
        "only request certificates for itself",
    )


# --- certificate admission --------------------------------------------------------------------


def csr_b64(cn: str, orgs: list[str]) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [
        x509.NameAttribute(NameOID.COMMON_NAME, cn)
    ]
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs)).sign(key, hashes.SHA256())
    from cryptography.hazmat.primitives.serialization import Encoding

    return base64.b64encode(csr.public_bytes(Encoding.PEM)).decode()


def test_csr_subject_parsing_and_subject_restriction():
    s = parse_csr_request(csr_b64("jane", ["dev", "ops"]))
    assert s.common_name == "jane" and s.organizations == ("dev", "ops")
    plugin = CertificateSubjectRestriction()

    def create(signer, orgs):
        obj = {"metadata": {"name": "c"}, "spec": {"signerName": signer, "request": csr_b64("x", orgs)}}
        return asyncio.run(plugin.validate(Attributes("CREATE", CSRS, "", "c", "", obj, None, BOB, False)))

    create(names.SIGNER_APISERVER_CLIENT, ["dev"])
    create(names.SIGNER_NODE_AGENT_CLIENT, [names.GROUP_MASTERS])  # other signers: not this plugin's business
    with pytest.raises(st.ApiError, match="system:masters group is not allowed"):
        create(names.SIGNER_APISERVER_CLIENT, ["dev", names.GROUP_MASTERS])
    bad = {"metadata": {"name": "c"}, "spec": {"signerName": names.SIGNER_APISERVER_CLIENT, "request": "bm90IGEgY3Ny"}}
    with pytest.raises(st.ApiError, match="failed to parse CSR"):
        asyncio.run(plugin.validate(Attributes("CREATE", CSRS, "", "c", "", bad, None, BOB, False)))


def test_certificate_approval_and_signing_need_signer_permissions(cluster):
    rbac = rbac_of(cluster)
    chain = Union([authz.PrivilegedGroups(), rbac])
    approval, signing = CertificateApproval(lambda: chain), CertificateSigning(lambda: chain)
    signer = names.SIGNER_APISERVER_CLIENT
    csr = {"metadata": {"name": "c"}, "spec": {"signerName": signer}, "status": {}}
    signed = {**csr, "status": {"certificate": "Y2VydA=="}}

    def approve() -> None:
        asyncio.run(approval.validate(Attributes("UPDATE", CSRS, "", "c", "approval", csr, csr, BOB, False)))

    def sign() -> None:
        asyncio.run(signing.validate(Attributes("UPDATE", CSRS, "", "c", "status", signed, csr, BOB, False)))

    with pytest.raises(st.ApiError, match="not permitted to approve"):
        approve()
    with pytest.raises(st.ApiError, match="not permitted to sign"):
        sign()
    cluster.put(
        KIND["clusterroles"],
        role(
            "approver",
            [
                {
                    "apiGroups": [names.CERTIFICATES_GROUP],
                    "resources": ["signers"],
                    "verbs": ["approve"],
                    "resourceNames": [f"{names.DOMAIN}/*"],
                },
                {
                    "apiGroups": [names.CERTIFICATES_GROUP],
                    "resources": ["signers"],
                    "verbs": ["sign"],
                    "resourceNames": [signer],
                },
            ],
        ),
    )
    cluster.put(KIND["clusterrolebindings"], bind("a", "ClusterRole", "approver", [user_subject("bob")]))
    approve()  # via <domain>/*
    sign()  # via the exact name
    # A status write that leaves the certificate alone needs nothing.
    asyncio.run(signing.validate(Attributes("UPDATE", CSRS, "", "c", "status", csr, csr, UserInfo("eve"), False)))


# --- default policy ------------------------------------------------------------------------


def test_reconcile_adds_what_is_missing_and_keeps_the_rest():
    expected = policy.cluster_role(
        "r", [policy.rule(("get",), ("",), ("pods",)), policy.rule(("list",), ("",), ("pods",))]
    )
    current = {
        "metadata": {"name": "r", "labels": {names.LABEL_RBAC_BOOTSTRAPPING: "mine"}},
        "rules": [policy.rule(("get", "watch"), ("",), ("pods",)), policy.rule(("get",), ("",), ("nodes",))],
    }
    assert policy.reconcile_role(current, expected)
    assert current["rules"][:2] == [
        policy.rule(("get", "watch"), ("",), ("pods",)),
        policy.rule(("get",), ("",), ("nodes",)),
    ]
    assert current["rules"][2] == policy.rule(("list",), ("",), ("pods",))
    assert current["metadata"]["labels"][names.LABEL_RBAC_BOOTSTRAPPING] == "mine"
    assert current["metadata"]["annotations"][names.ANNOTATION_RBAC_AUTOUPDATE] == "true"
    assert not policy.reconcile_role(current, expected)  # idempotent
    b = policy.cluster_binding("b", "r", [policy._subject("Group", "g1")])
    cur_b = {
        "metadata": {"name": "b"},
        "roleRef": b["roleRef"],
        "subjects": [{"kind": "User", "apiGroup": RBAC, "name": "x"}],
    }
    assert policy.reconcile_binding(cur_b, b)
    assert [s["name"] for s in cur_b["subjects"]] == ["x", "g1"]
    assert policy.protected({"metadata": {"annotations": {names.ANNOTATION_RBAC_AUTOUPDATE: "false"}}})
    # Every default object passes the write checks' shape validation.
    from apiserver_min.authz.rbac import validate_binding, validate_cluster_role, validate_rules

    for obj in policy.default_cluster_roles():
        assert validate_cluster_role(obj) == [], obj["metadata"]["name"]
    for obj in policy.default_roles():
        assert validate_rules(obj["rules"], True) == []
    for obj in policy.default_cluster_role_bindings():
        assert validate_binding(obj, True, None) == []
    for obj in policy.default_role_bindings():
        assert validate_binding(obj, False, None) == []


def test_aggregation_unions_selected_roles(cluster):
    index = RbacIndex.attach(cluster.cache, REGISTRY)
    for obj in policy.default_cluster_roles():
        cluster.put(KIND["clusterroles"], obj)
    view = aggregate_rules(index, "view")
    assert view == policy._aggregate_to_view()
    # edit and admin pick up view's rules once those are stored on view (chained aggregation).
    cluster.put(
        KIND["clusterroles"],
        {
            **policy.aggregated_role("view", names.LABEL_AGGREGATE_TO_VIEW, {names.LABEL_AGGREGATE_TO_EDIT: "true"}),
            "rules": view,
        },
    )
    edit = aggregate_rules(index, "edit")
    assert all(r in edit for r in view) and all(r in edit for r in policy._aggregate_to_edit())
    cluster.put(
        KIND["clusterroles"],
        role("extra", [policy.rule(("get",), ("x.io",), ("widgets",))], labels={names.LABEL_AGGREGATE_TO_VIEW: "true"}),
    )
    assert policy.rule(("get",), ("x.io",), ("widgets",)) in aggregate_rules(index, "view")
    assert aggregate_rules(index, names.ROLE_CLUSTER_ADMIN) is None
    # The node rules granted through system:node match the Node authorizer's fixed rules.
    node_role = next(r for r in policy.default_cluster_roles() if r["metadata"]["name"] == names.ROLE_NODE)
    assert tuple(PolicyRule.from_dict(r) for r in node_role["rules"]) == policy.node_rules()


# --- admission chain configuration -------------------------------------------------------------


def test_admission_plugin_flags():
    assert "NodeRestriction" not in resolve_plugins([], [])
    chosen = resolve_plugins(["NodeRestriction"], ["DefaultTolerationSeconds"])
    assert chosen.index("NamespaceLifecycle") < chosen.index("NodeRestriction") < chosen.index("CertificateApproval")
    assert "DefaultTolerationSeconds" not in chosen
    with pytest.raises(ValueError, match="unknown admission plugin"):
        resolve_plugins(["Bogus"], [])
    with pytest.raises(ValueError, match="in both"):
        resolve_plugins(["NodeRestriction"], ["NodeRestriction"])


def test_default_toleration_seconds():
    plugin = DefaultTolerationSeconds(300, 60)
    pod = mkpod("p", "")
    asyncio.run(plugin.admit(Attributes("CREATE", PODS, "d", "p", "", pod, None, BOB, False)))
    assert {(t["key"], t["tolerationSeconds"]) for t in pod["spec"]["tolerations"]} == {
        (names.TAINT_NOT_READY, 300),
        (names.TAINT_UNREACHABLE, 60),
    }
    tolerant = mkpod("q", "", tolerations=[{"operator": "Exists"}])
    asyncio.run(plugin.admit(Attributes("CREATE", PODS, "d", "q", "", tolerant, None, BOB, False)))
    assert tolerant["spec"]["tolerations"] == [{"operator": "Exists"}]


# --- review protobuf ------------------------------------------------------------------------


def _proto_classes():
    """The review messages built with the protobuf library itself: an encoder
    independent of the decoder under test."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="orch_test_review.proto", package="t", syntax="proto2")

    def msg(name, fields):
        m = fdp.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = f".t.{tname}"
        return m

    S, M, B, OPT, REP = F.TYPE_STRING, F.TYPE_MESSAGE, F.TYPE_BYTES, F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("TypeMeta", [("apiVersion", 1, S, OPT, ""), ("kind", 2, S, OPT, "")])
    msg(
        "Unknown",
        [
            ("typeMeta", 1, M, OPT, "TypeMeta"),
            ("raw", 2, B, OPT, ""),
            ("contentEncoding", 3, S, OPT, ""),
            ("contentType", 4, S, OPT, ""),
        ],
    )
    msg("ObjectMeta", [("name", 1, S, OPT, "")])
    msg(
        "ResourceAttributes",
        [
            (n, i + 1, S, OPT, "")
            for i, n in enumerate(("namespace", "verb", "group", "version", "resource", "subresource", "name"))
        ],
    )
    msg("NonResourceAttributes", [("path", 1, S, OPT, ""), ("verb", 2, S, OPT, "")])
    msg("ExtraValue", [("items", 1, S, REP, "")])
    msg("ExtraEntry", [("key", 1, S, OPT, ""), ("value", 2, M, OPT, "ExtraValue")])
    msg(
        "Spec",
        [
            ("resourceAttributes", 1, M, OPT, "ResourceAttributes"),
            ("nonResourceAttributes", 2, M, OPT, "NonResourceAttributes"),
            ("user", 3, S, OPT, ""),
            ("groups", 4, S, REP, ""),
            ("extra", 5, M, REP, "ExtraEntry"),
            ("uid", 6, S, OPT, ""),
        ],
    )
    msg("Review", [("metadata", 1, M, OPT, "ObjectMeta"), ("spec", 2, M, OPT, "Spec")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"t.{n}")) for n in ("Unknown", "Review")}


def test_review_protobuf_envelope_decodes():
    cls = _proto_classes()
    review = cls["Review"]()
    review.metadata.name = "q"
    ra = review.spec.resourceAttributes
    ra.namespace, ra.verb, ra.resource, ra.subresource, ra.name = "default", "get", "pods", "log", "web"
    env = cls["Unknown"]()
    env.typeMeta.apiVersion = f"{names.UPSTREAM_AUTHORIZATION_GROUP}/v1"
    env.typeMeta.kind = "SelfSubjectAccessReview"
    env.raw = review.SerializeToString()
    env.contentType = names.MEDIA_PROTOBUF_UPSTREAM
    body = names.PROTOBUF_MAGIC + env.SerializeToString()
    api_version, kind, raw = reviews.decode_envelope(body)
    assert (api_version, kind) == (f"{names.UPSTREAM_AUTHORIZATION_GROUP}/v1", "SelfSubjectAccessReview")
    obj = reviews.decode_review(kind, raw)
    assert obj["metadata"] == {"name": "q"}
    assert obj["spec"] == {
        "resourceAttributes": {
            "namespace": "default",
            "verb": "get",
            "resource": "pods",
            "subresource": "log",
            "name": "web",
        }
    }
    sar = cls["Review"]()
    sar.spec.nonResourceAttributes.path = "/healthz"
    sar.spec.nonResourceAttributes.verb = "get"
    sar.spec.user = "jane"
    sar.spec.groups.extend(["a", "b"])
    e = sar.spec.extra.add()
    e.key = "scopes"
    e.value.items.extend(["x", "y"])
    obj = reviews.decode_review("SubjectAccessReview", sar.SerializeToString())
    assert obj["spec"] == {
        "nonResourceAttributes": {"path": "/healthz", "verb": "get"},
        "user": "jane",
        "groups": ["a", "b"],
        "extra": {"scopes": ["x", "y"]},
    }
    with pytest.raises(reviews.ProtobufError):
        reviews.decode_envelope(b"{}")
    with pytest.raises(reviews.ProtobufError):
        reviews.decode_envelope(names.PROTOBUF_MAGIC + b"\x12\x05ab")  # truncated bytes
