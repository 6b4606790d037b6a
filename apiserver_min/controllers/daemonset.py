"""The DaemonSet controller: one pod of the set on every node that should run it.

Which nodes. A node runs a daemon pod when the pod made for it fits: the template's
``nodeName`` (if any) is that node, its ``nodeSelector`` and required node affinity
match the node, and every NoSchedule and NoExecute taint of the node is tolerated.
The pod made for a node carries, besides the template's tolerations, those every
daemon pod gets (not-ready and unreachable NoExecute without a time limit;
disk, memory and PID pressure and unschedulable NoSchedule; network-unavailable for
host-network pods), so daemons keep running on nodes in trouble. A pod already on a
node whose only untolerated taints are NoSchedule stays; an untolerated NoExecute
taint, a changed selector or affinity has it deleted.

Binding. The controller does not bind: each pod gets a required node affinity on the
node's ``metadata.name`` (``matchFields``, replacing that of the template's terms)
and the scheduler places it there.

Updates. Every template is recorded as a ControllerRevision (``controllers/history.py``);
pods are labelled with the revision's hash and the set's template generation. With
``RollingUpdate`` old pods are deleted while no more than ``maxUnavailable`` (a number
or a percentage of the desired pods, rounded up) are unavailable, and the node then
gets a pod of the new template; with ``maxSurge`` the new pod is started first and
the old one deleted once the new one is available. ``OnDelete`` replaces pods only
when someone deletes them.

Failed daemon pods are deleted and made again, with a per-node back-off (1 s doubling
to 15 min) so a node that keeps failing the pod is not hammered.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from typing import Any, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at, list_at, object_reference, taints_of, tolerates
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..api.timeutil import parse_rfc3339
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..scheduler.scheduler import node_matches_pod
from ..storage.cacher import CacheEvent
from . import history
from .ownerindex import SelectorCache, claim_candidates, owner_keys
from .podcontrol import (
    FAILED,
    Expectations,
    claim,
    is_available,
    is_ready,
    pod_from_template,
    pod_key,
)
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.daemonset")

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 900.0
COMPONENT = "daemonset-controller"
# The status counts upstream always writes; the others are left out when zero.
ALWAYS_IN_STATUS = ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady")

# The tolerations every daemon pod gets (upstream's AddOrUpdateDaemonPodTolerations).
DAEMON_TOLERATIONS: tuple[dict, ...] = (
    {"key": names.TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute"},
    {"key": names.TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
    {"key": names.TAINT_DISK_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": names.TAINT_MEMORY_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": names.TAINT_PID_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": names.TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION = {"key": names.TAINT_NETWORK_UNAVAILABLE, "operator": "Exists", "effect": "NoSchedule"}


# --- pure rules --------------------------------------------------------------------------


def _same_toleration(a: Mapping, b: Mapping) -> bool:
    return all((a.get(f) or "") == (b.get(f) or "") for f in ("key", "operator", "value", "effect"))


def add_daemon_tolerations(spec: dict) -> None:
    """Add (or replace an equal one with) the tolerations of every daemon pod, in place."""
    wanted = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append(HOST_NETWORK_TOLERATION)
    tolerations = [t for t in list_at(spec, "tolerations") if isinstance(t, dict)]
    for add in wanted:
        for i, t in enumerate(tolerations):
            if _same_toleration(t, add):
                tolerations[i] = dict(add)
                break
        else:
            tolerations.append(dict(add))
    spec["tolerations"] = tolerations


def node_name_requirement(node_name: str) -> dict:
    return {"key": "metadata.name", "operator": "In", "values": [node_name]}


def affinity_for_node(affinity: Any, node_name: str) -> dict:
    """The pod's affinity with its required node terms' ``matchFields`` replaced by
    ``metadata.name In [node]`` (one such term when it had none)."""
    out = copy.deepcopy(affinity) if isinstance(affinity, dict) else {}
    node_aff = out.get("nodeAffinity") if isinstance(out.get("nodeAffinity"), dict) else {}
    out["nodeAffinity"] = node_aff
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = [t for t in list_at(required, "nodeSelectorTerms")] if isinstance(required, dict) else []
    if not terms:
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchFields": [node_name_requirement(node_name)]}]
        }
        return out
    new_terms = []
    for term in terms:
        term = dict(term) if isinstance(term, dict) else {}
        term["matchFields"] = [node_name_requirement(node_name)]
        new_terms.append(term)
    required["nodeSelectorTerms"] = new_terms
    return out


def target_node(pod: Mapping) -> str:
    """The node a daemon pod is for: its ``nodeName``, else the one its node affinity names."""
    spec = dict_at(pod, "spec")
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = dict_at(
        dict_at(dict_at(spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution"
    )
    for term in list_at(required, "nodeSelectorTerms"):
        for f in list_at(term, "matchFields") if isinstance(term, dict) else []:
            if (
                isinstance(f, dict)
                and f.get("key") == "metadata.name"
                and f.get("operator") == "In"
                and len(list_at(f, "values")) == 1
            ):
                return str(f["values"][0])
    return ""


def pod_for_node(ds: Mapping, node_name: str) -> dict:
    """The pod (spec) ``ds`` would run on ``node_name``, for deciding fit."""
    spec = copy.deepcopy(dict_at(dict_at(ds, "spec"), "template").get("spec") or {})
    spec["affinity"] = affinity_for_node(spec.get("affinity"), node_name)
    add_daemon_tolerations(spec)
    return {"spec": spec}


def should_run(ds: Mapping, node: Mapping) -> tuple[bool, bool]:
    """(should run a daemon pod, may keep one already there) for ``node``."""
    node_name = str(dict_at(node, "metadata").get("name", ""))
    pod = pod_for_node(ds, node_name)
    template_node = dict_at(pod, "spec").get("nodeName")
    if template_node and template_node != node_name:
        return False, False
    if not node_matches_pod(pod, node):
        return False, False
    tolerations = list_at(dict_at(pod, "spec"), "tolerations")
    untolerated = [
        t
        for t in taints_of(node)
        if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in tolerations)
    ]
    if not untolerated:
        return True, True
    return False, not any(t.get("effect") == "NoExecute" for t in untolerated)


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent field against ``total``; a bad value reads as 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError:
            return 0
        exact = pct * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


def rolling_limits(ds: Mapping, desired: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as pod counts; at least one unavailable when neither is set."""
    rolling = dict_at(dict_at(dict_at(ds, "spec"), "updateStrategy"), "rollingUpdate")
    surge = scaled_value(rolling.get("maxSurge", 0), desired, True)
    unavailable = scaled_value(rolling.get("maxUnavailable", 1), desired, True)
    if desired > 0 and surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def template_generation(ds: Mapping) -> str:
    return str(dict_at(dict_at(ds, "metadata"), "annotations").get(names.ANNOTATION_DS_TEMPLATE_GENERATION) or "")


