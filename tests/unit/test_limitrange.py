"""LimitRange arithmetic (api/limitrange.py) and the validation of LimitRange,
ResourceQuota and PriorityClass objects (registry/resourcepolicy.py)."""

from __future__ import annotations

import pytest

from apiserver_min.api import limitrange as lr
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.registry.families import strategy_for


def ctr(name="c", requests=None, limits=None) -> dict:
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": name, "image": "x", **({"resources": res} if res else {})}


def pod(*containers, init=()) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), "initContainers": list(init)}}


def limit_range(*items) -> dict:
    return {"metadata": {"name": "l", "namespace": "ns"}, "spec": {"limits": list(items)}}


def test_defaults_fill_only_what_is_missing_and_are_noted():
    r = limit_range(
        {"type": "Container", "default": {"cpu": "1", "memory": "1Gi"}, "defaultRequest": {"cpu": "500m"}},
    )
    p = pod(ctr("a"), ctr("b", {"cpu": "100m"}, {"memory": "2Gi"}), init=[ctr("i")])
    assert lr.apply_defaults(r, p)
    a, b = p["spec"]["containers"]
    assert a["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}
    assert b["resources"] == {"requests": {"cpu": "100m"}, "limits": {"memory": "2Gi", "cpu": "1"}}
    assert p["metadata"]["annotations"][names.DOMAIN + "/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for container a; cpu, memory limit for container a; "
        "cpu limit for container b; cpu request for init container i; cpu, memory limit for init container i"
    )
    # Nothing left to fill: no change, no annotation rewrite.
    p2 = pod(ctr("a", {"cpu": "1"}, {"cpu": "1", "memory": "1Gi"}))
    assert not lr.apply_defaults(r, p2)
    assert "annotations" not in p2["metadata"]


@pytest.mark.parametrize(
    "item, container, want",
    [
        (
            {"type": "Container", "max": {"cpu": "1"}},
            ctr("c", limits={"cpu": "2"}),
            "maximum cpu usage per Container is 1, but limit is 2",
        ),
        (
            {"type": "Container", "max": {"cpu": "1"}},
            ctr("c"),
            "maximum cpu usage per Container is 1.  No limit is specified",
        ),
        (
            {"type": "Container", "max": {"cpu": "1"}},
            ctr("c", {"cpu": "1500m"}, {"cpu": "1"}),
            "maximum cpu usage per Container is 1, but request is 1500m",
        ),
        (
            {"type": "Container", "min": {"memory": "64Mi"}},
            ctr("c", {"memory": "32Mi"}),
            "minimum memory usage per Container is 64Mi, but request is 32Mi",
        ),
        (
            {"type": "Container", "min": {"memory": "64Mi"}},
            ctr("c"),
            "minimum memory usage per Container is 64Mi.  No request is specified",
        ),
        (
            {"type": "Container", "min": {"memory": "64Mi"}},
            ctr("c", {"memory": "128Mi"}, {"memory": "32Mi"}),
            "minimum memory usage per Container is 64Mi, but limit is 32Mi",
        ),
        (
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
            ctr("c", {"cpu": "100m"}, {"cpu": "250m"}),
            "cpu max limit to request ratio per Container is 2, but provided ratio is 2.500000",
        ),
        (
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
            ctr("c", limits={"cpu": "250m"}),
            "cpu max limit to request ratio per Container is 2, but no request is specified or request is 0",
        ),
        (
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
            ctr("c", {"cpu": "250m"}),
            "cpu max limit to request ratio per Container is 2, but no limit is specified or limit is 0",
        ),
    ],
)
def test_container_bounds(item, container, want):
    assert lr.pod_violations(limit_range(item), pod(container)) == [want]


def test_pod_bounds_sum_the_containers():
    r = limit_range({"type": "Pod", "max": {"cpu": "1"}})
    p = pod(ctr("a", limits={"cpu": "600m"}), ctr("b", limits={"cpu": "600m"}))
    assert lr.pod_violations(r, p) == ["maximum cpu usage per Pod is 1, but limit is 1200m"]
    assert lr.pod_violations(r, pod(ctr("a", limits={"cpu": "600m"}))) == []


def test_claim_bounds_and_aggregate():
    r = limit_range({"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}})
    small = {"spec": {"resources": {"requests": {"storage": "500Mi"}}}}
    big = {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    assert lr.pvc_violations(r, small) == [
        "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
    ]
    assert lr.pvc_violations(r, big) == ["maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"]
    assert lr.aggregate(["a"]) == "a"
    assert lr.aggregate(["a", "b", "a"]) == "[a, b]"


def _errors(resource: str, obj: dict, group: str = "", old: dict | None = None) -> list[str]:
    kind = REGISTRY.by_resource(group, "v1", resource)
    apply_defaults(kind.group, kind.version, kind.kind, obj)
    strategy = strategy_for(kind)
    errs = strategy.validate(obj) if old is None else strategy.validate_update(obj, old)
    return [e.message() for e in errs]


def test_limit_range_validation():
    ok = limit_range({"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "100m"}, "default": {"cpu": "1"}})
    assert _errors("limitranges", ok) == []
    bad = limit_range(
        {"type": "Container", "max": {"cpu": "1"}, "min": {"cpu": "2"}},
        {"type": "Pod", "default": {"cpu": "1"}},
        {"type": "Container"},
        {"type": "PersistentVolumeClaim", "max": {"cpu": "1"}},
    )
    errs = _errors("limitranges", bad)
    assert "spec.limits[0].min[cpu]: Invalid value: 2: min value 2 is greater than max value 1" in errs
    assert "spec.limits[1].default: Forbidden: may not be specified when `type` is 'Pod'" in errs
    assert 'spec.limits[2].type: Duplicate value: "Container"' in errs
    assert (
        "spec.limits[3].limits: Required value: either minimum or maximum storage value is required, but neither was provided"
        in errs
    )
    ratio = limit_range({"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}, "max": {"memory": "x1"}})
    errs = _errors("limitranges", ratio)
    assert "spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: 500m: ratio 500m is less than 1" in errs
    name = limit_range({"type": "Container", "max": {"pods": "1"}})
    # (defaulting copied the max into default and defaultRequest: reported there too, as upstream)
    assert _errors("limitranges", name) == [
        f'spec.limits[0].{key}[pods]: Invalid value: "pods": must be a standard resource for containers'
        for key in ("max", "default", "defaultRequest")
    ]


def test_resource_quota_validation():
    def rq(spec, status=None):
        return {"metadata": {"name": "q", "namespace": "ns"}, "spec": spec, **({"status": status} if status else {})}

    assert _errors("resourcequotas", rq({"hard": {"pods": "10", "count/deployments.apps": "2"}})) == []
    errs = _errors("resourcequotas", rq({"hard": {"pods": "1500m", "bogus": "1", "cpu": "-1"}}))
    assert 'spec.hard[pods]: Invalid value: "1500m": must be an integer' in errs
    assert 'spec.hard[bogus]: Invalid value: "bogus": must be a standard resource type or fully qualified' in errs
    assert 'spec.hard[cpu]: Invalid value: "-1": must be greater than or equal to 0' in errs
    errs = _errors("resourcequotas", rq({"hard": {"services": "1"}, "scopes": ["BestEffort", "NotBestEffort"]}))
    assert (
        'spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort", "NotBestEffort"}: conflicting scopes'
        in errs
    )
    assert any("unsupported scope applied to resource" in e for e in errs)
    sel = {
        "hard": {"pods": "1"},
        "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]},
    }
    assert _errors("resourcequotas", rq(sel)) == [
        "spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is "
        "'In' or 'NotIn' for scope selector"
    ]
    old = rq({"hard": {"pods": "1"}, "scopes": ["BestEffort"]})
    new = rq({"hard": {"pods": "1"}, "scopes": ["NotBestEffort"]})
    for o in (old, new):
        o["metadata"].update(uid="u", resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z")
    assert any(
        e.startswith("spec.scopes: Invalid value: ") and "field is immutable" in e
        for e in _errors("resourcequotas", new, old=old)
    )


def test_priority_class_validation():
    group = names.SCHEDULING_GROUP

    def pc(name, value, **kw):
        return {"metadata": {"name": name}, "value": value, **kw}

    assert _errors("priorityclasses", pc("high", 1000000000), group) == []
    assert _errors("priorityclasses", pc("higher", 1000000001), group) == [
        "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
    ]
    assert _errors("priorityclasses", pc("system-mine", 5), group) == [
        "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. "
        "error: system-mine is not a known system priority class"
    ]
    assert _errors("priorityclasses", pc("system-node-critical", 2000001000), group) == []
    old = pc("high", 10)
    old["metadata"].update(uid="u", resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z")
    new = {**old, "value": 11, "metadata": dict(old["metadata"])}
    errs = _errors("priorityclasses", new, group, old=_defaulted(old, group))
    assert "value: Forbidden: may not be changed in an update." in errs


def _defaulted(obj: dict, group: str) -> dict:
    kind = REGISTRY.by_resource(group, "v1", "priorityclasses")
    apply_defaults(kind.group, kind.version, kind.kind, obj)
    return obj
