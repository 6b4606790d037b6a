"""Equivalent resources (``matchPolicy: Equivalent``), and a request's objects converted
to the version a webhook's or a policy's rule names.

A request reaches one resource in one group and version. The same objects are also
served as:

- the same resource in the other versions of its group this server converts between:
  every served version of a custom resource (through its definition's conversion, a
  conversion webhook included), and the built-in kinds served at several versions
  (``converters``; HorizontalPodAutoscaler ``autoscaling/v1`` and ``v2``);
- the same resource in an alias group (``names.GROUP_ALIASES``: ``discovery.k8s.io``
  for ``discovery.orch.io``, ``metrics.k8s.io`` for ``metrics.orch.io``, ...), in each
  of those versions; only ``apiVersion`` differs there.

A rule that does not match the request itself may match it as one of these (the
registry's order, then the alias groups'), as upstream's equivalent resource mapper
offers them. The objects then go out converted to that version, and a mutation
comes back through the reverse conversion. A conversion that fails is an internal
error naming its cause, as upstream."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..api import names
from ..api import status as st
from ..apiextensions.conversion import ConversionError
from .chain import Attributes

if TYPE_CHECKING:
    from ..api.kinds import KindInfo, Registry

# A built-in kind's conversion between two of its versions: the object -> a new object.
Converter = Callable[[dict], dict]
# (group, resource, from version, to version) -> its converter.
Converters = Mapping[tuple[str, str, str, str], Converter]


@dataclasses.dataclass(frozen=True)
class Equivalent:
    """The request's objects as served by another group, version and resource."""

    group: str  # as a rule names it (an alias group in its own spelling)
    version: str
    resource: str
    kind: "KindInfo"  # the kind that serves it here (in the served group)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def gvr(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "resource": self.resource}


def _group_of(obj: Mapping) -> str:
    return str(obj.get("apiVersion") or "").rpartition("/")[0]


def request_kind(attrs: Attributes) -> dict[str, str]:
    """The kind of the request's objects: its resource's, or a sub-resource's own
    (``autoscaling/v1`` Scale for ``deployments/scale``)."""
    k = attrs.kind
    obj = attrs.obj if isinstance(attrs.obj, dict) else attrs.old
    if attrs.subresource and isinstance(obj, dict) and isinstance(obj.get("kind"), str):
        group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
        return {"group": group, "version": version, "kind": obj["kind"]}
    return {"group": k.group, "version": k.version, "kind": k.kind}


def converts(attrs: Attributes) -> bool:
    """Whether the request's objects are of its resource's kind, so that an equivalent
    resource sees them converted (not of a sub-resource's own kind, which every version
    shares, nor options of a CONNECT)."""
    if not attrs.subresource:
        return True
    obj = attrs.obj if isinstance(attrs.obj, dict) else attrs.old
    return not isinstance(obj, dict) or (obj.get("kind") == attrs.kind.kind and _group_of(obj) == attrs.kind.group)


def kind_as(attrs: Attributes, target: "Equivalent") -> dict[str, str]:
    """The kind of the request's objects seen as TARGET."""
    if not converts(attrs):
        return request_kind(attrs)
    return {"group": target.group, "version": target.version, "kind": attrs.kind.kind}


def _version_of(obj: Mapping) -> str:
    return str(obj.get("apiVersion") or "").rpartition("/")[2]


class Equivalence:
    """What a request's resource is equivalent to, worked out once per resource and
    kept until the registry changes (a definition's versions did)."""

    def __init__(self, registry: "Registry", converters: Converters | None = None):
        self.registry = registry
        self.converters: dict[tuple[str, str, str, str], Converter] = dict(converters or {})
        self._found: dict[tuple[str, str, str, str], tuple[Equivalent, ...]] = {}
        self.changes = 0  # counts registry changes: what callers cache by it is stale after one
        registry.listeners.append(self._registry_changed)

    def _registry_changed(self, added: Any, removed: Any) -> None:
        self._found = {}
        self.changes += 1

    def of(self, group: str, version: str, resource: str, subresource: str) -> tuple[Equivalent, ...]:
        """The other resources a request's objects are also served as (not its own)."""
        key = (group, version, resource, subresource)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = self._compute(group, version, resource, subresource)
        return found

    def _convertible(self, kind: "KindInfo", other: "KindInfo") -> bool:
        if kind.custom:
            return other.custom  # every served version of a definition converts to the others
        forth = (kind.group, kind.resource, kind.version, other.version)
        back = (kind.group, kind.resource, other.version, kind.version)
        return forth in self.converters and back in self.converters

    def _compute(self, group: str, version: str, resource: str, subresource: str) -> tuple[Equivalent, ...]:
        kind = self.registry.by_resource(group, version, resource)
        if kind is None:
            return ()
        versions = [
            k
            for k in self.registry.kinds
            if k.group == group
            and k.resource == resource
            and (not subresource or k.subresource(subresource) is not None)
            and (k.version == version or self._convertible(kind, k))
        ]
        out = [Equivalent(k.group, k.version, k.resource, k) for k in versions if k.version != version]
        for alias, served in names.GROUP_ALIASES.items():
            if served == group:
                out += [Equivalent(alias, k.version, k.resource, k) for k in versions]
        return tuple(out)

    # --- conversion -------------------------------------------------------------------

    async def convert(self, obj: Any, kind: "KindInfo", target: Equivalent) -> Any:
        """OBJ (an object of KIND's resource) as TARGET serves it: a new object, OBJ
        itself left as it is (None stays None)."""
        if not isinstance(obj, dict):
            return obj
        out = await self._to_version(obj, kind, target.version)
        if target.group != kind.group:
            out = dict(out, apiVersion=target.api_version)
        return out

    async def convert_back(self, obj: dict, kind: "KindInfo", target: Equivalent) -> dict:
        """An object as TARGET serves it (what a webhook's patch made of one), in KIND's
        group and version."""
        if target.group != kind.group:
            obj = dict(obj, apiVersion=f"{kind.group}/{target.version}" if kind.group else target.version)
        return await self._to_version(obj, target.kind, kind.version)

    async def _to_version(self, obj: dict, kind: "KindInfo", version: str) -> dict:
        current = _version_of(obj)
        if current == version:
            return obj
        if kind.custom:
            converter = kind.custom_converter
            if converter is None:  # None conversion: the versions differ only in apiVersion
                return dict(obj, apiVersion=f"{kind.group}/{version}")
            try:
                (converted,) = await converter.convert([obj], version)
            except ConversionError as exc:
                raise exc.api_error() from None
            return converted
        fn = self.converters.get((kind.group, kind.resource, current, version))
        if fn is None:
            raise st.internal(f"unable to convert to {kind.group}/{version}, Resource={kind.resource}: no conversion")
        return fn(obj)
