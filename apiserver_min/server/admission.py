"""The admission chain: mutating plugins, then validating plugins.

A plugin sees the request's attributes (operation, kind, namespace, name, the
new and old objects, the user, dry-run) and either passes, changes the object
(mutating phase only) or raises an ApiError. The security and admission work
adds plugins here; this module fixes the shape they plug into.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo

if TYPE_CHECKING:
    from .store import Store


@dataclasses.dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


SYSTEM_USER = UserInfo("system:apiserver", groups=(names.GROUP_MASTERS, names.GROUP_AUTHENTICATED))


@dataclasses.dataclass
class Attributes:
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    kind: KindInfo
    namespace: str
    name: str
    subresource: str
    obj: dict | None
    old: dict | None
    user: UserInfo
    dry_run: bool
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


class Plugin(Protocol):
    """An admission plugin. It may also declare ``resources``: the (group, resource)
    pairs it acts on (absent or None: every resource), so the chain does not call
    it for others; ``operations``: the operations its mutating phase acts on
    (absent or None: every operation; upstream's ``Handles``); and ``complete``:
    True when what its mutating phase writes is complete, already defaulted and
    nothing the strategy's preparation derives anything from (as upstream's
    built-in plugins write it). After any other mutating plugin (a webhook, say) the
    store prepares and defaults the object again, as upstream defaults what
    webhooks return; validation always follows the mutating phase."""

    name: str

    async def admit(self, attrs: Attributes) -> None:
        """Mutating phase: may change ``attrs.obj``."""

    async def validate(self, attrs: Attributes) -> None:
        """Validating phase: may only reject."""


async def _noop_phase(self: Any, attrs: Attributes) -> None:
    return None


def _is_noop(method: Any) -> bool:
    """Whether a plugin phase is the empty ``return None`` most plugins give the phase
    they do not use: calling it would still create and run a coroutine per write."""
    code = getattr(getattr(method, "__func__", method), "__code__", None)
    ref = _noop_phase.__code__
    return (code is not None and code.co_code == ref.co_code and not code.co_names
            and all(c is None or isinstance(c, str) for c in code.co_consts))


class Chain:
    """Runs every plugin's mutating phase, then every validating phase. The generic
    store runs them as two steps around the strategy (mutate, then prepare, default
    and validate, then the validating phase), as upstream does. Which plugins
    can act on a kind is worked out once per (group, resource) and plugin list
    (``plugins`` may be changed after construction; the next run sees it)."""

    def __init__(self, plugins: list[Plugin]):
        self.plugins = plugins
        self._plans: dict[tuple[str, str], tuple[tuple, list, list]] = {}
        self._admitters: dict[tuple[str, str, str], tuple[list, bool]] = {}

    def _plan(self, kind: KindInfo) -> tuple[list, list]:
        key = (kind.group, kind.resource)
        current = tuple(self.plugins)
        plan = self._plans.get(key)
        if plan is None or plan[0] != current:
            relevant = [p for p in current
                        if getattr(p, "resources", None) is None or key in p.resources]  # type: ignore[attr-defined]
            plan = (current, [(p.admit, getattr(p, "operations", None), getattr(p, "complete", None) is True)
                              for p in relevant if not _is_noop(p.admit)],
                    [p.validate for p in relevant if not _is_noop(p.validate)])
            self._plans[key] = plan
            self._admitters = {k: v for k, v in self._admitters.items() if k[:2] != key}
        return plan[1], plan[2]

    async def admit(self, attrs: Attributes) -> bool:
        """The mutating phase: the ``admit`` of every plugin that handles this kind and
        operation. True when one that is not ``complete`` ran: the caller prepares
        and defaults the object again."""
        kind = attrs.kind
        admitters, _ = self._plan(kind)
        key = (kind.group, kind.resource, attrs.operation)
        chosen = self._admitters.get(key)
        if chosen is None:
            handling = [(a, complete) for a, ops, complete in admitters if ops is None or attrs.operation in ops]
            chosen = self._admitters[key] = ([a for a, _ in handling], not all(c for _, c in handling))
        for admit in chosen[0]:
            await admit(attrs)
        return chosen[1]

    async def validate(self, attrs: Attributes) -> None:
        """The validating phase: every plugin's ``validate``, on the final object."""
        for validate in self._plan(attrs.kind)[1]:
            await validate(attrs)

    async def run(self, attrs: Attributes) -> None:
        """Both phases back to back, for requests no strategy validates between them
        (DELETE, CONNECT, sub-resource reviews such as TokenRequest)."""
        await self.admit(attrs)
        await self.validate(attrs)


