"""The eviction manager: keep the node out of memory, disk and PID starvation.

Every ``--housekeeping-interval`` (and at once when a memory threshold
notification fires, :mod:`agent.eviction.memcg`) one round runs, as upstream's
``synchronize``:

0. with ``--local-storage-capacity-isolation``, pods over an emptyDir ``sizeLimit``
   or an ``ephemeral-storage`` limit are evicted first (:mod:`.localstorage`), and
   the round ends there when one was;
1. observe the signals from the agent's stats (node figures only: cheap);
2. a threshold is *met* while its signal is under it; one met before stays met
   until the signal is back above it plus its minimum reclaim;
3. the node conditions of met thresholds (``MemoryPressure``, ``DiskPressure``,
   ``PIDPressure``) are reported until ``--eviction-pressure-transition-period``
   has passed since they were last observed; a change pokes the node status;
4. thresholds that have been met for their grace period (hard: at once) act:
   memory first, then the others. Node-level resources go first - dead
   containers and unused images, through the container and image garbage
   collectors - and when that brings every threshold back (with its minimum
   reclaim) no pod is evicted;
5. otherwise the active pods are ranked (:func:`agent.eviction.signals.rank_pods`)
   and the first that may be evicted is: a static pod, a mirror pod or one at a
   system-critical priority never is. The pod ends ``Failed`` with reason
   ``Evicted`` and upstream's message, a ``DisruptionTarget`` condition (with
   the PodDisruptionConditions gate) and a ``Evicted`` warning event; hard
   thresholds give it 1 s to stop, soft ones ``--eviction-max-pod-grace-period``
   (negative: the pod's own). The next round starts when the pod is gone.

The node's admission asks :meth:`EvictionManager.admit`: under memory pressure
only BestEffort pods that do not tolerate the memory-pressure taint are
refused, under any other pressure every pod; critical pods always pass.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping

from apiserver_min.api import names
from apiserver_min.api.helpers import set_pod_condition, tolerates, tolerations_of
from apiserver_min.api.quantity import QuantityError, parse_quantity
from apiserver_min.api.timeutil import format_rfc3339
from apiserver_min.api.timeutil import now as utc_now

from .. import logging as agent_logging
from .. import pods as podutil
from ..cm import pod_qos_class
from .localstorage import has_storage_limits, storage_limit_violation
from .memcg import REFRESH_INTERVAL, CgroupNotifier, new_notifier
from .signals import Observation, observe, pod_priority, pod_stats_by_uid, rank_pods
from .thresholds import (
    MEMORY_PRESSURE,
    RESOURCE_MEMORY,
    RESOURCE_STORAGE,
    SIGNAL_ALLOCATABLE_MEMORY,
    SIGNAL_IMAGEFS,
    SIGNAL_IMAGEFS_INODES,
    SIGNAL_MEMORY,
    SIGNAL_NODEFS,
    SIGNAL_NODEFS_INODES,
    SIGNAL_TO_CONDITION,
    SIGNAL_TO_RESOURCE,
    Threshold,
    quantity_for,
    threshold_quantity,
)

__all__ = ["EvictionConfig", "EvictionManager", "evictor", "is_critical_pod", "mark_evicted", "POD_CLEANUP_TIMEOUT"]

log = agent_logging.get_logger("eviction")

POD_CLEANUP_TIMEOUT = 30.0  # upstream's podCleanupTimeout
# After a memory threshold notification, rounds this often for this many times: the kernel
# signals the usage crossing the moment it happens, when the working set may still read a
# hair above the threshold (usage is counted in per-CPU batches), and it signals only once.
NOTIFY_FOLLOWUP_INTERVAL = 0.2
NOTIFY_FOLLOWUPS = 5
HARD_EVICTION_GRACE = 1  # seconds a pod gets on a hard threshold (upstream's effective minimum)

# (pod, grace seconds or None for the pod's own, reason, message, extra conditions) -> evicted
EvictFunc = Callable[[dict, "int | None", str, str, list], Awaitable[bool]]
EventSink = Callable[["dict | None", str, str, str], None]


@dataclasses.dataclass(frozen=True)
class EvictionConfig:
    thresholds: tuple[Threshold, ...] = ()
    monitoring_interval: float = 10.0  # --housekeeping-interval
    pressure_transition_period: float = 300.0
    max_pod_grace_period: int = 0
    kernel_memcg_notification: bool = False
    disruption_conditions: bool = True  # the PodDisruptionConditions gate
    local_storage_capacity_isolation: bool = True  # emptyDir sizeLimit, ephemeral-storage limits


def is_critical_pod(pod: dict) -> bool:
    """Upstream's IsCriticalPod: static, mirror, or at a system-critical priority."""
    return podutil.is_static(pod) or podutil.is_mirror(pod) or pod_priority(pod) >= names.SYSTEM_CRITICAL_PRIORITY


