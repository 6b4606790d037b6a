"""Every project-specific spelling in one place.

Upstream spells groups, labels, annotations, namespaces and media types with a
product name; here the neutral word ``orch`` stands in (see the design guide's
naming table). Nothing else in the code base writes these strings literally.
"""

DOMAIN = "orch.io"

# API groups (the core group is the empty string).
CORE_GROUP = ""
APPS_GROUP = "apps"
BATCH_GROUP = "batch"
POLICY_GROUP = "policy"
AUTOSCALING_GROUP = "autoscaling"
COORDINATION_GROUP = f"coordination.{DOMAIN}"
EVENTS_GROUP = f"events.{DOMAIN}"
DISCOVERY_GROUP = f"discovery.{DOMAIN}"
NETWORKING_GROUP = f"networking.{DOMAIN}"
CERTIFICATES_GROUP = f"certificates.{DOMAIN}"
RBAC_GROUP = f"rbac.{DOMAIN}"
NODE_GROUP = f"node.{DOMAIN}"
SCHEDULING_GROUP = f"scheduling.{DOMAIN}"
STORAGE_GROUP = f"storage.{DOMAIN}"
ADMISSIONREGISTRATION_GROUP = f"admissionregistration.{DOMAIN}"
AUTHENTICATION_GROUP = f"authentication.{DOMAIN}"
AUTHORIZATION_GROUP = f"authorization.{DOMAIN}"
# The policy file format of the ABAC authorization mode (a file format, not a served group).
ABAC_GROUP = f"abac.authorization.{DOMAIN}"
FLOWCONTROL_GROUP = f"flowcontrol.{DOMAIN}"
APIEXTENSIONS_GROUP = f"apiextensions.{DOMAIN}"
# The finalizer a CustomResourceDefinition carries until its objects are deleted.
CRD_CLEANUP_FINALIZER = f"customresourcecleanup.apiextensions.{DOMAIN}"
METRICS_GROUP = f"metrics.{DOMAIN}"
# The custom and external metrics APIs: named for the autoscaler's messages; this server serves neither.
CUSTOM_METRICS_GROUP = f"custom.metrics.{DOMAIN}"
EXTERNAL_METRICS_GROUP = f"external.metrics.{DOMAIN}"
# What an autoscaling/v1 HorizontalPodAutoscaler cannot hold in its fields, shown in
# these annotations (JSON of the autoscaling/v2 values) when read through v1.
HPA_V1_METRICS_ANNOTATION = f"autoscaling.alpha.{DOMAIN}/metrics"
HPA_V1_CURRENT_METRICS_ANNOTATION = f"autoscaling.alpha.{DOMAIN}/current-metrics"
HPA_V1_CONDITIONS_ANNOTATION = f"autoscaling.alpha.{DOMAIN}/conditions"
HPA_V1_BEHAVIOR_ANNOTATION = f"autoscaling.alpha.{DOMAIN}/behavior"
META_GROUP = f"meta.{DOMAIN}"

# Spellings upstream clients hard-code; accepted in negotiation and as group
# aliases (below), never written into our own objects.
UPSTREAM_META_GROUP = "meta.k8s.io"
UPSTREAM_AUTHORIZATION_GROUP = "authorization.k8s.io"
UPSTREAM_AUTHENTICATION_GROUP = "authentication.k8s.io"
UPSTREAM_DISCOVERY_GROUP = "apidiscovery.k8s.io"
UPSTREAM_RBAC_GROUP = "rbac.authorization.k8s.io"
UPSTREAM_CERTIFICATES_GROUP = "certificates.k8s.io"
UPSTREAM_COORDINATION_GROUP = "coordination.k8s.io"
UPSTREAM_METRICS_GROUP = "metrics.k8s.io"
# kubectl's client-side validation (the OpenAPI v2 fallback for kinds without a PATCH
# operation, such as the reviews) lists custom resource definitions at this fixed
# upstream path; this server defines none, and says so with an empty list there.
UPSTREAM_APIEXTENSIONS_GROUP = "apiextensions.k8s.io"
UPSTREAM_ENDPOINTSLICE_GROUP = "discovery.k8s.io"

# Group aliases: kubectl compiles these upstream group names into some commands
# (create role|rolebinding, certificate approve, describe node's lease, top, its CRD
# lookup, auth can-i|whoami). The router serves each as the orch group it names here:
# the same objects, authorized as the orch group, with ``apiVersion`` following the
# group the client asked for. Discovery lists only the orch groups. An alias whose
# orch group serves no kinds answers 404 like any unknown group.
GROUP_ALIASES = {
    UPSTREAM_RBAC_GROUP: RBAC_GROUP,
    UPSTREAM_CERTIFICATES_GROUP: CERTIFICATES_GROUP,
    UPSTREAM_COORDINATION_GROUP: COORDINATION_GROUP,
    UPSTREAM_AUTHORIZATION_GROUP: AUTHORIZATION_GROUP,
    UPSTREAM_AUTHENTICATION_GROUP: AUTHENTICATION_GROUP,
    UPSTREAM_APIEXTENSIONS_GROUP: APIEXTENSIONS_GROUP,
    UPSTREAM_METRICS_GROUP: METRICS_GROUP,
    # kubectl describe service (1.32) lists a Service's EndpointSlices there.
    UPSTREAM_ENDPOINTSLICE_GROUP: DISCOVERY_GROUP,
}

# Beta group versions served unless --runtime-config turns them off (other betas are off
# by default, as upstream's): the resource metrics API, which upstream's metrics server
# serves outside that rule.
BETA_SERVED_BY_DEFAULT = frozenset({f"{METRICS_GROUP}/v1beta1", f"{FLOWCONTROL_GROUP}/v1beta3"})

# Alias groups discovery also lists under their upstream name, because clients look
# for them by that name: kubectl top says the Metrics API is not available unless
# metrics.k8s.io is among the server's groups.
DISCOVERY_ALIAS_GROUPS = (UPSTREAM_METRICS_GROUP,)

