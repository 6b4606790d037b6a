"""``storage.orch.io/v1`` (upstream ``storage.k8s.io``): message package
``k8s.io.api.storage.v1`` (upstream v1.27). Only StorageClass is served."""

from __future__ import annotations

from ..schema import OBJECT_META, List
from . import core
from ._common import BOOL, STR, STR_LIST, STR_MAP, F, enum, ptr, req, struct

S = struct("k8s.io.api.storage.v1")

StorageClass = S(
    "StorageClass",
    [
        F("metadata", OBJECT_META, 1),
        req("provisioner", STR, 2),
        F("parameters", STR_MAP, 3),
        ptr("reclaimPolicy", enum("Delete", "Recycle", "Retain"), 4),
        F("mountOptions", STR_LIST, 5),
        ptr("allowVolumeExpansion", BOOL, 6),
        ptr("volumeBindingMode", enum("Immediate", "WaitForFirstConsumer"), 7),
        F("allowedTopologies", List(core.TopologySelectorTerm, "atomic"), 8),
    ],
)

KINDS = {"StorageClass": StorageClass}