def is_pod_updated(pod: Mapping, hash_: str, generation: str) -> bool:
    labels = dict_at(dict_at(pod, "metadata"), "labels")
    if hash_ and labels.get(history.HASH_LABEL) == hash_:
        return True
    return bool(generation) and labels.get(names.LABEL_POD_TEMPLATE_GENERATION) == generation


def _created(pod: Mapping) -> float:
    ts = dict_at(pod, "metadata").get("creationTimestamp")
    try:
        return parse_rfc3339(ts).timestamp() if isinstance(ts, str) and ts else 0.0
    except ValueError:
        return 0.0


def oldest_first(pods: list[dict]) -> list[dict]:
    """Scheduled pods before unscheduled ones, then by creation time, then by name."""
    return sorted(
        pods,
        key=lambda p: (
            0 if dict_at(p, "spec").get("nodeName") else 1,
            _created(p),
            str(dict_at(p, "metadata").get("name", "")),
        ),
    )


def updated_pods_on_node(pods: list[dict], hash_: str, generation: str) -> tuple[dict | None, dict | None, bool]:
    """(new pod, old pod, ok) among a node's pods not being deleted; not ok with two of either."""
    new = old = None
    for p in pods:
        if dict_at(p, "metadata").get("deletionTimestamp"):
            continue
        if is_pod_updated(p, hash_, generation):
            if new is not None:
                return None, None, False
            new = p
        else:
            if old is not None:
                return None, None, False
            old = p
    return new, old, True


