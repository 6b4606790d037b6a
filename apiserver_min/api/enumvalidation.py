"""Enumerated fields, enforced where upstream's validation (v1.27) enforces them.

The schemas declare each enumeration once (``String(enum=...)``: what OpenAPI
publishes). Upstream's validation enforces most of them, each with its own
wording (usually ``Unsupported value: "X": supported values: ...``, sometimes
``Invalid value``), value order, empty-value rule and, now and then, an odd
field path; and some not at all (status fields, a field an off-by-default
feature gate drops). :data:`RULES` records the enforced ones, keyed by the
upstream message and JSON field they belong to; :data:`NOT_ENFORCED` says why
each other declared enumeration is left alone, and a test keeps the two
covering every declaration.

:func:`validate` walks an object along its kind's schema and checks every
ruled field it meets, wherever the struct appears (a container port in a Pod, a
Deployment's pod template or a CronJob's job template alike). The walk is
planned once per struct and rule set, descending only into fields that can
lead to a ruled one, so a Pod (whose own validator already checks most of its
enumerations: :data:`POD_RULES` leaves those out) costs a few dictionary look-ups.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping

from .helpers import list_at

# The value lists (and so the messages) podvalidation gives Pods; pod templates get the same.
from .podvalidation import (
    _DNS_POLICIES,
    _FS_GROUP_CHANGE_POLICIES,
    _HOST_PATH_TYPES,
    _HTTP_SCHEMES,
    _MOUNT_PROPAGATIONS,
    _PREEMPTION_POLICIES,
    _PROC_MOUNT_TYPES,
    _PROTOCOLS,
    _PULL_POLICIES,
    _RESTART_POLICIES,
    _SECCOMP_TYPES,
    _TAINT_EFFECTS,
    _TERMINATION_MESSAGE_POLICIES,
    _TOLERATION_OPERATORS,
    _WHEN_UNSATISFIABLE,
)
from .schema import List, Map, String, Struct, iter_structs
from .validation import FieldError, GoValue, go_quote

__all__ = ["Rule", "Rules", "RULES", "POD_RULES", "NOT_ENFORCED", "NOT_DESCENDED", "validate", "enum_field_keys"]

# What a missing (or null) value, or an empty string, means for a rule.
SKIP = "skip"  # nothing to check (upstream allows it, or defaulting always fills it)
REQUIRED = "required"  # "Required value"
CHECK = "check"  # checked like any other value (Go's zero value "" is not supported)

Builder = Callable[[str, Any, dict], FieldError]


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one enumerated field is enforced. ``values`` are upstream's supported
    values in the order its message lists them; None takes the schema's
    enumeration (sorted, as upstream's ``sets.String.List()`` gives it). ``error``
    builds the error for a bad value from (field path, value, the object holding
    the field); the default is upstream's ``field.NotSupported``."""

    values: tuple[str, ...] | None = None
    absent: str = SKIP
    empty: str = CHECK
    error: Builder | None = None
    required_detail: str = ""
    allowed: frozenset = dataclasses.field(default=frozenset(), compare=False)

    def resolved(self, schema_values: tuple[str, ...] | None) -> "Rule":
        values = self.values if self.values is not None else tuple(sorted(schema_values or ()))
        return dataclasses.replace(self, values=values, allowed=frozenset(values))

    def bad(self, path: str, value: Any, parent: dict) -> FieldError:
        if self.error is not None:
            return self.error(path, value, parent)
        return FieldError.not_supported(path, value, self.values or ())


Rules = Mapping[tuple[str, str], Rule]


# --- upstream's particular wordings --------------------------------------------------------------

_LAST_INDEX = re.compile(r"\[\d+\]$")
_PARENT_INDEX = re.compile(r"\[\d+\](?=\.[^.\[]+$)")


def _invalid(detail: str) -> Builder:
    return lambda path, value, parent: FieldError.invalid(path, value, detail)


def _not_supported_unindexed(values: tuple[str, ...]) -> Builder:
    """NotSupported at the list's path, without the item's index (accessModes)."""
    return lambda path, value, parent: FieldError.not_supported(_LAST_INDEX.sub("", path), value, values)


