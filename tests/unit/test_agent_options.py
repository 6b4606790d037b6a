"""orch-agent flags and config file: every flag's default, a valid and an invalid value,
its config-file equivalent; precedence; feature gates; strict decoding; validation."""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent.config import ConfigError, Mode, build_config, from_argv, load_config_file
from agent.featuregates import KNOWN_GATES, FeatureGateError, FeatureGates, GateSpec, Stage
from agent.options import (
    BY_FLAG,
    CONFIG_DEPRECATION,
    OPTIONS,
    FlagError,
    MemoryReservation,
    Taint,
    format_help,
    parse_args,
)
from agent.validation import validate
from apiserver_min.api import names
from apiserver_min.api.duration import parse_duration as D
from apiserver_min.api.quantity import parse_quantity as Q

API_VERSION = "agent.config.orch.io/v1beta1"

# The flags of the spec's table (with <cloud> filled in), its authentication
# section, and the flags after --port that issue 5 lists.
SPEC_FLAGS = """
address allowed-unsafe-sysctls azure-container-registry-config bootstrap-orchconfig cert-dir
cgroup-driver cgroup-root cgroups-per-qos cloud-config cloud-provider cluster-dns cluster-domain
config container-log-max-files container-log-max-size container-runtime container-runtime-endpoint
contention-profiling cpu-cfs-quota cpu-cfs-quota-period cpu-manager-policy cpu-manager-policy-options
cpu-manager-reconcile-period enable-controller-attach-detach enable-debugging-handlers enable-server
enforce-node-allocatable event-burst event-qps eviction-hard eviction-max-pod-grace-period
eviction-minimum-reclaim eviction-pressure-transition-period eviction-soft eviction-soft-grace-period
exit-on-lock-contention experimental-allocatable-ignore-eviction experimental-mounter-path
fail-swap-on feature-gates file-check-frequency hairpin-mode healthz-bind-address healthz-port
hostname-override http-check-frequency image-credential-provider-bin-dir
image-credential-provider-config image-gc-high-threshold image-gc-low-threshold
image-service-endpoint iptables-drop-bit iptables-masquerade-bit keep-terminated-pod-volumes
kernel-memcg-notification orch-api-burst orch-api-content-type orch-api-qps orch-reserved
orch-reserved-cgroup orchconfig agent-cgroups local-storage-capacity-isolation lock-file
log-flush-frequency log-json-info-buffer-size log-json-split-stream logging-format
make-iptables-util-chains manifest-url manifest-url-header master-service-namespace max-open-files
max-pods maximum-dead-containers maximum-dead-containers-per-container memory-manager-policy
minimum-container-ttl-duration minimum-image-ttl-duration node-ip node-labels node-status-max-images
node-status-update-frequency oom-score-adj pod-cidr pod-infra-container-image pod-manifest-path
pod-max-pids pods-per-core port
anonymous-auth authentication-token-webhook authentication-token-webhook-cache-ttl
authorization-mode authorization-webhook-cache-authorized-ttl
authorization-webhook-cache-unauthorized-ttl client-ca-file
provider-id qos-reserved read-only-port register-node register-with-taints registry-burst
registry-qps reserved-cpus reserved-memory resolv-conf root-dir rotate-certificates
rotate-server-certificates runonce runtime-cgroups runtime-request-timeout seccomp-default
serialize-image-pulls streaming-connection-idle-timeout sync-frequency system-cgroups
system-reserved system-reserved-cgroup tls-cert-file tls-cipher-suites tls-min-version
tls-private-key-file topology-manager-policy topology-manager-scope volume-plugin-dir
volume-stats-agg-period v vmodule version help
""".split()

# Ours: silences rule 6's deprecation warnings.
# Beyond the seed's list: the service proxy's (upstream kube-proxy's --proxy-mode, --cleanup, --cluster-cidr,
# --iptables-localhost-nodeports), and upstream's --housekeeping-interval (the eviction manager's period).
EXTRA_FLAGS = {
    "deprecation-warnings",
    "proxy-mode",
    "proxy-cleanup",
    "cluster-cidr",
    "housekeeping-interval",
    "iptables-localhost-nodeports",
}

MISSING = "<missing argument>"  # invalid case for free-form strings: the flag without a value


@dataclasses.dataclass
class Case:
    flag: str
    default: Any
    valid: list[str]  # argv
    expected: Any  # effective value after `valid`
    invalid: list[str] | str  # argv, or MISSING
    file: tuple[str, Any, Any] | None = None  # (field path, value in the file, effective value)
    attr: str = ""
    extra: list[str] = dataclasses.field(default_factory=list)  # argv needed for the valid case

    @property
    def name(self) -> str:
        return self.attr or self.flag.replace("-", "_")


def M(**kw):
    return kw


def C(flag, default, valid, expected, invalid, file=None, **kw) -> Case:
    valid_argv = valid if isinstance(valid, list) else [f"--{flag}={valid}"]
    invalid_argv = invalid if invalid == MISSING or isinstance(invalid, list) else [f"--{flag}={invalid}"]
    return Case(flag, default, valid_argv, expected, invalid_argv, file, **kw)


def S(flag, default, valid, invalid=MISSING, field=None, **kw) -> Case:
    """A string flag whose valid value is taken as is."""
    file = (field, valid, valid) if field else None
    return C(flag, default, valid, valid, invalid, file, **kw)


def B(flag, default, field=None, **kw) -> Case:
    """A bool flag: the valid case flips the default."""
    flipped = not default
    valid = [f"--{flag}"] if flipped else [f"--{flag}=false"]
    file = (field, flipped, flipped) if field else None
    return C(flag, default, valid, flipped, "maybe", file, **kw)


def I(flag, default, valid, invalid, field=None, **kw) -> Case:  # noqa: E743 - the table below reads as one case per line
    file = (field, valid, valid) if field else None
    return C(flag, default, str(valid), valid, str(invalid), file, **kw)


def T(flag, default, valid, invalid="10", field=None, **kw) -> Case:
    """A duration flag."""
    file = (field, valid, D(valid)) if field else None
    return C(flag, D(default), valid, D(valid), invalid, file, **kw)


@pytest.fixture(scope="module")
def existing_file(tmp_path_factory) -> str:
    # Any existing file will do for the path flags; it is also a valid (empty) config.
    p = tmp_path_factory.mktemp("files") / "some.pem"
    p.write_text(
        f"kind: AgentConfiguration\napiVersion: {API_VERSION}\n"
        "authentication: {webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n"
    )
    # A valid credential provider config and plugin directory beside it (CRED_CONFIG, CRED_BIN).
    (p.parent / "credbin").mkdir()
    plugin = p.parent / "credbin" / "plugin"
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    (p.parent / "creds.yaml").write_text(
        f"kind: CredentialProviderConfig\napiVersion: agent.config.{names.DOMAIN}/v1\nproviders:\n"
        f"- {{name: plugin, matchImages: ['*.example.com'], defaultCacheDuration: 1m, "
        f"apiVersion: credentialprovider.agent.{names.DOMAIN}/v1}}\n"
    )
    return str(p)


