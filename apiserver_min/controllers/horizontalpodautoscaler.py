"""The horizontal pod autoscaler controller (``autoscaling/v2`` HorizontalPodAutoscalers).

Every ``--horizontal-pod-autoscaler-sync-period`` (and at once when one is created or
its spec changes) each autoscaler is reconciled as upstream's (v1.27) controller does:

1. the target's Scale is read through its ``scale`` sub-resource (AbleToScale
   SucceededGetScale, or False FailedGetScale with an event);
2. a target at zero replicas is left alone (ScalingActive False ScalingDisabled); one
   outside [minReplicas, maxReplicas] is brought inside;
3. pods that another autoscaler selects too (by the selector of its last reconcile) are
   not scaled (ScalingActive False AmbiguousSelector, with events), as upstream;
   otherwise each metric proposes a count (``hpacalc``) from the pods the Scale's
   selector picks (read from the informer) and their usage from the injected metrics
   source; the largest proposal wins (ScalingActive ValidMetricFound). Resource and
   ContainerResource metrics are served by the resource metrics API; Pods and Object
   metrics need a custom metrics API and External ones an external metrics API, which
   this server does not serve: such a metric is reported as upstream reports a missing
   metrics API, with ScalingActive False (FailedGetPodsMetric, FailedGetObjectMetric,
   FailedGetExternalMetric) and an event, never ignored;
4. the proposal is stabilized and limited (the behavior's policies, or the v1-style
   rules without one) and clamped to the bounds (ScalingLimited), and written to the
   target's Scale, with a SuccessfulRescale event;
5. the status (replicas, currentMetrics, conditions, lastScaleTime) is written when it
   changed.

The metrics source is a constructor argument (:class:`PodMetricsSource`): the server
passes its resource metrics scraper, tests a fake.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as _dt
import logging
import time
from typing import Any, Callable, Mapping, Protocol

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at, list_at
from ..api.kinds import KindInfo
from ..api.quantity import QuantityError, parse_quantity
from ..api.selectors import FieldSelector, LabelSelector, SelectorError, parse_label_selector
from ..api.timeutil import format_rfc3339
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent, Entry
from .hpacalc import Limited, MetricError, ReplicaCalculator, ScalingHistory, pod_samples
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.horizontalpodautoscaler")

COMPONENT = "horizontal-pod-autoscaler"
API_VERSION = f"{names.AUTOSCALING_GROUP}/v2"


class PodMetricsSource(Protocol):
    """Where the controller reads pods' resource usage: ``metrics.orch.io`` PodMetrics
    dicts (``containers[].usage``, ``timestamp``, ``window``) of one namespace's pods
    that the selector picks."""

    def pod_metrics(
        self, namespace: str | None, labels: LabelSelector | None, fields: FieldSelector | None
    ) -> list[dict]: ...


class MetricFailure(Exception):
    """A metric that yields no proposal: the error, and the ScalingActive condition it sets."""

    def __init__(self, message: str, reason: str, condition_message: str):
        super().__init__(message)
        self.reason = reason
        self.condition_message = condition_message


def set_condition(status: dict, ctype: str, value: bool, reason: str, message: str, now: str) -> None:
    """Upstream's setCondition: the transition time moves only when the status flips."""
    text = "True" if value else "False"
    conditions = status.setdefault("conditions", [])
    for c in conditions:
        if c.get("type") == ctype:
            if c.get("status") != text:
                c["lastTransitionTime"] = now
            c.update({"status": text, "reason": reason, "message": message})
            return
    conditions.append({"type": ctype, "status": text, "lastTransitionTime": now, "reason": reason, "message": message})


def _milli_text(milli: int) -> str:
    return parse_quantity(f"{milli}m").canonical()


def _ref(hpa: Mapping) -> dict:
    md = dict_at(hpa, "metadata")
    return {
        "kind": "HorizontalPodAutoscaler",
        "apiVersion": API_VERSION,
        "namespace": md.get("namespace", ""),
        "name": md.get("name", ""),
        "uid": md.get("uid", ""),
        "resourceVersion": md.get("resourceVersion", ""),
    }