def _invalid_unindexed_parent(detail: str) -> Builder:
    """Invalid at ``...matchExpressions.<field>``: upstream leaves out the item's index."""
    return lambda path, value, parent: FieldError.invalid(_PARENT_INDEX.sub("", path), value, detail)


def _go_string(value: Any) -> str:
    return go_quote(value if isinstance(value, str) else str(value))


def _go_strategy(struct: str, rolling: str, parent: dict) -> GoValue:
    """Go's ``%#v`` of an apps update strategy (the value upstream reports). A set
    RollingUpdate pointer prints as an address upstream; that is not reproducible."""
    pointer = "nil" if parent.get("rollingUpdate") is None else "non-nil"
    return GoValue(
        f"apps.{struct}{{Type:{_go_string(parent.get('type', ''))}, RollingUpdate:(*apps.{rolling})({pointer})}}"
    )


def _strategy_not_supported(struct: str, rolling: str, values: tuple[str, ...]) -> Builder:
    """Deployment and DaemonSet: NotSupported at the strategy, valued by the whole struct."""

    def build(path: str, value: Any, parent: dict) -> FieldError:
        return FieldError.not_supported(path.rsplit(".", 1)[0], _go_strategy(struct, rolling, parent), values)

    return build


def _stateful_set_update_strategy(path: str, value: Any, parent: dict) -> FieldError:
    return FieldError.invalid(
        path.rsplit(".", 1)[0],
        _go_strategy("StatefulSetUpdateStrategy", "RollingUpdateStatefulSetStrategy", parent),
        "must be 'RollingUpdate' or 'OnDelete'",
    )


def _quota_scopes(path: str, value: Any, parent: dict) -> FieldError:
    scopes = list_at(parent, "scopes")
    listed = ", ".join(_go_string(s) for s in scopes)
    return FieldError.invalid(
        _LAST_INDEX.sub("", path), GoValue(f"[]core.ResourceQuotaScope{{{listed}}}"), "unsupported scope"
    )


def _external_traffic_policy(path: str, value: Any, parent: dict) -> FieldError:
    # Externally accessible: a node port, a balancer, or external IPs on a ClusterIP service
    # (the Service strategy refuses a supported value on any other service the same way).
    typ = parent.get("type")
    if typ in ("NodePort", "LoadBalancer") or (typ == "ClusterIP" and parent.get("externalIPs")):
        return FieldError.not_supported(path, value, ("Cluster", "Local"))
    return FieldError.invalid(path, value, "may only be set for externally-accessible services")


def _event_type(path: str, value: Any, parent: dict) -> FieldError:
    return FieldError.invalid(path, "", f"has invalid value: {value if isinstance(value, str) else str(value)}")


# --- the rules --------------------------------------------------------------------------------------

CORE = "k8s.io.api.core.v1."
APPS = "k8s.io.api.apps.v1."
BATCH = "k8s.io.api.batch.v1."
ADMISSION = "k8s.io.api.admissionregistration.v1."

_SELECTOR_OPERATOR = Rule(absent=CHECK, error=_invalid("not a valid selector operator"))
_NO_SIDE_EFFECTS = ("None", "NoneOnDryRun")
_SIDE_EFFECTS = Rule(
    _NO_SIDE_EFFECTS, absent=REQUIRED, required_detail=f"must specify one of {', '.join(_NO_SIDE_EFFECTS)}"
)
_ACCESS_MODES = Rule(
    error=_not_supported_unindexed(("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"))
)

