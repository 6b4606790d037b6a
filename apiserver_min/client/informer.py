"""Informers: the controllers' read side, over the server's watch cache.

An informer shows one kind as the watch cache holds it (``Entry``: stored bytes plus
the parsed labels, fields, owners and finalizers) and calls its handlers with every
change of that kind (a ``CacheEvent``), in revision order, synchronously from the
cache's fan-out. A handler is called once with ``None`` when it is added, and again
after every relist of the cache: "look at everything again" (the replay).

One factory serves one set of controllers: it subscribes to the watch cache once and
unsubscribes on :meth:`InformerFactory.stop`, so controllers stopped on losing a
leader election hear nothing more.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ..api.kinds import KindInfo, Registry
from ..api.selectors import LabelSelector
from ..storage.cacher import CacheEvent, Entry, ResourceCache, WatchCache
from ..storage.keys import key_prefix, object_key

Handler = Callable[[CacheEvent | None], None]


def served_kind(registry: Registry, group: str, version: str, resource: str) -> KindInfo:
    """A kind the controllers rely on; its absence is a programming error."""
    kind = registry.by_resource(group, version, resource)
    if kind is None:
        raise LookupError(f"no kind serves {group or 'core'}/{version} {resource}")
    return kind


class Informer:
    """One kind's objects and changes."""

    def __init__(self, cache: ResourceCache):
        self._cache = cache
        self.kind: KindInfo = cache.kind
        self.prefix = cache.prefix
        self._handlers: list[Handler] = []
        # Built on first use, kept up to date by every event, dropped on a replay:
        # owner uid -> keys of the objects naming it, and namespace -> keys of the
        # objects without a controller (those a controller may adopt).
        self._by_owner: dict[str, set[str]] | None = None
        self._orphans: dict[str, set[str]] | None = None

    def get(self, namespace: str, name: str) -> Entry | None:
        return self._cache.items.get(object_key(self.kind, namespace, name))

    def get_by_key(self, key: str) -> Entry | None:
        """By storage key (``Entry.key``), which controllers use as their queue keys."""
        return self._cache.items.get(key)

    def list(self, namespace: str | None = None) -> list[Entry]:
        """Every object (in no particular order), or one namespace's in key order."""
        if namespace is None:
            return list(self._cache.items.values())
        return self._cache.sorted_entries(namespace)

    def claimable(self, namespace: str, owner_uid: str, selector: LabelSelector) -> list[Entry]:
        """The objects of ``namespace`` a claim by the owner ``owner_uid`` can concern, in
        key order: those naming it as an owner, and those without a controller that
        ``selector`` matches. Found through indexes, so the cost follows the answer's
        size, not the namespace's."""
        if self._by_owner is None or self._orphans is None:
            self._build_indexes()
        assert self._by_owner is not None and self._orphans is not None
        items = self._cache.items
        out: dict[str, Entry] = {}
        for key in self._by_owner.get(owner_uid, ()):
            e = items.get(key)
            if e is not None and e.namespace == namespace:
                out[key] = e
        if not selector.matches_nothing:
            for key in self._orphans.get(namespace, ()):
                e = items.get(key)
                if e is not None and not e.controller and selector.matches(e.labels):
                    out[key] = e
        return [out[k] for k in sorted(out)]

    def _build_indexes(self) -> None:
        self._by_owner, self._orphans = {}, {}
        for e in self._cache.items.values():
            self._index(e)

    def _index(self, e: Entry) -> None:
        assert self._by_owner is not None and self._orphans is not None
        for o in e.owners:
            self._by_owner.setdefault(o[0], set()).add(e.key)
        if not e.controller:
            self._orphans.setdefault(e.namespace, set()).add(e.key)

    def _unindex(self, e: Entry) -> None:
        assert self._by_owner is not None and self._orphans is not None
        for o in e.owners:
            keys = self._by_owner.get(o[0])
            if keys is not None:
                keys.discard(e.key)
                if not keys:
                    del self._by_owner[o[0]]
        if not e.controller:
            keys = self._orphans.get(e.namespace)
            if keys is not None:
                keys.discard(e.key)
                if not keys:
                    del self._orphans[e.namespace]

    def _update_indexes(self, ev: CacheEvent | None) -> None:
        if self._by_owner is None:
            return
        if ev is None:  # a relist: rebuilt on next use
            self._by_owner = self._orphans = None
            return
        old = ev.prev if ev.prev is not None else (ev.entry if ev.type == "DELETED" else None)
        if old is not None:
            self._unindex(old)
        if ev.type != "DELETED":
            self._index(ev.entry)

    def __len__(self) -> int:
        return len(self._cache.items)

    def add_handler(self, fn: Handler) -> None:
        """Subscribe ``fn``, then call it with ``None`` (the replay)."""
        self._handlers.append(fn)
        fn(None)

    def remove_handler(self, fn: Handler) -> None:
        try:
            self._handlers.remove(fn)
        except ValueError:
            pass

    def _deliver(self, ev: CacheEvent | None) -> None:
        self._update_indexes(ev)
        for fn in list(self._handlers):
            fn(ev)


