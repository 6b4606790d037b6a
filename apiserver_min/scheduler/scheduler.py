"""The bundled scheduler: binds pending pods to nodes that fit.

Upstream's default profile, cut down to the plugins that decide anything in a
cluster without inter-pod affinity: NodeUnschedulable, TaintToleration,
NodeAffinity (``nodeSelector`` and required node affinity), NodePorts,
NodeResourcesFit and VolumeBinding (``volumebinding.py``: claims, their volumes'
node affinity, binding on first consumer) filter the nodes, in that order, a
node failing at its first filter as upstream; the least-allocated score (the mean free
fraction of cpu and memory, with upstream's non-zero defaults for pods that
request nothing) ranks the rest and a tie is broken at random.

A pod whose PersistentVolumeClaims are missing or not bound to a volume waits (the
pre-filter of upstream's VolumeBinding; no volumes are provisioned here).

A pod that fits nowhere gets ``PodScheduled=False`` (reason ``Unschedulable``)
with upstream's summary ("0/3 nodes are available: 1 Insufficient cpu, ...
preemption: ..."), and a ``FailedScheduling`` event. Preemption itself is not
done: the "preemption:" part reports what upstream's dry run would find when it
finds nothing (no lower-priority victims, or a filter preemption cannot help).

Unschedulable pods are tried again when a node's scheduling properties change,
when a bound pod goes away, and every 30 s, with upstream's per-pod back-off
(1 s doubling to 10 s). The scheduler reads pods and nodes through informers and
writes through its client as ``system:serviceaccount:orch-system:scheduler``: a
Binding created on the ``pods/binding`` sub-resource, pod status, events.

It runs with the other bundled controllers, under their leader election.

The fit and score logic is plain functions on dicts (:func:`find_node_for_pod`)
so it is tested without a server.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random
import time
from typing import Any, Callable, Iterable, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import (
    _dig,
    _list,
    get_condition,
    object_reference,
    set_pod_condition,
    taints_of,
    tolerates,
    tolerations_of,
)
from ..api.nodefit import (
    first_untolerated_taint,
    host_ports,
    node_matches_pod,
    ports_conflict,
    term_matches,
)
from ..api.quantity import Quantity, QuantityError
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .volumebinding import Decision, VolumeBinding

log = logging.getLogger("orch-apiserver.scheduler")

DEFAULT_SCHEDULER_NAME = "default-scheduler"
# The scheduler's writes (pod status, events) in managedFields: upstream's user agent
# product name, kube-scheduler. A binding records nothing, as upstream's binding
# sub-resource writes storage directly.
FIELD_MANAGER = names.SCHEDULER_FIELD_MANAGER
RETRY_INTERVAL = 30.0
# How long a pod's claims may take to be bound before its scheduling is given up and
# tried again (upstream's VolumeBinding bindTimeoutSeconds), and how often to look.
VOLUME_BIND_TIMEOUT = 600.0
VOLUME_BIND_POLL = 0.1
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 10.0
# Upstream's defaults for containers that request nothing, used only for scoring.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
MAX_NODE_SCORE = 100

# Filter failure reasons, in upstream's words.
REASON_NODE_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_TOO_MANY_PODS = "Too many pods"
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
PREEMPTION_NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_NOT_DONE = "Preemption of lower-priority pods is not done by this scheduler"
PREEMPTION_NEVER = "not eligible due to preemptionPolicy=Never."
NO_NODES_AVAILABLE = "no nodes available to schedule pods"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"

NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


# --- small accessors -------------------------------------------------------------------


def is_terminal(pod: Mapping) -> bool:
    return _dig(pod, "status", "phase") in ("Succeeded", "Failed")


def pod_priority(pod: Mapping) -> int:
    p = _dig(pod, "spec", "priority")
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


def responsible_for(pod: Mapping) -> bool:
    """Pods this scheduler places: unbound, alive, and naming it (or no scheduler)."""
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER_NAME)
        and not _dig(pod, "metadata", "deletionTimestamp")
        and not is_terminal(pod)
    )


# --- resources -------------------------------------------------------------------------


def resource_amount(name: str, value: Any) -> int:
    """A quantity in the scheduler's units: millicores for cpu, plain units otherwise.
    A value that does not parse counts as 0 (validation keeps those out)."""
    try:
        q = Quantity.parse(str(value))
    except (QuantityError, ValueError):
        return 0
    return q.milli_value() if name == "cpu" else q.value()


def _container_requests(c: Mapping) -> dict[str, int]:
    res = c.get("resources") or {}
    # API defaulting copies limits into missing requests; apply it here too so a
    # stored object defaulted elsewhere (or not at all) is counted the same way.
    merged = dict(res.get("limits") or {})
    merged.update(res.get("requests") or {})
    return {n: resource_amount(n, v) for n, v in merged.items()}


def pod_requests(pod: Mapping) -> dict[str, int]:
    """Upstream's pod request: the sum over containers, at least the largest init
    container's request, plus the pod overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in _list(spec.get("containers")):
        if isinstance(c, dict):
            for n, v in _container_requests(c).items():
                total[n] = total.get(n, 0) + v
    for c in _list(spec.get("initContainers")):
        if isinstance(c, dict):
            for n, v in _container_requests(c).items():
                total[n] = max(total.get(n, 0), v)
    for n, v in (spec.get("overhead") or {}).items():
        total[n] = total.get(n, 0) + resource_amount(n, v)
    return total