# Pod fields that podvalidation (upstream's ValidatePodSpec) checks for Pods; the same
# values and wording apply wherever a pod template carries them.
_POD_SPEC_RULES: dict[tuple[str, str], Rule] = {
    (CORE + "ContainerPort", "protocol"): Rule(_PROTOCOLS, empty=SKIP),
    (CORE + "Container", "imagePullPolicy"): Rule(_PULL_POLICIES, empty=SKIP),
    (CORE + "Container", "terminationMessagePolicy"): Rule(_TERMINATION_MESSAGE_POLICIES, empty=SKIP),
    (CORE + "EphemeralContainer", "imagePullPolicy"): Rule(_PULL_POLICIES, empty=SKIP),
    (CORE + "EphemeralContainer", "terminationMessagePolicy"): Rule(_TERMINATION_MESSAGE_POLICIES, empty=SKIP),
    (CORE + "HTTPGetAction", "scheme"): Rule(_HTTP_SCHEMES, empty=SKIP),
    (CORE + "HostPathVolumeSource", "type"): Rule(_HOST_PATH_TYPES, empty=SKIP),
    (CORE + "VolumeMount", "mountPropagation"): Rule(_MOUNT_PROPAGATIONS),
    (CORE + "SeccompProfile", "type"): Rule(_SECCOMP_TYPES, absent=CHECK),
    (CORE + "SecurityContext", "procMount"): Rule(_PROC_MOUNT_TYPES),
    (CORE + "Toleration", "operator"): Rule(_TOLERATION_OPERATORS, empty=SKIP),
    (CORE + "Toleration", "effect"): Rule(_TAINT_EFFECTS, empty=SKIP),
    (CORE + "PodSecurityContext", "fsGroupChangePolicy"): Rule(_FS_GROUP_CHANGE_POLICIES),
    (CORE + "TopologySpreadConstraint", "whenUnsatisfiable"): Rule(_WHEN_UNSATISFIABLE, absent=CHECK),
    (CORE + "PodSpec", "restartPolicy"): Rule(_RESTART_POLICIES, empty=SKIP),
    (CORE + "PodSpec", "dnsPolicy"): Rule(_DNS_POLICIES, empty=SKIP),
    (CORE + "PodSpec", "preemptionPolicy"): Rule(_PREEMPTION_POLICIES),
}

