"""``discovery.orch.io/v1`` (upstream ``discovery.k8s.io``): message package
``k8s.io.api.discovery.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META, List
from . import core
from ._common import BOOL, I32, STR, STR_MAP, STR_SET, F, enum, ptr, req, struct

S = struct("k8s.io.api.discovery.v1")

EndpointConditions = S(
    "EndpointConditions",
    [
        ptr("ready", BOOL, 1),
        ptr("serving", BOOL, 2),
        ptr("terminating", BOOL, 3),
    ],
)

ForZone = S(
    "ForZone",
    [
        req("name", STR, 1),
    ],
)

EndpointHints = S(
    "EndpointHints",
    [
        F("forZones", List(ForZone, "atomic"), 1),
    ],
)

Endpoint = S(
    "Endpoint",
    [
        req("addresses", STR_SET, 1),
        F("conditions", EndpointConditions, 2),
        ptr("hostname", STR, 3),
        ptr("targetRef", core.ObjectReference, 4),
        F("deprecatedTopology", STR_MAP, 5),
        ptr("nodeName", STR, 6),
        ptr("zone", STR, 7),
        ptr("hints", EndpointHints, 8),
    ],
)

EndpointPort = S(
    "EndpointPort",
    [
        ptr("name", STR, 1),
        ptr("protocol", core.PROTOCOL, 2),
        ptr("port", I32, 3),
        ptr("appProtocol", STR, 4),
    ],
    atomic=True,
)

EndpointSlice = S(
    "EndpointSlice",
    [
        F("metadata", OBJECT_META, 1),
        req("addressType", enum("FQDN", "IPv4", "IPv6"), 4),
        req("endpoints", List(Endpoint, "atomic"), 2),
        F("ports", List(EndpointPort, "atomic"), 3),
    ],
)

KINDS = {"EndpointSlice": EndpointSlice}
