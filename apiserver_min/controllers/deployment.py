"""The Deployment controller: a Deployment's pods through ReplicaSets, one per pod
template ("revision"), rolled from the old to the new as upstream's controller does.

Each template gets the ReplicaSet ``<deployment>-<hash>``, where the hash (of the
template, salted by ``status.collisionCount`` after a name collision) is also the
``pod-template-hash`` label of its selector, template and pods, which keeps the sets'
pods apart (the hash DaemonSets use for their revisions, ``history.template_hash``).
A sync claims the sets the selector matches, then, in upstream's order:

- being deleted: only the status is brought up to date;
- paused, or only ``spec.replicas`` changed (a set's ``desired-replicas`` annotation
  differs): scale. With one active set that one takes the count; during a rollout the
  difference is shared out in proportion to the sets' sizes (largest first);
- ``Recreate``: every old set to 0, wait until their pods are gone, then the new set
  to ``spec.replicas``;
- ``RollingUpdate``: the new set up as far as ``maxSurge`` allows, then the old sets
  down as far as ``maxUnavailable`` allows (unhealthy pods first), again and again as
  the new pods turn available;
- old sets with no pods beyond ``revisionHistoryLimit`` are deleted once the rollout
  is complete; the status (counts and the ``Available``, ``Progressing`` and
  ``ReplicaFailure`` conditions, with ``progressDeadlineSeconds``) is written through
  the status sub-resource.

Writes carry the resourceVersion the informer showed: a decision made on stale data
fails with a conflict and the Deployment is synced again.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from typing import Any, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at, list_at
from ..api.kinds import KindInfo
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..api.timeutil import format_rfc3339, parse_rfc3339
from ..api.timeutil import now as utc_now
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..registry.apps import int_or_percent_value
from ..storage.cacher import CacheEvent, Entry
from . import podcontrol as pc
from .history import template_hash
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.deployment")

Key = tuple[str, str]

REVISION = names.ANNOTATION_DEPLOYMENT_REVISION
REVISION_HISTORY = names.ANNOTATION_DEPLOYMENT_REVISION_HISTORY
DESIRED_REPLICAS = names.ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS
MAX_REPLICAS = names.ANNOTATION_DEPLOYMENT_MAX_REPLICAS
HASH_LABEL = names.LABEL_POD_TEMPLATE_HASH
MAX_REVISION_HISTORY_CHARS = 2000
# Annotations of a Deployment its ReplicaSets do not copy.
SKIPPED_ANNOTATIONS = frozenset(
    {
        names.ANNOTATION_LAST_APPLIED,
        REVISION,
        REVISION_HISTORY,
        DESIRED_REPLICAS,
        MAX_REPLICAS,
        "deprecated.deployment.rollback.to",
    }
)
MAX_INT32 = 2**31 - 1

# Condition types and reasons (upstream's).
AVAILABLE, PROGRESSING, REPLICA_FAILURE = "Available", "Progressing", "ReplicaFailure"
MIN_AVAILABLE, MIN_UNAVAILABLE = "MinimumReplicasAvailable", "MinimumReplicasUnavailable"
NEW_RS_CREATED, FOUND_NEW_RS, RS_UPDATED = "NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"
NEW_RS_AVAILABLE, TIMED_OUT, FAILED_RS_CREATE = (
    "NewReplicaSetAvailable",
    "ProgressDeadlineExceeded",
    "ReplicaSetCreateError",
)
PAUSED, RESUMED = "DeploymentPaused", "DeploymentResumed"


# --- arithmetic -------------------------------------------------------------------------------


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def replicas(obj: Mapping) -> int:
    """``spec.replicas`` of a Deployment or ReplicaSet (1 when unset, as defaulted)."""
    return _int(dict_at(obj, "spec").get("replicas"), 1)


def status_int(obj: Mapping, field: str) -> int:
    return _int(dict_at(obj, "status").get(field))


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """An IntOrString against ``total``: an integer as it is, a percentage of ``total``
    rounded up or down. Anything else is refused (validation keeps it out)."""
    if isinstance(value, str):
        pct = int_or_percent_value(value)
        if pct is None:
            raise ValueError(f"invalid value for IntOrString: invalid value {value!r}")
        exact = pct * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return _int(value)


def resolve_fenceposts(max_surge: Any, max_unavailable: Any, desired: int) -> tuple[int, int]:
    """``maxSurge`` (rounded up) and ``maxUnavailable`` (rounded down) of ``desired``
    pods; both 0 (a small percentage) makes ``maxUnavailable`` 1, so a rollout moves."""
    surge = scaled_value(max_surge if max_surge is not None else 0, desired, True)
    unavailable = scaled_value(max_unavailable if max_unavailable is not None else 0, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def is_rolling(d: Mapping) -> bool:
    return dict_at(dict_at(d, "spec"), "strategy").get("type", "RollingUpdate") == "RollingUpdate"


def _rolling_params(d: Mapping) -> tuple[Any, Any]:
    rolling = dict_at(dict_at(dict_at(d, "spec"), "strategy"), "rollingUpdate")
    return rolling.get("maxSurge", "25%"), rolling.get("maxUnavailable", "25%")


def max_surge(d: Mapping) -> int:
    if not is_rolling(d):
        return 0
    surge, _ = resolve_fenceposts(*_rolling_params(d), replicas(d))
    return surge


def max_unavailable(d: Mapping) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    _, unavailable = resolve_fenceposts(*_rolling_params(d), replicas(d))
    return min(unavailable, replicas(d))


def new_rs_new_replicas(d: Mapping, all_rss: list[dict], new_rs: Mapping) -> int:
    """How big the new set may be now: rolling, as far as ``replicas + maxSurge`` pods
    in all sets allows (never beyond ``replicas``); Recreate, ``replicas`` at once."""
    if not is_rolling(d):
        return replicas(d)
    max_total = replicas(d) + max_surge(d)
    current = sum(replicas(rs) for rs in all_rss)
    if current >= max_total:
        return replicas(new_rs)
    scale_up = min(max_total - current, replicas(d) - replicas(new_rs))
    return replicas(new_rs) + scale_up


def _annotation_int(rs: Mapping, key: str) -> int | None:
    value = dict_at(dict_at(rs, "metadata"), "annotations").get(key)
    try:
        return int(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def rs_fraction(rs: Mapping, d: Mapping) -> int:
    """How many replicas ``rs`` gains (or loses) when the Deployment is resized, in
    proportion to its share of the size recorded in its ``max-replicas`` annotation."""
    if replicas(d) == 0:
        return -replicas(rs)
    deployment_replicas = replicas(d) + max_surge(d)
    annotated = _annotation_int(rs, MAX_REPLICAS)
    if annotated is None:
        annotated = status_int(d, "replicas")
    if annotated == 0:
        return 0
    return _round_half_away(replicas(rs) * deployment_replicas / annotated) - replicas(rs)


def proportion(rs: Mapping, d: Mapping, to_add: int, added: int) -> int:
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = rs_fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def _created(rs: Mapping) -> tuple[float, str]:
    md = dict_at(rs, "metadata")
    ts = md.get("creationTimestamp")
    try:
        when = parse_rfc3339(ts).timestamp() if isinstance(ts, str) and ts else 0.0
    except ValueError:
        when = 0.0
    return when, str(md.get("name", ""))


def revision(rs: Mapping) -> int:
    return _annotation_int(rs, REVISION) or 0


def active(rss: list[dict]) -> list[dict]:
    return [rs for rs in rss if replicas(rs) > 0]


def _without_empty(value: Any) -> Any:
    """A null, empty object or empty list reads as an absent field, as upstream's
    semantic equality has it (kubectl sends a template back with ``creationTimestamp:
    null`` and ``resources: {}``)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = _without_empty(v)
            if v is not None and v != {} and v != []:
                out[k] = v
        return out
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _without_hash(template: Mapping) -> dict:
    t = _without_empty(template)
    labels = dict_at(t, "metadata").get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
        if not labels:
            t["metadata"].pop("labels", None)
    if "metadata" in t and not t["metadata"]:
        t.pop("metadata")
    return t