FLOWCONTROL = "k8s.io.api.flowcontrol.v1beta3."
RULES: dict[tuple[str, str], Rule] = {
    **_POD_SPEC_RULES,
    # core: pods (beyond podvalidation), volumes, claims
    (CORE + "NodeSelectorRequirement", "operator"): _SELECTOR_OPERATOR,
    (CORE + "TopologySpreadConstraint", "nodeAffinityPolicy"): Rule(),
    (CORE + "TopologySpreadConstraint", "nodeTaintsPolicy"): Rule(),
    (CORE + "AzureDiskVolumeSource", "cachingMode"): Rule(),
    (CORE + "AzureDiskVolumeSource", "kind"): Rule(),
    (CORE + "PersistentVolumeClaimSpec", "accessModes"): _ACCESS_MODES,
    (CORE + "PersistentVolumeClaimSpec", "volumeMode"): Rule(),
    (CORE + "PersistentVolumeSpec", "accessModes"): _ACCESS_MODES,
    (CORE + "PersistentVolumeSpec", "volumeMode"): Rule(),
    (CORE + "PersistentVolumeSpec", "persistentVolumeReclaimPolicy"): Rule(empty=SKIP),
    # core: services, endpoints, nodes, quotas
    (CORE + "ServiceSpec", "type"): Rule(empty=SKIP),
    (CORE + "ServiceSpec", "sessionAffinity"): Rule(empty=SKIP),
    (CORE + "ServiceSpec", "externalTrafficPolicy"): Rule(empty=SKIP, error=_external_traffic_policy),
    (CORE + "ServiceSpec", "internalTrafficPolicy"): Rule(),
    (CORE + "ServiceSpec", "ipFamilyPolicy"): Rule(),
    (CORE + "ServiceSpec", "ipFamilies"): Rule(),
    (CORE + "ServicePort", "protocol"): Rule(empty=SKIP),
    (CORE + "EndpointPort", "protocol"): Rule(empty=SKIP),
    (CORE + "Taint", "effect"): Rule(_TAINT_EFFECTS, absent=REQUIRED, empty=REQUIRED),
    (CORE + "ResourceQuotaSpec", "scopes"): Rule(error=_quota_scopes),
    (CORE + "ScopedResourceSelectorRequirement", "scopeName"): Rule(
        absent=CHECK, error=_invalid_unindexed_parent("unsupported scope")
    ),
    (CORE + "ScopedResourceSelectorRequirement", "operator"): Rule(
        absent=CHECK, error=_invalid_unindexed_parent("not a valid selector operator")
    ),
    # apps
    (APPS + "DeploymentStrategy", "type"): Rule(
        ("Recreate", "RollingUpdate"),
        empty=SKIP,
        error=_strategy_not_supported("DeploymentStrategy", "RollingUpdateDeployment", ("Recreate", "RollingUpdate")),
    ),
    (APPS + "DaemonSetUpdateStrategy", "type"): Rule(
        ("RollingUpdate", "OnDelete"),
        empty=SKIP,
        error=_strategy_not_supported(
            "DaemonSetUpdateStrategy", "RollingUpdateDaemonSet", ("RollingUpdate", "OnDelete")
        ),
    ),
    (APPS + "StatefulSetUpdateStrategy", "type"): Rule(empty=SKIP, error=_stateful_set_update_strategy),
    (APPS + "StatefulSetSpec", "podManagementPolicy"): Rule(
        empty=SKIP, error=_invalid("must be 'OrderedReady' or 'Parallel'")
    ),
    (APPS + "StatefulSetPersistentVolumeClaimRetentionPolicy", "whenDeleted"): Rule(("Retain", "Delete"), empty=SKIP),
    (APPS + "StatefulSetPersistentVolumeClaimRetentionPolicy", "whenScaled"): Rule(("Retain", "Delete"), empty=SKIP),
    # batch
    (BATCH + "JobSpec", "completionMode"): Rule(("NonIndexed", "Indexed")),
    (BATCH + "PodFailurePolicyRule", "action"): Rule(("Ignore", "FailJob", "Count"), absent=CHECK),
    (BATCH + "PodFailurePolicyOnExitCodesRequirement", "operator"): Rule(("In", "NotIn"), absent=CHECK),
    (BATCH + "CronJobSpec", "concurrencyPolicy"): Rule(("Allow", "Forbid", "Replace"), empty=SKIP),
    # discovery, networking, policy, scheduling, storage
    ("k8s.io.api.discovery.v1.EndpointSlice", "addressType"): Rule(absent=REQUIRED, empty=REQUIRED),
    ("k8s.io.api.discovery.v1.EndpointPort", "protocol"): Rule(),
    ("k8s.io.api.networking.v1.NetworkPolicyPort", "protocol"): Rule(("TCP", "UDP", "SCTP")),
    ("k8s.io.api.networking.v1.NetworkPolicySpec", "policyTypes"): Rule(("Ingress", "Egress")),
    ("k8s.io.api.networking.v1.HTTPIngressPath", "pathType"): Rule(
        absent=REQUIRED, required_detail="pathType must be specified"
    ),
    ("k8s.io.api.policy.v1.PodDisruptionBudgetSpec", "unhealthyPodEvictionPolicy"): Rule(),
    ("k8s.io.api.scheduling.v1.PriorityClass", "preemptionPolicy"): Rule(_PREEMPTION_POLICIES, empty=REQUIRED),
    ("k8s.io.api.storage.v1.StorageClass", "reclaimPolicy"): Rule(("Delete", "Retain"), empty=SKIP),
    ("k8s.io.api.storage.v1.StorageClass", "volumeBindingMode"): Rule(),
    # admissionregistration (v1 create rules; the strategy relaxes sideEffects on update)
    (ADMISSION + "Rule", "scope"): Rule(),
    (ADMISSION + "RuleWithOperations", "scope"): Rule(),
    (ADMISSION + "RuleWithOperations", "operations"): Rule(),
    (ADMISSION + "ValidatingWebhook", "failurePolicy"): Rule(),
    (ADMISSION + "ValidatingWebhook", "matchPolicy"): Rule(),
    (ADMISSION + "ValidatingWebhook", "sideEffects"): _SIDE_EFFECTS,
    (ADMISSION + "MutatingWebhook", "failurePolicy"): Rule(),
    (ADMISSION + "MutatingWebhook", "matchPolicy"): Rule(),
    (ADMISSION + "MutatingWebhook", "sideEffects"): _SIDE_EFFECTS,
    (ADMISSION + "MutatingWebhook", "reinvocationPolicy"): Rule(),
    # validating admission policies and their bindings
    (ADMISSION + "NamedRuleWithOperations", "operations"): Rule(),
    (ADMISSION + "NamedRuleWithOperations", "scope"): Rule(),
    (ADMISSION + "MatchResources", "matchPolicy"): Rule(),
    (ADMISSION + "ValidatingAdmissionPolicySpec", "failurePolicy"): Rule(),
    (ADMISSION + "ParamRef", "parameterNotFoundAction"): Rule(),
    (ADMISSION + "ValidatingAdmissionPolicyBindingSpec", "validationActions"): Rule(),
    # events.orch.io/v1 (upstream's strict events.k8s.io validation); not a schema
    # enumeration, and core/v1 Events keep any type, as upstream's legacy validation does.
    ("k8s.io.api.events.v1.Event", "type"): Rule(("Normal", "Warning"), absent=CHECK, error=_event_type),
    # flowcontrol.orch.io (the strategy requires the limit response type itself)
    (FLOWCONTROL + "FlowDistinguisherMethod", "type"): Rule(absent=REQUIRED),
    (FLOWCONTROL + "Subject", "kind"): Rule(absent=REQUIRED),
    (FLOWCONTROL + "PriorityLevelConfigurationSpec", "type"): Rule(absent=REQUIRED),
    (FLOWCONTROL + "LimitResponse", "type"): Rule(),
}

