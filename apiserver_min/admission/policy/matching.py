"""Whether a request matches a policy's ``matchConstraints`` or a binding's
``matchResources``: resource rules, excluded rules, the namespace and object label
selectors, and the match policy.

``matchPolicy: Equivalent`` (the default) also matches a request that a rule names as
an equivalent resource (another served version of its group, an alias group: see
``admission/equivalence.py``); the policy then sees the request's objects converted to
that version. ``Exact`` matches the request's own group, version and resource only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..chain import Attributes
from ..equivalence import Equivalence, Equivalent


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


def _rule_matches_as(
    rule: Mapping[str, Any], attrs: Attributes, group: str, version: str, resource: str, namespaced: bool
) -> bool:
    if not _listed(rule.get("operations"), attrs.operation):
        return False
    if not _listed(rule.get("apiGroups"), group):
        return False
    if not _resource_listed(rule.get("resources"), resource, attrs.subresource):
        return False
    if not _listed(rule.get("apiVersions"), version):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster" and namespaced:
        return False
    if scope == "Namespaced" and not namespaced:
        return False
    resource_names = rule.get("resourceNames")
    return not resource_names or attrs.name in resource_names


def rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """Whether the rule names the request's own group, version and resource."""
    kind = attrs.kind
    return _rule_matches_as(rule, attrs, kind.group, kind.version, kind.resource, kind.namespaced)


def rules_match(
    rules: list[dict], attrs: Attributes, equivalents: tuple[Equivalent, ...]
) -> tuple[bool, Equivalent | None]:
    """Whether a rule matches the request as it is, or else (rules in order, then the
    equivalents in order) as one of EQUIVALENTS: (matched, the equivalent or None)."""
    if any(rule_matches(r, attrs) for r in rules):
        return True, None
    namespaced = attrs.kind.namespaced
    for r in rules:
        for e in equivalents:
            if _rule_matches_as(r, attrs, e.group, e.version, e.resource, namespaced):
                return True, e
    return False, None


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

    def matches(
        self,
        attrs: Attributes,
        namespace_labels: Callable[[str], Mapping[str, str] | None],
        equivalence: Equivalence | None = None,
    ) -> bool:
        """Whether the request is one this selects (always, for no ``match`` at all)."""
        return self.match_as(attrs, namespace_labels, equivalence)[0]

    def match_as(
        self,
        attrs: Attributes,
        namespace_labels: Callable[[str], Mapping[str, str] | None],
        equivalence: Equivalence | None = None,
    ) -> tuple[bool, Equivalent | None]:
        """Whether the request is one this selects, and the equivalent resource its rules
        matched it as (None: as it is). ``namespace_labels(name)``: a namespace's labels
        (None: no such namespace); ``equivalence``: what ``matchPolicy: Equivalent``
        matches besides the request's own resource (None: nothing)."""
        if self.match is None:
            return True, None
        if self.namespace_selector is not None:
            kind = attrs.kind
            if kind.group == "" and kind.resource == "namespaces":
                if not _selects(self.namespace_selector, _labels(attrs.obj) or _labels(attrs.old)):
                    return False, None
            elif kind.namespaced and attrs.namespace:
                if not _selects(self.namespace_selector, namespace_labels(attrs.namespace) or {}):
                    return False, None
        if self.object_selector is not None:
            if not (
                _selects(self.object_selector, _labels(attrs.obj)) or _selects(self.object_selector, _labels(attrs.old))
            ):
                return False, None
        equivalents: tuple[Equivalent, ...] = ()
        if self.equivalent and equivalence is not None:
            k = attrs.kind
            equivalents = equivalence.of(k.group, k.version, k.resource, attrs.subresource)
        if self.excluded and rules_match(self.excluded, attrs, equivalents)[0]:
            return False, None
        if not self.rules:  # no resource rules: everything the selectors let through
            return True, None
        return rules_match(self.rules, attrs, equivalents)


def matches(
    match: Mapping[str, Any] | None, attrs: Attributes, namespace_labels: Callable[[str], Mapping[str, str] | None]
) -> bool:
    """Whether the request is one ``match`` selects (parsing it each time: ``Matcher``
    keeps it parsed)."""
    return Matcher(match).matches(attrs, namespace_labels)