class InformerFactory:
    """Informers for every kind of one watch cache, fed by one cache listener;
    ``registry`` is where controllers look their kinds up."""

    def __init__(self, cache: WatchCache, registry: Registry):
        self._cache = cache
        self.registry = registry
        self._informers: dict[str, Informer] = {}
        self._listening = False
        self._new_kind_handlers: list[Callable[[Informer], None]] = []

    def kind(self, group: str, version: str, resource: str) -> KindInfo:
        return served_kind(self.registry, group, version, resource)

    def for_resource(self, group: str, version: str, resource: str) -> Informer:
        return self.for_kind(self.kind(group, version, resource))

    def for_kind(self, kind: KindInfo) -> Informer:
        prefix = key_prefix(kind)
        found = self._informers.get(prefix)
        current = self._cache.cache(prefix)
        if found is not None and found._cache is not current:
            # A custom resource's kind served again (its definition was deleted and made
            # anew): the informer follows the new cache, and its handlers see a replay.
            found._cache, found.kind = current, current.kind
            found._deliver(None)
        inf = found if found is not None else Informer(current)
        self._informers[prefix] = inf
        if not self._listening:
            self._cache.listeners.append(self._on_cache_event)
            self._listening = True
        return inf

    def all(self) -> Iterator[Informer]:
        """An informer for every kind the cache holds (the garbage collector watches all)."""
        for c in list(self._cache.caches.values()):
            yield self.for_kind(c.kind)

    def _on_cache_event(self, cache: ResourceCache | None, ev: CacheEvent | None) -> None:
        if cache is None:  # a relist: every informer replays
            for inf in list(self._informers.values()):
                inf._deliver(None)
            return
        target = self._informers.get(cache.prefix)
        if target is None and self._new_kind_handlers and self._cache.caches.get(cache.prefix) is cache:
            # A kind served since the watchers of every kind started (a custom resource):
            # their handlers subscribe now, and the replay they get covers this event.
            target = self.for_kind(cache.kind)
            for fn in list(self._new_kind_handlers):
                fn(target)
            return
        if target is not None and target._cache is not cache:
            self.for_kind(cache.kind)  # the kind's cache was made anew: follow it (a replay)
            return
        if target is not None:
            target._deliver(ev)

    def on_new_kind(self, fn: Callable[[Informer], None]) -> None:
        """Call ``fn`` with the informer of each kind whose cache appears after
        :meth:`all` was listed (on the kind's first event)."""
        self._new_kind_handlers.append(fn)
        if not self._listening:
            self._cache.listeners.append(self._on_cache_event)
            self._listening = True

    def stop(self) -> None:
        """No more events to anyone; handlers are dropped."""
        if self._listening:
            try:
                self._cache.listeners.remove(self._on_cache_event)
            except ValueError:
                pass
            self._listening = False
        for inf in self._informers.values():
            inf._handlers.clear()
        self._informers.clear()
