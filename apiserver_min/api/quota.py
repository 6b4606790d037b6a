"""Resource quota arithmetic: what an object uses, which quotas it falls under, and
the comparison of usage with the hard limits. One module for the ResourceQuota
admission plugin (charging a new object) and the quota controller (recounting a
namespace), so both count alike, as upstream's quota evaluators (v1.27) count:

* pods use ``pods`` (unless terminal), ``count/pods`` (always), and their compute
  resources: the larger of the app containers' sum and any one init container,
  plus the pod overhead (``cpu``/``requests.cpu``, ``limits.cpu``, memory,
  ephemeral-storage, hugepages, ``requests.<extended resource>``);
* services use ``services``, ``services.nodeports``, ``services.loadbalancers``;
  volume claims ``persistentvolumeclaims``, ``requests.storage`` and the same per
  storage class; configmaps, secrets, replication controllers and quotas their
  legacy count names; every kind ``count/<resource>[.<group>]``;
* a quota applies to an object when it limits one of the resources the object's
  evaluator knows and every scope (``scopes`` and ``scopeSelector``) matches; only
  pods match scopes.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable, Mapping

from . import names
from .qos import BEST_EFFORT, pod_qos_class
from .quantity import Quantity, QuantityError, parse_quantity
from .timeutil import parse_rfc3339
from .validation import is_qualified_name

ResourceList = dict[str, Quantity]

# Scope names (upstream's ResourceQuotaScope values).
SCOPE_TERMINATING = "Terminating"
SCOPE_NOT_TERMINATING = "NotTerminating"
SCOPE_BEST_EFFORT = "BestEffort"
SCOPE_NOT_BEST_EFFORT = "NotBestEffort"
SCOPE_PRIORITY_CLASS = "PriorityClass"
SCOPE_CROSS_NAMESPACE_POD_AFFINITY = "CrossNamespacePodAffinity"

COUNT_PREFIX = "count/"
REQUESTS_PREFIX = "requests."
LIMITS_PREFIX = "limits."
HUGEPAGES_PREFIX = "hugepages-"
STORAGE_CLASS_SUFFIX = f".storageclass.{names.STORAGE_GROUP}/"

# The resources whose quota requires every container to state them (upstream's
# backward-compatible pod constraint).
POD_VALIDATION_SET = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})

_POD_RESOURCES = frozenset(
    {
        "count/pods",
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
    }
)
_POD_PREFIXES = (HUGEPAGES_PREFIX, REQUESTS_PREFIX + HUGEPAGES_PREFIX)

# Core kinds with a count name older than ``count/<resource>``.
LEGACY_COUNT_RESOURCES = frozenset(
    {"services", "configmaps", "secrets", "replicationcontrollers", "resourcequotas", "persistentvolumeclaims"}
)

# Kinds never charged (upstream's default ignored resources).
IGNORED_RESOURCES = frozenset({("", "events"), (names.EVENTS_GROUP, "events")})


# --- resource lists -------------------------------------------------------------------


def parse_list(raw: Any) -> ResourceList:
    """A resource list from an object (values that do not parse are left out)."""
    out: ResourceList = {}
    if not isinstance(raw, Mapping):
        return out
    for name, value in raw.items():
        try:
            out[str(name)] = parse_quantity(value)
        except (QuantityError, TypeError, ValueError):
            continue
    return out


def format_list(rl: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: q.canonical() for name, q in sorted(rl.items())}


def add(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    out = dict(a)
    for name, q in b.items():
        out[name] = out[name] + q if name in out else q
    return out


def subtract_non_negative(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """a - b per resource of ``a``, never below zero."""
    zero = Quantity(0)
    out: ResourceList = {}
    for name, q in a.items():
        d = q - b[name] if name in b else q
        out[name] = d if d.sign() > 0 else zero
    return out


def mask(rl: Mapping[str, Quantity], keep: Iterable[str]) -> ResourceList:
    wanted = set(keep)
    return {name: q for name, q in rl.items() if name in wanted}


def remove_zeros(rl: Mapping[str, Quantity]) -> ResourceList:
    return {name: q for name, q in rl.items() if not q.is_zero()}


def negative(rl: Mapping[str, Quantity]) -> list[str]:
    return sorted(name for name, q in rl.items() if q.sign() < 0)


def less_or_equal(a: Mapping[str, Quantity], hard: Mapping[str, Quantity]) -> list[str]:
    """The resources of ``a`` above their ``hard`` value (resources without one are not limited)."""
    return sorted(name for name, q in a.items() if name in hard and q > hard[name])


def equal(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> bool:
    return a.keys() == b.keys() and all(a[n] == b[n] for n in a)


def pretty(rl: Mapping[str, Quantity]) -> str:
    """``name=value`` pairs sorted by name, comma separated (upstream's prettyPrint)."""
    return ",".join(f"{name}={rl[name].canonical()}" for name in sorted(rl))


# --- resource names -------------------------------------------------------------------


def object_count_name(group: str, resource: str) -> str:
    return f"{COUNT_PREFIX}{resource}.{group}" if group else f"{COUNT_PREFIX}{resource}"


def parse_count_name(name: str) -> tuple[str, str] | None:
    """(group, resource) of ``count/<resource>[.<group>]``, None for other names."""
    if not name.startswith(COUNT_PREFIX):
        return None
    rest = name[len(COUNT_PREFIX) :]
    resource, _, group = rest.partition(".")
    return (group, resource) if resource else None


def _is_native(name: str) -> bool:
    return "/" not in name or names.RESOURCE_NATIVE_PREFIX in name


def is_extended_resource(name: str) -> bool:
    """An extended resource name (``example.com/gpu``): not native, and valid as ``requests.<name>``."""
    if _is_native(name) or name.startswith(REQUESTS_PREFIX):
        return False
    return not is_qualified_name(REQUESTS_PREFIX + name)


def _is_extended_for_quota(name: str) -> bool:
    return name.startswith(REQUESTS_PREFIX) and is_extended_resource(name[len(REQUESTS_PREFIX) :])


def matching_resources(group: str, resource: str, hard_names: Iterable[str]) -> list[str]:
    """The resources among ``hard_names`` that objects of (group, resource) use."""
    out = []
    count = object_count_name(group, resource)
    for name in hard_names:
        if name == count:
            out.append(name)
        elif group == "" and resource == "pods":
            if name in _POD_RESOURCES or name.startswith(_POD_PREFIXES) or _is_extended_for_quota(name):
                out.append(name)
        elif group == "" and resource == "services":
            if name in ("services", "services.nodeports", "services.loadbalancers"):
                out.append(name)
        elif group == "" and resource == "persistentvolumeclaims":
            if name in ("persistentvolumeclaims", "requests.storage") or (
                STORAGE_CLASS_SUFFIX in name and name.endswith(("/persistentvolumeclaims", "/requests.storage"))
            ):
                out.append(name)
        elif group == "" and resource in LEGACY_COUNT_RESOURCES and name == resource:
            out.append(name)
    return sorted(set(out))


def tracked_kinds(hard_names: Iterable[str]) -> set[tuple[str, str]]:
    """The (group, resource) pairs whose objects count towards these hard names."""
    out: set[tuple[str, str]] = set()
    for name in hard_names:
        parsed = parse_count_name(name)
        if parsed is not None:
            out.add(parsed)
            continue
        for gr in (("", "pods"), ("", "services"), ("", "persistentvolumeclaims")):
            if matching_resources(gr[0], gr[1], [name]):
                out.add(gr)
        if name in LEGACY_COUNT_RESOURCES:
            out.add(("", name))
    return out


# --- usage of one object --------------------------------------------------------------


def _dict(obj: Any, key: str) -> dict:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, dict) else {}


