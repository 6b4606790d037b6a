"""Per-key exponential back-off, as upstream's flowcontrol.Backoff.

Used for crash loops (10 s doubling to 5 min) and image pulls. An entry that
has not been bumped for twice the maximum is forgotten, so a container that ran
cleanly for 10 minutes starts again from the initial delay.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Hashable

__all__ = ["Backoff", "CRASH_BACKOFF_INITIAL", "CRASH_BACKOFF_MAX"]

CRASH_BACKOFF_INITIAL = 10.0
CRASH_BACKOFF_MAX = 300.0


@dataclasses.dataclass
class _Entry:
    delay: float
    last_update: float


class Backoff:
    def __init__(
        self,
        initial: float = CRASH_BACKOFF_INITIAL,
        maximum: float = CRASH_BACKOFF_MAX,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[Hashable, _Entry] = {}

    def _expired(self, entry: _Entry, at: float) -> bool:
        return at - entry.last_update > 2 * self.maximum

    def next(self, key: Hashable) -> float:
        """Record an attempt now; the delay that applies before the following one."""
        now = self.clock()
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
            entry = _Entry(self.initial, now)
            self._entries[key] = entry
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
            entry.last_update = now
        return entry.delay

    def remaining(self, key: Hashable, since: float) -> float:
        """Seconds still to wait after an event at ``since`` (e.g. the container's exit); 0 = go."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        now = self.clock()
        if self._expired(entry, now):
            del self._entries[key]
            return 0.0
        return max(0.0, since + entry.delay - now)

    def delay(self, key: Hashable) -> float:
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def reset(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def forget_prefix(self, prefix: tuple) -> None:
        """Drop every entry whose key tuple starts with ``prefix`` (a pod that went away)."""
        n = len(prefix)
        for key in [k for k in self._entries if isinstance(k, tuple) and k[:n] == prefix]:
            del self._entries[key]

    def gc(self) -> None:
        now = self.clock()
        for key in [k for k, e in self._entries.items() if self._expired(e, now)]:
            del self._entries[key]