EXISTING = "@existing@"  # replaced by a real file's path in the tests
CRED_CONFIG = "@creds@"  # a valid credential provider config, beside it
CRED_BIN = "@credbin@"  # its plugin directory
MISSING_FILE = "/nonexistent/orch-test/file"

CASES = [
    # General
    C("config", "", ["--config", EXISTING], EXISTING, [f"--config={MISSING_FILE}"]),
    S("root-dir", names.AGENT_ROOT_DIR, "/tmp/orch-agent-root", invalid=["--root-dir="]),
    B("runonce", False),
    C(
        "feature-gates",
        {},
        "SeccompDefault=false,AllAlpha=true",
        {"SeccompDefault": False, "AllAlpha": True},
        "NoSuchGate=true",
        ("featureGates", {"SeccompDefault": False}, {"SeccompDefault": False}),
    ),
    B("deprecation-warnings", True),
    C("version", None, ["--version=raw"], "raw", "maybe"),
    C("help", False, ["-h"], True, "maybe"),
    # API server connection
    C("orchconfig", "", ["--orchconfig", EXISTING], EXISTING, [f"--orchconfig={MISSING_FILE}"]),
    C(
        "bootstrap-orchconfig",
        "",
        ["--bootstrap-orchconfig", "/etc/x.orchconfig", "--orchconfig", "/tmp/new"],
        "/etc/x.orchconfig",
        ["--bootstrap-orchconfig=/etc/x.orchconfig"],
    ),
    I("orch-api-qps", 5, 50, -1, "orchAPIQPS"),
    I("orch-api-burst", 10, 100, -1, "orchAPIBurst"),
    S("orch-api-content-type", names.MEDIA_PROTOBUF, "application/json", "text/plain", "orchAPIContentType"),
    I("event-qps", 5, 0, -1, "eventRecordQPS"),
    I("event-burst", 10, 20, -5, "eventBurst"),
    S("master-service-namespace", "default", "orch-system", "Not_A_Namespace"),
    # Serving and TLS
    S("address", "0.0.0.0", "::", "not-an-ip", "address"),
    I("port", 10250, 12250, 0, "port"),
    C("read-only-port", 0, "10255", 10255, "70000", ("readOnlyPort", 10255, 10255)),
    B("enable-server", True, "enableServer"),
    B("enable-debugging-handlers", True, "enableDebuggingHandlers"),
    B("contention-profiling", False, "enableContentionProfiling"),
    S("healthz-bind-address", "127.0.0.1", "0.0.0.0", "localhost", "healthzBindAddress"),
    I("healthz-port", 10248, 0, 65536, "healthzPort"),
    S("cert-dir", names.AGENT_PKI_DIR, "/etc/orch/pki", invalid=["--cert-dir="]),
    C(
        "tls-cert-file",
        "",
        ["--tls-cert-file", EXISTING, "--tls-private-key-file", EXISTING],
        EXISTING,
        [f"--tls-cert-file={MISSING_FILE}"],
        ("tlsCertFile", EXISTING, EXISTING),
        extra=["--tls-private-key-file", EXISTING],
    ),
    C(
        "tls-private-key-file",
        "",
        ["--tls-private-key-file", EXISTING, "--tls-cert-file", EXISTING],
        EXISTING,
        ["--tls-private-key-file", EXISTING],
        ("tlsPrivateKeyFile", EXISTING, EXISTING),
        extra=["--tls-cert-file", EXISTING],
    ),
    C(
        "tls-cipher-suites",
        (),
        "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ("TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
        "TLS_NOPE",
        ("tlsCipherSuites", ["TLS_AES_128_GCM_SHA256"], ("TLS_AES_128_GCM_SHA256",)),
    ),
    S("tls-min-version", "", "VersionTLS12", "TLS9", "tlsMinVersion"),
    B("rotate-certificates", False, "rotateCertificates"),
    C(
        "rotate-server-certificates",
        False,
        ["--rotate-server-certificates", "--orchconfig", EXISTING],
        True,
        ["--rotate-server-certificates"],
        ("serverTLSBootstrap", True, True),
        extra=["--orchconfig", EXISTING],
    ),
    # Authentication and authorization
    B("anonymous-auth", True, "authentication.anonymous.enabled"),
    C(
        "authentication-token-webhook",
        False,
        ["--authentication-token-webhook", "--orchconfig", EXISTING],
        True,
        ["--authentication-token-webhook=maybe"],
        ("authentication.webhook.enabled", True, True),
        extra=["--orchconfig", EXISTING],
    ),
    T("authentication-token-webhook-cache-ttl", "2m", "10s", field="authentication.webhook.cacheTTL"),
    C(
        "client-ca-file",
        "",
        ["--client-ca-file", EXISTING],
        EXISTING,
        [f"--client-ca-file={MISSING_FILE}"],
        ("authentication.x509.clientCAFile", EXISTING, EXISTING),
    ),
    C(
        "authorization-mode",
        "AlwaysAllow",
        ["--authorization-mode=Webhook", "--orchconfig", EXISTING],
        "Webhook",
        "RBAC",
        ("authorization.mode", "AlwaysAllow", "AlwaysAllow"),
    ),
    T("authorization-webhook-cache-authorized-ttl", "5m", "1m", field="authorization.webhook.cacheAuthorizedTTL"),
    T("authorization-webhook-cache-unauthorized-ttl", "30s", "5s", field="authorization.webhook.cacheUnauthorizedTTL"),
    # Node registration and status
    S("hostname-override", "", "node-1.example", "Not_A_Host"),
    S("node-ip", "", "10.0.0.5,fd00::5", "10.0.0.5,10.0.0.6"),
    C("node-labels", {}, "node.orch.io/pool=a,team=x", {"node.orch.io/pool": "a", "team": "x"}, "orch.io/custom=x"),
    B("register-node", True, "registerNode"),
    C(
        "register-with-taints",
        (),
        "dedicated=infra:NoSchedule,gpu:NoExecute",
        (Taint("dedicated", "infra", "NoSchedule"), Taint("gpu", "", "NoExecute")),
        "a=b:Sometimes",
        (
            "registerWithTaints",
            [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
            (Taint("dedicated", "infra", "NoSchedule"),),
        ),
    ),
    S("provider-id", "", "aws:///zone/i-0123", field="providerID"),
    T("node-status-update-frequency", "10s", "20s", "0s", "nodeStatusUpdateFrequency"),
    I("node-status-max-images", 50, -1, -2, "nodeStatusMaxImages"),
    S("cloud-provider", "", "external", "aws"),
    C("cloud-config", "", ["--cloud-config", EXISTING], EXISTING, [f"--cloud-config={MISSING_FILE}"]),
    S("pod-cidr", "", "10.88.0.0/16", "10.88.0.0/99", "podCIDR"),
    # Pod sources
    S("pod-manifest-path", "", "/etc/orch/agent/manifests", field="staticPodPath"),
    T("file-check-frequency", "20s", "5s", "-1s", "fileCheckFrequency"),
    S("manifest-url", "", "http://10.0.0.1/pods.yaml", "ftp://x/pods", "staticPodURL"),
    C(
        "manifest-url-header",
        {},
        ["--manifest-url-header", "A:1,B:2", "--manifest-url-header=A:3", "--manifest-url", "http://x/p"],
        {"A": ("1", "3"), "B": ("2",)},
        "no-colon",
        ("staticPodURLHeader", {"A": ["1"]}, {"A": ("1",)}),
        extra=["--manifest-url", "http://x/p"],
    ),
    T("http-check-frequency", "20s", "1m", "20", "httpCheckFrequency"),
    T("sync-frequency", "1m", "30s", "0s", "syncFrequency"),
    I("max-pods", 110, 250, -1, "maxPods"),
    I("pods-per-core", 0, 10, -1, "podsPerCore"),
    I("pod-max-pids", -1, 4096, -2, "podPidsLimit"),
    # Container runtime and images
    S("container-runtime", "remote", "remote", "docker"),
    S(
        "container-runtime-endpoint",
        "",
        "unix:///run/containerd/containerd.sock",
        "http://x",
        "containerRuntimeEndpoint",
    ),
    S("image-service-endpoint", "", "unix:///run/containerd/containerd.sock", "ftp://x", "imageServiceEndpoint"),
    T("runtime-request-timeout", "2m", "5m", "0s", "runtimeRequestTimeout"),
    S("pod-infra-container-image", names.AGENT_PAUSE_IMAGE, "localhost/pause:1"),
    B("serialize-image-pulls", True, "serializeImagePulls"),
    I("registry-qps", 5, 10, -1, "registryPullQPS"),
    I("registry-burst", 10, 20, -1, "registryBurst"),
    I("image-gc-high-threshold", 85, 90, 101, "imageGCHighThresholdPercent"),
    I("image-gc-low-threshold", 80, 70, 86, "imageGCLowThresholdPercent"),
    T("minimum-image-ttl-duration", "2m", "10m", "-1m", "imageMinimumGCAge"),
    C(
        "image-credential-provider-config",
        "",
        ["--image-credential-provider-config", CRED_CONFIG, "--image-credential-provider-bin-dir", CRED_BIN],
        CRED_CONFIG,
        [f"--image-credential-provider-config={MISSING_FILE}"],
        extra=["--image-credential-provider-bin-dir=/usr/lib/x"],
    ),
    C(
        "image-credential-provider-bin-dir",
        "",
        ["--image-credential-provider-bin-dir", CRED_BIN, "--image-credential-provider-config", CRED_CONFIG],
        CRED_BIN,
        ["--image-credential-provider-bin-dir=/usr/lib/x"],
    ),
    C(
        "azure-container-registry-config",
        "",
        ["--azure-container-registry-config", EXISTING],
        EXISTING,
        [f"--azure-container-registry-config={MISSING_FILE}"],
    ),
    C("container-log-max-size", Q("10Mi"), "50Mi", Q("50Mi"), "50MB", ("containerLogMaxSize", "1Gi", Q("1Gi"))),
    I("container-log-max-files", 5, 2, 1, "containerLogMaxFiles"),
    B("seccomp-default", False, "seccompDefault"),
    T("streaming-connection-idle-timeout", "4h", "30m", "-1h", "streamingConnectionIdleTimeout"),
    I("maximum-dead-containers", -1, 100, "lots"),
    I("maximum-dead-containers-per-container", 1, 2, "2.5"),
    T("minimum-container-ttl-duration", "0s", "1m", "-1m"),
    # Resources, cgroups and allocatable
    S("cgroup-driver", "cgroupfs", "systemd", "upstart", "cgroupDriver"),
    S("cgroup-root", "", "/orch", "orch", "cgroupRoot"),
    C(
        "cgroups-per-qos",
        True,
        ["--cgroups-per-qos=false", "--enforce-node-allocatable="],
        False,
        "maybe",
        ("cgroupsPerQOS", False, False),
        extra=["--enforce-node-allocatable="],
    ),
    S("agent-cgroups", "", "/system.slice/orch-agent.service", "orch-agent", "agentCgroups"),
    S("runtime-cgroups", "", "/system.slice/containerd.service", "containerd", "runtimeCgroups"),
    S("system-cgroups", "", "/system.slice", "system", "systemCgroups"),
    T("cpu-cfs-quota-period", "100ms", "100ms", "2s", "cpuCFSQuotaPeriod"),
    B("cpu-cfs-quota", True, "cpuCFSQuota"),
    S("cpu-manager-policy", "none", "static", "dynamic", "cpuManagerPolicy"),
    C(
        "cpu-manager-policy-options",
        {},
        "full-pcpus-only=true",
        {"full-pcpus-only": "true"},
        "novalue",
        ("cpuManagerPolicyOptions", {"full-pcpus-only": "true"}, {"full-pcpus-only": "true"}),
    ),
    T("cpu-manager-reconcile-period", "10s", "5s", "0s", "cpuManagerReconcilePeriod"),
    C(
        "memory-manager-policy",
        "None",
        ["--memory-manager-policy=Static", "--reserved-memory=0:memory=1Gi"],
        "Static",
        "static",
        ("memoryManagerPolicy", "None", "None"),
    ),
    S("topology-manager-policy", "none", "single-numa-node", "strict", "topologyManagerPolicy"),
    S("topology-manager-scope", "container", "pod", "node", "topologyManagerScope"),
    C(
        "orch-reserved",
        {},
        "cpu=200m,memory=512Mi,pid=1000",
        {"cpu": Q("200m"), "memory": Q("512Mi"), "pid": Q("1000")},
        "cpu=lots",
        ("orchReserved", {"memory": "1Gi", "pid": 100}, {"memory": Q("1Gi"), "pid": Q("100")}),
    ),
    C(
        "orch-reserved-cgroup",
        "",
        ["--orch-reserved-cgroup=/orch.slice", "--enforce-node-allocatable=pods,orch-reserved"],
        "/orch.slice",
        ["--enforce-node-allocatable=pods,orch-reserved"],
        ("orchReservedCgroup", "/orch.slice", "/orch.slice"),
    ),
    C(
        "system-reserved",
        {},
        "memory=1Gi,ephemeral-storage=1Gi",
        {"memory": Q("1Gi"), "ephemeral-storage": Q("1Gi")},
        "gpu=1",
        ("systemReserved", {"cpu": "500m"}, {"cpu": Q("500m")}),
    ),
    C(
        "system-reserved-cgroup",
        "",
        ["--system-reserved-cgroup=/system.slice", "--enforce-node-allocatable=pods,system-reserved"],
        "/system.slice",
        ["--system-reserved-cgroup=system.slice"],
        ("systemReservedCgroup", "/system.slice", "/system.slice"),
    ),
    S("reserved-cpus", "", "0-1,4", "0-a", "reservedSystemCPUs"),
    C(
        "reserved-memory",
        (),
        ["--reserved-memory", "0:memory=1Gi,hugepages-2Mi=64Mi", "--reserved-memory=1:memory=2Gi"],
        (
            MemoryReservation(0, {"memory": Q("1Gi"), "hugepages-2Mi": Q("64Mi")}),
            MemoryReservation(1, {"memory": Q("2Gi")}),
        ),
        "x:memory=1Gi",
        (
            "reservedMemory",
            [{"numaNode": 0, "limits": {"memory": "1Gi"}}],
            (MemoryReservation(0, {"memory": Q("1Gi")}),),
        ),
    ),
    C("enforce-node-allocatable", ("pods",), "none", ("none",), "none,pods", ("enforceNodeAllocatable", [], ())),
    C(
        "qos-reserved",
        {},
        ["--qos-reserved=memory=50%", "--feature-gates=QOSReserved=true"],
        {"memory": 50},
        "memory=150%",
        ("qosReserved", {"memory": "100%"}, {"memory": 100}),
        extra=["--feature-gates=QOSReserved=true"],
    ),
    B("local-storage-capacity-isolation", True, "localStorageCapacityIsolation"),
    B("kernel-memcg-notification", False, "kernelMemcgNotification"),
    B("experimental-allocatable-ignore-eviction", False),
    # Eviction
    C(
        "eviction-hard",
        {"imagefs.available": "15%", "memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"},
        "memory.available<500Mi,nodefs.available<5%",
        {"memory.available": "500Mi", "nodefs.available": "5%"},
        "memory.available>1Gi",
        ("evictionHard", {"memory.available": "200Mi"}, {"memory.available": "200Mi"}),
    ),
    C(
        "eviction-soft",
        {},
        ["--eviction-soft=memory.available<1.5Gi", "--eviction-soft-grace-period=memory.available=1m30s"],
        {"memory.available": "1.5Gi"},
        "cpu.available<1",
        ("evictionSoft", {"memory.available": "1Gi"}, {"memory.available": "1Gi"}),
        extra=["--eviction-soft-grace-period=memory.available=1m30s"],
    ),
    C(
        "eviction-soft-grace-period",
        {},
        ["--eviction-soft-grace-period=memory.available=1m30s", "--eviction-soft=memory.available<1.5Gi"],
        {"memory.available": D("1m30s")},
        "memory.available=soon",
        ("evictionSoftGracePeriod", {"memory.available": "2m"}, {"memory.available": D("2m")}),
        extra=["--eviction-soft=memory.available<1.5Gi"],
    ),
    I("eviction-max-pod-grace-period", 0, -1, "1.5", "evictionMaxPodGracePeriod"),
    C(
        "eviction-minimum-reclaim",
        {},
        "imagefs.available=2Gi,memory.available=0.5Gi",
        {"imagefs.available": "2Gi", "memory.available": "0.5Gi"},
        "imagefs.available=-1Gi",
        ("evictionMinimumReclaim", {"nodefs.available": "5%"}, {"nodefs.available": "5%"}),
    ),
    T("eviction-pressure-transition-period", "5m", "30s", "-5m", "evictionPressureTransitionPeriod"),
    T("housekeeping-interval", "10s", "2s", "0s"),
    # Networking and DNS
    C(
        "cluster-dns",
        (),
        ["--cluster-dns=10.96.0.10", "--cluster-dns", "fd00::a"],
        ("10.96.0.10", "fd00::a"),
        "dns.local",
        ("clusterDNS", ["10.96.0.10"], ("10.96.0.10",)),
    ),
    S("cluster-domain", "", "cluster.local", "bad_domain!", "clusterDomain"),
    S("resolv-conf", "/etc/resolv.conf", "/run/systemd/resolve/resolv.conf", field="resolvConf"),
    S("hairpin-mode", "promiscuous-bridge", "hairpin-veth", "always", "hairpinMode"),
    S("proxy-mode", "nftables", "none", "iptables"),
    B("proxy-cleanup", False),
    B("iptables-localhost-nodeports", True),
    S("cluster-cidr", "", "10.88.0.0/16", "fd00::/64"),
    B("make-iptables-util-chains", True, "makeIPTablesUtilChains"),
    I("iptables-masquerade-bit", 14, 13, 32, "iptablesMasqueradeBit"),
    I("iptables-drop-bit", 15, 16, -1, "iptablesDropBit"),
    C(
        "allowed-unsafe-sysctls",
        (),
        "kernel.msg*,net.core.somaxconn",
        ("kernel.msg*", "net.core.somaxconn"),
        "Kernel.MSG",
        ("allowedUnsafeSysctls", ["net.ipv4.*"], ("net.ipv4.*",)),
    ),
    # Volumes
    S(
        "volume-plugin-dir",
        names.AGENT_VOLUME_PLUGIN_DIR,
        "/var/lib/orch-agent/volume-plugins",
        field="volumePluginDir",
    ),
    T("volume-stats-agg-period", "1m", "0s", "1minute", "volumeStatsAggPeriod"),
    B("enable-controller-attach-detach", True, "enableControllerAttachDetach"),
    # Accepted only as false: keeping terminated pods' volumes is refused (not supported on this node).
    C("keep-terminated-pod-volumes", False, ["--keep-terminated-pod-volumes=false"], False, "maybe"),
    S("experimental-mounter-path", "mount", "/usr/bin/mount"),
    # Process
    S("lock-file", "", "/tmp/orch-agent.lock", "/nonexistent/dir/orch-agent.lock"),
    C(
        "exit-on-lock-contention",
        False,
        ["--exit-on-lock-contention", "--lock-file=/tmp/orch-agent.lock"],
        True,
        ["--exit-on-lock-contention"],
    ),
    I("oom-score-adj", -999, -500, 1001, "oomScoreAdj"),
    I("max-open-files", 1000000, 65536, 0, "maxOpenFiles"),
    B("fail-swap-on", True, "failSwapOn"),
    # Logging
    C("v", 0, ["-v", "4"], 4, "abc", ("logging.verbosity", 3, 3), attr="verbosity"),
    C(
        "vmodule",
        (),
        "process=4,source*=2",
        (("process", 4), ("source*", 2)),
        "process=high",
        ("logging.vmodule", [{"filePattern": "process", "verbosity": 4}], (("process", 4),)),
    ),
    T("log-flush-frequency", "5s", "1s", "0s", "logging.flushFrequency"),
    S("logging-format", "text", "json", "xml", "logging.format"),
    C(
        "log-json-split-stream",
        False,
        ["--log-json-split-stream", "--logging-format=json", "--feature-gates=LoggingAlphaOptions=true"],
        True,
        ["--log-json-split-stream", "--logging-format=json"],
        ("logging.options.json.splitStream", True, True),
        extra=["--logging-format=json", "--feature-gates=LoggingAlphaOptions=true"],
    ),
    C(
        "log-json-info-buffer-size",
        Q("0"),
        ["--log-json-info-buffer-size=64Ki", "--feature-gates=LoggingAlphaOptions=true"],
        Q("64Ki"),
        ["--log-json-info-buffer-size=64Ki"],
        ("logging.options.json.infoBufferSize", "1Mi", Q("1Mi")),
        extra=["--feature-gates=LoggingAlphaOptions=true"],
    ),
]

BY_CASE = {c.flag: c for c in CASES}


def _sub(value, existing: str):
    if value == EXISTING:
        return existing
    if value in (CRED_CONFIG, CRED_BIN):
        return os.path.join(os.path.dirname(existing), "creds.yaml" if value == CRED_CONFIG else "credbin")
    if isinstance(value, list):
        return [_sub(v, existing) for v in value]
    if isinstance(value, tuple):
        return tuple(_sub(v, existing) for v in value)
    if isinstance(value, dict):
        return {k: _sub(v, existing) for k, v in value.items()}
    return value


def _effective(case: Case, cfg) -> Any:
    if case.flag == "help":
        return None
    if case.flag == "feature-gates":
        return dict(cfg.feature_gates.explicit)
    return getattr(cfg, case.name)


def _nested(path: str, value: Any) -> dict:
    out: dict = {}
    node = out
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return out


def write_config(tmp_path: Path, body: dict | str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    if isinstance(body, dict):
        body = {"kind": "AgentConfiguration", "apiVersion": API_VERSION, **body}
        path.write_text(json.dumps(body) if name.endswith(".json") else _to_yaml(body))
    else:
        path.write_text(body)
    return str(path)


def _to_yaml(obj: dict) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False)


# --- completeness -------------------------------------------------------------------


def test_the_table_covers_every_flag_of_the_spec_and_nothing_else():
    declared = set(BY_FLAG)
    assert declared == set(SPEC_FLAGS) | EXTRA_FLAGS
    assert set(BY_CASE) == declared, sorted(declared ^ set(BY_CASE))
    assert len(CASES) == len(BY_CASE)


def test_config_fields_mirror_the_flags_in_camel_case():
    for opt in OPTIONS:
        if opt.field:
            leaf = opt.field.split(".")[-1]
            assert leaf[0].islower() and "-" not in leaf and "kube" not in leaf.lower(), opt.field


# --- every flag: default, valid, invalid, config file ---------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.flag)
def test_default(case):
    cfg = from_argv([])
    if case.flag == "help":
        assert parse_args([]).show_help is False
        return
    if case.flag == "version":
        assert parse_args([]).show_version is None
        return
    assert _effective(case, cfg) == case.default
    assert validate(cfg) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.flag)