def _containers(spec: Mapping, key: str) -> list[dict]:
    items = spec.get(key)
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def _max_into(total: ResourceList, more: Mapping[str, Quantity]) -> None:
    for name, q in more.items():
        if name not in total or q > total[name]:
            total[name] = q


def pod_requests_limits(pod: Mapping) -> tuple[ResourceList, ResourceList]:
    """The pod's effective requests and limits: the app containers' sum or the largest
    init container, whichever is larger per resource, plus the overhead (for limits
    only where a limit is set)."""
    spec = _dict(pod, "spec")
    requests: ResourceList = {}
    limits: ResourceList = {}
    for c in _containers(spec, "containers"):
        res = _dict(c, "resources")
        requests = add(requests, parse_list(res.get("requests")))
        limits = add(limits, parse_list(res.get("limits")))
    for c in _containers(spec, "initContainers"):
        res = _dict(c, "resources")
        _max_into(requests, parse_list(res.get("requests")))
        _max_into(limits, parse_list(res.get("limits")))
    overhead = parse_list(spec.get("overhead"))
    if overhead:
        requests = add(requests, overhead)
        limits = add(limits, {n: q for n, q in overhead.items() if n in limits})
    return requests, limits


def _compute_usage(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]) -> ResourceList:
    """Upstream's podComputeUsageHelper: the quota names of a set of requests and limits."""
    out: ResourceList = {"pods": Quantity(1)}
    for base in ("cpu", "memory", "ephemeral-storage"):
        if base in requests:
            out[base] = requests[base]
            out[REQUESTS_PREFIX + base] = requests[base]
        if base in limits:
            out[LIMITS_PREFIX + base] = limits[base]
    for name, q in requests.items():
        if name.startswith(HUGEPAGES_PREFIX):
            out[name] = q
            out[REQUESTS_PREFIX + name] = q
        if is_extended_resource(name):
            out[REQUESTS_PREFIX + name] = q
    return out


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def pod_counts_for_quota(pod: Mapping, now: _dt.datetime | None = None) -> bool:
    """Whether a pod's compute resources count: not terminal, and not past its deletion grace."""
    phase = _dict(pod, "status").get("phase")
    if phase in ("Failed", "Succeeded"):
        return False
    md = _dict(pod, "metadata")
    deletion, grace = md.get("deletionTimestamp"), md.get("deletionGracePeriodSeconds")
    if isinstance(deletion, str) and isinstance(grace, int) and not isinstance(grace, bool):
        try:
            at = parse_rfc3339(deletion)
        except ValueError:
            return True
        if (now or _now()) > at + _dt.timedelta(seconds=grace):
            return False
    return True


