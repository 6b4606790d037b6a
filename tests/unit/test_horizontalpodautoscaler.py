"""The horizontal pod autoscaler: its replica arithmetic (tolerance, missing metrics,
unready pods, behavior policies, stabilization, bounds) with an injected clock; the
kind's defaults, validation and table; then the controller over a real store and
watch cache on SQLite, as its own RBAC identity, with a fake metrics source."""

from __future__ import annotations

import datetime as _dt

import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.defaults import apply_defaults
from apiserver_min.api.kinds import REGISTRY, hpa_targets
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.authz.authorizer import PrivilegedGroups, Union
from apiserver_min.authz.rbac import RbacAuthorizer, RbacIndex
from apiserver_min.client.informer import InformerFactory
from apiserver_min.client.local import LocalClient, controller_user
from apiserver_min.controllers.bootstrappolicy import reconcile_default_policy
from apiserver_min.controllers.horizontalpodautoscaler import HorizontalPodAutoscalerController
from apiserver_min.controllers.hpacalc import (
    MetricError,
    PodSample,
    ReplicaCalculator,
    ScalingHistory,
    pod_samples,
    scale_down_limit,
    scale_up_limit,
)
from apiserver_min.options import OptionsError, parse
from apiserver_min.registry.autoscaling import validate_hpa_spec
from apiserver_min.registry.autoscaling_v1 import from_v1, to_v1
from apiserver_min.registry.rest import DeleteOptions
from apiserver_min.registry.store import Store
from apiserver_min.server.resourcemetrics import ResourceMetrics, parse_resource_metrics
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix, object_key
from apiserver_min.storage.sqlite import SqliteBackend

UTC = _dt.timezone.utc
T0 = 1_800_000_000.0  # the tests' "now"


def stamp(t: float) -> str:
    return _dt.datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def pod(
    name: str, cpu: str = "100m", *, ready: bool = True, started: float = T0 - 3600, phase: str = "Running"
) -> dict:
    return {
        "metadata": {"name": name, "namespace": "team", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {
            "phase": phase,
            "startTime": stamp(started),
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": stamp(started + 5)}
            ],
        },
    }


def samples(**milli: int) -> dict[str, PodSample]:
    return {name: PodSample(value, T0 - 10, 15.0) for name, value in milli.items()}


# --- the replica calculator --------------------------------------------------------------------


def test_within_tolerance_nothing_changes_and_beyond_it_the_ratio_scales():
    calc = ReplicaCalculator()
    pods = [pod(f"p{i}") for i in range(3)]
    # 54% of request against a 50% target: ratio 1.08, within the tolerance.
    p = calc.resource_replicas(3, 50, "cpu", pods, samples(p0=54, p1=54, p2=54), T0)
    assert (p.replicas, p.utilization, p.raw) == (3, 54, 54)
    # 56%: ratio 1.12, beyond it: ceil(1.12 * 3) = 4.
    assert calc.resource_replicas(3, 50, "cpu", pods, samples(p0=56, p1=56, p2=56), T0).replicas == 4
    # 100% against 50%: twice the pods.
    assert calc.resource_replicas(3, 50, "cpu", pods, samples(p0=100, p1=100, p2=100), T0).replicas == 6
    # 10% against 50%: ceil(0.2 * 3) = 1.
    assert calc.resource_replicas(3, 50, "cpu", pods, samples(p0=10, p1=10, p2=10), T0).replicas == 1
    # A wider tolerance keeps 1.12 as it is.
    wide = ReplicaCalculator(tolerance=0.2)
    assert wide.resource_replicas(3, 50, "cpu", pods, samples(p0=56, p1=56, p2=56), T0).replicas == 3


def test_missing_metrics_count_as_zero_on_scale_up_and_full_request_on_scale_down():
    calc = ReplicaCalculator()
    pods = [pod(f"p{i}") for i in range(4)]
    # Scale-up: three at 100% of a 50% target, the fourth missing counts as 0%:
    # (300 / 400) * 100 = 75% -> ratio 1.5 over four pods: 6 (not 8).
    assert calc.resource_replicas(4, 50, "cpu", pods, samples(p0=100, p1=100, p2=100), T0).replicas == 6
    # Scale-down: three at 10%, the missing one counts as its whole request (100%):
    # (30 + 100) / 400 = 32% -> ratio 0.65 over four pods: 3 (not 1).
    assert calc.resource_replicas(4, 50, "cpu", pods, samples(p0=10, p1=10, p2=10), T0).replicas == 3
    # When filling in the missing one flips the direction, the count stays.
    assert calc.resource_replicas(4, 50, "cpu", pods, samples(p0=45, p1=45, p2=45), T0).replicas == 4


