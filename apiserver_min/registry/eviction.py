"""POST pods/<name>/eviction: a pod deleted only when its disruption budget allows.

The budget that selects the pod (``policy/v1`` PodDisruptionBudget; more than one is
refused) is charged first: its ``status.disruptionsAllowed`` is lowered and the pod
entered in ``status.disruptedPods``, in one compare-and-swap write of the budget's
status, so two evictions racing for the last allowed disruption cannot both win.
The disruption controller (``controllers/disruption.py``) then recounts the budget
from the pods. Refusals are upstream's: 429 ``TooManyRequests`` with a
``DisruptionBudget`` cause while the budget does not allow it or has not been
processed since its last change, which ``kubectl drain`` retries.

Pods that are already terminal, pending or being deleted are not charged; pods that
are not ready are not charged when the budget's ``unhealthyPodEvictionPolicy`` is
``AlwaysAllow``, or (``IfHealthyBudget``, the default) when it already has its
desired healthy pods. An evicted pod gets the ``DisruptionTarget`` condition (reason
``EvictionByEvictionAPI``) before it is deleted.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api import names
from ..api import status as st
from ..api.codec import decode_stored
from ..api.helpers import dict_at, get_condition, set_pod_condition, timestamp
from ..api.kinds import KindInfo
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from .rest import DeleteOptions, ObjectStore, RequestContext

# Entries in a budget's status.disruptedPods beyond which evictions are refused.
MAX_DISRUPTED_PODS = 2000
# Attempts when the pod changes between the check and the delete.
EVICTION_RETRIES = 5

BUDGET_CAUSE = "DisruptionBudget"
DENIED_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def _created() -> dict:
    return st.status_object(201, "", "", None, failure=False)


def budget_selector(pdb: dict) -> LabelSelector:
    """``spec.selector`` of a policy/v1 budget: absent selects nothing, ``{}`` every pod."""
    sel = dict_at(pdb, "spec").get("selector")
    try:
        return label_selector_from_dict(sel if isinstance(sel, dict) else None)
    except SelectorError:
        return LabelSelector.nothing()


def ignores_budget(pod: dict) -> bool:
    """Terminal, pending or deleting pods are evicted without a budget's leave."""
    phase = dict_at(pod, "status").get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(dict_at(pod, "metadata").get("deletionTimestamp"))


def _ready(pod: dict) -> bool:
    cond = get_condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def _too_many(pdb_name: str, cause: str) -> st.ApiError:
    return st.ApiError(
        429,
        "TooManyRequests",
        DENIED_MESSAGE,
        details={"causes": [{"reason": BUDGET_CAUSE, "message": cause}]},
    )


