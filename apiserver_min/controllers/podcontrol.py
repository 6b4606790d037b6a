"""What the workload controllers share: expectations, pods made from a template, the
controller reference, adoption and release by selector, and the ranking of pods.

Expectations are what keeps a controller from acting twice on one change: its writes
land in storage at once but reach its informers a little later (through the watch
cache). Before it creates N pods it expects N; each create it then sees in the
informer lowers the count, and it decides again only when nothing is outstanding (or
after ``Expectations.TTL``, in case a watch event was lost). Deletions are tracked
by pod key, so a pod seen deleted twice is counted once.

Adoption follows the controller reference (the owner reference with
``controller: true``): a pod that matches a controller's selector and has no
controller is adopted (the reference is added); a pod it controls that no longer
matches is released (the reference is removed); a pod controlled by another object
is left alone. A controller being deleted adopts nothing.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at, get_condition, list_at
from ..api.kinds import KindInfo
from ..api.selectors import LabelSelector
from ..api.timeutil import parse_rfc3339
from ..client.interface import Client

# Pod phases
PENDING, RUNNING, SUCCEEDED, FAILED, UNKNOWN = "Pending", "Running", "Succeeded", "Failed", "Unknown"


class Expectations:
    """Creations and deletions a controller asked for and has not yet seen, per key."""

    TTL = 300.0  # seconds after which unmet expectations stop blocking a sync

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._adds: dict[str, int] = {}
        self._dels: dict[str, set[str]] = {}
        self._since: dict[str, float] = {}

    def expect_creations(self, key: str, n: int) -> None:
        self._adds[key] = self._adds.get(key, 0) + n
        self._since[key] = self._clock()

    def expect_deletions(self, key: str, pod_keys: Iterable[str]) -> None:
        self._dels.setdefault(key, set()).update(pod_keys)
        self._since[key] = self._clock()

    def creation_observed(self, key: str) -> None:
        """One expected create seen (also: one create that failed, so will never be seen)."""
        n = self._adds.get(key)
        if n is not None:
            self._adds[key] = n - 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        pending = self._dels.get(key)
        if pending is not None:
            pending.discard(pod_key)

    def satisfied(self, key: str) -> bool:
        """True when nothing is outstanding, nothing was ever expected, or the expectation expired."""
        if key not in self._since:
            return True
        if self._adds.get(key, 0) <= 0 and not self._dels.get(key):
            return True
        return self._clock() - self._since[key] > self.TTL

    def forget(self, key: str) -> None:
        """The controller is gone: drop its expectations."""
        self._adds.pop(key, None)
        self._dels.pop(key, None)
        self._since.pop(key, None)


# --- owner references --------------------------------------------------------------------


def controller_ref(owner: Mapping, api_version: str, kind: str) -> dict:
    """The owner reference a controller puts on what it creates."""
    md = dict_at(owner, "metadata")
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": md.get("name", ""),
        "uid": md.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Mapping) -> dict | None:
    """The owner reference with ``controller: true``, if any."""
    for ref in list_at(dict_at(obj, "metadata"), "ownerReferences"):
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def api_version_of(kind: KindInfo) -> str:
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


def pod_from_template(template: Mapping, owner: Mapping, owner_kind: KindInfo, *, name: str = "") -> dict:
    """A pod from a controller's ``spec.template``: its labels, annotations, finalizers and
    spec, controlled by ``owner``, named ``name`` or generated from the owner's name."""
    tmd = dict_at(template, "metadata")
    owner_name = str(dict_at(owner, "metadata").get("name", ""))
    md: dict[str, Any] = {}
    if name:
        md["name"] = name
    else:
        # The owner's name is a valid DNS subdomain, so "<name>-" is a valid prefix.
        md["generateName"] = f"{owner_name}-"
    for field in ("labels", "annotations"):
        value = tmd.get(field)
        if isinstance(value, dict) and value:
            md[field] = dict(value)
    finalizers = tmd.get("finalizers")
    if isinstance(finalizers, list) and finalizers:
        md["finalizers"] = list(finalizers)
    md["ownerReferences"] = [controller_ref(owner, api_version_of(owner_kind), owner_kind.kind)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": copy.deepcopy(dict_at(template, "spec"))}


class ClaimResult:
    """The pods a controller controls after a claim, and whether any write failed."""

    def __init__(self) -> None:
        self.pods: list[dict] = []
        self.errors: list[st.ApiError] = []


async def claim(
    client: Client,
    kind: KindInfo,
    owner: Mapping,
    owner_kind: KindInfo,
    selector: LabelSelector,
    candidates: Iterable[dict],
    *,
    owner_fresh: Callable[[], Any] | None = None,
) -> ClaimResult:
    """Adopt orphans of ``candidates`` (objects of ``kind``) that match ``selector``, release
    controlled ones that do not, and return those ``owner`` controls afterwards.
    ``owner_fresh`` (async, returning the owner as stored now or None) is asked once
    before the first adoption: a controller deleted or replaced meanwhile adopts nothing."""
    omd = dict_at(owner, "metadata")
    uid = omd.get("uid", "")
    owner_deleting = bool(omd.get("deletionTimestamp"))
    ref = controller_ref(owner, api_version_of(owner_kind), owner_kind.kind)
    result = ClaimResult()
    may_adopt: bool | None = None
    for obj in candidates:
        md = dict_at(obj, "metadata")
        labels = md.get("labels") if isinstance(md.get("labels"), dict) else {}
        current = controller_of(obj)
        matches = selector.matches(labels)
        if current is not None:
            if current.get("uid") != uid:
                continue
            if matches:
                result.pods.append(obj)
            elif not owner_deleting and not md.get("deletionTimestamp"):
                await _edit_refs(client, kind, obj, uid, None, result)
            continue
        if not matches or owner_deleting or md.get("deletionTimestamp"):
            continue
        if may_adopt is None:
            may_adopt = True
            if owner_fresh is not None:
                fresh = await owner_fresh()
                fmd = dict_at(fresh, "metadata") if isinstance(fresh, dict) else {}
                may_adopt = bool(fresh) and fmd.get("uid") == uid and not fmd.get("deletionTimestamp")
        if not may_adopt:
            continue
        adopted = await _edit_refs(client, kind, obj, uid, ref, result)
        if adopted is not None:
            result.pods.append(adopted)
    return result


async def _edit_refs(
    client: Client, kind: KindInfo, obj: Mapping, owner_uid: str, add: dict | None, result: ClaimResult
) -> dict | None:
    """Add the controller reference ``add`` (adoption) or remove ``owner_uid``'s (release),
    on the object as stored now; None when it changed hands or is gone."""
    md = dict_at(obj, "metadata")
    obj_uid = md.get("uid")

    def edit(cur: dict) -> dict:
        cmd = cur.setdefault("metadata", {})
        if cmd.get("uid") != obj_uid:
            raise st.ApiError(409, "Conflict", "the object was replaced")
        refs = [r for r in list_at(cmd, "ownerReferences") if isinstance(r, dict)]
        if add is not None:
            if any(r.get("controller") is True for r in refs):
                raise st.ApiError(409, "Conflict", "the object already has a controller")
            refs = [r for r in refs if r.get("uid") != owner_uid] + [add]
        else:
            refs = [r for r in refs if r.get("uid") != owner_uid]
        if refs:
            cmd["ownerReferences"] = refs
        else:
            cmd.pop("ownerReferences", None)
        return cur

    try:
        return await client.update(kind, str(md.get("namespace", "")), str(md.get("name", "")), edit)
    except st.ApiError as exc:
        if exc.code in (404, 409):
            return None
        result.errors.append(exc)
        return None


# --- pod state -----------------------------------------------------------------------------


def is_active(pod: Mapping) -> bool:
    """Neither finished nor being deleted."""
    phase = dict_at(pod, "status").get("phase")
    return phase not in (SUCCEEDED, FAILED) and not dict_at(pod, "metadata").get("deletionTimestamp")


def is_ready(pod: Mapping) -> bool:
    cond = get_condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def ready_since(pod: Mapping) -> float | None:
    """When the pod last became ready (epoch seconds), None when it is not ready."""
    cond = get_condition(pod, "Ready")
    if cond is None or cond.get("status") != "True":
        return None
    ts = cond.get("lastTransitionTime")
    if not isinstance(ts, str) or not ts:
        return 0.0
    try:
        return parse_rfc3339(ts).timestamp()
    except ValueError:
        return 0.0


def is_available(pod: Mapping, min_ready_seconds: int, now: float) -> bool:
    """Ready for at least ``min_ready_seconds``."""
    since = ready_since(pod)
    if since is None:
        return False
    return min_ready_seconds <= 0 or since + min_ready_seconds <= now


def _created(pod: Mapping) -> float:
    ts = dict_at(pod, "metadata").get("creationTimestamp")
    try:
        return parse_rfc3339(ts).timestamp() if isinstance(ts, str) and ts else 0.0
    except ValueError:
        return 0.0


def _restarts(pod: Mapping) -> int:
    total = 0
    for cs in list_at(dict_at(pod, "status"), "containerStatuses"):
        if isinstance(cs, dict):
            total += int(cs.get("restartCount") or 0)
    return total


_PHASE_RANK = {PENDING: 0, UNKNOWN: 1, RUNNING: 2}


def deletion_cost(pod: Mapping) -> int:
    """The pod's ``controller.orch.io/pod-deletion-cost`` (0 when absent or not an int32)."""
    value = dict_at(dict_at(pod, "metadata"), "annotations").get(names.ANNOTATION_POD_DELETION_COST)
    try:
        cost = int(value) if isinstance(value, str) else 0
    except ValueError:
        return 0
    return cost if -(2**31) <= cost < 2**31 else 0


def deletion_order(pods: list[dict], related: Iterable[Mapping] = ()) -> list[dict]:
    """``pods`` in the order a controller scaling down deletes them, least valuable first:
    not yet scheduled; Pending, then Unknown, then Running; not ready; more pods of the
    lower ``pod-deletion-cost``; more pods of the same owner family (``related``, the pods
    themselves when empty) on the same node;
    ready for a shorter time; more container restarts; created more recently."""
    per_node: dict[str, int] = {}
    for p in list(related) or pods:
        node = dict_at(p, "spec").get("nodeName") or ""
        if node:
            per_node[node] = per_node.get(node, 0) + 1

    def rank(p: dict) -> tuple:
        node = dict_at(p, "spec").get("nodeName") or ""
        phase = dict_at(p, "status").get("phase") or PENDING
        since = ready_since(p)
        return (
            1 if node else 0,
            _PHASE_RANK.get(phase, 0),
            1 if since is not None else 0,
            deletion_cost(p),
            -per_node.get(node, 0) if node else 0,
            -(since or 0.0),
            -_restarts(p),
            -_created(p),
        )

    return sorted(pods, key=rank)


def pod_key(pod: Mapping) -> str:
    md = dict_at(pod, "metadata")
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


# --- writing many at once ----------------------------------------------------------------

# At most this many pods created or deleted by one sync (upstream's burstReplicas).
BURST_REPLICAS = 500
# The first batch of a slow start (upstream's SlowStartInitialBatchSize).
SLOW_START_INITIAL_BATCH = 1


async def slow_start_batch(count: int, initial: int, fn: Callable[[], Awaitable[None]]) -> tuple[int, Exception | None]:
    """Call ``fn`` ``count`` times in batches of ``initial``, then twice as many each
    round (1, 2, 4, ...), the calls of a batch at once; stop after the first batch in
    which a call failed. Returns how many calls succeeded and the first failure: a
    request that fails for everyone (a quota, a bad template) is sent a few times, not
    ``count`` times."""
    remaining, successes, batch = count, 0, min(count, initial)
    while batch > 0:
        results = await asyncio.gather(*(fn() for _ in range(batch)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        successes += batch - len(errors)
        for r in errors:
            if not isinstance(r, Exception):
                raise r  # cancellation
        if errors:
            return successes, errors[0]  # type: ignore[return-value]
        remaining -= batch
        batch = min(remaining, 2 * batch)
    return successes, None


def object_reference(obj: Mapping, kind: KindInfo) -> dict:
    """The ``involvedObject`` of an event about ``obj``."""
    md = dict_at(obj, "metadata")
    ref = {"kind": kind.kind, "apiVersion": api_version_of(kind)}
    for field in ("namespace", "name", "uid", "resourceVersion"):
        if md.get(field):
            ref[field] = md[field]
    return ref


def ready_to_available_delay(pods: Iterable[Mapping], min_ready_seconds: int, now: float) -> float | None:
    """Seconds until the first ready but not yet available pod of ``pods`` becomes
    available (``min_ready_seconds`` after turning ready); None when there is none."""
    if min_ready_seconds <= 0:
        return None
    best: float | None = None
    for p in pods:
        since = ready_since(p)
        if since is None:
            continue
        left = since + min_ready_seconds - now
        if left > 0 and (best is None or left < best):
            best = left
    return best
