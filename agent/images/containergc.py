"""Container garbage collection: dead containers, dead sandboxes and logs of pods that are gone.

The policy is upstream's (``--minimum-container-ttl-duration``,
``--maximum-dead-containers-per-container``, ``--maximum-dead-containers``); one
pass runs every :data:`CONTAINER_GC_PERIOD`:

* a container that is not running and was created at least the minimum TTL ago
  is evictable; evictable containers are grouped by (pod uid, container name);
* once every pod source has been seen, evictable containers of pods the agent no
  longer has are all removed;
* in each group, the oldest beyond ``--maximum-dead-containers-per-container``
  are removed (negative: no per-container limit);
* with ``--maximum-dead-containers`` of 0 or more and more evictable containers
  than that, each group is cut to an even share (at least one), then the oldest
  on the whole node go until the total fits;
* a sandbox is active while it is ready or still has containers; of each pod's
  sandboxes the newest is kept and the inactive others removed; all inactive
  sandboxes of pods that are gone are removed;
* the log directories (``/var/log/pods/<ns>_<name>_<uid>``) of pods that are gone
  and have nothing left in the runtime are removed.

Only what the agent created (its CRI labels) is ever looked at.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import time
from typing import Callable

from apiserver_min.api import names
from cri import api_pb2 as pb
from cri.client import CriError, NotFoundError

from .. import logging as agent_logging

__all__ = ["CONTAINER_GC_PERIOD", "ContainerGCPolicy", "ContainerGC", "GCResult"]

log = agent_logging.get_logger("containergc")

CONTAINER_GC_PERIOD = 60.0  # upstream's ContainerGCPeriod (1 minute); no config field

EventSink = Callable[[dict | None, str, str, str], None]


@dataclasses.dataclass(frozen=True)
class ContainerGCPolicy:
    min_age: float = 0.0  # seconds a dead container is kept at least
    max_per_pod_container: int = 1  # dead instances kept per (pod, container); negative: no limit
    max_containers: int = -1  # dead containers kept on the node; negative: no limit


@dataclasses.dataclass
class GCResult:
    containers: list[str] = dataclasses.field(default_factory=list)  # removed container IDs
    sandboxes: list[str] = dataclasses.field(default_factory=list)  # removed sandbox IDs
    log_dirs: list[str] = dataclasses.field(default_factory=list)  # removed directories


@dataclasses.dataclass(frozen=True)
class _Dead:
    id: str
    uid: str
    name: str
    created_at: int  # ns


class ContainerGC:
    """One pass at a time over the runtime's state (see the module docstring).

    ``pod_known(uid)`` says whether the agent still has the pod; ``sources_ready()``
    whether every pod source has been seen (before that, no pod counts as gone);
    ``forget(container_id)`` lets the runtime manager drop what it cached of a removed
    container.
    """

    def __init__(
        self,
        cri,
        policy: ContainerGCPolicy,
        *,
        pod_known: Callable[[str], bool],
        sources_ready: Callable[[], bool],
        pod_logs_dir: str = "",
        forget: Callable[[str], None] = lambda cid: None,
        events: EventSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cri = cri
        self.policy = policy
        self.pod_known = pod_known
        self.sources_ready = sources_ready
        self.pod_logs_dir = pod_logs_dir
        self.forget = forget
        self.events: EventSink = events or (lambda pod, type_, reason, message: None)
        self.clock = clock

    def _gone(self, uid: str, ready: bool) -> bool:
        return ready and not self.pod_known(uid)

    async def garbage_collect(self) -> GCResult:
        result = GCResult()
        selector = {names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE}
        sandboxes, containers = await asyncio.gather(
            self.cri.list_pod_sandbox(label_selector=selector), self.cri.list_containers(label_selector=selector)
        )
        ready = self.sources_ready()
        await self._evict_containers(containers, ready, result)
        remaining = [c for c in containers if c.id not in set(result.containers)]
        await self._evict_sandboxes(sandboxes, remaining, ready, result)
        if ready and self.pod_logs_dir:
            busy = {s.labels.get(names.CRI_LABEL_POD_UID, "") for s in sandboxes if s.id not in set(result.sandboxes)}
            busy |= {c.labels.get(names.CRI_LABEL_POD_UID, "") for c in remaining}
            result.log_dirs = await asyncio.to_thread(self._evict_log_dirs, busy)
        return result

    # -- containers ----------------------------------------------------------------------

    async def _evict_containers(self, containers: list[pb.Container], ready: bool, result: GCResult) -> None:
        newest = (self.clock() - self.policy.min_age) * 1e9
        units: dict[tuple[str, str], list[_Dead]] = {}
        for c in containers:
            if c.state == pb.CONTAINER_RUNNING or c.created_at > newest:
                continue
            uid = c.labels.get(names.CRI_LABEL_POD_UID, "")
            name = c.labels.get(names.CRI_LABEL_CONTAINER_NAME, "") or c.metadata.name
            units.setdefault((uid, name), []).append(_Dead(c.id, uid, name, c.created_at))
        for unit in units.values():
            unit.sort(key=lambda d: d.created_at, reverse=True)  # newest first
        # Pods that are gone: every dead container goes.
        for key in list(units):
            if self._gone(key[0], ready):
                await self._remove_oldest(units[key], len(units[key]), result)
                del units[key]
        if self.policy.max_per_pod_container >= 0:
            await self._enforce_per_unit(units, self.policy.max_per_pod_container, result)
        limit = self.policy.max_containers
        if limit >= 0 and sum(len(u) for u in units.values()) > limit:
            share = max(1, limit // max(1, len(units)))
            await self._enforce_per_unit(units, share, result)
            left = sorted((d for u in units.values() for d in u), key=lambda d: d.created_at, reverse=True)
            if len(left) > limit:
                await self._remove_oldest(left, len(left) - limit, result)

    async def _enforce_per_unit(self, units: dict[tuple[str, str], list[_Dead]], keep: int, result: GCResult) -> None:
        for key, unit in units.items():
            extra = len(unit) - keep
            if extra > 0:
                await self._remove_oldest(unit, extra, result)
                units[key] = unit[: len(unit) - extra]

    async def _remove_oldest(self, unit: list[_Dead], count: int, result: GCResult) -> None:
        """Remove the ``count`` oldest of ``unit`` (sorted newest first)."""
        for dead in unit[len(unit) - count :]:
            log.v(4).info("Removing container", container_id=dead.id, pod_uid=dead.uid, container=dead.name)
            try:
                await self.cri.remove_container(dead.id)
            except NotFoundError:
                pass
            except CriError as exc:
                log.error("Failed to remove container", container_id=dead.id, err=exc.details or exc)
                continue
            self.forget(dead.id)
            result.containers.append(dead.id)

    # -- sandboxes -------------------------------------------------------------------------

    async def _evict_sandboxes(
        self, sandboxes: list[pb.PodSandbox], containers: list[pb.Container], ready: bool, result: GCResult
    ) -> None:
        with_containers = {c.pod_sandbox_id for c in containers}
        by_pod: dict[str, list[pb.PodSandbox]] = {}
        for s in sandboxes:
            by_pod.setdefault(s.labels.get(names.CRI_LABEL_POD_UID, "") or s.metadata.uid, []).append(s)
        for uid, group in by_pod.items():
            group.sort(key=lambda s: s.created_at, reverse=True)
            candidates = group if self._gone(uid, ready) else group[1:]
            for s in candidates:
                if s.state == pb.SANDBOX_READY or s.id in with_containers:
                    continue
                log.v(4).info("Removing sandbox", sandbox_id=s.id, pod_uid=uid)
                try:
                    await self.cri.stop_pod_sandbox(s.id)
                    await self.cri.remove_pod_sandbox(s.id)
                except NotFoundError:
                    pass
                except CriError as exc:
                    log.error("Failed to remove sandbox", sandbox_id=s.id, err=exc.details or exc)
                    continue
                result.sandboxes.append(s.id)

    # -- logs ------------------------------------------------------------------------------

    def _evict_log_dirs(self, busy: set[str]) -> list[str]:
        try:
            entries = os.listdir(self.pod_logs_dir)
        except FileNotFoundError:
            return []
        removed = []
        for entry in entries:
            uid = entry.rsplit("_", 1)[-1]
            if "_" not in entry or uid in busy or self.pod_known(uid):
                continue
            path = os.path.join(self.pod_logs_dir, entry)
            if not os.path.isdir(path):
                continue
            try:
                shutil.rmtree(path)
            except OSError as exc:
                log.error("Failed to remove pod logs directory", path=path, err=exc)
                continue
            log.v(4).info("Removed the log directory of a pod that is gone", path=path)
            removed.append(path)
        return removed

    # -- the task ------------------------------------------------------------------------

    async def run(self, period: float = CONTAINER_GC_PERIOD) -> None:
        failed_before = False
        while True:
            try:
                result = await self.garbage_collect()
            except CriError as exc:
                message = exc.details or str(exc)
                log.error("Container garbage collection failed", err=message)
                self.events(None, "Warning", "ContainerGCFailed", message)
                failed_before = True
            else:
                log.v(1 if failed_before else 4).info(
                    "Container garbage collection succeeded",
                    containers=len(result.containers),
                    sandboxes=len(result.sandboxes),
                    log_dirs=len(result.log_dirs),
                )
                failed_before = False
            await asyncio.sleep(period)
