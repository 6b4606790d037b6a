"""The disruption controller: keeps every PodDisruptionBudget's status true.

For a budget it counts the pods its selector picks in its namespace:

* ``expectedPods``: those pods (an integer ``minAvailable``), or the replicas their
  controllers ask for (``maxUnavailable`` or a percentage: a ReplicationController,
  a ReplicaSet or the Deployment that controls it, a StatefulSet, or any kind with a
  ``scale`` sub-resource); a pod without a controller makes such a budget fail safe;
* ``desiredHealthy``: ``minAvailable`` (a percentage of the expected pods rounded
  up), or the expected pods less ``maxUnavailable`` (a percentage rounded up);
* ``currentHealthy``: ready pods not being deleted and not just evicted;
* ``disruptionsAllowed``: how far the healthy pods exceed the desired.

Evictions (``registry/eviction.py``) charge a budget by listing the pod in
``status.disruptedPods``; a listed pod counts as unhealthy until it is gone, or for
two minutes at most (then the entry is dropped: the deletion did not happen). A
budget the controller cannot work out allows no disruption (condition
``DisruptionAllowed`` False with reason ``SyncFailed``).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at
from ..api.selectors import LabelSelector
from ..api.timeutil import format_rfc3339, parse_rfc3339
from ..api.timeutil import now as utc_now
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..registry.eviction import budget_selector, set_budget_condition
from ..storage.cacher import CacheEvent, Entry
from .podcontrol import controller_of, is_ready
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers")

# An eviction not followed by the pod's deletion within this time is forgotten.
DELETION_TIMEOUT = 120.0


class BudgetError(Exception):
    """Why a budget's expected pods cannot be worked out (an event's reason and message)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def scaled_value(value: int | str, total: int, round_up: bool = True) -> int:
    """An integer, or a percentage of ``total`` rounded up (or down)."""
    if isinstance(value, int):
        return value
    pct = int(str(value).rstrip("%"))
    exact = pct * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def _replicas(obj: Mapping) -> int:
    value = dict_at(obj, "spec").get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


