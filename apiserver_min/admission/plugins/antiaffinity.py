"""LimitPodHardAntiAffinityTopology: required pod anti-affinity may only spread pods
over nodes (topology key ``orch.io/hostname``), so one pod cannot keep a whole zone
from others."""

from __future__ import annotations

from ...api import names
from ...api import status as st
from ..chain import Attributes


class LimitPodHardAntiAffinityTopology:
    name = "LimitPodHardAntiAffinityTopology"
    resources = frozenset({("", "pods")})

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if attrs.subresource or attrs.operation not in ("CREATE", "UPDATE"):
            return
        spec = (attrs.obj or {}).get("spec")
        affinity = spec.get("affinity") if isinstance(spec, dict) else None
        anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
        if not isinstance(anti, dict):
            return
        for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
            key = term.get("topologyKey", "") if isinstance(term, dict) else ""
            if key != names.LABEL_HOSTNAME:
                raise st.forbidden(
                    "pods",
                    attrs.name,
                    "",
                    f"affinity.PodAntiAffinity.RequiredDuringScheduling has TopologyKey {key} "
                    f"but only key {names.LABEL_HOSTNAME} is allowed",
                )
