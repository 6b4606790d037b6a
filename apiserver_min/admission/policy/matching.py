"""Whether a request matches a policy's ``matchConstraints`` or a binding's
``matchResources``: resource rules, excluded rules, the namespace and object label
selectors, and the match policy.

``matchPolicy: Equivalent`` (the default) matches a request whose version a rule does
not list when the rule names the request's group and resource: each resource is served
here at one version, and upstream treats the same resource at another version as the
equivalent request. ``Exact`` matches the listed versions only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...api import names
from ...api.selectors import SelectorError, label_selector_from_dict
from ..chain import Attributes


def _listed(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


def _resource_listed(resources: Any, resource: str, subresource: str) -> bool:
    if not isinstance(resources, list):
        return False
    for r in resources:
        if not isinstance(r, str):
            continue
        res, _, sub = r.partition("/")
        if r == "*/*":
            return True
        if not sub:
            if not subresource and res in ("*", resource):
                return True
        elif res in ("*", resource) and sub in ("*", subresource) and subresource:
            return True
    return False


def rule_matches(rule: Mapping[str, Any], attrs: Attributes, equivalent: bool) -> bool:
    kind = attrs.kind
    if not _listed(rule.get("operations"), attrs.operation):
        return False
    groups = [names.GROUP_ALIASES.get(g, g) for g in rule.get("apiGroups") or [] if isinstance(g, str)]
    if not _listed(groups, kind.group):
        return False
    if not _resource_listed(rule.get("resources"), kind.resource, attrs.subresource):
        return False
    versions = rule.get("apiVersions")
    if not _listed(versions, kind.version) and not (equivalent and versions):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster" and kind.namespaced:
        return False
    if scope == "Namespaced" and not kind.namespaced:
        return False
    resource_names = rule.get("resourceNames")
    return not resource_names or attrs.name in resource_names


def _labels(obj: Any) -> dict:
    if not isinstance(obj, dict):
        return {}
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    try:
        return label_selector_from_dict(selector).matches(labels)
    except SelectorError:
        return False


def matches(
    match: Mapping[str, Any] | None, attrs: Attributes, namespace_labels: Callable[[str], Mapping[str, str] | None]
) -> bool:
    """Whether the request is one ``match`` selects. ``namespace_labels(name)``: the
    labels of a namespace (None when there is no such namespace)."""
    if not isinstance(match, dict):
        return True
    equivalent = (match.get("matchPolicy") or "Equivalent") == "Equivalent"
    rules = match.get("resourceRules") or []
    if not any(isinstance(r, dict) and rule_matches(r, attrs, equivalent) for r in rules):
        return False
    for r in match.get("excludeResourceRules") or []:
        if isinstance(r, dict) and rule_matches(r, attrs, equivalent):
            return False
    ns_selector = match.get("namespaceSelector")
    if ns_selector:
        kind = attrs.kind
        if kind.group == "" and kind.resource == "namespaces":
            if not _selector_matches(ns_selector, _labels(attrs.obj) or _labels(attrs.old)):
                return False
        elif kind.namespaced and attrs.namespace:
            labels = namespace_labels(attrs.namespace)
            if not _selector_matches(ns_selector, labels or {}):
                return False
    obj_selector = match.get("objectSelector")
    if obj_selector:
        if not (
            _selector_matches(obj_selector, _labels(attrs.obj)) or _selector_matches(obj_selector, _labels(attrs.old))
        ):
            return False
    return True
