"""Where a webhook given as a service reference is called: a ready endpoint of the
service, from the watch cache (Endpoints, else EndpointSlices); and namespaces'
labels, for the callers that match on them."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from ..api import names
from ..api import status as st
from ..storage.keys import key_prefix, object_key

if TYPE_CHECKING:
    from ..api.kinds import KindInfo, Registry
    from ..storage.cacher import ResourceCache, WatchCache


def _served(registry: "Registry", group: str, resource: str) -> "KindInfo":
    kind = registry.by_resource(group, "v1", resource)
    if kind is None:
        raise LookupError(f"no kind serves {group or 'core'}/v1 {resource}")
    return kind


class ClusterLookup:
    """Namespaces' labels and services' ready endpoints, from the watch cache."""

    def __init__(self, cache: "WatchCache", registry: "Registry", store: Any):
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

    def cached_namespace_labels(self, name: str) -> dict | None:
        """The namespace's labels as the watch cache has them (not a copy: read only);
        None when the cache does not have the namespace."""
        entry = self._namespaces.items.get(object_key(self._ns_kind, "", name))
        return None if entry is None else (entry.labels or {})

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
