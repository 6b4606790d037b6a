"""The admission plugins: their names, upstream's order, the default set, and the
configured chain (--enable-admission-plugins / --disable-admission-plugins)."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from ..chain import Chain, Plugin
from ..config import AdmissionConfig
from ..podsecurity import policy as podsecurity_policy
from . import eventratelimit, imagepolicywebhook, podnodeselector, podtolerationrestriction, resourcequota, webhooks
from .alwaysadmit import AlwaysAdmit
from .alwaysdeny import AlwaysDeny
from .alwayspullimages import AlwaysPullImages
from .antiaffinity import LimitPodHardAntiAffinityTopology
from .certificates import CertificateApproval, CertificateSigning, CertificateSubjectRestriction
from .clustertrustbundleattest import plugin as cluster_trust_bundle_attest_plugin
from .defaultingressclass import plugin as default_ingress_class_plugin
from .defaultstorageclass import DefaultStorageClass
from .defaulttolerationseconds import DefaultTolerationSeconds
from .denyserviceexternalips import DenyServiceExternalIPs
from .eventratelimit import EventRateLimit
from .extendedresourcetoleration import ExtendedResourceToleration
from .limitranger import plugin as limit_ranger_plugin
from .namespaceautoprovision import NamespaceAutoProvision
from .namespaceexists import NamespaceExists
from .namespacelifecycle import NamespaceLifecycle
from .noderestriction import NodeRestriction
from .ownerreferences import plugin as owner_references_plugin
from .persistentvolumeclaimresize import PersistentVolumeClaimResize
from .persistentvolumelabel import plugin as persistent_volume_label_plugin
from .podnodeselector import PodNodeSelector
from .podsecurity import PodSecurity
from .podtolerationrestriction import PodTolerationRestriction
from .priority import plugin as priority_plugin
from .runtimeclass import plugin as runtime_class_plugin
from .securitycontextdeny import SecurityContextDeny
from .serviceaccount import ServiceAccountAdmission
from .storageobjectinuseprotection import StorageObjectInUseProtection
from .taintnodesbycondition import plugin as taint_nodes_plugin
from .validatingadmissionpolicy import plugin as validating_admission_policy_plugin

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
        "PodSecurity",
        "AlwaysAdmit",
        "AlwaysDeny",
        "AlwaysPullImages",
        "SecurityContextDeny",
        "NamespaceAutoProvision",
        "NamespaceExists",
        "LimitPodHardAntiAffinityTopology",
        "ExtendedResourceToleration",
        "PodNodeSelector",
        "PodTolerationRestriction",
        "DenyServiceExternalIPs",
        "LimitRanger",
        "Priority",
        "ResourceQuota",
        "DefaultStorageClass",
        "StorageObjectInUseProtection",
        "PersistentVolumeClaimResize",
        "DefaultIngressClass",
        "RuntimeClass",
        "EventRateLimit",
        "OwnerReferencesPermissionEnforcement",
        "PersistentVolumeLabel",
        "TaintNodesByCondition",
        "ClusterTrustBundleAttest",
        "MutatingAdmissionWebhook",
        "ValidatingAdmissionWebhook",
        "ImagePolicyWebhook",
        "ValidatingAdmissionPolicy",
    }
)

# Names an admission configuration file may configure: the plugins of this server and
# the rest of upstream's list (configuration for a plugin not enabled is kept unused).
CONFIGURABLE_NAMES = frozenset(KNOWN_PLUGINS | set(PLUGIN_ORDER))

# Plugins that read a configuration from the admission configuration file: name ->
# parser (the configuration dict, or None -> the parsed form; ValueError when unusable).
CONFIG_PARSERS: dict[str, Any] = {
    "PodSecurity": podsecurity_policy.parse_configuration,
    "PodNodeSelector": podnodeselector.parse_configuration,
    "PodTolerationRestriction": podtolerationrestriction.parse_configuration,
    "EventRateLimit": eventratelimit.parse_configuration,
    "MutatingAdmissionWebhook": webhooks.parse_webhook_admission_config,
    "ValidatingAdmissionWebhook": webhooks.parse_webhook_admission_config,
    "ImagePolicyWebhook": imagepolicywebhook.parse_configuration,
    "ResourceQuota": resourcequota.parse_configuration,
}


def check_plugin_configs(config: AdmissionConfig, enabled: Iterable[str]) -> None:
    """Parse the configuration of every enabled plugin that has one, so a bad one is a
    start-up error (AdmissionConfigError naming the file, the plugin and the problem)."""
    for name in enabled:
        parser = CONFIG_PARSERS.get(name)
        doc = config.for_plugin(name)
        if parser is None or doc is None:
            continue
        try:
            parser(doc)
        except ValueError as exc:
            raise config.error(name, str(exc)) from None


def _admission_config(server: Any) -> AdmissionConfig:
    config = getattr(getattr(server, "opts", None), "admission_config", None)
    return config if isinstance(config, AdmissionConfig) else AdmissionConfig()


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

    def with_config(name, factory):
        def make(server):
            config = _admission_config(server)
            try:
                return factory(server, config.for_plugin(name))
            except ValueError as exc:
                raise config.error(name, str(exc)) from None

        return make

    def configured(cls):
        def make(server):
            config = _admission_config(server)
            try:
                return cls.from_config(server, config.for_plugin(cls.name))
            except ValueError as exc:
                raise config.error(cls.name, str(exc)) from None

        return make

    return {
        "NamespaceLifecycle": lambda server: NamespaceLifecycle(server.store),
        "PodSecurity": configured(PodSecurity),
        "PodNodeSelector": configured(PodNodeSelector),
        "PodTolerationRestriction": configured(PodTolerationRestriction),
        "ImagePolicyWebhook": configured(imagepolicywebhook.ImagePolicyWebhook),
        "AlwaysAdmit": lambda server: AlwaysAdmit(),
        "AlwaysDeny": lambda server: AlwaysDeny(),
        "AlwaysPullImages": lambda server: AlwaysPullImages(),
        "SecurityContextDeny": lambda server: SecurityContextDeny(),
        "NamespaceAutoProvision": lambda server: NamespaceAutoProvision(server.store, server.registry),
        "NamespaceExists": lambda server: NamespaceExists(server.store),
        "LimitPodHardAntiAffinityTopology": lambda server: LimitPodHardAntiAffinityTopology(),
        "ExtendedResourceToleration": lambda server: ExtendedResourceToleration(),
        "NodeRestriction": lambda server: NodeRestriction(server.store, server.registry),
        "DefaultTolerationSeconds": toleration,
        "DefaultStorageClass": lambda server: DefaultStorageClass(server.store, server.registry),
        "StorageObjectInUseProtection": lambda server: StorageObjectInUseProtection(),
        "PersistentVolumeClaimResize": lambda server: PersistentVolumeClaimResize(server.store, server.registry),
        "CertificateApproval": lambda server: CertificateApproval(lambda: server.authorizer),
        "CertificateSigning": lambda server: CertificateSigning(lambda: server.authorizer),
        "CertificateSubjectRestriction": lambda server: CertificateSubjectRestriction(),
        "ServiceAccount": ServiceAccountAdmission,
        "DenyServiceExternalIPs": lambda server: DenyServiceExternalIPs(),
        "LimitRanger": limit_ranger_plugin,
        "Priority": priority_plugin,
        "ResourceQuota": with_config("ResourceQuota", resourcequota.plugin),
        "DefaultIngressClass": default_ingress_class_plugin,
        "RuntimeClass": runtime_class_plugin,
        "EventRateLimit": configured(EventRateLimit),
        "OwnerReferencesPermissionEnforcement": owner_references_plugin,
        "PersistentVolumeLabel": persistent_volume_label_plugin,
        "TaintNodesByCondition": taint_nodes_plugin,
        "ClusterTrustBundleAttest": cluster_trust_bundle_attest_plugin,
        "MutatingAdmissionWebhook": lambda server: webhooks.mutating(server, _admission_config(server)),
        "ValidatingAdmissionWebhook": lambda server: webhooks.validating(server, _admission_config(server)),
        "ValidatingAdmissionPolicy": validating_admission_policy_plugin,
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
