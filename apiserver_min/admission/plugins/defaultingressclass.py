"""DefaultIngressClass: an Ingress created without a class gets the default
IngressClass (annotated ``ingressclass.orch.io/is-default-class: "true"``).

As upstream (v1.27): only creates; an Ingress naming a class in
``spec.ingressClassName`` or in the legacy ``orch.io/ingress.class`` annotation is
left alone; no default class, no change; when several classes are marked default
the newest wins (the lower name between classes created in the same instant)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...api import names
from ...storage.keys import key_prefix
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import Registry
    from ...storage.cacher import WatchCache


def default_class(classes: list[dict]) -> dict | None:
    """The default class among CLASSES: the newest of those marked default."""
    marked = [
        c
        for c in classes
        if ((c.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_IS_DEFAULT_INGRESS_CLASS) == "true"
    ]
    if not marked:
        return None
    # RFC 3339 timestamps of one format sort as strings; newest first, then by name.
    marked.sort(key=lambda c: str(c["metadata"].get("name", "")))
    marked.sort(key=lambda c: str(c["metadata"].get("creationTimestamp", "")), reverse=True)
    return marked[0]


class DefaultIngressClass:
    name = "DefaultIngressClass"
    resources = frozenset({(names.NETWORKING_GROUP, "ingresses")})
    operations = frozenset({"CREATE"})
    complete = True  # a class name nothing derives from

    def __init__(self, cache: "WatchCache", registry: "Registry"):
        self.cache = cache
        kind = registry.by_resource(names.NETWORKING_GROUP, "v1", "ingressclasses")
        if kind is None:
            raise LookupError("no kind serves ingressclasses")
        self.prefix = key_prefix(kind)

    async def admit(self, attrs: Attributes) -> None:
        obj = attrs.obj
        if attrs.subresource or attrs.operation != "CREATE" or not isinstance(obj, dict):
            return
        spec = obj.get("spec")
        if spec is None:
            spec = obj["spec"] = {}
        if not isinstance(spec, dict) or spec.get("ingressClassName") is not None:
            return
        if names.ANNOTATION_INGRESS_CLASS in ((obj.get("metadata") or {}).get("annotations") or {}):
            return
        found = default_class([e.object() for e in self.cache.cache(self.prefix).items.values()])
        if found is not None:
            spec["ingressClassName"] = found["metadata"]["name"]

    async def validate(self, attrs: Attributes) -> None:
        return None


def plugin(server: Any) -> DefaultIngressClass:
    return DefaultIngressClass(server.cache, server.registry)