def nonzero_requests(pod: Mapping) -> tuple[int, int]:
    """(millicores, bytes) for scoring: a container without a cpu or memory request
    counts upstream's defaults (100m, 200Mi); an explicit zero stays zero."""
    spec = pod.get("spec") or {}

    def one(c: Mapping) -> tuple[int, int]:
        res = c.get("resources") or {}
        req = dict(res.get("limits") or {})
        req.update(res.get("requests") or {})
        cpu = resource_amount("cpu", req["cpu"]) if "cpu" in req else DEFAULT_MILLI_CPU_REQUEST
        mem = resource_amount("memory", req["memory"]) if "memory" in req else DEFAULT_MEMORY_REQUEST
        return cpu, mem

    cpu = mem = 0
    for c in _list(spec.get("containers")):
        if isinstance(c, dict):
            a, b = one(c)
            cpu, mem = cpu + a, mem + b
    for c in _list(spec.get("initContainers")):
        if isinstance(c, dict):
            a, b = one(c)
            cpu, mem = max(cpu, a), max(mem, b)
    overhead = spec.get("overhead") or {}
    if "cpu" in overhead:
        cpu += resource_amount("cpu", overhead["cpu"])
    if "memory" in overhead:
        mem += resource_amount("memory", overhead["memory"])
    return cpu, mem


def node_allocatable(node: Mapping) -> dict[str, int]:
    return {n: resource_amount(n, v) for n, v in (_dig(node, "status", "allocatable") or {}).items()}


# --- taints and tolerations --------------------------------------------------------------


def implied_condition_taints(node: Mapping) -> list[dict]:
    """The NoSchedule taint a node's Ready condition implies when the node does not
    carry it yet: upstream's TaintNodesByCondition admission gives every new node
    ``not-ready:NoSchedule`` and the node lifecycle controller keeps it current;
    until that controller's write lands, the scheduler must not treat a node that
    is not ready as free."""
    ready = get_condition(node, "Ready")
    status = ready.get("status") if ready else None
    if status == "True":
        return []
    key = names.TAINT_UNREACHABLE if status == "Unknown" else names.TAINT_NOT_READY
    if any(t.get("key") == key and t.get("effect") == "NoSchedule" for t in taints_of(node)):
        return []
    return [{"key": key, "effect": "NoSchedule"}]


# --- the scheduler's view of pods and nodes -------------------------------------------


