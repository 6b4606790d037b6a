"""The StatefulSet controller: pods with stable names, storage and order.

Identity. The pods of set ``web`` are ``web-<ordinal>`` for the ordinals
``[start, start + replicas)`` (``spec.ordinals.start``, 0 by default), labelled
``statefulset.orch.io/pod-name: <pod>``, with ``hostname`` the pod's name and
``subdomain`` the set's ``serviceName``. For each of ``volumeClaimTemplates`` the
PersistentVolumeClaim ``<template>-<set>-<ordinal>`` is created before the pod (with
the set's selector labels) and the pod's volume of the template's name points at it;
the pod then waits for its claim as any pod does.

Order. ``OrderedReady``: pods are created one at a time, lowest ordinal first, each
once every lower one is Running and Ready (and available for ``minReadySeconds``);
scaling down deletes the highest ordinal first, one at a time, only while the others
are healthy. ``Parallel``: create and delete without waiting. A pod that failed or
finished is deleted and made again.

Updates. Every template is a ControllerRevision (``controllers/history.py``); status
``currentRevision`` is the revision of the pods from before the update, ``updateRevision``
that of the template. ``RollingUpdate`` deletes, from the highest ordinal down to
``partition``, one pod not of the update revision at a time, waiting for the pod made
in its place to be healthy; pods below the partition keep (and are made again at) the
current revision. ``OnDelete`` replaces a pod only when someone deletes it. When all
pods run the update revision, it becomes the current one.

Claims (``persistentVolumeClaimRetentionPolicy``): with ``whenDeleted: Delete`` each claim
gets an owner reference to the set, so the garbage collector deletes it with the set;
with ``whenScaled: Delete`` the claim of a pod beyond the replicas gets an owner reference
to that pod before the pod is deleted, so the claim goes with it; ``Retain`` (the
default for both) keeps the claims and removes such references.
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
from ..api.helpers import dict_at, list_at, object_reference
from ..api.selectors import SelectorError, label_selector_from_dict
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent
from . import history
from .ownerindex import SelectorCache, claim_candidates, owner_keys
from .podcontrol import FAILED, PENDING, RUNNING, SUCCEEDED, claim, is_available, is_ready, pod_from_template
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.statefulset")

COMPONENT = "statefulset-controller"
RETAIN, DELETE = "Retain", "Delete"


# --- identity ------------------------------------------------------------------------------


def pod_name(set_name: str, ordinal: int) -> str:
    return f"{set_name}-{ordinal}"


def parent_and_ordinal(name: str) -> tuple[str, int]:
    """(set name, ordinal) of a pod named ``<set>-<ordinal>``; ordinal -1 when it is not so named."""
    parent, sep, tail = name.rpartition("-")
    if not sep or not tail.isdigit() or (len(tail) > 1 and tail[0] == "0"):
        return "", -1
    return parent, int(tail)


def start_ordinal(sts: Mapping) -> int:
    start = dict_at(dict_at(sts, "spec"), "ordinals").get("start")
    return start if isinstance(start, int) and not isinstance(start, bool) and start > 0 else 0


def replicas_of(sts: Mapping) -> int:
    n = dict_at(sts, "spec").get("replicas")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def claim_name(template_name: str, set_name: str, ordinal: int) -> str:
    return f"{template_name}-{set_name}-{ordinal}"


def claim_templates(sts: Mapping) -> list[dict]:
    return [t for t in list_at(dict_at(sts, "spec"), "volumeClaimTemplates") if isinstance(t, dict)]


def new_claims(sts: Mapping, ordinal: int) -> list[dict]:
    """The claims of the pod at ``ordinal``, from the templates, labelled with the set's selector labels."""
    md = dict_at(sts, "metadata")
    set_name = str(md.get("name", ""))
    match_labels = dict_at(dict_at(sts, "spec"), "selector").get("matchLabels") or {}
    out = []
    for t in claim_templates(sts):
        tmd = dict_at(t, "metadata")
        cmd: dict[str, Any] = {
            "name": claim_name(str(tmd.get("name", "")), set_name, ordinal),
            "namespace": md.get("namespace", ""),
            "labels": {**(tmd.get("labels") or {}), **match_labels},
        }
        if tmd.get("annotations"):
            cmd["annotations"] = dict(tmd["annotations"])
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": cmd,
                "spec": copy.deepcopy(dict_at(t, "spec")),
            }
        )
    return out


