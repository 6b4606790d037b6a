"""``authentication.orch.io`` (upstream ``authentication.k8s.io``): the virtual review
kinds TokenReview, TokenRequest (``serviceaccounts/token``) and SelfSubjectReview.
Message packages ``k8s.io.api.authentication.{v1,v1beta1,v1alpha1}`` (upstream v1.27:
SelfSubjectReview is v1beta1 and v1alpha1 there; v1 is accepted here too, as 1.28
clients ask for it first)."""

from __future__ import annotations

from ..schema import OBJECT_META, List, Map
from ._common import BOOL, I64, STR, STR_LIST, TIME, F, ptr, req, struct

PKG = "k8s.io.api.authentication.v1"
S = struct(PKG)

EXTRA = Map(List(STR, wrapper=f"{PKG}.ExtraValue"))

UserInfo = S(
    "UserInfo",
    [
        F("username", STR, 1),
        F("uid", STR, 2),
        F("groups", STR_LIST, 3),
        F("extra", EXTRA, 4),
    ],
)

TokenReviewSpec = S(
    "TokenReviewSpec",
    [
        F("token", STR, 1),
        F("audiences", STR_LIST, 2),
    ],
)

TokenReviewStatus = S(
    "TokenReviewStatus",
    [
        F("authenticated", BOOL, 1),
        F("user", UserInfo, 2),
        F("audiences", STR_LIST, 4),
        F("error", STR, 3),
    ],
)

TokenReview = S(
    "TokenReview",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", TokenReviewSpec, 2),
        F("status", TokenReviewStatus, 3),
    ],
)

BoundObjectReference = S(
    "BoundObjectReference",
    [
        F("kind", STR, 1),
        F("apiVersion", STR, 2),
        F("name", STR, 3),
        F("uid", STR, 4),
    ],
)

TokenRequestSpec = S(
    "TokenRequestSpec",
    [
        req("audiences", STR_LIST, 1),
        ptr("expirationSeconds", I64, 4),
        ptr("boundObjectRef", BoundObjectReference, 3),
    ],
)

TokenRequestStatus = S(
    "TokenRequestStatus",
    [
        req("token", STR, 1),
        req("expirationTimestamp", TIME, 2),
    ],
)

TokenRequest = S(
    "TokenRequest",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", TokenRequestSpec, 2),
        F("status", TokenRequestStatus, 3),
    ],
)


def _self_subject_review(version: str):
    s = struct(f"k8s.io.api.authentication.{version}")
    status = s("SelfSubjectReviewStatus", [F("userInfo", UserInfo, 1)])
    return s(
        "SelfSubjectReview",
        [
            F("metadata", OBJECT_META, 1),
            F("status", status, 2),
        ],
    )


SelfSubjectReview = _self_subject_review("v1")
SelfSubjectReviewV1beta1 = _self_subject_review("v1beta1")
SelfSubjectReviewV1alpha1 = _self_subject_review("v1alpha1")

KINDS = {
    "TokenReview": TokenReview,
    "TokenRequest": TokenRequest,
    "SelfSubjectReview": SelfSubjectReview,
}
KINDS_BY_VERSION = {
    "v1": KINDS,
    "v1beta1": {"SelfSubjectReview": SelfSubjectReviewV1beta1},
    "v1alpha1": {"SelfSubjectReview": SelfSubjectReviewV1alpha1},
}
