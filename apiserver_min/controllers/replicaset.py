"""The ReplicaSet controller, which also serves ReplicationControllers (their selector
is a plain label map): it keeps ``spec.replicas`` pods matching each set's selector.

A sync claims the set's pods (adopting orphans that match, releasing those that no
longer do), then, when its expectations are met (every create and delete of the last
sync seen in the pod informer), creates the missing pods in slow-start batches or
deletes the surplus, least valuable first, at most ``BURST_REPLICAS`` a sync; and
writes ``status`` through the status sub-resource: replicas, fully labeled, ready and
available (ready for ``minReadySeconds``) pods, the observed generation, and the
``ReplicaFailure`` condition while creates or deletes fail.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from ..api import status as st
from ..api.helpers import dict_at, list_at
from ..api.kinds import KindInfo
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..api.timeutil import format_rfc3339
from ..api.timeutil import now as utc_now
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent, Entry
from . import podcontrol as pc
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.replicaset")

Key = tuple[str, str]  # (namespace, name)

REPLICA_FAILURE = "ReplicaFailure"


def set_selector(obj: Mapping, kind: KindInfo) -> LabelSelector:
    """The set's pod selector; one that cannot be read selects nothing."""
    sel = dict_at(obj, "spec").get("selector")
    if kind.group == "":  # a ReplicationController: a label map
        if not isinstance(sel, dict) or not sel:
            return LabelSelector.nothing()
        return LabelSelector.from_set({str(k): str(v) for k, v in sel.items()})
    if not isinstance(sel, dict):
        return LabelSelector.nothing()
    try:
        selector = label_selector_from_dict(sel)
    except SelectorError:
        return LabelSelector.nothing()
    return LabelSelector.nothing() if selector.empty else selector


def desired_replicas(obj: Mapping) -> int:
    value = dict_at(obj, "spec").get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def condition(ctype: str, status: str, reason: str, message: str) -> dict:
    ts = format_rfc3339(utc_now())
    return {"type": ctype, "status": status, "lastTransitionTime": ts, "reason": reason, "message": message}


def set_condition(conditions: list[dict], cond: dict) -> list[dict]:
    """``cond`` in place of the one of its type; an existing one with the same status
    and reason stays as it is."""
    for c in conditions:
        if c.get("type") == cond["type"] and c.get("status") == cond["status"] and c.get("reason") == cond["reason"]:
            return conditions
    return [c for c in conditions if c.get("type") != cond["type"]] + [cond]


def calculate_status(
    obj: Mapping,
    pods: list[dict],
    manage_error: st.ApiError | None,
    diff: int,
    now: float,
    ready_since: Callable[[dict], float | None] = pc.ready_since,
) -> dict[str, Any]:
    """The set's status from the pods it controls (upstream calculateStatus);
    ``ready_since`` reads when a pod turned ready (a controller passes a memo)."""
    spec = dict_at(obj, "spec")
    template_labels = dict_at(dict_at(spec.get("template") or {}, "metadata"), "labels").items()
    min_ready = spec.get("minReadySeconds") or 0
    fully_labeled = ready = available = 0
    for p in pods:
        if template_labels <= dict_at(dict_at(p, "metadata"), "labels").items():
            fully_labeled += 1
        since = ready_since(p)
        if since is not None:
            ready += 1
            if min_ready <= 0 or since + min_ready <= now:
                available += 1
    status: dict[str, Any] = {"replicas": len(pods)}
    for key, value in (
        ("fullyLabeledReplicas", fully_labeled),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("observedGeneration", int(dict_at(obj, "metadata").get("generation") or 0)),
    ):
        if value:
            status[key] = value
    conditions = [c for c in list_at(dict_at(obj, "status"), "conditions") if isinstance(c, dict)]
    if manage_error is not None and diff != 0:
        reason = "FailedCreate" if diff < 0 else "FailedDelete"
        conditions = set_condition(conditions, condition(REPLICA_FAILURE, "True", reason, manage_error.message))
    elif manage_error is None:
        conditions = [c for c in conditions if c.get("type") != REPLICA_FAILURE]
    if conditions:
        status["conditions"] = conditions
    return status


