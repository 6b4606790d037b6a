"""The probe manager: one worker per (pod, container, probe type), results that
drive restarts (liveness, startup) and readiness, as upstream's prober manager.

The pod worker calls :meth:`ProbeManager.update_pod` after every sync with what
it knows of the pod's containers (:class:`ContainerRef`); the manager starts a
worker for each probe of a container that has an ID and runs, and tells every
worker about restarts. Workers run on the loop and call ``on_change(pod_uid)``
when the pod's worker must act: a liveness or startup failure (restart the
container), a readiness change, a startup success. The pod worker then asks
:meth:`is_started`, :meth:`is_ready` and :meth:`liveness_failure`.

A worker, as upstream's:

* holds an initial result per container ID: readiness Failure, liveness
  Success, startup Unknown; a new container ID resets it and the counters;
* waits ``initialDelaySeconds`` after the container started, then probes every
  ``periodSeconds`` (the first probe after a random part of a period when the
  agent has just started onto a container that was already running, so a
  restarted agent does not fire all probes at once);
* does not run liveness and readiness before the startup probe succeeded, and
  stops running the startup probe after it did;
* flips the result only after ``successThreshold`` consecutive successes or
  ``failureThreshold`` consecutive failures; probes that could not be run at
  all ("errored", Result.UNKNOWN) are retried up to 3 times and then ignored;
* after a liveness/startup Failure keeps Failure for that container ID and
  stops probing until a new container ID shows up;
* sets readiness Failure while the container is not running, and ends when
  the container exited in a pod that never restarts, or (liveness, startup)
  when the pod is being deleted, setting Success for a quiet shutdown.

While a started container is not ready, every update_pod triggers an extra
readiness probe (upstream does so on every status update) so readiness
follows quickly after a sync.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable

import aiohttp

from agent import logging as agent_logging
from agent import pods as podutil
from agent.prober.probes import (
    REDIRECT_WARNING,
    Result,
    format_pod,
    new_http_session,
    probe_user_agent,
    run_probe,
)
from cri.client import CriClient

__all__ = ["ProbeManager", "ContainerRef", "ProbeFailure", "PROBE_TYPES"]

log = agent_logging.get_logger("prober")

LIVENESS = "liveness"
READINESS = "readiness"
STARTUP = "startup"
PROBE_TYPES = (LIVENESS, READINESS, STARTUP)
_SPEC_FIELD = {LIVENESS: "livenessProbe", READINESS: "readinessProbe", STARTUP: "startupProbe"}
_DISPLAY = {LIVENESS: "Liveness", READINESS: "Readiness", STARTUP: "Startup"}
_INITIAL = {LIVENESS: Result.SUCCESS, READINESS: Result.FAILURE, STARTUP: Result.UNKNOWN}
# Upstream runs an errored probe up to this many times before giving up on the tick.
MAX_PROBE_RETRIES = 3

EVENT_WARNING = "Warning"
REASON_UNHEALTHY = "Unhealthy"
REASON_PROBE_WARNING = "ProbeWarning"

EventSink = Callable[[dict, str, str, str, str], None]


@dataclasses.dataclass(frozen=True)
class ContainerRef:
    """What the pod worker knows about a container after a sync."""

    container_id: str
    running: bool
    started_at: float  # epoch seconds (0 if unknown)


@dataclasses.dataclass(frozen=True)
class ProbeFailure:
    """A liveness or startup probe failed for a container: restart it."""

    probe: str  # "Liveness" | "Startup"
    message: str
    termination_grace_seconds: int | None  # the probe-level terminationGracePeriodSeconds


@dataclasses.dataclass(frozen=True)
class _Timing:
    initial_delay: int
    period: int
    timeout: int
    success_threshold: int
    failure_threshold: int
    termination_grace: int | None


def _probe_timing(spec: dict, where: str) -> _Timing:
    """The probe's numbers with upstream's defaults. The API validated them; a
    value that is still wrong is logged (naming the field) and replaced by the
    default rather than stopping the pod's other probes."""

    def field(name: str, default: int, minimum: int) -> int:
        value = spec.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            log.error(
                "Invalid probe field, using the default",
                field=f"{where}.{name}",
                value=value,
                default=default,
                reason=f"must be an integer >= {minimum}",
            )
            return default
        return value

    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace < 0):
        log.error(
            "Invalid probe field, ignoring it",
            field=f"{where}.terminationGracePeriodSeconds",
            value=grace,
            reason="must be a non-negative integer",
        )
        grace = None
    return _Timing(
        initial_delay=field("initialDelaySeconds", 0, 0),
        period=field("periodSeconds", 10, 1),
        timeout=field("timeoutSeconds", 1, 1),
        success_threshold=field("successThreshold", 1, 1),
        failure_threshold=field("failureThreshold", 3, 1),
        termination_grace=grace,
    )