@dataclasses.dataclass(frozen=True)
class PodSummary:
    """What a bound pod takes from its node."""

    key: str
    requests: Mapping[str, int]
    nonzero_cpu: int
    nonzero_memory: int
    host_ports: tuple[tuple[str, str, int], ...]
    priority: int

    @classmethod
    def of(cls, pod: Mapping, key: str = "") -> "PodSummary":
        cpu, mem = nonzero_requests(pod)
        return cls(
            key or f"{_dig(pod, 'metadata', 'namespace', default='')}/{_dig(pod, 'metadata', 'name', default='')}",
            pod_requests(pod),
            cpu,
            mem,
            host_ports(pod),
            pod_priority(pod),
        )


class NodeState:
    """One node and the pods bound to it, with their sums kept until they change."""

    def __init__(self, node: dict, pods: Iterable[PodSummary] = ()):
        self.node = node
        self.name = _dig(node, "metadata", "name", default="")
        self.allocatable = node_allocatable(node)
        self.pods: dict[str, PodSummary] = {p.key: p for p in pods}
        self._sums: tuple[dict[str, int], int, int, tuple] | None = None

    def set_node(self, node: dict) -> None:
        self.node = node
        self.allocatable = node_allocatable(node)

    def add(self, p: PodSummary) -> None:
        self.pods[p.key] = p
        self._sums = None

    def remove(self, key: str) -> None:
        if self.pods.pop(key, None) is not None:
            self._sums = None

    def _sum(self) -> tuple[dict[str, int], int, int, tuple]:
        if self._sums is None:
            req: dict[str, int] = {}
            cpu = mem = 0
            ports: list = []
            for p in self.pods.values():
                for n, v in p.requests.items():
                    req[n] = req.get(n, 0) + v
                cpu += p.nonzero_cpu
                mem += p.nonzero_memory
                ports.extend(p.host_ports)
            self._sums = (req, cpu, mem, tuple(ports))
        return self._sums

    @property
    def requested(self) -> dict[str, int]:
        return self._sum()[0]

    @property
    def nonzero_requested(self) -> tuple[int, int]:
        s = self._sum()
        return s[1], s[2]

    @property
    def used_ports(self) -> tuple:
        return self._sum()[3]

    def without(self, keys: Iterable[str]) -> "NodeState":
        drop = set(keys)
        return NodeState(self.node, [p for k, p in self.pods.items() if k not in drop])


@dataclasses.dataclass(frozen=True)
class FilterFailure:
    reasons: tuple[str, ...]
    unresolvable: bool  # preemption cannot help (upstream's UnschedulableAndUnresolvable)


def insufficient_resources(pod: PodSummary, state: NodeState) -> list[str]:
    """Upstream's NodeResourcesFit reasons ("Too many pods", "Insufficient cpu", ...)."""
    alloc, used = state.allocatable, state.requested
    reasons = []
    if len(state.pods) + 1 > alloc.get("pods", 0):
        reasons.append(REASON_TOO_MANY_PODS)
    wants = {n: v for n, v in pod.requests.items() if n != "pods" and v > 0}
    if not wants:
        return reasons
    for n in NATIVE_RESOURCES:
        r = wants.get(n, 0)
        if r > 0 and r > alloc.get(n, 0) - used.get(n, 0):
            reasons.append(f"Insufficient {n}")
    for n in sorted(wants):
        if n not in NATIVE_RESOURCES and wants[n] > alloc.get(n, 0) - used.get(n, 0):
            reasons.append(f"Insufficient {n}")
    return reasons


def filter_node(pod: Mapping, summary: PodSummary, state: NodeState) -> FilterFailure | None:
    """None when the pod fits the node; else the first failing filter's reasons."""
    node = state.node
    tolerations = tolerations_of(pod)
    if _dig(node, "spec", "unschedulable") and not any(
        tolerates(t, {"key": names.TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}) for t in tolerations
    ):
        return FilterFailure((REASON_NODE_UNSCHEDULABLE,), True)
    taint = first_untolerated_taint(taints_of(node) + implied_condition_taints(node), tolerations)
    if taint is not None:
        return FilterFailure(
            (f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}",), True
        )
    if not node_matches_pod(pod, node):
        return FilterFailure((REASON_NODE_AFFINITY,), True)
    if summary.host_ports and ports_conflict(summary.host_ports, state.used_ports):
        return FilterFailure((REASON_NODE_PORTS,), False)
    reasons = insufficient_resources(summary, state)
    if reasons:
        return FilterFailure(tuple(reasons), False)
    return None


