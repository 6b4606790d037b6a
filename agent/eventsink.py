"""Posts the agent's events to the API server as core v1 Events.

:class:`ApiEventSink` is one of :attr:`agent.events.EventRecorder.sinks`. The
recorder calls it synchronously; the sink takes a token from its own bucket
(``--event-qps``/``--event-burst``, 0 meaning upstream's defaults 5 and 10) and
queues the event, or drops it and counts the drop, as upstream's broadcaster
drops events it cannot keep up with. A background task (:meth:`run`) sends the
queue in order.

Sending follows upstream's event correlator:

* aggregation: more than 10 distinct messages for the same object, type and
  reason within 10 minutes are combined into one event whose message starts
  with ``(combined from similar events):``;
* de-duplication: an event equal to one already posted (same source, object,
  type, reason and message) is not created again; the existing Event's
  ``count``, ``lastTimestamp`` and ``message`` are patched instead. If that
  Event is gone (expired), it is created anew with the count reached;
* a refusal by the server (any API status) drops the event; a transport error
  is retried up to 12 times, 10 s apart (the first wait randomised).

Event writes bypass the API client's own rate limit: this bucket is theirs.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as _dt
import random
import time
from typing import Any, Callable

from apiserver_min.api import names
from apiserver_min.api.timeutil import format_rfc3339

from . import logging as agent_logging
from . import pods as podutil

__all__ = ["ApiEventSink", "TokenBucket", "COMBINED_PREFIX"]

log = agent_logging.get_logger("eventsink")

DEFAULT_QPS = 5.0
DEFAULT_BURST = 10
QUEUE_SIZE = 1000  # upstream's maxQueuedEvents
MAX_TRIES = 12  # upstream's maxTriesPerEvent
RETRY_DELAY = 10.0  # upstream's sleep between tries
CACHE_SIZE = 4096  # upstream's LRU size for the correlator
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
COMBINED_PREFIX = "(combined from similar events): "


class TokenBucket:
    """``qps`` tokens a second up to ``burst``; :meth:`try_take` never waits."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = float(qps) if qps and qps > 0 else DEFAULT_QPS
        self.burst = int(burst) if burst and burst > 0 else DEFAULT_BURST
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()

    def try_take(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclasses.dataclass
class _Pending:
    namespace: str
    ref: dict
    type: str
    reason: str
    message: str
    timestamp: float


@dataclasses.dataclass
class _Observed:
    name: str
    namespace: str
    count: int
    first: str


@dataclasses.dataclass
class _Similar:
    messages: set
    last: float


class ApiEventSink:
    def __init__(
        self,
        client,
        *,
        node_name: str,
        qps: float,
        burst: int,
        queue_size: int = QUEUE_SIZE,
        max_tries: int = MAX_TRIES,
        retry_delay: float = RETRY_DELAY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.bucket = TokenBucket(qps, burst, clock)
        self.max_tries = max(1, int(max_tries))
        self.retry_delay = float(retry_delay)
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._observed: collections.OrderedDict[tuple, _Observed] = collections.OrderedDict()
        self._similar: collections.OrderedDict[tuple, _Similar] = collections.OrderedDict()
        self._last_ns = 0
        # Counters (upstream exposes the drops only in its logs).
        self.dropped = 0  # over the rate or the queue
        self.created = 0
        self.patched = 0
        self.failed = 0  # refused by the server or out of tries

    @property
    def source(self) -> dict:
        return {"component": names.AGENT_NAME, "host": self.node_name}

    # --- the recorder's side ----------------------------------------------------------

    def __call__(self, event, pod: dict | None) -> None:
        """Queue one recorded event (an :class:`agent.events.Event`); never blocks."""
        if not self.bucket.try_take():
            self.dropped += 1
            log.v(2).info(
                "Event dropped: over --event-qps/--event-burst",
                reason=event.reason,
                object=event.involved,
                dropped=self.dropped,
            )
            return
        if pod is not None:
            ref = {
                "kind": "Pod",
                "namespace": podutil.namespace(pod),
                "name": podutil.name(pod),
                "uid": podutil.uid(pod),
                "apiVersion": "v1",
            }
            rv = (pod.get("metadata") or {}).get("resourceVersion")
            if rv:
                ref["resourceVersion"] = str(rv)
            namespace = ref["namespace"] or names.NS_DEFAULT
        else:
            # Upstream's node reference: the node name stands in for the uid.
            ref = {"kind": "Node", "name": self.node_name, "uid": self.node_name}
            namespace = names.NS_DEFAULT
        pending = _Pending(
            namespace, ref, event.type, event.reason, event.message, float(getattr(event, "last", 0.0) or time.time())
        )
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning(
                "Event dropped: the event queue is full",
                reason=event.reason,
                object=event.involved,
                dropped=self.dropped,
            )

    # --- the sending task ---------------------------------------------------------------

    async def run(self) -> None:
        while True:
            pending = await self._queue.get()
            try:
                await self._record(pending)
            except Exception as exc:  # a bug must not stop the events
                self.failed += 1
                log.error("Could not post event", reason=pending.reason, err=exc)
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        """Wait until everything queued so far has been sent (or given up)."""
        await self._queue.join()

    def _correlate(self, p: _Pending) -> tuple[tuple, str]:
        """Upstream's aggregator: the cache key and the message to post."""
        r = p.ref
        agg_key = (
            names.AGENT_NAME,
            self.node_name,
            r.get("kind", ""),
            r.get("namespace", ""),
            r.get("name", ""),
            r.get("uid", ""),
            r.get("apiVersion", ""),
            p.type,
            p.reason,
        )
        similar = self._similar.get(agg_key)
        if similar is None or p.timestamp - similar.last > AGGREGATE_INTERVAL:
            similar = _Similar(set(), p.timestamp)
        similar.messages.add(p.message)
        similar.last = p.timestamp
        self._remember(self._similar, agg_key, similar)
        if len(similar.messages) < AGGREGATE_MAX_EVENTS:
            return agg_key + (p.message,), p.message
        # Do not let the set grow past the limit; the combined event takes the aggregate key.
        similar.messages.discard(next(m for m in similar.messages if m != p.message))
        return agg_key, COMBINED_PREFIX + p.message

    @staticmethod
    def _remember(cache: collections.OrderedDict, key: tuple, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)

    def _name_for(self, ref: dict, ts: float) -> str:
        ns = max(int(ts * 1e9), self._last_ns + 1)  # names stay unique within one agent
        self._last_ns = ns
        return f"{ref.get('name', '')}.{ns:x}"

    async def _record(self, p: _Pending) -> None:
        key, message = self._correlate(p)
        stamp = format_rfc3339(_dt.datetime.fromtimestamp(p.timestamp, _dt.timezone.utc))
        for attempt in range(self.max_tries):
            done = await self._send(key, p, message, stamp)
            if done:
                return
            if attempt + 1 < self.max_tries:
                delay = self.retry_delay * (random.random() if attempt == 0 else 1.0)
                await asyncio.sleep(delay)
        self.failed += 1
        log.error("Unable to write event (retry limit exceeded!)", reason=p.reason, object=p.ref.get("name", ""))

    async def _send(self, key: tuple, p: _Pending, message: str, stamp: str) -> bool:
        """One try; True when done (sent, or refused for good), False to try again."""
        seen = self._observed.get(key)
        try:
            if seen is not None:
                count = seen.count + 1
                try:
                    result = await self.client.patch(
                        f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                        {"count": count, "lastTimestamp": stamp, "message": message},
                        patch_type="merge",
                        rate_limited=False,
                    )
                    self.patched += 1
                except Exception as exc:
                    if _http_status(exc) != 404:
                        raise
                    # Expired or deleted: create it again, keeping the count and first time.
                    result = await self._create(p, message, count, seen.first, stamp)
            else:
                result = await self._create(p, message, 1, stamp, stamp)
        except Exception as exc:
            status = _http_status(exc)
            if status is None:
                log.warning("Unable to write event, may retry", reason=p.reason, err=exc)
                return False
            self.failed += 1
            log.v(2 if status == 409 else 0).info(
                "Server rejected event (will not retry!)", reason=p.reason, status=status, err=exc
            )
            return True
        md = result.get("metadata") or {}
        self._remember(
            self._observed,
            key,
            _Observed(
                md.get("name", ""),
                md.get("namespace", p.namespace),
                int(result.get("count") or 1),
                result.get("firstTimestamp") or stamp,
            ),
        )
        return True

    async def _create(self, p: _Pending, message: str, count: int, first: str, last: str) -> dict:
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": self._name_for(p.ref, p.timestamp), "namespace": p.namespace},
            "involvedObject": dict(p.ref),
            "reason": p.reason,
            "message": message,
            "source": self.source,
            "firstTimestamp": first,
            "lastTimestamp": last,
            "count": count,
            "type": p.type,
            "reportingComponent": names.AGENT_NAME,
            "reportingInstance": self.node_name,
        }
        result = await self.client.create(f"/api/v1/namespaces/{p.namespace}/events", body, rate_limited=False)
        self.created += 1
        return result


def _http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None
