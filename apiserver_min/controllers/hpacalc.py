"""The horizontal pod autoscaler's arithmetic, free of I/O: how many replicas the
metrics ask for, and how behavior, stabilization and the bounds temper that.

The replica count for a resource metric follows upstream's (v1.27) replica
calculator: pods being deleted or failed are ignored; pending pods, and (for CPU)
pods not yet ready or still in their initialization period, count as unready; pods
without a sample are missing. The usage ratio is worked out over the pods with
samples; within the tolerance nothing changes. Otherwise, when pods are missing or
unready pods would matter (a scale-up), the ratio is worked out again assuming the
missing use nothing on a scale-up and all of their request (or exactly the target,
for a raw value) on a scale-down, and the unready nothing on a scale-up; if that
changes direction or falls within the tolerance, the current count stays.

Times are seconds since the epoch, from the controller's injected clock.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

from ..api.helpers import dict_at, get_condition, list_at
from ..api.quantity import QuantityError, parse_quantity
from ..api.timeutil import parse_rfc3339

DEFAULT_TOLERANCE = 0.1
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0


class MetricError(Exception):
    """A metric that could not be worked out; the message is upstream's wording."""


@dataclasses.dataclass
class PodSample:
    """One pod's usage in thousandths of the unit (millicores, milli-bytes), with the
    time it was sampled and the window it covers (seconds)."""

    value: int
    timestamp: float = 0.0
    window: float = 0.0


