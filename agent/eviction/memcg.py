"""Memory threshold notifications (``--kernel-memcg-notification``).

The eviction manager asks to be woken when a memory cgroup's usage crosses the
point where ``memory.available`` (or ``allocatableMemory.available``) would fall
under a threshold, instead of finding out at the next housekeeping:

* cgroup v1: the kernel's usage thresholds. An eventfd and an open
  ``memory.usage_in_bytes`` are registered by writing ``"<eventfd> <fd>
  <bytes>"`` to ``cgroup.event_control``; the eventfd becomes readable each time
  usage crosses the value, in either direction. Closing the eventfd removes the
  registration. The event loop watches the eventfd: no thread, no polling.
* cgroup v2 has no usage thresholds (``memory.events`` only counts ``low``,
  ``high``, ``max`` and OOM events, which a node-wide threshold never raises, and
  the root cgroup has no ``memory.current``). There a cheap watcher reads the
  usage every :data:`V2_POLL_INTERVAL` seconds and calls back on a crossing - one
  small file read, well under the 1 s the option promises.

The usage value to watch is upstream's: ``capacity - threshold + inactive_file``
(the working set is usage minus inactive file pages, and the threshold is on the
working set). The manager refreshes it from its observations every
:data:`REFRESH_INTERVAL` seconds, as inactive file pages drift.
"""

from __future__ import annotations

import asyncio
import os
from typing import Callable

from .. import logging as agent_logging

__all__ = [
    "CgroupNotifier",
    "EventfdNotifier",
    "PollingNotifier",
    "new_notifier",
    "REFRESH_INTERVAL",
    "V2_POLL_INTERVAL",
]

log = agent_logging.get_logger("eviction")

REFRESH_INTERVAL = 10.0  # upstream's notifierRefreshInterval
V2_POLL_INTERVAL = 0.25
USAGE_V1 = "memory.usage_in_bytes"
EVENT_CONTROL = "cgroup.event_control"


class CgroupNotifier:
    """Calls ``on_cross`` when the cgroup's memory usage crosses ``threshold`` bytes."""

    description = ""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class EventfdNotifier(CgroupNotifier):
    """cgroup v1: a kernel usage threshold on ``<cgroup_dir>/memory.usage_in_bytes``."""

    def __init__(self, cgroup_dir: str, threshold: int, on_cross: Callable[[], None]) -> None:
        self.cgroup_dir = cgroup_dir
        self.threshold = int(threshold)
        self.on_cross = on_cross
        self.description = f"memcg usage threshold {self.threshold} on {cgroup_dir}"
        self._efd = -1
        self._ufd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Register the threshold; raises OSError when the kernel refuses it."""
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            ufd = os.open(os.path.join(self.cgroup_dir, USAGE_V1), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(efd)
            raise
        try:
            ctl = os.open(os.path.join(self.cgroup_dir, EVENT_CONTROL), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(ctl, f"{efd} {ufd} {self.threshold}".encode())
            finally:
                os.close(ctl)
        except OSError:
            os.close(efd)
            os.close(ufd)
            raise
        self._efd, self._ufd = efd, ufd
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(efd, self._ready)

    def _ready(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except (BlockingIOError, OSError):
            return
        self.on_cross()

    def close(self) -> None:
        if self._efd >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._efd)
            os.close(self._efd)
            self._efd = -1
        if self._ufd >= 0:
            os.close(self._ufd)
            self._ufd = -1


class PollingNotifier(CgroupNotifier):
    """cgroup v2: ``read_usage()`` every :data:`V2_POLL_INTERVAL` s; a crossing calls back."""

    def __init__(
        self, read_usage: Callable[[], int | None], threshold: int, on_cross: Callable[[], None], where: str = ""
    ) -> None:
        self.read_usage = read_usage
        self.threshold = int(threshold)
        self.on_cross = on_cross
        self.description = f"polled usage threshold {self.threshold} on {where or 'the node'}"
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self.read_usage() is None:
            raise OSError("memory usage cannot be read")
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="memcg-poll")

    async def _watch(self) -> None:
        above = (self.read_usage() or 0) >= self.threshold
        while True:
            await asyncio.sleep(V2_POLL_INTERVAL)
            usage = self.read_usage()
            if usage is None:
                continue
            now_above = usage >= self.threshold
            if now_above != above:
                above = now_above
                self.on_cross()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _meminfo_usage() -> int | None:
    """The v2 root's usage as the node's memory figures take it: MemTotal - MemFree."""
    values: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemFree"):
                    values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if len(values) < 2:
        return None
    return values["MemTotal"] - values["MemFree"]


def new_notifier(dirs: dict[str, str], root: bool, threshold: int, on_cross: Callable[[], None]) -> CgroupNotifier:
    """The notifier for the cgroup whose directories (controller or ``unified`` -> dir) are
    given: the kernel's thresholds on v1, the polled watcher on v2."""
    if "memory" in dirs:
        return EventfdNotifier(dirs["memory"], threshold, on_cross)
    unified = dirs.get("unified", "")
    if root or not unified:
        return PollingNotifier(_meminfo_usage, threshold, on_cross, "the node")
    path = os.path.join(unified, "memory.current")
    return PollingNotifier(lambda: _read_int(path), threshold, on_cross, unified)