def test_valid_value(case, existing_file):
    argv = _sub(case.valid, existing_file)
    parsed = parse_args(argv)
    assert case.flag in parsed.explicit
    if case.flag == "help":
        assert parsed.show_help is True
        return
    if case.flag == "version":
        assert parsed.show_version == "raw"
        return
    cfg = build_config(parsed)
    assert _effective(case, cfg) == _sub(case.expected, existing_file)
    assert cfg.source(case.name) == "flag"
    # A value the node cannot honour parses, and is then refused by name (agent/unsupported.py).
    refused = tuple(a.split("=")[0] + "=" for a in argv if a.startswith("--"))
    assert [e for e in validate(cfg) if not (e.startswith(refused) and "is not supported on this node" in e)] == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.flag)
def test_invalid_value_names_the_flag(case, existing_file):
    flag = "--v" if case.flag == "v" else f"--{case.flag}"
    if case.invalid == MISSING:
        with pytest.raises(FlagError, match=f"flag needs an argument: {flag}$"):
            parse_args([f"--{case.flag}"])
        return
    argv = _sub(case.invalid, existing_file)
    try:
        cfg = build_config(parse_args(argv))
    except FlagError as exc:
        assert f"for flag {flag}:" in str(exc)
        return
    except ConfigError as exc:
        assert any(flag in e for e in exc.errors), exc.errors
        return
    errors = validate(cfg)
    assert errors, f"{argv} was accepted"
    assert any(f"({flag})" in e or e.startswith(f"{flag}:") for e in errors), errors


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.flag)
def test_config_file_equivalent(case, tmp_path, existing_file):
    opt = BY_FLAG[case.flag]
    if case.file is None:
        assert opt.field is None, f"--{case.flag} mirrors {opt.field}: add its file case"
        return
    field, in_file, expected = _sub(case.file, existing_file)
    assert opt.field == field
    path = write_config(tmp_path, _nested(field, in_file))
    extra = [a for a in _sub(case.extra, existing_file)]
    cfg = build_config(parse_args(["--config", path, *extra]))
    assert _effective(case, cfg) == expected
    assert cfg.source(case.name) == "file"
    # The same in JSON.
    path = write_config(tmp_path, _nested(field, in_file), name="config.json")
    cfg = build_config(parse_args(["--config", path, *extra]))
    assert _effective(case, cfg) == expected


