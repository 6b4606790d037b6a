"""Which FlowSchema a request matches, and its flow: the FlowSchemas compiled once per
configuration into sets, so that matching a request is a few set look-ups, and the
answer for a (user, groups, verb, resource, namespace) cached until the next change.

Matching as upstream: schemas in order of ``matchingPrecedence`` (then name); the first
schema with a rule whose subjects name the user (by user name, group or service
account) and whose resource or non-resource rules cover the request wins. The flow is
the schema plus the distinguisher: the user's name (``ByUser``), the namespace
(``ByNamespace``) or nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...api import names
from ...api.user import UserInfo, split_service_account

_ALL = "*"
_CACHE_LIMIT = 8192


def _names(values: Any) -> frozenset[str] | None:
    """None for the wildcard (everything), else the listed strings."""
    vals = [str(v) for v in values] if isinstance(values, list) else []
    return None if _ALL in vals else frozenset(vals)


@dataclasses.dataclass(slots=True)
class ResourceRule:
    verbs: frozenset[str] | None
    groups: frozenset[str] | None
    resources: frozenset[str] | None
    cluster_scope: bool
    namespaces: frozenset[str] | None  # None: every namespace

    def matches(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        if self.verbs is not None and verb not in self.verbs:
            return False
        if self.groups is not None and group not in self.groups:
            return False
        if self.resources is not None and resource not in self.resources:
            return False
        if not namespace:
            return self.cluster_scope
        return self.namespaces is None or namespace in self.namespaces


@dataclasses.dataclass(slots=True)
class NonResourceRule:
    verbs: frozenset[str] | None
    urls: frozenset[str] | None  # None: every path
    prefixes: tuple[str, ...]  # from "/path/*"

    def matches(self, verb: str, path: str) -> bool:
        if self.verbs is not None and verb not in self.verbs:
            return False
        if self.urls is None or path in self.urls:
            return True
        return any(path.startswith(p) or path == p[:-1] for p in self.prefixes)


@dataclasses.dataclass(slots=True)
class Rule:
    all_users: bool
    users: frozenset[str]
    groups: frozenset[str]  # "*" included means every group
    accounts: frozenset[tuple[str, str]]  # (namespace, name); name "*": every account of the namespace
    resource_rules: tuple[ResourceRule, ...]
    non_resource_rules: tuple[NonResourceRule, ...]

    def subject_matches(self, user: str, groups: tuple[str, ...], account: tuple[str, str] | None) -> bool:
        if self.all_users or user in self.users:
            return True
        if self.groups and (_ALL in self.groups or any(g in self.groups for g in groups)):
            return True
        if account is not None and self.accounts:
            return account in self.accounts or (account[0], _ALL) in self.accounts
        return False


@dataclasses.dataclass(slots=True)
class Schema:
    name: str
    uid: str
    precedence: int
    level: str
    distinguisher: str  # "ByUser" | "ByNamespace" | ""
    rules: tuple[Rule, ...]


def compile_schema(obj: dict) -> Schema:
    md, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    rules = []
    for r in spec.get("rules") or []:
        users, groups, accounts, all_users = set(), set(), set(), False
        for s in r.get("subjects") or []:
            kind = s.get("kind")
            if kind == "User":
                n = (s.get("user") or {}).get("name", "")
                all_users |= n == _ALL
                users.add(n)
            elif kind == "Group":
                groups.add((s.get("group") or {}).get("name", ""))
            elif kind == "ServiceAccount":
                sa = s.get("serviceAccount") or {}
                accounts.add((sa.get("namespace", ""), sa.get("name", "")))
        resource_rules = tuple(
            ResourceRule(
                _names(rr.get("verbs")),
                _names(rr.get("apiGroups")),
                _names(rr.get("resources")),
                bool(rr.get("clusterScope")),
                _names(rr.get("namespaces") or []),
            )
            for rr in r.get("resourceRules") or []
        )
        non_resource_rules = []
        for nr in r.get("nonResourceRules") or []:
            urls = _names(nr.get("nonResourceURLs"))
            prefixes = tuple(u[:-1] for u in (urls or ()) if u.endswith("/*"))
            non_resource_rules.append(NonResourceRule(_names(nr.get("verbs")), urls, prefixes))
        rules.append(
            Rule(
                all_users,
                frozenset(users),
                frozenset(groups),
                frozenset(accounts),
                resource_rules,
                tuple(non_resource_rules),
            )
        )
    return Schema(
        name=str(md.get("name", "")),
        uid=str(md.get("uid", "")),
        precedence=int(spec.get("matchingPrecedence") or 1000),
        level=str((spec.get("priorityLevelConfiguration") or {}).get("name", "")),
        distinguisher=str((spec.get("distinguisherMethod") or {}).get("type", "")),
        rules=tuple(rules),
    )


ANONYMOUS = UserInfo(names.USER_ANONYMOUS, groups=(names.GROUP_UNAUTHENTICATED,))


class Classifier:
    """The compiled schemas (only those whose priority level exists), in matching order."""

    def __init__(self, schemas: list[Schema]):
        self.schemas = sorted(schemas, key=lambda s: (s.precedence, s.name))
        self._cache: dict[tuple, Schema | None] = {}

    def classify(
        self,
        user: UserInfo | None,
        is_resource: bool,
        verb: str,
        group: str,
        resource: str,
        namespace: str,
        path: str,
    ) -> tuple[Schema | None, str]:
        """The matching schema (None when nothing matches) and the flow distinguisher."""
        u = user or ANONYMOUS
        key = (u.name, u.groups, is_resource, verb, group, resource, namespace, "" if is_resource else path)
        cache = self._cache
        try:
            schema = cache[key]
        except KeyError:
            schema = self._match(u, is_resource, verb, group, resource, namespace, path)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = schema
        if schema is None:
            return None, ""
        d = schema.distinguisher
        return schema, (u.name if d == "ByUser" else namespace if d == "ByNamespace" else "")

    def _match(
        self, u: UserInfo, is_resource: bool, verb: str, group: str, resource: str, namespace: str, path: str
    ) -> Schema | None:
        account = split_service_account(u.name)
        for schema in self.schemas:
            for rule in schema.rules:
                if not rule.subject_matches(u.name, u.groups, account):
                    continue
                if is_resource:
                    if any(rr.matches(verb, group, resource, namespace) for rr in rule.resource_rules):
                        return schema
                elif any(nr.matches(verb, path) for nr in rule.non_resource_rules):
                    return schema
        return None