def _seconds(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return parse_rfc3339(stamp).timestamp()
    except (TypeError, ValueError):
        return None


def _window_seconds(window: object) -> float:
    """A Go duration as the metrics API writes it ("15s", "15.003s", "1m0s")."""
    if not isinstance(window, str) or not window:
        return 0.0
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    i = 0
    while i < len(window):
        ch = window[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if window.startswith("ms", i) else ch
        i += len(unit)
        try:
            total += float(number or 0) * units.get(unit, 0.0)
        except ValueError:
            return 0.0
        number = ""
    return total


def _milli(value: object) -> int | None:
    try:
        return parse_quantity(value).milli_value()
    except (QuantityError, TypeError, ValueError):
        return None


def pod_samples(items: list[dict], resource: str, container: str = "") -> dict[str, PodSample]:
    """PodMetrics items as samples by pod name: the sum over the pod's containers (a pod
    lacking the resource in any container has no sample), or the one named container
    (a pod whose metrics lack that container is an error, as upstream's)."""
    out: dict[str, PodSample] = {}
    for m in items:
        md = dict_at(m, "metadata")
        name = str(md.get("name", ""))
        stamp = _seconds(m.get("timestamp")) or 0.0
        window = _window_seconds(m.get("window"))
        containers = list_at(m, "containers")
        if container:
            found = next((c for c in containers if isinstance(c, dict) and c.get("name") == container), None)
            if found is None:
                raise MetricError(
                    f"failed to get container metrics: container {container} not present in metrics for pod "
                    f"{md.get('namespace', '')}/{name}"
                )
            value = _milli(dict_at(found, "usage").get(resource))
            if value is not None:
                out[name] = PodSample(value, stamp, window)
            continue
        total = 0
        missing = not containers
        for c in containers:
            value = _milli(dict_at(c, "usage").get(resource)) if isinstance(c, dict) else None
            if value is None:
                missing = True
                break
            total += value
        if not missing:
            out[name] = PodSample(total, stamp, window)
    return out


@dataclasses.dataclass
class PodGroups:
    ready: int
    unready: set[str]
    missing: set[str]
    ignored: set[str]


def group_pods(
    pods: list[dict],
    samples: Mapping[str, PodSample],
    resource: str,
    now: float,
    cpu_initialization_period: float,
    initial_readiness_delay: float,
) -> PodGroups:
    groups = PodGroups(0, set(), set(), set())
    for pod in pods:
        md, status = dict_at(pod, "metadata"), dict_at(pod, "status")
        name = str(md.get("name", ""))
        phase = status.get("phase")
        if md.get("deletionTimestamp") or phase == "Failed":
            groups.ignored.add(name)
            continue
        if phase == "Pending":
            groups.unready.add(name)
            continue
        sample = samples.get(name)
        if sample is None:
            groups.missing.add(name)
            continue
        if resource == "cpu":
            ready = get_condition(pod, "Ready")
            started = _seconds(status.get("startTime"))
            if ready is None or started is None:
                unready = True
            else:
                transition = _seconds(ready.get("lastTransitionTime")) or 0.0
                if started + cpu_initialization_period > now:
                    # Still initializing: unready, or no full sample since it turned ready.
                    unready = ready.get("status") == "False" or sample.timestamp < transition + sample.window
                else:
                    # Unready and never ready since it started.
                    unready = ready.get("status") == "False" and started + initial_readiness_delay > transition
            if unready:
                groups.unready.add(name)
                continue
        groups.ready += 1
    return groups


def pod_requests(pods: list[dict], resource: str, container: str = "") -> dict[str, int]:
    """Each pod's request of ``resource`` in thousandths, over its containers (or the one
    named); a container without the request is an error."""
    out: dict[str, int] = {}
    for pod in pods:
        total = 0
        for c in list_at(dict_at(pod, "spec"), "containers"):
            if not isinstance(c, dict) or (container and c.get("name") != container):
                continue
            value = _milli(dict_at(dict_at(c, "resources"), "requests").get(resource))
            if value is None:
                raise MetricError(
                    f"missing request for {resource} in container {c.get('name', '')} of Pod "
                    f"{dict_at(pod, 'metadata').get('name', '')}"
                )
            total += value
        out[str(dict_at(pod, "metadata").get("name", ""))] = total
    return out


def utilization_ratio(
    samples: Mapping[str, PodSample], requests: Mapping[str, int], target: int
) -> tuple[float, int, int]:
    """(usage / target ratio, utilization percent, average raw usage in thousandths)."""
    used = requested = count = 0
    for name, sample in samples.items():
        if name not in requests:
            continue
        used += sample.value
        requested += requests[name]
        count += 1
    if requested == 0:
        raise MetricError("no metrics returned matched known pods")
    utilization = (used * 100) // requested
    return utilization / target, utilization, used // count


def usage_ratio(samples: Mapping[str, PodSample], target: int) -> tuple[float, int]:
    """(average usage / target ratio, average usage in thousandths)."""
    average = sum(s.value for s in samples.values()) // len(samples)
    return average / target, average


@dataclasses.dataclass
class Proposal:
    replicas: int
    utilization: int | None  # percent of request, for utilization targets
    raw: int  # average usage in thousandths
    timestamp: float


class ReplicaCalculator:
    def __init__(
        self,
        tolerance: float = DEFAULT_TOLERANCE,
        cpu_initialization_period: float = 300.0,
        initial_readiness_delay: float = 30.0,
    ):
        self.tolerance = tolerance
        self.cpu_initialization_period = cpu_initialization_period
        self.initial_readiness_delay = initial_readiness_delay

    def _groups(self, pods: list[dict], samples: dict[str, PodSample], resource: str, now: float) -> PodGroups:
        if not pods:
            raise MetricError("no pods returned by selector while calculating replica count")
        groups = group_pods(pods, samples, resource, now, self.cpu_initialization_period, self.initial_readiness_delay)
        for name in groups.ignored | groups.unready:
            samples.pop(name, None)
        if not samples:
            raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
        return groups

    def _settle(self, current: int, ratio: float, new_ratio: float, counted: int) -> int:
        """The count after missing and unready pods were filled in: the current one when
        within the tolerance or when the direction would change."""
        if abs(1.0 - new_ratio) <= self.tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
            return current
        proposed = math.ceil(new_ratio * counted)
        if (new_ratio < 1.0 and proposed > current) or (new_ratio > 1.0 and proposed < current):
            return current
        return proposed

    def resource_replicas(
        self,
        current: int,
        target_utilization: int,
        resource: str,
        pods: list[dict],
        samples: dict[str, PodSample],
        now: float,
        container: str = "",
    ) -> Proposal:
        """Replicas for an average utilization target (percent of the pods' requests)."""
        stamp = next(iter(samples.values())).timestamp if samples else 0.0
        groups = self._groups(pods, samples, resource, now)
        requests = pod_requests(pods, resource, container)
        ratio, utilization, raw = utilization_ratio(samples, requests, target_utilization)
        up_with_unready = bool(groups.unready) and ratio > 1.0
        if not up_with_unready and not groups.missing:
            if abs(1.0 - ratio) <= self.tolerance:
                return Proposal(current, utilization, raw, stamp)
            return Proposal(math.ceil(ratio * groups.ready), utilization, raw, stamp)
        if groups.missing:
            for name in groups.missing:
                # A scale-down counts the missing as using all of their request; a scale-up, nothing.
                samples[name] = PodSample(requests.get(name, 0) if ratio < 1.0 else 0)
        if up_with_unready:
            for name in groups.unready:
                samples[name] = PodSample(0)
        new_ratio, _, _ = utilization_ratio(samples, requests, target_utilization)
        return Proposal(self._settle(current, ratio, new_ratio, len(samples)), utilization, raw, stamp)

    def raw_replicas(
        self,
        current: int,
        target_milli: int,
        resource: str,
        pods: list[dict],
        samples: dict[str, PodSample],
        now: float,
    ) -> Proposal:
        """Replicas for an average value target (thousandths of the unit per pod)."""
        stamp = next(iter(samples.values())).timestamp if samples else 0.0
        groups = self._groups(pods, samples, resource, now)
        ratio, usage = usage_ratio(samples, target_milli)
        up_with_unready = bool(groups.unready) and ratio > 1.0
        if not up_with_unready and not groups.missing:
            if abs(1.0 - ratio) <= self.tolerance:
                return Proposal(current, None, usage, stamp)
            return Proposal(math.ceil(ratio * groups.ready), None, usage, stamp)
        for name in groups.missing:
            # A scale-down counts the missing as using exactly the target; a scale-up, nothing.
            samples[name] = PodSample(target_milli if ratio < 1.0 else 0)
        if up_with_unready:
            for name in groups.unready:
                samples[name] = PodSample(0)
        new_ratio, _ = usage_ratio(samples, target_milli)
        return Proposal(self._settle(current, ratio, new_ratio, len(samples)), None, usage, stamp)


# --- behavior, stabilization and bounds ----------------------------------------------------------


@dataclasses.dataclass
class Recommendation:
    replicas: int
    at: float


@dataclasses.dataclass
class ScaleEvent:
    change: int
    at: float
    outdated: bool = False


@dataclasses.dataclass
class Limited:
    """The count after the rules, with the reason and message of ScalingLimited and of
    AbleToScale (the stabilization's)."""

    replicas: int
    able_reason: str
    able_message: str
    limited: bool
    limit_reason: str
    limit_message: str


WITHIN_RANGE = ("DesiredWithinRange", "the desired count is within the acceptable range")
TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")
TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
SCALE_UP_LIMIT = ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
SCALE_DOWN_LIMIT = ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate")
READY = ("ReadyForNewScale", "recommended size matches current size")
DOWN_STABILIZED = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
)
UP_STABILIZED = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
)


