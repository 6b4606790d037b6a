"""Strategies of Endpoints (core ``v1``) and EndpointSlices (``discovery.orch.io/v1``).

Both validate their addresses and ports as upstream (``api/endpointvalidation.py``),
with one exception: the API server publishes itself in the ``orch`` Endpoints and
EndpointSlice of ``default`` at its advertised address, which on a one-machine cluster is a loopback
address (upstream would advertise the host's interface address instead); that write,
by the API server's own user, may list a loopback address. Anyone else's may not.
An EndpointSlice's generation moves with its content. The ``deprecatedTopology`` of
its endpoints is read-only in ``v1``: a write that changes the endpoints drops it
(keeping, as ``nodeName``, a node name it recorded before), one that leaves the
endpoints alone keeps it.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ..api import endpointvalidation as ev
from ..api import names
from ..api import validation as v
from ..api.user import SYSTEM_USER
from .strategy import Strategy

# Whether the write being validated (in this task) is the API server's own write of its
# orch Endpoints: set by prepare_for_request, which the store calls before validating.
_OWN_ENDPOINTS: contextvars.ContextVar[bool] = contextvars.ContextVar("own_endpoints", default=False)


def _note_writer(obj: dict, user: Any) -> None:
    md = obj.get("metadata") or {}
    own = (
        getattr(user, "name", None) == SYSTEM_USER.name
        and md.get("namespace") == names.NS_DEFAULT
        and md.get("name") == names.DEFAULT_SERVICE_NAME
    )
    _OWN_ENDPOINTS.set(own)


class EndpointsStrategy(Strategy):
    def prepare_for_request(self, obj: dict, old: dict | None, user: Any, subresource: str) -> None:
        _note_writer(obj, user)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + ev.validate_endpoints(obj, allow_loopback=_OWN_ENDPOINTS.get())


class EndpointSliceStrategy(Strategy):
    def prepare_for_request(self, obj: dict, old: dict | None, user: Any, subresource: str) -> None:
        _note_writer(obj, user)

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        _drop_topology(None, obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        _drop_topology(old, new)
        super().prepare_for_update(new, old)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + ev.validate_endpoint_slice(obj, allow_loopback=_OWN_ENDPOINTS.get())

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