@pytest.mark.parametrize("case", [c for c in CASES if c.file], ids=lambda c: c.flag)
def test_config_file_wrong_type_names_file_and_field(case, tmp_path):
    field = case.file[0]
    opt = BY_FLAG[case.flag]
    wrong = ["a", "list"] if isinstance(case.file[1], dict) else {"an": "object"}
    path = write_config(tmp_path, _nested(field, wrong))
    with pytest.raises(ConfigError) as info:
        build_config(parse_args(["--config", path]))
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith(f"{path}: line ")
    assert f"field {field}:" in info.value.errors[0]
    assert opt.field == field


# --- syntax details -------------------------------------------------------------------


def test_flag_syntax_variants():
    for argv in (["--max-pods=7"], ["--max-pods", "7"]):
        assert from_argv(argv).max_pods == 7
    for argv in (["-v", "3"], ["-v=3"], ["-v3"], ["--v=3"], ["--v", "3"]):
        assert from_argv(argv).verbosity == 3
    assert from_argv(["--oom-score-adj", "-500"]).oom_score_adj == -500
    assert from_argv(["--fail-swap-on"]).fail_swap_on is True
    for text in ("false", "0", "f", "F", "FALSE", "False"):
        assert from_argv([f"--fail-swap-on={text}"]).fail_swap_on is False
    assert from_argv(["--max-pods=0x10"]).max_pods == 16