def new_pod(sts: Mapping, sts_kind: Any, template: Mapping, ordinal: int, revision: str) -> dict:
    """The pod at ``ordinal`` from ``template`` (a revision's), with its identity, storage and revision label."""
    md = dict_at(sts, "metadata")
    set_name = str(md.get("name", ""))
    name = pod_name(set_name, ordinal)
    pod = pod_from_template(template, sts, sts_kind, name=name)
    pmd = pod["metadata"]
    labels = dict(pmd.get("labels") or {})
    labels[names.LABEL_STATEFULSET_POD_NAME] = name
    labels[history.HASH_LABEL] = revision
    pmd["labels"] = labels
    spec = pod["spec"]
    spec["hostname"] = name
    service = dict_at(sts, "spec").get("serviceName")
    if service:
        spec["subdomain"] = service
    claims = {str(dict_at(t, "metadata").get("name", "")) for t in claim_templates(sts)}
    if claims:
        volumes = [v for v in list_at(spec, "volumes") if isinstance(v, dict) and v.get("name") not in claims]
        for t in claim_templates(sts):
            tname = str(dict_at(t, "metadata").get("name", ""))
            volumes.append(
                {"name": tname, "persistentVolumeClaim": {"claimName": claim_name(tname, set_name, ordinal)}}
            )
        spec["volumes"] = volumes
    return pod


def identity_matches(sts: Mapping, pod: Mapping) -> bool:
    md, pmd = dict_at(sts, "metadata"), dict_at(pod, "metadata")
    parent, ordinal = parent_and_ordinal(str(pmd.get("name", "")))
    return (
        ordinal >= 0
        and parent == md.get("name")
        and pmd.get("namespace") == md.get("namespace")
        and dict_at(pmd, "labels").get(names.LABEL_STATEFULSET_POD_NAME) == pmd.get("name")
    )


# --- pod state -----------------------------------------------------------------------------


def phase(pod: Mapping) -> str:
    return str(dict_at(pod, "status").get("phase") or "")


def is_created(pod: Mapping) -> bool:
    return bool(phase(pod))


def is_terminating(pod: Mapping) -> bool:
    return bool(dict_at(pod, "metadata").get("deletionTimestamp"))


def running_and_ready(pod: Mapping) -> bool:
    return phase(pod) == RUNNING and is_ready(pod)


def running_and_available(pod: Mapping, min_ready: int, now: float) -> bool:
    return phase(pod) == RUNNING and is_available(pod, min_ready, now)


def is_healthy(pod: Mapping) -> bool:
    return running_and_ready(pod) and not is_terminating(pod)


def pod_revision(pod: Mapping) -> str:
    return str(dict_at(dict_at(pod, "metadata"), "labels").get(history.HASH_LABEL) or "")


