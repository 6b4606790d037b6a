"""Objects by namespace and name for the request path: the watch cache first, storage to confirm a miss."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..api import status as st
from ..storage.keys import key_prefix, object_key

if TYPE_CHECKING:
    from ..api.kinds import Registry
    from ..storage.cacher import Entry, WatchCache
    from .store import Store


class ObjectLookup:
    """Objects by namespace and name: the watch cache first, storage to confirm a miss.

    Authenticators run on every request, so the cache answers; but the cache
    trails storage by an event, and a token minted for an account created a moment
    ago must work, so a miss (or a uid that does not match) is read again from
    storage before it counts."""

    def __init__(self, cache: "WatchCache", registry: "Registry", store: "Store"):
        self.cache = cache
        self.registry = registry
        self.store = store

    def _kind(self, resource: str):
        kind = self.registry.by_resource("", "v1", resource)
        if kind is None:
            raise LookupError(f"no core kind for {resource}")
        return kind

    def cached(self, resource: str, namespace: str, name: str) -> "Entry | None":
        kind = self._kind(resource)
        return self.cache.cache(key_prefix(kind)).items.get(object_key(kind, namespace, name))

    def entry_getter(self, resource: str, namespace: str, name: str) -> Callable[[], "Entry | None"]:
        """A function answering the object's current watch-cache entry (None when absent),
        with the key worked out once: what cached authentication results re-check per hit."""
        kind = self._kind(resource)
        prefix, key, cache = key_prefix(kind), object_key(kind, namespace, name), self.cache
        return lambda: cache.cache(prefix).items.get(key)

    async def get(self, resource: str, namespace: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        e = self.cached(resource, namespace, name)
        if e is not None:
            return e.object()
        return await self.live(resource, namespace, name)

    async def live(self, resource: str, namespace: str, name: str) -> dict | None:
        try:
            return await self.store.get_object(self._kind(resource), namespace, name)
        except st.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    async def live_state(self, resource: str, namespace: str, name: str, uid: str) -> str:
        """ "ok", "missing", "uid" (another object of that name) or "deleting", with a
        cache hit on the expected uid answering at once."""
        e = self.cached(resource, namespace, name)
        if e is not None and e.uid == uid:
            return "deleting" if e.deleting else "ok"
        obj = await self.live(resource, namespace, name)
        if obj is None:
            return "missing"
        md = obj.get("metadata") or {}
        if md.get("uid") != uid:
            return "uid"
        return "deleting" if md.get("deletionTimestamp") else "ok"