def test_list_and_map_flags_repeat_and_the_first_use_replaces_the_default():
    cfg = from_argv(
        [
            "--enforce-node-allocatable=pods",
            "--enforce-node-allocatable",
            "system-reserved",
            "--system-reserved-cgroup=/s",
        ]
    )
    assert cfg.enforce_node_allocatable == ("pods", "system-reserved")
    cfg = from_argv(["--eviction-hard=memory.available<1Gi", "--eviction-hard=nodefs.available<5%"])
    assert cfg.eviction_hard == {"memory.available": "1Gi", "nodefs.available": "5%"}
    cfg = from_argv(["--node-labels=a=1,b=2", "--node-labels=b=3"])
    assert cfg.node_labels == {"a": "1", "b": "3"}
    cfg = from_argv(["--reserved-memory=0:memory=1Gi;1:memory=2Gi"])
    assert [r.numa_node for r in cfg.reserved_memory] == [0, 1]


def test_flag_errors():
    with pytest.raises(FlagError, match=r"unknown flag: --max-pod \(did you mean --max-pods\?\)"):
        parse_args(["--max-pod=1"])
    with pytest.raises(FlagError, match="unknown shorthand flag"):
        parse_args(["-x"])
    with pytest.raises(FlagError, match="takes no arguments"):
        parse_args(["run"])
    with pytest.raises(FlagError, match=r"flag needs an argument: --max-pods"):
        parse_args(["--max-pods"])
    with pytest.raises(FlagError, match=r'invalid value "3000000000" for flag --max-pods: value out of range'):
        parse_args(["--max-pods=3000000000"])
    with pytest.raises(FlagError, match=r"--eviction-hard: unsupported eviction signal"):
        parse_args(["--eviction-hard=cpu.available<1"])


