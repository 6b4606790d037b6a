"""The pod config merge: snapshots from every source in, incremental updates out.

Each source (file, http, api) sends whole snapshots (``Op.SET``). Like upstream's
pod storage merge, :class:`PodConfig` keeps the last set of every source keyed by
UID and turns each new snapshot into what changed, per source:

* ADD - a UID this source did not have (it gets the ``config.seen`` annotation);
* UPDATE - spec, labels, deletion fields or non-local annotations changed;
* DELETE - as UPDATE, but the pod now carries a deletion timestamp (graceful);
* REMOVE - a UID the source no longer lists;
* RECONCILE - only the status differs.

Updates are put on :attr:`PodConfig.updates` in upstream's order (REMOVE, ADD,
UPDATE, DELETE, RECONCILE). The first snapshot of a source always produces an
ADD, empty if need be, so the consumer learns the source has been seen.

Two pods may not share a ``name_namespace``: a pod whose full name is taken by
a pod with another UID (earlier in the same snapshot, or already held for
another source) is dropped and reported as a problem, never run twice.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable

from agent import logging as agent_logging
from agent import pods as podutil
from agent.pods import ManifestProblem, Op, PodUpdate
from apiserver_min.api import names, timeutil
from apiserver_min.api.helpers import json_copy

__all__ = ["PodConfig"]

log = agent_logging.get_logger("sources")

# Annotations the agent keeps for itself: never a reason for an update, and kept
# from the pod already held when the source's copy changes (upstream's localAnnotations).
_LOCAL_ANNOTATIONS = (names.ANNOTATION_CONFIG_SOURCE, names.ANNOTATION_CONFIG_MIRROR, names.ANNOTATION_CONFIG_SEEN)


def _meta(pod: dict) -> dict:
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        meta = pod["metadata"] = {}
    return meta


def _read_meta(pod: dict) -> dict:
    """The metadata of a pod a source handed in, read only (never added to it)."""
    meta = pod.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _annotations(pod: dict) -> dict:
    return _read_meta(pod).get("annotations") or {}


def _non_local(annotations: dict) -> dict:
    return {k: v for k, v in annotations.items() if k not in _LOCAL_ANNOTATIONS}


def _differ_semantically(existing: dict, ref: dict) -> bool:
    """Whether ``ref`` changes anything the pod workers act on (upstream's podsDifferSemantically)."""
    em, rm = _read_meta(existing), _read_meta(ref)
    return (
        existing.get("spec") != ref.get("spec")
        or (em.get("labels") or {}) != (rm.get("labels") or {})
        or em.get("deletionTimestamp") != rm.get("deletionTimestamp")
        or em.get("deletionGracePeriodSeconds") != rm.get("deletionGracePeriodSeconds")
        or _non_local(_annotations(existing)) != _non_local(_annotations(ref))
    )


class PodConfig:
    """Merges the snapshots of all pod sources into one stream of :class:`PodUpdate`.

    Used from the event loop only (``push`` is synchronous and not thread-safe).
    """

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self._pods: dict[str, dict[str, dict]] = {}  # source -> uid -> pod (insertion ordered)
        self._seen: set[str] = set()
        self._source_problems: dict[str, list[ManifestProblem]] = {}
        self._merge_problems: dict[str, list[ManifestProblem]] = {}

    # --- what sources call --------------------------------------------------------------

    def push(self, update: PodUpdate) -> None:
        """Take one update of a source (normally its SET snapshot) and queue what changed."""
        source = update.source
        if not source or source == podutil.ALL_SOURCES:
            raise ValueError(f"a pod update needs a source name, got {source!r}")
        first = source not in self._seen
        old = self._pods.get(source, {})
        adds: list[dict] = []
        updates: list[dict] = []
        deletes: list[dict] = []
        removes: list[dict] = []
        reconciles: list[dict] = []

        if update.op == Op.SET:
            self._seen.add(source)
            new: dict[str, dict] = {}
            self._apply(source, update.pods, old, new, adds, updates, deletes, reconciles)
            removes = [pod for uid, pod in old.items() if uid not in new]
        elif update.op in (Op.ADD, Op.UPDATE, Op.DELETE):
            # Incremental updates (upstream accepts them too): the pods named are
            # added or changed, the rest of the source's set stays.
            new = dict(old)
            self._apply(source, update.pods, old, new, adds, updates, deletes, reconciles, keep=new)
        elif update.op == Op.REMOVE:
            new = dict(old)
            for pod in update.pods:
                gone = new.pop(podutil.uid(pod), None)
                if gone is not None:
                    removes.append(gone)
        else:
            log.error("Ignoring a pod update with an operation sources do not send", op=str(update.op), source=source)
            return
        self._pods[source] = new

        put = self.updates.put_nowait
        if removes:
            put(PodUpdate.make(Op.REMOVE, source, map(json_copy, removes)))
        if adds:
            put(PodUpdate.make(Op.ADD, source, map(json_copy, adds)))
        if updates:
            put(PodUpdate.make(Op.UPDATE, source, map(json_copy, updates)))
        if deletes:
            put(PodUpdate.make(Op.DELETE, source, map(json_copy, deletes)))
        if first and update.op == Op.SET and not (adds or updates or deletes):
            # Tells the consumer this source has been seen, even with nothing in it.
            put(PodUpdate.make(Op.ADD, source))
        if reconciles:
            put(PodUpdate.make(Op.RECONCILE, source, map(json_copy, reconciles)))
        if adds or updates or deletes or removes:
            log.v(4).info(
                "Pod source changed",
                source=source,
                added=len(adds),
                updated=len(updates),
                deleted=len(deletes),
                removed=len(removes),
                reconciled=len(reconciles),
            )

    def _apply(
        self,
        source: str,
        pods: Iterable[dict],
        old: dict[str, dict],
        new: dict[str, dict],
        adds: list,
        updates: list,
        deletes: list,
        reconciles: list,
        keep: dict[str, dict] | None = None,
    ) -> None:
        """upstream's updatePodsFunc: sort each incoming pod into add/update/delete/reconcile."""
        taken = self._names_elsewhere(source)
        if keep is not None:  # incremental: the source's untouched pods hold their names
            taken.update({podutil.full_name(p): (uid, source) for uid, p in keep.items()})
        problems: list[ManifestProblem] = []
        batch_names: dict[str, str] = {}
        for incoming in pods:
            # ``incoming`` is the source's (an informer's cached object, say): read, never
            # changed or kept; only what is kept is copied.
            uid = podutil.uid(incoming)
            full = podutil.full_name(incoming)
            if not uid:
                problems.append(ManifestProblem(source, full, f"pod {full!r} has no metadata.uid, ignoring"))
                continue
            owner = batch_names.get(full)
            if owner is None:
                held = taken.get(full)
                if held is not None and held[0] != uid:
                    owner = f"{held[0]} from source {held[1]!r}"
            else:
                owner = f"{owner} from source {source!r}"
            if owner is None and keep is None and uid in batch_names.values():
                owner = f"{uid} (the same UID twice)"
            if owner is not None:
                message = f"duplicate pod name {full!r}: already used by pod {owner}, ignoring pod {uid}"
                problems.append(ManifestProblem(source, full, message))
                continue
            batch_names[full] = uid
            existing = old.get(uid)
            if existing is None:
                ref = json_copy(incoming)
                anns = _meta(ref).get("annotations")
                if not isinstance(anns, dict):
                    anns = _meta(ref)["annotations"] = {}
                anns[names.ANNOTATION_CONFIG_SOURCE] = source
                anns[names.ANNOTATION_CONFIG_SEEN] = timeutil.format_rfc3339_nano(timeutil.now())
                new[uid] = ref
                adds.append(ref)
                continue
            new[uid] = existing
            outcome = self._check_and_update(existing, incoming, source)
            if outcome is Op.UPDATE:
                updates.append(existing)
            elif outcome is Op.DELETE:
                deletes.append(existing)
            elif outcome is Op.RECONCILE:
                reconciles.append(existing)
        # Sources re-send their sets every period: log a problem when it appears, not each time.
        before = {(p.location, p.message): p for p in self._merge_problems.get(source, [])}
        kept = []
        for p in problems:
            known = before.get((p.location, p.message))
            if known is None:
                log.warning("Ignoring a pod from a pod source", source=source, pod=p.location, reason=p.message)
            kept.append(known or p)
        self._merge_problems[source] = kept

    @staticmethod
    def _check_and_update(existing: dict, ref: dict, source: str) -> Op | None:
        """Bring ``existing`` up to ``ref`` (the source's pod, copied from, never changed)
        and say what kind of change it was (upstream's checkAndUpdatePod)."""
        if not _differ_semantically(existing, ref):
            if existing.get("status") != ref.get("status"):
                existing["status"] = json_copy(ref.get("status"))
                return Op.RECONCILE
            return None
        em, rm = _meta(existing), _read_meta(ref)
        existing["spec"] = json_copy(ref.get("spec"))
        for key in ("labels", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if rm.get(key) is None:
                em.pop(key, None)
            else:
                em[key] = json_copy(rm[key])
        existing["status"] = json_copy(ref.get("status"))
        annotations: dict[str, Any] = dict(rm.get("annotations") or {})
        annotations[names.ANNOTATION_CONFIG_SOURCE] = source
        for key in _LOCAL_ANNOTATIONS:
            if key in (em.get("annotations") or {}):
                annotations[key] = em["annotations"][key]
        em["annotations"] = annotations
        return Op.DELETE if rm.get("deletionTimestamp") else Op.UPDATE

    def _names_elsewhere(self, source: str) -> dict[str, tuple[str, str]]:
        return {
            podutil.full_name(p): (uid, other)
            for other, pods in self._pods.items()
            if other != source
            for uid, p in pods.items()
        }

    def report_problems(self, source: str, problems: list[ManifestProblem]) -> None:
        """Replace the manifest problems of ``source``; a problem seen before keeps its ``since``."""
        before = {(p.location, p.message): p for p in self._source_problems.get(source, [])}
        self._source_problems[source] = [before.get((p.location, p.message), p) for p in problems]

    # --- what the agent reads -----------------------------------------------------------

    def seen_all(self, sources: Iterable[str]) -> bool:
        """Every named source has sent at least one snapshot."""
        return all(s in self._seen for s in sources)

    def pods(self) -> list[dict]:
        """Copies of the desired pods of all sources."""
        return [json_copy(p) for pods in self._pods.values() for p in pods.values()]

    def problems(self) -> list[ManifestProblem]:
        """The current manifest problems of every source, sources' and the merge's own."""
        out: list[ManifestProblem] = []
        for table in (self._source_problems, self._merge_problems):
            for problems in table.values():
                out.extend(problems)
        return sorted(out, key=lambda p: (p.source, p.location, p.message))
