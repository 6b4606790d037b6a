"""A local cache of one collection, kept current with list + watch.

The spec's change-detection recipe, as upstream's reflector does it:

1. list the collection (in pages of :attr:`Informer.page_size`) and remember the
   list's ``resourceVersion``; the cache becomes exactly the list (handlers see
   the difference as adds, updates and deletes, so a relist after a gap tells
   them what they missed);
2. watch from that version with ``allowWatchBookmarks=true`` and a randomised
   ``timeoutSeconds`` (so many agents do not reconnect in step); every event
   and bookmark advances the remembered version;
3. when the stream ends or breaks, watch again from the last version (after a
   back-off if it broke);
4. on 410 Gone (the server no longer keeps that history) list again.

Readers use :attr:`Informer.cache` (``"namespace/name"`` or ``"name"`` → object)
and must not modify the objects. Handlers run in the informer's task, in event
order; a handler may be a coroutine function. A failing handler is logged and
does not stop the informer.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from typing import Any, Callable, Mapping

from .. import logging as agent_logging
from .rest import ApiClient, ApiConnectionError, ApiError

__all__ = ["Informer", "object_key"]

log = agent_logging.get_logger("informer")

Handler = Callable[..., Any]


def object_key(obj: dict) -> str:
    md = obj.get("metadata") or {}
    ns, name = md.get("namespace") or "", md.get("name") or ""
    return f"{ns}/{name}" if ns else name


def _rv(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    """List + watch of ``path`` (a collection such as ``/api/v1/pods``) into :attr:`cache`."""

    page_size = 500
    min_watch_timeout = 300  # seconds; each watch asks for 1-2x this (upstream: 5 minutes)
    backoff_base = 0.5
    backoff_cap = 30.0

    def __init__(
        self, client: ApiClient, path: str, *, params: Mapping[str, str] | None = None, name: str = ""
    ) -> None:
        self.client = client
        self.path = path.rstrip("/")
        self.params = {k: str(v) for k, v in (params or {}).items()}
        self.name = name or self.path
        self.cache: dict[str, dict] = {}
        self.resource_version = ""
        self._handlers: list[tuple[Handler | None, Handler | None, Handler | None]] = []
        self._synced = asyncio.Event()
        self.lists = 0  # how many times the collection was listed (tests, metrics)
        self.watches = 0  # how many watches were opened

    # --- readers ----------------------------------------------------------------------
    def add_handler(
        self, on_add: Handler | None = None, on_update: Handler | None = None, on_delete: Handler | None = None
    ) -> None:
        """``on_add(obj)``, ``on_update(old, new)``, ``on_delete(obj)``. A handler added
        after the first list is not replayed the current cache: read it directly."""
        self._handlers.append((on_add, on_update, on_delete))

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is in the cache; False if ``timeout`` passes first."""
        if self._synced.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._synced.wait()
            return True
        except asyncio.TimeoutError:
            return False

    def get(self, key: str) -> dict | None:
        return self.cache.get(key)

    # --- the loop ---------------------------------------------------------------------
    async def run(self) -> None:
        """List and watch until cancelled."""
        need_list = True
        failures = 0
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                started = asyncio.get_running_loop().time()
                seen = await self._watch()
                if seen or asyncio.get_running_loop().time() - started > 1.0:
                    failures = 0
                    continue
                # A watch the server ends at once with nothing in it: do not spin.
                delay = self._backoff(failures)
            except ApiError as exc:
                if exc.status == 410:
                    log.v(2).info(
                        "Watch history expired; listing again",
                        informer=self.name,
                        resourceVersion=self.resource_version,
                        err=exc.message,
                    )
                    need_list = True
                    continue
                # 429 and 5xx: the server is busy or failing; keep the version and
                # watch again. Anything else (403, 404, ...) means the list may be
                # wrong too: start over with a list.
                if not (exc.status == 429 or exc.status >= 500):
                    need_list = True
                log.warning("Watch failed", informer=self.name, status=exc.status, err=exc.message)
                delay = exc.retry_after if exc.retry_after is not None else self._backoff(failures)
            except ApiConnectionError as exc:
                log.v(2).info("Watch connection failed", informer=self.name, err=str(exc))
                delay = self._backoff(failures)
            failures += 1
            await asyncio.sleep(delay)

    def _backoff(self, failures: int) -> float:
        return min(self.backoff_cap, self.backoff_base * (2**failures)) * random.uniform(0.5, 1.0)

    async def _list(self) -> None:
        items: dict[str, dict] = {}
        params = dict(self.params)
        params["limit"] = str(self.page_size)
        cont = ""
        rv = ""
        while True:
            if cont:
                params["continue"] = cont
            try:
                page = await self.client.get(self.path, params=params)
            except ApiError as exc:
                if exc.status == 410 and cont:
                    # The continue token expired between pages: one list without paging.
                    log.v(2).info("List continue token expired; listing without pages", informer=self.name)
                    params.pop("continue", None)
                    params.pop("limit", None)
                    items.clear()
                    cont = ""
                    page = await self.client.get(self.path, params=params)
                else:
                    raise
            for obj in page.get("items") or []:
                if isinstance(obj, dict):
                    items[object_key(obj)] = obj
            md = page.get("metadata") or {}
            rv = str(md.get("resourceVersion") or rv)
            cont = md.get("continue") or ""
            if not cont:
                break
        self.lists += 1
        await self._replace(items)
        self.resource_version = rv
        self._synced.set()
        log.v(4).info("Listed", informer=self.name, items=len(items), resourceVersion=rv)

    async def _replace(self, items: dict[str, dict]) -> None:
        old = dict(self.cache)
        # The same dict object stays in place: readers may hold a reference to it.
        self.cache.clear()
        self.cache.update(items)
        for key, obj in items.items():
            prev = old.get(key)
            if prev is None:
                await self._dispatch(0, obj)
            elif _rv(prev) != _rv(obj):
                await self._dispatch(1, prev, obj)
        for key, prev in old.items():
            if key not in items:
                await self._dispatch(2, prev)

    async def _watch(self) -> int:
        """One watch until the server ends it; the number of events seen."""
        params = dict(self.params)
        params.update(
            {
                "resourceVersion": self.resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(int(self.min_watch_timeout * (1 + random.random()))),
            }
        )
        self.watches += 1
        seen = 0
        async with contextlib.aclosing(self.client.watch(self.path, params=params)) as events:
            async for ev_type, obj in events:
                seen += 1
                rv = _rv(obj)
                if ev_type == "BOOKMARK":
                    if rv:
                        self.resource_version = rv
                    continue
                key = object_key(obj)
                if ev_type in ("ADDED", "MODIFIED"):
                    prev = self.cache.get(key)
                    self.cache[key] = obj
                    if prev is None:
                        await self._dispatch(0, obj)
                    else:
                        await self._dispatch(1, prev, obj)
                elif ev_type == "DELETED":
                    self.cache.pop(key, None)
                    await self._dispatch(2, obj)
                else:
                    log.warning("Unknown watch event type", informer=self.name, type=ev_type)
                if rv:
                    self.resource_version = rv
        return seen

    async def _dispatch(self, which: int, *objs: dict) -> None:
        for handlers in self._handlers:
            fn = handlers[which]
            if fn is None:
                continue
            try:
                result = fn(*objs)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a handler's bug must not stop the cache
                log.error(
                    "Informer handler failed", err=exc, informer=self.name, event=("add", "update", "delete")[which]
                )