def pod_usage(pod: Mapping, now: _dt.datetime | None = None) -> ResourceList:
    out: ResourceList = {object_count_name("", "pods"): Quantity(1)}
    if not pod_counts_for_quota(pod, now):
        return out
    requests, limits = pod_requests_limits(pod)
    return add(out, _compute_usage(requests, limits))


def service_usage(svc: Mapping) -> ResourceList:
    spec = _dict(svc, "spec")
    ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    out: ResourceList = {object_count_name("", "services"): Quantity(1), "services": Quantity(1)}
    kind = spec.get("type")
    if kind == "NodePort":
        out["services.nodeports"] = Quantity(len(ports))
    elif kind == "LoadBalancer":
        out["services.loadbalancers"] = Quantity(1)
        if spec.get("allocateLoadBalancerNodePorts") is False:
            out["services.nodeports"] = Quantity(sum(1 for p in ports if p.get("nodePort")))
        else:
            out["services.nodeports"] = Quantity(len(ports))
    return out


def pvc_usage(pvc: Mapping) -> ResourceList:
    spec = _dict(pvc, "spec")
    one = Quantity(1)
    out: ResourceList = {object_count_name("", "persistentvolumeclaims"): one, "persistentvolumeclaims": one}
    storage_class = spec.get("storageClassName")
    if isinstance(storage_class, str) and storage_class:
        out[storage_class + STORAGE_CLASS_SUFFIX + "persistentvolumeclaims"] = one
    # The larger of the request and the size being resized to (upstream's claim evaluator).
    requested = parse_list(_dict(spec, "resources").get("requests")).get("storage")
    allocated = parse_list(_dict(pvc, "status").get("allocatedResources")).get("storage")
    if allocated is not None and (requested is None or allocated > requested):
        requested = allocated
    if requested is not None:
        out["requests.storage"] = requested
        if isinstance(storage_class, str) and storage_class:
            out[storage_class + STORAGE_CLASS_SUFFIX + "requests.storage"] = requested
    return out


def usage(group: str, resource: str, obj: Mapping, now: _dt.datetime | None = None) -> ResourceList:
    """What one object of (group, resource) uses."""
    if group == "":
        if resource == "pods":
            return pod_usage(obj, now)
        if resource == "services":
            return service_usage(obj)
        if resource == "persistentvolumeclaims":
            return pvc_usage(obj)
        if resource in LEGACY_COUNT_RESOURCES:
            return {object_count_name(group, resource): Quantity(1), resource: Quantity(1)}
    return {object_count_name(group, resource): Quantity(1)}


def handles(group: str, resource: str, operation: str) -> bool:
    """Whether admission charges this operation (pods and plain counts: creates; services
    and claims also updates, which may change node ports or the claimed size)."""
    if operation == "CREATE":
        return True
    return operation == "UPDATE" and group == "" and resource in ("services", "persistentvolumeclaims")