def test_unready_pods_are_left_out_of_a_cpu_scale_up():
    calc = ReplicaCalculator()
    pods = [pod("p0"), pod("p1"), pod("p2", ready=False, started=T0 - 60)]
    # p2 is unready (and still initializing): it counts as 0% on a scale-up.
    # Ready two at 100% of a 50% target, p2 at 0: 200/300 = 66% -> 1.32 * 3 = 4.
    assert calc.resource_replicas(3, 50, "cpu", pods, samples(p0=100, p1=100, p2=100), T0).replicas == 4
    # Pending pods are unready too.
    pods[2] = pod("p2", phase="Pending")
    assert calc.resource_replicas(3, 50, "cpu", pods, samples(p0=100, p1=100), T0).replicas == 4
    # A ready pod whose only sample predates a full window since it turned ready is unready too.
    young = pod("p2", started=T0 - 20)
    young["status"]["conditions"][0]["lastTransitionTime"] = stamp(T0 - 12)
    pods[2] = young
    assert calc.resource_replicas(3, 50, "cpu", pods, samples(p0=100, p1=100, p2=500), T0).replicas == 4
    # A deleted or failed pod is ignored altogether.
    gone = pod("p2")
    gone["metadata"]["deletionTimestamp"] = stamp(T0)
    pods[2] = gone
    assert calc.resource_replicas(2, 50, "cpu", pods, samples(p0=100, p1=100, p2=900), T0).replicas == 4


def test_memory_is_not_subject_to_the_cpu_readiness_rules_and_raw_values_scale_by_average():
    calc = ReplicaCalculator()
    pods = [pod("p0"), pod("p1", ready=False, started=T0 - 60)]
    # An average value target of 100 (milli-units): both pods count, average 150 -> 3.
    p = calc.raw_replicas(2, 100_000, "memory", pods, samples(p0=200_000, p1=100_000), T0)
    assert (p.replicas, p.raw) == (3, 150_000)


def test_calculator_errors_use_upstreams_words():
    calc = ReplicaCalculator()
    with pytest.raises(MetricError, match="no pods returned by selector while calculating replica count"):
        calc.resource_replicas(1, 50, "cpu", [], samples(p0=1), T0)
    with pytest.raises(MetricError, match=r"did not receive metrics for targeted pods \(pods might be unready\)"):
        calc.resource_replicas(1, 50, "cpu", [pod("p0", phase="Pending")], samples(p0=1), T0)
    no_request = pod("p0")
    no_request["spec"]["containers"][0]["resources"] = {}
    with pytest.raises(MetricError, match="missing request for cpu in container c of Pod p0"):
        calc.resource_replicas(1, 50, "cpu", [no_request], samples(p0=1), T0)


def test_pod_samples_sum_containers_or_take_the_named_one():
    items = [
        {
            "metadata": {"name": "p0", "namespace": "team"},
            "timestamp": stamp(T0),
            "window": "15.003s",
            "containers": [{"name": "a", "usage": {"cpu": "250m"}}, {"name": "b", "usage": {"cpu": "1500000n"}}],
        },
        {"metadata": {"name": "p1", "namespace": "team"}, "containers": [{"name": "a", "usage": {"memory": "1Mi"}}]},
    ]
    got = pod_samples(items, "cpu")
    assert list(got) == ["p0"] and got["p0"].value == 252 and got["p0"].window == pytest.approx(15.003)
    assert pod_samples(items, "cpu", "a")["p0"].value == 250
    with pytest.raises(MetricError, match="container b not present in metrics for pod team/p1"):
        pod_samples(items, "cpu", "b")


# --- behavior, stabilization, bounds -----------------------------------------------------------


UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
    {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]}  # fmt: skip