class _PodEntry:
    __slots__ = ("uid", "pod", "pod_ip", "containers", "workers")

    def __init__(self, uid: str):
        self.uid = uid
        self.pod: dict = {}
        self.pod_ip = ""
        self.containers: dict[str, ContainerRef] = {}
        self.workers: dict[tuple[str, str], _Worker] = {}

    def container_spec(self, name: str) -> dict:
        for container in podutil.containers(self.pod):
            if container.get("name") == name:
                return container
        return {"name": name}


class _Worker:
    """Probes one container of one pod for one probe type (see the module doc)."""

    def __init__(self, manager: "ProbeManager", entry: _PodEntry, container_name: str, probe_type: str, spec: dict):
        self.manager = manager
        self.entry = entry
        self.container_name = container_name
        self.probe_type = probe_type
        self.spec = spec
        self.timing = _probe_timing(spec, f"spec.containers[{container_name}].{_SPEC_FIELD[probe_type]}")
        self.ref: ContainerRef | None = None
        self.container_id = ""
        self.result: Result = _INITIAL[probe_type]
        self.message = ""  # of the latest probe run
        self.failure_message = ""  # of the probe that set Failure
        self.on_hold = False
        self.last_result: Result | None = None
        self.run_length = 0
        self.seen_at = 0.0
        self.done = False
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None

    # -- called from update_pod (synchronously) ----------------------------------

    def observe(self, ref: ContainerRef | None) -> None:
        previous, self.ref = self.ref, ref
        if ref is None or not ref.container_id:
            return
        if ref.container_id != self.container_id:
            # A new container: fresh result and counters, probing resumes.
            self.container_id = ref.container_id
            self.result = _INITIAL[self.probe_type]
            self.message = self.failure_message = ""
            self.on_hold = False
            self.last_result = None
            self.run_length = 0
            self.seen_at = time.time()
        if not ref.running and self.probe_type == READINESS:
            self.result = Result.FAILURE
        if ref != previous:
            self.wake.set()

    def start(self) -> None:
        pod = self.entry.pod
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"probe-{self.probe_type}-{podutil.full_name(pod)}-{self.container_name}"
        )

    def stop(self) -> None:
        self.done = True
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def trigger(self) -> None:
        self.wake.set()

    # -- the loop ---------------------------------------------------------------------

    def _scaled(self, seconds: float) -> float:
        return seconds * self.manager.time_scale

    async def _sleep(self, delay: float) -> None:
        """Wait delay seconds, or less when woken (restart, trigger, startup success)."""
        if delay <= 0:
            await asyncio.sleep(0)
            return
        try:
            async with asyncio.timeout(delay):
                await self.wake.wait()
        except TimeoutError:
            pass

    async def _run(self) -> None:
        try:
            jitter = self.manager._first_probe_jitter(self)
            if jitter > 0:
                await asyncio.sleep(jitter)  # not cut short by the first observe()
            while True:
                self.wake.clear()  # whatever woke us is seen by this step
                try:
                    delay = await self._step()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # keep probing, as upstream recovers from panics
                    log.error(
                        "Probe worker step failed",
                        err=exc,
                        probeType=self.probe_type,
                        pod=format_pod(self.entry.pod),
                        containerName=self.container_name,
                    )
                    delay = self._scaled(self.timing.period)
                if delay is None:
                    break
                await self._sleep(delay)
        finally:
            self.done = True

    async def _step(self) -> float | None:
        """One upstream doProbe: seconds to wait before the next, or None to end."""
        period = self._scaled(self.timing.period)
        ref = self.ref
        if ref is None or not ref.container_id or self.on_hold:
            return period  # no container yet, or waiting for a new one after a failure
        pod = self.entry.pod
        if not ref.running:
            log.v(3).info(
                "Non-running container probed",
                pod=format_pod(pod),
                containerName=self.container_name,
                probeType=self.probe_type,
            )
            if podutil.restart_policy(pod) == "Never":
                return None  # it will not be restarted
            return period
        if (pod.get("metadata") or {}).get("deletionTimestamp") and self.probe_type in (LIVENESS, STARTUP):
            log.v(3).info(
                "Pod deletion requested, setting probe result to success",
                probeType=self.probe_type,
                pod=format_pod(pod),
                containerName=self.container_name,
            )
            self.result = Result.SUCCESS
            return None
        started_at = ref.started_at or self.seen_at
        remaining = self._scaled(self.timing.initial_delay) - (time.time() - started_at)
        if remaining > 0:
            return remaining
        started = self.manager.is_started(self.entry.uid, self.container_name)
        if (self.probe_type == STARTUP) == started:
            # A started container needs no startup probe (the worker stays for the
            # next container); the others wait for the startup probe.
            return period

        loop = asyncio.get_running_loop()
        began = loop.time()
        result, message = await self._probe(ref)
        if self.ref is None or self.ref.container_id != ref.container_id or self.done:
            return 0.0  # the container changed while probing: the result is not its
        self._record(result, message)
        return max(0.0, period - (loop.time() - began))

    async def _probe(self, ref: ContainerRef) -> tuple[Result, str]:
        manager = self.manager
        session = manager._http_session() if self.spec.get("httpGet") is not None else None
        result, message = Result.UNKNOWN, ""
        for _ in range(MAX_PROBE_RETRIES):
            result, message = await run_probe(
                manager.cri,
                self.spec,
                self.entry.pod,
                self.entry.container_spec(self.container_name),
                ref.container_id,
                self.entry.pod_ip,
                user_agent=manager.user_agent,
                timeout=self._scaled(self.timing.timeout),
                session=session,
            )
            if result is not Result.UNKNOWN:
                break
        return result, message

    def _record(self, result: Result, message: str) -> None:
        display = _DISPLAY[self.probe_type]
        pod = self.entry.pod
        self.message = message
        fields = dict(probeType=display, pod=format_pod(pod), podUID=self.entry.uid, containerName=self.container_name)
        if result is Result.UNKNOWN:
            log.v(1).info("Probe errored", err=message, **fields)
            self.manager._event(pod, self.container_name, REASON_UNHEALTHY, f"{display} probe errored: {message}")
            return  # upstream throws the result away
        if result is Result.FAILURE:
            log.v(1).info("Probe failed", probeResult=result.value, output=message, **fields)
            self.manager._event(pod, self.container_name, REASON_UNHEALTHY, f"{display} probe failed: {message}")
        elif message.startswith(REDIRECT_WARNING):
            log.v(3).info("Probe succeeded with a warning", output=message, **fields)
            self.manager._event(pod, self.container_name, REASON_PROBE_WARNING, f"{display} probe warning: {message}")
        else:
            log.v(3).info("Probe succeeded", **fields)

        if result is self.last_result:
            self.run_length += 1
        else:
            self.last_result = result
            self.run_length = 1
        if (result is Result.FAILURE and self.run_length < self.timing.failure_threshold) or (
            result is Result.SUCCESS and self.run_length < self.timing.success_threshold
        ):
            return  # below the threshold: the result stands

        changed = result is not self.result
        self.result = result
        if result is Result.FAILURE:
            self.failure_message = message
        if self.probe_type in (LIVENESS, STARTUP) and result is Result.FAILURE:
            # The container will be restarted: stop probing it until a new one shows up.
            self.on_hold = True
            self.run_length = 0
        if not changed:
            return
        if self.probe_type == STARTUP and result is Result.SUCCESS:
            self.manager._wake_container(self.entry, self.container_name)
        if self.probe_type != LIVENESS or result is Result.FAILURE:
            self.manager._notify(self.entry.uid)


