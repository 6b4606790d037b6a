"""The current webhook configurations, namespaces and service endpoints, read from
the watch cache as informers read it.

The list of webhooks is rebuilt on the first request after a configuration changed
(the cache's fan-out marks it stale), so a change takes effect as soon as the
watch cache has it: no polling. A webhook's ``matchConditions`` are compiled once
per configuration generation."""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Any, Callable

from ...api import names
from ...api import status as st
from ...api.selectors import LabelSelector
from ...cel import environments
from ...storage.keys import key_prefix, object_key
from ..matchconditions import MatchConditions
from .matching import parse_selector, rules_match_shape

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...registry.store import Store
    from ...storage.cacher import CacheEvent, ResourceCache, WatchCache


@dataclasses.dataclass(frozen=True)
class Webhook:
    """One webhook of one configuration, with its selectors parsed."""

    configuration: str
    index: int  # its place in the configuration's list
    spec: dict
    namespace_selector: LabelSelector
    object_selector: LabelSelector
    client_key: str  # what its connection depends on (configuration uid, name, clientConfig)
    # Its ``matchConditions``, compiled (from the spec when not given).
    conditions: MatchConditions | None = None

    def __post_init__(self) -> None:
        if self.conditions is None:
            object.__setattr__(self, "conditions", compile_conditions(self.spec))

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")


def compile_conditions(spec: dict) -> MatchConditions:
    """A webhook's ``matchConditions``, compiled for its environment."""
    return MatchConditions(spec.get("matchConditions"), environments.webhook_match_compiler())


def _served(registry: "Registry", group: str, resource: str) -> "KindInfo":
    kind = registry.by_resource(group, "v1", resource)
    if kind is None:
        raise LookupError(f"no kind serves {group or 'core'}/v1 {resource}")
    return kind


class WebhookSource:
    """One configuration kind's webhooks (configurations sorted by name, webhooks in
    list order), kept current from the watch cache."""

    def __init__(self, cache: "WatchCache", registry: "Registry", resource: str):
        self.kind = _served(registry, names.ADMISSIONREGISTRATION_GROUP, resource)
        self._watch_cache = cache
        self._cache: ResourceCache | None = None  # subscribed on first use
        self._hooks: list[Webhook] | None = None
        # The webhooks whose rules match, by (operation, group, version, resource,
        # sub-resource, namespaced): rules depend on nothing else, so this is worked
        # out once per request shape and configuration.
        self._by_shape: dict[tuple, list[Webhook]] = {}
        # Compiled match conditions by (configuration uid, generation, webhook index).
        self._conditions: dict[tuple[str, Any, int], MatchConditions] = {}
        self.on_change: list[Callable[[], None]] = []

    def _on_cache_event(self, cache: "ResourceCache | None", ev: "CacheEvent | None") -> None:
        if cache is None or cache is self._cache:
            self._hooks = None
            self._by_shape = {}
            for fn in self.on_change:
                fn()

    def hooks(self) -> list[Webhook]:
        if self._cache is None:
            self._cache = self._watch_cache.cache(key_prefix(self.kind))
            self._watch_cache.listeners.append(self._on_cache_event)
        if self._hooks is None:
            self._hooks = self._build()
        return self._hooks

    def matching_rules(self, shape: tuple) -> list[Webhook]:
        """The webhooks whose rules match requests of SHAPE (see ``_by_shape``)."""
        found = self._by_shape.get(shape)
        if found is None:
            op, group, version, resource, sub, namespaced = shape
            found = [
                h for h in self.hooks() if rules_match_shape(h.spec, op, group, version, resource, sub, namespaced)
            ]
            self._by_shape[shape] = found
        return found

    def _build(self) -> list[Webhook]:
        found: list[Webhook] = []
        compiled: dict[tuple[str, Any, int], MatchConditions] = {}
        assert self._cache is not None
        for entry in sorted(self._cache.items.values(), key=lambda e: e.name):
            obj = entry.object()
            md = obj.get("metadata") or {}
            uid = str(md.get("uid") or "")
            hooks = obj.get("webhooks")
            for i, spec in enumerate(hooks if isinstance(hooks, list) else []):
                if not isinstance(spec, dict):
                    continue
                key = f"{uid}/{spec.get('name')}/{spec.get('clientConfig')!r}"
                generation = (uid, md.get("generation"), i)
                conditions = self._conditions.get(generation) if md.get("generation") is not None else None
                if conditions is None:
                    conditions = compile_conditions(spec)
                compiled[generation] = conditions
                found.append(
                    Webhook(
                        entry.name,
                        i,
                        spec,
                        parse_selector(spec.get("namespaceSelector")),
                        parse_selector(spec.get("objectSelector")),
                        key,
                        conditions,
                    )
                )
        self._conditions = compiled
        return found


