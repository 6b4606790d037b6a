"""The node lifecycle controller: node heartbeats, condition taints, NoExecute evictions.

Heartbeats. A node shows it is alive by renewing its Lease in ``orch-node-lease``
or by a new ``lastHeartbeatTime`` on its Ready condition. As upstream, the
controller notes *when it saw* either change on its own clock (so clock skew
between machines does not matter) and, every ``--node-monitor-period``, marks
the Ready, MemoryPressure, DiskPressure and PIDPressure conditions of a node
silent for longer than ``--node-monitor-grace-period`` ``Unknown`` (reason
``NodeStatusUnknown``; missing ones ``NodeStatusNeverUpdated``). A node that never
posted a Ready condition gets ``--node-startup-grace-period`` from its creation.
The agent sets Ready back when it returns; the controller never does.

Taints. From the conditions (upstream's TaintNodesByCondition and taint-based
eviction): Ready False gives ``node.orch.io/not-ready`` and Ready Unknown
``node.orch.io/unreachable``, each as NoSchedule and NoExecute; memory, disk and
PID pressure and an unavailable network give their NoSchedule taints;
``spec.unschedulable`` gives ``node.orch.io/unschedulable:NoSchedule``. Those
taints are kept exactly in step with the conditions (added and removed); other
taints are left alone. Upstream's rate limits and zone disruption modes (which
stop evictions when a whole zone is down) are not done.

Evictions (upstream's taint manager). A pod bound to a node with NoExecute taints
is deleted at once when some taint has no matching toleration, else after the
smallest ``tolerationSeconds`` of the tolerations used, counted from when the
controller first saw the pod on the tainted node; a toleration without seconds
keeps the pod for good. Mirror pods are never evicted. Before the delete the pod
gets the ``DisruptionTarget`` condition, as upstream does.

When a node's Ready condition leaves True, the Ready condition of its pods turns
False (upstream's MarkPodsNotReady), with NodeNotReady events.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from typing import Any, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import (
    get_condition,
    is_mirror_pod,
    object_reference,
    set_pod_condition,
    taints_of,
    tolerates,
    tolerations_of,
)
from ..api.timeutil import format_rfc3339, parse_rfc3339, parse_rfc3339_ns
from ..api.timeutil import now as utc_now
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent
from .queue import KeyQueue

log = logging.getLogger("orch-apiserver.nodelifecycle")

NODE_MONITOR_PERIOD = 5.0
NODE_MONITOR_GRACE_PERIOD = 40.0
NODE_STARTUP_GRACE_PERIOD = 60.0
RETRY_DELAY = 1.0

REASON_STATUS_UNKNOWN = "NodeStatusUnknown"
REASON_NEVER_UPDATED = "NodeStatusNeverUpdated"
MESSAGE_STATUS_UNKNOWN = "Node agent stopped posting node status."
MESSAGE_NEVER_UPDATED = "Node agent never posted node status."
MONITORED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")

# condition type -> {condition status: taint key}, all NoSchedule.
CONDITION_TAINTS: Mapping[str, Mapping[str, str]] = {
    "Ready": {"False": names.TAINT_NOT_READY, "Unknown": names.TAINT_UNREACHABLE},
    "MemoryPressure": {"True": names.TAINT_MEMORY_PRESSURE},
    "DiskPressure": {"True": names.TAINT_DISK_PRESSURE},
    "PIDPressure": {"True": names.TAINT_PID_PRESSURE},
    "NetworkUnavailable": {"True": names.TAINT_NETWORK_UNAVAILABLE},
}
NO_SCHEDULE_KEYS = frozenset({k for m in CONDITION_TAINTS.values() for k in m.values()} | {names.TAINT_UNSCHEDULABLE})
NO_EXECUTE_KEYS = frozenset({names.TAINT_NOT_READY, names.TAINT_UNREACHABLE})

DISRUPTION_CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByTaintManager",
    "message": "Taint manager: deleting due to NoExecute taint",
}


# --- pure rules --------------------------------------------------------------------------


def mark_unknown(node: dict, now_ts: str) -> bool:
    """Set the monitored conditions Unknown in place, as upstream does for a silent
    node; True when anything changed."""
    conds = node.setdefault("status", {}).setdefault("conditions", [])
    if not isinstance(conds, list):
        conds = node["status"]["conditions"] = []
    changed = False
    for ctype in MONITORED_CONDITIONS:
        c = next((c for c in conds if isinstance(c, dict) and c.get("type") == ctype), None)
        if c is None:
            conds.append(
                {
                    "type": ctype,
                    "status": "Unknown",
                    "reason": REASON_NEVER_UPDATED,
                    "message": MESSAGE_NEVER_UPDATED,
                    "lastHeartbeatTime": (node.get("metadata") or {}).get("creationTimestamp"),
                    "lastTransitionTime": now_ts,
                }
            )
            changed = True
        elif c.get("status") != "Unknown":
            c.update(
                status="Unknown",
                reason=REASON_STATUS_UNKNOWN,
                message=MESSAGE_STATUS_UNKNOWN,
                lastTransitionTime=now_ts,
            )
            changed = True
    return changed


def wanted_taint_keys(node: Mapping) -> tuple[set[str], set[str]]:
    """(NoSchedule keys, NoExecute keys) the node's conditions and spec call for."""
    no_schedule: set[str] = set()
    for ctype, by_status in CONDITION_TAINTS.items():
        c = get_condition(node, ctype)
        if c is not None and c.get("status") in by_status:
            no_schedule.add(by_status[c["status"]])
    if (node.get("spec") or {}).get("unschedulable"):
        no_schedule.add(names.TAINT_UNSCHEDULABLE)
    ready = get_condition(node, "Ready")
    no_execute = (
        {CONDITION_TAINTS["Ready"][ready["status"]]} if ready and ready.get("status") in ("False", "Unknown") else set()
    )
    return no_schedule, no_execute