class HorizontalPodAutoscalerController:
    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        metrics: PodMetricsSource,
        *,
        sync_period: float = 15.0,
        tolerance: float = 0.1,
        cpu_initialization_period: float = 300.0,
        initial_readiness_delay: float = 30.0,
        downscale_stabilization: float = 300.0,
        clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.informers = informers
        self.registry = informers.registry
        self.metrics = metrics
        self.sync_period = sync_period
        self.clock = clock
        self.kind = informers.kind(names.AUTOSCALING_GROUP, "v2", "horizontalpodautoscalers")
        self.hpas = informers.for_kind(self.kind)
        self.pods = informers.for_resource("", "v1", "pods")
        self.calculator = ReplicaCalculator(tolerance, cpu_initialization_period, initial_readiness_delay)
        self.history = ScalingHistory(clock, downscale_stabilization)
        self.events = EventRecorder(client, informers.registry, COMPONENT)
        self.queue = RateLimitedQueue()
        # (namespace, name) -> the pod selector each autoscaler last used; None (selects
        # nothing) from when it is first seen until it is reconciled: upstream's hpaSelectors.
        self.selectors: dict[tuple[str, str], LabelSelector | None] = {}

    # --- informers ---------------------------------------------------------------------
    def start(self) -> None:
        self.hpas.add_handler(self.on_hpa)

    def on_hpa(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.hpas.list():
                self.selectors.setdefault((e.namespace, e.name), None)
                self.queue.add(e.key)
            return
        if ev.type == "DELETED":
            self.history.forget(ev.entry.key)
            self.selectors.pop((ev.entry.namespace, ev.entry.name), None)
            return
        self.selectors.setdefault((ev.entry.namespace, ev.entry.name), None)
        # A new autoscaler or a changed spec is looked at now; status writes wait for the period.
        if ev.prev is None or ev.prev.object().get("spec") != ev.entry.object().get("spec"):
            self.queue.add(ev.entry.key)

    async def run(self) -> None:
        resync = asyncio.create_task(self._resync(), name="horizontal-pod-autoscaler-resync")
        try:
            await run_worker(self.queue, self.sync, log, "horizontal pod autoscaler")
        finally:
            resync.cancel()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.sync_period)
            for e in self.hpas.list():
                self.queue.add(e.key)

    # --- one autoscaler ---------------------------------------------------------------
    async def sync(self, key: str) -> None:
        entry = self.hpas.get_by_key(key)
        if entry is None:
            self.history.forget(key)
            namespace, _, name = key.rpartition("/")
            self.selectors.pop((namespace.rpartition("/")[2], name), None)
            return
        hpa = entry.object()
        original = copy.deepcopy(hpa.get("status"))
        try:
            await self.reconcile(key, hpa)
        except MetricError as exc:
            log.info("horizontal pod autoscaler %s: %s", key, exc)
        await self._write_status(hpa, original)

    def _now_text(self) -> str:
        return format_rfc3339(_dt.datetime.fromtimestamp(int(self.clock()), _dt.timezone.utc))

    def _target_kind(self, ref: Mapping) -> KindInfo:
        api_version = str(ref.get("apiVersion") or "")
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        group = names.GROUP_ALIASES.get(group, group)
        kind_name = str(ref.get("kind") or "")
        for k in self.registry.kinds:
            if k.group == group and k.kind == kind_name and k.subresource("scale") is not None:
                return k
        raise MetricError(f'no matches for kind "{kind_name}" in group "{group}"')

    async def reconcile(self, key: str, hpa: dict) -> None:
        spec = dict_at(hpa, "spec")
        status = hpa.setdefault("status", {})
        if not isinstance(status, dict):
            status = hpa["status"] = {}
        status["observedGeneration"] = dict_at(hpa, "metadata").get("generation", 1)
        namespace = dict_at(hpa, "metadata").get("namespace", "")
        ref = dict_at(spec, "scaleTargetRef")
        now = self._now_text()
        try:
            target = self._target_kind(ref)
        except MetricError as exc:
            await self._failed_get_scale(hpa, status, str(exc), now)
            raise MetricError(f"unable to determine resource for scale target reference: {exc}") from None
        try:
            scale = await self.client.get(target, namespace, str(ref.get("name", "")), subresource="scale")
        except st.ApiError as exc:
            await self._failed_get_scale(hpa, status, exc.message, now)
            raise MetricError(
                f"failed to query scale subresource for {ref.get('kind')}/{namespace}/{ref.get('name')}: {exc.message}"
            ) from None
        set_condition(
            status,
            "AbleToScale",
            True,
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
            now,
        )
        current = int(dict_at(scale, "spec").get("replicas") or 0)
        self.history.record_initial(key, current)
        min_replicas = spec.get("minReplicas", 1)
        min_replicas = min_replicas if isinstance(min_replicas, int) else 1
        max_replicas = int(spec.get("maxReplicas") or 0)
        behavior = spec.get("behavior") if isinstance(spec.get("behavior"), dict) else None
        rescale, reason = True, ""
        desired = 0
        metric_statuses: list[dict] | None = None
        if current == 0 and min_replicas != 0:
            rescale = False
            set_condition(
                status,
                "ScalingActive",
                False,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
                now,
            )
        elif current > max_replicas:
            reason, desired = "Current number of replicas above Spec.MaxReplicas", max_replicas
        elif current < min_replicas:
            reason, desired = "Current number of replicas below Spec.MinReplicas", min_replicas
        else:
            proposal, metric_name, metric_statuses = await self.replicas_for_metrics(hpa, status, scale, now)
            if proposal is None:
                self._set_replicas(status, current, status.get("desiredReplicas", 0), status.get("currentMetrics"))
                return
            metric = ""
            if proposal > desired:
                desired, metric = proposal, metric_name
            if desired > current:
                reason = f"{metric} above target"
            if desired < current:
                reason = "All metrics below target"
            if behavior is None:
                limited = self.history.normalize(key, current, desired, min_replicas, max_replicas)
            else:
                limited = self.history.normalize_with_behavior(
                    key,
                    current,
                    desired,
                    min_replicas,
                    max_replicas,
                    dict_at(behavior, "scaleUp"),
                    dict_at(behavior, "scaleDown"),
                )
            self._limit_conditions(status, limited, now)
            desired = limited.replicas
            rescale = desired != current
        if rescale:
            body = copy.deepcopy(scale)
            body.setdefault("spec", {})["replicas"] = desired
            try:
                await self.client.update(target, namespace, str(ref.get("name", "")), body, subresource="scale")
            except st.ApiError as exc:
                await self.events.record(
                    _ref(hpa),
                    "Warning",
                    "FailedRescale",
                    f"New size: {desired}; reason: {reason}; error: {exc.message}",
                )
                set_condition(
                    status,
                    "AbleToScale",
                    False,
                    "FailedUpdateScale",
                    f"the HPA controller was unable to update the target scale: {exc.message}",
                    now,
                )
                self._set_replicas(status, current, status.get("desiredReplicas", 0), status.get("currentMetrics"))
                return
            set_condition(
                status,
                "AbleToScale",
                True,
                "SucceededRescale",
                f"the HPA controller was able to update the target scale to {desired}",
                now,
            )
            await self.events.record(_ref(hpa), "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}")
            self.history.record_scale(key, behavior, current, desired)
            log.info("horizontal pod autoscaler %s: %s -> %s replicas (%s)", key, current, desired, reason)
            status["lastScaleTime"] = now
        else:
            desired = current
        self._set_replicas(status, current, desired, metric_statuses)

    @staticmethod
    def _set_replicas(status: dict, current: int, desired: Any, metrics: list[dict] | None) -> None:
        status["currentReplicas"] = current
        status["desiredReplicas"] = desired if isinstance(desired, int) else 0
        if metrics:
            status["currentMetrics"] = metrics
        else:
            status.pop("currentMetrics", None)

    @staticmethod
    def _limit_conditions(status: dict, limited: Limited, now: str) -> None:
        set_condition(status, "AbleToScale", True, limited.able_reason, limited.able_message, now)
        set_condition(status, "ScalingLimited", limited.limited, limited.limit_reason, limited.limit_message, now)

    async def _failed_get_scale(self, hpa: dict, status: dict, message: str, now: str) -> None:
        await self.events.record(_ref(hpa), "Warning", "FailedGetScale", message)
        set_condition(
            status,
            "AbleToScale",
            False,
            "FailedGetScale",
            f"the HPA controller was unable to get the target's current scale: {message}",
            now,
        )

    # --- metrics -----------------------------------------------------------------------
    async def _selector(self, hpa: dict, status: dict, scale: dict, now: str) -> LabelSelector | None:
        text = dict_at(scale, "status").get("selector") or ""
        if not text:
            await self.events.record(_ref(hpa), "Warning", "SelectorRequired", "selector is required")
            set_condition(
                status, "ScalingActive", False, "InvalidSelector", "the HPA target's scale is missing a selector", now
            )
            return None
        try:
            return parse_label_selector(str(text))
        except (SelectorError, ValueError, TypeError) as exc:
            message = f"couldn't convert selector into a corresponding internal selector object: {exc}"
            await self.events.record(_ref(hpa), "Warning", "InvalidSelector", message)
            set_condition(status, "ScalingActive", False, "InvalidSelector", message, now)
            return None

    async def _ambiguous(
        self,
        hpa: dict,
        status: dict,
        key: tuple[str, str],
        selector: LabelSelector,
        picked: list[Entry],
        scale: dict,
        now: str,
    ) -> bool:
        """Upstream's refusal to scale pods that more than one autoscaler selects (each
        autoscaler by the selector of its last reconcile): ScalingActive False
        AmbiguousSelector, with events."""
        if key in self.selectors:
            self.selectors[key] = selector
        namespace = key[0]
        controlling = sorted(
            f"{namespace}/{name}"
            for (ns, name), other in self.selectors.items()
            if ns == namespace and other is not None and any(other.matches(e.labels) for e in picked)
        )
        if len(controlling) <= 1:
            return False
        text = dict_at(scale, "status").get("selector") or ""
        message = f"pods by selector {text} are controlled by multiple HPAs: [{' '.join(controlling)}]"
        await self.events.record(_ref(hpa), "Warning", "AmbiguousSelector", message)
        set_condition(status, "ScalingActive", False, "AmbiguousSelector", message, now)
        await self.events.record(_ref(hpa), "Warning", "FailedComputeMetricsReplicas", message)
        return True

    async def replicas_for_metrics(
        self, hpa: dict, status: dict, scale: dict, now: str
    ) -> tuple[int | None, str, list[dict]]:
        """(the largest proposal or None when no metric yields one, its metric's name,
        the currentMetrics entries, one per metric, empty where a metric failed)."""
        selector = await self._selector(hpa, status, scale, now)
        if selector is None:
            return None, "", []
        md = dict_at(hpa, "metadata")
        namespace = str(md.get("namespace", ""))
        specs = [m if isinstance(m, dict) else {} for m in list_at(dict_at(hpa, "spec"), "metrics")]
        current = int(dict_at(scale, "spec").get("replicas") or 0)
        picked = [e for e in self.pods.list(namespace) if selector.matches(e.labels)]
        if await self._ambiguous(hpa, status, (namespace, str(md.get("name", ""))), selector, picked, scale, now):
            return None, "", []
        pods = [e.object() for e in picked]
        statuses: list[dict] = [{"type": ""} for _ in specs]
        best: int | None = None
        best_name = ""
        first_failure: MetricFailure | None = None
        failures = 0
        for i, spec in enumerate(specs):
            try:
                proposal, metric_name, statuses[i] = self.metric_proposal(spec, namespace, selector, pods, current)
            except MetricFailure as exc:
                await self.events.record(_ref(hpa), "Warning", exc.reason, exc.condition_message)
                if first_failure is None:
                    first_failure = exc
                failures += 1
                continue
            if best is None or proposal > best:
                best, best_name = proposal, metric_name
        if first_failure is not None and (failures >= len(specs) or (best or 0) < current):
            set_condition(
                status,
                "ScalingActive",
                False,
                first_failure.reason,
                f"the HPA was unable to compute the replica count: {first_failure.condition_message}",
                now,
            )
            message = f"invalid metrics ({failures} invalid out of {len(specs)}), first error is: {first_failure}"
            await self.events.record(_ref(hpa), "Warning", "FailedComputeMetricsReplicas", message)
            return None, "", statuses
        set_condition(
            status,
            "ScalingActive",
            True,
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {best_name}",
            now,
        )
        return best, best_name, statuses

    def metric_proposal(
        self, spec: dict, namespace: str, selector: LabelSelector, pods: list[dict], current: int
    ) -> tuple[int, str, dict]:
        typ = spec.get("type")
        if typ in ("Resource", "ContainerResource"):
            container_metric = typ == "ContainerResource"
            source = dict_at(spec, "containerResource" if container_metric else "resource")
            resource = str(source.get("name", ""))
            container = str(source.get("container", "")) if container_metric else ""
            reason = "FailedGetContainerResourceMetric" if container_metric else "FailedGetResourceMetric"
            try:
                proposal, metric_name, value = self._resource_proposal(
                    source, resource, container, namespace, selector, pods, current
                )
            except MetricError as exc:
                wrapped = (
                    f"failed to get {container} container metric value: {exc}"
                    if container_metric
                    else f"failed to get {resource} resource metric value: {exc}"
                )
                raise MetricFailure(wrapped, reason, str(exc)) from None
            key = "containerResource" if container_metric else "resource"
            entry: dict = {"name": resource, "current": value}
            if container_metric:
                entry["container"] = container
            return proposal, metric_name, {"type": typ, key: entry}
        if typ == "Pods":
            name = dict_at(dict_at(spec, "pods"), "metric").get("name", "")
            cause = f"unable to get metric {name}: no custom metrics API ({names.CUSTOM_METRICS_GROUP}) registered"
            raise MetricFailure(f"failed to get pods metric value: {cause}", "FailedGetPodsMetric", cause)
        if typ == "Object":
            source = dict_at(spec, "object")
            name = dict_at(source, "metric").get("name", "")
            obj = dict_at(source, "describedObject")
            cause = (
                f"unable to get metric {name}: no custom metrics API ({names.CUSTOM_METRICS_GROUP}) registered "
                f"on {obj.get('kind', '')} {namespace}/{obj.get('name', '')}"
            )
            raise MetricFailure(f"failed to get object metric value: {cause}", "FailedGetObjectMetric", cause)
        if typ == "External":
            name = dict_at(dict_at(spec, "external"), "metric").get("name", "")
            cause = (
                f"unable to get external metric {namespace}/{name}: "
                f"no external metrics API ({names.EXTERNAL_METRICS_GROUP}) registered"
            )
            raise MetricFailure(
                f"failed to get {name} external metric value: {cause}", "FailedGetExternalMetric", cause
            )
        message = f'unknown metric source type "{typ or ""}"'
        raise MetricFailure(message, "InvalidMetricSourceType", message)

    def _resource_proposal(
        self,
        source: dict,
        resource: str,
        container: str,
        namespace: str,
        selector: LabelSelector,
        pods: list[dict],
        current: int,
    ) -> tuple[int, str, dict]:
        target = dict_at(source, "target")
        now = self.clock()

        def samples() -> dict:
            items = self.metrics.pod_metrics(namespace, selector, None)
            if not items:
                raise MetricError(
                    f"unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
                )
            try:
                return pod_samples(items, resource, container)
            except MetricError as exc:
                raise MetricError(f"unable to get metrics for resource {resource}: {exc}") from None

        if target.get("averageValue") is not None:
            try:
                target_milli = parse_quantity(target["averageValue"]).milli_value()
            except (QuantityError, TypeError, ValueError):
                raise MetricError(f"failed to get {resource} usage: invalid target averageValue") from None
            try:
                p = self.calculator.raw_replicas(current, target_milli, resource, pods, samples(), now)
            except MetricError as exc:
                raise MetricError(f"failed to get {resource} usage: {exc}") from None
            return p.replicas, f"{resource} resource", {"averageValue": _milli_text(p.raw)}
        util = target.get("averageUtilization")
        if not isinstance(util, int):
            raise MetricError(
                "invalid resource metric source: neither an average utilization target nor an average value "
                "(usage) target was set"
            )
        try:
            p = self.calculator.resource_replicas(current, util, resource, pods, samples(), now, container)
        except MetricError as exc:
            raise MetricError(f"failed to get {resource} utilization: {exc}") from None
        what = "container resource" if container else "resource"
        return (
            p.replicas,
            f"{resource} {what} utilization (percentage of request)",
            {"averageUtilization": p.utilization, "averageValue": _milli_text(p.raw)},
        )

    # --- status ------------------------------------------------------------------------
    async def _write_status(self, hpa: dict, original: Any) -> None:
        if hpa.get("status") == original:
            return
        md = dict_at(hpa, "metadata")
        try:
            await self.client.update(self.kind, md.get("namespace", ""), md.get("name", ""), hpa, subresource="status")
        except st.ApiError as exc:
            if exc.code == 404:
                return
            raise  # a conflict: the queue syncs again on the newer object
