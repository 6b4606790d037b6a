"""Role-based access control: rules, the binding index, the authorizer, and the
checks every role and binding write passes (shape, escalate, bind).

Roles and bindings are read from the watch cache, never from storage per
request. Bindings are indexed by subject (user, group, service account), so a
decision looks only at the bindings that name the requester. The index is kept
up to date from the cache's change events and rebuilt after every relist.

Escalation protection (upstream's rules): writing a Role or ClusterRole needs
either the ``escalate`` verb on it or every permission it grants; writing a
binding needs either the ``bind`` verb on the referenced role or every
permission that role grants, in the binding's namespace. ``system:masters``
members skip both.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Iterable, Iterator

import orjson

from ..admission.chain import Attributes
from ..api import names
from ..api import status as st
from ..api.helpers import list_at
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..api.user import UserInfo
from ..api.validation import FieldError, causes
from ..storage.keys import key_prefix
from .authorizer import AuthzAttributes, Decision, PolicyRule, RulesResult, Union

log = logging.getLogger("orch-apiserver.rbac")

VERB_ALL = "*"
GROUP_ALL = "*"
RESOURCE_ALL = "*"
URL_ALL = "*"


def go_list(values: Iterable[str]) -> str:
    """Go's ``%q`` of a string slice: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def rules_from(obj: dict) -> tuple[PolicyRule, ...]:
    rules = obj.get("rules")
    if not isinstance(rules, list):
        return ()
    return tuple(PolicyRule.from_dict(r) for r in rules)


# --- matching (upstream rbac.RuleAllows) --------------------------------------------------


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return VERB_ALL in rule.verbs or verb in rule.verbs


def group_matches(rule: PolicyRule, group: str) -> bool:
    return GROUP_ALL in rule.api_groups or group in rule.api_groups


def resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    for r in rule.resources:
        if r == RESOURCE_ALL or r == combined:
            return True
        if subresource and len(r) == len(subresource) + 2 and r.startswith("*/") and r.endswith(subresource):
            return True
    return False


