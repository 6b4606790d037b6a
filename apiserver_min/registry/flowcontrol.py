"""FlowSchema and PriorityLevelConfiguration (``flowcontrol.orch.io``): validation as
upstream (v1.27) words it. Enumerated fields (distinguisher, subject kind, level type,
limit response type) are checked by the schema's enums (``api/enumvalidation.py``)."""

from __future__ import annotations

import math
from typing import Any

from ..api import validation as v
from ..api.validation import FieldError
from .strategy import Strategy

Errs = list[FieldError]

MAX_MATCHING_PRECEDENCE = 10000
# A hand may take at most this many bits of a flow's hash (upstream's shuffle-sharding limit).
MAX_HASH_BITS = 60
_VERB_ALL = "*"
_API_GROUP_ALL = "*"
_RESOURCE_ALL = "*"
_NAMESPACE_EVERY = "*"
_NON_RESOURCE_ALL = "*"


def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def _all_or_listed(values: list, path: str, wildcard: str, what: str) -> Errs:
    """A list that is either the single wildcard or names without it."""
    if not values:
        return [FieldError.required(path, f"{what} must contain at least one value")]
    if wildcard in values and len(values) > 1:
        return [FieldError.invalid(path, values, f"if '{wildcard}' is present, must not specify other {what}")]
    return []


def subject_errors(subject: dict, path: str) -> Errs:
    errs: Errs = []
    kind = subject.get("kind")
    members = {"User": "user", "Group": "group", "ServiceAccount": "serviceAccount"}
    for k, member in members.items():
        value = subject.get(member)
        if k == kind:
            if value is None:
                errs.append(FieldError.required(f"{path}.{member}", f"{member} is required when subject kind is '{k}'"))
            elif k == "ServiceAccount":
                sa = _dict(value)
                if not sa.get("name"):
                    errs.append(FieldError.required(f"{path}.serviceAccount.name"))
                ns = sa.get("namespace")
                if not ns:
                    errs.append(FieldError.required(f"{path}.serviceAccount.namespace"))
                else:
                    errs += [
                        FieldError.invalid(f"{path}.serviceAccount.namespace", ns, m)
                        for m in v.is_dns1123_label(str(ns))
                    ]
            elif not _dict(value).get("name"):
                errs.append(FieldError.required(f"{path}.{member}.name"))
        elif value is not None and kind in members:
            errs.append(
                FieldError.forbidden(f"{path}.{member}", f"{member} is forbidden when subject kind is not '{k}'")
            )
    return errs


def resource_rule_errors(rule: dict, path: str) -> Errs:
    errs = _all_or_listed(_list(rule.get("verbs")), f"{path}.verbs", _VERB_ALL, "verbs")
    errs += _all_or_listed(_list(rule.get("apiGroups")), f"{path}.apiGroups", _API_GROUP_ALL, "apiGroups")
    errs += _all_or_listed(_list(rule.get("resources")), f"{path}.resources", _RESOURCE_ALL, "resources")
    namespaces = _list(rule.get("namespaces"))
    if not namespaces and not rule.get("clusterScope"):
        errs.append(
            FieldError.required(
                f"{path}.namespaces", "resource rules that are not cluster scoped must supply at least one namespace"
            )
        )
    elif _NAMESPACE_EVERY in namespaces and len(namespaces) > 1:
        errs.append(
            FieldError.invalid(
                f"{path}.namespaces",
                namespaces,
                f"if '{_NAMESPACE_EVERY}' is present, must not specify other namespaces",
            )
        )
    else:
        for i, ns in enumerate(namespaces):
            if ns != _NAMESPACE_EVERY:
                errs += [FieldError.invalid(f"{path}.namespaces[{i}]", ns, m) for m in v.is_dns1123_label(str(ns))]
    return errs


def non_resource_rule_errors(rule: dict, path: str) -> Errs:
    errs = _all_or_listed(_list(rule.get("verbs")), f"{path}.verbs", _VERB_ALL, "verbs")
    urls = _list(rule.get("nonResourceURLs"))
    errs += _all_or_listed(urls, f"{path}.nonResourceURLs", _NON_RESOURCE_ALL, "nonResourceURLs")
    for i, url in enumerate(urls):
        p = f"{path}.nonResourceURLs[{i}]"
        if url == _NON_RESOURCE_ALL:
            continue
        if not isinstance(url, str) or not url.startswith("/"):
            errs.append(FieldError.invalid(p, url, "must start with slash"))
        elif "*" in url[:-1] or (url.endswith("*") and not url.endswith("/*")):
            errs.append(FieldError.invalid(p, url, "wildcard '*' is only allowed as the last segment, '/*'"))
    return errs