# --- the plan of one sync --------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    """One write of a sync: ``create`` the pod at ``ordinal`` (at ``revision``: "current"
    or "update"); ``recreate`` (delete a failed or finished ``pod``, made again next);
    ``identity`` (fix the labels of ``pod``); ``delete`` a condemned ``pod``; ``update``
    (delete ``pod`` to replace it with the update revision)."""

    action: str
    ordinal: int
    pod: dict | None = None
    revision: str = ""


@dataclasses.dataclass
class Plan:
    steps: list[Step]
    status: dict


def revision_for_new_pod(sts: Mapping, ordinal: int) -> str:
    """ "current" for a pod below the partition, else "update"."""
    start = start_ordinal(sts)
    strategy = dict_at(dict_at(sts, "spec"), "updateStrategy")
    rolling = strategy.get("rollingUpdate")
    if strategy.get("type") == "RollingUpdate" and not isinstance(rolling, dict):
        if ordinal < start + int(dict_at(sts, "status").get("currentReplicas") or 0):
            return "current"
    elif isinstance(rolling, dict) and ordinal < start + int(rolling.get("partition") or 0):
        return "current"
    return "update"


def replica_status(pods: list[dict], min_ready: int, current: str, update: str, now: float) -> dict:
    counts = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "currentReplicas": 0, "updatedReplicas": 0}
    for p in pods:
        if is_created(p):
            counts["replicas"] += 1
        if running_and_ready(p):
            counts["readyReplicas"] += 1
            if running_and_available(p, min_ready, now):
                counts["availableReplicas"] += 1
        if is_created(p) and not is_terminating(p):
            rev = pod_revision(p)
            if rev == current:
                counts["currentReplicas"] += 1
            if rev == update:
                counts["updatedReplicas"] += 1
    return counts


def plan(sts: Mapping, pods: list[dict], current: str, update: str, now: float) -> Plan:
    """What one sync does, in order, given the set's member pods (as observed) and the
    names of its current and update revisions; the steps stop where the set must wait."""
    spec = dict_at(sts, "spec")
    min_ready = int(spec.get("minReadySeconds") or 0)
    start, n = start_ordinal(sts), replicas_of(sts)
    replicas: list[dict | None] = [None] * n
    condemned: list[dict] = []
    set_name = str(dict_at(sts, "metadata").get("name", ""))
    for p in pods:
        parent, ordinal = parent_and_ordinal(str(dict_at(p, "metadata").get("name", "")))
        if parent != set_name or ordinal < 0:
            continue
        if start <= ordinal < start + n:
            replicas[ordinal - start] = p
        else:
            condemned.append(p)
    condemned.sort(key=lambda p: -parent_and_ordinal(str(dict_at(p, "metadata").get("name", "")))[1])
    status = replica_status([p for p in replicas if p is not None] + condemned, min_ready, current, update, now)
    first_unhealthy: dict | None = None
    for p in replicas:
        if p is None or not is_healthy(p):
            first_unhealthy = p if p is not None else {}
            break
    if first_unhealthy is None:
        for p in reversed(condemned):
            if not is_healthy(p):
                first_unhealthy = p
                break
    steps: list[Step] = []
    if dict_at(sts, "metadata").get("deletionTimestamp"):
        return Plan(steps, status)
    monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
    made: dict[int, str] = {}  # index -> revision of the pods this sync makes
    for i, p in enumerate(replicas):
        ordinal = start + i
        if p is not None and phase(p) in (FAILED, SUCCEEDED):
            steps.append(Step("recreate", ordinal, p))
            status["replicas"] -= 1
            p = replicas[i] = None
        if p is None:
            revision = revision_for_new_pod(sts, ordinal)
            made[i] = revision
            steps.append(Step("create", ordinal, None, revision))
            if monotonic:
                return Plan(steps, status)
            continue
        if phase(p) == PENDING and claim_templates(sts):
            steps.append(Step("claims", ordinal, p))  # made again if someone deleted one
        if is_terminating(p) and monotonic:
            return Plan(steps, status)
        if not running_and_ready(p) and monotonic:
            return Plan(steps, status)
        if not running_and_available(p, min_ready, now) and monotonic:
            return Plan(steps, status)
        if not identity_matches(sts, p):
            steps.append(Step("identity", ordinal, p))
    for p in condemned:
        ordinal = parent_and_ordinal(str(dict_at(p, "metadata").get("name", "")))[1]
        if is_terminating(p):
            if monotonic:
                return Plan(steps, status)
            continue
        if monotonic and p is not first_unhealthy and not running_and_available(p, min_ready, now):
            return Plan(steps, status)
        steps.append(Step("delete", ordinal, p))
        if monotonic:
            return Plan(steps, status)
    strategy = dict_at(spec, "updateStrategy")
    if strategy.get("type") == "OnDelete":
        return Plan(steps, status)
    partition = int(dict_at(strategy, "rollingUpdate").get("partition") or 0)
    for target in range(n - 1, partition - 1, -1):
        p = replicas[target]
        if p is None:  # made this sync: at the update revision when above the partition
            if made.get(target) == "update":
                return Plan(steps, status)  # not healthy yet
            continue
        if pod_revision(p) != update and not is_terminating(p):
            steps.append(Step("update", start + target, p))
            status["currentReplicas"] -= 1
            return Plan(steps, status)
        if not is_healthy(p):
            return Plan(steps, status)
    return Plan(steps, status)


def claim_owner_changes(sts: Mapping, claim_obj: Mapping, pod: Mapping) -> list[dict] | None:
    """The claim's owner references as the retention policy wants them for ``pod``'s
    claim, or None when they already are."""
    policy = dict_at(dict_at(sts, "spec"), "persistentVolumeClaimRetentionPolicy")
    when_deleted = policy.get("whenDeleted") or RETAIN
    when_scaled = policy.get("whenScaled") or RETAIN
    smd, pmd = dict_at(sts, "metadata"), dict_at(pod, "metadata")
    refs = [r for r in list_at(dict_at(claim_obj, "metadata"), "ownerReferences") if isinstance(r, dict)]
    set_ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": smd.get("name"), "uid": smd.get("uid")}
    pod_ref = {"apiVersion": "v1", "kind": "Pod", "name": pmd.get("name"), "uid": pmd.get("uid")}
    ordinal = parent_and_ordinal(str(pmd.get("name", "")))[1]
    scaled_down = not (start_ordinal(sts) <= ordinal < start_ordinal(sts) + replicas_of(sts))
    want_set = when_deleted == DELETE and not (when_scaled == DELETE and scaled_down)
    want_pod = when_scaled == DELETE and scaled_down
    out = list(refs)

    def has(ref: Mapping) -> bool:
        return any(r.get("uid") == ref["uid"] for r in out)

    for ref, want in ((set_ref, want_set), (pod_ref, want_pod)):
        if want and not has(ref):
            out.append(ref)
        elif not want and has(ref):
            out = [r for r in out if r.get("uid") != ref["uid"]]
    return None if out == refs else out


def stale_claim(sts: Mapping, claim_obj: Mapping, pod_name_: str, pod_uid: str = "") -> bool:
    """With ``whenScaled: Delete``, a claim still owned by an earlier pod of the same name
    (not ``pod_uid``; any, for a pod not made yet) is about to be collected with it: the
    pod must not take it."""
    policy = dict_at(dict_at(sts, "spec"), "persistentVolumeClaimRetentionPolicy")
    if (policy.get("whenScaled") or RETAIN) != DELETE:
        return False
    return any(
        isinstance(r, dict) and r.get("kind") == "Pod" and r.get("name") == pod_name_ and r.get("uid") != pod_uid
        for r in list_at(dict_at(claim_obj, "metadata"), "ownerReferences")
    )


def complete_rolling_update(sts: Mapping, status: dict) -> None:
    if (
        dict_at(dict_at(sts, "spec"), "updateStrategy").get("type") == "RollingUpdate"
        and status.get("updatedReplicas", 0) == status.get("replicas", 0)
        and status.get("readyReplicas", 0) == status.get("replicas", 0)
    ):
        status["currentReplicas"] = status.get("updatedReplicas", 0)
        status["currentRevision"] = status.get("updateRevision", "")


# --- the controller ----------------------------------------------------------------------


class StatefulSetController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.sts_kind = informers.kind(names.APPS_GROUP, "v1", "statefulsets")
        self.pods_kind = informers.kind("", "v1", "pods")
        self.pvc_kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.rev_kind = informers.kind(names.APPS_GROUP, "v1", "controllerrevisions")
        self.sets = informers.for_kind(self.sts_kind)
        self.pods = informers.for_kind(self.pods_kind)
        self.claims = informers.for_kind(self.pvc_kind)
        self.revisions = informers.for_kind(self.rev_kind)
        self.queue = RateLimitedQueue()
        self.events = EventRecorder(client, informers.registry, COMPONENT)
        self.selectors = SelectorCache(self.sets)

    def start(self) -> None:
        self.sets.add_handler(self.on_set)
        self.pods.add_handler(self.on_pod)
        self.revisions.add_handler(self.on_revision)

    def on_set(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.sets.list():
                self.queue.add(f"{e.namespace}/{e.name}")
            return
        self.queue.add(f"{ev.entry.namespace}/{ev.entry.name}")

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        e = ev.entry
        keys = owner_keys(e, "StatefulSet")
        for key in keys:
            self.queue.add(key)
        if not e.owners and ev.type != "DELETED":  # an orphan some set may adopt
            for key in self.selectors.matching(e.namespace, e.labels):
                self.queue.add(key)

    def on_revision(self, ev: CacheEvent | None) -> None:
        if ev is not None:
            for key in owner_keys(ev.entry, "StatefulSet"):
                self.queue.add(key)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "statefulset")

    async def _fresh(self, sts: Mapping) -> dict | None:
        md = dict_at(sts, "metadata")
        try:
            return await self.client.get(self.sts_kind, str(md.get("namespace", "")), str(md.get("name", "")))
        except st.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    # --- sync -----------------------------------------------------------------------
    async def sync(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        entry = self.sets.get(namespace, name)
        if entry is None:
            return
        sts = entry.object()
        try:
            selector = label_selector_from_dict(dict_at(sts, "spec").get("selector"))
        except SelectorError as exc:
            await self.events.record(self._ref(sts), "Warning", "InvalidSelector", str(exc))
            return
        uid = str(dict_at(sts, "metadata").get("uid", ""))
        claimed = await claim(
            self.client,
            self.pods_kind,
            sts,
            self.sts_kind,
            selector,
            claim_candidates(self.pods, namespace, uid, selector),
            owner_fresh=lambda: self._fresh(sts),
        )
        if claimed.errors:
            raise claimed.errors[0]
        pods = [p for p in claimed.pods if parent_and_ordinal(str(dict_at(p, "metadata").get("name", "")))[0] == name]
        revisions = await claim(
            self.client,
            self.rev_kind,
            sts,
            self.sts_kind,
            selector,
            claim_candidates(self.revisions, namespace, uid, selector),
            owner_fresh=lambda: self._fresh(sts),
        )
        if revisions.errors:
            raise revisions.errors[0]
        revs = history.sort_revisions(revisions.pods)
        current, update, collision = await self._revisions(sts, revs)
        current_name = str(dict_at(current, "metadata").get("name"))
        update_name = str(dict_at(update, "metadata").get("name"))
        if not dict_at(sts, "metadata").get("deletionTimestamp"):
            await self._fix_claims(sts, pods)
        result = plan(sts, pods, current_name, update_name, time.time())
        try:
            await self._execute(sts, result.steps, current, update)
        finally:
            status = dict(result.status)
            status.update(
                observedGeneration=dict_at(sts, "metadata").get("generation"),
                currentRevision=current_name,
                updateRevision=update_name,
                collisionCount=collision,
            )
            complete_rolling_update(sts, status)
            await self._write_status(sts, status)
        live = {current_name, update_name} | {pod_revision(p) for p in pods}
        known = revs + [r for r in (current, update) if r not in revs]
        await history.delete_revisions(
            self.client, self.rev_kind, history.history_to_delete(known, live, history.history_limit(sts))
        )
        min_ready = int(dict_at(sts, "spec").get("minReadySeconds") or 0)
        if min_ready > 0 and status.get("availableReplicas", 0) != replicas_of(sts):
            self.queue.add_after(key, float(min_ready))

    def _ref(self, sts: Mapping) -> dict:
        return object_reference(sts, "StatefulSet", "apps/v1")

    async def _revisions(self, sts: dict, revs: list[dict]) -> tuple[dict, dict, int]:
        collision = int(dict_at(sts, "status").get("collisionCount") or 0)
        annotations = dict_at(dict_at(sts, "metadata"), "annotations")
        candidate = history.new_revision(
            sts, self.sts_kind, history.next_revision(revs), annotations=annotations or None
        )
        equal = [r for r in revs if history.equal_data(r, candidate)]
        if equal and revs and equal[-1] is revs[-1]:
            update = revs[-1]
        elif equal:
            update = await history.set_revision_number(
                self.client, self.rev_kind, equal[-1], history.revision_number(candidate)
            )
        else:

            def hash_of(rev: dict, count: int) -> str:
                return history.data_hash(rev.get("data"), count)

            update, collision = await history.create_revision(
                self.client, self.rev_kind, sts, candidate, collision, hash_of
            )
        current_name = dict_at(sts, "status").get("currentRevision")
        current = next((r for r in revs if dict_at(r, "metadata").get("name") == current_name), None)
        return (current if current is not None else update), update, collision

    async def _execute(self, sts: dict, steps: list[Step], current: dict, update: dict) -> None:
        templates = {"current": history.template_of(current), "update": history.template_of(update)}
        rev_names = {
            "current": str(dict_at(current, "metadata").get("name")),
            "update": str(dict_at(update, "metadata").get("name")),
        }
        ns = str(dict_at(sts, "metadata").get("namespace", ""))
        set_name = str(dict_at(sts, "metadata").get("name", ""))
        creates = [s for s in steps if s.action == "create"]
        for s in steps:
            if s.action in ("recreate", "delete", "update") and s.pod is not None:
                pname = str(dict_at(s.pod, "metadata").get("name"))
                if s.action == "recreate":
                    failed = phase(s.pod) == FAILED
                    await self.events.record(
                        self._ref(sts),
                        "Warning" if failed else "Normal",
                        "RecreatingFailedPod" if failed else "RecreatingTerminatedPod",
                        f"StatefulSet {ns}/{set_name} is recreating {'failed' if failed else 'terminated'} Pod {pname}",
                    )
                await self._delete_pod(sts, s.pod)
            elif s.action == "identity" and s.pod is not None:
                await self._fix_identity(sts, s.pod)
            elif s.action == "claims":
                uid = str(dict_at(s.pod, "metadata").get("uid", "")) if s.pod is not None else ""
                await self._create_claims(sts, s.ordinal, pod_name(set_name, s.ordinal), uid)
        if creates:
            # Several creates only with Parallel management: at once, as a batch.
            results = await asyncio.gather(
                *(self._create_pod(sts, templates[s.revision], s.ordinal, rev_names[s.revision]) for s in creates),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r

    async def _create_pod(self, sts: dict, template: dict, ordinal: int, revision: str) -> None:
        ns = str(dict_at(sts, "metadata").get("namespace", ""))
        set_name = str(dict_at(sts, "metadata").get("name", ""))
        pod = new_pod(sts, self.sts_kind, template, ordinal, revision)
        pname = pod["metadata"]["name"]
        await self._create_claims(sts, ordinal, pname)
        try:
            await self.client.create(self.pods_kind, ns, pod)
        except st.ApiError as exc:
            if exc.code == 409 and exc.reason == "AlreadyExists":
                return  # made by the last sync; the informer has not shown it yet
            await self.events.record(
                self._ref(sts),
                "Warning",
                "FailedCreate",
                f"create Pod {pname} in StatefulSet {set_name} failed error: {exc.message}",
            )
            raise
        await self.events.record(
            self._ref(sts), "Normal", "SuccessfulCreate", f"create Pod {pname} in StatefulSet {set_name} successful"
        )

    async def _create_claims(self, sts: dict, ordinal: int, pname: str, pod_uid: str = "") -> None:
        """The claims of the pod at ``ordinal`` that do not exist yet."""
        ns = str(dict_at(sts, "metadata").get("namespace", ""))
        set_name = str(dict_at(sts, "metadata").get("name", ""))
        for c in new_claims(sts, ordinal):
            cname = c["metadata"]["name"]
            existing = self.claims.get(ns, cname)
            if existing is not None:
                if existing.deleting or stale_claim(sts, existing.object(), pname, pod_uid):
                    raise st.ApiError(
                        409, "Conflict", f"claim {cname} for pod {pname} is going away; waiting for it to be deleted"
                    )
                continue
            try:
                await self.client.create(self.pvc_kind, ns, c)
            except st.ApiError as exc:
                if exc.code == 409 and exc.reason == "AlreadyExists":
                    continue
                await self.events.record(
                    self._ref(sts),
                    "Warning",
                    "FailedCreate",
                    f"create Claim {cname} for Pod {pname} in StatefulSet {set_name} failed error: {exc.message}",
                )
                raise
            await self.events.record(
                self._ref(sts),
                "Normal",
                "SuccessfulCreate",
                f"create Claim {cname} Pod {pname} in StatefulSet {set_name} success",
            )

    async def _delete_pod(self, sts: dict, pod: dict) -> None:
        ns = str(dict_at(sts, "metadata").get("namespace", ""))
        set_name = str(dict_at(sts, "metadata").get("name", ""))
        pmd = dict_at(pod, "metadata")
        pname = str(pmd.get("name"))
        try:
            await self.client.delete(self.pods_kind, ns, pname, DeleteOptions(preconditions_uid=pmd.get("uid")))
        except st.ApiError as exc:
            if exc.code in (404, 409):
                return
            await self.events.record(
                self._ref(sts),
                "Warning",
                "FailedDelete",
                f"delete Pod {pname} in StatefulSet {set_name} failed error: {exc.message}",
            )
            raise
        await self.events.record(
            self._ref(sts), "Normal", "SuccessfulDelete", f"delete Pod {pname} in StatefulSet {set_name} successful"
        )

    async def _fix_identity(self, sts: dict, pod: dict) -> None:
        ns = str(dict_at(sts, "metadata").get("namespace", ""))
        pname = str(dict_at(pod, "metadata").get("name"))
        uid = dict_at(pod, "metadata").get("uid")

        def fix(cur: dict) -> dict:
            md = cur.setdefault("metadata", {})
            if md.get("uid") != uid:
                raise st.ApiError(409, "Conflict", "the pod was replaced")
            labels = md.get("labels") if isinstance(md.get("labels"), dict) else {}
            md["labels"] = {**labels, names.LABEL_STATEFULSET_POD_NAME: pname}
            return cur

        try:
            await self.client.update(self.pods_kind, ns, pname, fix)
        except st.ApiError as exc:
            if exc.code not in (404, 409):
                raise
            return
        await self.events.record(
            self._ref(sts),
            "Normal",
            "SuccessfulUpdate",
            f"update Pod {pname} in StatefulSet {dict_at(sts, 'metadata').get('name')} successful",
        )

    async def _fix_claims(self, sts: dict, pods: list[dict]) -> None:
        """Bring the owner references of the pods' claims in line with the retention policy."""
        if not claim_templates(sts):
            return
        ns = str(dict_at(sts, "metadata").get("namespace", ""))
        set_name = str(dict_at(sts, "metadata").get("name", ""))
        for p in pods:
            ordinal = parent_and_ordinal(str(dict_at(p, "metadata").get("name", "")))[1]
            if ordinal < 0 or is_terminating(p):
                continue
            for t in claim_templates(sts):
                cname = claim_name(str(dict_at(t, "metadata").get("name", "")), set_name, ordinal)
                e = self.claims.get(ns, cname)
                if e is None or e.deleting or claim_owner_changes(sts, e.object(), p) is None:
                    continue

                def edit(cur: dict, pod: dict = p) -> dict:
                    refs = claim_owner_changes(sts, cur, pod)
                    if refs is not None:
                        if refs:
                            cur.setdefault("metadata", {})["ownerReferences"] = refs
                        else:
                            cur.setdefault("metadata", {}).pop("ownerReferences", None)
                    return cur

                try:
                    await self.client.update(self.pvc_kind, ns, cname, edit)
                except st.ApiError as exc:
                    if exc.code != 404:
                        raise

    async def _write_status(self, sts: dict, status: dict) -> None:
        old = dict_at(sts, "status")
        # Zero counts and empty names are left out, as upstream's omitempty; replicas,
        # availableReplicas and collisionCount are always written.
        out = {k: v for k, v in status.items() if v or k in ("replicas", "availableReplicas", "collisionCount")}
        if "conditions" in old:
            out["conditions"] = old["conditions"]
        if out == old:
            return
        md = dict_at(sts, "metadata")

        def write(cur: dict) -> dict:
            cur["status"] = out
            return cur

        try:
            await self.client.update(
                self.sts_kind, str(md.get("namespace", "")), str(md.get("name", "")), write, subresource="status"
            )
        except st.ApiError as exc:
            if exc.code != 404:
                raise
