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
from ...api.selectors import LabelSelector, SelectorError, label_selector_from_dict
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


def _selector(selector: Any) -> LabelSelector | None:
    """The parsed selector; None for an empty one (matches everything); one that
    matches nothing for a selector that does not parse (validation refuses those)."""
    if not selector:
        return None
    try:
        return label_selector_from_dict(selector)
    except SelectorError:
        return LabelSelector.nothing()


def _selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is None or selector.matches(labels)


class Matcher:
    """A ``matchConstraints``/``matchResources`` with its selectors parsed once."""

    def __init__(self, match: Any):
        self.match = match if isinstance(match, dict) else None
        match = self.match or {}
        self.equivalent = (match.get("matchPolicy") or "Equivalent") == "Equivalent"
        self.rules = [r for r in match.get("resourceRules") or [] if isinstance(r, dict)]
        self.excluded = [r for r in match.get("excludeResourceRules") or [] if isinstance(r, dict)]
        self.namespace_selector = _selector(match.get("namespaceSelector"))
        self.object_selector = _selector(match.get("objectSelector"))

    def matches(self, attrs: Attributes, namespace_labels: Callable[[str], Mapping[str, str] | None]) -> bool:
        """Whether the request is one this selects (always, for no ``match`` at all).
        ``namespace_labels(name)``: a namespace's labels (None: no such namespace)."""
        if self.match is None:
            return True
        if not any(rule_matches(r, attrs, self.equivalent) for r in self.rules):
            return False
        if any(rule_matches(r, attrs, self.equivalent) for r in self.excluded):
            return False
        if self.namespace_selector is not None:
            kind = attrs.kind
            if kind.group == "" and kind.resource == "namespaces":
                if not _selects(self.namespace_selector, _labels(attrs.obj) or _labels(attrs.old)):
                    return False
            elif kind.namespaced and attrs.namespace:
                if not _selects(self.namespace_selector, namespace_labels(attrs.namespace) or {}):
                    return False
        if self.object_selector is not None:
            if not (
                _selects(self.object_selector, _labels(attrs.obj)) or _selects(self.object_selector, _labels(attrs.old))
            ):
                return False
        return True


def matches(
    match: Mapping[str, Any] | None, attrs: Attributes, namespace_labels: Callable[[str], Mapping[str, str] | None]
) -> bool:
    """Whether the request is one ``match`` selects (parsing it each time: ``Matcher``
    keeps it parsed)."""
    return Matcher(match).matches(attrs, namespace_labels)