def rolling_update_plan(
    ds: Mapping, node_pods: Mapping[str, list[dict]], desired: int, hash_: str, now: float
) -> tuple[list[dict], list[str]]:
    """(old pods to delete, nodes to surge a new pod onto) for one rolling-update step.
    ``node_pods`` holds every node that should run the daemon (an empty list when it
    has no pod yet) and every node with daemon pods."""
    surge, max_unavailable = rolling_limits(ds, desired)
    min_ready = int(dict_at(ds, "spec").get("minReadySeconds") or 0)
    generation = template_generation(ds)
    if surge == 0:
        unavailable = 0
        replace: list[dict] = []
        candidates: list[dict] = []
        for node_name in sorted(node_pods):
            new, old, ok = updated_pods_on_node(node_pods[node_name], hash_, generation)
            if not ok or (new is None) == (old is None):
                unavailable += 1
            elif new is not None:
                if not is_available(new, min_ready, now):
                    unavailable += 1
            elif old is not None:
                if not is_available(old, min_ready, now):
                    replace.append(old)
                elif unavailable < max_unavailable:
                    candidates.append(old)
        room = min(max(0, max_unavailable - unavailable), len(candidates))
        return replace + candidates[:room], []
    surged = 0
    to_delete: list[dict] = []
    allowed: list[str] = []
    surge_candidates: list[str] = []
    for node_name in sorted(node_pods):
        new, old, ok = updated_pods_on_node(node_pods[node_name], hash_, generation)
        if not ok:
            surged += 1
        elif old is None:
            continue
        elif new is None:
            if not is_available(old, min_ready, now):
                allowed.append(node_name)
            elif surged < surge:
                surge_candidates.append(node_name)
        elif not is_available(new, min_ready, now):
            surged += 1
        else:
            to_delete.append(old)
    room = min(max(0, surge - surged), len(surge_candidates))
    return to_delete, allowed + surge_candidates[:room]


# --- the controller --------------------------------------------------------------------