# kubectl commands that check, client-side, the group of an object they read through
# discovery (which maps to the orch group): ``certificate approve|deny`` refuses any
# CertificateSigningRequest whose apiVersion is not ``certificates.k8s.io/v1``. kubectl
# names its command in the ``Kubectl-Command`` request header; for these commands the
# orch groups listed are answered in the upstream spelling, as on an alias path.
KUBECTL_COMMAND_HEADER = "Kubectl-Command"
KUBECTL_COMMAND_ALIASES = {
    "kubectl certificate approve": {CERTIFICATES_GROUP: UPSTREAM_CERTIFICATES_GROUP},
    "kubectl certificate deny": {CERTIFICATES_GROUP: UPSTREAM_CERTIFICATES_GROUP},
}

# Namespaces.
NS_DEFAULT = "default"
NS_SYSTEM = "orch-system"
NS_PUBLIC = "orch-public"
NS_NODE_LEASE = "orch-node-lease"
INITIAL_NAMESPACES = (NS_DEFAULT, NS_SYSTEM, NS_PUBLIC, NS_NODE_LEASE)
UNDELETABLE_NAMESPACES = (NS_DEFAULT, NS_SYSTEM, NS_PUBLIC)
# On an alias group's paths (GROUP_ALIASES) the upstream spellings of these namespaces
# name ours: kubectl's describe node reads its lease at coordination.k8s.io/v1,
# namespace kube-node-lease.
NAMESPACE_ALIASES = {"kube-system": NS_SYSTEM, "kube-public": NS_PUBLIC, "kube-node-lease": NS_NODE_LEASE}

# Media types.
MEDIA_JSON = "application/json"
MEDIA_YAML = "application/yaml"
MEDIA_PROTOBUF = "application/vnd.orch.protobuf"
MEDIA_PROTOBUF_UPSTREAM = "application/vnd.kubernetes.protobuf"
PROTOBUF_MEDIA_TYPES = (MEDIA_PROTOBUF, MEDIA_PROTOBUF_UPSTREAM)


def is_protobuf_media(media_type: str | None) -> bool:
    """True for either spelling of the protobuf media type (parameters ignored); here,
    not with the codec, so that a client can tell without loading it."""
    return media_type is not None and media_type.split(";", 1)[0].strip().lower() in PROTOBUF_MEDIA_TYPES


MEDIA_MERGE_PATCH = "application/merge-patch+json"
MEDIA_JSON_PATCH = "application/json-patch+json"
MEDIA_STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MEDIA_APPLY_PATCH = "application/apply-patch+yaml"
PROTOBUF_MAGIC = b"\x6b\x38\x73\x00"

# Well-known labels.
LABEL_HOSTNAME = f"{DOMAIN}/hostname"
LABEL_OS = f"{DOMAIN}/os"
LABEL_ARCH = f"{DOMAIN}/arch"
LABEL_METADATA_NAME = f"{DOMAIN}/metadata.name"
LABEL_INSTANCE_TYPE = f"node.{DOMAIN}/instance-type"
LABEL_ZONE = f"topology.{DOMAIN}/zone"
LABEL_REGION = f"topology.{DOMAIN}/region"
LABEL_SERVICE_NAME = f"{DOMAIN}/service-name"
# Label keys in the upstream spelling that select by ours in requests on an alias group's
# path: kubectl describe service asks for discovery.k8s.io EndpointSlices by
# kubernetes.io/service-name.
LABEL_ALIASES = {"kubernetes.io/service-name": LABEL_SERVICE_NAME}
LABEL_MANAGED_BY_SLICE = f"endpointslice.{DOMAIN}/managed-by"
# A Service with this label is served by the proxy it names, never by the node agent's proxy.
LABEL_SERVICE_PROXY_NAME = f"service.{DOMAIN}/service-proxy-name"
# The node service proxy's nftables table (family ip).
PROXY_NFT_TABLE = f"{DOMAIN.split('.')[0]}-proxy"
NODE_RESTRICTION_LABEL_PREFIX = f"node-restriction.{DOMAIN}/"
NODE_AGENT_LABEL_PREFIXES = (f"kubelet.{DOMAIN}/", f"node.{DOMAIN}/")

# Well-known annotations.
ANNOTATION_CONFIG_SOURCE = f"{DOMAIN}/config.source"
ANNOTATION_CONFIG_HASH = f"{DOMAIN}/config.hash"
ANNOTATION_CONFIG_SEEN = f"{DOMAIN}/config.seen"
ANNOTATION_CONFIG_MIRROR = f"{DOMAIN}/config.mirror"
ANNOTATION_INITIAL_EVENTS_END = f"{DOMAIN}/initial-events-end"
ANNOTATION_DEPRECATED = f"{DOMAIN}/deprecated"
ANNOTATION_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# Taints.
TAINT_NOT_READY = f"node.{DOMAIN}/not-ready"
TAINT_UNREACHABLE = f"node.{DOMAIN}/unreachable"
TAINT_UNSCHEDULABLE = f"node.{DOMAIN}/unschedulable"

# Finalizers.
FINALIZER_NAMESPACE = "orch"  # spec.finalizers of a Namespace
FINALIZER_ORPHAN = "orphan"
FINALIZER_FOREGROUND = "foregroundDeletion"

# Certificate signers.
SIGNER_APISERVER_CLIENT = f"{DOMAIN}/apiserver-client"
SIGNER_NODE_AGENT_CLIENT = f"{DOMAIN}/apiserver-client-node-agent"
SIGNER_NODE_AGENT_SERVING = f"{DOMAIN}/node-agent-serving"
SIGNER_LEGACY_UNKNOWN = f"{DOMAIN}/legacy-unknown"

# Bootstrap tokens.
BOOTSTRAP_TOKEN_SECRET_TYPE = f"bootstrap.{DOMAIN}/token"
BOOTSTRAP_TOKEN_SECRET_PREFIX = "bootstrap-token-"
CLUSTER_INFO_CONFIGMAP = "cluster-info"

# Users and groups (kept as upstream spells them, per the seeds).
USER_ANONYMOUS = "system:anonymous"
GROUP_UNAUTHENTICATED = "system:unauthenticated"
GROUP_AUTHENTICATED = "system:authenticated"
GROUP_MASTERS = "system:masters"
GROUP_NODES = "system:nodes"
GROUP_BOOTSTRAPPERS = "system:bootstrappers"
NODE_USER_PREFIX = "system:node:"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"
SERVICEACCOUNT_USER_PREFIX = "system:serviceaccount:"
ADMIN_USER = "orch-admin"

