"""TaintNodesByCondition: every new Node starts with the taint
``node.orch.io/not-ready:NoSchedule`` (unless it already has one of that key and
effect), so nothing is scheduled onto it before its agent reports it ready; the
node lifecycle controller removes the taint when the node's conditions no longer
call for it. As upstream (v1.27): creates of the main resource only."""

from __future__ import annotations

from typing import Any

from ...api import names
from ..chain import Attributes

NOT_READY_TAINT = {"key": names.TAINT_NOT_READY, "effect": "NoSchedule"}


class TaintNodesByCondition:
    name = "TaintNodesByCondition"
    resources = frozenset({("", "nodes")})
    operations = frozenset({"CREATE"})
    complete = True

    async def admit(self, attrs: Attributes) -> None:
        if attrs.subresource or attrs.operation != "CREATE" or not isinstance(attrs.obj, dict):
            return
        spec = attrs.obj.get("spec")
        if spec is None:
            spec = attrs.obj["spec"] = {}
        if not isinstance(spec, dict):
            return
        taints = spec.get("taints")
        if not isinstance(taints, list):
            taints = []
        for t in taints:
            if isinstance(t, dict) and t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == "NoSchedule":
                return
        spec["taints"] = [*taints, dict(NOT_READY_TAINT)]

    async def validate(self, attrs: Attributes) -> None:
        return None


def plugin(server: Any) -> TaintNodesByCondition:
    return TaintNodesByCondition()
