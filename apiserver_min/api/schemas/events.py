"""``events.orch.io/v1`` (upstream ``events.k8s.io``): message package
``k8s.io.api.events.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META
from . import core
from ._common import I32, MICROTIME, STR, TIME, F, ptr, req, struct

S = struct("k8s.io.api.events.v1")

EventSeries = S(
    "EventSeries",
    [
        req("count", I32, 1),
        req("lastObservedTime", MICROTIME, 2),
    ],
)

Event = S(
    "Event",
    [
        F("metadata", OBJECT_META, 1),
        req("eventTime", MICROTIME, 2),
        ptr("series", EventSeries, 3),
        F("reportingController", STR, 4),
        F("reportingInstance", STR, 5),
        F("action", STR, 6),
        F("reason", STR, 7),
        F("regarding", core.ObjectReference, 8),
        ptr("related", core.ObjectReference, 9),
        F("note", STR, 10),
        F("type", STR, 11),  # "Normal" | "Warning" (per-kind validation; not an upstream enum)
        F("deprecatedSource", core.EventSource, 12),
        F("deprecatedFirstTimestamp", TIME, 13),
        F("deprecatedLastTimestamp", TIME, 14),
        F("deprecatedCount", I32, 15),
    ],
)

KINDS = {"Event": Event}