# Daemons, files and cgroups.
AGENT_NAME = "orch-agent"
APISERVER_NAME = "orch-apiserver"
CONNECTION_CONFIG_SUFFIX = ".orchconfig"
AGENT_ROOT_DIR = "/var/lib/orch-agent"
APISERVER_DATA_DIR = "/var/lib/orch-apiserver"
PODS_CGROUP = "orchpods"
AGENT_CONFIG_KIND = "AgentConfiguration"
AGENT_CONFIG_API_VERSION = f"agent.config.{DOMAIN}/v1beta1"
# --image-credential-provider-config (upstream's CredentialProviderConfig of kubelet.config.k8s.io) and
# the exec plugins' request/response (upstream's credentialprovider.kubelet.k8s.io).
CREDENTIAL_PROVIDER_CONFIG_KIND = "CredentialProviderConfig"
CREDENTIAL_PROVIDER_CONFIG_API_VERSIONS = tuple(f"agent.config.{DOMAIN}/{v}" for v in ("v1", "v1beta1", "v1alpha1"))
CREDENTIAL_PROVIDER_API_VERSIONS = tuple(
    f"credentialprovider.agent.{DOMAIN}/{v}" for v in ("v1", "v1beta1", "v1alpha1")
)
CREDENTIAL_PROVIDER_REQUEST_KIND = "CredentialProviderRequest"
CREDENTIAL_PROVIDER_RESPONSE_KIND = "CredentialProviderResponse"
# Device plugins register on <root-dir>/device-plugins/<AGENT_NAME>.sock (upstream's
# kubelet.sock); the allocations live in the checkpoint beside it. The pod resources
# API listens on <root-dir>/pod-resources/<AGENT_NAME>.sock.
DEVICE_PLUGIN_DIR = "device-plugins"
DEVICE_PLUGIN_AGENT_SOCKET = f"{AGENT_NAME}.sock"
DEVICE_PLUGIN_CHECKPOINT = f"{AGENT_NAME}_internal_checkpoint"
POD_RESOURCES_DIR = "pod-resources"
POD_RESOURCES_SOCKET = f"{AGENT_NAME}.sock"

# CRI labels the agent puts on what it creates, so it never touches anything else.
CRI_LABEL_POD_NAME = "io.orch.pod.name"
CRI_LABEL_POD_NAMESPACE = "io.orch.pod.namespace"
CRI_LABEL_POD_UID = "io.orch.pod.uid"
CRI_LABEL_CONTAINER_NAME = "io.orch.container.name"
CRI_LABEL_MANAGED = "io.orch.managed"

# Node agent: labels it may set on its own Node (NodeRestriction's allowed set;
# the prefixes are NODE_AGENT_LABEL_PREFIXES), including the legacy beta keys.
LABEL_OS_BETA = f"beta.{DOMAIN}/os"
LABEL_ARCH_BETA = f"beta.{DOMAIN}/arch"
LABEL_INSTANCE_TYPE_BETA = f"beta.{DOMAIN}/instance-type"
LABEL_ZONE_FAILURE_DOMAIN = f"failure-domain.beta.{DOMAIN}/zone"
LABEL_REGION_FAILURE_DOMAIN = f"failure-domain.beta.{DOMAIN}/region"
NODE_AGENT_ALLOWED_LABELS = (
    LABEL_HOSTNAME,
    LABEL_OS,
    LABEL_ARCH,
    LABEL_OS_BETA,
    LABEL_ARCH_BETA,
    LABEL_INSTANCE_TYPE,
    LABEL_INSTANCE_TYPE_BETA,
    LABEL_ZONE,
    LABEL_REGION,
    LABEL_ZONE_FAILURE_DOMAIN,
    LABEL_REGION_FAILURE_DOMAIN,
)

# Node agent: files, defaults and the reserved-level name (upstream "kube-reserved").
AGENT_PKI_DIR = f"{AGENT_ROOT_DIR}/pki"
AGENT_VOLUME_PLUGIN_DIR = "/usr/libexec/orch/agent-plugins/volume/exec/"
AGENT_PAUSE_IMAGE = "orch.local/pause:1"  # built locally by packaging/images (no registry)
AGENT_RESERVED_LEVEL = "orch-reserved"  # --enforce-node-allocatable value
AGENT_SERVICE_UNIT = "orch-agent.service"
APISERVER_SERVICE_UNIT = "orch-apiserver.service"
INSTALL_PREFIX = "/opt/orch"
INSTALL_VENV = f"{INSTALL_PREFIX}/venv"
CONFIG_DIR = "/etc/orch"
AGENT_ENV_FILE = f"{CONFIG_DIR}/orch-agent.env"
AGENT_CONFIG_FILE = f"{CONFIG_DIR}/agent/config.yaml"

# Node agent test hooks (environment variables, read once at start): a fake
# /proc/swaps for the swap probe, a file whose presence stalls the sync loop,
# and a shorter sync-loop health threshold (a Go duration).
ENV_AGENT_TEST_PROC_SWAPS = "ORCH_AGENT_TEST_PROC_SWAPS"
ENV_AGENT_TEST_STALL_FILE = "ORCH_AGENT_TEST_STALL_FILE"
ENV_AGENT_TEST_SYNC_LOOP_THRESHOLD = "ORCH_AGENT_TEST_SYNC_LOOP_THRESHOLD"
# Shorter periods of the image and container garbage collectors (Go durations; upstream's are
# fixed at 5m and 1m with no config field).
ENV_AGENT_TEST_IMAGE_GC_PERIOD = "ORCH_AGENT_TEST_IMAGE_GC_PERIOD"
ENV_AGENT_TEST_CONTAINER_GC_PERIOD = "ORCH_AGENT_TEST_CONTAINER_GC_PERIOD"

