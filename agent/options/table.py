"""The node agent's flag table.

Every flag of ``orch-agent`` is declared once in :data:`OPTIONS`: its value
type, default, help group, help text, the ``AgentConfiguration`` field it
mirrors (if any), its allowed values and range, and its deprecation. The
parser (:func:`parse_args`), the config-file decoder (:mod:`agent.config`),
validation (:mod:`agent.validation`), ``--help`` and the tests all read this
one table.

Syntax follows the upstream node agent (Go pflag): ``--name=value`` or
``--name value``; booleans as ``--name`` or ``--name=false``; ``-v 2``,
``-v=2``, ``-v2`` and ``--v=2``; lists comma-separated and repeatable; maps as
``a=b,c=d`` (repeatable); eviction thresholds as ``memory.available<100Mi``;
``--manifest-url-header`` as ``Name:value``. The first use of a list or map flag
replaces its default (and the config file's value); later uses add to it.

Deprecation (the spec's rule 6): a flag that mirrors a config-file field is
deprecated in favour of the file, as upstream marks them; a few flags are
deprecated outright. Using one warns once; ``--deprecation-warnings=false``
silences the warnings.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Mapping

from apiserver_min.api import names
from apiserver_min.api.duration import parse_duration
from apiserver_min.api.quantity import parse_quantity

from ..featuregates import describe_known
from .flagtypes import (
    BOOL,
    DURATION,
    EVICTION,
    GATES,
    GRACE,
    HEADERS,
    HELP,
    INT32,
    INT64,
    MAP,
    QOS_RESERVED,
    QUANTITY,
    RECLAIM,
    RESERVED,
    RESERVED_MEMORY,
    SHUTDOWN_BY_PRIORITY,
    STRING,
    STRINGS,
    TAINTS,
    VERSION,
    VMODULE,
    ValueType,
    frozen_map,
)

# --- the table --------------------------------------------------------------------

CONFIG_DEPRECATION = "config-file"  # marker: deprecated in favour of the --config file

G_GENERAL = "General"
G_API = "API server connection"
G_TLS = "Serving and TLS"
G_AUTH = "Authentication and authorization"
G_NODE = "Node registration and status"
G_PODS = "Pod sources"
G_RUNTIME = "Container runtime and images"
G_RESOURCES = "Resources, cgroups and allocatable"
G_EVICTION = "Eviction"
G_NETWORK = "Networking and DNS"
G_VOLUMES = "Volumes"
G_PROCESS = "Process"
G_LOGGING = "Logging"
GROUPS = (
    G_GENERAL,
    G_API,
    G_TLS,
    G_AUTH,
    G_NODE,
    G_PODS,
    G_RUNTIME,
    G_RESOURCES,
    G_EVICTION,
    G_NETWORK,
    G_VOLUMES,
    G_PROCESS,
    G_LOGGING,
)

_UNSET = object()


@dataclasses.dataclass(frozen=True)
class Option:
    """One flag (or config-only field) of the node agent."""

    flag: str | None  # long name without dashes; None for config-only fields
    type: ValueType
    default: Any
    help: str
    group: str = G_GENERAL
    field: str | None = None  # AgentConfiguration path ("maxPods", "authentication.x509.clientCAFile")
    attr: str = ""  # attribute on the effective configuration
    deprecated: str | None = None  # a message, or CONFIG_DEPRECATION
    shorthand: str | None = None
    path: bool = False  # a relative path in the config file is resolved against its directory
    choices: tuple[str, ...] | None = None
    range: tuple[int | None, int | None] | None = None
    file_default: Any = _UNSET  # default when a config file is used and omits the field
    default_text: str | None = None  # how --help shows the default, when not the value itself

    @property
    def dashed(self) -> str:
        return f"--{self.flag}" if self.flag else ""

    @property
    def label(self) -> str:
        """How errors name it: ``maxPods (--max-pods)``, ``--node-labels`` or ``shutdownGracePeriod``."""
        if self.field and self.flag:
            return f"{self.field} ({self.dashed})"
        return self.field or self.dashed

    @property
    def default_for_file(self) -> Any:
        return self.default if self.file_default is _UNSET else self.file_default

    def deprecation_message(self) -> str | None:
        if self.deprecated == CONFIG_DEPRECATION:
            return (
                f"This parameter should be set via the config file specified by the agent's "
                f"--config flag (field {self.field})."
            )
        return self.deprecated


def _o(flag, type_, default, help_, group, field=None, **kw) -> Option:
    attr = kw.pop("attr", None) or (flag or "").replace("-", "_")
    if field is not None and "deprecated" not in kw and flag is not None:
        kw["deprecated"] = CONFIG_DEPRECATION
    return Option(flag, type_, default, help_, group, field, attr=attr, **kw)


def _cfg(field: str, type_, default, help_, group, attr: str, **kw) -> Option:
    """A config-file field without a flag."""
    return Option(None, type_, default, help_, group, field, attr=attr, **kw)


_D = parse_duration
_Q = parse_quantity
_M = frozen_map
_PORT = (0, 65535)

OPTIONS: tuple[Option, ...] = (
    # General
    _o(
        "config",
        STRING,
        "",
        "The agent's configuration file (an AgentConfiguration, YAML or JSON). "
        "Flags given on the command line override its values; relative paths in it are resolved "
        "against its directory.",
        G_GENERAL,
        path=False,
    ),
    _o(
        "root-dir",
        STRING,
        names.AGENT_ROOT_DIR,
        "Directory for the agent's files (volume mounts, plugin state, checkpoints).",
        G_GENERAL,
    ),
    _o(
        "runonce",
        BOOL,
        False,
        "Run the pods from the local manifests (and --manifest-url) once, then exit; needs no API server.",
        G_GENERAL,
    ),
    _o(
        "feature-gates",
        GATES,
        _M({}),
        "Comma-separated <Name>=true|false pairs turning alpha and "
        "beta features on or off. Known gates:\n" + "\n".join(describe_known()),
        G_GENERAL,
        field="featureGates",
    ),
    _o(
        "deprecation-warnings",
        BOOL,
        True,
        "Warn once about each deprecated flag used (set false to silence the warnings).",
        G_GENERAL,
    ),
    _o("version", VERSION, None, "Print version information and quit; --version=raw prints more detail.", G_GENERAL),
    _o("help", HELP, False, "Show this help and quit.", G_GENERAL, shorthand="h"),
    # API server connection
    _o(
        "orchconfig",
        STRING,
        "",
        "Connection config (orchconfig) for the API server. Giving it "
        "selects API-server mode; omitting it selects standalone mode.",
        G_API,
    ),
    _o(
        "bootstrap-orchconfig",
        STRING,
        "",
        "Connection config used to obtain a client certificate "
        "when the file at --orchconfig is missing; the result is written to --orchconfig, with key "
        "and certificate in --cert-dir.",
        G_API,
    ),
    _o(
        "orch-api-qps",
        INT32,
        5,
        "Requests per second to the API server (events and node heartbeats excluded); 0 means the default.",
        G_API,
        field="orchAPIQPS",
        range=(0, None),
    ),
    _o(
        "orch-api-burst",
        INT32,
        10,
        "Burst of requests to the API server; 0 means the default.",
        G_API,
        field="orchAPIBurst",
        range=(0, None),
    ),
    _o(
        "orch-api-content-type",
        STRING,
        names.MEDIA_PROTOBUF,
        "Content type of requests sent to the API server.",
        G_API,
        field="orchAPIContentType",
        choices=(names.MEDIA_PROTOBUF, names.MEDIA_JSON),
    ),
    _o(
        "event-qps",
        INT32,
        5,
        "Events created per second; at least 0, 0 means the default.",
        G_API,
        field="eventRecordQPS",
        range=(0, None),
    ),
    _o(
        "event-burst",
        INT32,
        10,
        "Burst of event creation; at least 0, 0 means the default.",
        G_API,
        field="eventBurst",
        range=(0, None),
    ),
    _o(
        "master-service-namespace",
        STRING,
        names.NS_DEFAULT,
        "Namespace whose control-plane services are injected into pods as environment variables.",
        G_API,
        deprecated="This flag will be removed in a future version.",
    ),
    # Serving and TLS
    _o(
        "address",
        STRING,
        "0.0.0.0",
        "IP address the agent serves on (0.0.0.0 or :: for all interfaces and families).",
        G_TLS,
        field="address",
    ),
    _o("port", INT32, 10250, "Port the agent serves on.", G_TLS, field="port", range=(1, 65535)),
    _o(
        "read-only-port",
        INT32,
        0,
        "Read-only port without TLS, authentication or authorization (/pods, /healthz, /stats/summary, "
        "/metrics); 0 disables it.",
        G_TLS,
        field="readOnlyPort",
        range=_PORT,
    ),
    _o("enable-server", BOOL, True, "Run the agent's server.", G_TLS, field="enableServer"),
    _o(
        "enable-debugging-handlers",
        BOOL,
        True,
        "Serve the endpoints for container logs and for running commands in containers.",
        G_TLS,
        field="enableDebuggingHandlers",
    ),
    _o(
        "contention-profiling",
        BOOL,
        False,
        "Lock contention profiling, when profiling is on.",
        G_TLS,
        field="enableContentionProfiling",
    ),
    _o(
        "healthz-bind-address",
        STRING,
        "127.0.0.1",
        "Address of the health server (/healthz).",
        G_TLS,
        field="healthzBindAddress",
    ),
    _o(
        "healthz-port",
        INT32,
        10248,
        "Port of the local health server; 0 disables it.",
        G_TLS,
        field="healthzPort",
        range=_PORT,
    ),
    _o(
        "cert-dir",
        STRING,
        names.AGENT_PKI_DIR,
        "Directory of the TLS certificates; ignored when --tls-cert-file and --tls-private-key-file are given.",
        G_TLS,
        default_text="<root-dir>/pki",
    ),
    _o(
        "tls-cert-file",
        STRING,
        "",
        "Serving certificate (PEM, intermediates after the leaf). "
        "Without it a self-signed pair is generated in --cert-dir.",
        G_TLS,
        field="tlsCertFile",
        path=True,
    ),
    _o(
        "tls-private-key-file",
        STRING,
        "",
        "Private key of --tls-cert-file (PEM).",
        G_TLS,
        field="tlsPrivateKeyFile",
        path=True,
    ),
    _o(
        "tls-cipher-suites",
        STRINGS,
        (),
        "Cipher suites for the server (Go names); the default set when empty.",
        G_TLS,
        field="tlsCipherSuites",
    ),
    _o(
        "tls-min-version",
        STRING,
        "",
        "Minimum TLS version: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13.",
        G_TLS,
        field="tlsMinVersion",
        choices=("", "VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"),
    ),
    _o(
        "rotate-certificates",
        BOOL,
        False,
        "Rotate the client certificate by requesting a new one from the API server as expiry nears.",
        G_TLS,
        field="rotateCertificates",
    ),
    _o(
        "rotate-server-certificates",
        BOOL,
        False,
        "Request the serving certificate from the API server (CertificateSigningRequest) and rotate it.",
        G_TLS,
        field="serverTLSBootstrap",
    ),
    # Authentication and authorization
    _o(
        "anonymous-auth",
        BOOL,
        True,
        "Serve requests no other authentication method rejects, as "
        "user system:anonymous in group system:unauthenticated. (The config file's default is "
        "false.)",
        G_AUTH,
        field="authentication.anonymous.enabled",
        file_default=False,
    ),
    _o(
        "authentication-token-webhook",
        BOOL,
        False,
        "Authenticate bearer tokens with the API server's token review API. (The config file's default is true.)",
        G_AUTH,
        field="authentication.webhook.enabled",
        file_default=True,
    ),
    _o(
        "authentication-token-webhook-cache-ttl",
        DURATION,
        _D("2m"),
        "How long token review results are cached.",
        G_AUTH,
        field="authentication.webhook.cacheTTL",
    ),
    _o(
        "client-ca-file",
        STRING,
        "",
        "CA bundle: a client certificate signed by one of these authenticates with its common name as identity.",
        G_AUTH,
        field="authentication.x509.clientCAFile",
        path=True,
    ),
    _o(
        "authorization-mode",
        STRING,
        "AlwaysAllow",
        "AlwaysAllow, or Webhook (the API server's access review API). (The config file's default is Webhook.)",
        G_AUTH,
        field="authorization.mode",
        choices=("AlwaysAllow", "Webhook"),
        file_default="Webhook",
    ),
    _o(
        "authorization-webhook-cache-authorized-ttl",
        DURATION,
        _D("5m"),
        "How long allowed access review results are cached.",
        G_AUTH,
        field="authorization.webhook.cacheAuthorizedTTL",
    ),
    _o(
        "authorization-webhook-cache-unauthorized-ttl",
        DURATION,
        _D("30s"),
        "How long denied access review results are cached.",
        G_AUTH,
        field="authorization.webhook.cacheUnauthorizedTTL",
    ),
    # Node registration and status
    _o("hostname-override", STRING, "", "Name used instead of the host name to identify the node.", G_NODE),
    _o(
        "node-ip",
        STRING,
        "",
        "IP address of the node, or a dual-stack pair (comma-separated); '::' prefers IPv6.",
        G_NODE,
    ),
    _o(
        "node-labels",
        MAP,
        _M({}),
        "Labels added when the node registers (key=value pairs). Keys "
        f"in the {names.DOMAIN} namespace must start with an allowed prefix "
        f"({', '.join(p.rstrip('/') for p in names.NODE_AGENT_LABEL_PREFIXES)}) or be one of the "
        "allowed labels.",
        G_NODE,
    ),
    _o("register-node", BOOL, True, "Register the node with the API server.", G_NODE, field="registerNode"),
    _o(
        "register-with-taints",
        TAINTS,
        (),
        "Taints the node registers with (<key>=<value>:<effect>, comma-separated).",
        G_NODE,
        field="registerWithTaints",
    ),
    _o(
        "provider-id",
        STRING,
        "",
        "Unique identifier of the node in the machine database (cloud provider).",
        G_NODE,
        field="providerID",
    ),
    _o(
        "node-status-update-frequency",
        DURATION,
        _D("10s"),
        "How often the node status is computed and posted.",
        G_NODE,
        field="nodeStatusUpdateFrequency",
    ),
    _o(
        "node-status-max-images",
        INT32,
        50,
        "Images reported in the node status; -1 means no limit.",
        G_NODE,
        field="nodeStatusMaxImages",
        range=(-1, None),
    ),
    _cfg(
        "nodeStatusReportFrequency",
        DURATION,
        _D("5m"),
        "How often the status is posted when nothing changed.",
        G_NODE,
        "node_status_report_frequency",
    ),
    _cfg(
        "nodeLeaseDurationSeconds",
        INT32,
        40,
        "Duration of the node's Lease.",
        G_NODE,
        "node_lease_duration_seconds",
        range=(1, None),
    ),
    _o(
        "cloud-provider",
        STRING,
        "",
        "Cloud provider for cloud services: empty, or 'external'.",
        G_NODE,
        choices=("", "external"),
        deprecated="Will be removed in 1.24 or later, in favor of removing cloud provider code from the agent.",
    ),
    _o(
        "cloud-config",
        STRING,
        "",
        "Path to the cloud provider configuration file.",
        G_NODE,
        deprecated="Will be removed in 1.24 or later, in favor of removing cloud provider code from the agent.",
    ),
    _o(
        "pod-cidr",
        STRING,
        "",
        "CIDR for pod IPs; standalone mode only (in API-server mode the control plane assigns it).",
        G_NODE,
        field="podCIDR",
    ),
    # Pod sources
    _o(
        "pod-manifest-path",
        STRING,
        "",
        "Directory (or file) of static pod manifests; dot-files are ignored.",
        G_PODS,
        field="staticPodPath",
        path=True,
    ),
    _o(
        "file-check-frequency",
        DURATION,
        _D("20s"),
        "How often the manifest path is checked for new data.",
        G_PODS,
        field="fileCheckFrequency",
    ),
    _o("manifest-url", STRING, "", "URL of extra pod manifests.", G_PODS, field="staticPodURL"),
    _o(
        "manifest-url-header",
        HEADERS,
        _M({}),
        "HTTP headers sent with --manifest-url requests (Name:value, comma-separated, repeatable).",
        G_PODS,
        field="staticPodURLHeader",
    ),
    _o(
        "http-check-frequency",
        DURATION,
        _D("20s"),
        "How often --manifest-url is fetched.",
        G_PODS,
        field="httpCheckFrequency",
    ),
    _o(
        "sync-frequency",
        DURATION,
        _D("1m"),
        "Maximum time between syncs of running pods and their configuration.",
        G_PODS,
        field="syncFrequency",
    ),
    _o("max-pods", INT32, 110, "Number of pods that can run on this node.", G_PODS, field="maxPods", range=(0, None)),
    _o(
        "pods-per-core",
        INT32,
        0,
        "Pods per core, capped by --max-pods; 0 disables the limit.",
        G_PODS,
        field="podsPerCore",
        range=(0, None),
    ),
    _o(
        "pod-max-pids",
        INT64,
        -1,
        "Process cap per pod; -1 means the node's capacity.",
        G_PODS,
        field="podPidsLimit",
        range=(-1, None),
    ),
    # Container runtime and images
    _o(
        "container-runtime",
        STRING,
        "remote",
        "Container runtime; only 'remote' is valid.",
        G_RUNTIME,
        choices=("remote",),
        deprecated="Will be removed in 1.27 as the only valid value is 'remote'.",
    ),
    _o(
        "container-runtime-endpoint",
        STRING,
        "",
        "Endpoint of the CRI runtime (unix socket path or "
        "unix:// URL), for example unix:///run/containerd/containerd.sock.",
        G_RUNTIME,
        field="containerRuntimeEndpoint",
    ),
    _o(
        "image-service-endpoint",
        STRING,
        "",
        "Endpoint of the CRI image service; the runtime endpoint when empty.",
        G_RUNTIME,
        field="imageServiceEndpoint",
    ),
    _o(
        "runtime-request-timeout",
        DURATION,
        _D("2m"),
        "Timeout of runtime requests except long-running ones (pull, logs, exec, attach).",
        G_RUNTIME,
        field="runtimeRequestTimeout",
    ),
    _o(
        "pod-infra-container-image",
        STRING,
        names.AGENT_PAUSE_IMAGE,
        "Image the image garbage "
        "collector never removes. The container runtime chooses and pulls the sandbox image itself "
        "(containerd's sandbox_image); the agent never pulls this one, and also keeps the runtime's "
        "own sandbox image from garbage collection.",
        G_RUNTIME,
        deprecated="Will be removed in a future release; the image garbage collector will get "
        "the sandbox image from the runtime.",
    ),
    _o("serialize-image-pulls", BOOL, True, "Pull images one at a time.", G_RUNTIME, field="serializeImagePulls"),
    _o(
        "registry-qps",
        INT32,
        5,
        "Image pulls per second; 0 means no limit.",
        G_RUNTIME,
        field="registryPullQPS",
        range=(0, None),
    ),
    _o(
        "registry-burst",
        INT32,
        10,
        "Burst of image pulls, with --registry-qps above 0.",
        G_RUNTIME,
        field="registryBurst",
        range=(0, None),
    ),
    _o(
        "image-gc-high-threshold",
        INT32,
        85,
        "Disk usage percent that always triggers image garbage collection; 0 to 100, 100 disables.",
        G_RUNTIME,
        field="imageGCHighThresholdPercent",
        range=(0, 100),
    ),
    _o(
        "image-gc-low-threshold",
        INT32,
        80,
        "Disk usage percent image garbage collection frees down to; 0 to 100, not above the high threshold.",
        G_RUNTIME,
        field="imageGCLowThresholdPercent",
        range=(0, 100),
    ),
    _o(
        "minimum-image-ttl-duration",
        DURATION,
        _D("2m"),
        "Minimum age of an unused image before garbage collection.",
        G_RUNTIME,
        field="imageMinimumGCAge",
    ),
    _o(
        "image-credential-provider-config",
        STRING,
        "",
        "Configuration file of the image credential provider plugins.",
        G_RUNTIME,
    ),
    _o(
        "image-credential-provider-bin-dir",
        STRING,
        "",
        "Directory of the image credential provider plugin binaries.",
        G_RUNTIME,
    ),
    _o(
        "azure-container-registry-config",
        STRING,
        "",
        "Path to the cloud container-registry configuration file.",
        G_RUNTIME,
    ),
    _o(
        "container-log-max-size",
        QUANTITY,
        _Q("10Mi"),
        "Size at which a container log is rotated (remote runtime only).",
        G_RUNTIME,
        field="containerLogMaxSize",
    ),
    _o(
        "container-log-max-files",
        INT32,
        5,
        "Container log files kept per container, at least 2 (remote runtime only).",
        G_RUNTIME,
        field="containerLogMaxFiles",
        range=(2, None),
    ),
    _o(
        "seccomp-default",
        BOOL,
        False,
        "Use RuntimeDefault as the default seccomp profile of all workloads.",
        G_RUNTIME,
        field="seccompDefault",
    ),
    _o(
        "streaming-connection-idle-timeout",
        DURATION,
        _D("4h"),
        "Idle timeout of streaming connections (exec, attach, port-forward).",
        G_RUNTIME,
        field="streamingConnectionIdleTimeout",
    ),
    _o(
        "maximum-dead-containers",
        INT32,
        -1,
        "Dead containers kept on the node by the container garbage collector; negative disables the limit.",
        G_RUNTIME,
        deprecated="Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    _o(
        "maximum-dead-containers-per-container",
        INT32,
        1,
        "Dead instances kept per container by the container garbage collector; negative disables the limit.",
        G_RUNTIME,
        deprecated="Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    _o(
        "minimum-container-ttl-duration",
        DURATION,
        _D("0s"),
        "Minimum age of a finished container before garbage collection.",
        G_RUNTIME,
        deprecated="Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    # Resources, cgroups and allocatable
    _o(
        "cgroup-driver",
        STRING,
        "cgroupfs",
        "cgroup driver: cgroupfs or systemd (must match the runtime's).",
        G_RESOURCES,
        field="cgroupDriver",
        choices=("cgroupfs", "systemd"),
    ),
    _o(
        "cgroup-root",
        STRING,
        "",
        "Optional root cgroup for pods (the runtime's default when empty).",
        G_RESOURCES,
        field="cgroupRoot",
    ),
    _o(
        "cgroups-per-qos",
        BOOL,
        True,
        f"Create the QoS cgroup hierarchy ({names.PODS_CGROUP}).",
        G_RESOURCES,
        field="cgroupsPerQOS",
    ),
    _o(
        "agent-cgroups",
        STRING,
        "",
        "Absolute name of the cgroup the agent moves itself into.",
        G_RESOURCES,
        field="agentCgroups",
    ),
    _o(
        "runtime-cgroups",
        STRING,
        "",
        "Absolute name of the cgroup for the container runtime.",
        G_RESOURCES,
        field="runtimeCgroups",
    ),
    _o(
        "system-cgroups",
        STRING,
        "",
        "Absolute name of the cgroup for non-kernel processes not already in a cgroup under '/'.",
        G_RESOURCES,
        field="systemCgroups",
    ),
    _o(
        "cpu-cfs-quota",
        BOOL,
        True,
        "Enforce CPU quota for containers with CPU limits.",
        G_RESOURCES,
        field="cpuCFSQuota",
    ),
    _o(
        "cpu-cfs-quota-period",
        DURATION,
        _D("100ms"),
        "CPU CFS quota period (1ms to 1s; other than 100ms needs the CustomCPUCFSQuotaPeriod gate).",
        G_RESOURCES,
        field="cpuCFSQuotaPeriod",
    ),
    _o(
        "cpu-manager-policy",
        STRING,
        "none",
        "CPU manager policy: none or static.",
        G_RESOURCES,
        field="cpuManagerPolicy",
        choices=("none", "static"),
    ),
    _o(
        "cpu-manager-policy-options",
        MAP,
        _M({}),
        "key=value options of the static CPU manager policy: full-pcpus-only (beta), "
        "distribute-cpus-across-numa and align-by-socket (alpha; CPUManagerPolicyAlphaOptions gate).",
        G_RESOURCES,
        field="cpuManagerPolicyOptions",
    ),
    _o(
        "cpu-manager-reconcile-period",
        DURATION,
        _D("10s"),
        "CPU manager reconciliation period (with a static CPU or memory manager policy).",
        G_RESOURCES,
        field="cpuManagerReconcilePeriod",
    ),
    _o(
        "memory-manager-policy",
        STRING,
        "None",
        "Memory manager policy: None or Static.",
        G_RESOURCES,
        field="memoryManagerPolicy",
        choices=("None", "Static"),
    ),
    _o(
        "topology-manager-policy",
        STRING,
        "none",
        "Topology manager policy: none, best-effort, restricted or single-numa-node.",
        G_RESOURCES,
        field="topologyManagerPolicy",
        choices=("none", "best-effort", "restricted", "single-numa-node"),
    ),
    _o(
        "topology-manager-scope",
        STRING,
        "container",
        "Scope of topology hints: container or pod.",
        G_RESOURCES,
        field="topologyManagerScope",
        choices=("container", "pod"),
    ),
    _o(
        "orch-reserved",
        RESERVED,
        _M({}),
        "Resources reserved for orch system components "
        "(cpu, memory, ephemeral-storage, pid as <name>=<quantity> pairs).",
        G_RESOURCES,
        field="orchReserved",
    ),
    _o(
        "orch-reserved-cgroup",
        STRING,
        "",
        "Absolute name of the top-level cgroup of the orch system components (needed to enforce orch-reserved).",
        G_RESOURCES,
        field="orchReservedCgroup",
    ),
    _o(
        "system-reserved",
        RESERVED,
        _M({}),
        "Resources reserved for non-orch system components (<name>=<quantity> pairs).",
        G_RESOURCES,
        field="systemReserved",
    ),
    _o(
        "system-reserved-cgroup",
        STRING,
        "",
        "Absolute name of the top-level cgroup of the system components (needed to enforce system-reserved).",
        G_RESOURCES,
        field="systemReservedCgroup",
    ),
    _o(
        "reserved-cpus",
        STRING,
        "",
        "CPUs (a cpuset such as 0-3,8) reserved for system and orch "
        "components; overrides the cpu of --system-reserved and --orch-reserved.",
        G_RESOURCES,
        field="reservedSystemCPUs",
    ),
    _o(
        "reserved-memory",
        RESERVED_MEMORY,
        (),
        "Memory reserved per NUMA node for the memory "
        "manager (<numa-node>:<resource>=<quantity>[,...], repeatable or ';'-separated).",
        G_RESOURCES,
        field="reservedMemory",
    ),
    _o(
        "enforce-node-allocatable",
        STRINGS,
        ("pods",),
        "Levels of node allocatable to enforce: "
        f"none, or any of pods, system-reserved, {names.AGENT_RESERVED_LEVEL} (the reserved levels "
        "need their cgroup flags).",
        G_RESOURCES,
        field="enforceNodeAllocatable",
    ),
    _o(
        "qos-reserved",
        QOS_RESERVED,
        _M({}),
        "Percentage of resources reserved for higher QoS classes (memory=<0-100>%; needs the QOSReserved gate).",
        G_RESOURCES,
        field="qosReserved",
    ),
    _o(
        "local-storage-capacity-isolation",
        BOOL,
        True,
        "Isolate local ephemeral storage (emptyDir, writable layers, logs).",
        G_RESOURCES,
        field="localStorageCapacityIsolation",
    ),
    _o(
        "kernel-memcg-notification",
        BOOL,
        False,
        "Use kernel memcg notifications for memory eviction thresholds instead of polling.",
        G_RESOURCES,
        field="kernelMemcgNotification",
    ),
    _o(
        "experimental-allocatable-ignore-eviction",
        BOOL,
        False,
        "Ignore hard eviction thresholds when computing node allocatable.",
        G_RESOURCES,
        deprecated="Will be removed in 1.25 or later.",
    ),
    # Eviction
    _o(
        "eviction-hard",
        EVICTION,
        _M(
            {
                "imagefs.available": "15%",
                "memory.available": "100Mi",
                "nodefs.available": "10%",
                "nodefs.inodesFree": "5%",
            }
        ),
        "Hard eviction thresholds (<signal><<quantity or percent>, comma-separated).",
        G_EVICTION,
        field="evictionHard",
    ),
    _o(
        "eviction-soft",
        EVICTION,
        _M({}),
        "Soft eviction thresholds, e.g. memory.available<1.5Gi.",
        G_EVICTION,
        field="evictionSoft",
    ),
    _o(
        "eviction-soft-grace-period",
        GRACE,
        _M({}),
        "Grace periods of the soft thresholds, e.g. memory.available=1m30s.",
        G_EVICTION,
        field="evictionSoftGracePeriod",
    ),
    _o(
        "eviction-max-pod-grace-period",
        INT32,
        0,
        "Seconds pods get to terminate on a soft threshold; negative defers to the pod's own value.",
        G_EVICTION,
        field="evictionMaxPodGracePeriod",
    ),
    _o(
        "eviction-minimum-reclaim",
        RECLAIM,
        _M({}),
        "Minimum reclaim per signal, e.g. imagefs.available=2Gi.",
        G_EVICTION,
        field="evictionMinimumReclaim",
    ),
    _o(
        "housekeeping-interval",
        DURATION,
        _D("10s"),
        "Interval between container housekeepings: how often the eviction manager reads the node's "
        "signals and acts on its thresholds.",
        G_EVICTION,
    ),
    _o(
        "eviction-pressure-transition-period",
        DURATION,
        _D("5m"),
        "Wait before leaving a pressure condition.",
        G_EVICTION,
        field="evictionPressureTransitionPeriod",
    ),
    # Networking and DNS
    _o(
        "cluster-dns",
        STRINGS,
        (),
        "DNS server IPs for pods with dnsPolicy ClusterFirst; all must serve the same records.",
        G_NETWORK,
        field="clusterDNS",
    ),
    _o(
        "cluster-domain",
        STRING,
        "",
        "Cluster search domain added to containers' resolv.conf.",
        G_NETWORK,
        field="clusterDomain",
    ),
    _o(
        "resolv-conf",
        STRING,
        "/etc/resolv.conf",
        "Resolver configuration used as the base of containers' DNS; empty disables inheritance.",
        G_NETWORK,
        field="resolvConf",
        path=True,
    ),
    _o(
        "hairpin-mode",
        STRING,
        "promiscuous-bridge",
        "Hairpin NAT mode: promiscuous-bridge, hairpin-veth or none.",
        G_NETWORK,
        field="hairpinMode",
        choices=("promiscuous-bridge", "hairpin-veth", "none"),
    ),
    _o(
        "make-iptables-util-chains",
        BOOL,
        True,
        "Ensure the iptables utility rules exist.",
        G_NETWORK,
        field="makeIPTablesUtilChains",
    ),
    _o(
        "iptables-masquerade-bit",
        INT32,
        14,
        "fwmark bit marking packets for SNAT (0 to 31; must match the network proxy).",
        G_NETWORK,
        field="iptablesMasqueradeBit",
        range=(0, 31),
    ),
    _o(
        "iptables-drop-bit",
        INT32,
        15,
        "fwmark bit marking packets to drop (0 to 31).",
        G_NETWORK,
        field="iptablesDropBit",
        range=(0, 31),
    ),
    _o(
        "proxy-mode",
        STRING,
        "nftables",
        "The node service proxy (cluster mode): nftables programs IPv4 Service cluster IPs, external IPs "
        "and node ports in the nftables table 'ip orch-proxy' (IPv6 services are not programmed; each is "
        "logged); none runs no proxy. In standalone mode there are no Services and no proxy runs.",
        G_NETWORK,
        choices=("nftables", "none"),
    ),
    _o(
        "iptables-localhost-nodeports",
        BOOL,
        True,
        "The service proxy also serves node ports on 127.0.0.0/8 to the node's own connections (as "
        "upstream kube-proxy's flag of this name): sets net.ipv4.conf.all.route_localnet=1 (put back by "
        "--proxy-cleanup when the proxy changed it) and drops new connections to 127.0.0.0/8 that did not "
        "come in on lo (CVE-2020-8558). IPv4 only: there is no IPv6 equivalent (::1 cannot be routed off "
        "the host).",
        G_NETWORK,
    ),
    _o(
        "proxy-cleanup",
        BOOL,
        False,
        "Remove the service proxy's nftables table, put back route_localnet if the proxy set it, and exit "
        "(as upstream kube-proxy --cleanup).",
        G_NETWORK,
    ),
    _o(
        "cluster-cidr",
        STRING,
        "",
        "The pods' address range (CIDR, IPv4). When set, the service proxy masquerades cluster-IP "
        "traffic from outside it, and pods' traffic to external IPs of externalTrafficPolicy Local "
        "services keeps cluster behaviour. Empty: no such masquerading.",
        G_NETWORK,
    ),
    _o(
        "allowed-unsafe-sysctls",
        STRINGS,
        (),
        "Unsafe sysctls (or patterns ending in '*') pods may set.",
        G_NETWORK,
        field="allowedUnsafeSysctls",
    ),
    # Volumes
    _o(
        "volume-plugin-dir",
        STRING,
        names.AGENT_VOLUME_PLUGIN_DIR,
        "Directory searched for third-party volume plugins.",
        G_VOLUMES,
        field="volumePluginDir",
    ),
    _o(
        "volume-stats-agg-period",
        DURATION,
        _D("1m"),
        "How often volume disk usage is computed; 0 or less disables it.",
        G_VOLUMES,
        field="volumeStatsAggPeriod",
    ),
    _o(
        "enable-controller-attach-detach",
        BOOL,
        True,
        "Let the attach/detach controller manage volume attachment; the agent does not.",
        G_VOLUMES,
        field="enableControllerAttachDetach",
    ),
    _o(
        "keep-terminated-pod-volumes",
        BOOL,
        False,
        "Keep volumes of terminated pods mounted (debugging aid); not supported on this node, only false is accepted.",
        G_VOLUMES,
        deprecated="Will be removed in a future version.",
    ),
    _o(
        "experimental-mounter-path",
        STRING,
        "mount",
        "Path of the mount binary.",
        G_VOLUMES,
        deprecated="Will be removed in 1.25 or later, in favor of using CSI.",
    ),
    # Process
    _o(
        "lock-file",
        STRING,
        "",
        "Lock file the agent holds while running (alpha); a second agent waits for it.",
        G_PROCESS,
    ),
    _o("exit-on-lock-contention", BOOL, False, "Exit when another process opens the lock file.", G_PROCESS),
    _o(
        "oom-score-adj",
        INT32,
        -999,
        "OOM score adjustment of the agent process, -1000 to 1000.",
        G_PROCESS,
        field="oomScoreAdj",
        range=(-1000, 1000),
    ),
    _o(
        "max-open-files",
        INT64,
        1000000,
        "Open-file limit of the agent process.",
        G_PROCESS,
        field="maxOpenFiles",
        range=(1, None),
    ),
    _o("fail-swap-on", BOOL, True, "Refuse to start while swap is on.", G_PROCESS, field="failSwapOn"),
    _cfg(
        "shutdownGracePeriod",
        DURATION,
        _D("0s"),
        "Time the node's shutdown is delayed to terminate pods.",
        G_PROCESS,
        "shutdown_grace_period",
    ),
    _cfg(
        "shutdownGracePeriodCriticalPods",
        DURATION,
        _D("0s"),
        "Part of shutdownGracePeriod reserved for critical pods.",
        G_PROCESS,
        "shutdown_grace_period_critical_pods",
    ),
    _cfg(
        "shutdownGracePeriodByPodPriority",
        SHUTDOWN_BY_PRIORITY,
        (),
        "Shutdown grace periods by pod priority: a list of {priority, shutdownGracePeriodSeconds}; "
        "a pod gets the entry with the highest priority not above its own (the lowest entry below it). "
        "Not with shutdownGracePeriod.",
        G_PROCESS,
        "shutdown_grace_period_by_pod_priority",
    ),
    _cfg(
        "enableProfilingHandler",
        BOOL,
        False,
        "Serve profiling endpoints; not served on this node, only false is accepted.",
        G_PROCESS,
        "enable_profiling_handler",
    ),
    _cfg(
        "enableDebugFlagsHandler",
        BOOL,
        True,
        "Serve /debug/flags/v (PUT a verbosity level), with the debugging handlers.",
        G_PROCESS,
        "enable_debug_flags_handler",
    ),
    _cfg("enableSystemLogHandler", BOOL, True, "Serve /logs.", G_PROCESS, "enable_system_log_handler"),
    _cfg(
        "protectKernelDefaults",
        BOOL,
        False,
        "Fail when kernel tunables differ from the agent's defaults instead of changing them.",
        G_PROCESS,
        "protect_kernel_defaults",
    ),
    # Logging
    _o(
        "v",
        INT32,
        0,
        "Log verbosity (0 and up).",
        G_LOGGING,
        field="logging.verbosity",
        attr="verbosity",
        shorthand="v",
        range=(0, None),
        deprecated=None,
    ),
    _o(
        "vmodule",
        VMODULE,
        (),
        "Per-module verbosity: comma-separated pattern=N (a glob over module names).",
        G_LOGGING,
        field="logging.vmodule",
        deprecated=None,
    ),
    _o(
        "log-flush-frequency",
        DURATION,
        _D("5s"),
        "Maximum time between log flushes.",
        G_LOGGING,
        field="logging.flushFrequency",
        deprecated=None,
    ),
    _o(
        "logging-format",
        STRING,
        "text",
        "Log format: text, or json (needs the LoggingBetaOptions gate).",
        G_LOGGING,
        field="logging.format",
        choices=("text", "json"),
    ),
    _o(
        "log-json-split-stream",
        BOOL,
        False,
        "In json format, write errors to stderr and info to stdout (alpha; needs the LoggingAlphaOptions gate).",
        G_LOGGING,
        field="logging.options.json.splitStream",
    ),
    _o(
        "log-json-info-buffer-size",
        QUANTITY,
        _Q("0"),
        "In json format with split streams, the "
        "buffer size of the info stream (alpha; needs the LoggingAlphaOptions gate).",
        G_LOGGING,
        field="logging.options.json.infoBufferSize",
    ),
)

BY_FLAG: Mapping[str, Option] = types.MappingProxyType({o.flag: o for o in OPTIONS if o.flag})
BY_ATTR: Mapping[str, Option] = types.MappingProxyType({o.attr: o for o in OPTIONS})
BY_FIELD: Mapping[str, Option] = types.MappingProxyType({o.field: o for o in OPTIONS if o.field})
BY_SHORTHAND: Mapping[str, Option] = types.MappingProxyType({o.shorthand: o for o in OPTIONS if o.shorthand})

assert len(BY_FLAG) == sum(1 for o in OPTIONS if o.flag), "duplicate flag"
assert len(BY_ATTR) == len(OPTIONS), "duplicate attribute"
assert len(BY_FIELD) == sum(1 for o in OPTIONS if o.field), "duplicate config field"