def equal_ignore_hash(a: Mapping, b: Mapping) -> bool:
    """Two pod templates equal but for the ``pod-template-hash`` label."""
    return _without_hash(a) == _without_hash(b)


def find_new_rs(d: Mapping, rss: list[dict]) -> dict | None:
    """The oldest set whose template is the Deployment's."""
    template = dict_at(dict_at(d, "spec"), "template")
    for rs in sorted(rss, key=_created):
        if equal_ignore_hash(dict_at(dict_at(rs, "spec"), "template"), template):
            return rs
    return None


def find_active_or_latest(new_rs: dict | None, old_rss: list[dict]) -> dict | None:
    """The one set with pods, or the newest when none has any; None when several have."""
    if new_rs is None and not old_rss:
        return None
    newest_first = sorted(old_rss, key=_created, reverse=True)
    alive = active(newest_first + ([new_rs] if new_rs is not None else []))
    if not alive:
        return new_rs if new_rs is not None else newest_first[0]
    if len(alive) == 1:
        return alive[0]
    return None


# --- conditions and status --------------------------------------------------------------------


def new_condition(ctype: str, status: str, reason: str, message: str) -> dict:
    ts = format_rfc3339(utc_now())
    return {
        "type": ctype,
        "status": status,
        "lastUpdateTime": ts,
        "lastTransitionTime": ts,
        "reason": reason,
        "message": message,
    }


def get_condition(status: Mapping, ctype: str) -> dict | None:
    for c in list_at(status, "conditions"):
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def set_condition(status: dict, cond: dict) -> None:
    """Upstream SetDeploymentCondition: the same status and reason leave the condition
    as it is; the same status keeps its transition time."""
    current = get_condition(status, cond["type"])
    if current is not None and current.get("status") == cond["status"] and current.get("reason") == cond["reason"]:
        return
    if current is not None and current.get("status") == cond["status"]:
        cond["lastTransitionTime"] = current.get("lastTransitionTime", cond["lastTransitionTime"])
    remove_condition(status, cond["type"])
    status.setdefault("conditions", []).append(cond)