def _least_requested(requested: int, capacity: int) -> int:
    if capacity <= 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def score_node(summary: PodSummary, state: NodeState) -> int:
    """Least allocated: the mean of cpu's and memory's free share after placing the pod (0-100)."""
    cpu, mem = state.nonzero_requested
    alloc = state.allocatable
    return (
        _least_requested(cpu + summary.nonzero_cpu, alloc.get("cpu", 0))
        + _least_requested(mem + summary.nonzero_memory, alloc.get("memory", 0))
    ) // 2


def fit_error_message(
    num_nodes: int, failures: Mapping[str, FilterFailure], post: str = "", pre_filter: str = ""
) -> str:
    """Upstream's FitError text: "0/N nodes are available: <count reason>, ... ." with
    the counts sorted as strings (or the pre-filter's message, which rejected the pod
    before any node was tried), then the post-filter (preemption) message."""
    counts: collections.Counter = collections.Counter(r for f in failures.values() for r in f.reasons)
    msg = f"0/{num_nodes} nodes are available:"
    histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
    if pre_filter:
        msg += f" {pre_filter}."
    elif histogram:
        msg += f" {', '.join(histogram)}."
    if post:
        msg += f" {post}."
    return msg


def preemption_message(
    pod: Mapping, summary: PodSummary, states: Mapping[str, NodeState], failures: Mapping[str, FilterFailure]
) -> str:
    """What upstream's DefaultPreemption dry run reports when it finds no candidate."""
    if _dig(pod, "spec", "preemptionPolicy") == "Never":
        return f"preemption: {PREEMPTION_NEVER}"
    per_node: dict[str, FilterFailure] = {}
    for name, failure in failures.items():
        if failure.unresolvable:
            per_node[name] = FilterFailure((PREEMPTION_NOT_HELPFUL,), True)
            continue
        state = states[name]
        victims = [k for k, p in state.pods.items() if p.priority < summary.priority]
        if not victims:
            per_node[name] = FilterFailure((PREEMPTION_NO_VICTIMS,), True)
            continue
        still = filter_node(pod, summary, state.without(victims))
        per_node[name] = still if still is not None else FilterFailure((PREEMPTION_NOT_DONE,), False)
    return "preemption: " + fit_error_message(len(states), per_node)


def pre_filter_message(pod: Mapping, states: Mapping[str, NodeState], reason: str) -> str:
    """The FitError of a pod a pre-filter rejected: every node fails with ``reason``,
    which preemption cannot help."""
    if not states:
        return NO_NODES_AVAILABLE
    failures = {name: FilterFailure((reason,), True) for name in states}
    post = preemption_message(pod, PodSummary.of(pod), states, failures)
    return fit_error_message(len(states), failures, post, pre_filter=reason)


def volume_affinity_matches(required: Mapping, node: Mapping) -> bool:
    """A volume's required node affinity (any of its terms) holds for ``node``."""
    labels = _dig(node, "metadata", "labels") or {}
    name = _dig(node, "metadata", "name") or ""
    return any(term_matches(t, labels, name) for t in _list(required.get("nodeSelectorTerms")))


@dataclasses.dataclass(frozen=True)
class ScheduleResult:
    node: str | None
    message: str = ""  # why no node fits
    scores: Mapping[str, int] = dataclasses.field(default_factory=dict)


