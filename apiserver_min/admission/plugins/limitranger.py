"""LimitRanger: the namespace's LimitRange objects give pods their default requests
and limits (mutating) and bound containers, pods and volume claims (validating).

As upstream: pods on create only (their containers' resources cannot change
afterwards), volume claims on create and update; objects being deleted are left
alone; a breach is 403 Forbidden with every breached bound in the message."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...api import limitrange as lr
from ...api import status as st
from ...storage.keys import key_prefix
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import Registry
    from ...storage.cacher import WatchCache


class LimitRanger:
    name = "LimitRanger"
    resources = frozenset({("", "pods"), ("", "persistentvolumeclaims")})
    # The mutating phase fills defaults into new pods only (claims get none); the
    # validating phase also checks claims on update.
    operations = frozenset({"CREATE"})
    # Defaults feed what the pod strategy derives (the QoS class): ``admit`` says True
    # when it filled any in, and the store prepares and defaults the pod again then only.
    complete = True

    def __init__(self, cache: "WatchCache", registry: "Registry"):
        self.cache = cache
        kind = registry.by_resource("", "v1", "limitranges")
        if kind is None:
            raise LookupError("no kind serves limitranges")
        self.prefix = key_prefix(kind)

    def _limit_ranges(self, namespace: str) -> list[dict]:
        return [e.object() for e in self.cache.cache(self.prefix).sorted_entries(namespace)]

    @staticmethod
    def _applies(attrs: Attributes) -> bool:
        k = attrs.kind
        if attrs.subresource or not attrs.namespace or not isinstance(attrs.obj, dict):
            return False
        if k.resource == "pods" and attrs.operation != "CREATE":
            return False
        if attrs.operation not in ("CREATE", "UPDATE"):
            return False
        old = attrs.old
        return not (isinstance(old, dict) and (old.get("metadata") or {}).get("deletionTimestamp"))

    async def admit(self, attrs: Attributes) -> bool:
        if not self._applies(attrs) or attrs.kind.resource != "pods":
            return False
        assert isinstance(attrs.obj, dict)
        changed = False
        for limit_range in self._limit_ranges(attrs.namespace):
            changed = lr.apply_defaults(limit_range, attrs.obj) or changed
        return changed

    async def validate(self, attrs: Attributes) -> None:
        if not self._applies(attrs):
            return
        obj = attrs.obj
        assert isinstance(obj, dict)
        for limit_range in self._limit_ranges(attrs.namespace):
            if attrs.kind.resource == "pods":
                errs = lr.pod_violations(limit_range, obj)
            else:
                errs = lr.pvc_violations(limit_range, obj)
            if errs:
                raise st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, lr.aggregate(errs))


def plugin(server: Any) -> LimitRanger:
    return LimitRanger(server.cache, server.registry)
