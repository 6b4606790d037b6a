"""The audit ``Policy`` file (``--audit-policy-file``) and its rule matching.

Rules are tried in order; the first whose every given criterion matches decides the
level of the request (and the stages left out). A request no rule matches is not
recorded (level None).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..api import codec, names

LEVELS = ("None", "Metadata", "Request", "RequestResponse")
STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")


class PolicyError(ValueError):
    pass


def level_at_least(level: str, floor: str) -> bool:
    return LEVELS.index(level) >= LEVELS.index(floor)


@dataclasses.dataclass(frozen=True)
class GroupResources:
    group: str
    resources: tuple[str, ...]  # empty: every resource of the group
    resource_names: tuple[str, ...]  # empty: every name

    def matches(self, group: str, resource: str, subresource: str, name: str) -> bool:
        if group != self.group:
            return False
        if self.resources:
            full = f"{resource}/{subresource}" if subresource else resource
            if not any(_resource_matches(r, resource, subresource, full) for r in self.resources):
                return False
        return not self.resource_names or name in self.resource_names


def _resource_matches(pattern: str, resource: str, subresource: str, full: str) -> bool:
    if pattern in ("*", full):
        return True
    if pattern == "*/*":
        return bool(subresource)
    if pattern.endswith("/*"):  # "pods/*": every sub-resource of pods
        return bool(subresource) and pattern[:-2] == resource
    if pattern.startswith("*/"):  # "*/status": that sub-resource of every resource
        return subresource == pattern[2:]
    return False


@dataclasses.dataclass(frozen=True)
class Rule:
    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResources, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: tuple[str, ...] = ()
    omit_managed_fields: bool | None = None


@dataclasses.dataclass(frozen=True)
class RequestFacts:
    """What the policy looks at in one request."""

    user: str
    groups: tuple[str, ...]
    verb: str
    is_resource: bool
    path: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Decision:
    level: str
    omit_stages: frozenset[str]
    omit_managed_fields: bool


NOT_RECORDED = Decision("None", frozenset(), False)


def _url_matches(pattern: str, path: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern


def _rule_matches(rule: Rule, r: RequestFacts) -> bool:
    if rule.users and r.user not in rule.users:
        return False
    if rule.user_groups and not any(g in rule.user_groups for g in r.groups):
        return False
    if rule.verbs and r.verb not in rule.verbs:
        return False
    if rule.resources or rule.namespaces:
        if not r.is_resource:
            return False
        if rule.namespaces and r.namespace not in rule.namespaces:
            return False  # "" in namespaces matches cluster-scoped requests
        if rule.resources and not any(gr.matches(r.group, r.resource, r.subresource, r.name) for gr in rule.resources):
            return False
    if rule.non_resource_urls:
        if r.is_resource or not any(_url_matches(p, r.path) for p in rule.non_resource_urls):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    omit_stages: tuple[str, ...] = ()
    omit_managed_fields: bool = False

    def decide(self, r: RequestFacts) -> Decision:
        for rule in self.rules:
            if _rule_matches(rule, r):
                if rule.level == "None":
                    return NOT_RECORDED
                omf = self.omit_managed_fields if rule.omit_managed_fields is None else rule.omit_managed_fields
                return Decision(rule.level, frozenset(self.omit_stages) | frozenset(rule.omit_stages), omf)
        return NOT_RECORDED


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{where}: must be a list of strings")
    return tuple(value)


def _stages(where: str, value: Any) -> tuple[str, ...]:
    stages = _strings(where, value)
    for s in stages:
        if s not in STAGES:
            raise PolicyError(f"{where}: unknown stage {s!r} (known: {', '.join(STAGES)})")
    return stages


def _bool(where: str, value: Any) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise PolicyError(f"{where}: must be true or false")
    return value


def _rule(i: int, raw: Any) -> Rule:
    where = f"rules[{i}]"
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: must be an object")
    known = {
        "level",
        "users",
        "userGroups",
        "verbs",
        "resources",
        "namespaces",
        "nonResourceURLs",
        "omitStages",
        "omitManagedFields",
    }
    for key in raw:
        if key not in known:
            raise PolicyError(f"{where}: unknown field {key!r}")
    level = raw.get("level")
    if level not in LEVELS:
        raise PolicyError(f"{where}.level: must be one of {', '.join(LEVELS)}, not {level!r}")
    resources = []
    for j, gr in enumerate(raw.get("resources") or []):
        w = f"{where}.resources[{j}]"
        if not isinstance(gr, dict):
            raise PolicyError(f"{w}: must be an object")
        group = gr.get("group", "")
        if not isinstance(group, str):
            raise PolicyError(f"{w}.group: must be a string")
        res = _strings(f"{w}.resources", gr.get("resources"))
        for r in res:
            if r not in ("*", "*/*") and r.count("/") > 1:
                raise PolicyError(f"{w}.resources: {r!r} is not a resource or resource/subresource")
        rnames = _strings(f"{w}.resourceNames", gr.get("resourceNames"))
        if rnames and any("/" in r or "*" in r for r in res):
            raise PolicyError(f"{w}.resourceNames: not allowed with sub-resources or wildcards in resources")
        resources.append(GroupResources(group, res, rnames))
    urls = _strings(f"{where}.nonResourceURLs", raw.get("nonResourceURLs"))
    namespaces = _strings(f"{where}.namespaces", raw.get("namespaces"))
    if urls and (resources or namespaces):
        raise PolicyError(f"{where}: nonResourceURLs may not be given with resources or namespaces")
    for u in urls:
        if not u.startswith("/") and u != "*":
            raise PolicyError(f"{where}.nonResourceURLs: {u!r} must begin with '/'")
        if "*" in u[:-1]:
            raise PolicyError(f"{where}.nonResourceURLs: {u!r} may hold '*' only at its end")
    return Rule(
        level=level,
        users=_strings(f"{where}.users", raw.get("users")),
        user_groups=_strings(f"{where}.userGroups", raw.get("userGroups")),
        verbs=_strings(f"{where}.verbs", raw.get("verbs")),
        resources=tuple(resources),
        namespaces=namespaces,
        non_resource_urls=urls,
        omit_stages=_stages(f"{where}.omitStages", raw.get("omitStages")),
        omit_managed_fields=_bool(f"{where}.omitManagedFields", raw.get("omitManagedFields")),
    )


def parse_policy(doc: Any) -> Policy:
    if not isinstance(doc, dict):
        raise PolicyError("the file does not hold an object")
    if doc.get("apiVersion") != names.AUDIT_API_VERSION or doc.get("kind") != "Policy":
        raise PolicyError(
            f"expected apiVersion {names.AUDIT_API_VERSION} and kind Policy, "
            f"got {doc.get('apiVersion')!r} and {doc.get('kind')!r}"
        )
    raw_rules = doc.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise PolicyError("rules: at least one rule is required")
    return Policy(
        rules=tuple(_rule(i, r) for i, r in enumerate(raw_rules)),
        omit_stages=_stages("omitStages", doc.get("omitStages")),
        omit_managed_fields=bool(_bool("omitManagedFields", doc.get("omitManagedFields"))),
    )


def load_policy(path: str) -> Policy:
    """The policy in ``path`` (YAML or JSON); any problem is a PolicyError naming the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise PolicyError(f"{path}: {exc.strerror or exc}") from None
    try:
        doc = codec.load_yaml(raw)  # JSON is YAML
    except Exception as exc:  # noqa: BLE001 - any parse failure is the file's fault, reported with its name
        raise PolicyError(f"{path}: not YAML or JSON: {exc}") from None
    try:
        return parse_policy(doc)
    except PolicyError as exc:
        raise PolicyError(f"{os.path.abspath(path)}: {exc}") from None
