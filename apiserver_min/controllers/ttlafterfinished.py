"""The TTL-after-finished controller: deletes a finished Job ``ttlSecondsAfterFinished``
seconds after it finished (the ``lastTransitionTime`` of its ``Complete`` or ``Failed``
condition), its pods with it, as upstream's (v1.27) does.

A Job not yet expired is queued again for the moment it expires; just before deleting,
the Job is read again from the API (the TTL may have been changed or removed), and it
is deleted only if it is still the same object (a uid precondition), with foreground
propagation as upstream: the Job goes once its pods are gone.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at, get_condition
from ..api.timeutil import parse_rfc3339
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.ttlafterfinished")


def finish_time(job: Mapping) -> float | None:
    """When the job finished (epoch seconds), None while it has not."""
    for ctype in ("Complete", "Failed"):
        cond = get_condition(job, ctype)
        if cond is not None and cond.get("status") == "True":
            ts = cond.get("lastTransitionTime")
            if not isinstance(ts, str) or not ts:
                return None
            try:
                return parse_rfc3339(ts).timestamp()
            except ValueError:
                return None
    return None


def time_left(job: Mapping, now: float) -> float | None:
    """Seconds until the job expires (<= 0: expired); None when it never does (no TTL,
    not finished, being deleted)."""
    ttl = dict_at(job, "spec").get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or dict_at(job, "metadata").get("deletionTimestamp"):
        return None
    finished = finish_time(job)
    if finished is None:
        return None
    return finished + ttl - now


class TTLAfterFinishedController:
    def __init__(self, client: Client, informers: InformerFactory, *, clock: Callable[[], float] = time.time):
        self.client = client
        self.job_kind = informers.kind(names.BATCH_GROUP, "v1", "jobs")
        self.jobs = informers.for_kind(self.job_kind)
        self.clock = clock
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.jobs.add_handler(self.on_job)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "ttl-after-finished")

    def on_job(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.jobs.list():
                self.queue.add(e.key)
        elif ev.type != "DELETED" and not ev.entry.deleting:
            self.queue.add(ev.entry.key)

    async def sync(self, key: str) -> None:
        entry = self.jobs.get_by_key(key)
        if entry is None:
            return
        left = time_left(entry.object(), self.clock())
        if left is None:
            return
        if left > 0:
            self.queue.add_after(key, left)
            return
        # The informer may lag: ask the API for the job as it is now.
        try:
            fresh = await self.client.get(self.job_kind, entry.namespace, entry.name)
        except st.ApiError as exc:
            if exc.code == 404:
                return
            raise
        left = time_left(fresh, self.clock())
        if left is None:
            return
        if left > 0:
            self.queue.add_after(key, left)
            return
        uid = str(dict_at(fresh, "metadata").get("uid", ""))
        log.info("job %s/%s: deleting (finished, TTL expired)", entry.namespace, entry.name)
        try:
            await self.client.delete(
                self.job_kind,
                entry.namespace,
                entry.name,
                DeleteOptions(propagation_policy="Foreground", preconditions_uid=uid),
            )
        except st.ApiError as exc:
            if exc.code in (404, 409):
                return
            raise