DOWN = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def test_scale_policies_take_the_largest_change_and_count_recent_events():
    assert scale_up_limit(2, [], [], UP, T0) == 6  # 2 + 4 pods beats 2 * 2
    assert scale_up_limit(10, [], [], UP, T0) == 20  # doubling beats + 4
    assert scale_up_limit(10, [], [], {**UP, "selectPolicy": "Min"}, T0) == 14
    assert scale_up_limit(10, [], [], {**UP, "selectPolicy": "Disabled"}, T0) == 10
    assert scale_down_limit(10, [], [], DOWN, T0) == 0
    slow = {"selectPolicy": "Max", "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
    assert scale_down_limit(10, [], [], slow, T0) == 9
    # One pod already removed 30 s ago: the period started at 10 + 1 = 11 -> 10 is the floor now.
    history = ScalingHistory(Clock(T0 - 30))
    history.record_scale("k", {"scaleDown": slow}, 11, 10)
    assert scale_down_limit(10, history.ups.get("k", []), history.downs["k"], slow, T0) == 10


def test_without_behavior_scale_down_waits_out_the_stabilization_window():
    clock = Clock()
    history = ScalingHistory(clock, downscale_stabilization=300)
    history.record_initial("k", 5)
    # The metrics want 2, but 5 was recommended within the window.
    got = history.normalize("k", 5, 2, 1, 10)
    assert (got.replicas, got.able_reason) == (5, "ScaleDownStabilized")
    clock.t += 301  # the 5 leaves the window; the 2 just recorded is the highest
    got = history.normalize("k", 5, 2, 1, 10)
    assert (got.replicas, got.able_reason, got.limit_reason, got.limited) == (
        2,
        "ReadyForNewScale",
        "DesiredWithinRange",
        False,
    )


def test_without_behavior_the_bounds_and_the_scale_up_rate_limit():
    history = ScalingHistory(Clock())
    got = history.normalize("a", 2, 12, 1, 10)  # at most max(2 * 2, 4) = 4 at once
    assert (got.replicas, got.limited, got.limit_reason) == (4, True, "ScaleUpLimit")
    got = history.normalize("b", 6, 12, 1, 10)  # 12 would be allowed by the rate, not by max
    assert (got.replicas, got.limited, got.limit_reason) == (10, True, "TooManyReplicas")
    got = history.normalize("c", 1, 0, 2, 10)
    assert (got.replicas, got.limited, got.limit_reason) == (2, True, "TooFewReplicas")


def test_with_behavior_windows_stabilize_both_ways_and_policies_limit_the_rate():
    clock = Clock()
    history = ScalingHistory(clock, downscale_stabilization=300)
    up = {**UP, "stabilizationWindowSeconds": 60}
    history.record_initial("k", 4)
    # Up: 4 was recommended within the minute, so the lowest recent (4) holds.
    got = history.normalize_with_behavior("k", 4, 8, 1, 20, up, {**DOWN, "stabilizationWindowSeconds": 0})
    assert (got.replicas, got.able_reason) == (4, "ScaleUpStabilized")
    clock.t += 61
    got = history.normalize_with_behavior("k", 4, 8, 1, 20, up, {**DOWN, "stabilizationWindowSeconds": 0})
    assert (got.replicas, got.able_reason, got.limit_reason) == (8, "ReadyForNewScale", "DesiredWithinRange")
    # Rate: one pod per minute up, so from 4 only 5.
    one_pod = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 60}]}  # fmt: skip
    got = history.normalize_with_behavior("r", 4, 8, 1, 20, one_pod, DOWN)
    assert (got.replicas, got.limited, got.limit_reason) == (5, True, "ScaleUpLimit")
    history.record_scale("r", {"scaleUp": one_pod}, 4, 5)
    clock.t += 30  # within the period: no more room
    got = history.normalize_with_behavior("r", 5, 8, 1, 20, one_pod, DOWN)
    assert got.replicas == 5
    # Down with the scale-down window unset: the controller's --downscale-stabilization applies.
    history2 = ScalingHistory(clock, downscale_stabilization=300)
    history2.record_initial("d", 6)
    got = history2.normalize_with_behavior("d", 6, 2, 1, 20, UP, DOWN)
    assert (got.replicas, got.able_reason) == (6, "ScaleDownStabilized")
    # Disabled scale-down never goes down.
    clock.t += 400
    got = history2.normalize_with_behavior("d", 6, 2, 1, 20, UP, {**DOWN, "selectPolicy": "Disabled"})
    assert (got.replicas, got.limit_reason) == (6, "ScaleDownLimit")