def _changed_within(events: list[ScaleEvent], period: float, now: float) -> int:
    return sum(e.change for e in events if e.at > now - period)


def scale_up_limit(current: int, ups: list[ScaleEvent], downs: list[ScaleEvent], rules: Mapping, now: float) -> int:
    """The most replicas the scale-up policies allow now."""
    select = rules.get("selectPolicy") or "Max"
    if select == "Disabled":
        return current
    result: int | None = None
    for policy in list_at(rules, "policies"):
        period = float(policy.get("periodSeconds") or 0)
        start = current - _changed_within(ups, period, now) + _changed_within(downs, period, now)
        value = int(policy.get("value") or 0)
        if policy.get("type") == "Pods":
            proposed = start + value
        else:
            proposed = math.ceil(start * (1 + value / 100))
        if result is None:
            result = proposed
        else:
            result = min(result, proposed) if select == "Min" else max(result, proposed)
    return current if result is None else result


def scale_down_limit(current: int, ups: list[ScaleEvent], downs: list[ScaleEvent], rules: Mapping, now: float) -> int:
    """The fewest replicas the scale-down policies allow now."""
    select = rules.get("selectPolicy") or "Max"
    if select == "Disabled":
        return current
    result: int | None = None
    for policy in list_at(rules, "policies"):
        period = float(policy.get("periodSeconds") or 0)
        start = current - _changed_within(ups, period, now) + _changed_within(downs, period, now)
        value = int(policy.get("value") or 0)
        if policy.get("type") == "Pods":
            proposed = start - value
        else:
            proposed = int(start * (1 - value / 100))
        if result is None:
            result = proposed
        else:
            result = max(result, proposed) if select == "Min" else min(result, proposed)
    return current if result is None else result


def _longest_period(rules: Mapping) -> float:
    return float(max((int(p.get("periodSeconds") or 0) for p in list_at(rules, "policies")), default=0))


