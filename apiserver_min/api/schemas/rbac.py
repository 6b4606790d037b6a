"""``rbac.orch.io/v1`` (upstream ``rbac.authorization.k8s.io``): message package
``k8s.io.api.rbac.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import LABEL_SELECTOR, OBJECT_META, List
from ._common import STR, STR_LIST, F, ptr, req, struct

S = struct("k8s.io.api.rbac.v1")

PolicyRule = S(
    "PolicyRule",
    [
        req("verbs", STR_LIST, 1, description="Verbs the rule allows; '*' allows all."),
        F("apiGroups", STR_LIST, 2, description="API groups of the resources; '' is the core group, '*' all groups."),
        F("resources", STR_LIST, 3, description="Resources the rule applies to; '*' all of them."),
        F("resourceNames", STR_LIST, 4, description="Names of the objects the rule is limited to."),
        F("nonResourceURLs", STR_LIST, 5, description="Non-resource URL paths the rule allows (cluster roles only)."),
    ],
)

Subject = S(
    "Subject",
    [
        req("kind", STR, 1, description="Kind of subject: User, Group or ServiceAccount."),
        F("apiGroup", STR, 2, description="API group of the subject; empty for service accounts."),
        req("name", STR, 3, description="Name of the subject."),
        F("namespace", STR, 4, description="Namespace of a service account subject."),
    ],
    atomic=True,
)

RoleRef = S(
    "RoleRef",
    [
        req("apiGroup", STR, 1, description="API group of the referenced role."),
        req("kind", STR, 2, description="Kind of the referenced role: Role or ClusterRole."),
        req("name", STR, 3, description="Name of the referenced role."),
    ],
    atomic=True,
)

AggregationRule = S(
    "AggregationRule",
    [
        F("clusterRoleSelectors", List(LABEL_SELECTOR), 1),
    ],
)

Role = S(
    "Role",
    [
        F("metadata", OBJECT_META, 1),
        F("rules", List(PolicyRule), 2, description="The permissions the role grants."),
    ],
)

RoleBinding = S(
    "RoleBinding",
    [
        F("metadata", OBJECT_META, 1),
        F("subjects", List(Subject), 2, description="The subjects the role is granted to."),
        req("roleRef", RoleRef, 3, description="The role granted; cannot be changed."),
    ],
)

ClusterRole = S(
    "ClusterRole",
    [
        F("metadata", OBJECT_META, 1),
        F("rules", List(PolicyRule), 2, description="The permissions the cluster role grants."),
        ptr(
            "aggregationRule",
            AggregationRule,
            3,
            description="Selects cluster roles whose rules are aggregated into this one.",
        ),
    ],
)

ClusterRoleBinding = S(
    "ClusterRoleBinding",
    [
        F("metadata", OBJECT_META, 1),
        F("subjects", List(Subject), 2, description="The subjects the cluster role is granted to."),
        req("roleRef", RoleRef, 3, description="The cluster role granted; cannot be changed."),
    ],
)

KINDS = {
    "Role": Role,
    "RoleBinding": RoleBinding,
    "ClusterRole": ClusterRole,
    "ClusterRoleBinding": ClusterRoleBinding,
}
