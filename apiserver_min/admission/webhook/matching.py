"""Which webhooks a request matches: the rules (operations, groups, versions,
resources with sub-resources, scope), the namespace selector and the object
selector, with upstream's semantics."""

from __future__ import annotations

from typing import Any, Mapping

from ...api import names
from ...api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..chain import Attributes

# Requests for these are never sent to webhooks: a broken webhook could otherwise
# lock every one out of repairing the configuration (upstream's exemption).
EXEMPT_RESOURCES = frozenset(
    {
        (names.ADMISSIONREGISTRATION_GROUP, "validatingwebhookconfigurations"),
        (names.ADMISSIONREGISTRATION_GROUP, "mutatingwebhookconfigurations"),
        (names.ADMISSIONREGISTRATION_GROUP, "validatingadmissionpolicies"),
        (names.ADMISSIONREGISTRATION_GROUP, "validatingadmissionpolicybindings"),
    }
)


def _listed(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


def _resource_matches(patterns: Any, resource: str, subresource: str) -> bool:
    """``*`` every resource (not sub-resources), ``*/*`` everything, ``pods/*`` every
    sub-resource of pods, ``*/status`` every status, ``pods/status`` just that."""
    if not isinstance(patterns, list):
        return False
    for p in patterns:
        if not isinstance(p, str):
            continue
        res, _, sub = p.partition("/")
        if res != "*" and res != resource:
            continue
        if "/" not in p:
            if not subresource:
                return True
            continue
        if sub == "*" or sub == subresource:
            return True
    return False


def _scope_matches(scope: Any, namespaced: bool, resource: str, group: str) -> bool:
    if scope in (None, "*"):
        return True
    # A namespace is a cluster-scoped object (upstream's rule).
    cluster_scoped = not namespaced or (group == "" and resource == "namespaces")
    if scope == "Cluster":
        return cluster_scoped
    if scope == "Namespaced":
        return not cluster_scoped
    return False


def rule_matches(
    rule: Mapping, operation: str, group: str, version: str, resource: str, sub: str, namespaced: bool
) -> bool:
    return (
        _listed(rule.get("operations"), operation)
        and _listed(rule.get("apiGroups"), group)
        and _listed(rule.get("apiVersions"), version)
        and _resource_matches(rule.get("resources"), resource, sub)
        and _scope_matches(rule.get("scope"), namespaced, resource, group)
    )


def rules_match_shape(
    hook: Mapping, operation: str, group: str, version: str, resource: str, sub: str, namespaced: bool
) -> bool:
    rules = hook.get("rules")
    if not isinstance(rules, list):
        return False
    return any(
        isinstance(r, dict) and rule_matches(r, operation, group, version, resource, sub, namespaced) for r in rules
    )


def request_shape(attrs: Attributes) -> tuple:
    """What rules look at in a request."""
    k = attrs.kind
    return (attrs.operation, k.group, k.version, k.resource, attrs.subresource, k.namespaced)


def parse_selector(d: Any) -> LabelSelector:
    """A webhook's selector; absent means everything (the defaulted ``{}``)."""
    if d is None:
        return LabelSelector.everything()
    try:
        return label_selector_from_dict(d)
    except SelectorError:
        return LabelSelector.nothing()


def _labels_of(obj: Any) -> dict | None:
    if not isinstance(obj, dict):
        return None
    md = obj.get("metadata")
    if not isinstance(md, dict):
        return None
    labels = md.get("labels")
    return labels if isinstance(labels, dict) else {}


def object_selector_matches(selector: LabelSelector, attrs: Attributes) -> bool:
    """The new or the old object's labels match (either suffices, as upstream)."""
    if selector.empty:
        return True
    for obj in (attrs.obj, attrs.old):
        labels = _labels_of(obj)
        if labels is not None and selector.matches(labels):
            return True
    return False


def is_namespace_request(attrs: Attributes) -> bool:
    return attrs.kind.group == "" and attrs.kind.resource == "namespaces"


def namespace_labels_from_request(attrs: Attributes) -> dict | None:
    """For a namespace's own create or update, its labels come from the request's object
    (the cache has not seen it yet); None when they must be looked up."""
    if is_namespace_request(attrs) and not attrs.subresource and attrs.operation in ("CREATE", "UPDATE"):
        return _labels_of(attrs.obj) or {}
    return None