def remove_condition(status: dict, ctype: str) -> None:
    conds = [c for c in list_at(status, "conditions") if isinstance(c, dict) and c.get("type") != ctype]
    if conds:
        status["conditions"] = conds
    else:
        status.pop("conditions", None)


def has_progress_deadline(d: Mapping) -> bool:
    value = dict_at(d, "spec").get("progressDeadlineSeconds")
    return isinstance(value, int) and value != MAX_INT32


def calculate_status(all_rss: list[dict], new_rs: dict | None, d: Mapping) -> dict:
    available = sum(status_int(rs, "availableReplicas") for rs in all_rss)
    total = sum(replicas(rs) for rs in all_rss)
    counts = {
        "observedGeneration": _int(dict_at(d, "metadata").get("generation")),
        "replicas": sum(status_int(rs, "replicas") for rs in all_rss),
        "updatedReplicas": status_int(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(status_int(rs, "readyReplicas") for rs in all_rss),
        "availableReplicas": available,
        "unavailableReplicas": max(total - available, 0),
    }
    status: dict[str, Any] = {k: val for k, val in counts.items() if val}
    old = dict_at(d, "status")
    if "collisionCount" in old:
        status["collisionCount"] = old["collisionCount"]
    conds = [copy.deepcopy(c) for c in list_at(old, "conditions") if isinstance(c, dict)]
    if conds:
        status["conditions"] = conds
    if available >= replicas(d) - max_unavailable(d):
        set_condition(status, new_condition(AVAILABLE, "True", MIN_AVAILABLE, "Deployment has minimum availability."))
    else:
        set_condition(
            status, new_condition(AVAILABLE, "False", MIN_UNAVAILABLE, "Deployment does not have minimum availability.")
        )
    return status


def deployment_complete(d: Mapping, status: Mapping) -> bool:
    want = replicas(d)
    return (
        _int(status.get("updatedReplicas")) == want
        and _int(status.get("replicas")) == want
        and _int(status.get("availableReplicas")) == want
        and _int(status.get("observedGeneration")) >= _int(dict_at(d, "metadata").get("generation"))
    )


def deployment_progressing(d: Mapping, new: Mapping) -> bool:
    old = dict_at(d, "status")
    old_old = _int(old.get("replicas")) - _int(old.get("updatedReplicas"))
    new_old = _int(new.get("replicas")) - _int(new.get("updatedReplicas"))
    return (
        _int(new.get("updatedReplicas")) > _int(old.get("updatedReplicas"))
        or new_old < old_old
        or _int(new.get("readyReplicas")) > _int(old.get("readyReplicas"))
        or _int(new.get("availableReplicas")) > _int(old.get("availableReplicas"))
    )


def _cond_time(cond: Mapping, field: str) -> float:
    ts = cond.get(field)
    try:
        return parse_rfc3339(ts).timestamp() if isinstance(ts, str) and ts else 0.0
    except ValueError:
        return 0.0


def deployment_timed_out(d: Mapping, status: Mapping, now: float) -> bool:
    if not has_progress_deadline(d):
        return False
    cond = get_condition(status, PROGRESSING)
    if cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    deadline = _int(dict_at(d, "spec").get("progressDeadlineSeconds"))
    return _cond_time(cond, "lastUpdateTime") + deadline < now


def editable_copy(rs: Mapping) -> dict:
    """A copy of ``rs`` whose metadata, annotations and spec (its top level) may be
    changed; the rest is shared, read only (the client copies what it writes)."""
    out = dict(rs)
    md = out["metadata"] = dict(dict_at(rs, "metadata"))
    if isinstance(md.get("annotations"), dict):
        md["annotations"] = dict(md["annotations"])
    out["spec"] = dict(dict_at(rs, "spec"))
    return out


def _replicas_annotations_need_update(rs: Mapping, desired: int, max_total: int) -> bool:
    ann = dict_at(dict_at(rs, "metadata"), "annotations")
    return ann.get(DESIRED_REPLICAS) != str(desired) or ann.get(MAX_REPLICAS) != str(max_total)


def _set_replicas_annotations(rs: dict, desired: int, max_total: int) -> bool:
    ann = rs.setdefault("metadata", {}).setdefault("annotations", {})
    changed = False
    for key, value in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(max_total))):
        if ann.get(key) != value:
            ann[key] = value
            changed = True
    return changed


def set_new_rs_annotations(d: Mapping, rs: dict, new_revision: str, exists: bool) -> bool:
    """The Deployment's annotations copied to the set, its revision raised to
    ``new_revision`` (the one it had joins ``revision-history``), and on a new set the
    replica counts; whether anything changed."""
    ann = rs.setdefault("metadata", {}).setdefault("annotations", {})
    changed = False
    for k, val in dict_at(dict_at(d, "metadata"), "annotations").items():
        if k in SKIPPED_ANNOTATIONS or ann.get(k) == val:
            continue
        ann[k] = val
        changed = True
    old_revision = ann.get(REVISION, "")
    try:
        old_int = int(old_revision) if old_revision else 0
    except ValueError:
        return changed
    new_int = int(new_revision)
    if old_int < new_int:
        ann[REVISION] = new_revision
        changed = True
        if old_revision:
            history = [h for h in str(ann.get(REVISION_HISTORY, "")).split(",") if h] + [old_revision]
            while len(",".join(history)) > MAX_REVISION_HISTORY_CHARS and len(history) > 1:
                history.pop(0)
            ann[REVISION_HISTORY] = ",".join(history)
    if not exists and _set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)):
        changed = True
    if not ann:
        rs["metadata"].pop("annotations", None)
    return changed