class NamespaceLifecycle:
    """No objects in missing or terminating namespaces; the reserved three stay."""

    name = "NamespaceLifecycle"
    resources = None  # namespaces themselves, and everything namespaced

    def __init__(self, store: "Store"):
        self.store = store

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if k.group == "" and k.resource == "namespaces":
            if attrs.operation == "DELETE" and attrs.name in names.UNDELETABLE_NAMESPACES:
                raise st.forbidden("namespaces", attrs.name, "",
                                   "this namespace may not be deleted")
            return
        if not k.namespaced or not attrs.namespace:
            return
        if attrs.operation != "CREATE":
            return
        ns = await self.store.namespace_state(attrs.namespace)
        if ns is None:
            raise st.not_found("namespaces", attrs.namespace)
        if ns == "Terminating":
            raise st.forbidden(k.resource, attrs.name, k.group,
                               f"unable to create new content in namespace {attrs.namespace} "
                               "because it is being terminated")


class DefaultTolerationSeconds:
    """New pods tolerate the not-ready and unreachable NoExecute taints for a while
    (default 300 s each), so a short node outage does not evict them at once."""

    name = "DefaultTolerationSeconds"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE"})
    complete = True  # whole tolerations; nothing the pod strategy derives from

    def __init__(self, not_ready_seconds: int = 300, unreachable_seconds: int = 300):
        self.not_ready_seconds = not_ready_seconds
        self.unreachable_seconds = unreachable_seconds

    async def admit(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.operation != "CREATE" or attrs.subresource or k.group != "" or k.resource != "pods":
            return
        spec = (attrs.obj or {}).get("spec")
        if not isinstance(spec, dict):
            return
        tolerations = spec.get("tolerations")
        if tolerations is not None and not isinstance(tolerations, list):
            return
        tolerations = list(tolerations or [])

        def tolerates(key: str) -> bool:
            return any(isinstance(t, dict) and t.get("key", "") in (key, "")
                       and t.get("effect", "") in ("NoExecute", "") for t in tolerations)

        added = False
        for key, seconds in ((names.TAINT_NOT_READY, self.not_ready_seconds),
                             (names.TAINT_UNREACHABLE, self.unreachable_seconds)):
            if not tolerates(key):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": seconds})
                added = True
        if added:
            spec["tolerations"] = tolerations

    async def validate(self, attrs: Attributes) -> None:
        return None


# --- the configured chain (--enable-admission-plugins / --disable-admission-plugins) -------

# Upstream's plugin order: enabled plugins run in this order whatever order the flags use.
PLUGIN_ORDER = (
    "AlwaysAdmit", "NamespaceAutoProvision", "NamespaceLifecycle", "NamespaceExists", "SecurityContextDeny",
    "LimitPodHardAntiAffinityTopology", "LimitRanger", "ServiceAccount", "NodeRestriction",
    "TaintNodesByCondition", "AlwaysPullImages", "ImagePolicyWebhook", "PodSecurity", "PodNodeSelector",
    "Priority", "DefaultTolerationSeconds", "PodTolerationRestriction", "EventRateLimit",
    "ExtendedResourceToleration", "PersistentVolumeLabel", "DefaultStorageClass", "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement", "PersistentVolumeClaimResize", "RuntimeClass", "CertificateApproval",
    "CertificateSigning", "ClusterTrustBundleAttest", "CertificateSubjectRestriction", "DefaultIngressClass",
    "DenyServiceExternalIPs", "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
    "ResourceQuota", "AlwaysDeny",
)
# The spec's default-enabled plugins.
SPEC_DEFAULT_PLUGINS = (
    "CertificateApproval", "CertificateSigning", "CertificateSubjectRestriction", "DefaultIngressClass",
    "DefaultStorageClass", "DefaultTolerationSeconds", "LimitRanger", "MutatingAdmissionWebhook",
    "NamespaceLifecycle", "PersistentVolumeClaimResize", "PodSecurity", "Priority", "ResourceQuota", "RuntimeClass",
    "ServiceAccount", "StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
)
# Plugins this server knows; naming any other in the flags is a start-up error. The
# admission work adds names here (and their factories in ``_plugin_factories``).
KNOWN_PLUGINS = frozenset({
    "NamespaceLifecycle", "NodeRestriction", "ServiceAccount", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "DefaultTolerationSeconds",
})
DEFAULT_PLUGINS = tuple(p for p in SPEC_DEFAULT_PLUGINS if p in KNOWN_PLUGINS)
# Plugins implemented in modules of other areas: (module, class taking the server).
_EXTERNAL_PLUGINS = {"ServiceAccount": ("apiserver_min.auth.serviceaccount", "ServiceAccountAdmission")}
# What those plugins act on and write, where the class does not say (``resources``,
# ``operations``, ``complete``; see Plugin): a plugin the chain knows to be irrelevant
# to a write is not called, and one known to write complete values does not make the
# store prepare and default the object a second time.
_EXTERNAL_SCOPES = {"ServiceAccount": {"resources": frozenset({("", "pods")}), "operations": frozenset({"CREATE"}),
                                        "complete": True}}  # the token volume it adds carries its defaults


def _order(name: str) -> int:
    return PLUGIN_ORDER.index(name) if name in PLUGIN_ORDER else len(PLUGIN_ORDER)


def resolve_plugins(enable: list[str] | tuple[str, ...], disable: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """(defaults + enabled) - disabled, in upstream's order; ValueError naming the flag
    for unknown names or a name in both lists."""
    for flag, given in (("--enable-admission-plugins", enable), ("--disable-admission-plugins", disable)):
        unknown = [n for n in given if n not in KNOWN_PLUGINS]
        if unknown:
            raise ValueError(f"{flag}: unknown admission plugin(s) {', '.join(unknown)}; known plugins: "
                             f"{', '.join(sorted(KNOWN_PLUGINS, key=_order))}")
    both = sorted(set(enable) & set(disable))
    if both:
        raise ValueError(f"{', '.join(both)} in both --enable-admission-plugins and --disable-admission-plugins")
    chosen = (set(DEFAULT_PLUGINS) | set(enable)) - set(disable)
    return tuple(sorted(chosen, key=_order))


def _plugin_factories() -> dict:
    from ..auth.certadmission import CertificateApproval, CertificateSigning, CertificateSubjectRestriction
    from ..auth.noderestriction import NodeRestriction

    def toleration(server):
        opts = server.opts
        return DefaultTolerationSeconds(getattr(opts, "default_not_ready_toleration_seconds", 300),
                                        getattr(opts, "default_unreachable_toleration_seconds", 300))

    return {
        "NamespaceLifecycle": lambda server: NamespaceLifecycle(server.store),
        "NodeRestriction": lambda server: NodeRestriction(server.store, server.registry),
        "DefaultTolerationSeconds": toleration,
        "CertificateApproval": lambda server: CertificateApproval(lambda: server.authorizer),
        "CertificateSigning": lambda server: CertificateSigning(lambda: server.authorizer),
        "CertificateSubjectRestriction": lambda server: CertificateSubjectRestriction(),
    }


def build_chain(server, plugin_names: tuple[str, ...] | list[str], always: list[Plugin] = ()) -> Chain:
    """The chain for the enabled plugin names, then the always-on checks (``always``)."""
    import importlib
    import logging

    log = logging.getLogger("orch-apiserver.admission")
    factories = _plugin_factories()
    plugins: list[Plugin] = []
    for n in sorted(plugin_names, key=_order):
        if n in factories:
            plugins.append(factories[n](server))
            continue
        module_name, attr = _EXTERNAL_PLUGINS.get(n, ("", ""))
        try:
            cls = getattr(importlib.import_module(module_name), attr, None) if module_name else None
        except ImportError:
            cls = None
        if cls is None:
            log.warning("admission plugin %s is enabled but not available in this build; it does not run", n)
            continue
        plugin = cls(server)
        for attr, value in _EXTERNAL_SCOPES.get(n, {}).items():
            if getattr(plugin, attr, None) is None:
                setattr(plugin, attr, value)
        plugins.append(plugin)
    return Chain(plugins + list(always))
