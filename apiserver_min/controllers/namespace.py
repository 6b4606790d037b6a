"""The namespace controller: empties a terminating namespace, then finalizes it."""

from __future__ import annotations

import logging

from ..api import names
from ..api import status as st
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent
from .queue import RETRY_DELAY, KeyQueue

log = logging.getLogger("orch-apiserver.controllers")


class NamespaceController:
    """Empties a terminating namespace, then removes its ``orch`` finalizer."""

    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.informers = informers
        self.kind = informers.kind("", "v1", "namespaces")
        self.namespaces = informers.for_kind(self.kind)
        self.queue = KeyQueue()

    def start(self) -> None:
        self.namespaces.add_handler(self.on_event)

    def on_event(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.namespaces.list():
                if e.deleting:
                    self.queue.add(e.name)
            return
        if ev.type != "DELETED" and ev.entry.deleting:
            self.queue.add(ev.entry.name)

    async def run(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                done = await self.sync(name)
            except st.ApiError as exc:
                log.warning("namespace %s: %s", name, exc.message)
                done = False
            except Exception:  # noqa: BLE001 - one bad item is retried; the queue goes on
                log.exception("namespace %s: sync failed", name)
                done = False
            if not done:
                self.queue.add_after(name, RETRY_DELAY)

    async def sync(self, name: str) -> bool:
        entry = self.namespaces.get("", name)
        if entry is None or not entry.deleting:
            return True
        remaining = 0
        for kind in self.informers.registry.kinds:
            if not kind.namespaced or "delete" not in kind.verbs:
                continue
            for e in self.informers.for_kind(kind).list(name):
                remaining += 1
                if e.deleting:
                    continue
                try:
                    await self.client.delete(kind, name, e.name, DeleteOptions(propagation_policy="Background"))
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
            await self.client.update(self.kind, "", name, drop_finalizer, subresource="finalize")
        except st.ApiError as exc:
            if exc.code != 404:
                raise
        log.info("namespace %s is empty and finalized", name)
        return True