# --- defaults, validation, table ---------------------------------------------------------------


def _hpa(**spec) -> dict:
    base = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 5}
    return {"metadata": {"name": "web", "namespace": "team"}, "spec": {**base, **spec}}


def test_defaults_fill_min_replicas_cpu_metric_and_behavior_rules():
    obj = _hpa(behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})
    apply_defaults(names.AUTOSCALING_GROUP, "v2", "HorizontalPodAutoscaler", obj)
    spec = obj["spec"]
    assert spec["minReplicas"] == 1
    assert spec["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}
    ]
    assert spec["behavior"]["scaleUp"] == UP
    assert spec["behavior"]["scaleDown"] == {**DOWN, "stabilizationWindowSeconds": 60}
    plain = _hpa()
    apply_defaults(names.AUTOSCALING_GROUP, "v2", "HorizontalPodAutoscaler", plain)
    assert "behavior" not in plain["spec"]


@pytest.mark.parametrize(
    "spec, messages",
    [
        (
            {"minReplicas": 0},
            [
                "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
                "spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling "
                "to zero replicas",
            ],
        ),
        (
            {"minReplicas": 3, "maxReplicas": 2},
            ["spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"],
        ),
        (
            {"maxReplicas": 0},
            [
                "spec.maxReplicas: Invalid value: 0: must be greater than 0",
                "spec.maxReplicas: Invalid value: 0: must be greater than or equal to `minReplicas`",
            ],
        ),
        ({"scaleTargetRef": {"name": "x"}}, ["spec.scaleTargetRef.kind: Required value"]),
        (
            {"metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}]},
            [
                "spec.metrics[0].resource.target.averageUtilization: Required value: must set either a target "
                "raw value or a target utilization"
            ],
        ),
        (
            {"metrics": [{"type": "Pods", "resource": {"name": "cpu", "target": {"type": "Value"}}}]},
            [
                "spec.metrics[0].pods: Required value: must populate information for the given metric source",
                "spec.metrics[0].resource.target.averageUtilization: Required value: must set either a target "
                "raw value or a target utilization",
            ],
        ),
        (
            {"metrics": [{"type": "Memory"}]},
            [
                'spec.metrics[0].type: Unsupported value: "Memory": supported values: "ContainerResource", '
                '"External", "Object", "Pods", "Resource"'
            ],
        ),
        (
            {
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Average", "averageValue": "-1"}},
                    }
                ]
            },  # fmt: skip
            [
                'spec.metrics[0].resource.target.type: Invalid value: "Average": must be either Utilization, '
                "Value, or AverageValue",
                'spec.metrics[0].resource.target.averageValue: Invalid value: "-1": must be positive',
            ],
        ),
        (
            {
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 3601, "selectPolicy": "Most", "policies": []},
                    "scaleDown": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 1801}]},
                }
            },
            [
                "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 3601: must be less than or "
                "equal to 3600",
                'spec.behavior.scaleUp.selectPolicy: Unsupported value: "Most": supported values: "Disabled", '
                '"Max", "Min"',
                "spec.behavior.scaleUp.policies: Required value: must specify at least one Policy",
                "spec.behavior.scaleDown.policies[0].value: Invalid value: 0: must be greater than zero",
                "spec.behavior.scaleDown.policies[0].periodSeconds: Invalid value: 1801: must be less than or "
                "equal to 1800",
            ],
        ),
    ],
)
def test_validation_messages(spec, messages):
    obj = _hpa(**spec)
    apply_defaults(names.AUTOSCALING_GROUP, "v2", "HorizontalPodAutoscaler", obj)
    assert [e.message() for e in validate_hpa_spec(obj["spec"])] == messages


