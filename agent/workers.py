"""Pod workers and the sync loop: desired pods in, runtime actions out.

:class:`PodPipeline` is the middle of the agent's data flow (DESIGN.md):

* it consumes the merged pod updates of the sources (:class:`PodConfig`),
  hands each to the pod manager (:class:`agent.podmanager.PodManager`: the
  desired pods and the mirror pods of static pods) and then acts on it: admits
  new pods on the node (resources, pod count, sysctls; a refused pod is kept with
  phase Failed and upstream's reason) and hands each pod to its worker;
* one worker task per pod always acts on the latest desired state: it syncs
  (runtime manager) on every change, when the runtime relist (PLEG) saw one of
  its containers change, when a probe result changed, when a back-off ends,
  and at least every ``--sync-frequency``; a pod removed from its source (or
  deleted) is terminated with its grace period and its sandbox, volumes, cgroup
  and logs are removed;
* housekeeping every 2 s, once every source has been seen, stops and removes
  what the agent created for pods nobody wants any more (after an agent
  restart, for example) and removes leftover pod cgroups and directories;
* container logs are rotated every 10 s.

The runtime is read once per relist period, not once per loop: the relist
(PLEG) lists every sandbox and container each second, and what it saw is the
pod cache of upstream's design. Housekeeping takes the pods present in the
runtime from it, and a sync reuses the pod's last runtime view while the
latest relist shows exactly the sandboxes and containers, in the same states,
that view was made of (a new pod the relist does not show has nothing in the
runtime yet). Only a change, or a relist too old to trust, makes a sync read
the runtime again; an idle node's periodic resyncs then cost no runtime calls.

After an agent restart the workers find the running sandboxes and containers
through their labels and hashes and leave them alone: pods are adopted, not
restarted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import socket
import time
from typing import Any, Callable

from cri.client import CriError, UnavailableError

from . import logging as agent_logging
from . import memory
from . import pods as podutil
from .events import EventRecorder
from .podmanager import PodManager
from .pods import Op, PodUpdate
from .prober import ContainerRef
from .runtime.errors import PodConfigError
from .runtime.manager import RuntimeManager, RuntimePod
from .runtime.sandbox import check_sysctls
from .sources.merge import PodConfig
from .status.podstatus import ephemeral_ran, generate_pod_status, rejected_status

__all__ = ["PodState", "PodPipeline", "KillRequest"]

log = agent_logging.get_logger("workers")

HOUSEKEEPING_PERIOD = 2.0
RELIST_PERIOD = 1.0
# A relist older than two periods plus this is not trusted as the runtime's state.
RELIST_STALE_SLACK = 1.0
# The QoS tiers are rewritten when the set of pods changes, and at least this often
# (upstream's periodicQOSCgroupUpdateInterval).
QOS_UPDATE_PERIOD = 60.0
LOG_ROTATION_PERIOD = 10.0
RUNTIME_RETRY = 2.0
_FINISHED = ("Succeeded", "Failed")


@dataclasses.dataclass
class KillRequest:
    """Stop a pod that stays known to the node (upstream's killPodFunc): its containers are
    stopped with ``grace``, then ``update_status`` edits its final status."""

    grace: int | None
    reason: str
    update_status: Callable[[dict], None]
    done: asyncio.Future


@dataclasses.dataclass
class PodState:
    pod: dict
    status: dict = dataclasses.field(default_factory=dict)
    rp: RuntimePod | None = None
    # ``rp`` (None: nothing read yet) shows everything the worker did to the pod: false
    # from the moment a sync may act until it has read the runtime afterwards.
    rp_current: bool = True
    rejected: bool = False
    terminating: bool = False
    grace_override: int | None = None
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    retry_at: float | None = None
    syncs: int = 0
    terminal_stopped: bool = False
    kill: KillRequest | None = None  # the node stops the pod (shutdown, eviction)
    killed: bool = False  # stopped by the node: kept with its final status until deleted

    @property
    def uid(self) -> str:
        return podutil.uid(self.pod)


class PodPipeline:
    def __init__(
        self,
        *,
        config: PodConfig,
        runtime: RuntimeManager,
        podmanager: PodManager | None = None,
        probes: Any = None,
        cgroups: Any = None,
        events: EventRecorder | None = None,
        sources: tuple[str, ...] = (),
        sync_frequency: float = 60.0,
        host_ip: str = "",
        rotator: Any = None,
        on_status: Callable[[dict, dict], None] | None = None,
        on_terminated: Callable[[dict], None] | None = None,
        beat: Callable[[], None] = lambda: None,
        tick: float = 1.0,
        keep_terminated_pod_volumes: bool = False,
        devices: Any = None,
    ) -> None:
        self.config = config
        # The device manager: allocates a pod's devices at admission, frees them at its end.
        self.devices = devices
        self.keep_terminated_pod_volumes = keep_terminated_pod_volumes
        self.tick = tick
        self.runtime = runtime
        self.podmanager = podmanager or PodManager()
        self.probes = probes
        self.cgroups = cgroups
        self.events = events or EventRecorder()
        self.sources = sources
        self.sync_frequency = max(1.0, sync_frequency)
        self.host_ip = host_ip
        self.rotator = rotator
        self.on_status = on_status or (lambda pod, status: None)
        self.on_terminated = on_terminated or (lambda pod: None)
        self.beat = beat
        self.pods: dict[str, PodState] = {}
        self._orphans: dict[str, asyncio.Task] = {}
        self._last_relist: dict[str, dict[str, str]] = {}
        self._relist_at = -math.inf  # monotonic time the last successful relist returned
        self._qos_pods: frozenset[str] | None = None  # the pod uids the QoS tiers were last sized for
        self._qos_at = -math.inf
        self.runtime_ready = False
        self.synced_once = asyncio.Event()
        # Further admission handlers (node shutdown, ...): pod -> (reason, message), ("", "") admits.
        self.admit_handlers: list[Callable[[dict], tuple[str, str]]] = []

    # --- views -------------------------------------------------------------------

    def pods_view(self) -> list[dict]:
        """The pods the agent runs (and the ones it refused), with their status."""
        out = []
        for state in self.pods.values():
            pod = dict(state.pod)
            pod["status"] = state.status or {"phase": "Pending"}
            out.append(pod)
        return sorted(out, key=lambda p: (podutil.namespace(p), podutil.name(p)))

    def find(self, namespace: str, name: str) -> PodState | None:
        for state in self.pods.values():
            if podutil.name(state.pod) == name and podutil.namespace(state.pod) == namespace:
                return state
        return None

    def pods_holding_resources(self) -> list[dict]:
        """The pods whose devices stay taken: desired (also those of an update still being
        admitted) or still terminating, neither refused nor finished."""
        out = {podutil.uid(p): p for p in self.podmanager.pods()}
        for uid, state in self.pods.items():
            out.setdefault(uid, state.pod)
        return [
            p
            for uid, p in out.items()
            if not ((s := self.pods.get(uid)) is not None and (s.rejected or s.status.get("phase") in _FINISHED))
        ]

    def has_pod(self, uid: str) -> bool:
        """The pod is the agent's (desired, terminating, or an orphan being removed)."""
        return uid in self.pods or uid in self._orphans

    def active_pods(self) -> list[dict]:
        """The pods that run or may still run here: admitted, not being removed, not finished."""
        return [
            s.pod
            for s in self.pods.values()
            if not s.rejected
            and not s.terminating
            and not s.killed
            and s.kill is None
            and (s.status or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def sources_seen(self) -> bool:
        return self.config.seen_all(self.sources)

    def running_logs(self) -> list[tuple[str, str]]:
        out = []
        for state in self.pods.values():
            if state.rp is None:
                continue
            for c in state.rp.containers:
                if c.running and c.log_path:
                    out.append((c.id, c.log_path))
        return out

    # --- the sync loop ----------------------------------------------------------------

    async def run(self) -> None:
        """The agent's main loop (a supervised task): updates, relist, housekeeping, rotation."""
        updates = asyncio.create_task(self._consume_updates(), name="pod-updates")
        relist = asyncio.create_task(self._relist_loop(), name="pleg")
        try:
            next_housekeeping = 0.0
            next_rotation = time.monotonic() + LOG_ROTATION_PERIOD
            next_trim = time.monotonic() + memory.TRIM_PERIOD
            while True:
                self.beat()
                now = time.monotonic()
                for task in (updates, relist):
                    if task.done():
                        task.result()  # re-raise a crash so the supervisor sees it
                if now >= next_housekeeping:
                    next_housekeeping = now + HOUSEKEEPING_PERIOD
                    await self._housekeeping()
                if self.rotator is not None and now >= next_rotation:
                    next_rotation = now + LOG_ROTATION_PERIOD
                    try:
                        await self.rotator.rotate(self.running_logs())
                    except Exception as exc:  # noqa: BLE001 - rotation must never stop the loop
                        log.error("Log rotation failed", err=exc)
                if now >= next_trim:
                    next_trim = now + memory.TRIM_PERIOD
                    memory.release_free_memory()  # pods came and went: hand their freed pages back
                await asyncio.sleep(self.tick)
        finally:
            updates.cancel()
            relist.cancel()
            await asyncio.gather(updates, relist, return_exceptions=True)
            await self.stop_workers()

    async def stop_workers(self) -> None:
        """Stop the worker tasks (not the pods: an agent restart must not restart containers)."""
        tasks = [s.task for s in self.pods.values() if s.task is not None] + list(self._orphans.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _consume_updates(self) -> None:
        while True:
            update: PodUpdate = await self.config.updates.get()
            self.handle(update)

    def handle(self, update: PodUpdate) -> None:
        self.podmanager.apply(update)
        if update.op == Op.ADD:
            for pod in sorted(update.pods, key=_creation_key):
                self._add(pod)
        elif update.op == Op.UPDATE:
            for pod in update.pods:
                state = self.pods.get(podutil.uid(pod))
                if state is None:
                    self._add(pod)
                elif not state.rejected:
                    state.pod = pod
                    state.wake.set()
        elif update.op in (Op.DELETE, Op.REMOVE):
            for pod in update.pods:
                state = self.pods.get(podutil.uid(pod))
                if state is None:
                    continue
                state.pod = pod if update.op == Op.DELETE else state.pod
                self._terminate(state)
        elif update.op == Op.RECONCILE:
            for pod in update.pods:
                state = self.pods.get(podutil.uid(pod))
                if state is not None and not state.rejected:
                    meta = pod.get("metadata") or {}
                    if meta.get("deletionTimestamp"):
                        state.pod = pod
                        self._terminate(state)

    def _add(self, pod: dict) -> None:
        uid = podutil.uid(pod)
        if uid in self.pods:
            self.pods[uid].pod = pod
            self.pods[uid].wake.set()
            return
        state = PodState(pod)
        self.pods[uid] = state
        previous = pod.get("status") or {}
        if previous.get("phase") in _FINISHED:
            # Terminal in the API (evicted, stopped for a node shutdown, refused, or finished
            # before an agent restart): never started again, whatever its restart policy.
            # Its worker stops what is left of it once and keeps its final status; it needs
            # no admission, as it will hold no resources.
            state.status = dict(previous)
            state.task = asyncio.create_task(self._worker(state), name=f"pod-worker {podutil.full_name(pod)}")
            state.wake.set()
            return
        reason, message = self._admit(pod)
        if reason:
            state.rejected = True
            state.status = rejected_status(pod, reason, message)
            log.warning("Rejected pod", pod=podutil.full_name(pod), reason=reason, message=message)
            self.events(pod, "Warning", reason, message)
            self.on_status(pod, state.status)
            return
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            state.terminating = True
        state.task = asyncio.create_task(self._worker(state), name=f"pod-worker {podutil.full_name(pod)}")
        state.wake.set()

    def _admit(self, pod: dict) -> tuple[str, str]:
        for handler in self.admit_handlers:
            reason, message = handler(pod)
            if reason:
                return reason, message
        try:
            check_sysctls(pod, self.runtime.ctx)
        except PodConfigError as exc:
            return exc.reason, exc.message
        # Upstream's order: the resource allocation handler (devices) before the resource fit.
        # A container manager that allocates devices itself (through the topology manager,
        # aligned with CPUs and memory) does both in that order.
        if self.devices is not None and not getattr(self.cgroups, "allocates_devices", False):
            result = self.devices.admit(pod)
            if not result.admit:
                return result.reason, result.message
        if self.cgroups is not None:
            active = [
                s.pod
                for s in self.pods.values()
                if not s.rejected
                and not s.terminating
                and s.uid != podutil.uid(pod)
                and (s.status or {}).get("phase") not in ("Succeeded", "Failed")
            ]
            result = self.cgroups.admit(pod, active)
            if not result.admit:
                if self.devices is not None:
                    self.devices.free_pod(podutil.uid(pod))
                return result.reason, result.message
        return "", ""

    def _terminate(self, state: PodState, grace: int | None = None) -> None:
        if state.rejected:
            self.pods.pop(state.uid, None)
            self.on_terminated(state.pod)
            return
        state.terminating = True
        if grace is not None:
            state.grace_override = grace
        state.wake.set()

    def kill_pod(
        self, uid: str, *, grace: int | None, update_status: Callable[[dict], None], reason: str
    ) -> asyncio.Future | None:
        """Have the pod's worker stop it and give it its final status (``update_status`` edits
        the status generated after the stop). The future is done when the containers are
        stopped; None when the pod is not one the node runs (gone, refused, being removed)."""
        state = self.pods.get(uid)
        if (
            state is None
            or state.rejected
            or state.terminating
            or state.killed
            or state.task is None
            or (state.kill is None and _terminal(state))
        ):
            return None
        if state.kill is not None:
            return state.kill.done
        state.kill = KillRequest(grace, reason, update_status, asyncio.get_running_loop().create_future())
        state.wake.set()
        return state.kill.done

    # --- workers --------------------------------------------------------------------

    async def _worker(self, state: PodState) -> None:
        name = podutil.full_name(state.pod)
        # Spread periodic resyncs so that 100 pods do not all sync in the same second.
        resync = self.sync_frequency * (1 + random.uniform(-0.1, 0.1))
        try:
            while True:
                timeout = resync
                if state.retry_at is not None:
                    timeout = max(0.0, min(timeout, state.retry_at - time.monotonic()))
                try:
                    async with asyncio.timeout(timeout):
                        await state.wake.wait()
                except asyncio.TimeoutError:
                    pass
                state.wake.clear()
                try:
                    if state.terminating:
                        await self._terminate_pod(state)
                        return
                    if state.kill is not None:
                        await self._kill(state)
                    elif not state.killed:
                        await self._sync(state)
                except UnavailableError as exc:
                    self.runtime_ready = False
                    log.error("Container runtime unavailable", pod=name, err=exc.details)
                    state.retry_at = time.monotonic() + RUNTIME_RETRY
                except CriError as exc:
                    log.error("Error syncing pod, skipping", pod=name, err=exc)
                    state.retry_at = time.monotonic() + RUNTIME_RETRY
                except Exception as exc:  # noqa: BLE001 - a bug in one pod must not stop the others
                    log.error("Error syncing pod, skipping", pod=name, err=repr(exc))
                    state.retry_at = time.monotonic() + 10.0
        except asyncio.CancelledError:
            raise

    async def _sync(self, state: PodState) -> None:
        pod = state.pod
        uid = state.uid
        cached = self._cached_runtime_pod(state)
        if cached is not None:
            rp = cached
        else:
            rp = await self.runtime.runtime_pod(uid)
            self.runtime_ready = True
        result = None
        state.rp_current = False
        if _terminal(state):
            # A finished pod: nothing runs again, whatever its restart policy; stop its sandbox once.
            if not state.terminal_stopped:
                await self.runtime.kill_pod(pod, rp, reason="pod finished")
                state.terminal_stopped = True
                if not self.keep_terminated_pod_volumes:
                    await self._unmount_finished(pod)
                rp = await self.runtime.runtime_pod(uid)
        else:
            # What this agent reported, and (after a restart) what the API server's copy says.
            ran = ephemeral_ran(state.status) | ephemeral_ran(pod.get("status"))
            result = await self.runtime.sync_pod(pod, rp, ephemeral_ran=ran)
            if result.changed:
                rp = await self.runtime.runtime_pod(uid)
        state.rp = rp
        state.rp_current = True
        state.syncs += 1
        sandbox = rp.sandboxes[0] if rp.sandboxes else None
        pod_ip = sandbox.ip if sandbox is not None else ""
        if self.probes is not None:
            refs = {}
            for c in podutil.init_containers(pod) + podutil.containers(pod):
                latest = rp.latest(c.get("name", ""))
                if latest is not None:
                    refs[latest.name] = ContainerRef(latest.id, latest.running, latest.started_at / 1e9)
            self.probes.update_pod(pod, pod_ip, refs)
            ready = lambda name: self.probes.is_ready(uid, name)  # noqa: E731 - one-line choice per branch
            started = lambda name: self.probes.is_started(uid, name)  # noqa: E731 - one-line choice per branch
        else:
            ready = started = lambda name: True  # noqa: E731 - one-line choice per branch
        waiting = dict(result.waiting) if result is not None else {}
        status = generate_pod_status(
            pod,
            rp,
            waiting=waiting,
            ready=ready,
            started=started,
            old=state.status,
            host_ip=self.host_ip,
            pod_error=result.pod_error if result is not None else None,
        )
        if status.get("phase") in _FINISHED and not state.terminal_stopped:
            state.wake.set()  # stop the sandbox on the next round
        if _comparable(status) != _comparable(state.status):
            state.status = status
            self.on_status(pod, status)
        else:
            state.status = status
        state.retry_at = None
        if result is not None and result.retry_in is not None:
            state.retry_at = time.monotonic() + result.retry_in
        if not self.synced_once.is_set():
            self.synced_once.set()

    async def _unmount_finished(self, pod: dict) -> None:
        """A finished pod's volumes go as upstream's volume manager unmounts them
        (``--keep-terminated-pod-volumes`` keeps them until the pod is deleted)."""
        try:
            await self.runtime.volumes.teardown(podutil.uid(pod))
        except OSError as exc:
            log.error("Failed to unmount the volumes of a finished pod", pod=podutil.full_name(pod), err=exc)
        else:
            log.v(2).info("Unmounted the volumes of a finished pod", pod=podutil.full_name(pod))

    async def _kill(self, state: PodState) -> None:
        """Stop the pod for the node (its kill request) and post its final status."""
        req = state.kill
        assert req is not None
        pod, uid = state.pod, state.uid
        rp = await self.runtime.runtime_pod(uid)
        grace = podutil.grace_period_seconds(pod, req.grace)
        state.rp_current = False
        await self.runtime.kill_pod(pod, rp, grace=grace, reason=req.reason)
        if self.probes is not None:
            self.probes.remove_pod(uid)
        rp = await self.runtime.runtime_pod(uid)
        state.rp, state.rp_current = rp, True
        status = generate_pod_status(
            pod, rp, ready=lambda name: False, started=lambda name: False, old=state.status, host_ip=self.host_ip
        )
        req.update_status(status)
        state.status = status
        state.killed = True
        state.terminal_stopped = True
        state.kill = None
        self.on_status(pod, status)
        if not self.keep_terminated_pod_volumes:
            await self._unmount_finished(pod)
        if not req.done.done():
            req.done.set_result(None)

    async def _terminate_pod(self, state: PodState) -> None:
        pod = state.pod
        uid = state.uid
        rp = await self.runtime.runtime_pod(uid)
        grace = podutil.grace_period_seconds(pod, state.grace_override)
        log.info("Terminating pod", pod=podutil.full_name(pod), grace=grace)
        await self.runtime.kill_pod(pod, rp, grace=grace, reason="pod removed")
        if self.probes is not None:
            self.probes.remove_pod(uid)
        rp = await self.runtime.runtime_pod(uid)
        await self.runtime.remove_pod(rp)
        await self.runtime.cleanup_pod_files(uid, podutil.namespace(pod), podutil.name(pod))
        self.pods.pop(uid, None)
        if self.devices is not None:
            self.devices.free_pod(uid)
        if state.kill is not None and not state.kill.done.done():
            state.kill.done.set_result(None)  # stopped by its removal instead
        log.info("Pod terminated", pod=podutil.full_name(pod))
        self.on_terminated(pod)

    def wake(self, uid: str) -> None:
        state = self.pods.get(uid)
        if state is not None:
            state.wake.set()

    # --- relist (PLEG) ------------------------------------------------------------------

    async def _relist_loop(self) -> None:
        while True:
            try:
                snapshot = await self.runtime.relist()
                self.runtime_ready = True
            except CriError as exc:
                if self.runtime_ready:
                    log.error("Runtime relist failed", err=exc.details or exc)
                self.runtime_ready = False
                await asyncio.sleep(RUNTIME_RETRY)
                continue
            last = self._last_relist
            for uid, states in snapshot.items():
                if last.get(uid) != states:
                    self.wake(uid)
            for uid in last.keys() - snapshot.keys():
                self.wake(uid)
            self._last_relist = snapshot
            self._relist_at = time.monotonic()
            await asyncio.sleep(RELIST_PERIOD)

    def _relist_fresh(self) -> bool:
        return self.runtime_ready and time.monotonic() - self._relist_at <= 2 * RELIST_PERIOD + RELIST_STALE_SLACK

    def _cached_runtime_pod(self, state: PodState) -> RuntimePod | None:
        """The pod's runtime view without asking the runtime, when a fresh relist shows the
        very sandboxes and containers (ids and states) the last view was made of; None when
        the runtime must be read. States only move forward and ids are never reused, so
        equal listings mean nothing changed in between."""
        if not state.rp_current or not self._relist_fresh():
            return None
        listed = self._last_relist.get(state.uid) or {}
        rp = state.rp
        if rp is None:
            # Never read yet: a pod the relist does not show has nothing in the runtime (only
            # its own worker creates anything for it); one it shows (adoption) is read.
            return None if listed else RuntimePod(state.uid)
        return rp if listed == _listing(rp) else None

    # --- housekeeping -------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        if not self.config.seen_all(self.sources):
            return
        # The pods present in the runtime are the last relist's: a list of their own every
        # round doubled an idle node's runtime calls. A stale relist (the runtime is down
        # or slow) skips the round, as a failed list did.
        if not self._relist_fresh():
            return
        listed = set(self._last_relist)
        # A source is "seen" as soon as it pushed, before its updates are consumed:
        # pods still queued are not orphans. Wait for the queue to drain, or a restarted
        # agent would kill the very pods it is about to adopt.
        if not self.config.updates.empty():
            return
        for uid in listed:
            if uid in self.pods or uid in self._orphans:
                continue
            # Unknown at that relist, maybe terminated since: read it now, and only what is
            # still there, for a pod still unknown once read, is an orphan.
            try:
                rp = await self.runtime.runtime_pod(uid)
            except CriError:
                return
            if rp.empty or uid in self.pods or uid in self._orphans or not self.config.updates.empty():
                continue
            self._orphans[uid] = asyncio.create_task(self._remove_orphan(rp), name=f"orphan {uid}")
        busy = set(self.pods) | set(self._orphans) | listed
        if self.cgroups is not None:
            pods = [s.pod for s in self.pods.values() if not s.rejected]
            uids = frozenset(s.uid for s in self.pods.values() if not s.rejected)
            now = time.monotonic()
            qos_due = (
                uids != self._qos_pods
                or now - self._qos_at >= QOS_UPDATE_PERIOD
                or bool(getattr(self.cgroups, "enforcement_error", ""))
            )
            try:
                # One trip to a thread for the whole round.
                await asyncio.to_thread(self._cgroup_housekeeping, busy, pods if qos_due else None)
                if qos_due:
                    self._qos_pods, self._qos_at = uids, now
            except Exception as exc:  # noqa: BLE001 - housekeeping is retried next round; the sync loop goes on
                log.error("cgroup housekeeping failed", err=exc)
        try:
            for uid in self.runtime.volumes.orphaned_pod_uids(busy):
                log.info("Removing the directory of a pod that is gone", uid=uid)
                await self.runtime.volumes.teardown(uid)
                await self.runtime.volumes.remove_pod_dir(uid)
        except Exception as exc:  # noqa: BLE001 - housekeeping is retried next round; the sync loop goes on
            log.error("Volume housekeeping failed", err=exc)
        self.runtime.backoff.gc()

    def _cgroup_housekeeping(self, busy: set[str], pods: list[dict] | None) -> None:
        """In a thread: remove the cgroups of pods that are gone, and resize the QoS tiers
        for ``pods`` (None: they are sized for these pods already)."""
        for uid in self.cgroups.pod_uids():
            if uid not in busy:
                log.info("Removing the cgroup of a pod that is gone", uid=uid)
                self.cgroups.remove_pod(uid)
        if pods is not None:
            self.cgroups.update_qos(pods)

    async def _remove_orphan(self, rp: RuntimePod) -> None:
        try:
            log.info("Stopping a pod the agent no longer has", pod=f"{rp.name}_{rp.namespace}", uid=rp.uid)
            await self.runtime.kill_pod(None, rp, reason="orphaned")
            rp = await self.runtime.runtime_pod(rp.uid)
            await self.runtime.remove_pod(rp)
        except CriError as exc:
            log.error("Failed to remove an orphaned pod", uid=rp.uid, err=exc)
        finally:
            self._orphans.pop(rp.uid, None)


def _terminal(state: PodState) -> bool:
    """Upstream's rule: a pod whose phase is terminal, in the agent's own status or in the
    API's, never runs again."""
    own, api = state.status or {}, state.pod.get("status") or {}
    return own.get("phase") in _FINISHED or api.get("phase") in _FINISHED


def _creation_key(pod: dict) -> tuple:
    meta = pod.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", podutil.full_name(pod))


def _listing(rp: RuntimePod) -> dict[str, str]:
    """A runtime view as the relist shows it: sandbox and container ids with their states."""
    out = {s.id: "ready" if s.ready else "notready" for s in rp.sandboxes}
    for c in rp.containers:
        out[c.id] = c.state
    return out


def _comparable(status: dict | None) -> Any:
    """The status without heartbeat-like fields, to decide whether it changed."""
    if not status:
        return None
    return {k: v for k, v in status.items() if k != "startTime"}


def default_host_ip(node_ip: str = "") -> str:
    """``--node-ip`` or the address of the interface holding the default route."""
    if node_ip:
        return node_ip.split(",")[0].strip()

    for family, target in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(target)  # no packet is sent: this only picks the route
                return s.getsockname()[0]
        except OSError:
            continue
    return "127.0.0.1"