# Node agent graceful shutdown (upstream's node shutdown manager): systemd-logind's bus
# names, the delay inhibitor lock's who/why, the logind drop-in that raises
# InhibitDelayMaxSec, and the reasons and messages of pods it stops or refuses. The
# condition reason is upstream's TerminationByKubelet, renamed as the node reasons are.
LOGIND_BUS_NAME = "org.freedesktop.login1"
LOGIND_OBJECT_PATH = "/org/freedesktop/login1"
LOGIND_MANAGER_INTERFACE = "org.freedesktop.login1.Manager"
LOGIND_SERVICE_UNIT = "systemd-logind.service"
SYSTEMD_BUS_NAME = "org.freedesktop.systemd1"
SYSTEMD_OBJECT_PATH = "/org/freedesktop/systemd1"
SYSTEMD_MANAGER_INTERFACE = "org.freedesktop.systemd1.Manager"
ENV_DBUS_SYSTEM_BUS_ADDRESS = "DBUS_SYSTEM_BUS_ADDRESS"
DBUS_DEFAULT_SYSTEM_BUS_ADDRESS = "unix:path=/var/run/dbus/system_bus_socket"
SHUTDOWN_INHIBIT_WHO = AGENT_NAME
SHUTDOWN_INHIBIT_WHY = f"{AGENT_NAME} needs time to handle node shutdown"
SHUTDOWN_LOGIND_DROPIN_DIR = "/run/systemd/logind.conf.d"
SHUTDOWN_LOGIND_DROPIN_FILE = f"99-{AGENT_NAME}-shutdown.conf"
SHUTDOWN_NOT_READY_MESSAGE = "node is shutting down"
SHUTDOWN_POD_REASON = "Terminated"
SHUTDOWN_POD_MESSAGE = "Pod was terminated in response to imminent node shutdown."
SHUTDOWN_NOT_ADMITTED_REASON = "NodeShutdown"
SHUTDOWN_NOT_ADMITTED_MESSAGE = "Pod was rejected as the node is shutting down."
SHUTDOWN_EVENT_REASON = "NodeShutdown"
POD_CONDITION_DISRUPTION_TARGET = "DisruptionTarget"
POD_REASON_TERMINATION_BY_AGENT = "TerminationByAgent"
# The node's own admission: a refused pod ends Failed with the admitter's reason and this
# prefix before the admitter's message (the event carries the message alone).
POD_REJECTED_MESSAGE_PREFIX = "Pod was rejected: "

# Image pull secrets: the Secret types (upstream kubernetes.io/dockerconfigjson and
# kubernetes.io/dockercfg; the server takes both domains, as kubectl writes the upstream
# one), their data keys, the registry Docker Hub credentials are keyed under, the node's
# own Docker config files (searched in the agent's root directory, the working directory,
# $HOME and /, as upstream), and the event of a pull secret the node cannot read.
SECRET_TYPE_DOMAINS = (f"{DOMAIN}/", "kubernetes.io/")
SECRET_TYPE_DOCKER_CONFIG_JSON = f"{DOMAIN}/dockerconfigjson"
SECRET_TYPE_DOCKERCFG = f"{DOMAIN}/dockercfg"
SECRET_KEY_DOCKER_CONFIG_JSON = ".dockerconfigjson"
SECRET_KEY_DOCKERCFG = ".dockercfg"
DOCKER_DEFAULT_REGISTRY_HOST = "index.docker.io"
DOCKER_HUB_DOMAIN = "docker.io"
DOCKER_CONFIG_JSON_FILE = "config.json"
DOCKERCFG_FILE = ".dockercfg"
EVENT_FAILED_TO_RETRIEVE_PULL_SECRET = "FailedToRetrieveImagePullSecret"

# Node agent runtime: CRI annotations on the containers it creates (upstream io.kubernetes.*),
# read back after an agent restart to stop containers of pods whose spec is gone, and the
# plugin directory names of the volumes it sets up under <root>/pods/<uid>/volumes/.
CRI_LABEL_MANAGED_VALUE = "true"
CRI_ANNOTATION_CONTAINER_HASH = "io.orch.container.hash"
CRI_ANNOTATION_CONTAINER_RESTART_COUNT = "io.orch.container.restartCount"
CRI_ANNOTATION_TERMINATION_MESSAGE_PATH = "io.orch.container.terminationMessagePath"
CRI_ANNOTATION_TERMINATION_MESSAGE_POLICY = "io.orch.container.terminationMessagePolicy"
CRI_ANNOTATION_POD_DELETION_GRACE_PERIOD = "io.orch.pod.deletionGracePeriod"
CRI_ANNOTATION_POD_TERMINATION_GRACE_PERIOD = "io.orch.pod.terminationGracePeriod"
CRI_ANNOTATION_PRESTOP_HANDLER = "io.orch.container.preStopHandler"
CRI_ANNOTATION_CONTAINER_PORTS = "io.orch.container.ports"
VOLUME_PLUGIN_EMPTY_DIR = f"{DOMAIN}~empty-dir"
VOLUME_PLUGIN_CONFIGMAP = f"{DOMAIN}~configmap"
VOLUME_PLUGIN_SECRET = f"{DOMAIN}~secret"
VOLUME_PLUGIN_DOWNWARD_API = f"{DOMAIN}~downward-api"
VOLUME_PLUGIN_PROJECTED = f"{DOMAIN}~projected"
MANAGED_HOSTS_HEADER = "# orch-managed hosts file.\n"
MANAGED_HOSTS_HEADER_HOST_NETWORK = "# orch-managed hosts file (host network).\n"

# Pod validation: a resource name containing this is a native (not extended)
# resource, as upstream's "kubernetes.io/" prefix.
RESOURCE_NATIVE_PREFIX = f"{DOMAIN}/"