def test_frozen_effective_configuration():
    cfg = from_argv(["--max-pods=3"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_pods = 4
    with pytest.raises(TypeError):
        cfg.eviction_hard["memory.available"] = "1Gi"
    assert isinstance(cfg.enforce_node_allocatable, tuple)


# --- precedence -----------------------------------------------------------------------


def test_flags_override_the_file_and_defaults_fill_the_rest(tmp_path):
    path = write_config(
        tmp_path,
        {
            "maxPods": 50,
            "podsPerCore": 4,
            "evictionHard": {"memory.available": "1Gi"},
            "enforceNodeAllocatable": ["pods"],
            "featureGates": {"SeccompDefault": False, "QOSReserved": True},
        },
    )
    cfg = from_argv(
        [
            "--config",
            path,
            "--max-pods=70",
            "--enforce-node-allocatable=none",
            "--feature-gates=SeccompDefault=true,MemoryQoS=true",
        ]
    )
    assert cfg.max_pods == 70 and cfg.source("max_pods") == "flag"
    assert cfg.pods_per_core == 4 and cfg.source("pods_per_core") == "file"
    assert cfg.eviction_hard == {"memory.available": "1Gi"}
    assert cfg.enforce_node_allocatable == ("none",)
    assert cfg.image_gc_high_threshold == 85 and cfg.source("image_gc_high_threshold") == "default"
    # Gates merge per gate: the flag wins for SeccompDefault, the file's QOSReserved stays.
    assert cfg.feature("SeccompDefault") is True
    assert cfg.feature("QOSReserved") is True
    assert cfg.feature("MemoryQoS") is True
    assert cfg.config_file == path
    assert cfg.explicit_flags == ("config", "max-pods", "enforce-node-allocatable", "feature-gates")


def test_config_file_defaults_are_the_secure_ones(tmp_path):
    cfg = from_argv(["--config", write_config(tmp_path, {})])
    assert cfg.read_only_port == 0
    assert cfg.anonymous_auth is False
    assert cfg.authentication_token_webhook is True
    assert cfg.authorization_mode == "Webhook"
    assert any(
        "authorization.mode (--authorization-mode): Forbidden: Webhook needs the API server" in e for e in validate(cfg)
    )
    # The flags' defaults without a file.
    cfg = from_argv([])
    assert (cfg.read_only_port, cfg.anonymous_auth, cfg.authorization_mode) == (0, True, "AlwaysAllow")


def test_relative_paths_resolve_against_the_file_directory(tmp_path, monkeypatch):
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    (conf_dir / "ca.crt").write_text("x")
    write_config(
        conf_dir,
        {
            "staticPodPath": "manifests",
            "authentication": {"x509": {"clientCAFile": "ca.crt"}},
            "resolvConf": "../resolv.conf",
            "volumePluginDir": "plugins",
        },
    )
    monkeypatch.chdir(tmp_path)
    cfg = from_argv(["--config", "etc/config.yaml", "--tls-cert-file=rel.crt", "--tls-private-key-file=rel.key"])
    assert cfg.pod_manifest_path == str(conf_dir / "manifests")
    assert cfg.client_ca_file == str(conf_dir / "ca.crt")
    assert cfg.resolv_conf == str(tmp_path / "resolv.conf")
    assert cfg.volume_plugin_dir == "plugins"  # not a path field upstream either
    assert cfg.tls_cert_file == "rel.crt"  # flags are not rewritten
    assert cfg.config_file == str(conf_dir / "config.yaml")


def test_cert_dir_follows_root_dir_unless_given():
    assert from_argv(["--root-dir=/srv/agent"]).cert_dir == "/srv/agent/pki"
    assert from_argv(["--root-dir=/srv/agent", "--cert-dir=/etc/pki"]).cert_dir == "/etc/pki"


def test_mode():
    assert from_argv([]).mode is Mode.STANDALONE
    assert from_argv(["--orchconfig=/etc/orch/x.orchconfig"]).mode is Mode.API_SERVER


# --- strict decoding ------------------------------------------------------------------


def test_unknown_and_duplicate_fields_are_all_reported(tmp_path):
    path = write_config(
        tmp_path,
        textwrap.dedent(f"""\
        kind: AgentConfiguration
        apiVersion: {API_VERSION}
        maxPods: 10
        maxPod: 11
        authentication:
          x509:
            clientCAFile: /x
            clientCertFile: /y
        maxPods: 12
        """),
    )
    with pytest.raises(ConfigError) as info:
        load_config_file(path)
    errors = info.value.errors
    assert f'{path}: line 9: duplicate field "maxPods"' in errors
    assert f'{path}: line 4: field maxPod: unknown field "maxPod"' in errors
    assert (
        f"{path}: line 8: field authentication.x509.clientCertFile: unknown field "
        f'"authentication.x509.clientCertFile"' in errors
    )
    assert len(errors) == 3


def test_json_duplicates_and_types(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(
        '{"kind": "AgentConfiguration", "apiVersion": "%s", "maxPods": 1, "maxPods": 2, '
        '"failSwapOn": "yes", "logging": {"format": "json", "format": "text"}}' % API_VERSION
    )
    with pytest.raises(ConfigError) as info:
        load_config_file(str(path))
    assert sorted(info.value.errors) == sorted(
        [
            f'{path}: duplicate field "maxPods"',
            f'{path}: duplicate field "logging.format"',
            f"{path}: field failSwapOn: expected a boolean, got a string",
        ]
    )


@pytest.mark.parametrize(
    "body,message",
    [
        ({"kind": "KubeletConfiguration"}, 'field kind: must be "AgentConfiguration"'),
        ({"apiVersion": "kubelet.config.k8s.io/v1beta1"}, f'field apiVersion: must be "{API_VERSION}"'),
        ({"maxPods": "110"}, "field maxPods: expected an integer (int32), got a string"),
        ({"maxPods": True}, "field maxPods: expected an integer (int32), got a boolean"),
        ({"syncFrequency": "1 minute"}, "field syncFrequency: time: unknown unit"),
        ({"featureGates": {"Nope": True}}, "field featureGates: unrecognized feature gate: Nope"),
        ({"evictionHard": {"memory.available": "lots"}}, "field evictionHard: memory.available: invalid quantity"),
        ({"registerWithTaints": [{"key": "a", "effect": "Never"}]}, "invalid taint effect"),
        ({"logging": "json"}, "field logging: expected an object"),
    ],
)
def test_bad_field_values_name_file_and_field(tmp_path, body, message):
    doc = {"kind": "AgentConfiguration", "apiVersion": API_VERSION, **body}
    path = tmp_path / "c.yaml"
    path.write_text(_to_yaml(doc))
    with pytest.raises(ConfigError) as info:
        load_config_file(str(path))
    assert any(e.startswith(str(path)) and message in e for e in info.value.errors), info.value.errors


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read the config file \(--config\)"):
        load_config_file(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+: invalid YAML"):
        load_config_file(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected an AgentConfiguration object"):
        load_config_file(str(bad))


def test_null_means_unset(tmp_path):
    path = write_config(tmp_path, {"maxPods": None})
    assert from_argv(["--config", path]).max_pods == 110


def test_example_config_is_valid():
    example = Path(__file__).resolve().parents[2] / "configs" / "agent" / "config.yaml"
    cfg = from_argv(["--config", str(example)])
    assert validate(cfg) == []
    assert cfg.pod_manifest_path == str(example.parent / "manifests")
    assert cfg.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"


# --- validation -------------------------------------------------------------------------


def test_all_validation_errors_are_reported_together():
    cfg = from_argv(
        [
            "--oom-score-adj=2000",
            "--image-gc-high-threshold=50",
            "--image-gc-low-threshold=60",
            "--iptables-masquerade-bit=40",
            "--container-log-max-files=1",
            "--event-qps=-1",
            "--enforce-node-allocatable=none,pods",
            "--container-runtime=docker",
        ]
    )
    errors = validate(cfg)
    expected = [
        "oomScoreAdj (--oom-score-adj): Invalid value: 2000: must be between -1000 and 1000, inclusive",
        "imageGCLowThresholdPercent (--image-gc-low-threshold): Invalid value: 60: must be less "
        "than imageGCHighThresholdPercent (--image-gc-high-threshold) 50",
        "iptablesMasqueradeBit (--iptables-masquerade-bit): Invalid value: 40: must be between 0 and 31, inclusive",
        "containerLogMaxFiles (--container-log-max-files): Invalid value: 1: must be at least 2",
        "eventRecordQPS (--event-qps): Invalid value: -1: must not be a negative number",
        'enforceNodeAllocatable (--enforce-node-allocatable): Invalid value: ["none","pods"]: '
        "'none' cannot be combined with other levels",
        '--container-runtime: Unsupported value: "docker": supported values: "remote"',
    ]
    for e in expected:
        assert e in errors, (e, errors)
    assert len(errors) == len(expected)


def test_gc_thresholds_may_not_be_equal():
    # As upstream's configuration validation: the low threshold strictly below the high one.
    assert validate(from_argv(["--image-gc-high-threshold=80", "--image-gc-low-threshold=80"])) == [
        "imageGCLowThresholdPercent (--image-gc-low-threshold): Invalid value: 80: must be less "
        "than imageGCHighThresholdPercent (--image-gc-high-threshold) 80"
    ]
    assert validate(from_argv(["--image-gc-high-threshold=1", "--image-gc-low-threshold=0"])) == []


def test_reserved_levels_need_their_cgroups():
    errors = validate(from_argv(["--enforce-node-allocatable=pods,system-reserved,orch-reserved"]))
    assert any(e.startswith("systemReservedCgroup (--system-reserved-cgroup): Required value") for e in errors)
    assert any(e.startswith("orchReservedCgroup (--orch-reserved-cgroup): Required value") for e in errors)


def test_pod_cidr_only_in_standalone_mode(tmp_path):
    conn = tmp_path / "agent.orchconfig"
    conn.write_text("apiVersion: v1\nkind: Config\n")
    assert validate(from_argv(["--pod-cidr=10.88.0.0/16"])) == []
    errors = validate(from_argv(["--pod-cidr=10.88.0.0/16", f"--orchconfig={conn}"]))
    assert errors == [
        "podCIDR (--pod-cidr): Forbidden: is only used in standalone mode; in API-server mode "
        "the control plane assigns the pod CIDR (remove it or --orchconfig)"
    ]


@pytest.mark.parametrize(
    "label,ok",
    [
        ("team=a", True),
        ("example.com/team=a", True),
        ("node.orch.io/pool=a", True),
        ("kubelet.orch.io/x=a", True),
        ("sub.node.orch.io/x=a", True),
        ("orch.io/hostname=n1", True),
        ("topology.orch.io/zone=z", True),
        ("beta.orch.io/arch=amd64", True),
        ("node.orch.io/instance-type=big", True),
        ("orch.io/role=master", False),
        ("node-restriction.orch.io/secret=x", False),
        ("foo.orch.io/x=y", False),
        ("bad key=x", False),
    ],
)
def test_node_labels_in_the_reserved_namespace(label, ok):
    errors = validate(from_argv([f"--node-labels={label}"]))
    assert (errors == []) is ok, errors
    if not ok:
        assert all(e.startswith("--node-labels:") for e in errors)


def test_logging_gates():
    errors = validate(from_argv(["--logging-format=json", "--feature-gates=LoggingBetaOptions=false"]))
    assert errors == ["logging.format (--logging-format): Forbidden: json requires feature gate LoggingBetaOptions"]
    errors = validate(from_argv(["--logging-format=json", "--log-json-split-stream"]))
    assert errors == [
        "logging.options.json.splitStream (--log-json-split-stream): Forbidden: is ALPHA and "
        "requires feature gate LoggingAlphaOptions"
    ]


def test_cfs_quota_period_needs_its_gate():
    errors = validate(from_argv(["--cpu-cfs-quota-period=50ms"]))
    assert errors == [
        'cpuCFSQuotaPeriod (--cpu-cfs-quota-period): Invalid value: "50ms": '
        "requires feature gate CustomCPUCFSQuotaPeriod"
    ]
    assert validate(from_argv(["--cpu-cfs-quota-period=50ms", "--feature-gates=CustomCPUCFSQuotaPeriod=true"])) == []


# --- feature gates ----------------------------------------------------------------------


def test_gate_table_matches_the_spec():
    assert KNOWN_GATES["SeccompDefault"] == GateSpec(Stage.BETA, True)
    assert KNOWN_GATES["AllBeta"] == GateSpec(Stage.BETA, False)
    assert KNOWN_GATES["WindowsHostNetwork"] == GateSpec(Stage.ALPHA, True)
    assert KNOWN_GATES["NodeSwap"] == GateSpec(Stage.ALPHA, False)
    assert KNOWN_GATES["InTreePluginvSphereUnregister"].stage is Stage.ALPHA
    alpha_beta = [n for n, s in KNOWN_GATES.items() if s.stage in (Stage.ALPHA, Stage.BETA)]
    assert len(alpha_beta) == 42 + 5 + 1 + 59  # the spec's four lists (8 InTreePlugin*Unregister)


def test_gate_parsing_defaults_and_all_alpha_beta():
    g = FeatureGates.parse("")
    assert g.enabled("SeccompDefault") and not g.enabled("NodeSwap")
    g = FeatureGates.parse("AllAlpha=true,NodeSwap=false")
    assert g.enabled("MemoryQoS") and not g.enabled("NodeSwap") and g.enabled("WindowsHostNetwork")
    assert g.enabled("SeccompDefault")  # beta untouched
    g = FeatureGates.parse("NodeSwap=false,AllAlpha=true")  # order does not matter
    assert not g.enabled("NodeSwap")
    g = FeatureGates.parse("AllBeta=false")
    assert not g.enabled("SeccompDefault") and not g.enabled("MemoryQoS")
    assert g.explicit == {"AllBeta": False}
    cfg = from_argv(["--feature-gates=AllBeta=false,SeccompDefault=true"])
    assert cfg.feature("SeccompDefault") and not cfg.feature("TopologyManager")
    with pytest.raises(KeyError):
        cfg.feature("NoSuchGate")


def test_gate_errors_and_warnings():
    with pytest.raises(FlagError, match=r"for flag --feature-gates: unrecognized feature gate: Bogus"):
        parse_args(["--feature-gates=Bogus=true"])
    with pytest.raises(FlagError, match=r"for flag --feature-gates: invalid value of NodeSwap=maybe"):
        parse_args(["--feature-gates=NodeSwap=maybe"])
    with pytest.raises(FlagError, match=r"missing bool value"):
        parse_args(["--feature-gates=NodeSwap"])
    with pytest.raises(ConfigError, match=r"--feature-gates: cannot set feature gate DevicePlugins to false"):
        from_argv(["--feature-gates=DevicePlugins=false"])
    cfg = from_argv(["--feature-gates=DevicePlugins=true,ExecProbeTimeout=false"])
    assert "Setting GA feature gate DevicePlugins=true. It will be removed in a future release." in cfg.warnings
    assert "Setting GA feature gate ExecProbeTimeout=false. It will be removed in a future release." in cfg.warnings
    assert not cfg.feature("ExecProbeTimeout")
    known = {"Old": GateSpec(Stage.DEPRECATED, False), "New": GateSpec(Stage.ALPHA, False)}
    g = FeatureGates({"Old": True}, known)
    assert g.warnings == ("Setting DEPRECATED feature gate Old=true. It will be removed in a future release.",)
    with pytest.raises(FeatureGateError, match="unrecognized feature gates: A, B"):
        FeatureGates({"A": True, "B": False}, known)


# --- deprecation and help ---------------------------------------------------------------


def test_deprecated_flags_work_and_warn_once():
    parsed = parse_args(
        ["--maximum-dead-containers=5", "--maximum-dead-containers=6", "--max-pods=3", "--orchconfig=/x", "-v=2"]
    )
    assert parsed.values["maximum_dead_containers"] == 6
    warnings = parsed.deprecation_warnings
    assert warnings == (
        "Flag --maximum-dead-containers has been deprecated, Use --eviction-hard or --eviction-soft instead. "
        "Will be removed in a future version.",
        "Flag --max-pods has been deprecated, This parameter should be set via the config file specified by "
        "the agent's --config flag (field maxPods).",
    )
    assert parse_args(["--max-pods=3", "--deprecation-warnings=false"]).deprecation_warnings == ()


def test_deprecation_marks():
    outright = {o.flag for o in OPTIONS if o.flag and o.deprecated and o.deprecated != CONFIG_DEPRECATION}
    assert outright == {
        "cloud-config",
        "cloud-provider",
        "container-runtime",
        "experimental-allocatable-ignore-eviction",
        "experimental-mounter-path",
        "keep-terminated-pod-volumes",
        "master-service-namespace",
        "maximum-dead-containers",
        "maximum-dead-containers-per-container",
        "minimum-container-ttl-duration",
        "pod-infra-container-image",
    }
    not_deprecated = {o.flag for o in OPTIONS if o.flag and not o.deprecated}
    assert {
        "config",
        "orchconfig",
        "bootstrap-orchconfig",
        "node-labels",
        "lock-file",
        "v",
        "vmodule",
        "root-dir",
        "cert-dir",
        "hostname-override",
        "node-ip",
        "runonce",
    } <= not_deprecated
    for o in OPTIONS:
        if o.deprecated == CONFIG_DEPRECATION:
            assert o.field


def test_help_groups_flags_and_marks_deprecated_ones():
    text = format_help()
    assert text.startswith("usage: orch-agent [flags]")
    groups = [ln for ln in text.splitlines() if ln and not ln.startswith(" ") and ln.endswith(":")]
    assert groups[:3] == ["General:", "API server connection:", "Serving and TLS:"]
    for flag in BY_FLAG:
        assert f"--{flag}" in text
    block = text.split("--maximum-dead-containers int32", 1)[1].split("\n      --", 1)[0]
    assert "(DEPRECATED: Use --eviction-hard" in " ".join(block.split())
    block = text.split("--max-pods int32", 1)[1].split("\n      --", 1)[0]
    assert "(default 110)" in block and "DEPRECATED" in block and "maxPods" in " ".join(block.split())
    assert "-v, --v int32" in text and "-h, --help" in text
