"""The controllers' work queue, retry delay and field manager."""

from __future__ import annotations

import asyncio

from ..api import names

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