# Authorization (RBAC default policy, aggregation, the Node authorizer, reviews):
# upstream's kubernetes.io/bootstrapping label, rbac.authorization.kubernetes.io/autoupdate
# annotation and rbac.authorization.k8s.io/aggregate-to-* labels, in our spelling.
LABEL_RBAC_BOOTSTRAPPING = f"{DOMAIN}/bootstrapping"
LABEL_RBAC_BOOTSTRAPPING_VALUE = "rbac-defaults"
ANNOTATION_RBAC_AUTOUPDATE = f"rbac.{DOMAIN}/autoupdate"
LABEL_AGGREGATE_TO_ADMIN = f"rbac.{DOMAIN}/aggregate-to-admin"
LABEL_AGGREGATE_TO_EDIT = f"rbac.{DOMAIN}/aggregate-to-edit"
LABEL_AGGREGATE_TO_VIEW = f"rbac.{DOMAIN}/aggregate-to-view"
GROUP_SERVICEACCOUNTS = "system:serviceaccounts"
GROUP_MONITORING = "system:monitoring"
CONTROLLER_ROLE_PREFIX = "system:controller:"
ROLE_CLUSTER_ADMIN = "cluster-admin"
ROLE_NODE = "system:node"
ROLE_NODE_BOOTSTRAPPER = "system:node-bootstrapper"
ROLE_CSR_NODECLIENT = f"system:certificates.{DOMAIN}:certificatesigningrequests:nodeclient"
ROLE_CSR_SELFNODECLIENT = f"system:certificates.{DOMAIN}:certificatesigningrequests:selfnodeclient"
ROLE_CLUSTER_INFO_READER = "system:bootstrap-signer-clusterinfo"
CSR_SUBRESOURCE_NODECLIENT = "nodeclient"
CSR_SUBRESOURCE_SELFNODECLIENT = "selfnodeclient"

# The pod sub-resource that adds ephemeral containers (kubectl debug writes it).
POD_SUBRESOURCE_EPHEMERAL_CONTAINERS = "ephemeralcontainers"
SIGNERS_RESOURCE = "signers"

# Authentication (bearer tokens, service accounts, TokenRequest, the ServiceAccount
# admission plugin and the default-account / root-CA publisher): upstream's
# kubernetes.io private JWT claim, authentication.kubernetes.io/* user extras,
# kube-api-access-* volume, kube-root-ca.crt ConfigMap and kubernetes.io/* annotations,
# in our spelling. The default issuer is the in-cluster service name upstream
# installers use (https://kubernetes.default.svc.cluster.local), renamed.
DEFAULT_SERVICE_ACCOUNT_ISSUER = "https://orch.default.svc.cluster.local"
SERVICEACCOUNT_PRIVATE_CLAIM = DOMAIN
USER_EXTRA_POD_NAME = f"authentication.{DOMAIN}/pod-name"
USER_EXTRA_POD_UID = f"authentication.{DOMAIN}/pod-uid"
GROUP_SERVICEACCOUNTS_PREFIX = "system:serviceaccounts:"
GROUP_BOOTSTRAPPERS_PREFIX = "system:bootstrappers:"
DEFAULT_SERVICE_ACCOUNT = "default"
SERVICEACCOUNT_VOLUME_PREFIX = "orch-api-access-"
SERVICEACCOUNT_TOKEN_MOUNT_PATH = f"/var/run/secrets/{DOMAIN}/serviceaccount"
ROOT_CA_CONFIGMAP = "orch-root-ca.crt"
# Published in orch-system at start: the client CA and the front-proxy settings, for extension servers.
EXTENSION_AUTHENTICATION_CONFIGMAP = "extension-apiserver-authentication"
ANNOTATION_DESCRIPTION = f"{DOMAIN}/description"

# Node agent probes and lifecycle hooks: the User-Agent product names (upstream
# "kube-probe" and "kube-lifecycle").
PROBE_USER_AGENT_NAME = "orch-probe"
LIFECYCLE_USER_AGENT_NAME = "orch-lifecycle"

# Node agent node status, lease and events: the condition reasons upstream spells with its
# product name (KubeletReady, KubeletHasSufficientMemory, ...), the Node schema's field names
# that keep upstream's spelling on the wire (nodeInfo.kubeletVersion, kubeProxyVersion,
# daemonEndpoints.kubeletEndpoint) and the attach/detach annotation of a registering node.
NODE_REASON_READY = "AgentReady"
NODE_REASON_NOT_READY = "AgentNotReady"
NODE_REASON_SUFFICIENT_MEMORY = "AgentHasSufficientMemory"
NODE_REASON_INSUFFICIENT_MEMORY = "AgentHasInsufficientMemory"
NODE_REASON_NO_DISK_PRESSURE = "AgentHasNoDiskPressure"
NODE_REASON_DISK_PRESSURE = "AgentHasDiskPressure"
NODE_REASON_SUFFICIENT_PID = "AgentHasSufficientPID"
NODE_REASON_INSUFFICIENT_PID = "AgentHasInsufficientPID"
NODE_INFO_AGENT_VERSION_FIELD = "kubeletVersion"
NODE_INFO_PROXY_VERSION_FIELD = "kubeProxyVersion"
NODE_DAEMON_ENDPOINT_AGENT_FIELD = "kubeletEndpoint"
ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH = f"volumes.{DOMAIN}/controller-managed-attach-detach"

# Node agent eviction: the status reason of an evicted (or refused) pod and the node event of
# a threshold (the DisruptionTarget condition is POD_CONDITION_DISRUPTION_TARGET above).
EVICTION_REASON = "Evicted"
EVICTION_THRESHOLD_MET_REASON = "EvictionThresholdMet"

# Node lifecycle controller, scheduler and the pods/log proxy: the condition taints upstream
# spells node.kubernetes.io/<condition>, the agent port used when a Node publishes none
# (upstream's kubelet port), and the identity of the client certificate the API server
# presents to node agents (upstream's apiserver-kubelet-client).
TAINT_MEMORY_PRESSURE = f"node.{DOMAIN}/memory-pressure"
TAINT_DISK_PRESSURE = f"node.{DOMAIN}/disk-pressure"
TAINT_PID_PRESSURE = f"node.{DOMAIN}/pid-pressure"
TAINT_NETWORK_UNAVAILABLE = f"node.{DOMAIN}/network-unavailable"
AGENT_DEFAULT_PORT = 10250
APISERVER_AGENT_CLIENT_USER = f"{APISERVER_NAME}-agent-client"

