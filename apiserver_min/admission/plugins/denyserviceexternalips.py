"""DenyServiceExternalIPs: no new external IPs on Services (off by default).

External IPs let a Service claim traffic to any address the nodes receive, so a
cluster may refuse them: a create with ``spec.externalIPs``, or an update adding an
address the Service did not have, is forbidden. Removing addresses, and updates that
keep the ones already there, stay allowed (as upstream's plugin).
"""

from __future__ import annotations

from ...api import status as st
from ..chain import Attributes

MESSAGE = "Use of external IPs is denied by admission control"


def _external_ips(obj: dict | None) -> list:
    spec = (obj or {}).get("spec")
    ips = spec.get("externalIPs") if isinstance(spec, dict) else None
    return list(ips) if isinstance(ips, list) else []


class DenyServiceExternalIPs:
    name = "DenyServiceExternalIPs"
    resources = frozenset({("", "services")})
    operations = frozenset({"CREATE", "UPDATE"})

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if k.group != "" or k.resource != "services" or attrs.subresource:
            return
        if attrs.operation not in ("CREATE", "UPDATE"):
            return
        new = _external_ips(attrs.obj)
        if not new:
            return
        old = set(_external_ips(attrs.old)) if attrs.operation == "UPDATE" else set()
        if all(ip in old for ip in new):
            return
        raise st.forbidden("services", attrs.name, "", MESSAGE)
