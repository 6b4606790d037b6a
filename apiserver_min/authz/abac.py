"""The ``ABAC`` authorization mode: ``--authorization-policy-file``.

The file holds one JSON policy per line; blank lines and lines starting with ``#``
are skipped. A policy is ``{"apiVersion": "abac.authorization.orch.io/v1beta1",
"kind": "Policy", "spec": {...}}`` with the spec fields ``user``, ``group``,
``readonly``, ``apiGroup``, ``resource``, ``namespace`` and ``nonResourcePath``; a
line without apiVersion and kind is upstream's unversioned form (flat ``user``,
``group``, ``readonly``, ``resource``, ``namespace``), read with upstream's meaning
(an empty user and group is every authenticated user, an empty namespace and
resource also every non-resource path, any API group). ``*`` in user or group is
every authenticated user; ``*`` elsewhere matches anything, and a ``nonResourcePath``
ending in ``*`` matches the paths starting with what precedes it.

A request is allowed when a policy names its user (or one of its groups) and
matches it; a ``readonly`` policy matches get, list and watch only. Nothing matched
is no opinion ("No policy matched."). A line that cannot be read stops the start,
naming the file and the line; so does a field this server does not know (upstream
ignores those, which would silently widen a typo's rule).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson

from ..api import names
from ..api.user import UserInfo
from .authorizer import AuthzAttributes, Decision, PolicyRule, RulesResult

log = logging.getLogger("orch-apiserver.authz.abac")

API_VERSION = f"{names.ABAC_GROUP}/v1beta1"
KIND = "Policy"
READ_ONLY_VERBS = ("get", "list", "watch")
_SPEC_FIELDS = {
    "user": str,
    "group": str,
    "readonly": bool,
    "apiGroup": str,
    "resource": str,
    "namespace": str,
    "nonResourcePath": str,
}
_LEGACY_FIELDS = {"user": str, "group": str, "readonly": bool, "resource": str, "namespace": str}


class PolicyFileError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Policy:
    user: str = ""
    group: str = ""
    readonly: bool = False
    api_group: str = ""
    resource: str = ""
    namespace: str = ""
    non_resource_path: str = ""

    def subject_matches(self, user: UserInfo) -> bool:
        matched = False
        if self.user:
            if self.user != "*" and self.user != user.name:
                return False
            matched = True
        if self.group:
            if self.group != "*" and self.group not in user.groups:
                return False
            matched = True
        return matched

    def matches(self, attrs: AuthzAttributes) -> bool:
        if not self.subject_matches(attrs.user):
            return False
        if self.readonly and attrs.verb not in READ_ONLY_VERBS:
            return False
        if attrs.resource_request:
            return (
                self.namespace in ("*", attrs.namespace)
                and self.resource in ("*", attrs.resource)
                and self.api_group in ("*", attrs.api_group)
            )
        path = self.non_resource_path
        return path == "*" or path == attrs.path or (path.endswith("*") and attrs.path.startswith(path.rstrip("*")))


def _fields(obj: dict, allowed: dict[str, type], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        kind = allowed.get(key)
        if kind is None:
            raise ValueError(f"unknown field {where}{key!r} (known: {', '.join(allowed)})")
        if value is None:
            continue
        if not isinstance(value, kind):
            raise ValueError(f"{where}{key} must be a {'boolean' if kind is bool else 'string'}")
        out[key] = value
    return out


def parse_policy(doc: Any) -> Policy:
    """One line's policy in its meaning (the unversioned form converted); ValueError."""
    if not isinstance(doc, dict):
        raise ValueError("a policy must be a JSON object")
    if "apiVersion" not in doc and "kind" not in doc:
        f = _fields(doc, _LEGACY_FIELDS, "")
        user, group = f.get("user", ""), f.get("group", "")
        namespace, resource = f.get("namespace", ""), f.get("resource", "")
        if not user and not group:
            group = names.GROUP_AUTHENTICATED
        if user == "*" or group == "*":
            user, group = "", names.GROUP_AUTHENTICATED
        return Policy(
            user,
            group,
            f.get("readonly", False),
            "*",
            resource or "*",
            namespace or "*",
            "*" if not namespace and not resource else "",
        )
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ValueError(
            f"apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r} is not a policy: "
            f"use apiVersion {API_VERSION!r} and kind {KIND!r}"
        )
    _fields({k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}, {"spec": dict}, "")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise ValueError("spec must be an object")
    f = _fields(spec, _SPEC_FIELDS, "spec.")
    user, group = f.get("user", ""), f.get("group", "")
    if user == "*" or group == "*":
        user, group = "", names.GROUP_AUTHENTICATED
    return Policy(
        user,
        group,
        f.get("readonly", False),
        f.get("apiGroup", ""),
        f.get("resource", ""),
        f.get("namespace", ""),
        f.get("nonResourcePath", ""),
    )


def parse_policy_lines(data: bytes, path: str) -> list[Policy]:
    policies: list[Policy] = []
    unversioned = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            doc = orjson.loads(line)
            policy = parse_policy(doc)
        except (orjson.JSONDecodeError, ValueError) as exc:
            text = line.decode("utf-8", "replace")
            raise PolicyFileError(f"error reading policy file {path}, line {number}: {text}: {exc}") from None
        if isinstance(doc, dict) and "apiVersion" not in doc:
            unversioned += 1
        policies.append(policy)
    if unversioned:
        log.warning("policy file %s contains %d unversioned rules (the legacy form)", path, unversioned)
    return policies


def load_policy_file(path: str) -> list[Policy]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PolicyFileError(f"error reading policy file {path}: {exc.strerror or exc}") from None
    return parse_policy_lines(data, path)


class AbacAuthorizer:
    """Allows what a policy of the file allows (see the module doc)."""

    name = "ABAC"

    def __init__(self, policies: list[Policy]):
        self.policies = policies

    @classmethod
    def from_file(cls, path: str) -> "AbacAuthorizer":
        return cls(load_policy_file(path))

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        for p in self.policies:
            if p.matches(attrs):
                return Decision.ALLOW, ""
        return Decision.NO_OPINION, "No policy matched."

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        out = RulesResult()
        for p in self.policies:
            if not p.subject_matches(user) or p.namespace not in ("*", namespace):
                continue
            verbs = READ_ONLY_VERBS if p.readonly else ("*",)
            if p.resource:
                out.resource_rules.append(PolicyRule(verbs=verbs, api_groups=(p.api_group,), resources=(p.resource,)))
            if p.non_resource_path:
                out.non_resource_rules.append(PolicyRule(verbs=verbs, non_resource_urls=(p.non_resource_path,)))
        return out
