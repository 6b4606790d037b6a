"""ExtendedResourceToleration: a pod requesting an extended resource (say
``example.com/gpu``) tolerates the NoSchedule taint of that name, so nodes offering
it can be tainted to keep other pods away."""

from __future__ import annotations

from ...api import names
from ...api.validation import is_qualified_name
from ..chain import Attributes
from ..tolerations import add_or_update


def is_extended_resource(name: str) -> bool:
    """A resource name outside the project's own namespace that could be quota'd."""
    if "/" not in name or names.RESOURCE_NATIVE_PREFIX in name or name.startswith("requests."):
        return False
    return not is_qualified_name("requests." + name)


class ExtendedResourceToleration:
    name = "ExtendedResourceToleration"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE", "UPDATE"})
    complete = True

    async def admit(self, attrs: Attributes) -> None:
        if attrs.subresource or attrs.operation not in ("CREATE", "UPDATE"):
            return
        spec = (attrs.obj or {}).get("spec")
        if not isinstance(spec, dict):
            return
        wanted: set[str] = set()
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or []:
                requests = ((c.get("resources") or {}).get("requests") or {}) if isinstance(c, dict) else {}
                wanted.update(r for r in requests if is_extended_resource(r))
        if not wanted:
            return
        tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
        for resource in sorted(wanted):
            tolerations = add_or_update(tolerations, {"key": resource, "operator": "Exists", "effect": "NoSchedule"})
        spec["tolerations"] = tolerations

    async def validate(self, attrs: Attributes) -> None:
        return None
