"""Strategies of Endpoints (core ``v1``) and EndpointSlices (``discovery.orch.io/v1``).

Both validate their addresses and ports as upstream (``api/endpointvalidation.py``),
the API server's own ``orch`` Endpoints included (it advertises a non-loopback
address, see ``hostaddr.py``). An EndpointSlice's generation moves with its content. The ``deprecatedTopology`` of
its endpoints is read-only in ``v1``: a write that changes the endpoints drops it
(keeping, as ``nodeName``, a node name it recorded before), one that leaves the
endpoints alone keeps it.
"""

from __future__ import annotations

from ..api import endpointvalidation as ev
from ..api import names
from ..api import validation as v
from .strategy import Strategy


class EndpointsStrategy(Strategy):
    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + ev.validate_endpoints(obj)


class EndpointSliceStrategy(Strategy):
    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        _drop_topology(None, obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        _drop_topology(old, new)
        super().prepare_for_update(new, old)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + ev.validate_endpoint_slice(obj)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        if new.get("addressType") != old.get("addressType"):
            errs.append(v.FieldError.invalid("addressType", new.get("addressType"), "field is immutable"))
        return errs


def _drop_topology(old: dict | None, new: dict) -> None:
    endpoints = new.get("endpoints")
    if not isinstance(endpoints, list):
        return
    if old is not None and old.get("endpoints") == endpoints:
        return
    known: set[str] = set()
    for ep in (old or {}).get("endpoints") or []:
        if isinstance(ep, dict) and isinstance(ep.get("deprecatedTopology"), dict):
            node = ep["deprecatedTopology"].get(names.LABEL_HOSTNAME)
            if isinstance(node, str):
                known.add(node)
    for ep in endpoints:
        if not isinstance(ep, dict) or "deprecatedTopology" not in ep:
            continue
        topology = ep.pop("deprecatedTopology")
        node = topology.get(names.LABEL_HOSTNAME) if isinstance(topology, dict) else None
        if ep.get("nodeName") is None and isinstance(node, str) and node in known and not v.is_dns1123_subdomain(node):
            ep["nodeName"] = node
