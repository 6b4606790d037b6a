"""``autoscaling/v1``: the Scale sub-resource kind. Message package
``k8s.io.api.autoscaling.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META
from ._common import I32, STR, F, req, struct

S = struct("k8s.io.api.autoscaling.v1")

ScaleSpec = S(
    "ScaleSpec",
    [
        F("replicas", I32, 1),
    ],
)

ScaleStatus = S(
    "ScaleStatus",
    [
        req("replicas", I32, 1),
        F("selector", STR, 2),
    ],
)

Scale = S(
    "Scale",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ScaleSpec, 2),
        F("status", ScaleStatus, 3),
    ],
)

KINDS = {"Scale": Scale}
