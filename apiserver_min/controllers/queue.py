"""The controllers' work queue, retry delay and field manager."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from ..api import names
from ..api import status as st

RETRY_DELAY = 1.0


# Writes are recorded in managedFields under the controller manager's name (upstream:
# the user agent's product name, kube-controller-manager); deletes record nothing.
FIELD_MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER


class KeyQueue:
    """A de-duplicating work queue with delayed re-adds."""

    def __init__(self):
        self._pending: dict = {}
        self._event = asyncio.Event()

    def add(self, item) -> None:
        if item not in self._pending:
            self._pending[item] = None
            self._event.set()

    def add_after(self, item, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, item)

    async def get(self):
        while not self._pending:
            self._event.clear()
            await self._event.wait()
        item = next(iter(self._pending))
        del self._pending[item]
        return item


class RateLimitedQueue(KeyQueue):
    """A :class:`KeyQueue` whose failed items come back after a per-item exponential delay
    (5 ms doubling up to ``max_delay``), reset by :meth:`forget` once an item syncs."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 300.0):
        super().__init__()
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict = {}

    def add_rate_limited(self, item) -> float:
        n = self._failures.get(item, 0)
        self._failures[item] = n + 1
        delay = min(self.base_delay * (2**n), self.max_delay)
        self.add_after(item, delay)
        return delay

    def forget(self, item) -> None:
        self._failures.pop(item, None)

    def failures(self, item) -> int:
        return self._failures.get(item, 0)


async def run_worker(queue: RateLimitedQueue, sync: Callable[[Any], Awaitable[None]], log: logging.Logger, what: str):
    """Take items off ``queue`` for ever: ``sync`` each; an ApiError or any other failure
    puts the item back rate-limited (logged), a success forgets its failures."""
    while True:
        item = await queue.get()
        try:
            await sync(item)
        except st.ApiError as exc:
            log.info("%s %s: %s (retrying)", what, item, exc.message)
            queue.add_rate_limited(item)
        except Exception:  # noqa: BLE001 - one bad item is retried; the queue goes on
            log.exception("%s %s: sync failed (retrying)", what, item)
            queue.add_rate_limited(item)
        else:
            queue.forget(item)
