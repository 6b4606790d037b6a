"""The admission plugins: their names, upstream's order, the default set, and the
configured chain (--enable-admission-plugins / --disable-admission-plugins)."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from ..chain import Chain, Plugin
from .certificates import CertificateApproval, CertificateSigning, CertificateSubjectRestriction
from .defaultstorageclass import DefaultStorageClass
from .defaulttolerationseconds import DefaultTolerationSeconds
from .namespacelifecycle import NamespaceLifecycle
from .noderestriction import NodeRestriction
from .persistentvolumeclaimresize import PersistentVolumeClaimResize
from .serviceaccount import ServiceAccountAdmission
from .storageobjectinuseprotection import StorageObjectInUseProtection

log = logging.getLogger("orch-apiserver.admission")


# Upstream's plugin order: enabled plugins run in this order whatever order the flags use.
PLUGIN_ORDER = (
    "AlwaysAdmit",
    "NamespaceAutoProvision",
    "NamespaceLifecycle",
    "NamespaceExists",
    "SecurityContextDeny",
    "LimitPodHardAntiAffinityTopology",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "AlwaysPullImages",
    "ImagePolicyWebhook",
    "PodSecurity",
    "PodNodeSelector",
    "Priority",
    "DefaultTolerationSeconds",
    "PodTolerationRestriction",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "PersistentVolumeLabel",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DenyServiceExternalIPs",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "AlwaysDeny",
)


# The spec's default-enabled plugins.
SPEC_DEFAULT_PLUGINS = (
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "LimitRanger",
    "MutatingAdmissionWebhook",
    "NamespaceLifecycle",
    "PersistentVolumeClaimResize",
    "PodSecurity",
    "Priority",
    "ResourceQuota",
    "RuntimeClass",
    "ServiceAccount",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
)


# Plugins this server knows; naming any other in the flags is a start-up error. The
# admission work adds names here (and their factories in ``_plugin_factories``).
KNOWN_PLUGINS = frozenset(
    {
        "NamespaceLifecycle",
        "NodeRestriction",
        "ServiceAccount",
        "CertificateApproval",
        "CertificateSigning",
        "CertificateSubjectRestriction",
        "DefaultTolerationSeconds",
        "DefaultStorageClass",
        "StorageObjectInUseProtection",
        "PersistentVolumeClaimResize",
    }
)


DEFAULT_PLUGINS = tuple(p for p in SPEC_DEFAULT_PLUGINS if p in KNOWN_PLUGINS)


def _order(name: str) -> int:
    return PLUGIN_ORDER.index(name) if name in PLUGIN_ORDER else len(PLUGIN_ORDER)


def resolve_plugins(enable: list[str] | tuple[str, ...], disable: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """(defaults + enabled) - disabled, in upstream's order; ValueError naming the flag
    for unknown names or a name in both lists."""
    for flag, given in (("--enable-admission-plugins", enable), ("--disable-admission-plugins", disable)):
        unknown = [n for n in given if n not in KNOWN_PLUGINS]
        if unknown:
            raise ValueError(
                f"{flag}: unknown admission plugin(s) {', '.join(unknown)}; known plugins: "
                f"{', '.join(sorted(KNOWN_PLUGINS, key=_order))}"
            )
    both = sorted(set(enable) & set(disable))
    if both:
        raise ValueError(f"{', '.join(both)} in both --enable-admission-plugins and --disable-admission-plugins")
    chosen = (set(DEFAULT_PLUGINS) | set(enable)) - set(disable)
    return tuple(sorted(chosen, key=_order))


def _plugin_factories() -> dict:

    def toleration(server):
        opts = server.opts
        return DefaultTolerationSeconds(
            getattr(opts, "default_not_ready_toleration_seconds", 300),
            getattr(opts, "default_unreachable_toleration_seconds", 300),
        )

    return {
        "NamespaceLifecycle": lambda server: NamespaceLifecycle(server.store),
        "NodeRestriction": lambda server: NodeRestriction(server.store, server.registry),
        "DefaultTolerationSeconds": toleration,
        "DefaultStorageClass": lambda server: DefaultStorageClass(server.store, server.registry),
        "StorageObjectInUseProtection": lambda server: StorageObjectInUseProtection(),
        "PersistentVolumeClaimResize": lambda server: PersistentVolumeClaimResize(server.store, server.registry),
        "CertificateApproval": lambda server: CertificateApproval(lambda: server.authorizer),
        "CertificateSigning": lambda server: CertificateSigning(lambda: server.authorizer),
        "CertificateSubjectRestriction": lambda server: CertificateSubjectRestriction(),
        "ServiceAccount": ServiceAccountAdmission,
    }


def build_chain(server: Any, plugin_names: tuple[str, ...] | list[str], always: Iterable[Plugin] = ()) -> Chain:
    """The chain for the enabled plugin names, then the always-on checks (``always``).
    ``server`` is what the plugins' factories take their parts from (store, registry,
    authorizer, flags)."""
    factories = _plugin_factories()
    plugins: list[Plugin] = []
    for n in sorted(plugin_names, key=_order):
        factory = factories.get(n)
        if factory is None:
            log.warning("admission plugin %s is enabled but not available in this build; it does not run", n)
            continue
        plugins.append(factory(server))
    return Chain(plugins + list(always))