def test_targets_cell_prints_current_over_target_as_upstream():
    obj = _hpa(
        metrics=[
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
            },
            {
                "type": "Pods",
                "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}},
            },
            {"type": "External", "external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "10"}}},
        ]
    )
    assert hpa_targets(obj) == "<unknown>/50%, <unknown>/1k + 1 more..."
    obj["status"] = {"currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {
        "averageUtilization": 20, "averageValue": "20m"}}}]}  # fmt: skip
    obj["spec"]["metrics"] = obj["spec"]["metrics"][:1]
    assert hpa_targets(obj) == "20%/50%"
    assert hpa_targets(_hpa()) == "<none>"


# --- the controller over a real store ------------------------------------------------------------

HPAS = REGISTRY.by_resource(names.AUTOSCALING_GROUP, "v2", "horizontalpodautoscalers")
DEPLOYMENTS = REGISTRY.by_resource("apps", "v1", "deployments")
PODS = REGISTRY.by_resource("", "v1", "pods")
EVENTS = REGISTRY.by_resource("", "v1", "events")
NS_KIND = REGISTRY.by_resource("", "v1", "namespaces")


class FakeMetrics:
    """The PodMetricsSource the controller is given: fixed CPU usage by pod name."""

    def __init__(self):
        self.cpu: dict[str, str] = {}
        self.asked: list[tuple] = []

    def pod_metrics(self, namespace, labels, fields):
        self.asked.append((namespace, str(labels)))
        return [
            {
                "metadata": {"name": name, "namespace": namespace},
                "timestamp": stamp(T0 - 10),
                "window": "15s",
                "containers": [{"name": "c", "usage": {"cpu": cpu, "memory": "10Mi"}}],
            }
            for name, cpu in sorted(self.cpu.items())
        ]


@pytest.fixture
async def cluster(tmp_path):
    backend = SqliteBackend(str(tmp_path / "state.db"))
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    index = RbacIndex.attach(cache, REGISTRY)
    store = Store(backend, REGISTRY, cache, Chain([]))
    await backend.start()
    await cache.start()
    await reconcile_default_policy(store)
    await store.create(NS_KIND, "", {"metadata": {"name": "team"}}, SYSTEM_USER)
    await cache.sync()
    informers = InformerFactory(cache, REGISTRY)
    authorizer = Union([PrivilegedGroups(), RbacAuthorizer(index)])
    client = LocalClient(
        store, authorizer, controller_user("horizontal-pod-autoscaler"), names.CONTROLLER_MANAGER_FIELD_MANAGER
    )
    yield store, cache, informers, client
    informers.stop()
    await cache.stop()
    await backend.close()


async def _deployment_with_pods(store, replicas: int) -> None:
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c", "image": "orch.local/busybox:1", "resources": {"requests": {"cpu": "100m"}}}]
        },
    }
    await store.create(
        DEPLOYMENTS,
        "team",
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template},
        },
        SYSTEM_USER,
    )
    for i in range(replicas):
        await store.create(
            PODS,
            "team",
            {"metadata": {"name": f"web-{i}", "labels": {"app": "web"}}, "spec": template["spec"]},
            SYSTEM_USER,
        )

        def running(obj: dict) -> dict:
            obj["status"] = {
                "phase": "Running",
                "startTime": stamp(T0 - 3600),
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(T0 - 3590)}],
            }
            return obj

        await store.update(PODS, "team", f"web-{i}", running, SYSTEM_USER, subresource="status")


def _conditions(hpa: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in hpa["status"]["conditions"]}


def _events(cache) -> list[tuple[str, str, str]]:
    entries = cache.cache(key_prefix(EVENTS)).sorted_entries("team")
    return [(e.object()["type"], e.object()["reason"], e.object()["message"]) for e in entries]