def deployment_selector(d: Mapping) -> LabelSelector:
    sel = dict_at(d, "spec").get("selector")
    if not isinstance(sel, dict):
        return LabelSelector.nothing()
    try:
        return label_selector_from_dict(sel)
    except SelectorError:
        return LabelSelector.nothing()


# --- the controller ---------------------------------------------------------------------------


class DeploymentController:
    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.kind = informers.kind(names.APPS_GROUP, "v1", "deployments")
        self.rs_kind: KindInfo = informers.kind(names.APPS_GROUP, "v1", "replicasets")
        self.pod_kind = informers.kind("", "v1", "pods")
        self.deployments = informers.for_kind(self.kind)
        self.sets = informers.for_kind(self.rs_kind)
        self.pods = informers.for_kind(self.pod_kind)
        self.events = EventRecorder(client, informers.registry, "deployment-controller")
        self.queue = RateLimitedQueue()

    def start(self) -> None:
        self.deployments.add_handler(self.on_deployment)
        self.sets.add_handler(self.on_replica_set)
        self.pods.add_handler(self.on_pod)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "Deployment")

    # --- events ------------------------------------------------------------------------

    def on_deployment(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.deployments.list():
                self.queue.add((e.namespace, e.name))
            return
        self.queue.add((ev.entry.namespace, ev.entry.name))

    def _owner_of(self, obj: Mapping) -> Entry | None:
        ref = pc.controller_of(obj)
        if ref is None or ref.get("kind") != self.kind.kind or ref.get("apiVersion") != pc.api_version_of(self.kind):
            return None
        entry = self.deployments.get(str(dict_at(obj, "metadata").get("namespace", "")), str(ref.get("name", "")))
        return entry if entry is not None and entry.uid == ref.get("uid") else None

    def _enqueue_owner(self, obj: Mapping) -> bool:
        owner = self._owner_of(obj)
        if owner is not None:
            self.queue.add((owner.namespace, owner.name))
        return owner is not None

    def on_replica_set(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return  # the Deployments' own replay syncs them all
        rs = ev.entry.object()
        if ev.type == "DELETED" or ev.entry.deleting:
            self._enqueue_owner(rs)
            return
        old = ev.prev.object() if ev.type == "MODIFIED" and ev.prev is not None else None
        if old is not None and pc.controller_of(old) != pc.controller_of(rs):
            self._enqueue_owner(old)
        if self._enqueue_owner(rs) or pc.controller_of(rs) is not None:
            return
        labels_changed = old is None or dict_at(old, "metadata").get("labels") != dict_at(rs, "metadata").get("labels")
        if labels_changed or (old is not None and pc.controller_of(old) is not None):
            for e in self.deployments.list(ev.entry.namespace):
                if deployment_selector(e.object()).matches(ev.entry.labels):
                    self.queue.add((e.namespace, e.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        """A pod gone may let a Recreate rollout start its new pods."""
        if ev is None or ev.type != "DELETED":
            return
        ref = pc.controller_of(ev.entry.object())
        if ref is None or ref.get("kind") != self.rs_kind.kind:
            return
        rs = self.sets.get(ev.entry.namespace, str(ref.get("name", "")))
        if rs is None:
            return
        owner = self._owner_of(rs.object())
        if owner is not None and not is_rolling(owner.object()):
            self.queue.add((owner.namespace, owner.name))

    # --- sync --------------------------------------------------------------------------

    async def sync(self, key: Key) -> None:
        ns, name = key
        entry = self.deployments.get(ns, name)
        if entry is None:
            return
        d = entry.object()
        sel = dict_at(dict_at(d, "spec"), "selector")
        if not sel.get("matchLabels") and not sel.get("matchExpressions"):
            await self.events.record(
                pc.object_reference(d, self.kind),
                "Warning",
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            return
        rs_list = await self.replica_sets_of(d)
        if dict_at(d, "metadata").get("deletionTimestamp"):
            new_rs, old_rss = await self.sync_revision(d, rs_list, create=False)
            await self.sync_status(old_rss + ([new_rs] if new_rs else []), new_rs, d)
            return
        await self.check_paused_conditions(d)
        if dict_at(d, "spec").get("paused") or await self.is_scaling_event(d, rs_list):
            await self.sync_scale(d, rs_list)
        elif is_rolling(d):
            await self.rollout_rolling(d, rs_list)
        else:
            await self.rollout_recreate(d, rs_list)

    async def replica_sets_of(self, d: dict) -> list[dict]:
        md = d["metadata"]
        ns, uid = md["namespace"], md.get("uid")
        selector = deployment_selector(d)
        candidates = [e.object() for e in self.sets.claimable(ns, str(uid or ""), selector)]

        async def fresh() -> dict | None:
            try:
                return await self.client.get(self.kind, ns, md["name"])
            except st.ApiError as exc:
                if exc.code == 404:
                    return None
                raise

        claimed = await pc.claim(self.client, self.rs_kind, d, self.kind, selector, candidates, owner_fresh=fresh)
        if claimed.errors:
            raise claimed.errors[0]
        return claimed.pods

    # --- writes --------------------------------------------------------------------------

    async def write_status(self, d: dict) -> None:
        """The Deployment's status and annotations, as ``d`` has them, through the status
        sub-resource; ``d`` becomes what was stored."""
        md = d["metadata"]
        stored = await self.client.update(self.kind, md["namespace"], md["name"], d, subresource="status")
        d.clear()
        d.update(stored)

    async def update_rs(self, rs: dict, changed: dict) -> None:
        md = rs["metadata"]
        stored = await self.client.update(self.rs_kind, md["namespace"], md["name"], changed)
        rs.clear()
        rs.update(stored)

    def _event(self, d: dict, type_: str, reason: str, message: str) -> Any:
        return self.events.record(pc.object_reference(d, self.kind), type_, reason, message)

    async def scale_rs(self, rs: dict, new_scale: int, d: dict, operation: str) -> bool:
        old_scale = replicas(rs)
        size_changes = old_scale != new_scale
        want, most = replicas(d), replicas(d) + max_surge(d)
        if size_changes or _replicas_annotations_need_update(rs, want, most):
            changed = editable_copy(rs)
            changed["spec"]["replicas"] = new_scale
            _set_replicas_annotations(changed, want, most)
            await self.update_rs(rs, changed)
            if size_changes:
                await self._event(
                    d,
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled {operation} replica set {rs['metadata']['name']} to {new_scale} from {old_scale}",
                )
        return size_changes

    async def scale_rs_and_record(self, rs: dict, new_scale: int, d: dict) -> bool:
        if replicas(rs) == new_scale:
            return False
        return await self.scale_rs(rs, new_scale, d, "up" if replicas(rs) < new_scale else "down")

    # --- revisions -------------------------------------------------------------------------

    def _set_deployment_revision(self, d: dict, rev: str) -> bool:
        ann = d["metadata"].setdefault("annotations", {})
        changed = False
        if ann.get(REVISION) != rev:
            ann[REVISION] = rev
            changed = True
        # kubectl's rollback copies a ReplicaSet's annotations to the Deployment but for
        # upstream's spelling of these two: they belong to ReplicaSets only.
        for key in (DESIRED_REPLICAS, MAX_REPLICAS):
            if ann.pop(key, None) is not None:
                changed = True
        return changed

    async def sync_revision(self, d: dict, rs_list: list[dict], create: bool) -> tuple[dict | None, list[dict]]:
        """The new set (made when ``create`` and missing) and the old ones; the new set's
        revision annotations, ``minReadySeconds`` and the Deployment's revision brought up to date."""
        existing = find_new_rs(d, rs_list)
        old_rss = [rs for rs in rs_list if rs is not existing]
        new_revision = str(max((revision(rs) for rs in old_rss), default=0) + 1)
        spec = d["spec"]
        min_ready = _int(spec.get("minReadySeconds"))
        if existing is not None:
            changed = editable_copy(existing)
            annotations_updated = set_new_rs_annotations(d, changed, new_revision, exists=True)
            if annotations_updated or _int(dict_at(existing, "spec").get("minReadySeconds")) != min_ready:
                changed["spec"]["minReadySeconds"] = min_ready
                await self.update_rs(existing, changed)
            needs_update = self._set_deployment_revision(d, str(revision(existing)))
            if has_progress_deadline(d) and get_condition(dict_at(d, "status"), PROGRESSING) is None:
                msg = f'Found new replica set "{existing["metadata"]["name"]}"'
                set_condition(d.setdefault("status", {}), new_condition(PROGRESSING, "True", FOUND_NEW_RS, msg))
                needs_update = True
            if needs_update:
                await self.write_status(d)
            return existing, old_rss
        if not create:
            return None, old_rss
        return await self._create_new_rs(d, old_rss, new_revision), old_rss

    async def new_and_old(self, d: dict, rs_list: list[dict]) -> tuple[dict, list[dict]]:
        """:meth:`sync_revision` making the new set when missing."""
        new_rs, old_rss = await self.sync_revision(d, rs_list, create=True)
        if new_rs is None:  # (sync_revision makes it or raises)
            raise RuntimeError("no new replica set after creating it")
        return new_rs, old_rss

    async def _create_new_rs(self, d: dict, old_rss: list[dict], new_revision: str) -> dict:
        md, spec = d["metadata"], d["spec"]
        ns = md["namespace"]
        collision = dict_at(d, "status").get("collisionCount")
        collision = collision if isinstance(collision, int) else None
        template = copy.deepcopy(dict_at(spec, "template"))
        pod_hash = template_hash(template, collision)
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
        selector = copy.deepcopy(dict_at(spec, "selector"))
        selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
        rs: dict[str, Any] = {
            "apiVersion": pc.api_version_of(self.rs_kind),
            "kind": self.rs_kind.kind,
            "metadata": {
                "name": f"{md['name']}-{pod_hash}",
                "namespace": ns,
                "ownerReferences": [pc.controller_ref(d, pc.api_version_of(self.kind), self.kind.kind)],
                "labels": dict(template["metadata"]["labels"]),
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": _int(spec.get("minReadySeconds")),
                "selector": selector,
                "template": template,
            },
        }
        count = new_rs_new_replicas(d, old_rss + [rs], rs)
        rs["spec"]["replicas"] = count
        set_new_rs_annotations(d, rs, new_revision, exists=False)
        already_exists = False
        try:
            created = await self.client.create(self.rs_kind, ns, rs)
        except st.ApiError as exc:
            if exc.code == 409 and exc.reason == "AlreadyExists":
                found = await self.client.get(self.rs_kind, ns, rs["metadata"]["name"])
                ref = pc.controller_of(found)
                same = (
                    ref is not None
                    and ref.get("uid") == md.get("uid")
                    and equal_ignore_hash(dict_at(found["spec"], "template"), dict_at(spec, "template"))
                )
                if not same:
                    # Another template (or owner) has this name: salt the hash and come again.
                    d.setdefault("status", {})["collisionCount"] = (collision or 0) + 1
                    await self.write_status(d)
                    raise
                created, already_exists = found, True
            else:
                msg = f'Failed to create new replica set "{rs["metadata"]["name"]}": {exc.message}'
                if has_progress_deadline(d):
                    set_condition(
                        d.setdefault("status", {}), new_condition(PROGRESSING, "False", FAILED_RS_CREATE, msg)
                    )
                    try:
                        await self.write_status(d)
                    except st.ApiError:
                        pass  # the create's failure is the one to report
                await self._event(d, "Warning", FAILED_RS_CREATE, msg)
                raise
        if not already_exists and count > 0:
            await self._event(
                d, "Normal", "ScalingReplicaSet", f"Scaled up replica set {created['metadata']['name']} to {count}"
            )
        needs_update = self._set_deployment_revision(d, new_revision)
        if not already_exists and has_progress_deadline(d):
            msg = f'Created new replica set "{created["metadata"]["name"]}"'
            set_condition(d.setdefault("status", {}), new_condition(PROGRESSING, "True", NEW_RS_CREATED, msg))
            needs_update = True
        if needs_update:
            await self.write_status(d)
        return created

    # --- pause, scale -------------------------------------------------------------------

    async def check_paused_conditions(self, d: dict) -> None:
        if not has_progress_deadline(d):
            return
        status = d.setdefault("status", {})
        cond = get_condition(status, PROGRESSING)
        if cond is not None and cond.get("reason") == TIMED_OUT:
            return
        paused_cond = cond is not None and cond.get("reason") == PAUSED
        if dict_at(d, "spec").get("paused") and not paused_cond:
            set_condition(status, new_condition(PROGRESSING, "Unknown", PAUSED, "Deployment is paused"))
        elif not dict_at(d, "spec").get("paused") and paused_cond:
            set_condition(status, new_condition(PROGRESSING, "Unknown", RESUMED, "Deployment is resumed"))
        else:
            return
        await self.write_status(d)

    async def is_scaling_event(self, d: dict, rs_list: list[dict]) -> bool:
        new_rs, old_rss = await self.sync_revision(d, rs_list, create=False)
        for rs in active(old_rss + ([new_rs] if new_rs is not None else [])):
            desired = _annotation_int(rs, DESIRED_REPLICAS)
            if desired is not None and desired != replicas(d):
                return True
        return False

    async def sync_scale(self, d: dict, rs_list: list[dict]) -> None:
        new_rs, old_rss = await self.sync_revision(d, rs_list, create=False)
        await self.scale(d, new_rs, old_rss)
        if dict_at(d, "spec").get("paused"):
            await self.cleanup(d, old_rss)
        await self.sync_status(old_rss + ([new_rs] if new_rs is not None else []), new_rs, d)

    async def scale(self, d: dict, new_rs: dict | None, old_rss: list[dict]) -> None:
        """Upstream's scale: one active set takes the Deployment's size; a saturated new
        set empties the old ones; otherwise the change is shared out proportionally."""
        want = replicas(d)
        target = find_active_or_latest(new_rs, old_rss)
        if target is not None:
            if replicas(target) != want:
                await self.scale_rs_and_record(target, want, d)
            return
        if (
            new_rs is not None
            and replicas(new_rs) == want
            and _annotation_int(new_rs, DESIRED_REPLICAS) == want
            and status_int(new_rs, "availableReplicas") == want
        ):
            for rs in active(old_rss):
                await self.scale_rs_and_record(rs, 0, d)
            return
        if not is_rolling(d):
            return
        all_rss = active(old_rss + ([new_rs] if new_rs is not None else []))
        allowed = want + max_surge(d) if want > 0 else 0
        to_add = allowed - sum(replicas(rs) for rs in all_rss)
        if to_add != 0:  # larger first; of equal size, newer first when growing, older when shrinking
            all_rss.sort(key=_created, reverse=to_add > 0)
            all_rss.sort(key=lambda rs: -replicas(rs))
        added = 0
        sizes: dict[str, int] = {}
        for rs in all_rss:
            name = rs["metadata"]["name"]
            if to_add != 0:
                share = proportion(rs, d, to_add, added)
                sizes[name] = replicas(rs) + share
                added += share
            else:
                sizes[name] = replicas(rs)
        if added != to_add and all_rss:
            first = all_rss[0]["metadata"]["name"]
            sizes[first] = max(sizes[first] + to_add - added, 0)
        operation = "up" if to_add > 0 else "down"
        for rs in all_rss:
            await self.scale_rs(rs, sizes[rs["metadata"]["name"]], d, operation)

    # --- rolling update ------------------------------------------------------------------

    async def rollout_rolling(self, d: dict, rs_list: list[dict]) -> None:
        new_rs, old_rss = await self.new_and_old(d, rs_list)
        all_rss = old_rss + [new_rs]
        if await self.reconcile_new_rs(all_rss, new_rs, d):
            await self.sync_rollout_status(all_rss, new_rs, d)
            return
        if await self.reconcile_old_rss(all_rss, active(old_rss), new_rs, d):
            await self.sync_rollout_status(all_rss, new_rs, d)
            return
        if deployment_complete(d, dict_at(d, "status")):
            await self.cleanup(d, old_rss)
        await self.sync_rollout_status(all_rss, new_rs, d)

    async def reconcile_new_rs(self, all_rss: list[dict], new_rs: dict, d: dict) -> bool:
        want = replicas(d)
        if replicas(new_rs) == want:
            return False
        if replicas(new_rs) > want:
            return await self.scale_rs_and_record(new_rs, want, d)
        return await self.scale_rs_and_record(new_rs, new_rs_new_replicas(d, all_rss, new_rs), d)

    async def reconcile_old_rss(self, all_rss: list[dict], old_rss: list[dict], new_rs: dict, d: dict) -> bool:
        if sum(replicas(rs) for rs in old_rss) == 0:
            return False
        all_pods = sum(replicas(rs) for rs in all_rss)
        min_available = replicas(d) - max_unavailable(d)
        new_unavailable = replicas(new_rs) - status_int(new_rs, "availableReplicas")
        max_scaled_down = all_pods - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        cleaned = await self.cleanup_unhealthy(old_rss, d, max_scaled_down)
        scaled = await self.scale_down_old_for_rolling(all_rss, old_rss, d)
        return cleaned + scaled > 0

    async def cleanup_unhealthy(self, old_rss: list[dict], d: dict, max_cleanup: int) -> int:
        """Old sets' pods that are not available go first, up to ``max_cleanup``."""
        total = 0
        for rs in sorted(old_rss, key=_created):
            if total >= max_cleanup:
                break
            if replicas(rs) == 0:
                continue
            unhealthy = replicas(rs) - status_int(rs, "availableReplicas")
            if unhealthy <= 0:
                continue
            down = min(max_cleanup - total, unhealthy)
            await self.scale_rs_and_record(rs, replicas(rs) - down, d)
            total += down
        return total

    async def scale_down_old_for_rolling(self, all_rss: list[dict], old_rss: list[dict], d: dict) -> int:
        min_available = replicas(d) - max_unavailable(d)
        available = sum(status_int(rs, "availableReplicas") for rs in all_rss)
        if available <= min_available:
            return 0
        budget = available - min_available
        total = 0
        for rs in sorted(old_rss, key=_created):
            if total >= budget:
                break
            if replicas(rs) == 0:
                continue
            down = min(replicas(rs), budget - total)
            await self.scale_rs_and_record(rs, replicas(rs) - down, d)
            total += down
        return total

    # --- recreate ------------------------------------------------------------------------

    async def rollout_recreate(self, d: dict, rs_list: list[dict]) -> None:
        new_rs, old_rss = await self.sync_revision(d, rs_list, create=False)
        all_rss = old_rss + ([new_rs] if new_rs is not None else [])
        scaled = False
        for rs in active(old_rss):
            scaled = await self.scale_rs_and_record(rs, 0, d) or scaled
        if scaled or self.old_pods_running(new_rs, old_rss):
            await self.sync_rollout_status(all_rss, new_rs, d)
            return
        if new_rs is None:
            new_rs, old_rss = await self.new_and_old(d, rs_list)
            all_rss = old_rss + [new_rs]
        await self.scale_rs_and_record(new_rs, replicas(d), d)
        if deployment_complete(d, dict_at(d, "status")):
            await self.cleanup(d, old_rss)
        await self.sync_rollout_status(all_rss, new_rs, d)

    def old_pods_running(self, new_rs: dict | None, old_rss: list[dict]) -> bool:
        if sum(status_int(rs, "replicas") for rs in old_rss) > 0:
            return True
        old_uids = {dict_at(rs, "metadata").get("uid") for rs in old_rss}
        old_uids.discard(dict_at(new_rs, "metadata").get("uid") if new_rs is not None else None)
        ns = dict_at(old_rss[0], "metadata").get("namespace", "") if old_rss else ""
        for pe in self.pods.list(str(ns)) if old_rss else ():
            if not any(o[0] in old_uids for o in pe.owners):
                continue
            pod = pe.object()
            ref = pc.controller_of(pod)
            if ref is None or ref.get("uid") not in old_uids:
                continue
            if dict_at(pod, "status").get("phase") not in (pc.SUCCEEDED, pc.FAILED):
                return True
        return False

    # --- history and status ------------------------------------------------------------

    async def cleanup(self, d: dict, old_rss: list[dict]) -> None:
        """Delete the oldest old sets without pods beyond ``revisionHistoryLimit``."""
        limit = dict_at(d, "spec").get("revisionHistoryLimit")
        if not isinstance(limit, int):
            return
        alive = [rs for rs in old_rss if not dict_at(rs, "metadata").get("deletionTimestamp")]
        extra = len(alive) - limit
        if extra <= 0:
            return
        alive.sort(key=lambda rs: (revision(rs), _created(rs)))
        for rs in alive[:extra]:
            md = rs["metadata"]
            if (
                status_int(rs, "replicas") != 0
                or replicas(rs) != 0
                or _int(md.get("generation")) > status_int(rs, "observedGeneration")
            ):
                continue
            try:
                await self.client.delete(self.rs_kind, md["namespace"], md["name"])
            except st.ApiError as exc:
                if exc.code != 404:
                    raise

    async def sync_status(self, all_rss: list[dict], new_rs: dict | None, d: dict) -> None:
        status = calculate_status(all_rss, new_rs, d)
        if status != dict_at(d, "status"):
            d["status"] = status
            await self.write_status(d)

    async def sync_rollout_status(self, all_rss: list[dict], new_rs: dict | None, d: dict) -> None:
        status = calculate_status(all_rss, new_rs, d)
        now = time.time()
        if not has_progress_deadline(d):
            remove_condition(status, PROGRESSING)
        current = get_condition(dict_at(d, "status"), PROGRESSING)
        complete = (
            _int(status.get("replicas")) == _int(status.get("updatedReplicas"))
            and current is not None
            and current.get("reason") == NEW_RS_AVAILABLE
        )
        if has_progress_deadline(d) and not complete:
            what = (
                f'ReplicaSet "{new_rs["metadata"]["name"]}"'
                if new_rs is not None
                else f'Deployment "{d["metadata"]["name"]}"'
            )
            if deployment_complete(d, status):
                set_condition(
                    status, new_condition(PROGRESSING, "True", NEW_RS_AVAILABLE, f"{what} has successfully progressed.")
                )
            elif deployment_progressing(d, status):
                cond = new_condition(PROGRESSING, "True", RS_UPDATED, f"{what} is progressing.")
                if current is not None:
                    if current.get("status") == "True":
                        cond["lastTransitionTime"] = current.get("lastTransitionTime", cond["lastTransitionTime"])
                    remove_condition(status, PROGRESSING)
                set_condition(status, cond)
            elif deployment_timed_out(d, status, now):
                set_condition(
                    status, new_condition(PROGRESSING, "False", TIMED_OUT, f"{what} has timed out progressing.")
                )
        failure = self.replica_failure(all_rss, new_rs)
        if failure is not None:
            set_condition(status, failure)
        else:
            remove_condition(status, REPLICA_FAILURE)
        if status == dict_at(d, "status"):
            self.requeue_stuck(d, status, now)
            return
        d["status"] = status
        await self.write_status(d)

    @staticmethod
    def replica_failure(all_rss: list[dict], new_rs: dict | None) -> dict | None:
        """The first ``ReplicaFailure`` of the new set, else of an old one, as a Deployment condition."""
        ordered = ([new_rs] if new_rs is not None else []) + [rs for rs in all_rss if rs is not new_rs]
        for rs in ordered:
            for c in list_at(dict_at(rs, "status"), "conditions"):
                if isinstance(c, dict) and c.get("type") == REPLICA_FAILURE:
                    cond = new_condition(
                        REPLICA_FAILURE, str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", ""))
                    )
                    if c.get("lastTransitionTime"):
                        cond["lastTransitionTime"] = cond["lastUpdateTime"] = c["lastTransitionTime"]
                    return cond
        return None

    def requeue_stuck(self, d: dict, status: dict, now: float) -> None:
        """Come back when the progress deadline passes, to notice it."""
        cond = get_condition(dict_at(d, "status"), PROGRESSING)
        if not has_progress_deadline(d) or cond is None or deployment_complete(d, status):
            return
        if cond.get("reason") == TIMED_OUT:
            return
        deadline = _int(dict_at(d, "spec").get("progressDeadlineSeconds"))
        after = _cond_time(cond, "lastUpdateTime") + deadline - now
        key = (d["metadata"]["namespace"], d["metadata"]["name"])
        if after < 1:
            self.queue.add_rate_limited(key)
        else:
            self.queue.add_after(key, after + 1)