def pod_constraints(required: Iterable[str], pod: Mapping) -> str | None:
    """Upstream's pod constraint: a quota on cpu or memory needs every (init) container
    to state it. The message lists, per missing resource, the containers without it."""
    required_set = set(required) & POD_VALIDATION_SET
    if not required_set:
        return None
    spec = _dict(pod, "spec")
    missing: dict[str, set[str]] = {}
    for key in ("containers", "initContainers"):
        for c in _containers(spec, key):
            res = _dict(c, "resources")
            have = _compute_usage(parse_list(res.get("requests")), parse_list(res.get("limits")))
            for name in required_set - set(have):
                missing.setdefault(name, set()).add(str(c.get("name", "")))
    if not missing:
        return None
    parts = [f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)]
    return "must specify " + "; ".join(parts)


# --- scopes ---------------------------------------------------------------------------


def quota_scope_requirements(quota: Mapping) -> list[dict]:
    """The quota's scopes and scope selector as one list of requirements (a scope is
    ``Exists``)."""
    spec = _dict(quota, "spec")
    out = [{"scopeName": s, "operator": "Exists"} for s in spec.get("scopes") or [] if isinstance(s, str)]
    selector = _dict(spec, "scopeSelector")
    for req in selector.get("matchExpressions") or []:
        if isinstance(req, dict):
            out.append(req)
    return out


def _uses_cross_namespace_affinity(pod: Mapping) -> bool:
    affinity = _dict(_dict(pod, "spec"), "affinity")
    for key in ("podAffinity", "podAntiAffinity"):
        a = _dict(affinity, key)
        terms = [t for t in a.get("requiredDuringSchedulingIgnoredDuringExecution") or [] if isinstance(t, dict)]
        for w in a.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
            if isinstance(w, dict) and isinstance(w.get("podAffinityTerm"), dict):
                terms.append(w["podAffinityTerm"])
        for t in terms:
            if t.get("namespaces") or t.get("namespaceSelector") is not None:
                return True
    return False


def pod_matches_scope(req: Mapping, pod: Mapping) -> bool:
    scope = req.get("scopeName")
    spec = _dict(pod, "spec")
    if scope in (SCOPE_TERMINATING, SCOPE_NOT_TERMINATING):
        deadline = spec.get("activeDeadlineSeconds")
        terminating = isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0
        return terminating if scope == SCOPE_TERMINATING else not terminating
    if scope in (SCOPE_BEST_EFFORT, SCOPE_NOT_BEST_EFFORT):
        best_effort = pod_qos_class(pod) == BEST_EFFORT
        return best_effort if scope == SCOPE_BEST_EFFORT else not best_effort
    if scope == SCOPE_PRIORITY_CLASS:
        name = spec.get("priorityClassName")
        name = name if isinstance(name, str) else ""
        op = req.get("operator")
        values = [v for v in req.get("values") or [] if isinstance(v, str)]
        if op == "Exists":
            return bool(name)
        if op == "In":
            return name in values
        if op == "NotIn":
            return name not in values
        return False  # DoesNotExist: the key is always there, as upstream's label set has it
    if scope == SCOPE_CROSS_NAMESPACE_POD_AFFINITY:
        return _uses_cross_namespace_affinity(pod)
    return False


def matches(quota_hard_names: Iterable[str], scopes: list[dict], group: str, resource: str, obj: Mapping) -> bool:
    """Whether a quota (its hard resource names and scope requirements) applies to the object."""
    if not matching_resources(group, resource, quota_hard_names):
        return False
    if not scopes:
        return True
    if not (group == "" and resource == "pods"):
        return False
    return all(pod_matches_scope(r, obj) for r in scopes)


def namespace_usage(
    quota: Mapping, objects_by_kind: Mapping[tuple[str, str], Iterable[Mapping]], now: _dt.datetime | None = None
) -> ResourceList:
    """The quota's usage recounted from the namespace's objects (upstream's CalculateUsage):
    every hard resource gets a value, zero when nothing uses it."""
    hard = parse_list(_dict(quota, "spec").get("hard"))
    scopes = quota_scope_requirements(quota)
    used: ResourceList = {name: Quantity(0) for name in hard}
    for (group, resource), objects in objects_by_kind.items():
        names_here = matching_resources(group, resource, hard)
        if not names_here:
            continue
        for obj in objects:
            if scopes and not matches(hard, scopes, group, resource, obj):
                continue
            used = add(used, mask(usage(group, resource, obj, now), names_here))
    return used
