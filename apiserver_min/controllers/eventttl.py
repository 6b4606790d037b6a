"""Events expire ``--event-ttl`` (default 1h) after they were last written, as upstream's
API server keeps them (there, a storage lease renewed by every write of the Event).

Both Event kinds are followed (``v1`` and ``events.orch.io/v1``, stored apart here).
A write seen on the watch cache sets the Event's expiry to the time it was seen plus
the TTL. Events already stored when the sweeper starts (a server restart, a new leader)
are dated by the newest of their own timestamps (``lastTimestamp``, ``eventTime``,
``series.lastObservedTime``, ``deprecatedLastTimestamp``, ``metadata.creationTimestamp``),
so a restart does not give every old Event a fresh hour.

Expired Events are deleted every ``sweep_period`` seconds (a tenth of the TTL, at most a
minute), each with a resourceVersion precondition: an Event written again meanwhile is
kept (its new write has already moved its expiry). The sweeper runs with the
controllers (on the leader when several API servers share etcd), as the API server
itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at
from ..api.kinds import KindInfo
from ..api.timeutil import parse_rfc3339
from ..client.informer import Informer, InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent

log = logging.getLogger("orch-apiserver.eventttl")

DEFAULT_EVENT_TTL = 3600.0
MAX_SWEEP_PERIOD = 60.0


def last_written(event: Mapping) -> float | None:
    """The newest timestamp an Event carries (epoch seconds), None when it has none."""
    meta = dict_at(event, "metadata")
    series = event.get("series")
    candidates = (
        event.get("lastTimestamp"),
        event.get("deprecatedLastTimestamp"),
        event.get("eventTime"),
        series.get("lastObservedTime") if isinstance(series, Mapping) else None,
        meta.get("creationTimestamp"),
    )
    newest: float | None = None
    for value in candidates:
        if not isinstance(value, str) or not value:
            continue
        try:
            at = parse_rfc3339(value).timestamp()
        except ValueError:
            continue
        if newest is None or at > newest:
            newest = at
    return newest


class EventTTLController:
    """Deletes Events not written for ``ttl`` seconds."""

    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        ttl: float = DEFAULT_EVENT_TTL,
        *,
        clock: Callable[[], float] = time.time,
        sweep_period: float | None = None,
    ):
        self.client = client
        self.ttl = ttl
        self.clock = clock
        self.sweep_period = sweep_period if sweep_period is not None else min(MAX_SWEEP_PERIOD, ttl / 10)
        self.kinds: list[tuple[KindInfo, Informer]] = []
        for group in ("", names.EVENTS_GROUP):
            kind = informers.kind(group, "v1", "events")
            self.kinds.append((kind, informers.for_kind(kind)))
        # Per kind: storage key -> (expiry, resourceVersion of the write that set it).
        self.expiry: list[dict[str, tuple[float, int]]] = [{} for _ in self.kinds]
        self.deleted = 0

    def start(self) -> None:
        for i, (_, informer) in enumerate(self.kinds):
            informer.add_handler(lambda ev, i=i: self.on_event(i, ev))

    def on_event(self, i: int, ev: CacheEvent | None) -> None:
        table = self.expiry[i]
        if ev is None:  # the initial list: date what is stored by its own timestamps
            now = self.clock()
            for e in self.kinds[i][1].list():
                if e.key not in table:
                    written = last_written(e.view())
                    table[e.key] = ((written if written is not None else now) + self.ttl, e.rv)
            return
        if ev.type == "DELETED":
            table.pop(ev.entry.key, None)
        else:
            table[ev.entry.key] = (self.clock() + self.ttl, ev.entry.rv)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_period)
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("event TTL sweep failed")

    async def sweep(self) -> int:
        """Delete every expired Event; returns how many went."""
        now = self.clock()
        gone = 0
        for i, (kind, informer) in enumerate(self.kinds):
            table = self.expiry[i]
            expired = [(key, rv) for key, (at, rv) in table.items() if at <= now]
            for key, rv in expired:
                entry = informer.get_by_key(key)
                if entry is None or entry.rv != rv:
                    continue  # gone, or written again (its new expiry is set)
                try:
                    await self.client.delete(kind, entry.namespace, entry.name, DeleteOptions(preconditions_rv=str(rv)))
                except st.ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
                    continue
                if table.get(key, (0.0, -1))[1] == rv:
                    table.pop(key, None)
                gone += 1
        if gone:
            self.deleted += gone
            log.info("deleted %d events not written for %s", gone, _duration(self.ttl))
        return gone


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
