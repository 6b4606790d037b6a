"""``authorization.orch.io/v1`` (upstream ``authorization.k8s.io``): the virtual
review kinds. Message package ``k8s.io.api.authorization.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META, List, Map
from ._common import BOOL, STR, STR_LIST, F, ptr, req, struct

PKG = "k8s.io.api.authorization.v1"
S = struct(PKG)

ResourceAttributes = S(
    "ResourceAttributes",
    [
        F("namespace", STR, 1),
        F("verb", STR, 2),
        F("group", STR, 3),
        F("version", STR, 4),
        F("resource", STR, 5),
        F("subresource", STR, 6),
        F("name", STR, 7),
    ],
)

NonResourceAttributes = S(
    "NonResourceAttributes",
    [
        F("path", STR, 1),
        F("verb", STR, 2),
    ],
)

SubjectAccessReviewSpec = S(
    "SubjectAccessReviewSpec",
    [
        ptr("resourceAttributes", ResourceAttributes, 1),
        ptr("nonResourceAttributes", NonResourceAttributes, 2),
        F("user", STR, 3),
        F("groups", STR_LIST, 4),
        F("extra", Map(List(STR, wrapper=f"{PKG}.ExtraValue")), 5),
        F("uid", STR, 6),
    ],
)

SelfSubjectAccessReviewSpec = S(
    "SelfSubjectAccessReviewSpec",
    [
        ptr("resourceAttributes", ResourceAttributes, 1),
        ptr("nonResourceAttributes", NonResourceAttributes, 2),
    ],
)

SubjectAccessReviewStatus = S(
    "SubjectAccessReviewStatus",
    [
        req("allowed", BOOL, 1),
        F("denied", BOOL, 4),
        F("reason", STR, 2),
        F("evaluationError", STR, 3),
    ],
)

SubjectAccessReview = S(
    "SubjectAccessReview",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", SubjectAccessReviewSpec, 2),
        F("status", SubjectAccessReviewStatus, 3),
    ],
)

SelfSubjectAccessReview = S(
    "SelfSubjectAccessReview",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", SelfSubjectAccessReviewSpec, 2),
        F("status", SubjectAccessReviewStatus, 3),
    ],
)

LocalSubjectAccessReview = S(
    "LocalSubjectAccessReview",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", SubjectAccessReviewSpec, 2),
        F("status", SubjectAccessReviewStatus, 3),
    ],
)

SelfSubjectRulesReviewSpec = S(
    "SelfSubjectRulesReviewSpec",
    [
        F("namespace", STR, 1),
    ],
)

ResourceRule = S(
    "ResourceRule",
    [
        req("verbs", STR_LIST, 1),
        F("apiGroups", STR_LIST, 2),
        F("resources", STR_LIST, 3),
        F("resourceNames", STR_LIST, 4),
    ],
)

NonResourceRule = S(
    "NonResourceRule",
    [
        req("verbs", STR_LIST, 1),
        F("nonResourceURLs", STR_LIST, 2),
    ],
)

SubjectRulesReviewStatus = S(
    "SubjectRulesReviewStatus",
    [
        req("resourceRules", List(ResourceRule), 1),
        req("nonResourceRules", List(NonResourceRule), 2),
        req("incomplete", BOOL, 3),
        F("evaluationError", STR, 4),
    ],
)

SelfSubjectRulesReview = S(
    "SelfSubjectRulesReview",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", SelfSubjectRulesReviewSpec, 2),
        F("status", SubjectRulesReviewStatus, 3),
    ],
)

KINDS = {
    "SubjectAccessReview": SubjectAccessReview,
    "SelfSubjectAccessReview": SelfSubjectAccessReview,
    "LocalSubjectAccessReview": LocalSubjectAccessReview,
    "SelfSubjectRulesReview": SelfSubjectRulesReview,
}