def name_matches(rule: PolicyRule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def url_matches(rule: PolicyRule, path: str) -> bool:
    for u in rule.non_resource_urls:
        if u == URL_ALL or u == path:
            return True
        if u.endswith("*") and path.startswith(u[:-1]):
            return True
    return False


def rule_allows(attrs: AuthzAttributes, rule: PolicyRule) -> bool:
    if attrs.resource_request:
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        return (
            verb_matches(rule, attrs.verb)
            and group_matches(rule, attrs.api_group)
            and resource_matches(rule, combined, attrs.subresource)
            and name_matches(rule, attrs.name)
        )
    return verb_matches(rule, attrs.verb) and url_matches(rule, attrs.path)


def rules_allow(attrs: AuthzAttributes, rules: Iterable[PolicyRule]) -> bool:
    return any(rule_allows(attrs, r) for r in rules)


# --- coverage (upstream validation.Covers), for escalation checks ------------------------


def _breakdown(rule: PolicyRule) -> Iterator[PolicyRule]:
    """A rule as single-verb, single-resource (single-name) atoms."""
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    for n in rule.resource_names:
                        yield PolicyRule((verb,), (group,), (resource,), (n,))
                else:
                    yield PolicyRule((verb,), (group,), (resource,))
    for url in rule.non_resource_urls:
        for verb in rule.verbs:
            yield PolicyRule((verb,), non_resource_urls=(url,))


def _resources_cover(owner: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    if RESOURCE_ALL in owner:
        return True
    for r in wanted:
        if r in owner:
            continue
        if "/" not in r:
            return False
        if "*/" + r.split("/", 1)[1] not in owner:
            return False
    return True


def _urls_cover(owner: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    for w in wanted:
        if not any(o == w or o == URL_ALL or (o.endswith("*") and w.startswith(o[:-1])) for o in owner):
            return False
    return True


def rule_covers(owner: PolicyRule, servant: PolicyRule) -> bool:
    verbs_ok = VERB_ALL in owner.verbs or all(v in owner.verbs for v in servant.verbs)
    groups_ok = GROUP_ALL in owner.api_groups or all(g in owner.api_groups for g in servant.api_groups)
    names_ok = not owner.resource_names or (
        bool(servant.resource_names) and all(n in owner.resource_names for n in servant.resource_names)
    )
    return (
        verbs_ok
        and groups_ok
        and _resources_cover(owner.resources, servant.resources)
        and _urls_cover(owner.non_resource_urls, servant.non_resource_urls)
        and names_ok
    )


def uncovered(owner: Iterable[PolicyRule], servant: Iterable[PolicyRule]) -> list[PolicyRule]:
    """Atoms of ``servant`` that no ``owner`` rule covers (empty: fully covered)."""
    owner = list(owner)
    missing = []
    for rule in servant:
        for atom in _breakdown(rule):
            if not any(rule_covers(o, atom) for o in owner):
                missing.append(atom)
    return missing


def compact(rules: list[PolicyRule]) -> list[PolicyRule]:
    """Atoms differing only in verb merged into one rule, for a readable error."""
    merged: dict[tuple, list[str]] = {}
    for r in rules:
        key = (r.api_groups, r.resources, r.resource_names, r.non_resource_urls)
        verbs = merged.setdefault(key, [])
        for v in r.verbs:
            if v not in verbs:
                verbs.append(v)
    return [PolicyRule(tuple(v), k[0], k[1], k[2], k[3]) for k, v in merged.items()]


FULL_AUTHORITY = (PolicyRule(("*",), ("*",), ("*",)), PolicyRule(("*",), non_resource_urls=("*",)))


# --- the index ----------------------------------------------------------------------------

SubjectKey = tuple


def subject_key(subject: dict, binding_namespace: str) -> SubjectKey | None:
    kind, name = subject.get("kind"), subject.get("name")
    if not isinstance(name, str) or not name:
        return None
    if kind == "User":
        return ("User", name)
    if kind == "Group":
        return ("Group", name)
    if kind == "ServiceAccount":
        return ("ServiceAccount", subject.get("namespace") or binding_namespace, name)
    return None


def user_keys(user: UserInfo) -> list[SubjectKey]:
    keys: list[SubjectKey] = [("User", user.name)]
    keys += [("Group", g) for g in user.groups]
    if user.name.startswith(names.SERVICEACCOUNT_USER_PREFIX):
        parts = user.name[len(names.SERVICEACCOUNT_USER_PREFIX) :].split(":")
        if len(parts) == 2 and all(parts):
            keys.append(("ServiceAccount", parts[0], parts[1]))
    return keys


def describe_subject(key: SubjectKey) -> str:
    if key[0] == "ServiceAccount":
        return f'ServiceAccount "{key[1]}/{key[2]}"'
    return f'{key[0]} "{key[1]}"'


@dataclasses.dataclass
class Binding:
    namespace: str  # "" for a ClusterRoleBinding
    name: str
    role_kind: str
    role_name: str
    subjects: tuple[SubjectKey, ...]

    def describe(self, key: SubjectKey) -> str:
        if self.namespace:
            return (
                f'RoleBinding "{self.name}/{self.namespace}" of {self.role_kind} "{self.role_name}" '
                f"to {describe_subject(key)}"
            )
        return f'ClusterRoleBinding "{self.name}" of {self.role_kind} "{self.role_name}" to {describe_subject(key)}'


@dataclasses.dataclass
class ClusterRole:
    name: str
    rules: tuple[PolicyRule, ...]
    labels: dict
    selectors: tuple[LabelSelector, ...] | None  # aggregationRule.clusterRoleSelectors, None when absent
    rules_raw: list


def parse_binding(obj: dict, namespace: str) -> Binding:
    md = obj.get("metadata") or {}
    ref = obj.get("roleRef") or {}
    keys = []
    for s in obj.get("subjects") or []:
        if isinstance(s, dict):
            k = subject_key(s, namespace)
            if k is not None:
                keys.append(k)
    return Binding(
        namespace,
        md.get("name", ""),
        str(ref.get("kind") or ""),
        str(ref.get("name") or ""),
        tuple(dict.fromkeys(keys)),
    )


def parse_cluster_role(obj: dict) -> ClusterRole:
    md = obj.get("metadata") or {}
    selectors = None
    agg = obj.get("aggregationRule")
    if isinstance(agg, dict):
        parsed = []
        for i, sel in enumerate(agg.get("clusterRoleSelectors") or []):
            try:
                parsed.append(label_selector_from_dict(sel, f"aggregationRule.clusterRoleSelectors[{i}]"))
            except (SelectorError, AttributeError, TypeError):
                continue
        selectors = tuple(parsed)
    raw = list_at(obj, "rules")
    return ClusterRole(md.get("name", ""), rules_from(obj), dict(md.get("labels") or {}), selectors, raw)


class RbacIndex:
    """Roles and bindings from the watch cache, with bindings indexed by subject."""

    def __init__(self, prefixes: dict[str, str]):
        # resource name (roles, clusterroles, rolebindings, clusterrolebindings) -> cache prefix
        self.prefixes = prefixes
        self._by_prefix = {p: r for r, p in prefixes.items()}
        self.cluster_roles: dict[str, ClusterRole] = {}
        self.roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self.cluster_bindings: dict[str, Binding] = {}
        self.bindings: dict[tuple[str, str], Binding] = {}
        self._crb_by_subject: dict[SubjectKey, set[str]] = {}
        self._rb_by_subject: dict[tuple[str, SubjectKey], set[str]] = {}
        self.listeners: list = []  # called with a ClusterRole's name (None: all) after it changes
        self.cache = None

    @classmethod
    def attach(cls, cache, registry) -> "RbacIndex":
        prefixes = {}
        for resource in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
            kind = registry.by_resource(names.RBAC_GROUP, "v1", resource)
            if kind is None:
                raise RuntimeError(f"the kind registry lacks {resource}.{names.RBAC_GROUP}")
            prefixes[resource] = key_prefix(kind)
        index = cls(prefixes)
        index.cache = cache
        cache.listeners.append(index.on_event)
        return index

    # --- maintenance ----------------------------------------------------------------------
    def on_event(self, cache, ev) -> None:
        if cache is None:
            self.rebuild()
            return
        resource = self._by_prefix.get(cache.prefix)
        if resource is None:
            return
        if ev.prev is not None or ev.type == "DELETED":
            self._remove(resource, ev.prev if ev.prev is not None else ev.entry)
        if ev.type != "DELETED":
            self._add(resource, ev.entry)
        if resource == "clusterroles":
            for listener in self.listeners:
                listener(ev.entry.name)

    def rebuild(self) -> None:
        self.cluster_roles.clear()
        self.roles.clear()
        self.cluster_bindings.clear()
        self.bindings.clear()
        self._crb_by_subject.clear()
        self._rb_by_subject.clear()
        for resource, prefix in self.prefixes.items():
            c = self.cache.caches.get(prefix) if self.cache is not None else None
            if c is None:
                continue
            for e in c.items.values():
                self._add(resource, e)
        for listener in self.listeners:
            listener(None)

    def _add(self, resource: str, e) -> None:
        try:
            obj = orjson.loads(e.raw)
        except orjson.JSONDecodeError:
            log.error("rbac: %s %s is not valid JSON; ignored", resource, e.key)
            return
        if resource == "clusterroles":
            self.cluster_roles[e.name] = parse_cluster_role(obj)
        elif resource == "roles":
            self.roles[(e.namespace, e.name)] = rules_from(obj)
        elif resource == "clusterrolebindings":
            b = parse_binding(obj, "")
            self.cluster_bindings[e.name] = b
            for k in b.subjects:
                self._crb_by_subject.setdefault(k, set()).add(e.name)
        elif resource == "rolebindings":
            b = parse_binding(obj, e.namespace)
            self.bindings[(e.namespace, e.name)] = b
            for k in b.subjects:
                self._rb_by_subject.setdefault((e.namespace, k), set()).add(e.name)

    def _remove(self, resource: str, e) -> None:
        if resource == "clusterroles":
            self.cluster_roles.pop(e.name, None)
        elif resource == "roles":
            self.roles.pop((e.namespace, e.name), None)
        elif resource == "clusterrolebindings":
            b = self.cluster_bindings.pop(e.name, None)
            for k in b.subjects if b else ():
                s = self._crb_by_subject.get(k)
                if s is not None:
                    s.discard(e.name)
                    if not s:
                        del self._crb_by_subject[k]
        elif resource == "rolebindings":
            b = self.bindings.pop((e.namespace, e.name), None)
            for k in b.subjects if b else ():
                s = self._rb_by_subject.get((e.namespace, k))
                if s is not None:
                    s.discard(e.name)
                    if not s:
                        del self._rb_by_subject[(e.namespace, k)]

    # --- queries --------------------------------------------------------------------------
    def role_rules(self, kind: str, name: str, namespace: str) -> tuple[tuple[PolicyRule, ...] | None, str]:
        """The rules a roleRef names, or (None, error text) when the role is missing."""
        if kind == "ClusterRole":
            cr = self.cluster_roles.get(name)
            if cr is None:
                return None, f'clusterrole.{names.RBAC_GROUP} "{name}" not found'
            return cr.rules, ""
        if kind == "Role":
            rules = self.roles.get((namespace, name))
            if rules is None:
                return None, f'role.{names.RBAC_GROUP} "{name}" not found'
            return rules, ""
        return None, f"unsupported role reference kind: {kind!r}"

    def visit(
        self, user: UserInfo, namespace: str
    ) -> Iterator[tuple[Binding, SubjectKey, tuple[PolicyRule, ...] | None, str]]:
        """Every binding that names ``user`` (cluster-wide, then in ``namespace``) with
        the rules of its role, or the error why the role could not be read."""
        keys = user_keys(user)
        seen: set[str] = set()
        for k in keys:
            for name in sorted(self._crb_by_subject.get(k, ())):
                if name in seen:
                    continue
                seen.add(name)
                b = self.cluster_bindings[name]
                rules, err = (
                    self.role_rules(b.role_kind, b.role_name, "")
                    if b.role_kind == "ClusterRole"
                    else (None, f"clusterrolebinding {name} refers to {b.role_kind} {b.role_name}")
                )
                yield b, k, rules, err
        if not namespace:
            return
        seen = set()
        for k in keys:
            for name in sorted(self._rb_by_subject.get((namespace, k), ())):
                if name in seen:
                    continue
                seen.add(name)
                b = self.bindings[(namespace, name)]
                rules, err = self.role_rules(b.role_kind, b.role_name, namespace)
                yield b, k, rules, err

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[PolicyRule], list[str]]:
        rules: list[PolicyRule] = []
        errors: list[str] = []
        for _b, _k, rs, err in self.visit(user, namespace):
            if rs is None:
                errors.append(err)
            else:
                rules.extend(rs)
        return rules, errors


class RbacAuthorizer:
    name = "RBAC"

    def __init__(self, index: RbacIndex):
        self.index = index

    @classmethod
    def from_cache(cls, cache, registry) -> "RbacAuthorizer":
        return cls(RbacIndex.attach(cache, registry))

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        errors = []
        for b, k, rules, err in self.index.visit(attrs.user, attrs.namespace):
            if rules is None:
                errors.append(err)
                continue
            for r in rules:
                if rule_allows(attrs, r):
                    return Decision.ALLOW, f"RBAC: allowed by {b.describe(k)}"
        return Decision.NO_OPINION, ("RBAC: " + ", ".join(errors)) if errors else ""

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        rules, errors = self.index.rules_for(user, namespace)
        res = RulesResult(errors=errors)
        for r in rules:
            if r.non_resource_urls:
                res.non_resource_rules.append(r)
            if r.resources:
                res.resource_rules.append(r)
        return res


# --- validation of role and binding objects ----------------------------------------------


def validate_rules(rules: Any, namespaced: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    if rules is None:
        return errs
    if not isinstance(rules, list):
        return [FieldError.type_invalid("rules", rules, "must be an array")]
    for i, r in enumerate(rules):
        p = f"rules[{i}]"
        if not isinstance(r, dict):
            errs.append(FieldError.type_invalid(p, r, "must be an object"))
            continue
        for f in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"):
            v = r.get(f)
            if v is not None and (not isinstance(v, list) or not all(isinstance(x, str) for x in v)):
                errs.append(FieldError.type_invalid(f"{p}.{f}", v, "must be an array of strings"))
        if not r.get("verbs"):
            errs.append(FieldError.required(f"{p}.verbs", "verbs must contain at least one value"))
        urls, resources = r.get("nonResourceURLs") or [], r.get("resources") or []
        if urls:
            if namespaced:
                errs.append(
                    FieldError.invalid(
                        f"{p}.nonResourceURLs", urls, "namespaced rules cannot apply to non-resource URLs"
                    )
                )
            if r.get("apiGroups") or resources or r.get("resourceNames"):
                errs.append(
                    FieldError.invalid(
                        f"{p}.nonResourceURLs",
                        urls,
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
            continue
        if not resources:
            errs.append(FieldError.required(f"{p}.resources", "resource rules must supply at least one resource"))
        if not r.get("apiGroups"):
            errs.append(FieldError.required(f"{p}.apiGroups", "resource rules must supply at least one api group"))
    return errs


def validate_binding(obj: dict, cluster: bool, old: dict | None) -> list[FieldError]:
    errs: list[FieldError] = []
    ref = obj.get("roleRef")
    if not isinstance(ref, dict):
        errs.append(FieldError.required("roleRef", ""))
    else:
        kinds = ("ClusterRole",) if cluster else ("Role", "ClusterRole")
        if ref.get("kind") not in kinds:
            errs.append(FieldError.not_supported("roleRef.kind", ref.get("kind"), kinds))
        if ref.get("apiGroup") != names.RBAC_GROUP:
            errs.append(FieldError.not_supported("roleRef.apiGroup", ref.get("apiGroup"), (names.RBAC_GROUP,)))
        if not isinstance(ref.get("name"), str) or not ref.get("name"):
            errs.append(FieldError.required("roleRef.name", ""))
        if old is not None and old.get("roleRef") != ref:
            errs.append(FieldError.invalid("roleRef", ref, "cannot change roleRef"))
    subjects = obj.get("subjects")
    if subjects is not None and not isinstance(subjects, list):
        errs.append(FieldError.type_invalid("subjects", subjects, "must be an array"))
        subjects = []
    for i, s in enumerate(subjects or []):
        p = f"subjects[{i}]"
        if not isinstance(s, dict):
            errs.append(FieldError.type_invalid(p, s, "must be an object"))
            continue
        if not s.get("name"):
            errs.append(FieldError.required(f"{p}.name", ""))
        kind = s.get("kind")
        if kind not in ("User", "Group", "ServiceAccount"):
            errs.append(FieldError.not_supported(f"{p}.kind", kind, ("ServiceAccount", "User", "Group")))
        elif kind == "ServiceAccount":
            if s.get("apiGroup"):
                errs.append(FieldError.not_supported(f"{p}.apiGroup", s.get("apiGroup"), ("",)))
            if cluster and not s.get("namespace"):
                errs.append(FieldError.required(f"{p}.namespace", ""))
        elif s.get("apiGroup") != names.RBAC_GROUP:
            errs.append(FieldError.not_supported(f"{p}.apiGroup", s.get("apiGroup"), (names.RBAC_GROUP,)))
    return errs


def validate_cluster_role(obj: dict) -> list[FieldError]:
    errs = validate_rules(obj.get("rules"), namespaced=False)
    agg = obj.get("aggregationRule")
    if agg is not None:
        if not isinstance(agg, dict):
            return errs + [FieldError.type_invalid("aggregationRule", agg, "must be an object")]
        sels = agg.get("clusterRoleSelectors")
        if not isinstance(sels, list) or not sels:
            errs.append(
                FieldError.required(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                )
            )
        else:
            for i, sel in enumerate(sels):
                try:
                    label_selector_from_dict(sel, f"aggregationRule.clusterRoleSelectors[{i}]")
                except (SelectorError, AttributeError, TypeError) as exc:
                    errs.append(FieldError.invalid(f"aggregationRule.clusterRoleSelectors[{i}]", sel, str(exc)))
    return errs


# --- the write guard --------------------------------------------------------------------------

_GC_FIELDS = ("ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation")


def only_gc_fields_changed(new: dict, old: dict) -> bool:
    """Upstream's IsOnlyMutatingGCFields: owner references and finalizers may change
    without the escalation check, so the garbage collector can always finish."""

    def strip(o: dict) -> dict:
        o = dict(o)
        o["metadata"] = {k: v for k, v in (o.get("metadata") or {}).items() if k not in _GC_FIELDS}
        return o

    return strip(new) == strip(old)


class RbacWriteGuard:
    """Always-on checks for role and binding writes: object shape, then upstream's
    escalation rules. It runs in the validating phase after the admission plugins."""

    name = "RBACWriteGuard"
    # The chain asks it about these alone (its checks return at once for anything else).
    resources = frozenset(
        (names.RBAC_GROUP, r) for r in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
    )

    def __init__(self, authorizer: Union, index: RbacIndex):
        self.authorizer = authorizer
        self.index = index

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if k.group != names.RBAC_GROUP or attrs.operation not in ("CREATE", "UPDATE") or attrs.obj is None:
            return
        obj, old = attrs.obj, attrs.old if attrs.operation == "UPDATE" else None
        if k.resource in ("roles", "clusterroles"):
            errs = (
                validate_rules(obj.get("rules"), namespaced=k.resource == "roles")
                if k.resource == "roles"
                else validate_cluster_role(obj)
            )
        else:
            errs = validate_binding(obj, k.resource == "clusterrolebindings", old)
        if errs:
            raise st.invalid(k.kind, attrs.name, causes(errs), k.group)
        user = attrs.user
        if names.GROUP_MASTERS in user.groups:
            return
        if old is not None and only_gc_fields_changed(obj, old):
            return
        if k.resource in ("roles", "clusterroles"):
            await self._check_role(attrs, obj, old)
        else:
            await self._check_binding(attrs, obj)

    def _escalation_error(self, attrs: Attributes, missing: list[PolicyRule], errors: list[str]) -> st.ApiError:
        user = attrs.user
        lines = sorted({r.compact_string() for r in compact(missing)})
        msg = (
            f'user "{user.name}" (groups={go_list(user.groups)}) is attempting to grant RBAC permissions '
            "not currently held:\n" + "\n".join(lines)
        )
        if errors:
            msg += f"; resolution errors: [{', '.join(errors)}]"
        return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, msg)

    async def _check_role(self, attrs: Attributes, obj: dict, old: dict | None) -> None:
        k = attrs.kind
        esc = AuthzAttributes(
            attrs.user,
            "escalate",
            True,
            namespace=attrs.namespace,
            api_group=names.RBAC_GROUP,
            api_version=k.version,
            resource=k.resource,
            name=attrs.name if old is not None else "",
        )
        if (await self.authorizer.decide(esc))[0] is Decision.ALLOW:
            return
        owner, errors = self.index.rules_for(attrs.user, attrs.namespace)
        missing = uncovered(owner, rules_from(obj))
        if missing:
            raise self._escalation_error(attrs, missing, errors)
        if k.resource == "clusterroles":
            has_agg = obj.get("aggregationRule") is not None or (
                old is not None and old.get("aggregationRule") is not None
            )
            if has_agg and uncovered(owner, FULL_AUTHORITY):
                raise st.forbidden(
                    k.resource, attrs.name, k.group, "must have cluster-admin privileges to use the aggregationRule"
                )

    async def _check_binding(self, attrs: Attributes, obj: dict) -> None:
        ref = obj.get("roleRef") or {}
        role_kind, role_name = ref.get("kind", ""), ref.get("name", "")
        resource = "clusterroles" if role_kind == "ClusterRole" else "roles"
        bind = AuthzAttributes(
            attrs.user,
            "bind",
            True,
            namespace=attrs.namespace,
            api_group=names.RBAC_GROUP,
            api_version="v1",
            resource=resource,
            name=role_name,
        )
        if (await self.authorizer.decide(bind))[0] is Decision.ALLOW:
            return
        rules, err = self.index.role_rules(role_kind, role_name, attrs.namespace)
        if rules is None:
            raise st.not_found(resource, role_name, names.RBAC_GROUP)
        owner, errors = self.index.rules_for(attrs.user, attrs.namespace)
        missing = uncovered(owner, rules)
        if missing:
            raise self._escalation_error(attrs, missing, errors)