class DaemonSetController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.ds_kind = informers.kind(names.APPS_GROUP, "v1", "daemonsets")
        self.pods_kind = informers.kind("", "v1", "pods")
        self.nodes_kind = informers.kind("", "v1", "nodes")
        self.rev_kind = informers.kind(names.APPS_GROUP, "v1", "controllerrevisions")
        self.sets = informers.for_kind(self.ds_kind)
        self.pods = informers.for_kind(self.pods_kind)
        self.nodes = informers.for_kind(self.nodes_kind)
        self.revisions = informers.for_kind(self.rev_kind)
        self.queue = RateLimitedQueue()
        self.expectations = Expectations()
        self.events = EventRecorder(client, informers.registry, COMPONENT)
        self.selectors = SelectorCache(self.sets)
        self._node_sig: dict[str, tuple[str, str]] = {}  # what placement reads of each node
        # (set key, node) -> (current delay, monotonic time of the last failure handled)
        self.backoff: dict[tuple[str, str], tuple[float, float]] = {}

    # --- informer events ------------------------------------------------------------
    def start(self) -> None:
        self.sets.add_handler(self.on_set)
        self.pods.add_handler(self.on_pod)
        self.nodes.add_handler(self.on_node)
        self.revisions.add_handler(self.on_revision)

    def _enqueue_all(self, namespace: str | None = None) -> None:
        for e in self.sets.list(namespace):
            self.queue.add(f"{e.namespace}/{e.name}")

    def on_set(self, ev: CacheEvent | None) -> None:
        if ev is None:
            self._enqueue_all()
            return
        key = f"{ev.entry.namespace}/{ev.entry.name}"
        if ev.type == "DELETED":
            self.expectations.forget(key)
            for gone in [k for k in self.backoff if k[0] == key]:
                del self.backoff[gone]
        self.queue.add(key)

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        e = ev.entry
        keys = owner_keys(e, "DaemonSet")
        if not keys:
            if not e.owners and ev.type != "DELETED":  # an orphan some set may adopt
                for key in self.selectors.matching(e.namespace, e.labels):
                    self.queue.add(key)
            return
        for key in keys:
            if ev.type == "ADDED":
                self.expectations.creation_observed(key)
            elif ev.type == "DELETED":
                self.expectations.deletion_observed(key, f"{e.namespace}/{e.name}")
            self.queue.add(key)

    def on_node(self, ev: CacheEvent | None) -> None:
        """Nodes added or removed, or their labels or taints changed (not heartbeats):
        every set looks again."""
        if ev is None:
            return
        name = ev.entry.name
        if ev.type == "DELETED":
            self._node_sig.pop(name, None)
        else:
            node = ev.entry.object()
            sig = (repr(sorted(ev.entry.labels.items())), repr(taints_of(node)))
            if self._node_sig.get(name) == sig:
                return
            self._node_sig[name] = sig
        self._enqueue_all()

    def on_revision(self, ev: CacheEvent | None) -> None:
        if ev is not None:
            for key in owner_keys(ev.entry, "DaemonSet"):
                self.queue.add(key)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "daemonset")

    # --- sync -----------------------------------------------------------------------
    async def sync(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        entry = self.sets.get(namespace, name)
        if entry is None:
            self.expectations.forget(key)
            return
        ds = entry.object()
        if dict_at(ds, "metadata").get("deletionTimestamp"):
            return
        try:
            selector = label_selector_from_dict(dict_at(ds, "spec").get("selector"))
        except SelectorError as exc:
            await self.events.record(
                object_reference(ds, "DaemonSet", "apps/v1"), "Warning", "InvalidSelector", str(exc)
            )
            return
        nodes = [e.object() for e in self.nodes.list()]
        pods = await self._claim_pods(ds, selector)
        current, old_revisions, collision = await self._construct_history(ds, selector)
        hash_ = dict_at(dict_at(current, "metadata"), "labels").get(history.HASH_LABEL, "")
        if self.expectations.satisfied(key):
            # A finished pod on its way out no longer holds its node.
            node_pods = self._node_pods(
                [p for p in pods if not (dict_at(p, "metadata").get("deletionTimestamp") and self._terminal(p))]
            )
            busy = await self._manage(key, ds, nodes, node_pods, hash_)
            strategy = dict_at(dict_at(ds, "spec"), "updateStrategy").get("type")
            if not busy and self.expectations.satisfied(key) and strategy == "RollingUpdate":
                await self._rolling_update(key, ds, nodes, node_pods, hash_)
            await self._cleanup_history(ds, pods, current, old_revisions)
        await self._update_status(key, ds, nodes, pods, hash_, collision)

    async def _claim_pods(self, ds: dict, selector: LabelSelector) -> list[dict]:
        ns = str(dict_at(ds, "metadata").get("namespace", ""))
        candidates = claim_candidates(self.pods, ns, str(dict_at(ds, "metadata").get("uid", "")), selector)
        result = await claim(
            self.client,
            self.pods_kind,
            ds,
            self.ds_kind,
            selector,
            candidates,
            owner_fresh=lambda: self._fresh(ds),
        )
        if result.errors:
            raise result.errors[0]
        return result.pods

    async def _fresh(self, ds: Mapping) -> dict | None:
        md = dict_at(ds, "metadata")
        try:
            return await self.client.get(self.ds_kind, str(md.get("namespace", "")), str(md.get("name", "")))
        except st.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def _node_pods(self, pods: list[dict]) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for p in pods:
            node = target_node(p)
            if node:
                out.setdefault(node, []).append(p)
        return out

    # --- history --------------------------------------------------------------------
    async def _construct_history(self, ds: dict, selector: LabelSelector) -> tuple[dict, list[dict], int]:
        md = dict_at(ds, "metadata")
        ns = str(md.get("namespace", ""))
        claimed = await claim(
            self.client,
            self.rev_kind,
            ds,
            self.ds_kind,
            selector,
            claim_candidates(self.revisions, ns, str(md.get("uid", "")), selector),
            owner_fresh=lambda: self._fresh(ds),
        )
        if claimed.errors:
            raise claimed.errors[0]
        collision = int(dict_at(ds, "status").get("collisionCount") or 0)
        template = dict_at(dict_at(ds, "spec"), "template")
        hash_ = history.template_hash(template, collision)
        patch = history.template_patch(ds)
        current: list[dict] = []
        old: list[dict] = []
        for r in claimed.pods:
            labels = dict_at(dict_at(r, "metadata"), "labels")
            if labels.get(history.HASH_LABEL) == hash_ or history.canonical(r.get("data")) == history.canonical(patch):
                current.append(r)
            else:
                old.append(r)
        max_old = max((history.revision_number(r) for r in old), default=0)
        if current:
            current = history.sort_revisions(current)
            keep = current[-1]
            for dup in current[:-1]:  # the same template twice: keep the newest
                await history.delete_revisions(self.client, self.rev_kind, [dup])
            if history.revision_number(keep) <= max_old:
                keep = await history.set_revision_number(self.client, self.rev_kind, keep, max_old + 1)
            return keep, old, collision
        labels = {**history.template_labels(ds)}
        annotations = dict_at(md, "annotations")
        rev = history.new_revision(ds, self.ds_kind, max_old + 1, labels=labels, annotations=annotations)

        def hash_of(_rev: dict, count: int) -> str:
            return history.template_hash(template, count)

        created, new_collision = await history.create_revision(self.client, self.rev_kind, ds, rev, collision, hash_of)
        if new_collision != collision:
            await self._write_collision(ds, new_collision)
            raise st.ApiError(409, "Conflict", "a ControllerRevision name collided; the set's hash changed")
        return created, old, collision

    async def _write_collision(self, ds: Mapping, count: int) -> None:
        md = dict_at(ds, "metadata")

        def bump(cur: dict) -> dict:
            cur.setdefault("status", {})["collisionCount"] = count
            return cur

        await self.client.update(
            self.ds_kind, str(md.get("namespace", "")), str(md.get("name", "")), bump, subresource="status"
        )

    async def _cleanup_history(self, ds: dict, pods: list[dict], current: dict, old: list[dict]) -> None:
        limit = history.history_limit(ds)
        if len(old) <= limit:
            return
        live_hashes = {dict_at(dict_at(p, "metadata"), "labels").get(history.HASH_LABEL) for p in pods}
        live = {
            str(dict_at(r, "metadata").get("name"))
            for r in old
            if dict_at(dict_at(r, "metadata"), "labels").get(history.HASH_LABEL) in live_hashes
        }
        live.add(str(dict_at(current, "metadata").get("name")))
        await history.delete_revisions(self.client, self.rev_kind, history.history_to_delete(old, live, limit))

    # --- pods -----------------------------------------------------------------------
    async def _manage(
        self, key: str, ds: dict, nodes: list[dict], node_pods: dict[str, list[dict]], hash_: str
    ) -> bool:
        """Create the missing daemon pods, delete the misplaced, extra and failed ones;
        True when it wrote anything."""
        surge, _ = rolling_limits(ds, 1) if self._rolling(ds) else (0, 0)
        min_ready = int(dict_at(ds, "spec").get("minReadySeconds") or 0)
        now_wall = time.time()
        to_create: list[str] = []
        to_delete: list[dict] = []
        node_names = set()
        for node in nodes:
            node_name = str(dict_at(node, "metadata").get("name", ""))
            node_names.add(node_name)
            run, keep = should_run(ds, node)
            pods = node_pods.get(node_name, [])
            if run and not pods:
                to_create.append(node_name)
            elif keep:
                running: list[dict] = []
                for p in pods:
                    if dict_at(p, "metadata").get("deletionTimestamp"):
                        continue
                    if dict_at(p, "status").get("phase") == FAILED:
                        if self._in_backoff(key, node_name):
                            continue
                        await self.events.record(
                            object_reference(ds, "DaemonSet", "apps/v1"),
                            "Warning",
                            "FailedDaemonPod",
                            f"Found failed daemon pod {dict_at(p, 'metadata').get('namespace')}/"
                            f"{dict_at(p, 'metadata').get('name')} on node {node_name}, will try to kill it",
                        )
                        to_delete.append(p)
                    else:
                        running.append(p)
                if surge == 0:
                    to_delete += oldest_first(running)[1:]
                elif not running:
                    if run:
                        to_create.append(node_name)
                else:
                    new = old = None
                    for p in oldest_first(running):
                        is_new = dict_at(dict_at(p, "metadata"), "labels").get(history.HASH_LABEL) == hash_
                        if is_new and new is None:
                            new = p
                        elif not is_new and old is None:
                            old = p
                        else:
                            to_delete.append(p)
                    if new is not None and old is not None:
                        if not is_ready(old) or is_available(new, min_ready, now_wall):
                            to_delete.append(old)
            else:
                to_delete += [p for p in pods if not dict_at(p, "metadata").get("deletionTimestamp")]
        for node_name, pods in node_pods.items():
            if node_name not in node_names:  # the node is gone
                to_delete += [p for p in pods if not dict_at(p, "metadata").get("deletionTimestamp")]
        await self._sync_nodes(key, ds, to_delete, to_create, hash_)
        return bool(to_create or to_delete)

    def _rolling(self, ds: Mapping) -> bool:
        return dict_at(dict_at(ds, "spec"), "updateStrategy").get("type") == "RollingUpdate"

    def _in_backoff(self, key: str, node_name: str) -> bool:
        """True while the failed pod on ``node_name`` waits out its back-off (the set is
        looked at again when it ends); else the back-off grows and the pod may go."""
        mono = time.monotonic()
        entry = self.backoff.get((key, node_name))
        if entry is not None:
            delay, last = entry
            if mono - last < delay:
                self.queue.add_after(key, delay - (mono - last) + 0.01)
                return True
            if mono - last > 2 * BACKOFF_MAX:
                entry = None
        delay = BACKOFF_INITIAL if entry is None else min(entry[0] * 2, BACKOFF_MAX)
        self.backoff[(key, node_name)] = (delay, mono)
        return False

    async def _sync_nodes(self, key: str, ds: dict, to_delete: list[dict], to_create: list[str], hash_: str) -> None:
        ref = object_reference(ds, "DaemonSet", "apps/v1")
        ns = str(dict_at(ds, "metadata").get("namespace", ""))
        self.expectations.expect_creations(key, len(to_create))
        self.expectations.expect_deletions(key, [pod_key(p) for p in to_delete])
        errors: list[st.ApiError] = []
        template = self._pod_template(ds, hash_)
        # Slow start: 1, 2, 4, ... creates at a time; a failing batch stops the rest.
        pending = list(to_create)
        batch = 1
        while pending:
            now, pending = pending[:batch], pending[batch:]
            results = await asyncio.gather(*(self._create_pod(ds, template, n, ref) for n in now))
            failed = [r for r in results if r is not None]
            if failed:
                errors += failed
                for _ in range(len(failed) + len(pending)):
                    self.expectations.creation_observed(key)
                break
            batch *= 2
        for p in to_delete:
            pmd = dict_at(p, "metadata")
            try:
                await self.client.delete(
                    self.pods_kind, ns, str(pmd.get("name")), DeleteOptions(preconditions_uid=pmd.get("uid"))
                )
                await self.events.record(ref, "Normal", "SuccessfulDelete", f"Deleted pod: {pmd.get('name')}")
            except st.ApiError as exc:
                self.expectations.deletion_observed(key, pod_key(p))
                if exc.code in (404, 409):
                    continue
                await self.events.record(ref, "Warning", "FailedDelete", f"Error deleting: {exc.message}")
                errors.append(exc)
        if errors:
            raise errors[0]

    def _pod_template(self, ds: Mapping, hash_: str) -> dict:
        template = copy.deepcopy(dict_at(dict_at(ds, "spec"), "template"))
        tmd = template.setdefault("metadata", {})
        labels = tmd.get("labels") if isinstance(tmd.get("labels"), dict) else {}
        labels = dict(labels)
        generation = template_generation(ds)
        if generation:
            labels[names.LABEL_POD_TEMPLATE_GENERATION] = generation
        if hash_:
            labels[history.HASH_LABEL] = hash_
        tmd["labels"] = labels
        return template

    async def _create_pod(self, ds: dict, template: dict, node_name: str, ref: dict) -> st.ApiError | None:
        pod = pod_from_template(template, ds, self.ds_kind)
        spec = pod["spec"]
        spec["affinity"] = affinity_for_node(spec.get("affinity"), node_name)
        add_daemon_tolerations(spec)
        ns = str(dict_at(ds, "metadata").get("namespace", ""))
        try:
            created = await self.client.create(self.pods_kind, ns, pod)
        except st.ApiError as exc:
            await self.events.record(ref, "Warning", "FailedCreate", f"Error creating: {exc.message}")
            if exc.code == 409 and exc.reason == "AlreadyExists":
                return None
            return exc
        await self.events.record(
            ref, "Normal", "SuccessfulCreate", f"Created pod: {dict_at(created, 'metadata').get('name')}"
        )
        return None

    async def _rolling_update(
        self, key: str, ds: dict, nodes: list[dict], node_pods: dict[str, list[dict]], hash_: str
    ) -> None:
        desired = 0
        plan_pods = {n: list(p) for n, p in node_pods.items()}
        for node in nodes:
            run, _ = should_run(ds, node)
            if run:
                desired += 1
                plan_pods.setdefault(str(dict_at(node, "metadata").get("name", "")), [])
        to_delete, surge_nodes = rolling_update_plan(ds, plan_pods, desired, hash_, time.time())
        if to_delete or surge_nodes:
            await self._sync_nodes(key, ds, to_delete, surge_nodes, hash_)

    # --- status ---------------------------------------------------------------------
    async def _update_status(
        self, key: str, ds: dict, nodes: list[dict], pods: list[dict], hash_: str, collision: int
    ) -> None:
        now = time.time()
        min_ready = int(dict_at(ds, "spec").get("minReadySeconds") or 0)
        generation = template_generation(ds)
        node_pods = self._node_pods(
            [p for p in pods if not (dict_at(p, "metadata").get("deletionTimestamp") and self._terminal(p))]
        )
        desired = current = misscheduled = ready = available = updated = 0
        for node in nodes:
            node_name = str(dict_at(node, "metadata").get("name", ""))
            run, _ = should_run(ds, node)
            here = node_pods.get(node_name, [])
            if run:
                desired += 1
                if not here:
                    continue
                current += 1
                pod = oldest_first(here)[0]
                if is_ready(pod):
                    ready += 1
                    if is_available(pod, min_ready, now):
                        available += 1
                if is_pod_updated(pod, hash_, generation):
                    updated += 1
            elif here:
                misscheduled += 1
        md = dict_at(ds, "metadata")
        status: dict[str, Any] = {
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": desired,
            "numberReady": ready,
            "observedGeneration": md.get("generation"),
            "updatedNumberScheduled": updated,
            "numberAvailable": available,
            "numberUnavailable": desired - available,
        }
        old = dict_at(ds, "status")
        if collision or "collisionCount" in old:
            status["collisionCount"] = collision
        if "conditions" in old:
            status["conditions"] = old["conditions"]
        # Zero counts are left out of the stored status, as upstream's omitempty.
        status = {k: v for k, v in status.items() if v or k in ALWAYS_IN_STATUS}
        if status != old:

            def write(cur: dict) -> dict:
                cur["status"] = status
                return cur

            try:
                await self.client.update(
                    self.ds_kind, str(md.get("namespace", "")), str(md.get("name", "")), write, subresource="status"
                )
            except st.ApiError as exc:
                if exc.code != 404:
                    raise
        if min_ready > 0 and ready != available:
            self.queue.add_after(key, float(min_ready))

    @staticmethod
    def _terminal(pod: Mapping) -> bool:
        return dict_at(pod, "status").get("phase") in ("Succeeded", "Failed")
