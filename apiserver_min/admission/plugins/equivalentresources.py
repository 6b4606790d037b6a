"""The equivalent resources the webhook plugins and ValidatingAdmissionPolicy match with
(``matchPolicy: Equivalent``): one per server, with the conversions of the built-in
kinds served at several versions (``admission/equivalence.py``)."""

from __future__ import annotations

from typing import Any

from ...api import names
from ...registry.autoscaling_v1 import to_v1, view_to_v2
from ..equivalence import Converters, Equivalence

HPA = "horizontalpodautoscalers"


def converters() -> Converters:
    """Built-in kinds served at several versions, and how objects go between them."""
    return {
        (names.AUTOSCALING_GROUP, HPA, "v2", "v1"): to_v1,
        (names.AUTOSCALING_GROUP, HPA, "v1", "v2"): view_to_v2,
    }


def for_server(server: Any) -> Equivalence:
    """The server's equivalent resources (made on first use, shared by the plugins)."""
    found = getattr(server, "admission_equivalence", None)
    if not isinstance(found, Equivalence):
        found = Equivalence(server.registry, converters())
        server.admission_equivalence = found
    return found