def reconcile_taints(node: Mapping, now_ts: str) -> list[dict] | None:
    """The node's taints with the controller-managed ones brought in line with its
    conditions (others untouched, kept ones keep their timeAdded); None when they
    already are."""
    current = taints_of(node)
    no_schedule, no_execute = wanted_taint_keys(node)
    out: list[dict] = []
    have: set[tuple[str, str]] = set()
    for t in current:
        key, effect = t.get("key"), t.get("effect")
        if effect == "NoSchedule" and key in NO_SCHEDULE_KEYS and key not in no_schedule:
            continue
        if effect == "NoExecute" and key in NO_EXECUTE_KEYS and key not in no_execute:
            continue
        out.append(t)
        have.add((key, effect))
    for key in sorted(no_schedule):
        if (key, "NoSchedule") not in have:
            out.append({"key": key, "effect": "NoSchedule"})
    for key in sorted(no_execute):
        if (key, "NoExecute") not in have:
            out.append({"key": key, "effect": "NoExecute", "timeAdded": now_ts})
    return None if out == current else out


def no_execute_taints(node: Mapping) -> tuple[tuple[str, str], ...]:
    return tuple((t.get("key") or "", t.get("value") or "") for t in taints_of(node) if t.get("effect") == "NoExecute")


def eviction_delay(taints: list[Mapping], tolerations: list[Mapping]) -> float | None:
    """Seconds until a pod on a node with these NoExecute taints is evicted: 0 when a
    taint is not tolerated (or a used toleration has tolerationSeconds <= 0), the
    smallest tolerationSeconds of the tolerations used, None for never."""
    if not taints:
        return None
    used = []
    for taint in taints:
        match = next((t for t in tolerations if tolerates(t, taint)), None)
        if match is None:
            return 0.0
        used.append(match)
    least: int | None = None
    for t in used:
        s = t.get("tolerationSeconds")
        if isinstance(s, int) and not isinstance(s, bool):
            if s <= 0:
                return 0.0
            least = s if least is None else min(least, s)
    return None if least is None else float(least)


# --- the controller ------------------------------------------------------------------------


@dataclasses.dataclass
class NodeHealth:
    probe: float  # monotonic time of the last sign of life seen
    heartbeat: Any  # the Ready condition's lastHeartbeatTime last seen


@dataclasses.dataclass
class ScheduledEviction:
    created: float  # monotonic: when the pod was first seen on the tainted node
    trigger: float
    handle: asyncio.TimerHandle | None = None


