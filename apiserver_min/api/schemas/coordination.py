"""``coordination.orch.io/v1`` (upstream ``coordination.k8s.io``): message package
``k8s.io.api.coordination.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META
from ._common import I32, MICROTIME, STR, F, ptr, struct

S = struct("k8s.io.api.coordination.v1")

LeaseSpec = S(
    "LeaseSpec",
    [
        ptr("holderIdentity", STR, 1, description="Identity of the current holder of the lease."),
        ptr("leaseDurationSeconds", I32, 2, description="Seconds candidates wait before they may take the lease over."),
        ptr("acquireTime", MICROTIME, 3, description="When the current holder acquired the lease."),
        ptr("renewTime", MICROTIME, 4, description="When the current holder last renewed the lease."),
        ptr("leaseTransitions", I32, 5, description="How many times the lease changed holders."),
    ],
)

Lease = S(
    "Lease",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", LeaseSpec, 2),
    ],
)

KINDS = {"Lease": Lease}
