"""Authorization: the decision types, the ordered chain of authorizers and the
403 every denial becomes.

``--authorization-mode`` lists authorizers in order (default ``Node,RBAC``).
Each answers allow, deny or no opinion; the first decisive answer wins and a
request nobody allows is denied. Members of ``system:masters`` are allowed
before any mode is asked, as upstream's privileged-group short-circuit: the
server's own loopback identity and the generated admin certificate rely on it.

The attributes an authorizer sees come from the parsed URL (``RequestInfo``),
so routing, metrics and authorization never disagree about a request.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Iterable, Mapping, Protocol

from ..api import names
from ..api import status as st
from ..api.selectors import SelectorError, parse_field_selector
from ..api.user import UserInfo
from ..api.validation import go_list


class RequestFacts(Protocol):
    """What authorization reads of a parsed request (the server's ``RequestInfo``)."""

    is_resource: bool
    path: str
    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    name: str


AUTHORIZATION_MODES = ("AlwaysAllow", "AlwaysDeny", "ABAC", "Webhook", "RBAC", "Node")
DEFAULT_AUTHORIZATION_MODES = ("Node", "RBAC")

ANONYMOUS = UserInfo(names.USER_ANONYMOUS, groups=(names.GROUP_UNAUTHENTICATED,))


class Decision(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    NO_OPINION = "no-opinion"


@dataclasses.dataclass(frozen=True, slots=True)
class AuthzAttributes:
    """What is asked, by whom: upstream's authorizer.Attributes."""

    user: UserInfo
    verb: str
    resource_request: bool
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""


@dataclasses.dataclass
class RulesResult:
    """The rules an authorizer can enumerate for a user in a namespace."""

    resource_rules: list["PolicyRule"] = dataclasses.field(default_factory=list)
    non_resource_rules: list["PolicyRule"] = dataclasses.field(default_factory=list)
    incomplete: bool = False
    errors: list[str] = dataclasses.field(default_factory=list)


class Authorizer(Protocol):
    name: str

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        """(decision, reason); the reason may be empty."""

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        """The rules this authorizer grants ``user`` in ``namespace`` (SelfSubjectRulesReview)."""


class PrivilegedGroups:
    """Allows members of the listed groups everything, without looking further."""

    name = "PrivilegedGroups"

    def __init__(self, groups: Iterable[str] = (names.GROUP_MASTERS,)):
        self.groups = frozenset(groups)

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        if not self.groups.isdisjoint(attrs.user.groups):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, ""

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        return RulesResult()


class AlwaysAllow:
    name = "AlwaysAllow"

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        return Decision.ALLOW, ""

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        return RulesResult(
            [PolicyRule(verbs=("*",), api_groups=("*",), resources=("*",))],
            [PolicyRule(verbs=("*",), non_resource_urls=("*",))],
        )


class AlwaysDeny:
    name = "AlwaysDeny"

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        return Decision.DENY, "Everything is forbidden."

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        return RulesResult()


class Union:
    """Authorizers asked in order: the first allow or deny wins; otherwise no opinion
    with every reason collected (the caller treats that as a denial).

    An authorizer that must wait for its answer (the webhook) has an async
    ``decide(attrs) -> (decision, reason, error)``; :meth:`decide` awaits it, while the
    synchronous :meth:`authorize` takes its ``authorize`` (cached answers only)."""

    name = "Union"

    def __init__(self, authorizers: list[Authorizer]):
        self.authorizers = authorizers
        # Whether an authorizer must wait for its answer (the webhook): without one,
        # :meth:`authorize` is the whole answer and callers need not await :meth:`decide`.
        self.waits = any(hasattr(a, "decide") for a in authorizers)
        head = authorizers[0] if authorizers else None
        self._privileged = head if isinstance(head, PrivilegedGroups) else None

    def allows_outright(self, user: UserInfo) -> bool:
        """Whether the chain's first authorizer, the privileged groups, allows this user
        every request: its answer for any request of theirs is ALLOW with no reason, so
        the request's attributes need not be built to know the chain's."""
        head = self._privileged
        return head is not None and not head.groups.isdisjoint(user.groups)

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        reasons = []
        for a in self.authorizers:
            decision, reason = a.authorize(attrs)
            if decision is not Decision.NO_OPINION:
                return decision, reason
            if reason:
                reasons.append(reason)
        return Decision.NO_OPINION, "\n".join(reasons)

    async def decide(self, attrs: AuthzAttributes) -> tuple[Decision, str, str]:
        """(decision, reason, error): as :meth:`authorize`, asking the authorizers that
        wait too. ``error`` joins the failures of the authorizers asked (upstream's
        aggregate: one as it is, several as ``[a, b]``); it matters only when nobody
        allowed the request."""
        if not self.waits:
            decision, reason = self.authorize(attrs)
            return decision, reason, ""
        reasons: list[str] = []
        errors: list[str] = []
        for a in self.authorizers:
            ask = getattr(a, "decide", None)
            if ask is not None:
                decision, reason, error = await ask(attrs)
            else:
                decision, reason = a.authorize(attrs)
                error = ""
            if error:
                errors.append(error)
            if decision is not Decision.NO_OPINION:
                return decision, reason, error
            if reason:
                reasons.append(reason)
        joined = errors[0] if len(errors) == 1 else (f"[{', '.join(errors)}]" if errors else "")
        return Decision.NO_OPINION, "\n".join(reasons), joined

    def allowed(self, attrs: AuthzAttributes) -> bool:
        return self.authorize(attrs)[0] is Decision.ALLOW

    async def close(self) -> None:
        """Closes the connections of the authorizers that keep some (the webhook)."""
        for a in self.authorizers:
            close = getattr(a, "close", None)
            if close is not None:
                await close()

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        out = RulesResult()
        for a in self.authorizers:
            r = a.rules_for(user, namespace)
            out.resource_rules += r.resource_rules
            out.non_resource_rules += r.non_resource_rules
            out.incomplete = out.incomplete or r.incomplete
            out.errors += r.errors
        return out


async def decide(authorizer: Any, attrs: AuthzAttributes) -> tuple[Decision, str, str]:
    """(decision, reason, error) of any authorizer: the chain's (or a webhook's) ``decide``,
    else its synchronous ``authorize`` with no error."""
    ask = getattr(authorizer, "decide", None)
    if ask is not None:
        return await ask(attrs)
    decision, reason = authorizer.authorize(attrs)
    return decision, reason, ""


def parse_modes(value: str) -> tuple[str, ...]:
    """``--authorization-mode``: a comma list of known modes, each at most once."""
    modes = [m.strip() for m in value.split(",") if m.strip()]
    if not modes:
        raise ValueError("at least one authorization mode must be given")
    seen = set()
    for m in modes:
        if m not in AUTHORIZATION_MODES:
            raise ValueError(f"authorization mode {m!r} is not one of {', '.join(AUTHORIZATION_MODES)}")
        if m in seen:
            raise ValueError(f"authorization mode {m!r} is given more than once")
        seen.add(m)
    return tuple(modes)


# --- attributes from a request ------------------------------------------------------------


def user_or_anonymous(user: UserInfo | None) -> UserInfo:
    return user if user is not None else ANONYMOUS


def request_attributes(
    user: UserInfo | None, info: RequestFacts, query: Mapping[str, str] | None = None
) -> AuthzAttributes:
    """Upstream's RequestInfo-to-attributes rules: the namespace of a namespace object is
    its own name, and a list or watch pinned to one name by ``fieldSelector=metadata.name=``
    is authorized for that name (the node agent reads single secrets this way)."""
    u = user_or_anonymous(user)
    if not info.is_resource:
        return AuthzAttributes(u, info.verb, False, path=info.path)
    group = info.group  # the orch group also for a path on its alias (routing resolved it)
    namespace, name = info.namespace, info.name
    if info.resource == "namespaces" and group == "" and name:
        namespace = name
    if not name and info.verb in ("list", "watch") and query is not None:
        raw = query.get("fieldSelector")
        if raw:
            try:
                name = parse_field_selector(raw).exact_match("metadata.name") or ""
            except (SelectorError, ValueError):
                name = ""
    return AuthzAttributes(
        u,
        info.verb,
        True,
        namespace=namespace,
        api_group=group,
        api_version=info.version,
        resource=info.resource,
        subresource=info.subresource,
        name=name,
    )


def forbidden_message(attrs: AuthzAttributes) -> str:
    """Upstream's wording, which clients and people grep for."""
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    if attrs.namespace:
        return (
            f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" '
            f'in the namespace "{attrs.namespace}"'
        )
    return (
        f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" at the cluster scope'
    )


def forbidden_error(attrs: AuthzAttributes, reason: str = "") -> st.ApiError:
    msg = forbidden_message(attrs)
    if reason:
        msg = f"{msg}: {reason}"
    if not attrs.resource_request:
        return st.forbidden_plain(f"forbidden: {msg}")
    return st.forbidden(attrs.resource, attrs.name, attrs.api_group, msg)


def _strs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


@dataclasses.dataclass(frozen=True)
class PolicyRule:
    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Any) -> "PolicyRule":
        if not isinstance(d, dict):
            return cls()
        return cls(
            _strs(d.get("verbs")),
            _strs(d.get("apiGroups")),
            _strs(d.get("resources")),
            _strs(d.get("resourceNames")),
            _strs(d.get("nonResourceURLs")),
        )

    def to_dict(self) -> dict:
        out: dict[str, list[str]] = {}
        if self.api_groups or self.resources:
            out["apiGroups"] = list(self.api_groups)
        if self.resources:
            out["resources"] = list(self.resources)
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        out["verbs"] = list(self.verbs)
        return out

    def compact_string(self) -> str:
        """Upstream's CompactString, which escalation errors print."""
        parts = []
        for label, values in (
            ("APIGroups", self.api_groups),
            ("Resources", self.resources),
            ("NonResourceURLs", self.non_resource_urls),
            ("ResourceNames", self.resource_names),
            ("Verbs", self.verbs),
        ):
            if values:
                parts.append(f"{label}:{go_list(values)}")
        return "{" + ", ".join(parts) + "}"