class NodeLifecycleController:
    """Runs as the node-controller's service account; the taint manager's events are
    recorded as the ``taint-controller`` component through the same client."""

    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        *,
        monitor_period: float = NODE_MONITOR_PERIOD,
        grace_period: float = NODE_MONITOR_GRACE_PERIOD,
        startup_grace_period: float = NODE_STARTUP_GRACE_PERIOD,
    ):
        self.client = client
        self.monitor_period = monitor_period
        self.grace_period = grace_period
        self.startup_grace_period = startup_grace_period
        self.nodes_kind = informers.kind("", "v1", "nodes")
        self.pods_kind = informers.kind("", "v1", "pods")
        self.nodes = informers.for_kind(self.nodes_kind)
        self.pods = informers.for_kind(self.pods_kind)
        self.leases = informers.for_resource(names.COORDINATION_GROUP, "v1", "leases")
        self.pod_prefix = self.pods.prefix
        self.health: dict[str, NodeHealth] = {}
        self.lease_renew: dict[str, int] = {}  # node -> renewTime (ns) last seen
        self.pods_on_node: dict[str, set[str]] = {}
        self.pod_node: dict[str, str] = {}
        self.noexecute: dict[str, tuple[tuple[str, str], ...]] = {}
        self.evictions: dict[str, ScheduledEviction] = {}
        self.queue = KeyQueue()
        self.node_events = EventRecorder(client, informers.registry, "node-controller")
        self.taint_events = EventRecorder(client, informers.registry, "taint-controller")
        self._background: set[asyncio.Task] = set()

    # --- informer events ------------------------------------------------------------
    def start(self) -> None:
        """Subscribe; the node informer's replay rebuilds everything (leases, nodes, pods)."""
        self.leases.add_handler(self.on_lease)
        self.pods.add_handler(self.on_pod)
        self.nodes.add_handler(self.on_node)

    def on_node(self, ev: CacheEvent | None) -> None:
        if ev is None:
            self._rebuild()
        else:
            self._node_event(ev)

    def on_lease(self, ev: CacheEvent | None) -> None:
        if ev is not None and ev.entry.namespace == names.NS_NODE_LEASE:
            self._lease_event(ev)

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is not None:
            self._pod_event(ev)

    def _rebuild(self) -> None:
        for e in self.leases.list(names.NS_NODE_LEASE):
            self._lease_event(CacheEvent("ADDED", e.rv, e, None, 0.0))
        names_now = set()
        for e in self.nodes.list():
            names_now.add(e.name)
            node = e.object()
            self._observe_node(e.name, node)
            self.noexecute[e.name] = no_execute_taints(node)
            self.queue.add(("taints", e.name))
        for gone in set(self.health) - names_now:
            self.health.pop(gone, None)
            self.noexecute.pop(gone, None)
        self.pods_on_node.clear()
        self.pod_node.clear()
        for e in self.pods.list():
            pod_node = e.fields.get("spec.nodeName") or ""
            if pod_node:
                self._index_pod(e.key, pod_node)
        for key in list(self.evictions):
            if key not in self.pod_node:
                self._cancel(key, announce=False)
        for node_name, keys in self.pods_on_node.items():
            if self.noexecute.get(node_name):
                for key in list(keys):
                    self._process_pod(key, node_name)

    def _observe_node(self, name: str, node: Mapping) -> None:
        ready = get_condition(node, "Ready")
        heartbeat = ready.get("lastHeartbeatTime") if ready else None
        h = self.health.get(name)
        mono = time.monotonic()
        if h is None:
            probe = mono
            if ready is None:
                # Never posted: the startup grace runs from the node's creation.
                try:
                    created = parse_rfc3339((node.get("metadata") or {}).get("creationTimestamp") or "")
                    probe = mono - max(0.0, (utc_now() - created).total_seconds())
                except (ValueError, TypeError):
                    pass
            h = self.health[name] = NodeHealth(probe, heartbeat)
            if name in self.lease_renew:
                h.probe = mono
        elif ready is not None and heartbeat != h.heartbeat:
            h.probe, h.heartbeat = mono, heartbeat

    def _lease_event(self, ev: CacheEvent) -> None:
        name = ev.entry.name
        if ev.type == "DELETED":
            self.lease_renew.pop(name, None)
            return
        renew = (ev.entry.object().get("spec") or {}).get("renewTime")
        try:
            renew_ns = parse_rfc3339_ns(renew) if renew else None
        except (ValueError, TypeError):
            renew_ns = None
        if renew_ns is None or renew_ns <= self.lease_renew.get(name, -1):
            return
        self.lease_renew[name] = renew_ns
        h = self.health.get(name)
        if h is not None:
            h.probe = time.monotonic()

    def _node_event(self, ev: CacheEvent) -> None:
        name = ev.entry.name
        if ev.type == "DELETED":
            self.health.pop(name, None)
            self.noexecute.pop(name, None)
            for key in list(self.pods_on_node.get(name, ())):
                self._cancel(key, announce=False)
            return
        node = ev.entry.object()
        prev = ev.prev.object() if ev.prev is not None else None
        self._observe_node(name, node)
        if prev is None or wanted_taint_keys(prev) != wanted_taint_keys(node) or taints_of(prev) != taints_of(node):
            self.queue.add(("taints", name))
        was = (get_condition(prev, "Ready") or {}).get("status") if prev is not None else None
        now_ready = (get_condition(node, "Ready") or {}).get("status")
        if was == "True" and now_ready != "True":
            self.queue.add(("not-ready", name))
        taints = no_execute_taints(node)
        if self.noexecute.get(name) != taints:
            self.noexecute[name] = taints
            for key in list(self.pods_on_node.get(name, ())):
                if taints:
                    self._process_pod(key, name)
                else:
                    self._cancel(key, announce=True)

    def _index_pod(self, key: str, node: str) -> None:
        self.pod_node[key] = node
        self.pods_on_node.setdefault(node, set()).add(key)

    def _unindex_pod(self, key: str) -> None:
        node = self.pod_node.pop(key, None)
        if node is not None:
            keys = self.pods_on_node.get(node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.pods_on_node[node]

    def _pod_event(self, ev: CacheEvent) -> None:
        key = ev.entry.key
        if ev.type == "DELETED":
            self._unindex_pod(key)
            self._cancel(key, announce=False)
            return
        node = ev.entry.fields.get("spec.nodeName") or ""
        if self.pod_node.get(key) != node:
            self._unindex_pod(key)
            if node:
                self._index_pod(key, node)
        if node and self.noexecute.get(node):
            self._process_pod(key, node)
        else:
            self._cancel(key, announce=True)

    # --- the taint manager ------------------------------------------------------------
    def _process_pod(self, key: str, node: str) -> None:
        e = self.pods.get_by_key(key)
        if e is None:
            return
        pod = e.object()
        if is_mirror_pod(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._cancel(key, announce=False)
            return
        taints = [{"key": k, "value": v, "effect": "NoExecute"} for k, v in self.noexecute.get(node, ())]
        delay = eviction_delay(taints, tolerations_of(pod))
        if delay is None:
            self._cancel(key, announce=True)
            return
        mono = time.monotonic()
        sched = self.evictions.get(key)
        created = sched.created if sched is not None else mono
        trigger = created + delay
        if sched is not None and sched.trigger == trigger:
            return
        if sched is not None and sched.handle is not None:
            sched.handle.cancel()
        sched = self.evictions[key] = ScheduledEviction(created, trigger)
        if trigger <= mono:
            self.queue.add(("evict", key))
        else:
            sched.handle = asyncio.get_running_loop().call_later(trigger - mono, self.queue.add, ("evict", key))
            log.info(
                "pod %s on node %s: eviction in %.0fs (NoExecute taint tolerated for a while)",
                key[len(self.pod_prefix) :],
                node,
                trigger - mono,
            )

    def _cancel(self, key: str, *, announce: bool) -> None:
        sched = self.evictions.pop(key, None)
        if sched is None:
            return
        if sched.handle is not None:
            sched.handle.cancel()
        if announce:
            e = self.pods.get_by_key(key)
            if e is not None:
                ref = object_reference(e.object(), "Pod")
                self._spawn(
                    self.taint_events.record(
                        ref, "Normal", "TaintManagerEviction", f"Cancelling deletion of Pod {e.namespace}/{e.name}"
                    )
                )

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- the loops --------------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._monitor_loop(), name="node-monitor")
                tg.create_task(self._worker(), name="node-lifecycle-worker")
        finally:
            for sched in self.evictions.values():
                if sched.handle is not None:
                    sched.handle.cancel()
            for task in list(self._background):
                task.cancel()

    async def _monitor_loop(self) -> None:
        while True:
            await asyncio.sleep(self.monitor_period)
            try:
                await self.monitor_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next monitor period tries again
                log.exception("node health check failed")

    async def monitor_once(self) -> None:
        """Mark silent nodes Unknown; queue taint fixes the event path may have missed."""
        ts = format_rfc3339(utc_now())
        for e in self.nodes.list():
            name = e.name
            node = e.object()
            if reconcile_taints(node, ts) is not None:
                self.queue.add(("taints", name))
            if name not in self.health:
                self._observe_node(name, node)
            if not self._silent(name, node) or not mark_unknown(copy.deepcopy(node), ts):
                continue

            def compute(old: dict, name=name) -> dict:
                if self._silent(name, old):  # not if it came back meanwhile
                    mark_unknown(old, ts)
                return old

            try:
                await self.client.update(self.nodes_kind, "", name, compute, subresource="status")
                log.info(
                    "node %s: no heartbeat for %.0fs; its conditions are now Unknown",
                    name,
                    time.monotonic() - self.health[name].probe if name in self.health else 0,
                )
            except st.ApiError as exc:
                if exc.code != 404:
                    log.warning("node %s: cannot mark it Unknown: %s", name, exc.message)

    def _silent(self, name: str, node: Mapping) -> bool:
        h = self.health.get(name)
        if h is None:
            return False
        grace = self.grace_period if get_condition(node, "Ready") is not None else self.startup_grace_period
        return time.monotonic() - h.probe > grace

    async def _worker(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                if item[0] == "taints":
                    await self._sync_taints(item[1])
                elif item[0] == "not-ready":
                    await self._mark_pods_not_ready(item[1])
                elif item[0] == "evict":
                    await self._evict(item[1])
            except asyncio.CancelledError:
                raise
            except st.ApiError as exc:
                log.warning("node lifecycle: %s %s: %s", item[0], item[1], exc.message)
                self.queue.add_after(item, RETRY_DELAY)
            except Exception:  # noqa: BLE001 - one bad item is retried; the queue goes on
                log.exception("node lifecycle: %s %s failed", item[0], item[1])
                self.queue.add_after(item, RETRY_DELAY)

    async def _sync_taints(self, name: str) -> None:
        e = self.nodes.get("", name)
        ts = format_rfc3339(utc_now())
        if e is None or reconcile_taints(e.object(), ts) is None:
            return

        def compute(old: dict) -> dict:
            taints = reconcile_taints(old, ts)
            if taints is not None:
                spec = old.setdefault("spec", {})
                if taints:
                    spec["taints"] = taints
                else:
                    spec.pop("taints", None)
            return old

        try:
            obj = await self.client.update(self.nodes_kind, "", name, compute)
        except st.ApiError as exc:
            if exc.code == 404:
                return
            raise
        log.info(
            "node %s: taints now %s", name, [f"{t.get('key')}:{t.get('effect')}" for t in taints_of(obj)] or "none"
        )

    async def _mark_pods_not_ready(self, name: str) -> None:
        e = self.nodes.get("", name)
        if e is None:
            return
        node = e.object()
        if (get_condition(node, "Ready") or {}).get("status") == "True":
            return  # back already
        await self.node_events.record(
            object_reference(node, "Node"), "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady"
        )
        for key in sorted(self.pods_on_node.get(name, ())):
            pe = self.pods.get_by_key(key)
            if pe is None:
                continue
            pod = pe.object()
            ready = get_condition(pod, "Ready")
            if ready is None or ready.get("status") == "False" or (pod.get("spec") or {}).get("nodeName") != name:
                continue

            def compute(old: dict) -> dict:
                c = get_condition(old, "Ready")
                if c is not None and (old.get("spec") or {}).get("nodeName") == name:
                    set_pod_condition(old, {**c, "status": "False"})
                return old

            try:
                await self.client.update(self.pods_kind, pe.namespace, pe.name, compute, subresource="status")
            except st.ApiError as exc:
                if exc.code in (404, 409):
                    continue
                raise
            await self.node_events.record(object_reference(pod, "Pod"), "Warning", "NodeNotReady", "Node is not ready")

    async def _evict(self, key: str) -> None:
        sched = self.evictions.get(key)
        if sched is None:
            return
        e = self.pods.get_by_key(key)
        node = self.pod_node.get(key, "")
        if e is None or not node:
            self._cancel(key, announce=False)
            return
        pod = e.object()
        taints = [{"key": k, "value": v, "effect": "NoExecute"} for k, v in self.noexecute.get(node, ())]
        delay = eviction_delay(taints, tolerations_of(pod))
        if delay is None or is_mirror_pod(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._cancel(key, announce=False)
            return
        if sched.created + delay > time.monotonic() + 0.01:
            sched.trigger = -1.0  # a toleration grew meanwhile: schedule again, keeping the start
            self._process_pod(key, node)
            return
        self.evictions.pop(key, None)
        uid = (pod.get("metadata") or {}).get("uid")

        def add_condition(old: dict) -> dict:
            if (old.get("metadata") or {}).get("uid") == uid:
                set_pod_condition(old, {**DISRUPTION_CONDITION, "lastProbeTime": None})
            return old

        log.info(
            "evicting pod %s from node %s (NoExecute taint %s)",
            key[len(self.pod_prefix) :],
            node,
            ", ".join(k for k, _ in self.noexecute.get(node, ())),
        )
        await self.taint_events.record(
            object_reference(pod, "Pod"),
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {e.namespace}/{e.name}",
        )
        try:
            await self.client.update(self.pods_kind, e.namespace, e.name, add_condition, subresource="status")
            await self.client.delete(self.pods_kind, e.namespace, e.name, DeleteOptions(preconditions_uid=uid))
        except st.ApiError as exc:
            if exc.code in (404, 409):
                return
            # Try again shortly: the pod is still due.
            self.evictions[key] = ScheduledEviction(sched.created, sched.trigger)
            raise