def flow_schema_spec_errors(spec: dict) -> Errs:
    errs: Errs = []
    precedence = spec.get("matchingPrecedence")
    if isinstance(precedence, int) and not isinstance(precedence, bool):
        if precedence <= 0:
            errs.append(FieldError.invalid("spec.matchingPrecedence", precedence, "must be a positive value"))
        elif precedence > MAX_MATCHING_PRECEDENCE:
            errs.append(
                FieldError.invalid(
                    "spec.matchingPrecedence", precedence, f"must not be greater than {MAX_MATCHING_PRECEDENCE}"
                )
            )
    pl = _dict(spec.get("priorityLevelConfiguration")).get("name")
    if not pl:
        errs.append(FieldError.required("spec.priorityLevelConfiguration.name", "must reference a priority level"))
    else:
        errs += [FieldError.invalid("spec.priorityLevelConfiguration.name", pl, m) for m in v.is_dns1123_subdomain(pl)]
    for i, rule in enumerate(_list(spec.get("rules"))):
        p = f"spec.rules[{i}]"
        rule = _dict(rule)
        subjects = _list(rule.get("subjects"))
        if not subjects:
            errs.append(FieldError.required(f"{p}.subjects", "subjects must contain at least one value"))
        for j, s in enumerate(subjects):
            errs += subject_errors(_dict(s), f"{p}.subjects[{j}]")
        resource_rules = _list(rule.get("resourceRules"))
        non_resource_rules = _list(rule.get("nonResourceRules"))
        if not resource_rules and not non_resource_rules:
            errs.append(
                FieldError.required(p, "at least one of resourceRules and nonResourceRules has to be non-empty")
            )
        for j, r in enumerate(resource_rules):
            errs += resource_rule_errors(_dict(r), f"{p}.resourceRules[{j}]")
        for j, r in enumerate(non_resource_rules):
            errs += non_resource_rule_errors(_dict(r), f"{p}.nonResourceRules[{j}]")
    return errs


def queuing_errors(q: dict, path: str) -> Errs:
    errs: Errs = []
    queues, hand, limit = q.get("queues"), q.get("handSize"), q.get("queueLengthLimit")
    if isinstance(limit, int) and limit <= 0:
        errs.append(FieldError.invalid(f"{path}.queueLengthLimit", limit, "must be positive"))
    if isinstance(queues, int) and queues <= 0:
        errs.append(FieldError.invalid(f"{path}.queues", queues, "must be positive"))
    elif isinstance(queues, int) and isinstance(hand, int):
        if hand <= 0:
            errs.append(FieldError.invalid(f"{path}.handSize", hand, "must be positive"))
        elif hand > queues:
            errs.append(FieldError.invalid(f"{path}.handSize", hand, f"should not be greater than queues ({queues})"))
        elif math.ceil(hand * math.log2(queues)) > MAX_HASH_BITS:
            errs.append(
                FieldError.invalid(
                    f"{path}.handSize",
                    hand,
                    f"required entropy bits of deckSize {queues} and handSize {hand} "
                    f"should not be greater than {MAX_HASH_BITS}",
                )
            )
    return errs


def priority_level_spec_errors(spec: dict) -> Errs:
    errs: Errs = []
    typ = spec.get("type")
    limited = spec.get("limited")
    if typ == "Exempt":
        if limited is not None:
            errs.append(FieldError.forbidden("spec.limited", "must be nil if the type is not Limited"))
        return errs
    if typ != "Limited":
        return errs  # the enum check names the bad type
    if limited is None:
        return [FieldError.required("spec.limited", "must not be empty when type is Limited")]
    limited = _dict(limited)
    p = "spec.limited"
    shares = limited.get("nominalConcurrencyShares")
    if isinstance(shares, int) and shares <= 0:
        errs.append(FieldError.invalid(f"{p}.nominalConcurrencyShares", shares, "must be positive"))
    lendable = limited.get("lendablePercent")
    if isinstance(lendable, int) and not 0 <= lendable <= 100:
        errs.append(FieldError.invalid(f"{p}.lendablePercent", lendable, "must be between 0 and 100, inclusive"))
    borrowing = limited.get("borrowingLimitPercent")
    if isinstance(borrowing, int) and borrowing < 0:
        errs.append(
            FieldError.invalid(f"{p}.borrowingLimitPercent", borrowing, "if specified, must be a non-negative integer")
        )
    response = _dict(limited.get("limitResponse"))
    rtype = response.get("type")
    if not rtype:
        errs.append(FieldError.required(f"{p}.limitResponse.type"))
    elif rtype == "Queue":
        queuing = response.get("queuing")
        if queuing is None:
            errs.append(FieldError.required(f"{p}.limitResponse.queuing", "must not be empty if the type is Queue"))
        else:
            errs += queuing_errors(_dict(queuing), f"{p}.limitResponse.queuing")
    elif rtype == "Reject" and response.get("queuing") is not None:
        errs.append(FieldError.forbidden(f"{p}.limitResponse.queuing", "must be nil if the type is not Queue"))
    return errs


class FlowSchemaStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        return super().validate(obj) + flow_schema_spec_errors(_dict(obj.get("spec")))


class PriorityLevelConfigurationStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        return super().validate(obj) + priority_level_spec_errors(_dict(obj.get("spec")))
