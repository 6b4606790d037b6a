"""Graceful node shutdown: pods stop in priority order before the machine goes down.

With ``shutdownGracePeriod`` (and ``shutdownGracePeriodCriticalPods``) or
``shutdownGracePeriodByPodPriority`` set, the agent holds a *delay* inhibitor
lock from systemd-logind, so that a shutdown waits for it (up to logind's
``InhibitDelayMaxSec``, which the agent raises to the total of the budgets).
On ``PrepareForShutdown(true)``:

* the node reports not ready ("node is shutting down") and refuses new pods
  (reason ``NodeShutdown``);
* the active pods are split into groups by priority (one group per budget
  entry; a pod joins the entry with the highest priority not above its own,
  or the lowest entry), and the groups are stopped one after the other, lowest
  priority first, each pod with the group's budget as its grace period (or
  its own ``terminationGracePeriodSeconds`` when that is shorter); a group
  that outlasts its budget is left to finish while the next one starts;
* each stopped pod ends ``Failed`` with reason ``Terminated`` and upstream's
  message, plus the ``DisruptionTarget`` condition (PodDisruptionConditions);
* then the lock is released, and logind goes on with the shutdown.

``PrepareForShutdown(false)`` (the shutdown was cancelled) makes the node ready
again and takes a new lock. When the bus connection ends, the agent connects
again after a second, as upstream does; a failure to start is retried with a
growing delay, the node running on without the lock meanwhile.

The two ``shutdownGracePeriod`` fields are the two-entry form of the list:
``{0: period - critical, 2000000000: critical}``.

With GracefulNodeShutdownBasedOnPodPriority (on by default) the start and end of
the last shutdown are kept in ``<root-dir>/graceful_node_shutdown_state``, so
that after the reboot the agent's ``graceful_shutdown_start_time_seconds`` and
``..._end_time_seconds`` metrics tell when the last one ran and whether it ended.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import json
import os
import time
from typing import Any, Awaitable, Callable, Iterable, Sequence

from apiserver_min.api import names
from apiserver_min.api.helpers import set_pod_condition
from apiserver_min.api.timeutil import format_rfc3339_nano, parse_rfc3339

from .. import logging as agent_logging
from .. import pods as podutil
from ..events import EventRecorder
from ..options import ShutdownGracePeriodByPodPriority
from .logind import Logind, LogindError, write_inhibit_delay_dropin

__all__ = [
    "ShutdownGroup",
    "ShutdownManager",
    "budgets_from_config",
    "migrate_config",
    "group_by_priority",
    "pod_grace_period",
    "period_requested",
    "mark_terminated",
    "RECONNECT_PERIOD",
]

log = agent_logging.get_logger("nodeshutdown")

RECONNECT_PERIOD = 1.0  # upstream's D-Bus reconnect period
RETRY_MAX = 60.0  # longest wait between two failed starts
RELOAD_WAIT = 2.0  # how long logind may take to apply the raised InhibitDelayMaxSec
STATE_FILE = "graceful_node_shutdown_state"  # under the root directory, upstream's name

Budget = ShutdownGracePeriodByPodPriority
# kill(pod, grace seconds, status update) -> done when the pod's containers are stopped
KillFunc = Callable[[dict, int, Callable[[dict], None]], Awaitable[None]]


# --- the budgets and the groups (pure) ----------------------------------------------------


def migrate_config(period: float, critical: float) -> tuple[Budget, ...]:
    """The two-field form as a list: non-critical pods get ``period - critical``,
    critical ones (priority 2000000000 and up) the rest."""
    if period <= 0:
        return ()
    default = period - critical
    if default < 0:
        return ()
    return (
        Budget(0, int(default)),
        Budget(names.SYSTEM_CRITICAL_PRIORITY, int(period) - int(default)),
    )


def budgets_from_config(cfg: Any) -> tuple[Budget, ...]:
    """The budgets in force, lowest priority first; empty when the feature is off."""
    gates = cfg.feature_gates
    if not gates.enabled("GracefulNodeShutdown"):
        return ()
    budgets: Sequence[Budget] = tuple(cfg.shutdown_grace_period_by_pod_priority or ())
    if not gates.enabled("GracefulNodeShutdownBasedOnPodPriority") or not budgets:
        budgets = migrate_config(
            cfg.shutdown_grace_period.total_seconds(), cfg.shutdown_grace_period_critical_pods.total_seconds()
        )
    return tuple(sorted(budgets, key=lambda b: b.priority))


def period_requested(budgets: Iterable[Budget]) -> int:
    """The whole shutdown delay the budgets need (logind's InhibitDelayMaxSec must cover it)."""
    return sum(b.shutdown_grace_period_seconds for b in budgets)


@dataclasses.dataclass
class ShutdownGroup:
    priority: int
    seconds: int
    pods: list[dict] = dataclasses.field(default_factory=list)


def pod_priority(pod: dict) -> int:
    value = podutil.spec(pod).get("priority")
    return int(value) if isinstance(value, int) else 0


def group_by_priority(budgets: Sequence[Budget], pods: Iterable[dict]) -> list[ShutdownGroup]:
    """One group per budget (sorted by priority), each with the pods it stops."""
    groups = [ShutdownGroup(b.priority, b.shutdown_grace_period_seconds) for b in budgets]
    if not groups:
        return groups
    keys = [g.priority for g in groups]
    for pod in pods:
        prio = pod_priority(pod)
        i = bisect.bisect_left(keys, prio)
        if i == len(groups):
            i = len(groups) - 1  # above the highest entry: the highest
        elif i > 0 and keys[i] > prio:
            i -= 1  # between two entries: the lower one
        groups[i].pods.append(pod)
    return groups


def pod_grace_period(pod: dict, budget: int) -> int:
    """The group's budget, or the pod's own grace period when that is shorter."""
    own = podutil.spec(pod).get("terminationGracePeriodSeconds")
    if isinstance(own, int) and own <= budget:
        return max(0, own)
    return budget


def mark_terminated(status: dict, *, disruption_condition: bool, now: str | None = None) -> None:
    """Upstream's status of a pod stopped for a node shutdown (in place)."""
    if status.get("phase") != "Succeeded":
        status["phase"] = "Failed"
    status["reason"] = names.SHUTDOWN_POD_REASON
    status["message"] = names.SHUTDOWN_POD_MESSAGE
    if not disruption_condition:
        return
    # A copy of the list: the conditions' dicts may be shared with the pod the agent keeps.
    status["conditions"] = [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]
    set_pod_condition(
        {"status": status},
        {
            "type": names.POD_CONDITION_DISRUPTION_TARGET,
            "status": "True",
            "reason": names.POD_REASON_TERMINATION_BY_AGENT,
            "message": names.SHUTDOWN_POD_MESSAGE,
        },
        now=now,
    )


# --- the manager --------------------------------------------------------------------------


class ShutdownManager:
    """Holds logind's delay lock and stops the pods when the node shuts down."""

    def __init__(
        self,
        budgets: Sequence[Budget],
        *,
        pods: Callable[[], list[dict]],
        kill: KillFunc,
        events: EventRecorder | None = None,
        node_changed: Callable[[], None] = lambda: None,
        disruption_conditions: bool = True,
        logind: Callable[[], Logind] = Logind,
        dropin_dir: str = names.SHUTDOWN_LOGIND_DROPIN_DIR,
        state_file: str | None = None,
    ) -> None:
        self.budgets = tuple(sorted(budgets, key=lambda b: b.priority))
        self.pods = pods
        self.kill = kill
        self.events = events or EventRecorder()
        self.node_changed = node_changed
        self.disruption_conditions = disruption_conditions
        self._logind_factory = logind
        self.dropin_dir = dropin_dir
        self.shutting_down = False
        self.lock: int | None = None
        self.shutdowns = 0  # shutdown events processed
        self._stragglers: set[asyncio.Task] = set()
        self.state_file = state_file
        # Unix times of the last shutdown's start and end (None: not known).
        self.last_start, self.last_end = self._load_state()

    @property
    def enabled(self) -> bool:
        return bool(self.budgets)

    @property
    def period_requested(self) -> int:
        return period_requested(self.budgets)

    # --- what the rest of the agent asks --------------------------------------------------

    def admit(self, pod: dict) -> tuple[str, str]:
        """The node's admission: no new pod while the node is shutting down."""
        if self.shutting_down:
            return names.SHUTDOWN_NOT_ADMITTED_REASON, names.SHUTDOWN_NOT_ADMITTED_MESSAGE
        return "", ""

    def not_ready_message(self) -> str:
        """Why the node is not ready, from the shutdown's side ("" when it is not shutting down)."""
        return names.SHUTDOWN_NOT_READY_MESSAGE if self.shutting_down else ""

    # --- the last shutdown's times ---------------------------------------------------------

    def _load_state(self) -> tuple[float | None, float | None]:
        if not self.state_file or not os.path.exists(self.state_file):
            return None, None
        try:
            with open(self.state_file) as f:
                doc = json.load(f)
            return _unix(doc.get("startTime")), _unix(doc.get("endTime"))
        except (OSError, ValueError, AttributeError) as exc:
            log.error("Cannot read the last node shutdown's times", path=self.state_file, err=exc)
            return None, None

    def _store_state(self) -> None:
        if not self.state_file:
            return
        doc = {}
        for key, value in (("startTime", self.last_start), ("endTime", self.last_end)):
            if value is not None:
                doc[key] = format_rfc3339_nano(int(value * 1e9))
        try:
            tmp = self.state_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.state_file)
        except OSError as exc:
            log.error("Cannot store the node shutdown's times", path=self.state_file, err=exc)

    def metrics(self) -> dict[str, float]:
        """``start``/``end`` (unix seconds) of the last shutdown, those that are known."""
        out = {}
        if self.last_start is not None:
            out["start"] = self.last_start
        if self.last_end is not None:
            out["end"] = self.last_end
        return out

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Watch for shutdowns until cancelled, reconnecting when the bus goes away."""
        if not self.enabled:
            log.info("Graceful node shutdown is off (no shutdown grace period configured)")
            await asyncio.Event().wait()
        log.info(
            "Creating node shutdown manager",
            shutdownGracePeriodRequested=f"{self.period_requested}s",
            budgets=",".join(str(b) for b in self.budgets),
        )
        delay = RECONNECT_PERIOD
        while True:
            try:
                await self._session()
            except Exception as exc:  # noqa: BLE001 - the node must keep watching whatever went wrong
                if not isinstance(exc, LogindError):
                    exc = LogindError(f"unexpected error: {exc!r}")
                log.error("Unable to watch the node for shutdown events", err=exc, retryIn=f"{delay:g}s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = RECONNECT_PERIOD
            await asyncio.sleep(RECONNECT_PERIOD)
            log.info("Restarting watch for node shutdown events")

    async def _session(self) -> None:
        """One bus connection: raise logind's delay if needed, take the lock, handle signals."""
        logind = self._logind_factory()
        await logind.connect()
        try:
            await self._ensure_inhibit_delay(logind)
            signals: asyncio.Queue[bool] = asyncio.Queue()
            await self._acquire_lock(logind)
            await logind.watch_shutdown(signals.put_nowait)
            log.info("Watching the node for shutdown events", inhibitDelayLock="held")
            gone = asyncio.ensure_future(logind.wait_disconnected())
            try:
                while True:
                    nxt = asyncio.ensure_future(signals.get())
                    await asyncio.wait({nxt, gone}, return_when=asyncio.FIRST_COMPLETED)
                    if not nxt.done():
                        nxt.cancel()
                        log.error("Ended watching the node for shutdown events: the bus connection closed")
                        return
                    await self._handle(logind, nxt.result())
            finally:
                gone.cancel()
        finally:
            self._release_lock()
            logind.close()

    async def _ensure_inhibit_delay(self, logind: Logind) -> None:
        current = await logind.inhibit_delay_max()
        wanted = self.period_requested
        if wanted <= current:
            return
        try:
            path = await asyncio.to_thread(write_inhibit_delay_dropin, wanted, self.dropin_dir)
        except OSError as exc:
            raise LogindError(f"unable to override inhibit delay by shutdown manager: {exc}") from None
        log.info("Raising logind's InhibitDelayMaxSec", current=f"{current:g}s", wanted=f"{wanted}s", dropin=path)
        await logind.reload_logind()
        deadline = time.monotonic() + RELOAD_WAIT
        while True:
            updated = await logind.inhibit_delay_max()
            if updated >= wanted:
                return
            if time.monotonic() >= deadline:
                raise LogindError(
                    f"node shutdown manager was unable to update logind InhibitDelayMaxSec to {wanted}s "
                    f"(ShutdownGracePeriod), current value of InhibitDelayMaxSec ({updated:g}s) is less than "
                    "requested ShutdownGracePeriod"
                )
            await asyncio.sleep(0.1)

    async def _acquire_lock(self, logind: Logind) -> None:
        lock = await logind.inhibit_shutdown()
        self._release_lock()
        self.lock = lock
        log.v(1).info("Acquired the shutdown inhibitor lock", fd=lock)

    def _release_lock(self) -> None:
        if self.lock is not None:
            try:
                Logind.release(self.lock)
            except OSError as exc:
                log.error("Failed releasing the shutdown inhibitor lock", err=exc)
            self.lock = None

    async def _handle(self, logind: Logind, active: bool) -> None:
        kind = "shutdown" if active else "cancelled"
        log.info("Shutdown manager detected new shutdown event", event=kind)
        message = (
            "Shutdown manager detected shutdown event" if active else "Shutdown manager detected shutdown cancellation"
        )
        self.events.record(None, "Normal", names.SHUTDOWN_EVENT_REASON, message)
        self.shutting_down = active
        self.node_changed()
        if active:
            await self.process_shutdown()
        else:
            try:
                await self._acquire_lock(logind)
            except LogindError as exc:
                log.error("Failed to take the shutdown inhibitor lock again", err=exc)

    async def process_shutdown(self) -> None:
        """Stop the active pods group by group, then release the lock."""
        self.shutdowns += 1
        self.last_start, self.last_end = time.time(), None
        self._store_state()
        try:
            for group in group_by_priority(self.budgets, self.pods()):
                if not group.pods:
                    continue
                tasks = [asyncio.ensure_future(self._kill_one(pod, group.seconds)) for pod in group.pods]
                _, pending = await asyncio.wait(tasks, timeout=group.seconds)
                if pending:
                    log.info(
                        "Shutdown manager pod killing time out",
                        gracePeriod=group.seconds,
                        priority=group.priority,
                        pending=len(pending),
                    )
                    self._stragglers.update(pending)
                    for t in pending:
                        t.add_done_callback(self._stragglers.discard)
        finally:
            self.last_end = time.time()
            self._store_state()
            self._release_lock()
            log.info("Shutdown manager completed processing shutdown event, node will shutdown shortly")

    async def _kill_one(self, pod: dict, budget: int) -> None:
        grace = pod_grace_period(pod, budget)
        name = podutil.full_name(pod)
        log.info("Shutdown manager killing pod with gracePeriod", pod=name, gracePeriod=grace)
        try:
            await self.kill(pod, grace, self._mark)
        except Exception as exc:  # noqa: BLE001 - one pod's failure must not stop the others
            log.error("Shutdown manager failed killing pod", pod=name, err=exc)
        else:
            log.info("Shutdown manager finished killing pod", pod=name)

    def _mark(self, status: dict) -> None:
        mark_terminated(status, disruption_condition=self.disruption_conditions)


def _unix(text: Any) -> float | None:
    if not text:
        return None
    return parse_rfc3339(str(text)).timestamp()