# Node agent API client, TLS bootstrap, certificate rotation and join: the certificate
# pair files in --cert-dir (upstream kubelet-client-*.pem / kubelet-server-*.pem), the
# CSR name prefixes, the connection configs `join` writes under --root-dir, and the
# variable of the agent's flags in AGENT_ENV_FILE (the unit's $ORCH_AGENT_ARGS).
AGENT_CLIENT_CERT_PREFIX = f"{AGENT_NAME}-client"
AGENT_SERVER_CERT_PREFIX = f"{AGENT_NAME}-server"
CSR_NAME_PREFIX = "node-csr-"
CSR_SERVING_NAME_PREFIX = "csr-"
AGENT_ORCHCONFIG_NAME = f"agent{CONNECTION_CONFIG_SUFFIX}"
AGENT_BOOTSTRAP_ORCHCONFIG_NAME = f"bootstrap-agent{CONNECTION_CONFIG_SUFFIX}"
AGENT_ENV_ARGS_VAR = "ORCH_AGENT_ARGS"

# The node agent's HTTPS server: the key of its effective configuration at /configz
# (upstream "kubeletconfig") and the prefix of its Prometheus metrics (upstream
# "kubelet_"), e.g. orch_agent_running_pods.
AGENT_CONFIGZ_KEY = "orchagentconfig"
AGENT_METRICS_PREFIX = "orch_agent"

# Leader election of the API server's bundled controllers (upstream: the Lease
# kube-controller-manager in kube-system; one Lease here, the controllers run in one process).
CONTROLLERS_LEASE_NAME = "orch-controllers"
# The controller manager's own user, which holds that Lease (upstream: system:kube-controller-manager,
# with the ClusterRole of that name); each controller writes as its own service account.
CONTROLLER_MANAGER_USER = "system:orch-controller-manager"

# exec/attach/port-forward streams (pods/exec, pods/attach, pods/portforward through the API
# server and the node agent): the wire names of the stream subprotocols stay upstream's,
# since kubectl and the runtime's streaming server speak them.
STREAM_PROTOCOL_V5 = "v5.channel.k8s.io"
STREAM_PROTOCOL_V4 = "v4.channel.k8s.io"
# SPDY stream clients: the protocol offer/answer header, and the header naming each stream.
HEADER_STREAM_PROTOCOL_VERSION = "X-Stream-Protocol-Version"
STREAM_TYPE_HEADER = "streamType"

# The field managers (metadata.managedFields) of the API server's bundled controllers'
# writes: upstream records them under the product name of the writer's user agent,
# "kube-controller-manager" and "kube-scheduler".
CONTROLLER_MANAGER_FIELD_MANAGER = "orch-controller-manager"
SCHEDULER_FIELD_MANAGER = "orch-scheduler"
# The field manager of the API server's own writes (the default RBAC policy, the initial
# namespaces): upstream records them under its user agent's product name, "kube-apiserver".
APISERVER_FIELD_MANAGER = APISERVER_NAME  # "orch-apiserver"

# Workload controllers: a pod's cost of deletion when its controller scales down (lower goes first).
ANNOTATION_POD_DELETION_COST = f"controller.{DOMAIN}/pod-deletion-cost"

# Endpoints, EndpointSlices and service links (the endpoints, endpoint slice and mirroring
# controllers, their validation, the node agent's service environment variables): upstream's
# endpoints.kubernetes.io/*, endpointslice.kubernetes.io/*, service.kubernetes.io/headless,
# the controllers' managed-by values (*.k8s.io), the leader-election record annotation that
# keeps an Endpoints object from being mirrored. (Every pod gets the variables of the
# DEFAULT_SERVICE_NAME Service below.)
ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME = f"endpoints.{DOMAIN}/last-change-trigger-time"
ANNOTATION_ENDPOINTS_OVER_CAPACITY = f"endpoints.{DOMAIN}/over-capacity"
ANNOTATION_LEADER_ELECTION_RECORD = f"control-plane.alpha.{DOMAIN}/leader"
LABEL_HEADLESS_SERVICE = f"service.{DOMAIN}/headless"
LABEL_SKIP_MIRROR = f"endpointslice.{DOMAIN}/skip-mirror"
ENDPOINTSLICE_CONTROLLER_NAME = f"endpointslice-controller.{DOMAIN}"
ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME = f"endpointslicemirroring-controller.{DOMAIN}"

# Admission configuration and the admission plugins' spellings: the PodSecurity namespace
# labels and audit annotation prefix (upstream pod-security.kubernetes.io/), its
# configuration group (pod-security.admission.config.k8s.io), the pod annotations its
# checks read (upstream container.apparmor.security.beta.kubernetes.io/<container> and
# the seccomp.security.alpha.kubernetes.io alpha annotations), and the scheduler
# namespace annotations of PodNodeSelector and PodTolerationRestriction (upstream
# scheduler.alpha.kubernetes.io/...) with the latter's configuration group.
POD_SECURITY_PREFIX = f"pod-security.{DOMAIN}/"
POD_SECURITY_CONFIG_GROUP = f"pod-security.admission.config.{DOMAIN}"
ANNOTATION_APPARMOR_CONTAINER_PREFIX = f"container.apparmor.security.beta.{DOMAIN}/"
ANNOTATION_SECCOMP_POD = f"seccomp.security.alpha.{DOMAIN}/pod"
ANNOTATION_SECCOMP_CONTAINER_PREFIX = f"container.seccomp.security.alpha.{DOMAIN}/"
ANNOTATION_NODE_SELECTOR = f"scheduler.alpha.{DOMAIN}/node-selector"
ANNOTATION_DEFAULT_TOLERATIONS = f"scheduler.alpha.{DOMAIN}/defaultTolerations"
ANNOTATION_TOLERATIONS_WHITELIST = f"scheduler.alpha.{DOMAIN}/tolerationsWhitelist"
POD_TOLERATION_RESTRICTION_CONFIG_GROUP = f"podtolerationrestriction.admission.{DOMAIN}"

