"""Validation of the node agent's whole effective configuration.

Every check runs and every failure is reported, so an operator fixes a
configuration in one round. Each message names the config field and the flag
(``oomScoreAdj (--oom-score-adj): Invalid value: 2000: must be between -1000
and 1000, inclusive``), in the wording of the shared field errors.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any, Iterable

from apiserver_min.api import names
from apiserver_min.api.duration import format_duration
from apiserver_min.api.validation import (
    FieldError,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
)

from .config import AgentConfig, Mode
from .options import BY_ATTR, OPTIONS, Option, Taint
from .runtime.sandbox import sysctl_allowlist_problems

__all__ = ["validate", "ValidationError", "TLS_CIPHER_SUITES"]

# Go's crypto/tls names, the secure ones and those upstream still accepts as insecure.
TLS_CIPHER_SUITES = frozenset(
    """
TLS_AES_128_GCM_SHA256 TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256
TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305 TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
TLS_RSA_WITH_AES_128_CBC_SHA TLS_RSA_WITH_AES_128_GCM_SHA256 TLS_RSA_WITH_AES_256_CBC_SHA
TLS_RSA_WITH_AES_256_GCM_SHA384
TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256 TLS_ECDHE_ECDSA_WITH_RC4_128_SHA
TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256
TLS_ECDHE_RSA_WITH_RC4_128_SHA TLS_RSA_WITH_3DES_EDE_CBC_SHA TLS_RSA_WITH_AES_128_CBC_SHA256
TLS_RSA_WITH_RC4_128_SHA
""".split()
)

_SYSCTL_RE = re.compile(r"[a-z0-9_]+(?:[./][a-z0-9_-]+)*(?:[./]?\*)?|[a-z0-9_]+\*")
_CPUSET_RE = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
_RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")


class ValidationError(ValueError):
    def __init__(self, errors: list[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(errors))


class _Collector:
    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.errors: list[str] = []

    def _label(self, attr: str) -> str:
        return BY_ATTR[attr].label

    def add(self, attr: str, err: FieldError) -> None:
        self.errors.append(f"{self._label(attr)}: {err.body()}")

    def invalid(self, attr: str, value: Any, detail: str) -> None:
        self.add(attr, FieldError.invalid("", _plain(value), detail))

    def forbidden(self, attr: str, detail: str) -> None:
        self.add(attr, FieldError.forbidden("", detail))

    def required(self, attr: str, detail: str) -> None:
        self.add(attr, FieldError.required("", detail))

    def not_supported(self, attr: str, value: Any, valid: Iterable[str]) -> None:
        self.add(attr, FieldError.not_supported("", value, [v for v in valid if v] or list(valid)))


def _plain(value: Any) -> Any:
    """A value as the messages show it (durations as Go strings, mappings as dicts)."""
    if hasattr(value, "total_seconds"):
        return format_duration(value)
    if isinstance(value, tuple):
        return [str(v) if isinstance(v, Taint) else v for v in value]
    if hasattr(value, "items") and not isinstance(value, dict):
        return {k: str(v) for k, v in value.items()}
    return value


def _seconds(d) -> float:
    return d.total_seconds()


def _is_reserved_label(key: str) -> bool:
    prefix, sep, _ = key.rpartition("/")
    if not sep:
        return False
    return prefix == names.DOMAIN or prefix.endswith("." + names.DOMAIN)


def _label_allowed(key: str) -> bool:
    if key in names.NODE_AGENT_ALLOWED_LABELS:
        return True
    prefix = key.rpartition("/")[0]
    for allowed in names.NODE_AGENT_LABEL_PREFIXES:
        ns = allowed.rstrip("/")
        if prefix == ns or prefix.endswith("." + ns):
            return True
    return False


def validate(cfg: AgentConfig) -> list[str]:
    """All problems of ``cfg``, one message each (empty when it is usable)."""
    c = _Collector(cfg)
    gates = cfg.feature_gates

    # Generic: allowed values and integer ranges from the table.
    for opt in OPTIONS:
        value = getattr(cfg, opt.attr)
        if opt.choices is not None and value not in opt.choices:
            c.not_supported(opt.attr, value, opt.choices)
        if opt.range is not None and isinstance(value, int):
            lo, hi = opt.range
            if lo is not None and hi is not None and not lo <= value <= hi:
                c.invalid(opt.attr, value, f"must be between {lo} and {hi}, inclusive")
            elif lo is not None and hi is None and value < lo:
                detail = "must not be a negative number" if lo == 0 else f"must be at least {lo}"
                c.invalid(opt.attr, value, detail)

    # Durations that must be positive, and those that must not be negative.
    for attr in (
        "sync_frequency",
        "file_check_frequency",
        "http_check_frequency",
        "node_status_update_frequency",
        "node_status_report_frequency",
        "runtime_request_timeout",
        "log_flush_frequency",
        "cpu_manager_reconcile_period",
        "housekeeping_interval",
    ):
        if _seconds(getattr(cfg, attr)) <= 0:
            c.invalid(attr, getattr(cfg, attr), "must be greater than 0")
    for attr in (
        "minimum_image_ttl_duration",
        "eviction_pressure_transition_period",
        "streaming_connection_idle_timeout",
        "authentication_token_webhook_cache_ttl",
        "authorization_webhook_cache_authorized_ttl",
        "authorization_webhook_cache_unauthorized_ttl",
        "minimum_container_ttl_duration",
        "shutdown_grace_period",
        "shutdown_grace_period_critical_pods",
    ):
        if _seconds(getattr(cfg, attr)) < 0:
            c.invalid(attr, getattr(cfg, attr), "must not be negative")
    if cfg.shutdown_grace_period_critical_pods > cfg.shutdown_grace_period:
        c.invalid(
            "shutdown_grace_period_critical_pods",
            cfg.shutdown_grace_period_critical_pods,
            "must not exceed shutdownGracePeriod",
        )
    # Graceful node shutdown: upstream's rules (the gates, and not both forms at once).
    shutdown_set = _seconds(cfg.shutdown_grace_period) > 0 or _seconds(cfg.shutdown_grace_period_critical_pods) > 0
    by_priority = cfg.shutdown_grace_period_by_pod_priority
    if shutdown_set and not gates.enabled("GracefulNodeShutdown"):
        c.forbidden(
            "shutdown_grace_period",
            "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
        )
    if by_priority:
        if not gates.enabled("GracefulNodeShutdownBasedOnPodPriority"):
            c.forbidden(
                "shutdown_grace_period_by_pod_priority",
                "specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority",
            )
        elif shutdown_set:
            c.forbidden(
                "shutdown_grace_period_by_pod_priority",
                "cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time",
            )
        if not gates.enabled("GracefulNodeShutdown"):
            c.forbidden(
                "shutdown_grace_period_by_pod_priority",
                "specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdown",
            )
        seen: set[int] = set()
        for i, entry in enumerate(by_priority):
            if entry.shutdown_grace_period_seconds < 0:
                c.invalid(
                    "shutdown_grace_period_by_pod_priority",
                    entry.shutdown_grace_period_seconds,
                    f"[{i}].shutdownGracePeriodSeconds must not be negative",
                )
            if entry.priority in seen:
                c.invalid("shutdown_grace_period_by_pod_priority", entry.priority, f"[{i}].priority is listed twice")
            seen.add(entry.priority)

    # Image garbage collection: low below high, as upstream's validation (high=100 disables).
    if cfg.image_gc_low_threshold >= cfg.image_gc_high_threshold:
        c.invalid(
            "image_gc_low_threshold",
            cfg.image_gc_low_threshold,
            f"must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {cfg.image_gc_high_threshold}",
        )

    # The service proxy's pod range.
    if cfg.cluster_cidr:
        try:
            net = ipaddress.ip_network(cfg.cluster_cidr, strict=False)
        except ValueError:
            net = None
        if net is None or net.version != 4:
            c.invalid("cluster_cidr", cfg.cluster_cidr, "must be an IPv4 CIDR such as 10.88.0.0/16")

    # iptables marks: distinct bits.
    if cfg.iptables_drop_bit == cfg.iptables_masquerade_bit:
        c.invalid(
            "iptables_drop_bit",
            cfg.iptables_drop_bit,
            "must differ from iptablesMasqueradeBit (--iptables-masquerade-bit)",
        )

    # CPU CFS quota period: 1ms to 1s, and other than 100ms only with the gate.
    period = _seconds(cfg.cpu_cfs_quota_period)
    if not 0.001 <= period <= 1.0:
        c.invalid("cpu_cfs_quota_period", cfg.cpu_cfs_quota_period, "must be between 1ms and 1s, inclusive")
    elif period != 0.1 and not gates.enabled("CustomCPUCFSQuotaPeriod"):
        c.invalid("cpu_cfs_quota_period", cfg.cpu_cfs_quota_period, "requires feature gate CustomCPUCFSQuotaPeriod")

    # Node allocatable enforcement.
    levels = list(cfg.enforce_node_allocatable)
    valid_levels = ("none", "pods", "system-reserved", names.AGENT_RESERVED_LEVEL)
    for level in levels:
        if level not in valid_levels:
            c.not_supported("enforce_node_allocatable", level, valid_levels)
    if "none" in levels and len(levels) > 1:
        c.invalid("enforce_node_allocatable", levels, "'none' cannot be combined with other levels")
    if "system-reserved" in levels and not cfg.system_reserved_cgroup:
        c.required(
            "system_reserved_cgroup",
            "must be set when enforceNodeAllocatable (--enforce-node-allocatable) contains 'system-reserved'",
        )
    if names.AGENT_RESERVED_LEVEL in levels and not cfg.orch_reserved_cgroup:
        c.required(
            "orch_reserved_cgroup",
            "must be set when enforceNodeAllocatable (--enforce-node-allocatable) "
            f"contains '{names.AGENT_RESERVED_LEVEL}'",
        )
    if "pods" in levels and not cfg.cgroups_per_qos:
        c.invalid("enforce_node_allocatable", levels, "'pods' needs cgroupsPerQOS (--cgroups-per-qos) to be true")
    for attr in (
        "cgroup_root",
        "system_reserved_cgroup",
        "orch_reserved_cgroup",
        "agent_cgroups",
        "runtime_cgroups",
        "system_cgroups",
    ):
        value = getattr(cfg, attr)
        if value and not value.startswith("/"):
            c.invalid(attr, value, "must be an absolute cgroup name (starting with '/')")
    for attr in ("system_reserved", "orch_reserved"):
        for name, q in getattr(cfg, attr).items():
            if name not in _RESERVED_RESOURCES:
                c.not_supported(attr, name, _RESERVED_RESOURCES)
            elif q.sign() < 0:
                c.invalid(attr, f"{name}={q}", "must not be negative")
    if cfg.reserved_cpus:
        if not _CPUSET_RE.fullmatch(cfg.reserved_cpus):
            c.invalid("reserved_cpus", cfg.reserved_cpus, "must be a cpuset such as 0-3,8")
        if cfg.system_reserved_cgroup or cfg.orch_reserved_cgroup:
            c.forbidden(
                "reserved_cpus",
                "cannot be used with systemReservedCgroup "
                "(--system-reserved-cgroup) or orchReservedCgroup (--orch-reserved-cgroup)",
            )
    if cfg.qos_reserved:
        if not gates.enabled("QOSReserved"):
            c.forbidden("qos_reserved", "requires feature gate QOSReserved")
        for name in cfg.qos_reserved:
            if name != "memory":
                c.not_supported("qos_reserved", name, ("memory",))
    if cfg.memory_manager_policy == "Static" and not cfg.reserved_memory:
        c.required("reserved_memory", "must be set with memoryManagerPolicy (--memory-manager-policy) Static")
    if cfg.cpu_manager_policy_options and not gates.enabled("CPUManagerPolicyOptions"):
        c.forbidden("cpu_manager_policy_options", "requires feature gate CPUManagerPolicyOptions")

    # Eviction: every soft threshold needs a grace period, and no grace period without one.
    for signal in cfg.eviction_soft:
        if signal not in cfg.eviction_soft_grace_period:
            c.required(
                "eviction_soft_grace_period", f"a grace period must be given for the soft eviction threshold {signal}"
            )
    for signal in cfg.eviction_soft_grace_period:
        if signal not in cfg.eviction_soft:
            c.invalid("eviction_soft_grace_period", signal, "has no matching evictionSoft (--eviction-soft) threshold")

    # Runtime (--container-runtime other than remote: the generic choices check above).
    for attr in ("container_runtime_endpoint", "image_service_endpoint"):
        ep = getattr(cfg, attr)
        if ep and not (ep.startswith("unix://") or ep.startswith("/") or ep.startswith("tcp://")):
            c.invalid(attr, ep, "must be a unix socket path, a unix:// URL or a tcp:// URL")

    # Networking.
    for attr in ("address", "healthz_bind_address"):
        if not _is_ip(getattr(cfg, attr)):
            c.invalid(attr, getattr(cfg, attr), "must be a valid IP address")
    for ip in cfg.cluster_dns:
        if not _is_ip(ip):
            c.invalid("cluster_dns", ip, "must be a valid IP address")
    if cfg.cluster_domain and is_dns1123_subdomain(cfg.cluster_domain.rstrip(".")):
        c.invalid("cluster_domain", cfg.cluster_domain, "must be a DNS subdomain")
    for sysctl in cfg.allowed_unsafe_sysctls:
        if not _SYSCTL_RE.fullmatch(sysctl):
            c.invalid("allowed_unsafe_sysctls", sysctl, "must be a sysctl name or a pattern ending in '*'")
    if cfg.allowed_unsafe_sysctls:
        for problem in sysctl_allowlist_problems(cfg.allowed_unsafe_sysctls):
            c.invalid("allowed_unsafe_sysctls", ",".join(cfg.allowed_unsafe_sysctls), problem)
    if cfg.node_ip:
        ips = [p.strip() for p in cfg.node_ip.split(",")]
        if len(ips) > 2 or not all(_is_ip(ip) for ip in ips):
            c.invalid("node_ip", cfg.node_ip, "must be an IP address or a comma-separated dual-stack pair")
        elif len(ips) == 2 and ipaddress.ip_address(ips[0]).version == ipaddress.ip_address(ips[1]).version:
            c.invalid("node_ip", cfg.node_ip, "a dual-stack pair needs one IPv4 and one IPv6 address")
    if cfg.pod_cidr:
        try:
            ipaddress.ip_network(cfg.pod_cidr, strict=False)
        except ValueError:
            c.invalid("pod_cidr", cfg.pod_cidr, "must be a CIDR such as 10.88.0.0/16")
        if cfg.mode is Mode.API_SERVER:
            c.forbidden(
                "pod_cidr",
                "is only used in standalone mode; in API-server mode the control "
                "plane assigns the pod CIDR (remove it or --orchconfig)",
            )
    if cfg.manifest_url and not re.match(r"https?://", cfg.manifest_url):
        c.invalid("manifest_url", cfg.manifest_url, "must be an http:// or https:// URL")
    if cfg.manifest_url_header and not cfg.manifest_url:
        c.forbidden("manifest_url_header", "needs staticPodURL (--manifest-url)")

    # Node identity and labels.
    if cfg.hostname_override and is_dns1123_subdomain(cfg.hostname_override.lower()):
        c.invalid("hostname_override", cfg.hostname_override, "must be a DNS subdomain")
    reserved_bad = []
    for key, value in cfg.node_labels.items():
        for msg in is_qualified_name(key):
            c.invalid("node_labels", key, msg)
        for msg in is_valid_label_value(value):
            c.invalid("node_labels", value, msg)
        if _is_reserved_label(key) and not _label_allowed(key):
            reserved_bad.append(key)
    if reserved_bad:
        prefixes = ", ".join(p.rstrip("/") for p in names.NODE_AGENT_LABEL_PREFIXES)
        c.forbidden(
            "node_labels",
            f"unknown '{names.DOMAIN}' labels specified: {', '.join(sorted(reserved_bad))}; "
            f"labels in the '{names.DOMAIN}' namespace must begin with an allowed prefix "
            f"({prefixes}) or be in the allowed set "
            f"({', '.join(sorted(names.NODE_AGENT_ALLOWED_LABELS))})",
        )
    for taint in cfg.register_with_taints:
        for msg in is_qualified_name(taint.key):
            c.invalid("register_with_taints", taint.key, msg)
        if taint.value:
            for msg in is_valid_label_value(taint.value):
                c.invalid("register_with_taints", taint.value, msg)

    # Files and directories.
    for attr in ("root_dir", "cert_dir"):
        if not getattr(cfg, attr):
            c.required(attr, "must not be empty")
    for attr in (
        "tls_cert_file",
        "tls_private_key_file",
        "client_ca_file",
        "cloud_config",
        "image_credential_provider_config",
        "azure_container_registry_config",
    ):
        path = getattr(cfg, attr)
        if path and not os.path.isfile(path):
            c.invalid(attr, path, "no such file")
    if cfg.lock_file and not os.path.isdir(os.path.dirname(os.path.abspath(cfg.lock_file))):
        c.invalid("lock_file", cfg.lock_file, "its directory does not exist")
    if cfg.image_credential_provider_config and not cfg.image_credential_provider_bin_dir:
        c.required("image_credential_provider_bin_dir", "must be set with --image-credential-provider-config")
    if cfg.image_credential_provider_bin_dir and not cfg.image_credential_provider_config:
        c.forbidden("image_credential_provider_bin_dir", "needs --image-credential-provider-config")
    if cfg.master_service_namespace and is_dns1123_label(cfg.master_service_namespace):
        c.invalid("master_service_namespace", cfg.master_service_namespace, "must be a namespace name (a DNS label)")

    # TLS and authentication.
    if cfg.tls_cert_file and not cfg.tls_private_key_file:
        c.required("tls_private_key_file", "must be given with tlsCertFile (--tls-cert-file)")
    if cfg.tls_private_key_file and not cfg.tls_cert_file:
        c.required("tls_cert_file", "must be given with tlsPrivateKeyFile (--tls-private-key-file)")
    for suite in cfg.tls_cipher_suites:
        if suite not in TLS_CIPHER_SUITES:
            c.invalid("tls_cipher_suites", suite, "unknown cipher suite")
    if cfg.tls_min_version == "VersionTLS13" and cfg.tls_cipher_suites:
        c.forbidden(
            "tls_cipher_suites",
            "cannot be set with tlsMinVersion (--tls-min-version) VersionTLS13 (TLS 1.3 suites are not configurable)",
        )
    if cfg.mode is Mode.STANDALONE:
        if cfg.authorization_mode == "Webhook":
            c.forbidden(
                "authorization_mode", "Webhook needs the API server (--orchconfig); use AlwaysAllow in standalone mode"
            )
        if cfg.authentication_token_webhook:
            c.forbidden("authentication_token_webhook", "needs the API server (--orchconfig)")
        if cfg.rotate_server_certificates:
            c.forbidden("rotate_server_certificates", "needs the API server (--orchconfig)")
        if cfg.bootstrap_orchconfig:
            c.forbidden("bootstrap_orchconfig", "needs --orchconfig (the file the bootstrap writes)")
    elif not os.path.exists(cfg.orchconfig) and not cfg.bootstrap_orchconfig:
        c.invalid("orchconfig", cfg.orchconfig, "no such file, and no --bootstrap-orchconfig to create it")

    # Process.
    if cfg.exit_on_lock_contention and not cfg.lock_file:
        c.forbidden("exit_on_lock_contention", "needs --lock-file")

    # Logging and its gates.
    if cfg.logging_format == "json" and not gates.enabled("LoggingBetaOptions"):
        c.forbidden("logging_format", "json requires feature gate LoggingBetaOptions")
    if cfg.log_json_split_stream and not gates.enabled("LoggingAlphaOptions"):
        c.forbidden("log_json_split_stream", "is ALPHA and requires feature gate LoggingAlphaOptions")
    if cfg.log_json_info_buffer_size.sign() < 0:
        c.invalid("log_json_info_buffer_size", str(cfg.log_json_info_buffer_size), "must not be negative")
    elif not cfg.log_json_info_buffer_size.is_zero() and not gates.enabled("LoggingAlphaOptions"):
        c.forbidden("log_json_info_buffer_size", "is ALPHA and requires feature gate LoggingAlphaOptions")
    if cfg.log_json_split_stream and cfg.logging_format != "json":
        c.forbidden("log_json_split_stream", "applies only with loggingFormat (--logging-format) json")

    return c.errors


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def check(cfg: AgentConfig) -> None:
    """Raise :class:`ValidationError` listing every problem, if any."""
    errors = validate(cfg)
    if errors:
        raise ValidationError(errors)


def option_for(attr: str) -> Option:
    return BY_ATTR[attr]
