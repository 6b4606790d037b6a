"""DefaultTolerationSeconds: new pods tolerate not-ready and unreachable nodes for a while."""

from __future__ import annotations

from ...api import names
from ..chain import Attributes


class DefaultTolerationSeconds:
    """New pods tolerate the not-ready and unreachable NoExecute taints for a while
    (default 300 s each), so a short node outage does not evict them at once."""

    name = "DefaultTolerationSeconds"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE"})
    complete = True  # whole tolerations; nothing the pod strategy derives from

    def __init__(self, not_ready_seconds: int = 300, unreachable_seconds: int = 300):
        self.not_ready_seconds = not_ready_seconds
        self.unreachable_seconds = unreachable_seconds

    async def admit(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.operation != "CREATE" or attrs.subresource or k.group != "" or k.resource != "pods":
            return
        spec = (attrs.obj or {}).get("spec")
        if not isinstance(spec, dict):
            return
        tolerations = spec.get("tolerations")
        if tolerations is not None and not isinstance(tolerations, list):
            return
        tolerations = list(tolerations or [])

        def tolerates(key: str) -> bool:
            return any(
                isinstance(t, dict) and t.get("key", "") in (key, "") and t.get("effect", "") in ("NoExecute", "")
                for t in tolerations
            )

        added = False
        for key, seconds in (
            (names.TAINT_NOT_READY, self.not_ready_seconds),
            (names.TAINT_UNREACHABLE, self.unreachable_seconds),
        ):
            if not tolerates(key):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
                )
                added = True
        if added:
            spec["tolerations"] = tolerations

    async def validate(self, attrs: Attributes) -> None:
        return None