async def test_controller_scales_a_deployment_through_its_scale_and_reports_status(cluster):
    store, cache, informers, client = cluster
    await _deployment_with_pods(store, 2)
    await store.create(
        HPAS,
        "team",
        {
            "metadata": {"name": "web"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                    }
                ],  # fmt: skip
            },
        },
        SYSTEM_USER,
    )
    await cache.sync()
    metrics = FakeMetrics()
    metrics.cpu = {"web-0": "90m", "web-1": "110m"}  # 100% of request against 50%
    clock = Clock()
    controller = HorizontalPodAutoscalerController(client, informers, metrics, clock=clock)
    key = object_key(HPAS, "team", "web")
    await controller.sync(key)
    await cache.sync()
    assert (await store.get_object(DEPLOYMENTS, "team", "web"))["spec"]["replicas"] == 4
    hpa = await store.get_object(HPAS, "team", "web")
    status = hpa["status"]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (2, 4)
    assert status["lastScaleTime"] == stamp(T0)
    assert status["currentMetrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "current": {"averageUtilization": 100, "averageValue": "100m"}},
        }
    ]
    assert _conditions(hpa) == {
        "AbleToScale": ("True", "SucceededRescale"),
        "ScalingActive": ("True", "ValidMetricFound"),
        "ScalingLimited": ("False", "DesiredWithinRange"),
    }
    assert metrics.asked == [("team", "app=web")]
    assert (
        "Normal",
        "SuccessfulRescale",
        "New size: 4; reason: cpu resource utilization (percentage of request) above target",
    ) in _events(cache)
    assert [r for r in hpa_targets(hpa).split(", ")] == ["100%/50%"]


async def test_controller_reports_missing_metrics_and_unsupported_metric_apis(cluster):
    store, cache, informers, client = cluster
    await _deployment_with_pods(store, 2)
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "maxReplicas": 5,
    }
    await store.create(HPAS, "team", {"metadata": {"name": "web"}, "spec": spec}, SYSTEM_USER)
    external = {
        **spec,
        "metrics": [
            {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}
        ],  # fmt: skip
    }
    await store.create(HPAS, "team", {"metadata": {"name": "queue"}, "spec": external}, SYSTEM_USER)
    await cache.sync()
    controller = HorizontalPodAutoscalerController(client, informers, FakeMetrics(), clock=Clock())
    await controller.sync(object_key(HPAS, "team", "web"))
    await controller.sync(object_key(HPAS, "team", "queue"))
    await cache.sync()
    web = await store.get_object(HPAS, "team", "web")
    assert _conditions(web)["ScalingActive"] == ("False", "FailedGetResourceMetric")
    cause = "failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"
    active = next(c for c in web["status"]["conditions"] if c["type"] == "ScalingActive")
    assert active["message"] == f"the HPA was unable to compute the replica count: {cause}"
    assert web["status"]["currentReplicas"] == 2
    queue = await store.get_object(HPAS, "team", "queue")
    assert _conditions(queue)["ScalingActive"] == ("False", "FailedGetExternalMetric")
    events = _events(cache)
    assert ("Warning", "FailedGetResourceMetric", cause) in events
    assert (
        "Warning",
        "FailedComputeMetricsReplicas",
        f"invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: {cause}",
    ) in events
    assert any(r == "FailedGetExternalMetric" and "external.metrics.orch.io" in m for _, r, m in events)
    assert (await store.get_object(DEPLOYMENTS, "team", "web"))["spec"]["replicas"] == 2


async def test_controller_reports_a_target_it_cannot_scale(cluster):
    store, cache, informers, client = cluster
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nothing"}, "maxReplicas": 3}
    await store.create(HPAS, "team", {"metadata": {"name": "lost"}, "spec": spec}, SYSTEM_USER)
    await cache.sync()
    controller = HorizontalPodAutoscalerController(client, informers, FakeMetrics(), clock=Clock())
    await controller.sync(object_key(HPAS, "team", "lost"))
    await cache.sync()
    hpa = await store.get_object(HPAS, "team", "lost")
    assert _conditions(hpa) == {"AbleToScale": ("False", "FailedGetScale")}
    assert ("Warning", "FailedGetScale", 'deployments.apps "nothing" not found') in _events(cache)


async def test_the_controller_identity_may_not_write_what_its_role_does_not_grant(cluster):
    store, cache, informers, client = cluster
    with pytest.raises(st.ApiError) as info:
        await client.create(DEPLOYMENTS, "team", {"metadata": {"name": "x"}, "spec": {}})
    assert info.value.code == 403


# --- autoscaling/v1 by conversion, flags ---------------------------------------------------------


