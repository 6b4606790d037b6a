"""``--request-timeout``: a request that is not long-running (watches, exec, attach,
port-forward, proxy and logs are) gets at most this long, or what its ``?timeout=``
asks when that is shorter; past it the work is cancelled and the answer is 504 with
upstream's Status (reason ``Timeout``). A ``?timeout=`` that is not a duration is 400.

Cancelling lands at the await the request is waiting in (an admission webhook, a
storage write, ...): a storage write is one atomic step, so it is done or not, and
nothing of the answer was sent yet (non-long-running answers are written whole).

One timer serves all requests of the default timeout: they expire in the order they
started, so they wait in an insertion-ordered dict and the timer is armed for the
oldest only (a timer per request would cost several microseconds each). A shorter
``?timeout=`` gets a timer of its own."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from ..api import status as st
from ..api.duration import DurationError, parse_duration

TIMEOUT_MESSAGE = "Timeout: request did not complete within the allotted timeout"
INVALID_TIMEOUT = "invalid timeout specified in the request URL"


def timed_out() -> st.ApiError:
    return st.ApiError(504, "Timeout", TIMEOUT_MESSAGE)


def requested_timeout(query: Mapping[str, str], maximum: float) -> float:
    """The time a request gets: ``?timeout=`` when given, above zero and below MAXIMUM;
    MAXIMUM otherwise (upstream: 0 means "no timeout of the client's own")."""
    raw = query.get("timeout")
    if not raw:
        return maximum
    try:
        asked = parse_duration(raw).total_seconds()
    except DurationError as exc:
        raise st.bad_request(f"{INVALID_TIMEOUT} - {exc}") from None
    return asked if 0 < asked < maximum else maximum


class Deadline:
    __slots__ = ("task", "at", "expired", "handle")

    def __init__(self, task: "asyncio.Task[Any]", at: float):
        self.task = task
        self.at = at
        self.expired = False
        self.handle: asyncio.TimerHandle | None = None

    def expire(self) -> None:
        self.expired = True
        self.task.cancel()


class Deadlines:
    """The deadlines of the requests in flight."""

    def __init__(self, default: float):
        self.default = default
        # Deadlines of the default length, oldest first (a deadline is its own key).
        self._fifo: dict[Deadline, None] = {}
        self._timer: asyncio.TimerHandle | None = None

    def start(self, seconds: float) -> Deadline:
        """The current task's deadline, SECONDS from now; it is cancelled then unless
        :meth:`finish` came first. Call :meth:`finish` with no await in between the
        guarded work and it, so a late cancel never reaches past the guarded work."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        d = Deadline(task, loop.time() + seconds)
        if seconds < self.default:
            d.handle = loop.call_at(d.at, d.expire)
        else:
            self._fifo[d] = None
            if self._timer is None:
                self._timer = loop.call_at(d.at, self._sweep)
        return d

    def finish(self, d: Deadline | None) -> None:
        if d is None:
            return
        if d.handle is not None:
            d.handle.cancel()
            d.handle = None
        else:
            self._fifo.pop(d, None)

    def _sweep(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._fifo:
            d = next(iter(self._fifo))
            if d.at > now:
                self._timer = loop.call_at(d.at, self._sweep)
                return
            del self._fifo[d]
            d.expire()
