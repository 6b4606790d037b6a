"""Quota arithmetic (api/quota.py) and the ResourceQuota plugin's evaluation."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from apiserver_min import options
from apiserver_min.admission import plugins
from apiserver_min.admission.chain import Attributes
from apiserver_min.admission.plugins.resourcequota import evaluate, parse_configuration
from apiserver_min.api import quota as q
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.quantity import Quantity
from apiserver_min.api.status import ApiError
from apiserver_min.api.user import SYSTEM_USER

PODS = REGISTRY.by_resource("", "v1", "pods")
SERVICES = REGISTRY.by_resource("", "v1", "services")
CONFIGMAPS = REGISTRY.by_resource("", "v1", "configmaps")
DEPLOYMENTS = REGISTRY.by_resource("apps", "v1", "deployments")


def ctr(name="c", requests=None, limits=None) -> dict:
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": name, "image": "x", "resources": res}


def pod(*containers, init=(), **spec) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), "initContainers": list(init), **spec}}


def fmt(rl) -> dict:
    return q.format_list(rl)


def test_pod_usage_sums_containers_and_takes_the_largest_init_container():
    p = pod(
        ctr("a", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m", "memory": "128Mi"}),
        ctr("b", {"cpu": "250m"}),
        init=[ctr("i", {"cpu": "2"}, {"memory": "1Gi"})],
    )
    assert fmt(q.pod_usage(p)) == {
        "count/pods": "1",
        "cpu": "2",
        "limits.cpu": "500m",
        "limits.memory": "1Gi",
        "memory": "64Mi",
        "pods": "1",
        "requests.cpu": "2",
        "requests.memory": "64Mi",
    }


def test_pod_overhead_adds_to_requests_and_only_to_set_limits():
    p = pod(ctr("a", {"cpu": "100m"}, {"cpu": "200m"}), overhead={"cpu": "50m", "memory": "10Mi"})
    used = fmt(q.pod_usage(p))
    assert used["requests.cpu"] == "150m" and used["limits.cpu"] == "250m"
    assert used["requests.memory"] == "10Mi" and "limits.memory" not in used


def test_pod_extended_and_hugepages_resources():
    p = pod(ctr("a", {"example.com/gpu": "1", "hugepages-2Mi": "4Mi", "cpu": "1"}))
    used = fmt(q.pod_usage(p))
    assert used["requests.example.com/gpu"] == "1"
    assert used["hugepages-2Mi"] == used["requests.hugepages-2Mi"] == "4Mi"
    assert "example.com/gpu" not in used


def test_terminal_and_expired_pods_count_only_as_objects():
    done = pod(ctr("a", {"cpu": "1"}))
    done["status"] = {"phase": "Succeeded"}
    assert fmt(q.pod_usage(done)) == {"count/pods": "1"}
    gone = pod(ctr("a", {"cpu": "1"}))
    gone["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    later = dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.timezone.utc)
    earlier = dt.datetime(2026, 1, 1, 0, 0, 10, tzinfo=dt.timezone.utc)
    assert fmt(q.pod_usage(gone, later)) == {"count/pods": "1"}
    assert fmt(q.pod_usage(gone, earlier))["pods"] == "1"


def test_service_and_claim_usage():
    svc = {"spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}}
    assert fmt(q.service_usage(svc)) == {"count/services": "1", "services": "1", "services.nodeports": "2"}
    lb = {"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": False, "ports": [{"port": 1}]}}
    assert fmt(q.service_usage(lb))["services.nodeports"] == "0"
    assert fmt(q.service_usage(lb))["services.loadbalancers"] == "1"
    pvc = {"spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}}
    used = fmt(q.pvc_usage(pvc))
    assert used["requests.storage"] == "1Gi"
    assert used["fast.storageclass.storage.orch.io/requests.storage"] == "1Gi"
    assert used["fast.storageclass.storage.orch.io/persistentvolumeclaims"] == "1"


def test_matching_resources_and_count_names():
    hard = ["pods", "requests.cpu", "count/deployments.apps", "configmaps", "count/configmaps", "services"]
    assert q.matching_resources("", "pods", hard) == ["pods", "requests.cpu"]
    assert q.matching_resources("", "configmaps", hard) == ["configmaps", "count/configmaps"]
    assert q.matching_resources("apps", "deployments", hard) == ["count/deployments.apps"]
    assert q.parse_count_name("count/deployments.apps") == ("apps", "deployments")
    assert q.parse_count_name("count/pods") == ("", "pods")
    assert q.parse_count_name("pods") is None
    assert q.tracked_kinds(hard) == {("", "pods"), ("apps", "deployments"), ("", "configmaps"), ("", "services")}


@pytest.mark.parametrize(
    "scope, spec, want",
    [
        ({"scopeName": "Terminating", "operator": "Exists"}, {"activeDeadlineSeconds": 10}, True),
        ({"scopeName": "NotTerminating", "operator": "Exists"}, {"activeDeadlineSeconds": 10}, False),
        ({"scopeName": "BestEffort", "operator": "Exists"}, {}, True),
        ({"scopeName": "NotBestEffort", "operator": "Exists"}, {}, False),
        ({"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}, {"priorityClassName": "high"}, True),
        ({"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}, {"priorityClassName": "high"}, False),
        ({"scopeName": "PriorityClass", "operator": "Exists"}, {}, False),
        ({"scopeName": "PriorityClass", "operator": "DoesNotExist"}, {}, False),
        (
            {"scopeName": "CrossNamespacePodAffinity", "operator": "Exists"},
            {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"namespaces": ["x"]}]}}},
            True,
        ),
        ({"scopeName": "CrossNamespacePodAffinity", "operator": "Exists"}, {}, False),
    ],
)
def test_pod_scopes(scope, spec, want):
    p = pod(ctr("a"), **spec)
    assert q.pod_matches_scope(scope, p) is want


def test_scoped_quotas_never_match_other_kinds():
    assert q.matches(["pods"], [], "", "pods", pod(ctr()))
    assert not q.matches(
        ["count/configmaps"], [{"scopeName": "BestEffort", "operator": "Exists"}], "", "configmaps", {}
    )
    assert not q.matches(["services"], [], "", "pods", pod(ctr()))


def test_namespace_usage_recounts_every_hard_resource():
    quota = {"spec": {"hard": {"pods": "5", "requests.memory": "1Gi", "services": "2"}}}
    pods = [pod(ctr("a", {"memory": "100Mi"})), pod(ctr("b", {"memory": "28Mi"}))]
    used = q.namespace_usage(quota, {("", "pods"): pods, ("", "services"): []})
    assert fmt(used) == {"pods": "2", "requests.memory": "128Mi", "services": "0"}


def test_pod_constraints_message():
    # (admission sees defaulted pods: a limit without a request has become both)
    p = pod(ctr("a", {"cpu": "1"}), ctr("b"), init=[ctr("i", {"memory": "1Gi"}, {"memory": "1Gi"})])
    msg = q.pod_constraints(["limits.cpu", "requests.memory", "pods"], p)
    assert msg == "must specify limits.cpu for: a,b,i; requests.memory for: a,b"
    assert q.pod_constraints(["pods"], p) is None


def test_list_helpers():
    a = {"cpu": Quantity.parse("500m"), "memory": Quantity.parse("1Gi")}
    b = {"cpu": Quantity.parse("1")}
    assert fmt(q.subtract_non_negative(a, b)) == {"cpu": "0", "memory": "1Gi"}
    assert q.less_or_equal(q.add(a, b), {"cpu": Quantity.parse("1")}) == ["cpu"]
    assert q.pretty({"pods": Quantity(1), "cpu": Quantity.parse("500m")}) == "cpu=500m,pods=1"
    assert q.negative({"cpu": Quantity(-1)}) == ["cpu"]


def _attrs(kind, obj, operation="CREATE", old=None, name="x") -> Attributes:
    return Attributes(operation, kind, "ns", name, "", obj, old, SYSTEM_USER, False)


def _q(name, hard, used, scopes=None) -> dict:
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"hard": hard, **({"scopes": scopes} if scopes else {})},
        "status": {"hard": hard, "used": used},
    }


def test_evaluate_charges_every_matching_quota():
    quotas = [
        _q("a", {"pods": "2"}, {"pods": "1"}),
        _q("b", {"count/pods": "9", "services": "1"}, {"count/pods": "0", "services": "0"}),
    ]
    out = evaluate(_attrs(PODS, pod(ctr())), quotas)
    assert [(x["metadata"]["name"], fmt(u)) for x, u in out] == [
        ("a", {"pods": "2"}),
        ("b", {"count/pods": "1", "services": "0"}),
    ]


def test_evaluate_refuses_with_upstreams_messages():
    with pytest.raises(ApiError) as e:
        evaluate(_attrs(PODS, pod(ctr())), [_q("one", {"pods": "1"}, {"pods": "1"})])
    assert e.value.code == 403
    assert (
        e.value.message
        == 'pods "x" is forbidden: exceeded quota: one, requested: pods=1, used: pods=1, limited: pods=1'
    )
    with pytest.raises(ApiError) as e:
        evaluate(_attrs(PODS, pod(ctr())), [_q("new", {"pods": "1"}, {})])
    assert e.value.message == 'pods "x" is forbidden: status unknown for quota: new, resources: pods'
    with pytest.raises(ApiError) as e:
        evaluate(_attrs(PODS, pod(ctr())), [_q("mem", {"requests.memory": "1Gi"}, {"requests.memory": "0"})])
    assert e.value.message == 'pods "x" is forbidden: failed quota: mem: must specify requests.memory for: c'


def test_evaluate_unscoped_kinds_and_updates():
    # A quota without status.hard for configmaps does not matter to deployments.
    assert evaluate(_attrs(DEPLOYMENTS, {}), [_q("cm", {"configmaps": "1"}, {"configmaps": "0"})]) == []
    # An update that adds a node port is charged the difference only.
    old = {"metadata": {"resourceVersion": "5"}, "spec": {"type": "NodePort", "ports": [{"port": 1}]}}
    new = {"metadata": {"resourceVersion": "5"}, "spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}}
    out = evaluate(
        _attrs(SERVICES, new, "UPDATE", old), [_q("np", {"services.nodeports": "2"}, {"services.nodeports": "1"})]
    )
    assert [fmt(u) for _, u in out] == [{"services.nodeports": "2"}]
    with pytest.raises(ApiError):
        evaluate(
            _attrs(SERVICES, new, "UPDATE", old), [_q("np", {"services.nodeports": "1"}, {"services.nodeports": "1"})]
        )
    # A BestEffort quota does not charge a Guaranteed pod.
    guaranteed = pod(ctr("a", limits={"cpu": "1", "memory": "1Gi"}))
    assert evaluate(_attrs(PODS, guaranteed), [_q("be", {"pods": "0"}, {"pods": "0"}, ["BestEffort"])]) == []
    assert evaluate(_attrs(CONFIGMAPS, {}), []) == []


LIMITED = {
    "apiVersion": "apiserver.config.orch.io/v1",
    "kind": "ResourceQuotaConfiguration",
    "limitedResources": [
        {"resource": "pods", "matchContains": ["cpu"]},
        {
            "resource": "pods",
            "matchScopes": [{"scopeName": "PriorityClass", "operator": "In", "values": ["crit", "top"]}],
        },
    ],
}


def test_limited_resources_need_a_covering_quota_with_upstreams_messages():
    config = parse_configuration(LIMITED)
    cpu_pod = pod(ctr(requests={"cpu": "100m"}))
    with pytest.raises(ApiError) as e:
        evaluate(_attrs(PODS, cpu_pod), [], config)
    assert (e.value.code, e.value.message) == (
        403,
        'pods "x" is forbidden: insufficient quota to consume: cpu,requests.cpu',
    )
    # A quota that lists only one of them does not cover the other.
    with pytest.raises(ApiError) as e:
        evaluate(_attrs(PODS, cpu_pod), [_q("c", {"requests.cpu": "1"}, {"requests.cpu": "0"})], config)
    assert e.value.message == 'pods "x" is forbidden: insufficient quota to consume: cpu'
    covering = [_q("c", {"requests.cpu": "1", "cpu": "1"}, {"requests.cpu": "0", "cpu": "0"})]
    assert [fmt(u) for _, u in evaluate(_attrs(PODS, cpu_pod), covering, config)] == [
        {"cpu": "100m", "requests.cpu": "100m"}
    ]
    assert evaluate(_attrs(PODS, pod(ctr())), [], config) == []  # consumes no cpu: nothing to cover
    # A pod of a limited priority class needs a quota whose scopes select it by that scope.
    crit = pod(ctr(), priorityClassName="crit")
    with pytest.raises(ApiError) as e:
        evaluate(_attrs(PODS, crit), [], config)
    assert (e.value.code, e.value.message) == (
        500,
        "insufficient quota to match these scopes: [{PriorityClass In [crit top]}]",
    )
    scoped = _q("s", {"pods": "5"}, {"pods": "0"})
    scoped["spec"]["scopeSelector"] = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["crit"]}]
    }
    assert len(evaluate(_attrs(PODS, crit), [scoped], config)) == 1
    assert evaluate(_attrs(CONFIGMAPS, {}), [], config) == []  # other kinds are not limited


@pytest.mark.parametrize(
    "change, error",
    [
        ({"kind": "Configuration"}, "expected kind ResourceQuotaConfiguration"),
        ({"limitedResources": [{"matchContains": ["cpu"]}]}, "limitedResources[0].resource: Required value"),
        ({"limitedResources": [{"resource": "pods", "matchContain": ["cpu"]}]}, "unknown field(s) matchContain"),
        (
            {
                "limitedResources": [
                    {"resource": "pods", "matchScopes": [{"scopeName": "PriorityClass", "operator": "In"}]}
                ]
            },
            "limitedResources[0].matchScopes[0].values: Required value",
        ),
    ],
)
def test_a_bad_quota_configuration_is_refused_naming_the_field(change, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_configuration({**LIMITED, **change})


def test_resource_quota_sync_period_flag():
    assert options.parse([]).resource_quota_sync_period == 300.0
    assert options.parse(["--resource-quota-sync-period=30s"]).resource_quota_sync_period == 30.0
    with pytest.raises(options.OptionsError, match="--resource-quota-sync-period"):
        options.parse(["--resource-quota-sync-period=0s"])


def test_the_three_plugins_are_on_by_default_in_upstreams_order():
    chosen = plugins.resolve_plugins([], [])
    assert {"LimitRanger", "Priority", "ResourceQuota"} <= set(chosen)
    # ResourceQuota validates last, after every plugin that may still refuse the write.
    assert chosen.index("LimitRanger") < chosen.index("Priority") < chosen.index("ResourceQuota") == len(chosen) - 1
    assert "ResourceQuota" not in plugins.resolve_plugins([], ["ResourceQuota"])