def test_v1_converts_to_the_stored_v2_and_back():
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 6,
            "targetCPUUtilizationPercentage": 70,
        },
    }
    v2 = from_v1(v1)
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]
    v2["status"] = {
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "currentMetrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "current": {"averageUtilization": 90, "averageValue": "90m"}},
            }
        ],
        "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale", "message": "m"}],
    }
    back = to_v1(v2)
    assert back["spec"] == v1["spec"]
    assert back["status"] == {"currentReplicas": 2, "desiredReplicas": 3, "currentCPUUtilizationPercentage": 90}
    conditions = back["metadata"]["annotations"][names.HPA_V1_CONDITIONS_ANNOTATION]
    assert '"SucceededRescale"' in conditions
    # What v1 cannot hold shows in annotations; a v1 write may not set them.
    v2["spec"]["metrics"].append(
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1"}}}
    )
    shown = to_v1(v2)
    assert '"qps"' in shown["metadata"]["annotations"][names.HPA_V1_METRICS_ANNOTATION]
    with pytest.raises(st.ApiError) as info:
        from_v1(shown)
    assert info.value.code == 422 and names.HPA_V1_METRICS_ANNOTATION in info.value.message


def test_autoscaler_flags_parse_as_durations_with_upstreams_defaults(tmp_path):
    opts = parse(["--data-dir", str(tmp_path)])
    assert (
        opts.horizontal_pod_autoscaler_sync_period,
        opts.horizontal_pod_autoscaler_tolerance,
        opts.horizontal_pod_autoscaler_cpu_initialization_period,
        opts.horizontal_pod_autoscaler_initial_readiness_delay,
        opts.horizontal_pod_autoscaler_downscale_stabilization,
    ) == (15.0, 0.1, 300.0, 30.0, 300.0)
    opts = parse(
        [
            "--data-dir",
            str(tmp_path),
            "--horizontal-pod-autoscaler-sync-period=5s",
            "--horizontal-pod-autoscaler-tolerance=0.2",
            "--horizontal-pod-autoscaler-downscale-stabilization=1m",
        ]
    )
    assert (opts.horizontal_pod_autoscaler_sync_period, opts.horizontal_pod_autoscaler_tolerance) == (5.0, 0.2)
    assert opts.horizontal_pod_autoscaler_downscale_stabilization == 60.0
    with pytest.raises(OptionsError, match="--horizontal-pod-autoscaler-tolerance"):
        parse(["--data-dir", str(tmp_path), "--horizontal-pod-autoscaler-tolerance=-1"])
    with pytest.raises(OptionsError, match="--horizontal-pod-autoscaler-sync-period"):
        parse(["--data-dir", str(tmp_path), "--horizontal-pod-autoscaler-sync-period=0s"])


def _agent_scrape(cpu_seconds: float, at: float) -> str:
    lines = []
    for pod_name in ("web-0", "web-1"):
        labels = f'container="c",namespace="team",pod="{pod_name}"'
        lines += [
            f"container_cpu_usage_seconds_total{{{labels}}} {cpu_seconds} {int(at * 1000)}",
            f"container_memory_working_set_bytes{{{labels}}} 10485760 {int(at * 1000)}",
            f"container_start_time_seconds{{{labels}}} {T0 - 3600}",
        ]
    return "\n".join(lines) + "\n"


async def test_controller_reads_the_servers_resource_metrics_api(cluster):
    """The real metrics source the server passes in: two scrapes of an agent's
    /metrics/resource, 15 s apart, with each pod's container using 150m of CPU."""
    store, cache, informers, client = cluster
    await _deployment_with_pods(store, 2)
    await store.create(
        HPAS,
        "team",
        {
            "metadata": {"name": "web"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "maxReplicas": 10,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "AverageValue", "averageValue": "50m"}},
                    }
                ],  # fmt: skip
            },
        },
        SYSTEM_USER,
    )
    await cache.sync()
    resource_metrics = ResourceMetrics(None, cache, REGISTRY, 15.0)  # no server: this one never scrapes
    resource_metrics.usage.record("node-a", parse_resource_metrics(_agent_scrape(10.0, T0 - 25), T0))
    resource_metrics.usage.record("node-a", parse_resource_metrics(_agent_scrape(12.25, T0 - 10), T0))
    controller = HorizontalPodAutoscalerController(client, informers, resource_metrics, clock=Clock())
    await controller.sync(object_key(HPAS, "team", "web"))
    await cache.sync()
    # 150m a pod against 50m: three times the pods (the default scale-up limit allows 4 from 2).
    assert (await store.get_object(DEPLOYMENTS, "team", "web"))["spec"]["replicas"] == 4
    hpa = await store.get_object(HPAS, "team", "web")
    assert hpa["status"]["currentMetrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageValue": "150m"}}}
    ]
    assert _conditions(hpa)["ScalingLimited"] == ("True", "ScaleUpLimit")


