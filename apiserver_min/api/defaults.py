"""Defaulting applied to objects on create and update, as upstream (v1.27) applies it.

Upstream defaults every decoded object: per-type functions run for the object
and then for every nested value of a defaulted type, parent before children
(so a pod template inside a Deployment gets the PodSpec and Container
defaults, while the Pod-only defaults stay with Pods). The same walk is done
here, driven by the schema declarations: ``_DEFAULTERS`` maps an upstream
message name to the function that defaults a value of that type.

``apply_defaults`` changes the object in place and never raises: a part of the
object with the wrong shape is skipped and left for validation to report.

Deliberately not here, because upstream does not do them in defaulting either:
pod ``priority``/``preemptionPolicy`` (Priority admission, from the priority
class), ``serviceAccountName``/token volume (ServiceAccount admission),
service ``clusterIP``/``ipFamilies``/node ports (the service IP and port
allocators), job selectors (the Job strategy), namespace ``status.phase`` and
its name label (the namespace strategy).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

from . import names
from .schema import List, Map, Struct
from .schemas import core, schema_for

__all__ = [
    "apply_defaults",
    "default_pull_policy",
    "image_tag",
    "hpa_default_scale_up",
    "hpa_default_scale_down",
    "HPA_DEFAULT_CPU_UTILIZATION",
]

Obj = dict[str, Any]


def apply_defaults(group: str, version: str, kind: str, obj: Any) -> None:
    """Fill in upstream's defaults on ``obj`` (a kind's JSON object), in place."""
    schema = schema_for(group, version, kind)
    if schema is None or not isinstance(obj, dict):
        return
    try:
        _walk(schema, obj)
    except RecursionError:  # absurdly deep input: leave the rest to validation
        pass


# How a relevant field is descended into: a struct, a list of structs (the common
# shapes, walked inline), or anything else (through _walk_value).
_STRUCT_FIELD, _STRUCT_LIST_FIELD, _OTHER_FIELD = range(3)


def _walk(schema: Struct, obj: Obj) -> None:
    plan = _PLANS.get(id(schema)) or _plan(schema)
    for fn in plan[0]:
        fn(obj)
    for key, how, t in plan[1]:
        value = obj.get(key)
        if value is None:
            continue
        if how == _STRUCT_FIELD:
            if isinstance(value, dict):
                _walk(t, value)
        elif how == _STRUCT_LIST_FIELD:
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        _walk(t, item)
        else:
            _walk_value(t, value)


_PLANS: dict[int, tuple[tuple[Callable[[Obj], None], ...], tuple[tuple[str, int, Any], ...]]] = {}


def _field_walk(t: Any) -> tuple[int, Any]:
    if isinstance(t, Struct):
        return _STRUCT_FIELD, t
    if isinstance(t, List) and isinstance(t.item_type, Struct):
        return _STRUCT_LIST_FIELD, t.item_type
    return _OTHER_FIELD, t


def _plan(schema: Struct):
    """Per struct, once: the defaulters to run on its object (its own, then those of
    its inline structs) and the fields worth descending into."""
    fns: list[Callable[[Obj], None]] = []

    def collect(s: Struct) -> None:
        fn = _DEFAULTERS.get(s.name)
        if fn is not None:
            fns.append(fn)
        for f in s.fields:
            if (inline := f.inline_struct) is not None:
                collect(inline)

    collect(schema)
    plan = (tuple(fns), tuple((key, *_field_walk(t)) for key, t in _relevant_fields(schema).items()))
    _PLANS[id(schema)] = plan
    return plan


def _walk_value(t: Any, value: Any) -> None:
    if isinstance(t, Struct):
        if isinstance(value, dict):
            _walk(t, value)
    elif isinstance(t, List):
        if isinstance(value, list):
            for item in value:
                _walk_value(t.item_type, item)
    elif isinstance(t, Map):
        if isinstance(value, dict):
            for item in value.values():
                _walk_value(t.value_type, item)


def _elem(t: Any) -> Any:
    while isinstance(t, (List, Map)):
        t = t.item_type if isinstance(t, List) else t.value_type
    return t


_RELEVANT: dict[int, dict[str, Any]] = {}
_HAS_DEFAULTS: dict[int, bool] = {}


def _has_defaults(s: Struct, active: frozenset[int] = frozenset()) -> bool:
    """Whether any defaulter applies to ``s`` or to anything below it."""
    if id(s) in _HAS_DEFAULTS:
        return _HAS_DEFAULTS[id(s)]
    if id(s) in active:
        return False
    inner = active | {id(s)}
    found = (
        s.name in _DEFAULTERS
        or any((inline := f.inline_struct) is not None and _has_defaults(inline, inner) for f in s.fields)
        or any(
            isinstance(_elem(f.type), Struct) and _has_defaults(_elem(f.type), inner) for f in s.json_fields().values()
        )
    )
    if found or not active:  # a "no" found while inside a cycle may be incomplete
        _HAS_DEFAULTS[id(s)] = found
    return found


def _relevant_fields(s: Struct) -> dict[str, Any]:
    """JSON name -> type of the fields worth descending into (something below has defaults)."""
    cached = _RELEVANT.get(id(s))
    if cached is None:
        cached = {
            name: f.type
            for name, f in s.json_fields().items()
            if isinstance(_elem(f.type), Struct) and _has_defaults(_elem(f.type))
        }
        _RELEVANT[id(s)] = cached
    return cached


# --- helpers: tolerate malformed input ------------------------------------------------------


def _dict(obj: Obj, key: str, create: bool = False) -> Obj | None:
    """``obj[key]`` if it is an object; created empty when absent and ``create``."""
    value = obj.get(key)
    if value is None and create:
        value = obj[key] = {}
    return value if isinstance(value, dict) else None


def _dicts(obj: Obj, key: str) -> list[Obj]:
    value = obj.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _unset(obj: Obj, key: str) -> bool:
    """Unset as Go sees it for a non-pointer string/number: absent, null, "" or 0."""
    value = obj.get(key)
    return value is None or value == "" or (value == 0 and not isinstance(value, bool))


def _absent(obj: Obj, key: str) -> bool:
    """Unset as Go sees it for a pointer, slice or map: absent or null."""
    return obj.get(key) is None


def _setdefault(obj: Obj, key: str, value: Any) -> None:
    if _unset(obj, key):
        obj[key] = value


def _setdefault_ptr(obj: Obj, key: str, value: Any) -> None:
    if _absent(obj, key):
        obj[key] = value


# --- images ----------------------------------------------------------------------------------

_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
    r"(?:\.(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*(?::[0-9]+)?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")


def _valid_repository(name: str) -> bool:
    parts = name.split("/")
    first = parts[0]
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _DOMAIN.fullmatch(first):
            return False
        parts = parts[1:]
    return all(_PATH_COMPONENT.fullmatch(p) for p in parts)


def image_tag(image: Any) -> str:
    """The tag an image reference resolves to, as upstream's ParseImageName sees it:
    ``"latest"`` when there is neither tag nor digest; ``""`` for a digest-only or an
    unparseable reference (upstream ignores the parse error and finds no tag)."""
    if not isinstance(image, str) or not image:
        return ""
    name, _, digest = image.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        return ""
    tag = ""
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            return ""
    if not _valid_repository(name):
        return ""
    if tag:
        return tag
    return "" if digest else "latest"


def default_pull_policy(image: Any) -> str:
    """``Always`` for ``:latest`` (or no tag), else ``IfNotPresent``."""
    return "Always" if image_tag(image) == "latest" else "IfNotPresent"


# --- core/v1 ---------------------------------------------------------------------------------


def _pod(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    # Requests default to limits, for Pods only (not templates).
    for c in _dicts(spec, "containers") + _dicts(spec, "initContainers"):
        resources = _dict(c, "resources")
        limits = _dict(resources, "limits") if resources is not None else None
        if resources is None or not limits:
            continue
        requests = resources.get("requests")
        if requests is None:
            requests = resources["requests"] = {}
        if isinstance(requests, dict):
            for name, value in limits.items():
                requests.setdefault(name, copy.deepcopy(value))
    _setdefault_ptr(spec, "enableServiceLinks", True)


def _pod_spec(spec: Obj) -> None:
    _setdefault(spec, "dnsPolicy", "ClusterFirst")
    _setdefault(spec, "restartPolicy", "Always")
    if spec.get("hostNetwork") is True:
        for c in _dicts(spec, "containers") + _dicts(spec, "initContainers"):
            for port in _dicts(c, "ports"):
                if _unset(port, "hostPort") and isinstance(port.get("containerPort"), int):
                    port["hostPort"] = port["containerPort"]
    _setdefault_ptr(spec, "securityContext", {})
    _setdefault_ptr(spec, "terminationGracePeriodSeconds", 30)
    _setdefault(spec, "schedulerName", "default-scheduler")


def _container(c: Obj) -> None:
    if _unset(c, "imagePullPolicy"):
        c["imagePullPolicy"] = default_pull_policy(c.get("image"))
    _setdefault(c, "terminationMessagePath", "/dev/termination-log")
    _setdefault(c, "terminationMessagePolicy", "File")


def _protocol_tcp(obj: Obj) -> None:
    _setdefault(obj, "protocol", "TCP")


def _protocol_tcp_ptr(obj: Obj) -> None:
    _setdefault_ptr(obj, "protocol", "TCP")


def _probe(p: Obj) -> None:
    _setdefault(p, "timeoutSeconds", 1)
    _setdefault(p, "periodSeconds", 10)
    _setdefault(p, "successThreshold", 1)
    _setdefault(p, "failureThreshold", 3)


def _http_get(h: Obj) -> None:
    _setdefault(h, "path", "/")
    _setdefault(h, "scheme", "HTTP")


def _grpc(g: Obj) -> None:
    _setdefault_ptr(g, "service", "")


_VOLUME_SOURCES: tuple[str, ...] = ()  # filled below from the schema


def _volume(v: Obj) -> None:
    if not any(v.get(k) is not None for k in _VOLUME_SOURCES):
        v["emptyDir"] = {}


def _host_path(h: Obj) -> None:
    _setdefault_ptr(h, "type", "")


def _default_mode(obj: Obj) -> None:
    _setdefault_ptr(obj, "defaultMode", 0o644)


def _sa_token_projection(obj: Obj) -> None:
    _setdefault_ptr(obj, "expirationSeconds", 3600)


def _field_selector(obj: Obj) -> None:
    _setdefault(obj, "apiVersion", "v1")


def _iscsi(obj: Obj) -> None:
    _setdefault(obj, "iscsiInterface", "default")


def _rbd(obj: Obj) -> None:
    _setdefault(obj, "pool", "rbd")
    _setdefault(obj, "user", "admin")
    _setdefault(obj, "keyring", "/etc/ceph/keyring")


def _azure_disk(obj: Obj) -> None:
    _setdefault_ptr(obj, "cachingMode", "ReadWrite")
    _setdefault_ptr(obj, "kind", "Shared")
    _setdefault_ptr(obj, "fsType", "ext4")
    _setdefault_ptr(obj, "readOnly", False)


def _scale_io(obj: Obj) -> None:
    _setdefault(obj, "storageMode", "ThinProvisioned")
    _setdefault(obj, "fsType", "xfs")


def _service(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    _setdefault(spec, "sessionAffinity", "None")
    if spec.get("sessionAffinity") == "None":
        spec.pop("sessionAffinityConfig", None)
    elif spec.get("sessionAffinity") == "ClientIP":
        config = spec.get("sessionAffinityConfig")
        client_ip = config.get("clientIP") if isinstance(config, dict) else None
        if not isinstance(client_ip, dict) or client_ip.get("timeoutSeconds") is None:
            spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 10800}}
    _setdefault(spec, "type", "ClusterIP")
    for port in _dicts(spec, "ports"):
        _setdefault(port, "protocol", "TCP")
        if (
            port.get("targetPort") in (None, 0, "")
            and isinstance(port.get("port"), int)
            and not isinstance(port.get("port"), bool)
        ):
            port["targetPort"] = port["port"]
    typ = spec.get("type")
    # Externally accessible: a node port, a balancer, or external IPs on a ClusterIP service.
    if typ in ("NodePort", "LoadBalancer") or (typ == "ClusterIP" and spec.get("externalIPs")):
        _setdefault(spec, "externalTrafficPolicy", "Cluster")
    if typ in ("ClusterIP", "NodePort", "LoadBalancer"):
        # ipFamilyPolicy is not a static default: the Service allocator infers it from the
        # request (headless without selector: RequireDualStack) or keeps the old one.
        _setdefault_ptr(spec, "internalTrafficPolicy", "Cluster")
    if typ == "LoadBalancer":
        _setdefault_ptr(spec, "allocateLoadBalancerNodePorts", True)


def _endpoints(obj: Obj) -> None:
    for subset in _dicts(obj, "subsets"):
        for port in _dicts(subset, "ports"):
            _setdefault(port, "protocol", "TCP")


def _secret(obj: Obj) -> None:
    _setdefault(obj, "type", "Opaque")


def _node_status(status: Obj) -> None:
    if _absent(status, "allocatable") and isinstance(status.get("capacity"), dict):
        status["allocatable"] = copy.deepcopy(status["capacity"])


def _pv(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        _setdefault(spec, "persistentVolumeReclaimPolicy", "Retain")
        _setdefault_ptr(spec, "volumeMode", "Filesystem")
    status = _dict(obj, "status", create=True)
    if status is not None:
        _setdefault(status, "phase", "Pending")


def _pvc(obj: Obj) -> None:
    status = _dict(obj, "status", create=True)
    if status is not None:
        _setdefault(status, "phase", "Pending")


def _pvc_spec(spec: Obj) -> None:
    _setdefault_ptr(spec, "volumeMode", "Filesystem")


def _limit_range_item(item: Obj) -> None:
    if item.get("type") != "Container":
        return
    maps = {}
    for key in ("max", "min", "default", "defaultRequest"):
        value = item.get(key)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            return
        maps[key] = value
    for name, value in maps["max"].items():  # default limit: the max
        maps["default"].setdefault(name, copy.deepcopy(value))
    for name, value in maps["default"].items():  # default request: the default limit
        maps["defaultRequest"].setdefault(name, copy.deepcopy(value))
    for name, value in maps["min"].items():  # else the min
        maps["defaultRequest"].setdefault(name, copy.deepcopy(value))
    for key in ("default", "defaultRequest"):
        if maps[key] or key in item:
            item[key] = maps[key]


def _replication_controller(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    template = _dict(spec, "template")
    labels = _dict(_dict(template, "metadata") or {}, "labels") if template is not None else None
    if labels:
        if not spec.get("selector"):
            spec["selector"] = dict(labels)
        metadata = _dict(obj, "metadata", create=True)
        if metadata is not None and not metadata.get("labels"):
            metadata["labels"] = dict(labels)
    _setdefault_ptr(spec, "replicas", 1)


# --- apps/v1 ---------------------------------------------------------------------------------


def _deployment(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    _setdefault_ptr(spec, "replicas", 1)
    strategy = _dict(spec, "strategy", create=True)
    if strategy is not None:
        _setdefault(strategy, "type", "RollingUpdate")
        if strategy.get("type") == "RollingUpdate":
            rolling = _dict(strategy, "rollingUpdate", create=True)
            if rolling is not None:
                _setdefault_ptr(rolling, "maxUnavailable", "25%")
                _setdefault_ptr(rolling, "maxSurge", "25%")
    _setdefault_ptr(spec, "revisionHistoryLimit", 10)
    _setdefault_ptr(spec, "progressDeadlineSeconds", 600)


def _replica_set(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        _setdefault_ptr(spec, "replicas", 1)


def _daemon_set(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    strategy = _dict(spec, "updateStrategy", create=True)
    if strategy is not None:
        _setdefault(strategy, "type", "RollingUpdate")
        if strategy.get("type") == "RollingUpdate":
            rolling = _dict(strategy, "rollingUpdate", create=True)
            if rolling is not None:
                _setdefault_ptr(rolling, "maxUnavailable", 1)
                _setdefault_ptr(rolling, "maxSurge", 0)
    _setdefault_ptr(spec, "revisionHistoryLimit", 10)


def _stateful_set(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    _setdefault(spec, "podManagementPolicy", "OrderedReady")
    strategy = _dict(spec, "updateStrategy", create=True)
    if strategy is not None:
        if _unset(strategy, "type"):
            strategy["type"] = "RollingUpdate"
            _setdefault_ptr(strategy, "rollingUpdate", {})
        rolling = _dict(strategy, "rollingUpdate")
        if strategy.get("type") == "RollingUpdate" and rolling is not None:
            _setdefault_ptr(rolling, "partition", 0)
    # StatefulSetAutoDeletePVC (beta, on in v1.27): claims are kept unless asked otherwise.
    retention = _dict(spec, "persistentVolumeClaimRetentionPolicy", create=True)
    if retention is not None:
        _setdefault(retention, "whenDeleted", "Retain")
        _setdefault(retention, "whenScaled", "Retain")
    _setdefault_ptr(spec, "replicas", 1)
    _setdefault_ptr(spec, "revisionHistoryLimit", 10)


# --- batch/v1 --------------------------------------------------------------------------------


def _job(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    if _absent(spec, "completions") and _absent(spec, "parallelism"):
        spec["completions"] = 1
        spec["parallelism"] = 1
    _setdefault_ptr(spec, "parallelism", 1)
    _setdefault_ptr(spec, "backoffLimit", 6)
    template = _dict(spec, "template")
    labels = _dict(_dict(template, "metadata") or {}, "labels") if template is not None else None
    if labels is not None:
        metadata = _dict(obj, "metadata", create=True)
        if metadata is not None and not metadata.get("labels"):
            metadata["labels"] = dict(labels)
    _setdefault_ptr(spec, "completionMode", "NonIndexed")
    _setdefault_ptr(spec, "suspend", False)
    policy = _dict(spec, "podFailurePolicy")
    if policy is not None:
        for rule in _dicts(policy, "rules"):
            for pattern in _dicts(rule, "onPodConditions"):
                _setdefault(pattern, "status", "True")


def _cron_job(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    _setdefault(spec, "concurrencyPolicy", "Allow")
    _setdefault_ptr(spec, "suspend", False)
    _setdefault_ptr(spec, "successfulJobsHistoryLimit", 3)
    _setdefault_ptr(spec, "failedJobsHistoryLimit", 1)


# --- other groups ----------------------------------------------------------------------------


def _network_policy(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None or spec.get("policyTypes"):
        return
    types = ["Ingress"]
    egress = spec.get("egress")
    if isinstance(egress, list) and egress:
        types.append("Egress")
    spec["policyTypes"] = types


def _ingress_class(obj: Obj) -> None:
    params = _dict(_dict(obj, "spec") or {}, "parameters")
    if params is not None:
        _setdefault_ptr(params, "scope", "Cluster")


def _csr_condition(cond: Obj) -> None:
    _setdefault(cond, "status", "True")


def _rbac_binding(obj: Obj) -> None:
    role_ref = _dict(obj, "roleRef")
    if role_ref is not None:
        _setdefault(role_ref, "apiGroup", names.RBAC_GROUP)


def _rbac_subject(subject: Obj) -> None:
    if _unset(subject, "apiGroup") and subject.get("kind") in ("User", "Group"):
        subject["apiGroup"] = names.RBAC_GROUP


def _priority_class(obj: Obj) -> None:
    _setdefault_ptr(obj, "preemptionPolicy", "PreemptLowerPriority")


def _storage_class(obj: Obj) -> None:
    _setdefault_ptr(obj, "reclaimPolicy", "Delete")
    _setdefault_ptr(obj, "volumeBindingMode", "Immediate")


def _webhook(w: Obj) -> None:
    _setdefault_ptr(w, "failurePolicy", "Fail")
    _setdefault_ptr(w, "matchPolicy", "Equivalent")
    _setdefault_ptr(w, "namespaceSelector", {})
    _setdefault_ptr(w, "objectSelector", {})
    _setdefault_ptr(w, "timeoutSeconds", 10)


def _mutating_webhook(w: Obj) -> None:
    _webhook(w)
    _setdefault_ptr(w, "reinvocationPolicy", "Never")


def _webhook_rule(rule: Obj) -> None:
    _setdefault_ptr(rule, "scope", "*")


def _policy_spec(spec: Obj) -> None:
    _setdefault_ptr(spec, "failurePolicy", "Fail")


def _match_resources(match: Obj) -> None:
    _setdefault_ptr(match, "matchPolicy", "Equivalent")
    _setdefault_ptr(match, "namespaceSelector", {})
    _setdefault_ptr(match, "objectSelector", {})


def _param_ref(ref: Obj) -> None:
    _setdefault_ptr(ref, "parameterNotFoundAction", "Deny")


def _webhook_service(ref: Obj) -> None:
    _setdefault_ptr(ref, "port", 443)


# The autoscaler: minReplicas 1, 80% average CPU utilization when no metric is given, and a
# behavior that is given completed with the default rules of each direction (the scale-down
# window stays unset: the controller's --horizontal-pod-autoscaler-downscale-stabilization).
HPA_DEFAULT_CPU_UTILIZATION = 80


def hpa_default_scale_up() -> Obj:
    return {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15},
        ],
    }


def hpa_default_scale_down() -> Obj:
    return {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def _hpa_rules(behavior: Obj, key: str, defaults: Obj) -> None:
    rules = behavior.get(key)
    if rules is None:
        behavior[key] = defaults
        return
    if not isinstance(rules, dict):
        return
    for field, value in defaults.items():
        if rules.get(field) is None:
            rules[field] = value


def _horizontal_pod_autoscaler(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None:
        return
    _setdefault_ptr(spec, "minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": HPA_DEFAULT_CPU_UTILIZATION},
                },
            }
        ]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        _hpa_rules(behavior, "scaleUp", hpa_default_scale_up())
        _hpa_rules(behavior, "scaleDown", hpa_default_scale_down())


# API priority and fairness (v1beta3): a schema's precedence, a level's shares and queues.
FLOWCONTROL_DEFAULT_MATCHING_PRECEDENCE = 1000
FLOWCONTROL_DEFAULT_NOMINAL_SHARES = 30


def _flow_schema_spec(spec: Obj) -> None:
    _setdefault(spec, "matchingPrecedence", FLOWCONTROL_DEFAULT_MATCHING_PRECEDENCE)


def _limited_priority_level(limited: Obj) -> None:
    _setdefault(limited, "nominalConcurrencyShares", FLOWCONTROL_DEFAULT_NOMINAL_SHARES)
    _setdefault_ptr(limited, "lendablePercent", 0)


def _queuing(q: Obj) -> None:
    for key, value in (("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)):
        _setdefault(q, key, value)


_CORE = "k8s.io.api.core.v1."
_DEFAULTERS: dict[str, Callable[[Obj], None]] = {
    _CORE + "Pod": _pod,
    _CORE + "PodSpec": _pod_spec,
    _CORE + "Container": _container,
    _CORE + "EphemeralContainerCommon": _container,
    _CORE + "ContainerPort": _protocol_tcp,
    _CORE + "Probe": _probe,
    _CORE + "HTTPGetAction": _http_get,
    _CORE + "GRPCAction": _grpc,
    _CORE + "Volume": _volume,
    _CORE + "HostPathVolumeSource": _host_path,
    _CORE + "SecretVolumeSource": _default_mode,
    _CORE + "ConfigMapVolumeSource": _default_mode,
    _CORE + "DownwardAPIVolumeSource": _default_mode,
    _CORE + "ProjectedVolumeSource": _default_mode,
    _CORE + "ServiceAccountTokenProjection": _sa_token_projection,
    _CORE + "ObjectFieldSelector": _field_selector,
    _CORE + "ISCSIVolumeSource": _iscsi,
    _CORE + "ISCSIPersistentVolumeSource": _iscsi,
    _CORE + "RBDVolumeSource": _rbd,
    _CORE + "RBDPersistentVolumeSource": _rbd,
    _CORE + "AzureDiskVolumeSource": _azure_disk,
    _CORE + "ScaleIOVolumeSource": _scale_io,
    _CORE + "ScaleIOPersistentVolumeSource": _scale_io,
    _CORE + "Service": _service,
    _CORE + "Endpoints": _endpoints,
    _CORE + "Secret": _secret,
    _CORE + "NodeStatus": _node_status,
    _CORE + "PersistentVolume": _pv,
    _CORE + "PersistentVolumeClaim": _pvc,
    _CORE + "PersistentVolumeClaimSpec": _pvc_spec,
    _CORE + "LimitRangeItem": _limit_range_item,
    _CORE + "ReplicationController": _replication_controller,
    "k8s.io.api.apps.v1.Deployment": _deployment,
    "k8s.io.api.apps.v1.ReplicaSet": _replica_set,
    "k8s.io.api.apps.v1.DaemonSet": _daemon_set,
    "k8s.io.api.apps.v1.StatefulSet": _stateful_set,
    "k8s.io.api.batch.v1.Job": _job,
    "k8s.io.api.batch.v1.CronJob": _cron_job,
    "k8s.io.api.autoscaling.v2.HorizontalPodAutoscaler": _horizontal_pod_autoscaler,
    "k8s.io.api.discovery.v1.EndpointPort": _protocol_tcp_ptr,
    "k8s.io.api.networking.v1.NetworkPolicy": _network_policy,
    "k8s.io.api.networking.v1.NetworkPolicyPort": _protocol_tcp_ptr,
    "k8s.io.api.networking.v1.IngressClass": _ingress_class,
    "k8s.io.api.certificates.v1.CertificateSigningRequestCondition": _csr_condition,
    "k8s.io.api.rbac.v1.RoleBinding": _rbac_binding,
    "k8s.io.api.rbac.v1.ClusterRoleBinding": _rbac_binding,
    "k8s.io.api.rbac.v1.Subject": _rbac_subject,
    "k8s.io.api.scheduling.v1.PriorityClass": _priority_class,
    "k8s.io.api.storage.v1.StorageClass": _storage_class,
    "k8s.io.api.admissionregistration.v1.ValidatingWebhook": _webhook,
    "k8s.io.api.admissionregistration.v1.MutatingWebhook": _mutating_webhook,
    "k8s.io.api.admissionregistration.v1.Rule": _webhook_rule,
    "k8s.io.api.admissionregistration.v1.ServiceReference": _webhook_service,
    "k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicySpec": _policy_spec,
    "k8s.io.api.admissionregistration.v1.MatchResources": _match_resources,
    "k8s.io.api.admissionregistration.v1.ParamRef": _param_ref,
    "k8s.io.api.flowcontrol.v1beta3.FlowSchemaSpec": _flow_schema_spec,
    "k8s.io.api.flowcontrol.v1beta3.LimitedPriorityLevelConfiguration": _limited_priority_level,
    "k8s.io.api.flowcontrol.v1beta3.QueuingConfiguration": _queuing,
}


def _init_volume_sources() -> None:
    global _VOLUME_SOURCES

    _VOLUME_SOURCES = tuple(core.VolumeSource.json_fields())


_init_volume_sources()