def mark_evicted(status: dict, *, reason: str, message: str, conditions: list) -> None:
    """An evicted pod's final status, in place: ``Failed`` with the reason and message, and the
    given conditions added or replaced by type (a transition time already recorded is kept)."""
    status["phase"] = "Failed"
    status["reason"], status["message"] = reason, message
    # A copy of the list: the conditions' dicts may be shared with the pod the agent keeps.
    status["conditions"] = [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]
    for cond in conditions:
        set_pod_condition({"status": status}, cond, now=cond.get("lastTransitionTime"))


def evictor(kill_pod: Callable[..., "asyncio.Future | None"], timeout: float = POD_CLEANUP_TIMEOUT) -> EvictFunc:
    """The manager's ``evict`` over the pod pipeline's ``kill_pod(uid, grace=, update_status=,
    reason=)``: the pod's worker stops it and gives it its final status; True once its
    containers stopped, False when it is not a pod the node runs or did not stop within its
    grace period plus ``timeout`` (upstream's podCleanupTimeout)."""

    async def evict(pod: dict, grace: int | None, reason: str, message: str, conditions: list) -> bool:
        done = kill_pod(
            podutil.uid(pod),
            grace=grace,
            update_status=functools.partial(mark_evicted, reason=reason, message=message, conditions=conditions),
            reason=reason,
        )
        if done is None:
            return False
        wait = podutil.grace_period_seconds(pod, grace) + timeout
        try:
            async with asyncio.timeout(wait):
                await asyncio.shield(done)  # the pod's stop goes on after a timeout here
        except asyncio.TimeoutError:
            log.error("Evicted pod did not stop in time", pod=podutil.full_name(pod), waited=f"{wait:g}s")
            return False
        return True

    return evict


def _memory_first(t: Threshold) -> int:
    return 0 if t.signal in (SIGNAL_MEMORY, SIGNAL_ALLOCATABLE_MEMORY) else 1


def thresholds_met(
    thresholds: Iterable[Threshold], observations: Mapping[str, Observation], enforce_min_reclaim: bool
) -> list[Threshold]:
    out = []
    for t in thresholds:
        obs = observations.get(t.signal)
        if obs is None:
            continue
        amount = threshold_quantity(t.value, obs.capacity).value()
        if enforce_min_reclaim and t.min_reclaim is not None:
            amount += threshold_quantity(t.min_reclaim, obs.capacity).value()
        if amount > obs.available:
            out.append(t)
    return out


def _request_text(container: Mapping, resource: str) -> tuple[int, str]:
    raw = ((container.get("resources") or {}).get("requests") or {}).get(resource)
    if raw is None:
        return 0, "0"
    try:
        q = parse_quantity(raw)
    except QuantityError:
        return 0, "0"
    return q.value(), q.canonical()