class DisruptionController:
    def __init__(self, client: Client, informers: InformerFactory, clock=time.time):
        self.client = client
        self.informers = informers
        self.clock = clock
        self.kind = informers.kind(names.POLICY_GROUP, "v1", "poddisruptionbudgets")
        self.budgets = informers.for_kind(self.kind)
        self.pods = informers.for_resource("", "v1", "pods")
        self.events = EventRecorder(client, informers.registry, "controllermanager")
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.budgets.add_handler(self.on_budget)
        self.pods.add_handler(self.on_pod)
        for group, resource in (
            ("", "replicationcontrollers"),
            ("apps", "replicasets"),
            ("apps", "deployments"),
            ("apps", "statefulsets"),
        ):
            self.informers.for_resource(group, "v1", resource).add_handler(self.on_controller)

    # --- events ------------------------------------------------------------------------
    def on_budget(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.budgets.list():
                self.queue.add((e.namespace, e.name))
        elif ev.type != "DELETED":
            self.queue.add((ev.entry.namespace, ev.entry.name))

    def _budgets_of(self, namespace: str, labels: Mapping[str, str]) -> None:
        for e in self.budgets.list(namespace):
            if budget_selector(e.object()).matches(labels):
                self.queue.add((e.namespace, e.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return  # the budgets' replay covers every pod
        self._budgets_of(ev.entry.namespace, ev.entry.labels)
        if ev.prev is not None and ev.prev.labels != ev.entry.labels:
            self._budgets_of(ev.prev.namespace, ev.prev.labels)

    def on_controller(self, ev: CacheEvent | None) -> None:
        if ev is None or ev.prev is None or ev.type == "DELETED":
            if ev is not None:
                for e in self.budgets.list(ev.entry.namespace):
                    self.queue.add((e.namespace, e.name))
            return
        # Only a change of the desired scale moves a budget.
        if _replicas(ev.entry.object()) != _replicas(ev.prev.object()):
            for e in self.budgets.list(ev.entry.namespace):
                self.queue.add((e.namespace, e.name))

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "disruption budget")

    # --- counting ----------------------------------------------------------------------
    def _selected_pods(self, namespace: str, selector: LabelSelector) -> list[dict]:
        return [e.object() for e in self.pods.list(namespace) if selector.matches(e.labels)]

    def _owner(self, group_version: str, kind: str, namespace: str, name: str, uid: str) -> Entry | None:
        found = self.informers.registry.by_api_version_kind(group_version, kind)
        if found is None or found.subresource("scale") is None:
            return None
        e = self.informers.for_kind(found).get(namespace, name)
        return e if e is not None and e.uid == uid else None

    def expected_scale(self, pods: list[dict], namespace: str) -> int:
        """The replicas the pods' controllers ask for, each controller counted once."""
        scales: dict[str, int] = {}
        for pod in pods:
            ref = controller_of(pod)
            pod_name = dict_at(pod, "metadata").get("name", "")
            if ref is None:
                raise BudgetError("NoControllerRef", f'found no controller ref for pod "{pod_name}"')
            uid = str(ref.get("uid", ""))
            if uid in scales:
                continue
            owner = self._owner(
                str(ref.get("apiVersion", "")), str(ref.get("kind", "")), namespace, str(ref.get("name", "")), uid
            )
            if owner is None:
                raise BudgetError("NoControllers", f'found no controllers for pod "{pod_name}"')
            obj = owner.object()
            # A ReplicaSet a Deployment controls scales with the Deployment.
            parent = controller_of(obj) if ref.get("kind") == "ReplicaSet" else None
            if parent is not None and parent.get("kind") == "Deployment":
                dep = self._owner(
                    str(parent.get("apiVersion", "")),
                    "Deployment",
                    namespace,
                    str(parent.get("name", "")),
                    str(parent.get("uid", "")),
                )
                if dep is not None:
                    scales[dep.uid] = _replicas(dep.object())
                    scales[uid] = 0
                    continue
            scales[uid] = _replicas(obj)
        return sum(scales.values())

    def expected_and_desired(self, pdb: dict, pods: list[dict], namespace: str) -> tuple[int, int]:
        spec = dict_at(pdb, "spec")
        max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_unavailable is not None:
            expected = self.expected_scale(pods, namespace)
            return expected, max(0, expected - scaled_value(max_unavailable, expected))
        if isinstance(min_available, int) and not isinstance(min_available, bool):
            return len(pods), min_available
        if isinstance(min_available, str):
            expected = self.expected_scale(pods, namespace)
            return expected, scaled_value(min_available, expected)
        return len(pods), 0

    # --- sync --------------------------------------------------------------------------
    async def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        entry = self.budgets.get(namespace, name)
        if entry is None:
            return
        pdb = entry.object()
        pods = self._selected_pods(namespace, budget_selector(pdb))
        now = self.clock()
        now_text = format_rfc3339(utc_now())
        status = dict_at(pdb, "status")
        generation = int(dict_at(pdb, "metadata").get("generation") or 1)
        try:
            expected, desired = self.expected_and_desired(pdb, pods, namespace)
        except BudgetError as exc:
            await self.events.record(_ref(pdb), "Warning", exc.reason, str(exc))
            failed = {
                "disruptionsAllowed": 0,
                "currentHealthy": int(status.get("currentHealthy") or 0),
                "desiredHealthy": int(status.get("desiredHealthy") or 0),
                "expectedPods": int(status.get("expectedPods") or 0),
                "observedGeneration": generation,
            }
            set_budget_condition(failed, False, "SyncFailed", str(exc), now_text)
            await self._write(pdb, failed)
            return
        # The evicted pods still present: unhealthy until gone, for two minutes at most.
        present = {dict_at(p, "metadata").get("name"): p for p in pods}
        disrupted: dict[str, str] = {}
        recheck: float | None = None
        raw = status.get("disruptedPods")
        for pod_name, ts in raw.items() if isinstance(raw, dict) else ():
            pod = present.get(pod_name)
            if pod is None or dict_at(pod, "metadata").get("deletionTimestamp"):
                continue
            try:
                at = parse_rfc3339(ts).timestamp()
            except (TypeError, ValueError):
                continue
            expires = at + DELETION_TIMEOUT
            if expires <= now:
                log.warning(
                    "pod %s/%s was expected to be deleted at %s but it was not; budget %s counts it again",
                    namespace,
                    pod_name,
                    ts,
                    name,
                )
                continue
            disrupted[pod_name] = ts
            recheck = expires if recheck is None else min(recheck, expires)
        healthy = sum(
            1
            for p in pods
            if not dict_at(p, "metadata").get("deletionTimestamp")
            and dict_at(p, "metadata").get("name") not in disrupted
            and is_ready(p)
        )
        allowed = max(0, healthy - desired)
        new: dict = {
            "observedGeneration": generation,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
        }
        if disrupted:
            new["disruptedPods"] = disrupted
        new["conditions"] = status.get("conditions") or []
        if allowed > 0:
            set_budget_condition(new, True, "SufficientPods", "", now_text)
        else:
            set_budget_condition(new, False, "InsufficientPods", "", now_text)
        await self._write(pdb, new)
        if recheck is not None:
            self.queue.add_after(key, max(0.0, recheck - now) + 0.1)

    async def _write(self, pdb: dict, new_status: dict) -> None:
        if new_status == pdb.get("status"):
            return
        md = dict_at(pdb, "metadata")
        body = dict(pdb)
        body["status"] = new_status
        try:
            await self.client.update(self.kind, md.get("namespace", ""), md.get("name", ""), body, subresource="status")
        except st.ApiError as exc:
            if exc.code == 404:
                return
            raise  # a conflict: the queue syncs again on the newer budget


def _ref(pdb: Mapping) -> dict:
    md = dict_at(pdb, "metadata")
    return {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "namespace": md.get("namespace", ""),
        "name": md.get("name", ""),
        "uid": md.get("uid", ""),
    }
