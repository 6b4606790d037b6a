"""Events the agent records about pods and the node.

Standalone, an event is a log line and an entry in a small per-object ring
(shown nowhere else yet); the cluster issue adds a sink that posts them to the
API server with upstream's aggregation. Repeated identical events are counted,
not repeated, as upstream's correlator does.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from . import logging as agent_logging
from . import pods as podutil

__all__ = ["Event", "EventRecorder"]

log = agent_logging.get_logger("events")
KEEP_PER_OBJECT = 50


@dataclasses.dataclass
class Event:
    involved: str  # name_namespace of the pod, or the node name
    uid: str
    type: str  # Normal | Warning
    reason: str
    message: str
    count: int = 1
    first: float = dataclasses.field(default_factory=time.time)
    last: float = dataclasses.field(default_factory=time.time)


class EventRecorder:
    def __init__(self, node_name: str = "") -> None:
        self.node_name = node_name
        self._events: dict[str, collections.deque[Event]] = {}
        self.sinks: list = []  # callables(Event, pod | None), added by the cluster mode

    def __call__(self, pod: dict | None, type_: str, reason: str, message: str) -> None:
        self.record(pod, type_, reason, message)

    def record(self, pod: dict | None, type_: str, reason: str, message: str) -> Event:
        involved = podutil.full_name(pod) if pod is not None else self.node_name
        uid = podutil.uid(pod) if pod is not None else ""
        ring = self._events.setdefault(uid or involved, collections.deque(maxlen=KEEP_PER_OBJECT))
        for ev in reversed(ring):
            if ev.type == type_ and ev.reason == reason and ev.message == message:
                ev.count += 1
                ev.last = time.time()
                event = ev
                break
        else:
            event = Event(involved, uid, type_, reason, message)
            ring.append(event)
        logger = log.warning if type_ == "Warning" else log.v(2).info
        logger("Event", object=involved, reason=reason, message=message)
        for sink in self.sinks:
            sink(event, pod)
        return event

    def for_object(self, key: str) -> list[Event]:
        return list(self._events.get(key, ()))

    def forget(self, key: str) -> None:
        self._events.pop(key, None)