class ProbeManager:
    """Probe workers of all pods on this node, and their results.

    on_event, when given, receives every probe event upstream records:
    ``(pod, container_name, "Warning", reason, message)`` with reason
    ``Unhealthy`` ("Liveness probe failed: ...", "... probe errored: ...") or
    ``ProbeWarning``.

    time_scale is a test hook: every duration taken from a probe (initial
    delay, period, timeout, the first-probe jitter) is multiplied by it so
    tests can run probes every few milliseconds; leave it at 1 otherwise.
    """

    def __init__(
        self,
        cri: CriClient,
        on_change: Callable[[str], None],
        *,
        user_agent_version: str = "1.27",
        on_event: EventSink | None = None,
        time_scale: float = 1.0,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.cri = cri
        self.on_change = on_change
        self.on_event = on_event
        self.user_agent = probe_user_agent(user_agent_version)
        self.time_scale = float(time_scale)
        self._pods: dict[str, _PodEntry] = {}
        self._retired: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None
        self._started_wall = time.time()
        self._started_mono = time.monotonic()
        self._closed = False

    # -- what the pod worker calls ------------------------------------------------------

    def update_pod(self, pod: dict, pod_ip: str, containers: dict[str, ContainerRef]) -> None:
        """Record the pod's latest spec, IP and containers; start workers for
        running containers with probes, tell workers about restarts, stop
        workers whose probe left the spec."""
        if self._closed:
            raise RuntimeError("ProbeManager is closed")
        uid = podutil.uid(pod)
        if not uid:
            raise ValueError(f"pod {podutil.full_name(pod)}: metadata.uid is empty")
        entry = self._pods.get(uid)
        if entry is None:
            entry = self._pods[uid] = _PodEntry(uid)
        entry.pod = pod
        entry.pod_ip = pod_ip or ""
        entry.containers = dict(containers)

        wanted: dict[tuple[str, str], dict] = {}
        for container in podutil.containers(pod):
            for probe_type in PROBE_TYPES:
                spec = container.get(_SPEC_FIELD[probe_type])
                if isinstance(spec, dict):
                    wanted[(container.get("name") or "", probe_type)] = spec
        for key, worker in list(entry.workers.items()):
            if key not in wanted:
                worker.stop()
                self._retire(worker)
                del entry.workers[key]

        for (name, probe_type), spec in wanted.items():
            ref = containers.get(name)
            worker = entry.workers.get((name, probe_type))
            if worker is None:
                if ref is None or not ref.container_id or not ref.running:
                    continue
                worker = entry.workers[(name, probe_type)] = _Worker(self, entry, name, probe_type, spec)
                worker.observe(ref)
                worker.start()
            else:
                worker.observe(ref)

        # A started container that is not ready yet: probe readiness now rather
        # than at the next tick (upstream triggers it on every status update).
        for (name, probe_type), worker in entry.workers.items():
            if probe_type != READINESS or worker.done:
                continue
            ref = containers.get(name)
            if ref is not None and ref.running and worker.result is not Result.SUCCESS and self.is_started(uid, name):
                worker.trigger()

    def remove_pod(self, pod_uid: str) -> None:
        """Stop the pod's workers and forget its results."""
        entry = self._pods.pop(pod_uid, None)
        if entry is None:
            return
        for worker in entry.workers.values():
            worker.stop()
            self._retire(worker)

    def is_started(self, pod_uid: str, container_name: str) -> bool:
        ref = self._running_ref(pod_uid, container_name)
        if ref is None:
            return False
        worker = self._pods[pod_uid].workers.get((container_name, STARTUP))
        if worker is None:
            return True
        return worker.container_id == ref.container_id and worker.result is Result.SUCCESS

    def is_ready(self, pod_uid: str, container_name: str) -> bool:
        if not self.is_started(pod_uid, container_name):
            return False
        ref = self._pods[pod_uid].containers[container_name]
        worker = self._pods[pod_uid].workers.get((container_name, READINESS))
        if worker is None:
            return True
        return worker.container_id == ref.container_id and worker.result is Result.SUCCESS

    def liveness_failure(self, pod_uid: str, container_name: str, container_id: str) -> ProbeFailure | None:
        entry = self._pods.get(pod_uid)
        if entry is None or not container_id:
            return None
        for probe_type in (STARTUP, LIVENESS):
            worker = entry.workers.get((container_name, probe_type))
            if worker is not None and worker.container_id == container_id and worker.result is Result.FAILURE:
                return ProbeFailure(_DISPLAY[probe_type], worker.failure_message, worker.timing.termination_grace)
        return None

    def last_message(self, pod_uid: str, container_name: str, probe: str) -> str:
        """The message of the latest run of that probe ("liveness", "Readiness", ...);
        empty when it has not run."""
        entry = self._pods.get(pod_uid)
        if entry is None:
            return ""
        worker = entry.workers.get((container_name, probe.lower()))
        return worker.message if worker is not None else ""

    async def close(self) -> None:
        """Stop every worker and wait for them; close the HTTP session."""
        self._closed = True
        for uid in list(self._pods):
            self.remove_pod(uid)
        tasks = [task for task in self._retired if not task.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._retired.clear()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # -- internals ------------------------------------------------------------------------

    def _running_ref(self, pod_uid: str, container_name: str) -> ContainerRef | None:
        entry = self._pods.get(pod_uid)
        if entry is None:
            return None
        ref = entry.containers.get(container_name)
        if ref is None or not ref.container_id or not ref.running:
            return None
        return ref

    def _retire(self, worker: _Worker) -> None:
        if worker.task is not None and not worker.task.done():
            self._retired.add(worker.task)
            worker.task.add_done_callback(self._retired.discard)

    def _http_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_http_session()
        return self._session

    def _first_probe_jitter(self, worker: _Worker) -> float:
        """Upstream spreads the first probes over a period only right after the
        agent started; here only for containers that were already running then."""
        period = worker._scaled(worker.timing.period)
        ref = worker.ref
        if ref is None or not ref.started_at or ref.started_at >= self._started_wall:
            return 0.0
        if time.monotonic() - self._started_mono >= period:
            return 0.0
        return random.random() * period

    def _wake_container(self, entry: _PodEntry, container_name: str) -> None:
        for (name, _), worker in entry.workers.items():
            if name == container_name:
                worker.trigger()

    def _notify(self, pod_uid: str) -> None:
        try:
            self.on_change(pod_uid)
        except Exception as exc:  # the callback's failure must not stop probing
            log.error("Probe result callback failed", err=exc, podUID=pod_uid)

    def _event(self, pod: dict, container_name: str, reason: str, message: str) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(pod, container_name, EVENT_WARNING, reason, message)
        except Exception as exc:
            log.error("Probe event callback failed", err=exc, pod=format_pod(pod))