def eviction_message(
    resource: str,
    pod: dict,
    stats: Mapping[str, Any] | None,
    thresholds: list[Threshold],
    observations: Mapping[str, Observation],
) -> str:
    """Upstream's message: the starved resource, the threshold and what was available,
    then each container using more than it requested."""
    message = f"The node was low on resource: {resource}. "
    for t in thresholds:
        if SIGNAL_TO_RESOURCE.get(t.signal) != resource:
            continue
        obs = observations.get(t.signal)
        if obs is not None:
            quantity = threshold_quantity(t.value, obs.capacity)
            available = quantity_for(t.signal, obs.available)
            message += f"Threshold quantity: {quantity.canonical()}, available: {available.canonical()}. "
            break
    if stats is None:
        return message
    specs = podutil.containers(pod) + podutil.init_containers(pod)
    for cs in stats.get("containers") or []:
        container = next((c for c in specs if c.get("name") == cs.get("name")), None)
        if container is None:
            continue
        request, request_text = _request_text(container, resource)
        usage: int | None = None
        if resource == RESOURCE_STORAGE:
            rootfs, logs = cs.get("rootfs") or {}, cs.get("logs") or {}
            if "usedBytes" in rootfs and "usedBytes" in logs:
                usage = int(rootfs["usedBytes"]) + int(logs["usedBytes"])
        elif resource == RESOURCE_MEMORY:
            ws = (cs.get("memory") or {}).get("workingSetBytes")
            usage = int(ws) if ws is not None else None
        if usage is not None and usage > request:
            used = quantity_for(SIGNAL_NODEFS, usage).canonical()
            message += (
                f"Container {container.get('name')} was using {used}, request is {request_text}, "
                f"has larger consumption of {resource}. "
            )
    return message


