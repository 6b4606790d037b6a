"""SecurityContextDeny: pods may not set the security-context fields that let them
choose their identity or SELinux context (for clusters without PodSecurity)."""

from __future__ import annotations

from ...api import status as st
from ..chain import Attributes

# Pod-level fields refused, in the order upstream checks them.
POD_FIELDS = (
    ("supplementalGroups", "SupplementalGroups"),
    ("seLinuxOptions", "SELinuxOptions"),
    ("runAsUser", "RunAsUser"),
    ("fsGroup", "FSGroup"),
)
CONTAINER_FIELDS = (("seLinuxOptions", "SELinuxOptions"), ("runAsUser", "RunAsUser"))


class SecurityContextDeny:
    name = "SecurityContextDeny"
    resources = frozenset({("", "pods")})

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if attrs.subresource or attrs.operation not in ("CREATE", "UPDATE"):
            return
        spec = (attrs.obj or {}).get("spec")
        if not isinstance(spec, dict):
            return
        name = attrs.name
        psc = spec.get("securityContext")
        if isinstance(psc, dict):
            for field, go_name in POD_FIELDS:
                if psc.get(field) is not None:
                    raise st.forbidden("pods", name, "", f"pod.Spec.SecurityContext.{go_name} is forbidden")
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                sc = c.get("securityContext") if isinstance(c, dict) else None
                if not isinstance(sc, dict):
                    continue
                for field, go_name in CONTAINER_FIELDS:
                    if sc.get(field) is not None:
                        raise st.forbidden("pods", name, "", f"SecurityContext.{go_name} is forbidden")