def find_node_for_pod(
    pod: Mapping,
    states: Mapping[str, NodeState],
    rng: random.Random | None = None,
    summary: PodSummary | None = None,
    extra_filter: Callable[[NodeState], FilterFailure | None] | None = None,
) -> ScheduleResult:
    """Filter, score and pick; the message of a pod that fits nowhere. ``extra_filter``
    runs after the built-in filters (the volume binding)."""
    if not states:
        return ScheduleResult(None, NO_NODES_AVAILABLE)
    summary = summary or PodSummary.of(pod)
    failures: dict[str, FilterFailure] = {}
    scores: dict[str, int] = {}
    for name, state in states.items():
        failure = filter_node(pod, summary, state)
        if failure is None and extra_filter is not None:
            failure = extra_filter(state)
        if failure is None:
            scores[name] = score_node(summary, state)
        else:
            failures[name] = failure
    if not scores:
        post = preemption_message(pod, summary, states, failures)
        return ScheduleResult(None, fit_error_message(len(states), failures, post))
    best = max(scores.values())
    top = sorted(n for n, s in scores.items() if s == best)
    return ScheduleResult((rng or random).choice(top), "", scores)


# --- writes shared with the node lifecycle controller ------------------------------------

# --- the running scheduler ---------------------------------------------------------------


@dataclasses.dataclass
class _Backoff:
    attempts: int = 0
    not_before: float = 0.0