class EvictionManager:
    """See the module docstring. ``stats`` is the agent's :class:`StatsProvider`
    (``node_summary()`` for the signals, ``summary()`` for ranking pods);
    ``active_pods()`` the pods that may be evicted (not terminal, not terminating);
    ``evict`` terminates one and returns once it is stopped."""

    def __init__(
        self,
        config: EvictionConfig,
        *,
        stats: Any,
        active_pods: Callable[[], list[dict]],
        evict: EvictFunc,
        image_gc: Any = None,
        container_gc: Any = None,
        events: EventSink | None = None,
        dedicated_image_fs: Callable[[], Awaitable[bool]] | None = None,
        memcg_dirs: Callable[[str], dict[str, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.stats = stats
        self.active_pods = active_pods
        self.evict = evict
        self.image_gc = image_gc
        self.container_gc = container_gc
        self.events: EventSink = events or (lambda pod, type_, reason, message: None)
        self._dedicated_probe = dedicated_image_fs
        self.dedicated_image_fs: bool | None = None
        self._probe_failed = False
        self.memcg_dirs = memcg_dirs
        self.clock = clock
        self.conditions: list[str] = []
        self.on_conditions_changed: Callable[[], None] = lambda: None
        self.last_observations: dict[str, Observation] = {}
        self._thresholds_met: list[Threshold] = []
        self._first_observed: dict[Threshold, float] = {}
        self._conditions_last_observed: dict[str, float] = {}
        self._notifiers: dict[Threshold, CgroupNotifier] = {}
        self._notifiers_updated = -REFRESH_INTERVAL
        self._wake = asyncio.Event()
        self._notified = False
        self.rounds = 0
        # (pod full name, signal) of the latest evictions, for tests and debugging.
        self.evictions: collections.deque[tuple[str, str]] = collections.deque(maxlen=100)

    # --- what others ask --------------------------------------------------------------

    def pressure(self) -> dict[str, bool]:
        """Condition type -> under pressure, for the node status."""
        return {c: True for c in self.conditions}

    def admit(self, pod: dict) -> tuple[str, str]:
        """("", "") to admit, else upstream's reason and message."""
        conditions = list(self.conditions)
        if not conditions or is_critical_pod(pod):
            return "", ""
        if conditions == [MEMORY_PRESSURE]:
            if pod_qos_class(pod) != "BestEffort":
                return "", ""
            taint = {"key": names.TAINT_MEMORY_PRESSURE, "effect": "NoSchedule"}
            if any(tolerates(t, taint) for t in tolerations_of(pod)):
                return "", ""
        return names.EVICTION_REASON, f"The node had condition: [{' '.join(conditions)}]. "

    def wake(self, why: str = "") -> None:
        """A round now (a memory threshold notification: ``why`` says which)."""
        if why:
            log.info("Eviction manager woken", why=why)
            self._notified = True
        self._wake.set()

    # --- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        thresholds = self.config.thresholds
        log.info(
            "Eviction manager started",
            thresholds=", ".join(t.describe() for t in thresholds) or "none",
            interval=f"{self.config.monitoring_interval:g}s",
            memcg_notification=self.config.kernel_memcg_notification,
        )
        if not thresholds and not self.config.local_storage_capacity_isolation:
            await asyncio.Event().wait()
        followups = 0
        try:
            while True:
                self._wake.clear()
                try:
                    evicted = await self.synchronize()
                except Exception as exc:  # noqa: BLE001 - one failed round must not stop the manager
                    log.error("Eviction manager: failed to synchronize", err=exc)
                    evicted = []
                if evicted:
                    continue  # the pod is gone already (evict waits for it): look again at once
                if self._notified:
                    self._notified = False
                    followups = NOTIFY_FOLLOWUPS
                wait = self.config.monitoring_interval
                if followups and not self._thresholds_met:
                    followups -= 1
                    wait = NOTIFY_FOLLOWUP_INTERVAL
                else:
                    followups = 0
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except asyncio.TimeoutError:
                    pass
        finally:
            for n in self._notifiers.values():
                n.close()
            self._notifiers.clear()

    async def _is_dedicated_image_fs(self) -> bool:
        if self.dedicated_image_fs is None:
            try:
                self.dedicated_image_fs = bool(await self._dedicated_probe()) if self._dedicated_probe else False
            except Exception as exc:  # noqa: BLE001 - asked again next round
                # Once per outage at error level: the runtime being down is reported elsewhere too.
                logger = log.v(2).info if self._probe_failed else log.error
                logger("Eviction manager: cannot tell whether the image file system is dedicated", err=exc)
                self._probe_failed = True
                return False
            self._probe_failed = False
            log.info("Eviction manager: file systems", dedicatedImageFs=self.dedicated_image_fs)
        return self.dedicated_image_fs

    async def synchronize(self) -> list[dict]:
        """One round (see the module docstring); the pods evicted."""
        thresholds = list(self.config.thresholds)
        if not thresholds and not self.config.local_storage_capacity_isolation:
            return []
        self.rounds += 1
        dedicated = await self._is_dedicated_image_fs()
        if self.config.local_storage_capacity_isolation:
            evicted = await self._local_storage_eviction(dedicated)
            if evicted:
                return evicted
        if not thresholds:
            return []
        summary = await self.stats.node_summary()
        observations = observe(summary)
        now = self.clock()
        if self.config.kernel_memcg_notification and now - self._notifiers_updated >= REFRESH_INTERVAL:
            self._notifiers_updated = now
            self._update_notifiers(summary)

        met = thresholds_met(thresholds, observations, False)
        if self._thresholds_met:
            for t in thresholds_met(self._thresholds_met, observations, True):
                if t not in met:
                    met.append(t)
        first_observed = {t: self._first_observed.get(t, now) for t in met}
        observed_conditions = []
        for t in met:
            cond = SIGNAL_TO_CONDITION.get(t.signal)
            if cond and cond not in observed_conditions:
                observed_conditions.append(cond)
        last_observed = dict(self._conditions_last_observed)
        for c in observed_conditions:
            last_observed[c] = now
        period = self.config.pressure_transition_period
        conditions = [c for c, at in last_observed.items() if now - at < period]
        acting = [t for t, at in first_observed.items() if now - at >= t.grace_period]
        for t, at in first_observed.items():
            if t not in acting:
                log.v(2).info(
                    "Eviction manager: eviction criteria not yet met",
                    threshold=t.describe(),
                    duration=f"{now - at:.1f}s",
                )

        changed = set(conditions) != set(self.conditions)
        self.conditions = sorted(conditions, key=("MemoryPressure", "DiskPressure", "PIDPressure").index)
        self._first_observed = first_observed
        self._conditions_last_observed = {c: at for c, at in last_observed.items() if now - at < period}
        self._thresholds_met = acting
        self.last_observations = observations
        if changed:
            log.info("Eviction manager: node conditions", conditions=",".join(self.conditions) or "none")
            self.on_conditions_changed()
        if not acting:
            log.v(3).info("Eviction manager: no resources are starved")
            return []

        acting.sort(key=_memory_first)
        threshold = acting[0]
        resource = SIGNAL_TO_RESOURCE[threshold.signal]
        log.info("Eviction manager: attempting to reclaim", resourceName=resource, threshold=threshold.describe())
        self.events(None, "Warning", names.EVICTION_THRESHOLD_MET_REASON, f"Attempting to reclaim {resource}")
        if await self._reclaim_node_level(threshold.signal, dedicated):
            log.info("Eviction manager: able to reduce resource pressure without evicting pods.", resourceName=resource)
            return []
        log.info("Eviction manager: must evict pod(s) to reclaim", resourceName=resource)
        active = list(self.active_pods())
        if not active:
            log.error("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
            return []
        full = await self.stats.summary()
        by_uid = pod_stats_by_uid(full)

        def stats_of(pod: dict):
            return by_uid.get(podutil.uid(pod))

        ranked = rank_pods(threshold.signal, active, stats_of, dedicated)
        log.info("Eviction manager: pods ranked for eviction", pods=",".join(podutil.full_name(p) for p in ranked))
        for pod in ranked:
            message = eviction_message(resource, pod, stats_of(pod), acting, observations)
            if await self._evict_pod(pod, threshold, message):
                self.evictions.append((podutil.full_name(pod), threshold.signal))
                return [pod]
        log.info("Eviction manager: unable to evict any pods from the node")
        return []

    async def _local_storage_eviction(self, dedicated: bool) -> list[dict]:
        """Pods over an emptyDir sizeLimit or an ephemeral-storage limit (see
        :mod:`agent.eviction.localstorage`); the full stats are read only when a pod has one."""
        limited = [p for p in self.active_pods() if has_storage_limits(p)]
        if not limited:
            return []
        by_uid = pod_stats_by_uid(await self.stats.summary())
        evicted = []
        for pod in limited:
            message = storage_limit_violation(pod, by_uid.get(podutil.uid(pod)), dedicated)
            if message and await self._evict_pod(pod, None, message, local=True):
                self.evictions.append((podutil.full_name(pod), "ephemeral-storage limit"))
                evicted.append(pod)
        return evicted

    def _grace(self, pod: dict, threshold: Threshold | None) -> int | None:
        if threshold is None or threshold.hard:
            return HARD_EVICTION_GRACE
        limit = self.config.max_pod_grace_period
        if limit < 0:
            return None
        return max(HARD_EVICTION_GRACE, min(limit, podutil.grace_period_seconds(pod)))

    async def _evict_pod(self, pod: dict, threshold: Threshold | None, message: str, local: bool = False) -> bool:
        """Evict unless critical; ``local``: a storage limit, which upstream reports without
        the disruption condition."""
        if is_critical_pod(pod):
            log.error("Eviction manager: cannot evict a critical pod", pod=podutil.full_name(pod))
            return False
        self.events(pod, "Warning", names.EVICTION_REASON, message)
        log.info("Evicting pod", pod=podutil.full_name(pod), uid=podutil.uid(pod), message=message)
        conditions = []
        if self.config.disruption_conditions and not local:
            conditions.append(
                {
                    "type": names.POD_CONDITION_DISRUPTION_TARGET,
                    "status": "True",
                    "reason": names.POD_REASON_TERMINATION_BY_AGENT,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": format_rfc3339(utc_now()),
                }
            )
        try:
            ok = await self.evict(pod, self._grace(pod, threshold), names.EVICTION_REASON, message, conditions)
        except Exception as exc:  # noqa: BLE001 - upstream counts the attempt and moves on
            log.error("Eviction manager: pod failed to evict", pod=podutil.full_name(pod), err=exc)
            return True
        if ok:
            log.info("Eviction manager: pod is evicted successfully", pod=podutil.full_name(pod))
        else:
            log.error("Eviction manager: pod failed to evict", pod=podutil.full_name(pod))
        return True

    async def _reclaim_node_level(self, signal: str, dedicated: bool) -> bool:
        """Dead containers, then unused images; True when every threshold is back with its reclaim."""
        image_signals = (SIGNAL_IMAGEFS, SIGNAL_IMAGEFS_INODES)
        disk_signals = image_signals if dedicated else image_signals + (SIGNAL_NODEFS, SIGNAL_NODEFS_INODES)
        if signal not in disk_signals:
            return False
        if self.container_gc is not None:
            try:
                result = await self.container_gc.garbage_collect()
                log.info("Eviction manager: removed dead containers", containers=len(result.containers))
            except Exception as exc:  # noqa: BLE001 - upstream logs and goes on to the next reclaim
                log.info("Eviction manager: unexpected error when attempting to reduce resource pressure", err=exc)
        if self.image_gc is not None:
            try:
                freed = await self.image_gc.delete_unused_images()
                log.info("Eviction manager: removed unused images", bytes=freed)
            except Exception as exc:  # noqa: BLE001 - upstream logs and goes on
                log.info("Eviction manager: unexpected error when attempting to reduce resource pressure", err=exc)
        observations = observe(await self.stats.node_summary())
        return not thresholds_met(self.config.thresholds, observations, True)

    # --- memcg notifications ----------------------------------------------------------

    def _update_notifiers(self, summary: Mapping[str, Any]) -> None:
        node = summary.get("node") or {}
        for t in self.config.thresholds:
            if t.signal not in (SIGNAL_MEMORY, SIGNAL_ALLOCATABLE_MEMORY):
                continue
            if t.signal == SIGNAL_MEMORY:
                mem = node.get("memory") or {}
                dirs_name = "/"
            else:
                mem = next(
                    (c.get("memory") or {} for c in node.get("systemContainers") or [] if c.get("name") == "pods"), {}
                )
                dirs_name = "pods"
            usage, ws, avail = mem.get("usageBytes"), mem.get("workingSetBytes"), mem.get("availableBytes")
            if usage is None or ws is None or avail is None or self.memcg_dirs is None:
                log.info(
                    "Eviction manager: failed to update notifier", threshold=t.describe(), err="summary incomplete"
                )
                continue
            capacity = int(avail) + int(ws)
            inactive_file = int(usage) - int(ws)
            value = capacity - threshold_quantity(t.value, capacity).value() + inactive_file
            old = self._notifiers.pop(t, None)
            if old is not None:
                old.close()
            kind = ("hard " if t.hard else "soft ") + ("allocatable " if dirs_name == "pods" else "")
            description = f"{kind}memory eviction threshold"
            notifier = new_notifier(
                self.memcg_dirs(dirs_name),
                dirs_name == "/",
                value,
                functools.partial(self.wake, f"{description} crossed"),
            )
            try:
                notifier.start()
            except OSError as exc:
                log.info(
                    "Eviction manager: failed to create memory threshold notifier", threshold=t.describe(), err=exc
                )
                continue
            self._notifiers[t] = notifier
            log.v(3).info("Eviction manager: setting notifier", notifier=notifier.description)

    @property
    def notifier_descriptions(self) -> list[str]:
        return [n.description for n in self._notifiers.values()]
