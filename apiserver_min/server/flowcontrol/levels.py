"""Priority levels: seats, queues, shuffle sharding and fair queuing.

A limited level owns ``current_limit`` seats (its share of the server's total, see
:func:`nominal_limits` and :func:`borrowing_limits`). A request takes ``width`` seats
(a LIST more than one) while it executes. When the level has free seats and nobody is
waiting, a request runs at once; otherwise it waits in one of the level's queues, or is
rejected (``Reject`` levels, or its queue is full).

Shuffle sharding: a flow (schema + distinguisher) hashes to a *hand* of ``handSize`` of
the level's queues and joins the shortest of them, so a heavy flow shares its queues
with few others.

Fair queuing, after upstream's virtual-time scheme (simplified): the level keeps a
virtual clock R that advances, per second of real time, by the seats in use divided by
the number of busy queues (what each busy queue receives from an ideal fair share). A
queue's ``next_r`` is the virtual time its next request starts at; dispatching a
request moves it by ``width`` times the expected service time of that width, and the
request's completion corrects that by the time it really took. The next request to run
is the queue head with the earliest virtual finish (``next_r`` plus its own expected
service) — so a queue that received less, or a short request, goes first. When that head
does not fit in the free seats, the others wait too (wide requests are not starved),
except a head that fits in the free seats and is expected to take at most a tenth of
that head's time: it is done before enough seats are likely free for the wide one, so
a quiet user's GET does not wait for a noisy user's LIST to finish (a departure from
upstream, where every head waits; its LISTs finish in milliseconds, ours can take
seconds on a busy machine). An idle queue that becomes busy starts at the current R
(no saved-up credit). Expected
service times are averages of recent ones per request width (upstream uses a constant
and corrects it the same way).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import math
import time
from typing import Any

# The service time assumed for a request width not seen yet (upstream's estimate).
INITIAL_ESTIMATE = 0.003
# A narrow request may start ahead of a wider head that cannot start yet when it is
# expected to take at most this share of that one's time (see Level._backfill).
BACKFILL_SHARE = 0.1
# The seat count that stands for "no upper bound" on borrowing.
UNBOUNDED = 1 << 30


class Request:
    __slots__ = ("width", "future", "queue", "enqueued", "flow_schema")

    def __init__(self, width: int, queue: "Queue | None", flow_schema: str):
        self.width = width
        self.future: asyncio.Future | None = None
        self.queue = queue
        self.enqueued = 0.0
        self.flow_schema = flow_schema


class Queue:
    __slots__ = ("waiting", "waiting_seats", "executing_seats", "next_r", "generation")

    def __init__(self, generation: int = 0) -> None:
        self.generation = generation  # the level's queue generation it belongs to
        self.waiting: collections.deque[Request] = collections.deque()
        self.waiting_seats = 0
        self.executing_seats = 0
        self.next_r = 0.0

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or self.executing_seats > 0


class Rejected(Exception):
    """The level cannot take the request: ``reason`` is the metric's label
    (queue-full, concurrency-limit, time-out, cancelled)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def deal_hand(flow_hash: int, deck: int, hand: int) -> list[int]:
    """``hand`` distinct queue indices out of ``deck``, from the hash's mixed-radix digits."""
    out: list[int] = []
    for i in range(hand):
        radix = deck - i
        flow_hash, digit = divmod(flow_hash, radix)
        # Map the digit to the digit-th queue not yet dealt.
        for taken in sorted(out):
            if digit >= taken:
                digit += 1
        out.append(digit)
    return out


