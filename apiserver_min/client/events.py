"""Events about objects, written as an API client does, with upstream's correlation
(de-duplication, aggregation of similar events, a spam filter per object)."""

from __future__ import annotations

import collections
import logging
import socket
import time
from typing import Any, Callable, Mapping

from ..api import names
from ..api import status as st
from ..api.kinds import Registry
from ..api.timeutil import format_rfc3339
from ..api.timeutil import now as utc_now
from .informer import served_kind
from .interface import Client

log = logging.getLogger("orch-apiserver.events")


# Upstream's event correlator (defaults of its controller manager's recorder).
AGGREGATE_MAX_EVENTS = 10  # distinct messages of one reason about one object ...
AGGREGATE_INTERVAL = 600.0  # ... within this many seconds are combined into one event
COMBINED_PREFIX = "(combined from similar events): "
SPAM_BURST = 25  # events one source may write about one object at once ...
SPAM_QPS = 1.0 / 300.0  # ... and then one every five minutes
CACHE_SIZE = 4096  # entries each of the correlator's caches keeps (least recently used go)


class _Bucket:
    """A token bucket that never waits: ``burst`` tokens, refilled at ``qps``."""

    __slots__ = ("tokens", "last")

    def __init__(self, now: float) -> None:
        self.tokens = float(SPAM_BURST)
        self.last = now

    def try_take(self, now: float) -> bool:
        self.tokens = min(float(SPAM_BURST), self.tokens + (now - self.last) * SPAM_QPS)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _remember(cache: collections.OrderedDict, key: Any, value: Any) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)


class EventRecorder:
    """Core v1 Events written through ``client`` (as its identity, recorded under its
    field manager), correlated as upstream's recorder does:

    * the same event about the same object again bumps ``count`` and
      ``lastTimestamp`` of the Event already written instead of adding another;
    * the tenth distinct message of one reason about one object within ten minutes
      (a ReplicaSet's ``Created pod: NAME`` for each of its pods) and those after it
      become one combined Event, ``(combined from similar events): <message>``, whose
      count rises;
    * a source writes at most 25 events about one object at once, then one every
      five minutes; the rest are dropped (logged at debug level).
    """

    SIMILAR_WINDOW = 600.0
    MAX_REMEMBERED = CACHE_SIZE

    def __init__(self, client: Client, registry: Registry, component: str, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.component = component
        self.instance = f"{component}-{socket.gethostname()}"
        self.kind = served_kind(registry, "", "v1", "events")
        self._clock = clock
        self._seen: collections.OrderedDict = collections.OrderedDict()
        self._similar: collections.OrderedDict = collections.OrderedDict()  # reason key -> (messages, last)
        self._spam: collections.OrderedDict = collections.OrderedDict()  # object key -> _Bucket
        self.dropped = 0

    def _correlate(self, ref: Mapping, type_: str, reason: str, message: str, now: float) -> tuple[tuple, str] | None:
        """The key the event is written under and its message, or None when the spam
        filter drops it."""
        obj = (ref.get("namespace"), ref.get("kind"), ref.get("name"), ref.get("uid"), ref.get("apiVersion"))
        similar_key = (*obj, type_, reason)
        messages, last = self._similar.get(similar_key, (None, 0.0))
        if messages is None or now - last > AGGREGATE_INTERVAL:
            messages = set()
        messages.add(message)
        _remember(self._similar, similar_key, (messages, now))
        key: tuple = (*similar_key, message)
        if len(messages) >= AGGREGATE_MAX_EVENTS:
            messages.pop()  # the set stays at the threshold, as upstream's does
            key, message = (*similar_key, None), COMBINED_PREFIX + message
        bucket = self._spam.get(obj)
        if bucket is None:
            bucket = _Bucket(now)
        _remember(self._spam, obj, bucket)
        if not bucket.try_take(now):
            return None
        return key, message

    async def record(self, ref: Mapping, type_: str, reason: str, message: str, action: str = "") -> None:
        """Best effort: a failed event write is logged, never raised."""
        namespace = ref.get("namespace") or names.NS_DEFAULT
        now = self._clock()
        correlated = self._correlate(ref, type_, reason, message, now)
        if correlated is None:
            self.dropped += 1
            log.debug("event %s about %s/%s dropped by the spam filter", reason, namespace, ref.get("name"))
            return
        key, message = correlated
        ts = format_rfc3339(utc_now())
        try:
            seen = self._seen.get(key)
            if seen is not None and now - seen[1] < self.SIMILAR_WINDOW:
                if await self._bump(namespace, seen[0], ts, message):
                    _remember(self._seen, key, (seen[0], now))
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
            _remember(self._seen, key, (name, now))
        except st.ApiError as exc:
            log.info("event %s about %s/%s not recorded: %s", reason, namespace, ref.get("name"), exc.message)
        except Exception:  # noqa: BLE001 - events never stop a controller
            log.exception("event %s about %s/%s not recorded", reason, namespace, ref.get("name"))

    async def _bump(self, namespace: str, name: str, ts: str, message: str) -> bool:
        def compute(old: dict) -> dict:
            old["count"] = int(old.get("count") or 1) + 1
            old["lastTimestamp"] = ts
            old["message"] = message
            return old

        try:
            await self.client.update(self.kind, namespace, name, compute)
        except st.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True