# Admission webhooks and the image policy backend: the review groups (upstream
# admission.k8s.io and imagepolicy.k8s.io), the audit annotations mutating webhooks
# leave (upstream mutation.webhook.admission.k8s.io/round_<r>_index_<i> and
# patch.webhook.admission.k8s.io/...), and the pod annotations ImagePolicyWebhook
# passes to its backend (keys of the form <anything>.image-policy.k8s.io/<anything>).
ADMISSION_GROUP = f"admission.{DOMAIN}"
IMAGEPOLICY_GROUP = f"imagepolicy.{DOMAIN}"
WEBHOOK_MUTATION_ANNOTATION_PREFIX = f"mutation.webhook.admission.{DOMAIN}/"
WEBHOOK_PATCH_ANNOTATION_PREFIX = f"patch.webhook.admission.{DOMAIN}/"
IMAGE_POLICY_ANNOTATION_DOMAIN = f".image-policy.{DOMAIN}/"
IMAGE_POLICY_FAILED_OPEN_ANNOTATION = f"alpha.image-policy.{DOMAIN}/failed-open"
IMAGE_POLICY_AUDIT_PREFIX = f"imagepolicywebhook.image-policy.{DOMAIN}/"

# The Service every API server publishes itself behind (upstream's "kubernetes" Service in
# "default", labelled provider=kubernetes), with its Endpoints and EndpointSlice.
DEFAULT_SERVICE_NAME = "orch"
DEFAULT_SERVICE_PROVIDER = "orch"

# The built-in PriorityClasses every API server creates at start (upstream's system
# priority classes): name -> value. Other classes may not use the ``system-`` prefix
# nor a value above HIGHEST_USER_DEFINABLE_PRIORITY.
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
SYSTEM_CRITICAL_PRIORITY = 2 * 1_000_000_000
SYSTEM_NODE_CRITICAL = "system-node-critical"
SYSTEM_CLUSTER_CRITICAL = "system-cluster-critical"
SYSTEM_PRIORITY_CLASSES = {
    SYSTEM_NODE_CRITICAL: SYSTEM_CRITICAL_PRIORITY + 1000,
    SYSTEM_CLUSTER_CRITICAL: SYSTEM_CRITICAL_PRIORITY,
}
SYSTEM_PRIORITY_CLASS_DESCRIPTIONS = {
    SYSTEM_NODE_CRITICAL: "Used for system critical pods that must not be moved from their current node.",
    SYSTEM_CLUSTER_CRITICAL: "Used for system critical pods that must run in the cluster, but can be moved to "
    "another node if necessary.",
}
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000

# Jobs and cron jobs (upstream: batch.kubernetes.io/...). The unprefixed job labels are
# the legacy spellings upstream 1.27 still puts on a job's pods beside the prefixed ones.
BATCH_PREFIX = f"batch.{DOMAIN}"
LABEL_JOB_NAME = f"{BATCH_PREFIX}/job-name"
LABEL_JOB_CONTROLLER_UID = f"{BATCH_PREFIX}/controller-uid"
LABEL_JOB_NAME_LEGACY = "job-name"
LABEL_JOB_CONTROLLER_UID_LEGACY = "controller-uid"
ANNOTATION_JOB_COMPLETION_INDEX = f"{BATCH_PREFIX}/job-completion-index"
ANNOTATION_CRONJOB_SCHEDULED_TIMESTAMP = f"{BATCH_PREFIX}/cronjob-scheduled-timestamp"
FINALIZER_JOB_TRACKING = f"{BATCH_PREFIX}/job-tracking"

# DaemonSets and StatefulSets: the label naming a pod's (and a ControllerRevision's) revision
# hash, the DaemonSet's template generation (label on its pods, annotation on the set), and
# the label naming a StatefulSet pod (upstream statefulset.kubernetes.io/pod-name).
LABEL_CONTROLLER_REVISION_HASH = "controller-revision-hash"
LABEL_POD_TEMPLATE_GENERATION = "pod-template-generation"
ANNOTATION_DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
LABEL_STATEFULSET_POD_NAME = f"statefulset.{DOMAIN}/pod-name"

# Deployments: the label that tells a Deployment's ReplicaSets (and their pods) apart, valued by
# a hash of the pod template (upstream's, unprefixed); the revision annotations on a Deployment
# and its ReplicaSets keep upstream's spelling because kubectl reads them (``rollout history``
# and ``rollout undo`` find revisions by them); the replica-count annotations are ours.
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"
ANNOTATION_DEPLOYMENT_REVISION = "deployment.kubernetes.io/revision"
ANNOTATION_DEPLOYMENT_REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS = f"deployment.{DOMAIN}/desired-replicas"
ANNOTATION_DEPLOYMENT_MAX_REPLICAS = f"deployment.{DOMAIN}/max-replicas"

# Persistent volumes, their binder, the scheduler's volume binding and the bundled
# local-path provisioner: upstream's pv.kubernetes.io/*, volume.kubernetes.io/*,
# volume.beta.kubernetes.io/* and storageclass.kubernetes.io/* annotations, and the
# provisioner name, class and directory of k3s's local-path provisioner, renamed
# (rancher.io/local-path, /var/lib/rancher/k3s/storage).
ANNOTATION_BIND_COMPLETED = f"pv.{DOMAIN}/bind-completed"
ANNOTATION_BOUND_BY_CONTROLLER = f"pv.{DOMAIN}/bound-by-controller"
ANNOTATION_PROVISIONED_BY = f"pv.{DOMAIN}/provisioned-by"
ANNOTATION_STORAGE_PROVISIONER = f"volume.{DOMAIN}/storage-provisioner"
ANNOTATION_STORAGE_PROVISIONER_BETA = f"volume.beta.{DOMAIN}/storage-provisioner"
ANNOTATION_SELECTED_NODE = f"volume.{DOMAIN}/selected-node"
ANNOTATION_STORAGE_CLASS_BETA = f"volume.beta.{DOMAIN}/storage-class"
ANNOTATION_DEFAULT_STORAGE_CLASS = f"storageclass.{DOMAIN}/is-default-class"
ANNOTATION_DEFAULT_STORAGE_CLASS_BETA = f"storageclass.beta.{DOMAIN}/is-default-class"
NO_PROVISIONER = f"{DOMAIN}/no-provisioner"
LOCAL_PATH_PROVISIONER = f"{DOMAIN}/local-path"
LOCAL_PATH_STORAGE_CLASS = "local-path"
LOCAL_PATH_DIR = "/var/lib/orch/storage"
# The image of the provisioner's helper pods, which remove a deleted volume's directory
# on its node (k3s: a busybox image); the local image packaging/images builds.
LOCAL_PATH_HELPER_IMAGE = "orch.local/busybox:1"
LOCAL_PATH_HELPER_POD_PREFIX = "helper-pod-delete-"
LABEL_LOCAL_PATH_HELPER = f"local-path.{DOMAIN}/volume"
# Storage object in-use protection (upstream kubernetes.io/pvc-protection and kubernetes.io/pv-protection).
FINALIZER_PVC_PROTECTION = f"{DOMAIN}/pvc-protection"
FINALIZER_PV_PROTECTION = f"{DOMAIN}/pv-protection"
# The finalizer a provisioner keeps on the volumes it must delete (upstream's
# external-provisioner.volume.kubernetes.io/finalizer): a volume deleted by hand while
# bound still has its storage removed once released.
FINALIZER_PROVISIONER = f"external-provisioner.volume.{DOMAIN}/finalizer"