# For Pods: what podvalidation does not check itself.
POD_RULES: dict[tuple[str, str], Rule] = {k: r for k, r in RULES.items() if k not in _POD_SPEC_RULES}

# Declared enumerations upstream's validation does not enforce (or enforces elsewhere).
_STATUS = "status, written by controllers and agents; upstream's status validation does not check it"
_APIEXT = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1."

NOT_ENFORCED: dict[tuple[str, str], str] = {
    (FLOWCONTROL + "FlowSchemaCondition", "status"): _STATUS,
    (FLOWCONTROL + "PriorityLevelConfigurationCondition", "status"): _STATUS,
    (CORE + "PodStatus", "phase"): _STATUS,
    (CORE + "PodStatus", "qosClass"): _STATUS,
    (CORE + "PodStatus", "resize"): _STATUS,
    (CORE + "NodeStatus", "phase"): _STATUS,
    (CORE + "NamespaceStatus", "phase"): _STATUS,
    (CORE + "PersistentVolumeStatus", "phase"): _STATUS,
    (CORE + "PersistentVolumeClaimStatus", "phase"): _STATUS,
    (CORE + "PersistentVolumeClaimStatus", "accessModes"): _STATUS,
    (CORE + "PersistentVolumeClaimStatus", "resizeStatus"): _STATUS + " (alpha RecoverVolumeExpansionFailure)",
    (CORE + "PortStatus", "protocol"): _STATUS + " (ValidateLoadBalancerStatus checks addresses only)",
    ("k8s.io.api.networking.v1.IngressPortStatus", "protocol"): _STATUS,
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Condition", "status"): _STATUS,
    (_APIEXT + "CustomResourceDefinitionCondition", "status"): _STATUS,
    (
        _APIEXT + "CustomResourceDefinitionSpec",
        "scope",
    ): "checked by the definition strategy (apiextensions/definition.py)",
    (
        _APIEXT + "CustomResourceConversion",
        "strategy",
    ): "checked by the definition strategy (apiextensions/definition.py)",
    (
        CORE + "ContainerResizePolicy",
        "restartPolicy",
    ): "alpha InPlacePodVerticalScaling: upstream drops resizePolicy while the gate is off",
    (
        "k8s.io.api.certificates.v1.CertificateSigningRequestSpec",
        "usages",
    ): "checked by the CSR strategy (server/strategy.py CsrStrategy)",
    (
        "k8s.io.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry",
        "operation",
    ): "checked when managedFields are decoded (server/managedfields.py)",
    (CORE + "EphemeralContainerCommon", "imagePullPolicy"): "inline in EphemeralContainer: ruled there",
    (CORE + "EphemeralContainerCommon", "terminationMessagePolicy"): "inline in EphemeralContainer: ruled there",
}

# Subtrees upstream's validation does not look into.
NOT_DESCENDED: frozenset[tuple[str, str]] = frozenset(
    {
        (APPS + "StatefulSetSpec", "volumeClaimTemplates"),  # ValidateStatefulSetSpec leaves the claims alone
    }
)


# --- the walk ----------------------------------------------------------------------------------------

_STRUCT, _STRUCT_LIST, _STRUCT_MAP = range(3)
_Plan = tuple[tuple[tuple[str, Rule, bool], ...], tuple[tuple[str, int, Struct], ...]]
_PLANS: dict[tuple[int, int], _Plan] = {}
_HAS_CHECKS: dict[tuple[int, int], bool] = {}