class Scheduler:
    """Watch-cache driven: pending pods queue up, nodes and bound pods are kept as
    :class:`NodeState`, one task places pods one at a time."""

    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        *,
        retry_interval: float = RETRY_INTERVAL,
        rng: random.Random | None = None,
        volume_bind_timeout: float = VOLUME_BIND_TIMEOUT,
    ):
        self.client = client  # the scheduler's identity; its field manager is FIELD_MANAGER
        self.volume_bind_timeout = volume_bind_timeout
        # Pods placed on a node whose claims are being bound there: their Binding waits.
        self._waiting: dict[str, asyncio.Task] = {}
        self._waiting_node: dict[str, str] = {}
        self.pods_kind = informers.kind("", "v1", "pods")
        self.nodes_kind = informers.kind("", "v1", "nodes")
        self.pods = informers.for_kind(self.pods_kind)
        self.node_informer = informers.for_kind(self.nodes_kind)
        self.claims = informers.for_resource("", "v1", "persistentvolumeclaims")
        self.retry_interval = retry_interval
        self.rng = rng or random.Random()
        self.events = EventRecorder(client, informers.registry, DEFAULT_SCHEDULER_NAME)
        self.volume_binding = VolumeBinding(informers, volume_affinity_matches)
        self.nodes: dict[str, NodeState] = {}
        self._node_sig: dict[str, Any] = {}
        self.bound: dict[str, str] = {}  # pod key -> node, for pods counted on a node
        self.active: dict[str, None] = {}
        self.unschedulable: dict[str, _Backoff] = {}
        self._pod_sig: dict[str, Any] = {}
        self._wake = asyncio.Event()
        self.attempts = 0  # scheduling attempts made (for tests and metrics)

    # --- informer events ------------------------------------------------------------
    def start(self) -> None:
        """Subscribe; the node informer's replay rebuilds nodes and pods together."""
        self.pods.add_handler(self.on_pod)
        self.node_informer.add_handler(self.on_node)
        self.volume_binding.handlers(self.on_volume_change)

    def on_volume_change(self, ev: CacheEvent | None) -> None:
        """A claim, volume or class changed: pods waiting for one may fit now."""
        if ev is not None:
            self._retry_unschedulable()

    def on_node(self, ev: CacheEvent | None) -> None:
        if ev is None:
            self._rebuild()
        else:
            self._node_event(ev)

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is not None:
            self._pod_event(ev)

    def _rebuild(self) -> None:
        self.nodes.clear()
        self._node_sig.clear()
        self.bound.clear()
        for e in self.node_informer.list():
            node = e.object()
            self.nodes[e.name] = NodeState(node)
            self._node_sig[e.name] = self._node_signature(node)
        for e in self.pods.list():
            self._pod_event(CacheEvent("ADDED", e.rv, e, None, 0.0))
        for key, node_name in self._waiting_node.items():  # still holding their places
            self.bound[key] = node_name
            self._count_pod(key)
        self._retry_unschedulable()

    @staticmethod
    def _node_signature(node: Mapping) -> Any:
        """What scheduling reads of a node; heartbeats alone change nothing."""
        conds = tuple(
            sorted(
                (c.get("type"), c.get("status"))
                for c in _list(_dig(node, "status", "conditions"))
                if isinstance(c, dict)
            )
        )
        return (
            repr(_dig(node, "metadata", "labels")),
            repr(_dig(node, "spec", "taints")),
            bool(_dig(node, "spec", "unschedulable")),
            repr(_dig(node, "status", "allocatable")),
            conds,
        )

    def _node_event(self, ev: CacheEvent) -> None:
        name = ev.entry.name
        if ev.type == "DELETED":
            self.nodes.pop(name, None)
            self._node_sig.pop(name, None)
            return
        node = ev.entry.object()
        state = self.nodes.get(name)
        if state is None:
            state = self.nodes[name] = NodeState(node)
            for key, n in self.bound.items():
                if n == name:
                    self._count_pod(key)
        else:
            state.set_node(node)
        sig = self._node_signature(node)
        if self._node_sig.get(name) != sig:
            self._node_sig[name] = sig
            self._retry_unschedulable()

    def _count_pod(self, key: str) -> None:
        e = self.pods.get_by_key(key)
        node = self.bound.get(key)
        if e is not None and node in self.nodes:
            self.nodes[node].add(PodSummary.of(e.object(), key))

    def _uncount(self, key: str) -> bool:
        node = self.bound.pop(key, None)
        if node is None:
            return False
        state = self.nodes.get(node)
        if state is not None:
            state.remove(key)
        return True

    def _pod_event(self, ev: CacheEvent) -> None:
        e = ev.entry
        key = e.key
        waiting = self._waiting.get(key)
        if waiting is not None:
            if ev.type != "DELETED":
                return  # counted on its node already; its task binds it or gives up
            waiting.cancel()
            self._waiting.pop(key, None)
            self._waiting_node.pop(key, None)
        if ev.type == "DELETED":
            self._forget(key)
            if self._uncount(key):
                self._retry_unschedulable()
            return
        node = e.fields.get("spec.nodeName") or ""
        phase = e.fields.get("status.phase") or ""
        if node:
            self._forget(key)
            if phase in ("Succeeded", "Failed"):
                if self._uncount(key):
                    self._retry_unschedulable()
                return
            if self.bound.get(key) != node:
                self._uncount(key)
            self.bound[key] = node
            state = self.nodes.get(node)
            if state is not None:
                state.add(PodSummary.of(e.object(), key))
            return
        if self._uncount(key):
            self._retry_unschedulable()
        # responsible_for from the cache entry's fields first: a pod for another scheduler
        # (or being deleted, or finished) is not decoded.
        if (
            e.deleting
            or phase in ("Succeeded", "Failed")
            or e.fields.get("spec.schedulerName") not in (None, "", DEFAULT_SCHEDULER_NAME)
        ):
            self._forget(key)
            return
        pod = e.object()
        if not responsible_for(pod):
            self._forget(key)
            return
        # Our own status writes (the PodScheduled condition) must not requeue the pod.
        sig = (repr(pod.get("spec")), repr(_dig(pod, "metadata", "labels")))
        if self._pod_sig.get(key) == sig and (key in self.unschedulable or key in self.active):
            return
        self._pod_sig[key] = sig
        self.unschedulable.pop(key, None)
        self._activate(key)

    def _forget(self, key: str) -> None:
        self.active.pop(key, None)
        self.unschedulable.pop(key, None)
        self._pod_sig.pop(key, None)

    def _activate(self, key: str) -> None:
        self.active[key] = None
        self._wake.set()

    def _retry_unschedulable(self) -> None:
        """Nodes or bound pods changed: every unschedulable pod is tried again, once its
        back-off has passed."""
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        for key, b in list(self.unschedulable.items()):
            if b.not_before == float("inf"):
                continue  # gated: only a change of the pod releases it
            if b.not_before <= now:
                self._activate(key)
            else:
                loop.call_later(b.not_before - now, self._retry_one, key)

    def _retry_one(self, key: str) -> None:
        if key in self.unschedulable:
            self._activate(key)

    # --- the loop -------------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._flush_loop(), name="scheduler-flush")
                tg.create_task(self._schedule_loop(), name="scheduler-loop")
        finally:
            for task in list(self._waiting.values()):
                task.cancel()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retry_interval)
            self._retry_unschedulable()

    async def _schedule_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.active:
                batch = self._ordered(list(self.active))
                self.active.clear()
                for key in batch:
                    try:
                        await self.schedule_one(key)
                    except asyncio.CancelledError:
                        raise
                    except Exception:  # noqa: BLE001 - the pod is retried; the scheduler goes on
                        log.exception("scheduling %s failed", key)
                        self._mark_unschedulable(key)
                    await asyncio.sleep(0)

    def _ordered(self, keys: list[str]) -> list[str]:
        """Upstream's PrioritySort: higher priority first, then older pods."""

        def rank(key: str) -> tuple:
            e = self.pods.get_by_key(key)
            if e is None:
                return (0, "", key)
            pod = e.object()
            return (-pod_priority(pod), _dig(pod, "metadata", "creationTimestamp", default=""), key)

        return sorted(keys, key=rank)

    def _mark_unschedulable(self, key: str) -> None:
        b = self.unschedulable.get(key) or _Backoff()
        b.attempts += 1
        b.not_before = time.monotonic() + min(BACKOFF_MAX, BACKOFF_INITIAL * 2 ** (b.attempts - 1))
        self.unschedulable[key] = b

    async def schedule_one(self, key: str) -> str | None:
        """One attempt for one pod: the node it was bound to, or None."""
        e = self.pods.get_by_key(key)
        pod = e.object() if e is not None else None
        if pod is None or not responsible_for(pod) or key in self._waiting:
            self._forget(key)
            return None
        self.attempts += 1
        md = pod["metadata"]
        ns, name = md.get("namespace", ""), md.get("name", "")
        if _list(_dig(pod, "spec", "schedulingGates")):
            await self._set_unschedulable_condition(
                ns, name, md.get("uid"), "SchedulingGated", SCHEDULING_GATED_MESSAGE
            )
            self.unschedulable[key] = _Backoff(0, float("inf"))  # released by a spec change only
            return None
        ref = object_reference(pod, "Pod")
        claims, rejected = self.volume_binding.pre_filter(pod)
        decisions: dict[str, Decision] = {}

        def volumes_fit(state: NodeState) -> FilterFailure | None:
            if claims is None or not (claims.bound or claims.to_bind):
                return None
            reasons, decision = self.volume_binding.filter(claims, state.node)
            if decision is None:
                return FilterFailure(reasons, True)
            decisions[state.name] = decision
            return None

        if claims is None:
            result = ScheduleResult(None, pre_filter_message(pod, self.nodes, rejected))
        else:
            result = find_node_for_pod(pod, self.nodes, self.rng, extra_filter=volumes_fit)
        if result.node is None:
            log.info("pod %s/%s is unschedulable: %s", ns, name, result.message)
            self._mark_unschedulable(key)
            await self._set_unschedulable_condition(ns, name, md.get("uid"), "Unschedulable", result.message)
            await self.events.record(ref, "Warning", "FailedScheduling", result.message, "Scheduling")
            return None
        decision = decisions.get(result.node)
        if decision is not None and (decision.static or decision.provision):
            try:
                await self.volume_binding.pre_bind(self.client, decision, result.node)
            except st.ApiError as exc:
                log.info("pod %s/%s: binding its volumes on %s failed: %s", ns, name, result.node, exc.message)
                self._mark_unschedulable(key)
                return None
            # The pod holds its place on the node while its claims are bound; then the Binding.
            self._assume(key, pod, result.node)
            self._waiting_node[key] = result.node
            self._waiting[key] = asyncio.create_task(
                self._bind_after_volumes(key, pod, result.node, decision), name=f"volume-binding {ns}/{name}"
            )
            return result.node
        return result.node if await self._bind(key, pod, result.node) else None

    def _assume(self, key: str, pod: dict, node: str) -> None:
        """Count the pod on its node now: the cache event that confirms it comes later,
        and the next pod must not see the node emptier than it is."""
        self._forget(key)
        self.bound[key] = node
        state = self.nodes.get(node)
        if state is not None:
            state.add(PodSummary.of(pod, key))
        self.unschedulable.pop(key, None)

    async def _bind_after_volumes(self, key: str, pod: dict, node: str, decision: Decision) -> None:
        """Upstream's PreBind wait: the Binding once every claim the pod's placement chose
        or asked to be provisioned is bound; otherwise the pod goes back to the queue."""
        md = pod["metadata"]
        ns, name = md.get("namespace", ""), md.get("name", "")
        deadline = time.monotonic() + self.volume_bind_timeout
        try:
            while True:
                problem = self.volume_binding.binding_problem(decision, node)
                if problem is None:
                    break
                if not problem and time.monotonic() > deadline:
                    problem = "binding volumes: timed out waiting for the condition"
                if problem:
                    problem = f'running PreBind plugin "VolumeBinding": {problem}'
                    log.info("pod %s/%s: its volumes were not bound on %s: %s", ns, name, node, problem)
                    self._uncount(key)
                    self._mark_unschedulable(key)
                    await self._set_unschedulable_condition(ns, name, md.get("uid"), "SchedulerError", problem)
                    await self.events.record(
                        object_reference(pod, "Pod"), "Warning", "FailedScheduling", problem, "Scheduling"
                    )
                    return
                await asyncio.sleep(VOLUME_BIND_POLL)
            self._waiting.pop(key, None)
            self._waiting_node.pop(key, None)
            if not await self._bind(key, pod, node):
                self._uncount(key)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the pod is retried; the scheduler goes on
            log.exception("binding pod %s/%s after its volumes failed", ns, name)
            self._uncount(key)
            self._mark_unschedulable(key)
        finally:
            self._waiting.pop(key, None)
            self._waiting_node.pop(key, None)

    async def _bind(self, key: str, pod: dict, node: str) -> bool:
        """The Binding of the pod to ``node``, then its Scheduled event."""
        md = pod["metadata"]
        ns, name = md.get("namespace", ""), md.get("name", "")
        ref = object_reference(pod, "Pod")
        try:
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": md.get("uid")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            await self.client.create(self.pods_kind, ns, binding, subresource="binding")
        except st.ApiError as exc:
            if exc.code in (404, 409):
                log.info("pod %s/%s not bound: %s", ns, name, exc.message)
                return False
            raise
        self._assume(key, pod, node)
        log.info("pod %s/%s bound to %s", ns, name, node)
        await self.events.record(ref, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}", "Binding")
        return True

    async def _set_unschedulable_condition(
        self, ns: str, name: str, uid: str | None, reason: str, message: str
    ) -> None:
        def compute(old: dict) -> dict:
            if (uid and old["metadata"].get("uid") != uid) or _dig(old, "spec", "nodeName"):
                return old  # another pod now, or bound meanwhile: nothing to say
            set_pod_condition(
                old,
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "reason": reason,
                    "message": message,
                },
            )
            return old

        try:
            await self.client.update(self.pods_kind, ns, name, compute, subresource="status")
        except st.ApiError as exc:
            if exc.code not in (404, 409):
                log.warning("pod %s/%s: cannot set PodScheduled: %s", ns, name, exc.message)
