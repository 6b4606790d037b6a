"""Events about objects, written as an API client does, with upstream's aggregation."""

from __future__ import annotations

import collections
import logging
import socket
import time
from typing import Mapping

from ..api import names
from ..api import status as st
from ..api.kinds import Registry
from ..api.timeutil import format_rfc3339
from ..api.timeutil import now as utc_now
from .informer import served_kind
from .interface import Client

log = logging.getLogger("orch-apiserver.events")


class EventRecorder:
    """Core v1 Events written through ``client`` (as its identity, recorded under its
    field manager), with upstream's aggregation: the same event about the same object
    again within ten minutes bumps ``count`` and ``lastTimestamp`` of the first
    instead of adding another."""

    SIMILAR_WINDOW = 600.0
    MAX_REMEMBERED = 4096

    def __init__(self, client: Client, registry: Registry, component: str):
        self.client = client
        self.component = component
        self.instance = f"{component}-{socket.gethostname()}"
        self.kind = served_kind(registry, "", "v1", "events")
        self._seen: collections.OrderedDict = collections.OrderedDict()

    async def record(self, ref: Mapping, type_: str, reason: str, message: str, action: str = "") -> None:
        """Best effort: a failed event write is logged, never raised."""
        namespace = ref.get("namespace") or names.NS_DEFAULT
        key = (namespace, ref.get("kind"), ref.get("name"), ref.get("uid"), type_, reason, message)
        ts = format_rfc3339(utc_now())
        try:
            seen = self._seen.get(key)
            if seen is not None and time.monotonic() - seen[1] < self.SIMILAR_WINDOW:
                if await self._bump(namespace, seen[0], ts):
                    self._seen[key] = (seen[0], time.monotonic())
                    self._seen.move_to_end(key)
                    return
            name = f"{ref.get('name', '')}.{time.time_ns():x}"
            obj = {
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": dict(ref),
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": self.component},
                "firstTimestamp": ts,
                "lastTimestamp": ts,
                "count": 1,
                "reportingComponent": self.component,
                "reportingInstance": self.instance,
            }
            if action:
                obj["action"] = action
            await self.client.create(self.kind, namespace, obj)
            self._seen[key] = (name, time.monotonic())
            while len(self._seen) > self.MAX_REMEMBERED:
                self._seen.popitem(last=False)
        except st.ApiError as exc:
            log.info("event %s about %s/%s not recorded: %s", reason, namespace, ref.get("name"), exc.message)
        except Exception:  # noqa: BLE001 - events never stop a controller
            log.exception("event %s about %s/%s not recorded", reason, namespace, ref.get("name"))

    async def _bump(self, namespace: str, name: str, ts: str) -> bool:
        def compute(old: dict) -> dict:
            old["count"] = int(old.get("count") or 1) + 1
            old["lastTimestamp"] = ts
            return old

        try:
            await self.client.update(self.kind, namespace, name, compute)
        except st.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True