def _enum_values(t: Any) -> tuple[tuple[str, ...] | None, bool]:
    """(the schema's enumeration, whether the field is a list of it)."""
    if isinstance(t, List):
        return (t.item_type.enum if isinstance(t.item_type, String) else None), True
    return (t.enum if isinstance(t, String) else None), False


def _descent(t: Any) -> tuple[int, Struct] | None:
    if isinstance(t, Struct):
        return _STRUCT, t
    if isinstance(t, List) and isinstance(t.item_type, Struct):
        return _STRUCT_LIST, t.item_type
    if isinstance(t, Map) and isinstance(t.value_type, Struct):
        return _STRUCT_MAP, t.value_type
    return None


def _has_checks(s: Struct, rules: Rules) -> bool:
    """Whether a ruled field can be reached from ``s`` (memoized)."""
    key = (id(s), id(rules))
    known = _HAS_CHECKS.get(key)
    if known is not None:
        return known
    _HAS_CHECKS[key] = False  # while in progress: a (hypothetical) cycle adds nothing
    found = False
    for name, f in s.json_fields().items():
        if (s.name, name) in rules:
            found = True
            break
        d = _descent(f.type)
        if d is not None and (s.name, name) not in NOT_DESCENDED and _has_checks(d[1], rules):
            found = True
            break
    _HAS_CHECKS[key] = found
    return found


def _plan(s: Struct, rules: Rules) -> _Plan:
    checks: list[tuple[str, Rule, bool]] = []
    descents: list[tuple[str, int, Struct]] = []
    for name, f in s.json_fields().items():
        rule = rules.get((s.name, name))
        if rule is not None:
            values, is_list = _enum_values(f.type)
            checks.append((name, rule.resolved(values), is_list))
            continue
        d = _descent(f.type)
        if d is not None and (s.name, name) not in NOT_DESCENDED and _has_checks(d[1], rules):
            descents.append((name, d[0], d[1]))
    plan = (tuple(checks), tuple(descents))
    _PLANS[(id(s), id(rules))] = plan
    return plan


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(s: Struct, obj: dict, path: str, rules: Rules, errs: list[FieldError]) -> None:
    checks, descents = _PLANS.get((id(s), id(rules))) or _plan(s, rules)
    for key, rule, is_list in checks:
        value = obj.get(key)
        if is_list:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if not (isinstance(item, str) and item in rule.allowed):
                        errs.append(rule.bad(f"{_join(path, key)}[{i}]", item, obj))
            continue
        if isinstance(value, str) and value in rule.allowed:
            continue
        mode = rule.absent if value is None else rule.empty if value == "" else CHECK
        if mode == SKIP:
            continue
        if mode == REQUIRED:
            errs.append(FieldError.required(_join(path, key), rule.required_detail))
        else:
            errs.append(rule.bad(_join(path, key), "" if value is None else value, obj))
    for key, how, t in descents:
        value = obj.get(key)
        if value is None:
            continue
        if how == _STRUCT:
            if isinstance(value, dict):
                _walk(t, value, _join(path, key), rules, errs)
        elif how == _STRUCT_LIST:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, dict):
                        _walk(t, item, f"{_join(path, key)}[{i}]", rules, errs)
        elif isinstance(value, dict):
            for k, item in value.items():
                if isinstance(item, dict):
                    _walk(t, item, f"{_join(path, key)}[{k}]", rules, errs)


def validate(schema: Struct | None, obj: Any, rules: Rules = RULES) -> list[FieldError]:
    """Errors for the enumerated fields of ``obj`` (a kind's JSON object) that break
    ``rules``; a part of the wrong shape is skipped (type checks report it)."""
    if schema is None or not isinstance(obj, dict):
        return []
    errs: list[FieldError] = []
    try:
        _walk(schema, obj, "", rules, errs)
    except RecursionError:  # absurdly deep input: type checks refuse it
        pass
    return errs


def enum_field_keys(schemas) -> dict[tuple[str, str], tuple[str, ...]]:
    """Every (message, JSON field) declared with an enumeration under ``schemas``."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for s in iter_structs(list(schemas)):
        for name, f in s.json_fields().items():
            values, _ = _enum_values(f.type)
            if values:
                out[(s.name, name)] = values
    return out