async def test_controller_brings_a_stateful_set_inside_the_bounds_without_metrics(cluster):
    store, cache, informers, client = cluster
    sts_kind = REGISTRY.by_resource("apps", "v1", "statefulsets")
    template = {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    await store.create(
        sts_kind,
        "team",
        {
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 1,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": template,
            },
        },
        SYSTEM_USER,
    )
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"},
        "minReplicas": 3,
        "maxReplicas": 5,
    }
    await store.create(HPAS, "team", {"metadata": {"name": "db"}, "spec": spec}, SYSTEM_USER)
    await cache.sync()
    metrics = FakeMetrics()
    controller = HorizontalPodAutoscalerController(client, informers, metrics, clock=Clock())
    await controller.sync(object_key(HPAS, "team", "db"))
    await cache.sync()
    assert (await store.get_object(sts_kind, "team", "db"))["spec"]["replicas"] == 3
    assert metrics.asked == []  # outside the bounds, no metric is read
    hpa = await store.get_object(HPAS, "team", "db")
    assert (hpa["status"]["currentReplicas"], hpa["status"]["desiredReplicas"]) == (1, 3)
    assert "currentMetrics" not in hpa["status"]
    assert (
        "Normal",
        "SuccessfulRescale",
        "New size: 3; reason: Current number of replicas below Spec.MinReplicas",
    ) in _events(cache)


async def test_pods_two_autoscalers_select_are_not_scaled(cluster):
    """Upstream's AmbiguousSelector: once two autoscalers have each used a selector that
    picks the same pods, neither scales them; deleting one lets the other go on."""
    store, cache, informers, client = cluster
    await _deployment_with_pods(store, 2)
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "maxReplicas": 5,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
            }
        ],  # fmt: skip
    }
    for name in ("web", "web-too"):
        await store.create(HPAS, "team", {"metadata": {"name": name}, "spec": spec}, SYSTEM_USER)
    await cache.sync()
    metrics = FakeMetrics()
    metrics.cpu = {"web-0": "50m", "web-1": "50m"}  # on target
    controller = HorizontalPodAutoscalerController(client, informers, metrics, clock=Clock())
    controller.start()  # both known, selecting nothing until reconciled
    await controller.sync(object_key(HPAS, "team", "web-too"))  # the only one with a selector yet
    metrics.cpu = {"web-0": "100m", "web-1": "100m"}  # twice the target
    await controller.sync(object_key(HPAS, "team", "web"))
    await controller.sync(object_key(HPAS, "team", "web-too"))
    await cache.sync()
    assert (await store.get_object(DEPLOYMENTS, "team", "web"))["spec"]["replicas"] == 2
    message = "pods by selector app=web are controlled by multiple HPAs: [team/web team/web-too]"
    for name in ("web", "web-too"):
        hpa = await store.get_object(HPAS, "team", name)
        active = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingActive")
        assert (active["status"], active["reason"], active["message"]) == ("False", "AmbiguousSelector", message)
        assert hpa["status"]["currentReplicas"] == 2
    events = _events(cache)
    assert ("Warning", "AmbiguousSelector", message) in events
    assert ("Warning", "FailedComputeMetricsReplicas", message) in events

    await store.delete(HPAS, "team", "web-too", DeleteOptions(), SYSTEM_USER)
    await cache.sync()
    await controller.sync(object_key(HPAS, "team", "web-too"))  # gone: forgotten
    await controller.sync(object_key(HPAS, "team", "web"))
    await cache.sync()
    assert (await store.get_object(DEPLOYMENTS, "team", "web"))["spec"]["replicas"] == 4
    assert _conditions(await store.get_object(HPAS, "team", "web"))["ScalingActive"] == ("True", "ValidMetricFound")