class ReplicaSetController:
    """Pods for the sets of ``kind`` (ReplicaSets, or ReplicationControllers)."""

    def __init__(self, client: Client, informers: InformerFactory, kind: KindInfo, component: str):
        self.client = client
        self.kind = kind
        self.pod_kind = informers.kind("", "v1", "pods")
        self.sets = informers.for_kind(kind)
        self.pods = informers.for_kind(self.pod_kind)
        self.events = EventRecorder(client, informers.registry, component)
        self.expectations = pc.Expectations()
        self.queue = RateLimitedQueue()
        self.component = component
        # id of a pod's shared view -> (the view, when it turned ready); holding the view
        # keeps its id from being reused while the memo names it.
        self._ready_memo: dict[int, tuple[dict, float | None]] = {}

    def ready_since(self, pod: dict) -> float | None:
        """When ``pod`` turned ready, read once per version (shared view) of it."""
        found = self._ready_memo.get(id(pod))
        if found is not None and found[0] is pod:
            return found[1]
        if len(self._ready_memo) > 2 * len(self.pods) + 1024:
            self._ready_memo.clear()
        since = pc.ready_since(pod)
        self._ready_memo[id(pod)] = (pod, since)
        return since

    def start(self) -> None:
        self.sets.add_handler(self.on_set)
        self.pods.add_handler(self.on_pod)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, self.kind.kind)

    # --- events ------------------------------------------------------------------------

    def on_set(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.sets.list():
                self.queue.add((e.namespace, e.name))
            return
        self.queue.add((ev.entry.namespace, ev.entry.name))

    def _owner_of(self, pod: Mapping) -> Entry | None:
        """The set of ours that controls ``pod``, as the informer holds it."""
        ref = pc.controller_of(pod)
        if ref is None or ref.get("kind") != self.kind.kind or ref.get("apiVersion") != pc.api_version_of(self.kind):
            return None
        entry = self.sets.get(str(dict_at(pod, "metadata").get("namespace", "")), str(ref.get("name", "")))
        return entry if entry is not None and entry.uid == ref.get("uid") else None

    def _matching_sets(self, namespace: str, labels: Mapping[str, str]) -> list[Entry]:
        out = []
        for e in self.sets.list(namespace):
            if set_selector(e.view(), self.kind).matches(labels):
                out.append(e)
        return out

    def _pod_deleted(self, pod: Mapping) -> None:
        owner = self._owner_of(pod)
        if owner is not None:
            self.expectations.deletion_observed(f"{owner.namespace}/{owner.name}", pc.pod_key(pod))
            self.queue.add((owner.namespace, owner.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.sets.list():
                self.queue.add((e.namespace, e.name))
            return
        e = ev.entry
        if ev.type == "ADDED" and not e.owners and not e.deleting:
            # A new pod with no owner (the cache entry tells, no decoding): only an
            # adoption by a set selecting its labels can concern us.
            for s in self._matching_sets(e.namespace, e.labels):
                self.queue.add((s.namespace, s.name))
            return
        pod = e.view()
        if ev.type == "DELETED":
            self._pod_deleted(pod)
            return
        old = ev.prev.view() if ev.type == "MODIFIED" and ev.prev is not None else None
        if ev.entry.deleting:
            # A pod being deleted counts as deleted: its replacement need not wait.
            self._pod_deleted(pod)
            if old is not None and old["metadata"].get("labels") != pod["metadata"].get("labels"):
                self._pod_deleted(old)
            return
        owner = self._owner_of(pod)
        if old is not None:
            old_ref, new_ref = pc.controller_of(old), pc.controller_of(pod)
            if old_ref is not None and old_ref != new_ref:
                prev_owner = self._owner_of(old)
                if prev_owner is not None:
                    self.queue.add((prev_owner.namespace, prev_owner.name))
        elif owner is not None:
            self.expectations.creation_observed(f"{owner.namespace}/{owner.name}")
        if owner is not None:
            self.queue.add((owner.namespace, owner.name))
            if old is not None and not pc.is_ready(old) and pc.is_ready(pod):
                min_ready = dict_at(owner.object(), "spec").get("minReadySeconds") or 0
                if isinstance(min_ready, int) and min_ready > 0:
                    self.queue.add_after((owner.namespace, owner.name), min_ready + 0.05)
            return
        if pc.controller_of(pod) is not None:
            return
        # An orphan: whichever set selects it may adopt it.
        labels_changed = old is None or old["metadata"].get("labels") != pod["metadata"].get("labels")
        if labels_changed or pc.controller_of(old or {}) is not None:
            for e in self._matching_sets(ev.entry.namespace, ev.entry.labels):
                self.queue.add((e.namespace, e.name))

    # --- sync --------------------------------------------------------------------------

    async def sync(self, key: Key) -> None:
        ns, name = key
        ekey = f"{ns}/{name}"
        entry = self.sets.get(ns, name)
        if entry is None:
            self.expectations.forget(ekey)
            return
        obj = entry.object()
        satisfied = self.expectations.satisfied(ekey)
        selector = set_selector(obj, self.kind)
        # Only the pods naming the set as an owner and the orphans its selector matches,
        # each decoded once per version (shared, read-only views); those it controls
        # that still match need no claim.
        owned: list[dict] = []
        candidates: list[dict] = []
        for pe in self.pods.claimable(ns, entry.uid, selector):
            if pe.deleting or pe.fields.get("status.phase") in (pc.SUCCEEDED, pc.FAILED):
                continue
            if pe.controller == entry.uid and selector.matches(pe.labels):
                owned.append(pe.view())
            else:
                candidates.append(pe.view())

        async def fresh() -> dict | None:
            try:
                return await self.client.get(self.kind, ns, name)
            except st.ApiError as exc:
                if exc.code == 404:
                    return None
                raise

        claimed = await pc.claim(self.client, self.pod_kind, obj, self.kind, selector, candidates, owner_fresh=fresh)
        pods = sorted(owned + claimed.pods, key=pc.pod_key) if claimed.pods else owned
        diff = len(pods) - desired_replicas(obj)
        manage_error: st.ApiError | None = None
        if satisfied and not dict_at(obj, "metadata").get("deletionTimestamp"):
            manage_error = await self.manage_replicas(obj, ekey, pods, diff)
        now = time.time()
        status = calculate_status(obj, pods, manage_error, diff, now, self.ready_since)
        await self.write_status(obj, status)
        if manage_error is not None:
            raise manage_error
        if claimed.errors:
            raise claimed.errors[0]
        delay = pc.ready_to_available_delay(pods, int(dict_at(obj, "spec").get("minReadySeconds") or 0), now)
        if delay is not None:
            self.queue.add_after(key, delay + 0.05)

    async def write_status(self, obj: dict, status: dict) -> None:
        if dict_at(obj, "status") == status:
            return
        md = dict_at(obj, "metadata")
        uid = md.get("uid")

        def put(current: dict) -> dict:
            if dict_at(current, "metadata").get("uid") != uid:
                raise st.ApiError(409, "Conflict", "the object was replaced")
            current["status"] = status
            return current

        try:
            await self.client.update(self.kind, md["namespace"], md["name"], put, subresource="status")
        except st.ApiError as exc:
            if exc.code != 404:
                raise

    async def manage_replicas(self, obj: dict, ekey: str, pods: list[dict], diff: int) -> st.ApiError | None:
        """Create or delete pods to close ``diff``; the first failure, if any."""
        md = dict_at(obj, "metadata")
        ns = str(md.get("namespace", ""))
        ref = pc.object_reference(obj, self.kind)
        if diff < 0:
            n = min(-diff, pc.BURST_REPLICAS)
            self.expectations.expect_creations(ekey, n)
            template = dict_at(dict_at(obj, "spec"), "template")

            async def create_one() -> None:
                pod = pc.pod_from_template(template, obj, self.kind)
                pod["metadata"]["namespace"] = ns
                try:
                    created = await self.client.create(self.pod_kind, ns, pod)
                except st.ApiError as exc:
                    await self.events.record(ref, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                    raise
                await self.events.record(
                    ref, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
                )

            successes, err = await pc.slow_start_batch(n, pc.SLOW_START_INITIAL_BATCH, create_one)
            for _ in range(n - successes):
                self.expectations.creation_observed(ekey)  # never to be seen
            if err is None:
                return None
            if isinstance(err, st.ApiError):
                return err
            raise err
        if diff > 0:
            n = min(diff, pc.BURST_REPLICAS)
            victims = pc.deletion_order(pods, self.related_pods(obj, pods))[:n]
            self.expectations.expect_deletions(ekey, [pc.pod_key(p) for p in victims])
            results = await asyncio.gather(*(self._delete_pod(ekey, ref, p) for p in victims))
            return next((r for r in results if r is not None), None)
        return None

    async def _delete_pod(self, ekey: str, ref: dict, pod: dict) -> st.ApiError | None:
        pmd = pod["metadata"]
        try:
            await self.client.delete(self.pod_kind, pmd["namespace"], pmd["name"])
        except st.ApiError as exc:
            self.expectations.deletion_observed(ekey, pc.pod_key(pod))
            if exc.code == 404:
                return None
            await self.events.record(ref, "Warning", "FailedDelete", f"Error deleting: {exc.message}")
            return exc
        await self.events.record(ref, "Normal", "SuccessfulDelete", f"Deleted pod: {pmd['name']}")
        return None

    def related_pods(self, obj: dict, pods: list[dict]) -> list[dict]:
        """The active pods of every set controlled by this set's controller (a Deployment's
        ReplicaSets), which rank victims by how crowded their node is."""
        owner = pc.controller_of(obj)
        if owner is None:
            return pods
        ns = str(dict_at(obj, "metadata").get("namespace", ""))
        siblings = [e.uid for e in self.sets.claimable(ns, str(owner.get("uid", "")), LabelSelector.nothing())]
        related: dict[str, dict] = {}
        for uid in siblings:
            for pe in self.pods.claimable(ns, uid, LabelSelector.nothing()):
                if not pe.deleting and pe.key not in related:
                    pod = pe.view()
                    if pc.is_active(pod):
                        related[pe.key] = pod
        return list(related.values()) or pods