# Ingress and IngressClass (upstream kubernetes.io/ingress.class, the legacy class annotation,
# and ingressclass.kubernetes.io/is-default-class, which DefaultIngressClass reads).
ANNOTATION_INGRESS_CLASS = f"{DOMAIN}/ingress.class"
ANNOTATION_IS_DEFAULT_INGRESS_CLASS = f"ingressclass.{DOMAIN}/is-default-class"

# EventRateLimit's configuration group (upstream eventratelimit.admission.k8s.io).
EVENT_RATE_LIMIT_CONFIG_GROUP = f"eventratelimit.admission.{DOMAIN}"
# The groups of the admission configuration file and of plugins' configurations in it
# (upstream apiserver.config.k8s.io), and ResourceQuota's older one (upstream
# resourcequota.admission.k8s.io).
APISERVER_CONFIG_GROUP = f"apiserver.config.{DOMAIN}"
RESOURCE_QUOTA_CONFIG_GROUP = f"resourcequota.admission.{DOMAIN}"
# A claim's class in the beta annotation (upstream volume.beta.kubernetes.io/storage-class),
# which wins over spec.storageClassName where set.
ANNOTATION_BETA_STORAGE_CLASS = f"volume.beta.{DOMAIN}/storage-class"

# Encryption at rest: values a provider encrypted start with this, then the provider
# name, "v1", the key's name and a colon. Upstream's spelling is kept on purpose: it
# marks bytes in storage, never an API string, and tools that recognise encrypted
# values look for it.
ENCRYPTED_VALUE_PREFIX = "k8s:enc:"

# Audit logging: the group of the Policy file and of the events (upstream audit.k8s.io),
# the annotations the server itself puts on events, and the request/response header.
AUDIT_GROUP = f"audit.{DOMAIN}"
AUDIT_VERSION = "v1"
AUDIT_API_VERSION = f"{AUDIT_GROUP}/{AUDIT_VERSION}"
AUDIT_ID_HEADER = "Audit-ID"
AUDIT_DECISION_ANNOTATION = f"authorization.{DOMAIN}/decision"
AUDIT_REASON_ANNOTATION = f"authorization.{DOMAIN}/reason"
AUDIT_DEPRECATED_ANNOTATION = f"{DOMAIN}/deprecated"

# API priority and fairness (flowcontrol.orch.io, upstream flowcontrol.apiserver.k8s.io).
FLOWCONTROL_VERSION = "v1beta3"
# Whether the server keeps a bootstrap FlowSchema's / PriorityLevelConfiguration's spec
# up to date (upstream: apf.kubernetes.io/autoupdate-spec).
APF_AUTOUPDATE_ANNOTATION = f"apf.{DOMAIN}/autoupdate-spec"
# The response headers naming the matched objects (upstream: X-Kubernetes-PF-*).
APF_FLOWSCHEMA_UID_HEADER = "X-Orch-PF-FlowSchema-UID"
APF_PRIORITY_LEVEL_UID_HEADER = "X-Orch-PF-PriorityLevel-UID"
# Mandatory priority levels and flow schemas (always present, spec always restored).
APF_EXEMPT = "exempt"
APF_CATCH_ALL = "catch-all"
# Suggested priority levels (kept while their autoupdate annotation allows).
APF_PL_SYSTEM = "system"
APF_PL_NODE_HIGH = "node-high"
APF_PL_LEADER_ELECTION = "leader-election"
APF_PL_WORKLOAD_HIGH = "workload-high"
APF_PL_WORKLOAD_LOW = "workload-low"
APF_PL_GLOBAL_DEFAULT = "global-default"
# Suggested flow schemas (upstream names with kube → orch).
APF_FS_SYSTEM_NODES = "system-nodes"
APF_FS_SYSTEM_NODE_HIGH = "system-node-high"
APF_FS_PROBES = "probes"
APF_FS_SYSTEM_LEADER_ELECTION = "system-leader-election"
APF_FS_ENDPOINT_CONTROLLER = "endpoint-controller"
APF_FS_WORKLOAD_LEADER_ELECTION = "workload-leader-election"
APF_FS_CONTROLLER_MANAGER = "orch-controller-manager"
APF_FS_SCHEDULER = "orch-scheduler"
APF_FS_SYSTEM_SERVICE_ACCOUNTS = "orch-system-service-accounts"
APF_FS_SERVICE_ACCOUNTS = "service-accounts"
APF_FS_GLOBAL_DEFAULT = "global-default"
# The scheduler's user (upstream: system:kube-scheduler) and the endpoint controllers'
# service accounts that the suggested flow schemas name.
SCHEDULER_USER = "system:orch-scheduler"
APF_ENDPOINT_CONTROLLER_ACCOUNTS = ("endpoint-controller", "endpointslicemirroring-controller")
# Field selector paths on which the watch cache indexes watchers (upstream's cacher
# triggers: a node's name, a pod's node), so an event is offered only to the watchers
# whose selector pins that field to its value.
FIELD_METADATA_NAME = "metadata.name"
FIELD_SPEC_NODE_NAME = "spec.nodeName"
WATCH_TRIGGER_FIELDS = (FIELD_METADATA_NAME, FIELD_SPEC_NODE_NAME)