class ScalingHistory:
    """Per autoscaler: its recent recommendations and (with a behavior) its scale events,
    kept in memory as upstream's controller keeps them; ``clock`` gives the time."""

    def __init__(self, clock: Callable[[], float], downscale_stabilization: float = 300.0):
        self.clock = clock
        self.downscale_stabilization = downscale_stabilization
        self.recommendations: dict[str, list[Recommendation]] = {}
        self.ups: dict[str, list[ScaleEvent]] = {}
        self.downs: dict[str, list[ScaleEvent]] = {}

    def forget(self, key: str) -> None:
        for d in (self.recommendations, self.ups, self.downs):
            d.pop(key, None)

    def record_initial(self, key: str, current: int) -> None:
        if not self.recommendations.get(key):
            self.recommendations[key] = [Recommendation(current, self.clock())]

    def _record(self, key: str, replicas: int, old_index: int | None) -> None:
        rec = Recommendation(replicas, self.clock())
        recs = self.recommendations.setdefault(key, [])
        if old_index is not None:
            recs[old_index] = rec
        else:
            recs.append(rec)

    # --- without a behavior (upstream's v1-style normalization) -------------------------
    def normalize(self, key: str, current: int, desired: int, min_replicas: int, max_replicas: int) -> Limited:
        now = self.clock()
        cutoff = now - self.downscale_stabilization
        stabilized = desired
        old_index = None
        for i, rec in enumerate(self.recommendations.get(key, [])):
            if rec.at < cutoff:
                old_index = i
            elif rec.replicas > stabilized:
                stabilized = rec.replicas
        self._record(key, desired, old_index)
        able = DOWN_STABILIZED if stabilized != desired else READY
        up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
        maximum, reason = (up_limit, SCALE_UP_LIMIT) if max_replicas > up_limit else (max_replicas, TOO_MANY)
        if stabilized < min_replicas:
            result, reason = min_replicas, TOO_FEW
        elif stabilized > maximum:
            result = maximum
        else:
            result, reason = stabilized, WITHIN_RANGE
        return Limited(result, *able, result != stabilized, *reason)

    # --- with a behavior --------------------------------------------------------------------
    def normalize_with_behavior(
        self,
        key: str,
        current: int,
        desired: int,
        min_replicas: int,
        max_replicas: int,
        scale_up: Mapping,
        scale_down: Mapping,
    ) -> Limited:
        now = self.clock()
        up_window = rules_window(scale_up, 0.0)
        down_window = rules_window(scale_down, self.downscale_stabilization)
        up_cutoff, down_cutoff = now - up_window, now - down_window
        up_rec = down_rec = desired
        old_index = None
        for i, rec in enumerate(self.recommendations.get(key, [])):
            if rec.at > up_cutoff:
                up_rec = min(rec.replicas, up_rec)
            if rec.at > down_cutoff:
                down_rec = max(rec.replicas, down_rec)
            if rec.at < up_cutoff and rec.at < down_cutoff:
                old_index = i
        stabilized = min(max(current, up_rec), down_rec)
        self._record(key, desired, old_index)
        if stabilized != desired:
            able = UP_STABILIZED if desired >= current else DOWN_STABILIZED
        else:
            able = READY
        ups, downs = self.ups.get(key, []), self.downs.get(key, [])
        result, reason = stabilized, WITHIN_RANGE
        if stabilized > current:
            limit = max(scale_up_limit(current, ups, downs, scale_up, now), current)
            maximum, why = (limit, SCALE_UP_LIMIT) if max_replicas > limit else (max_replicas, TOO_MANY)
            if stabilized > maximum:
                result, reason = maximum, why
        elif stabilized < current:
            limit = min(scale_down_limit(current, ups, downs, scale_down, now), current)
            minimum, why = (limit, SCALE_DOWN_LIMIT) if min_replicas < limit else (min_replicas, TOO_FEW)
            if stabilized < minimum:
                result, reason = minimum, why
        return Limited(result, *able, result != stabilized, *reason)

    def record_scale(self, key: str, behavior: Mapping | None, before: int, after: int) -> None:
        """A rescale that landed, for the rate policies (only autoscalers with a behavior)."""
        if behavior is None or before == after:
            return
        now = self.clock()
        up = after > before
        rules = dict_at(behavior, "scaleUp" if up else "scaleDown")
        events = (self.ups if up else self.downs).setdefault(key, [])
        period = _longest_period(rules)
        for e in events:
            if e.at <= now - period:
                e.outdated = True
        change = abs(after - before)
        for i, e in enumerate(events):
            if e.outdated:
                events[i] = ScaleEvent(change, now)
                return
        events.append(ScaleEvent(change, now))


def rules_window(rules: Mapping, default: float) -> float:
    value = rules.get("stabilizationWindowSeconds")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else default