class ClusterLookup:
    """Namespaces' labels and services' ready endpoints, from the watch cache."""

    def __init__(self, cache: "WatchCache", registry: "Registry", store: "Store | None"):
        self.store = store
        self._ns_kind = _served(registry, "", "namespaces")
        self._svc_kind = _served(registry, "", "services")
        self._ep_kind = _served(registry, "", "endpoints")
        self._slice_kind = _served(registry, names.DISCOVERY_GROUP, "endpointslices")
        self._watch_cache = cache

    # The caches, looked up on use (the watch cache is the server's, wired before start).
    @property
    def _namespaces(self) -> "ResourceCache":
        return self._watch_cache.cache(key_prefix(self._ns_kind))

    @property
    def _services(self) -> "ResourceCache":
        return self._watch_cache.cache(key_prefix(self._svc_kind))

    @property
    def _endpoints(self) -> "ResourceCache":
        return self._watch_cache.cache(key_prefix(self._ep_kind))

    @property
    def _slices(self) -> "ResourceCache":
        return self._watch_cache.cache(key_prefix(self._slice_kind))

    async def namespace_labels(self, name: str) -> dict:
        """The namespace's labels; 404 when it does not exist (as upstream)."""
        entry = self._namespaces.items.get(object_key(self._ns_kind, "", name))
        if entry is not None:
            return dict(entry.labels or {})
        if self.store is not None:  # the cache trails storage by an event
            obj = await self.store.get_object(self._ns_kind, "", name)
            return dict((obj.get("metadata") or {}).get("labels") or {})
        raise st.not_found("namespaces", name, "")

    def resolve_service(self, namespace: str, name: str, port: int) -> tuple[str, int]:
        """A ready endpoint (address, port) of the service's port PORT; ResolveError as
        upstream's endpoint resolver words it."""
        entry = self._services.items.get(object_key(self._svc_kind, namespace, name))
        if entry is None:
            raise ResolveError(f'service "{name}" not found')
        svc = entry.object()
        spec = svc.get("spec") or {}
        svc_port: dict[str, Any] | None = None
        for p in spec.get("ports") or []:
            if isinstance(p, dict) and p.get("port") == port:
                svc_port = p
                break
        if svc_port is None:
            raise ResolveError(f'no service port {port} found for service "{name}"')
        ep_entry = self._endpoints.items.get(object_key(self._ep_kind, namespace, name))
        if ep_entry is not None:
            port_name = svc_port.get("name") or ""
            for subset in ep_entry.object().get("subsets") or []:
                if not isinstance(subset, dict):
                    continue
                target = None
                for ep_port in subset.get("ports") or []:
                    if isinstance(ep_port, dict) and (ep_port.get("name") or "") == port_name:
                        target = ep_port.get("port")
                        break
                addresses = [str(a["ip"]) for a in subset.get("addresses") or [] if isinstance(a, dict) and a.get("ip")]
                if isinstance(target, int) and addresses:
                    return random.choice(addresses), target
        found = self._from_slices(namespace, name, svc_port.get("name") or "")
        if found is not None:
            return found
        raise ResolveError(f'no endpoints available for service "{name}"')

    def _from_slices(self, namespace: str, name: str, port_name: str) -> tuple[str, int] | None:
        """A ready address of the service's EndpointSlices (when it has no Endpoints)."""
        for entry in self._slices.sorted_entries(namespace):
            if entry.labels.get(names.LABEL_SERVICE_NAME) != name:
                continue
            obj = entry.object()
            target = None
            for p in obj.get("ports") or []:
                if isinstance(p, dict) and (p.get("name") or "") == port_name:
                    target = p.get("port")
            if not isinstance(target, int):
                continue
            ready = [
                str(a)
                for ep in obj.get("endpoints") or []
                if isinstance(ep, dict) and (ep.get("conditions") or {}).get("ready") is not False
                for a in ep.get("addresses") or []
            ]
            if ready:
                return random.choice(ready), target
        return None


class ResolveError(Exception):
    """A service reference that has no address to call."""
