"""``rbac.orch.io/v1`` (upstream ``rbac.authorization.k8s.io``): message package
``k8s.io.api.rbac.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import LABEL_SELECTOR, OBJECT_META, List
from ._common import STR, STR_LIST, F, ptr, req, struct

S = struct("k8s.io.api.rbac.v1")

PolicyRule = S("PolicyRule", [
    req("verbs", STR_LIST, 1),
    F("apiGroups", STR_LIST, 2),
    F("resources", STR_LIST, 3),
    F("resourceNames", STR_LIST, 4),
    F("nonResourceURLs", STR_LIST, 5),
])

Subject = S("Subject", [
    req("kind", STR, 1),
    F("apiGroup", STR, 2),
    req("name", STR, 3),
    F("namespace", STR, 4),
], atomic=True)

RoleRef = S("RoleRef", [
    req("apiGroup", STR, 1),
    req("kind", STR, 2),
    req("name", STR, 3),
], atomic=True)

AggregationRule = S("AggregationRule", [
    F("clusterRoleSelectors", List(LABEL_SELECTOR), 1),
])

Role = S("Role", [
    F("metadata", OBJECT_META, 1),
    F("rules", List(PolicyRule), 2),
])

RoleBinding = S("RoleBinding", [
    F("metadata", OBJECT_META, 1),
    F("subjects", List(Subject), 2),
    req("roleRef", RoleRef, 3),
])

ClusterRole = S("ClusterRole", [
    F("metadata", OBJECT_META, 1),
    F("rules", List(PolicyRule), 2),
    ptr("aggregationRule", AggregationRule, 3),
])

ClusterRoleBinding = S("ClusterRoleBinding", [
    F("metadata", OBJECT_META, 1),
    F("subjects", List(Subject), 2),
    req("roleRef", RoleRef, 3),
])

KINDS = {
    "Role": Role,
    "RoleBinding": RoleBinding,
    "ClusterRole": ClusterRole,
    "ClusterRoleBinding": ClusterRoleBinding,
}