def flow_hash(schema: str, distinguisher: str) -> int:
    digest = hashlib.blake2b(f"{schema}\x00{distinguisher}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Level:
    """One priority level's state. ``exempt`` levels only count."""

    def __init__(self, name: str, uid: str, spec: dict):
        self.name = name
        self.uid = uid
        self.queues: list[Queue] = []
        self.busy = 0  # queues with requests waiting or executing
        self.generation = 0  # bumped whenever the queues are replaced
        self.nonempty: set[Queue] = set()  # queues with requests waiting
        self.queue_count = self.hand_size = 0
        self.exempt = self.reject = False
        self.nominal_limit = 0
        self.min_limit = 0
        self.max_limit = UNBOUNDED
        self.current_limit = 0
        self.executing_seats = 0
        self.executing = 0
        self.waiting = 0
        self.waiting_seats = 0
        self.r = 0.0
        self.r_at = time.monotonic()
        # Seconds a request of a given width takes: an average of recent ones.
        self.estimates: dict[int, float] = {}
        self._hands: dict[tuple[str, str], list[Queue]] = {}
        # Seat demand (executing + waiting seats) over the current borrowing period.
        self.demand_integral = 0.0
        self.demand_sq_integral = 0.0
        self.demand_high = 0
        self.demand_since = time.monotonic()
        self.demand_at = self.demand_since
        self.smoothed_demand = 0.0
        self.configure(uid, spec)

    def configure(self, uid: str, spec: dict) -> None:
        """Take a (new) spec. Requests executing keep their seats; when the queues change
        shape, the requests waiting in the old ones are let run."""
        self.uid = uid
        self.exempt = spec.get("type") == "Exempt"
        limited = spec.get("limited") or {}
        self.shares = int(limited.get("nominalConcurrencyShares") or 0)
        self.lendable_percent = int(limited.get("lendablePercent") or 0)
        borrowing = limited.get("borrowingLimitPercent")
        self.borrowing_percent: int | None = None if borrowing is None else int(borrowing)
        response = limited.get("limitResponse") or {}
        self.reject = self.exempt or response.get("type") != "Queue"
        q = response.get("queuing") or {}
        queue_count = 0 if self.reject else int(q.get("queues") or 64)
        hand_size = min(int(q.get("handSize") or 8), queue_count)
        self.queue_length_limit = int(q.get("queueLengthLimit") or 50)
        if (queue_count, hand_size) != (self.queue_count, self.hand_size) or not self.queues and queue_count:
            self.release_all()
            self.queue_count, self.hand_size = queue_count, hand_size
            self.generation += 1
            self.queues = [Queue(self.generation) for _ in range(queue_count)]
            self._hands = {}
            self.busy = 0
            self.nonempty = set()
        self.current_limit = 0  # set again from the new nominal limit

    def release_all(self) -> None:
        """Start every waiting request, whatever the limit (the level goes away or changes)."""
        if self.waiting:
            limit = self.current_limit
            self.current_limit = UNBOUNDED
            self.dispatch()
            self.current_limit = limit

    # --- bookkeeping ----------------------------------------------------------------------
    def _note_demand(self, now: float) -> None:
        dt = now - self.demand_at
        if dt > 0:
            d = self.executing_seats + self.waiting_seats
            self.demand_integral += d * dt
            self.demand_sq_integral += d * d * dt
            self.demand_at = now

    def _advance_r(self, now: float) -> None:
        dt = now - self.r_at
        self.r_at = now
        if dt > 0 and self.busy:
            self.r += dt * min(self.executing_seats, max(self.current_limit, 1)) / self.busy

    # --- admission --------------------------------------------------------------------------
    def admit(self, width: int, schema: str, distinguisher: str) -> Request:
        """A request that runs now (``future`` None) or waits (``future`` to await);
        raises :class:`Rejected`."""
        now = time.monotonic()
        self._note_demand(now)
        width = max(1, min(width, max(self.current_limit, 1)))
        if self.exempt:
            req = Request(width, None, schema)
            self.executing += 1
            self.executing_seats += width
            return req
        if self.reject:
            if self.executing_seats + width > self.current_limit and self.executing_seats > 0:
                raise Rejected("concurrency-limit")
            req = Request(width, None, schema)
            self._start(req)
            return req
        queue = self._choose_queue(schema, distinguisher)
        if len(queue.waiting) >= self.queue_length_limit:
            raise Rejected("queue-full")
        self._advance_r(now)
        req = Request(width, queue, schema)
        if not queue.busy:
            queue.next_r = max(queue.next_r, self.r)
            self.busy += 1
        if not self.waiting and (self.executing_seats + width <= self.current_limit or self.executing_seats == 0):
            self._start(req)
            return req
        req.future = asyncio.get_running_loop().create_future()
        req.enqueued = now
        queue.waiting.append(req)
        queue.waiting_seats += width
        self.nonempty.add(queue)
        self.waiting += 1
        self.waiting_seats += width
        self._note_peak()
        self.dispatch()
        return req

    def _note_peak(self) -> None:
        d = self.executing_seats + self.waiting_seats
        if d > self.demand_high:
            self.demand_high = d

    def _choose_queue(self, schema: str, distinguisher: str) -> Queue:
        key = (schema, distinguisher)
        hand = self._hands.get(key)
        if hand is None:
            if len(self._hands) > 4096:
                self._hands.clear()
            idx = deal_hand(flow_hash(schema, distinguisher), self.queue_count, self.hand_size)
            hand = self._hands[key] = [self.queues[i] for i in idx]
        best = hand[0]
        best_load = best.waiting_seats + best.executing_seats
        for q in hand[1:]:
            load = q.waiting_seats + q.executing_seats
            if load < best_load:
                best, best_load = q, load
        return best

    def estimate(self, width: int) -> float:
        return self.estimates.get(width, INITIAL_ESTIMATE)

    def _start(self, req: Request) -> None:
        """Seats taken (the queue, if any, already counted as busy)."""
        self.executing += 1
        self.executing_seats += req.width
        q = req.queue
        if q is not None:
            q.executing_seats += req.width
            q.next_r += req.width * self.estimate(req.width)
        self._note_peak()

    def _unqueue(self, q: Queue, req: Request) -> None:
        q.waiting_seats -= req.width
        self.waiting -= 1
        self.waiting_seats -= req.width
        if not q.waiting:
            self.nonempty.discard(q)

    def dispatch(self) -> list[Request]:
        """Start waiting requests while seats allow: the head that would finish first in
        virtual time goes first; when it does not fit, the others wait too (so wide
        requests are not starved by narrow ones)."""
        started: list[Request] = []
        while self.waiting:
            best: Queue | None = None
            best_finish = 0.0
            for q in self.nonempty:
                head = q.waiting[0]
                finish = q.next_r + head.width * self.estimate(head.width)
                if best is None or finish < best_finish:
                    best, best_finish = q, finish
            assert best is not None
            head = best.waiting[0]
            if head.future is not None and head.future.done():  # gave up meanwhile
                best.waiting.popleft()
                self._unqueue(best, head)
                if not best.busy:
                    self.busy -= 1
                continue
            if self.executing_seats + head.width > self.current_limit and self.executing_seats > 0:
                filler = self._backfill(head)
                if filler is None:
                    break
                best, head = filler
            best.waiting.popleft()
            self._unqueue(best, head)
            self._start(head)
            if head.future is not None:
                head.future.set_result(True)
            started.append(head)
        return started

    def _backfill(self, blocked: Request) -> tuple[Queue, Request] | None:
        """A queue head that may start while ``blocked`` (the head that would finish first,
        too wide for the free seats) waits: it fits in the free seats, and is expected to
        take at most :data:`BACKFILL_SHARE` of the time the blocked one takes, so it is
        done before enough seats are likely free for that one (which it then delays
        little, if at all). The earliest to finish in virtual time of those."""
        free = self.current_limit - self.executing_seats
        longest = BACKFILL_SHARE * self.estimate(blocked.width)
        pick: tuple[Queue, Request] | None = None
        pick_finish = 0.0
        for q in self.nonempty:
            head = q.waiting[0]
            if head is blocked or head.width > free or (head.future is not None and head.future.done()):
                continue
            service = self.estimate(head.width)
            if service > longest:
                continue
            finish = q.next_r + head.width * service
            if pick is None or finish < pick_finish:
                pick, pick_finish = (q, head), finish
        return pick

    def abandon(self, req: Request) -> None:
        """A waiting request gives up (timed out or cancelled)."""
        now = time.monotonic()
        self._note_demand(now)
        self._advance_r(now)
        q = req.queue
        if q is not None:
            try:
                q.waiting.remove(req)
            except ValueError:
                return
            self._unqueue(q, req)
            if not q.busy:
                self.busy -= 1

    def finish(self, req: Request, service_seconds: float) -> list[Request]:
        """A running request ends; returns the requests this lets start."""
        now = time.monotonic()
        self._note_demand(now)
        self._advance_r(now)
        self.executing -= 1
        self.executing_seats -= req.width
        q = req.queue
        if q is not None:
            q.executing_seats -= req.width
            if not q.busy and q.generation == self.generation:
                self.busy -= 1
            guess = self.estimate(req.width)
            q.next_r += req.width * (service_seconds - guess)
            self.estimates[req.width] = guess + 0.2 * (service_seconds - guess)
        if self.waiting:
            return self.dispatch()
        return []

    def close_period(self, now: float) -> None:
        """End a borrowing period: the smoothed seat demand (mean plus standard
        deviation over the period, decaying slowly), as upstream keeps it."""
        self._note_demand(now)
        span = now - self.demand_since
        if span > 0:
            mean = self.demand_integral / span
            var = max(0.0, self.demand_sq_integral / span - mean * mean)
            envelope = mean + math.sqrt(var)
        else:
            envelope = float(self.executing_seats + self.waiting_seats)
        self.smoothed_demand = max(envelope, 0.977 * self.smoothed_demand)
        self.demand_integral = self.demand_sq_integral = 0.0
        self.demand_high = self.executing_seats + self.waiting_seats
        self.demand_since = self.demand_at = now


def nominal_limits(levels: list[Level], server_limit: int) -> None:
    """Each limited level's nominal, minimum and maximum seats out of ``server_limit``
    (--max-requests-inflight plus --max-mutating-requests-inflight), as upstream
    computes them: nominal = ceil(total × shares / sum of shares); the level may lend
    lendablePercent of it and borrow up to borrowingLimitPercent (unbounded when unset)."""
    limited = [lv for lv in levels if not lv.exempt]
    total_shares = sum(lv.shares for lv in limited) or 1
    for lv in limited:
        lv.nominal_limit = max(1, math.ceil(server_limit * lv.shares / total_shares))
        lendable = round(lv.nominal_limit * lv.lendable_percent / 100)
        lv.min_limit = lv.nominal_limit - lendable
        lv.max_limit = (
            UNBOUNDED
            if lv.borrowing_percent is None
            else lv.nominal_limit + round(lv.nominal_limit * lv.borrowing_percent / 100)
        )
        if lv.current_limit == 0:
            lv.current_limit = lv.nominal_limit


def borrowing_limits(levels: list[Level], server_limit: int) -> None:
    """Re-share the seats by demand (upstream's periodic adjustment): each level gets one
    fair proportion of its target (its smoothed seat demand, at least its minimum),
    kept between its minimum and maximum, the proportion chosen so that the levels'
    seats add up to the server's."""
    limited = [lv for lv in levels if not lv.exempt]
    if not limited:
        return
    lows = [float(lv.min_limit) for lv in limited]
    highs = [float(min(lv.max_limit, server_limit)) for lv in limited]
    targets = [max(lo, lv.smoothed_demand, 1.0) for lv, lo in zip(limited, lows)]

    def allocs(prop: float) -> list[float]:
        return [max(lo, min(hi, prop * t)) for lo, hi, t in zip(lows, highs, targets)]

    if sum(lows) >= server_limit:
        chosen = lows
    elif sum(highs) <= server_limit:
        chosen = highs
    else:
        lo, hi = 0.0, 1.0
        while sum(allocs(hi)) < server_limit:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            if sum(allocs(mid)) < server_limit:
                lo = mid
            else:
                hi = mid
        chosen = allocs(hi)
    for lv, a in zip(limited, chosen):
        lv.current_limit = max(1, int(round(a)))


def level_snapshot(lv: Level) -> dict[str, Any]:
    return {
        "name": lv.name,
        "nominal": lv.nominal_limit,
        "current": lv.current_limit,
        "executing_seats": lv.executing_seats,
        "waiting": lv.waiting,
    }