def charge(pdb: dict, pod_name: str, now: str) -> dict:
    """The budget after one more disruption (raises the refusal when it allows none)."""
    md, spec_status = dict_at(pdb, "metadata"), dict_at(pdb, "status")
    name = str(md.get("name", ""))
    if int(spec_status.get("observedGeneration") or 0) < int(md.get("generation") or 0):
        raise _too_many(name, f"The disruption budget {name} is still being processed by the server.")
    allowed = int(spec_status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise st.forbidden("poddisruptionbudget", name, names.POLICY_GROUP, "pdb disruptions allowed is negative")
    disrupted = spec_status.get("disruptedPods")
    disrupted = dict(disrupted) if isinstance(disrupted, dict) else {}
    if len(disrupted) > MAX_DISRUPTED_PODS:
        raise st.forbidden(
            "poddisruptionbudget",
            name,
            names.POLICY_GROUP,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        )
    if allowed == 0:
        raise _too_many(
            name,
            f"The disruption budget {name} needs {int(spec_status.get('desiredHealthy') or 0)} healthy pods "
            f"and has {int(spec_status.get('currentHealthy') or 0)} currently",
        )
    out = copy.deepcopy(pdb)
    status = out.setdefault("status", {})
    status["disruptionsAllowed"] = allowed - 1
    disrupted[pod_name] = now
    status["disruptedPods"] = disrupted
    if allowed - 1 == 0:
        set_budget_condition(status, False, "InsufficientPods", "", now)
    return out


def set_budget_condition(status: dict, allowed: bool, reason: str, message: str, now: str) -> None:
    """The ``DisruptionAllowed`` condition of a budget's status (its time kept when unchanged)."""
    conds = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    value = "True" if allowed else "False"
    old = next((c for c in conds if c.get("type") == "DisruptionAllowed"), None)
    new = {
        "type": "DisruptionAllowed",
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": status.get("observedGeneration", 0),
        "lastTransitionTime": old["lastTransitionTime"]
        if old is not None and old.get("status") == value and old.get("lastTransitionTime")
        else now,
    }
    status["conditions"] = [c for c in conds if c.get("type") != "DisruptionAllowed"] + [new]


class PodEvictionREST:
    """POST pods/<name>/eviction (``policy/v1`` Eviction)."""

    def __init__(self, store: ObjectStore, kind: KindInfo):
        self.store = store
        self.kind = kind

    def _budget_kind(self) -> KindInfo:
        kind = self.store.registry.by_resource(names.POLICY_GROUP, "v1", "poddisruptionbudgets")
        if kind is None:
            raise st.internal("policy/v1 poddisruptionbudgets is not served")
        return kind

    async def _budgets(self, pod: dict) -> list[dict]:
        md = dict_at(pod, "metadata")
        labels = md.get("labels") if isinstance(md.get("labels"), dict) else {}
        res = await self.store.list(self._budget_kind(), str(md.get("namespace", "")), None, None, None, None, 0, None)
        out = []
        for raw, rev in res.items:
            pdb = decode_stored(raw, rev)
            if budget_selector(pdb).matches(labels):
                out.append(pdb)
        return out

    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        given = dict_at(obj, "metadata").get("name")
        if given and given != ctx.name:
            raise st.bad_request("name in URL does not match name in Eviction object")
        opts = DeleteOptions(dry_run=ctx.dry_run)
        dopts = obj.get("deleteOptions")
        if isinstance(dopts, dict):
            if isinstance(dopts.get("gracePeriodSeconds"), int):
                opts.grace_period_seconds = dopts["gracePeriodSeconds"]
            pre = dopts.get("preconditions")
            if isinstance(pre, dict):
                opts.preconditions_uid = pre.get("uid") or None
                opts.preconditions_rv = pre.get("resourceVersion") or None
            if dopts.get("dryRun"):
                opts.dry_run = True
        last: st.ApiError | None = None
        for _ in range(EVICTION_RETRIES):
            pod = await self.store.get_object(self.kind, ctx.namespace, ctx.name)
            try:
                await self._evict(ctx, pod, opts)
            except st.ApiError as exc:
                # The pod changed between the check and the delete: decide again.
                if exc.code == 409 and opts.preconditions_rv is None:
                    last = exc
                    continue
                raise
            return 201, _created()
        assert last is not None
        raise last

    async def _evict(self, ctx: RequestContext, pod: dict, opts: DeleteOptions) -> None:
        md = dict_at(pod, "metadata")
        ignore = ignores_budget(pod)
        if not ignore:
            budgets = await self._budgets(pod)
            if len(budgets) > 1:
                raise st.internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                )
            if budgets:
                await self._charge(ctx, budgets[0], pod, opts.dry_run)
        # Delete exactly the pod the decision was about (a pod that turned ready or
        # changed meanwhile is decided again), unless the caller chose a version.
        phase = dict_at(pod, "status").get("phase")
        enforce = phase not in ("Succeeded", "Failed") and not md.get("deletionTimestamp")
        rv = opts.preconditions_rv or (str(md.get("resourceVersion") or "") if enforce else "") or None
        if not opts.dry_run:
            new_rv = await self._mark_disruption_target(ctx, opts.preconditions_uid, rv)
            if rv is not None and new_rv:
                rv = new_rv
        delete = DeleteOptions(
            grace_period_seconds=opts.grace_period_seconds,
            preconditions_uid=opts.preconditions_uid,
            preconditions_rv=rv,
            dry_run=opts.dry_run,
        )
        await self.store.delete(self.kind, ctx.namespace, ctx.name, delete, ctx.user)

    async def _charge(self, ctx: RequestContext, pdb: dict, pod: dict, dry_run: bool) -> None:
        spec, status = dict_at(pdb, "spec"), dict_at(pdb, "status")
        if not _ready(pod):
            policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
            desired = int(status.get("desiredHealthy") or 0)
            if policy == "AlwaysAllow" or (int(status.get("currentHealthy") or 0) >= desired and desired > 0):
                return
        pdb_md = dict_at(pdb, "metadata")
        pod_name = str(dict_at(pod, "metadata").get("name", ""))

        def compute(current: dict) -> dict:
            # A budget changed since it was read is charged as it is now.
            out = charge(current, pod_name, timestamp())
            out.setdefault("metadata", {})["resourceVersion"] = dict_at(current, "metadata").get("resourceVersion", "")
            return out

        if dry_run:
            charge(pdb, pod_name, timestamp())  # the refusal a real request would get
            return
        await self.store.update(
            self._budget_kind(), ctx.namespace, str(pdb_md.get("name", "")), compute, ctx.user, subresource="status"
        )

    async def _mark_disruption_target(self, ctx: RequestContext, uid: str | None, rv: str | None) -> str:
        """The ``DisruptionTarget`` condition on the pod as stored now, after checking the
        delete's preconditions against it; the pod's new resourceVersion ("" when gone)."""

        def compute(current: dict) -> Any:
            cmd = dict_at(current, "metadata")
            if uid and cmd.get("uid") != uid:
                raise st.conflict(
                    "pods",
                    ctx.name,
                    "",
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: {cmd.get('uid')}",
                )
            if rv and str(cmd.get("resourceVersion") or "") != rv:
                raise st.conflict(
                    "pods",
                    ctx.name,
                    "",
                    f"Precondition failed: ResourceVersion in precondition: {rv}, "
                    f"ResourceVersion in object meta: {cmd.get('resourceVersion')}",
                )
            set_pod_condition(
                current,
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastTransitionTime": timestamp(),
                },
            )
            return current

        try:
            new, _, _ = await self.store.update(
                self.kind, ctx.namespace, ctx.name, compute, ctx.user, subresource="status"
            )
        except st.ApiError as exc:
            if exc.code == 404:
                return ""
            raise
        return str(dict_at(new, "metadata").get("resourceVersion") or "")
