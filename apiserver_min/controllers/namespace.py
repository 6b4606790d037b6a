"""The namespace controller: empties a terminating namespace, then finalizes it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..api import names
from ..api import status as st
from ..api.user import SYSTEM_USER
from ..registry.store import DeleteOptions
from ..storage.cacher import CacheEvent, ResourceCache
from ..storage.keys import key_prefix
from .queue import FIELD_MANAGER, RETRY_DELAY, KeyQueue

if TYPE_CHECKING:
    from ..client.host import ControllerHost

log = logging.getLogger("orch-apiserver.controllers")


class NamespaceController:
    """Empties a terminating namespace, then removes its ``orch`` finalizer."""

    def __init__(self, server: "ControllerHost"):
        self.server = server
        self.store = server.store
        self.kind = server.registry.by_resource("", "v1", "namespaces")
        self.prefix = key_prefix(self.kind)
        self.queue = KeyQueue()

    def on_event(self, cache: ResourceCache | None, ev: CacheEvent | None) -> None:
        if cache is None:
            for e in self.server.cache.cache(self.prefix).items.values():
                if e.deleting:
                    self.queue.add(e.name)
            return
        if cache.prefix == self.prefix and ev.type != "DELETED" and ev.entry.deleting:
            self.queue.add(ev.entry.name)

    async def run(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                done = await self.sync(name)
            except st.ApiError as exc:
                log.warning("namespace %s: %s", name, exc.message)
                done = False
            except Exception:  # noqa: BLE001
                log.exception("namespace %s: sync failed", name)
                done = False
            if not done:
                self.queue.add_after(name, RETRY_DELAY)

    async def sync(self, name: str) -> bool:
        entry = self.server.cache.cache(self.prefix).items.get(f"{self.prefix}{name}")
        if entry is None or not entry.deleting:
            return True
        remaining = 0
        for kind in self.server.registry.kinds:
            if not kind.namespaced or "delete" not in kind.verbs:
                continue
            cache = self.server.cache.cache(key_prefix(kind))
            for e in cache.sorted_entries(name):
                remaining += 1
                if e.deleting:
                    continue
                try:
                    await self.store.delete(
                        kind, name, e.name, DeleteOptions(propagation_policy="Background"), SYSTEM_USER
                    )
                except st.ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
        if remaining:
            return False

        def drop_finalizer(obj: dict) -> dict:
            spec = obj.setdefault("spec", {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != names.FINALIZER_NAMESPACE]
            return obj

        try:
            await self.store.update(
                self.kind, "", name, drop_finalizer, SYSTEM_USER, subresource="finalize", field_manager=FIELD_MANAGER
            )
        except st.ApiError as exc:
            if exc.code != 404:
                raise
        log.info("namespace %s is empty and finalized", name)
        return True
