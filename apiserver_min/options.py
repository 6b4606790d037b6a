"""Command-line options of ``orch-apiserver``: parsing, defaults and validation.

Every flag is declared once here; bad values fail at start with a message
naming the flag and what is wrong, before anything is created on disk.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import types
import urllib.parse
from typing import Mapping, Sequence

from .admission import config as admission_config
from .admission.plugins import CONFIGURABLE_NAMES, check_plugin_configs, resolve_plugins
from .api import names
from .api.duration import DurationError, parse_duration
from .api.featuregates import FeatureGateError, FeatureGates, GateSpec, Stage, describe_known
from .api.kinds import REGISTRY
from .audit.logbackend import MODES as AUDIT_MODES
from .audit.logbackend import LogOptions as AuditLogOptions
from .audit.policy import Policy as AuditPolicy
from .audit.policy import PolicyError as AuditPolicyError
from .audit.policy import load_policy as load_audit_policy
from .audit.webhook import WebhookConfigError as AuditWebhookConfigError
from .audit.webhook import WebhookOptions as AuditWebhookOptions
from .audit.webhook import load_webhook_config as load_audit_webhook_config
from .authz.abac import Policy as AbacPolicy
from .authz.abac import PolicyFileError as AbacPolicyFileError
from .authz.abac import load_policy_file as load_abac_policies
from .authz.authorizer import parse_modes
from .authz.webhook import VERSIONS as AUTHZ_WEBHOOK_VERSIONS
from .authz.webhook import load_config as load_authz_webhook_config
from .hostaddr import AddressError, advertise_address
from .storage import encryption
from .version import __version__
from .webhookclient.orchconfig import Target as WebhookTarget
from .webhookclient.orchconfig import WebhookConfigError


class OptionsError(ValueError):
    pass


# Feature gates the API server knows, with their stage and default (the shared
# mechanism in api/featuregates.py applies the rules: unknown gates are an error,
# GA gates are locked on and warn when set).
FEATURE_GATES: Mapping[str, GateSpec] = types.MappingProxyType(
    {
        "AllAlpha": GateSpec(Stage.ALPHA, False),
        "AllBeta": GateSpec(Stage.BETA, False),
        "APIListChunking": GateSpec(Stage.GA, True, locked=True),
        "WatchList": GateSpec(Stage.ALPHA, False),
        "WatchBookmark": GateSpec(Stage.GA, True, locked=True),
        "ServerSideApply": GateSpec(Stage.GA, True, locked=True),
        "ServerSideFieldValidation": GateSpec(Stage.GA, True, locked=True),
        "APIPriorityAndFairness": GateSpec(Stage.BETA, True),
        "ConsistentListFromCache": GateSpec(Stage.ALPHA, False),
        "ComponentSLIs": GateSpec(Stage.BETA, True),
    }
)


@dataclasses.dataclass(frozen=True)
class Options:
    data_dir: str
    bind_address: str
    secure_port: int
    storage_backend: str
    etcd_servers: tuple[str, ...]
    etcd_prefix: str
    tls_cert_file: str
    tls_private_key_file: str
    client_ca_file: str
    runtime_config: dict[str, bool]
    livez_grace_period: float
    shutdown_delay_duration: float
    shutdown_watch_termination_grace_period: float
    feature_gates: FeatureGates
    advertise_address: str
    min_request_timeout: int
    watch_bookmark_interval: float
    max_request_body_bytes: int
    verbosity: int
    warnings: tuple[str, ...] = ()
    # The address the orch Service's endpoints list: --advertise-address, else the bind address
    # unless unspecified or loopback, else the default-route interface's (hostaddr.py).
    endpoint_address: str = ""
    # API priority and fairness (server/flowcontrol/), or the plain in-flight limits without it.
    enable_priority_and_fairness: bool = True
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    # Authorization and admission (defaults as upstream, see auth/authz.py and server/admission.py).
    authorization_modes: tuple[str, ...] = ("Node", "RBAC")
    # The ABAC mode's policies (authz/abac.py) and the Webhook mode's backend (authz/webhook.py).
    authorization_policy_file: str = ""
    authorization_policies: tuple[AbacPolicy, ...] = ()
    authorization_webhook_config_file: str = ""
    authorization_webhook: WebhookTarget | None = None
    authorization_webhook_version: str = "v1"
    authorization_webhook_cache_authorized_ttl: float = 300.0
    authorization_webhook_cache_unauthorized_ttl: float = 30.0
    # --request-timeout: the longest a non-long-running request may take.
    request_timeout: float = 60.0
    admission_plugins: tuple[str, ...] = dataclasses.field(default_factory=lambda: _admission_plugins("", ""))
    admission_control_config_file: str = ""
    admission_config: admission_config.AdmissionConfig = dataclasses.field(
        default_factory=admission_config.AdmissionConfig
    )
    default_not_ready_toleration_seconds: int = 300
    default_unreachable_toleration_seconds: int = 300
    # Encryption at rest (storage/encryption.py): the file, and the transformers it gives.
    encryption_provider_config: str = ""
    encryption: encryption.Transformers | None = None
    # Authentication (see auth/authn.py; defaults as upstream).
    anonymous_auth: bool = True
    token_auth_file: str = ""
    enable_bootstrap_token_auth: bool = False
    service_account_key_files: tuple[str, ...] = ()
    service_account_signing_key_file: str = ""
    service_account_issuers: tuple[str, ...] = (names.DEFAULT_SERVICE_ACCOUNT_ISSUER,)
    service_account_lookup: bool = True
    service_account_max_token_expiration: float = 0.0
    api_audiences: tuple[str, ...] = (names.DEFAULT_SERVICE_ACCOUNT_ISSUER,)
    # OpenID Connect (authn/oidc.py): off while oidc_issuer_url is empty.
    oidc_issuer_url: str = ""
    oidc_client_id: str = ""
    oidc_username_claim: str = "sub"
    oidc_username_prefix: str = ""
    oidc_groups_claim: str = ""
    oidc_groups_prefix: str = ""
    oidc_required_claims: tuple[tuple[str, str], ...] = ()
    oidc_ca_file: str = ""
    oidc_signing_algs: tuple[str, ...] = ("RS256",)
    # Webhook token authentication (authn/webhook.py): off while the config file is empty.
    authentication_token_webhook_config_file: str = ""
    authentication_token_webhook_cache_ttl: float = 120.0
    authentication_token_webhook_version: str = "v1"
    # Front-proxy authentication (authn/requestheader.py): off while the CA file is empty.
    requestheader_client_ca_file: str = ""
    requestheader_allowed_names: tuple[str, ...] = ()
    requestheader_username_headers: tuple[str, ...] = ()
    requestheader_group_headers: tuple[str, ...] = ()
    requestheader_extra_headers_prefix: tuple[str, ...] = ()
    # Bundled certificate controllers (see server/csrcontrollers.py): the signing lifetime,
    # the signing CA files (empty: the cluster CA) per built-in signer, serving auto-approval.
    cluster_signing_duration: float = 365 * 24 * 3600.0
    cluster_signing_files: tuple[tuple[str, str, str], ...] = ()  # (signer name, cert file, key file)
    auto_approve_node_serving_certificates: bool = False
    # Node lifecycle controller and scheduler (see server/nodelifecycle.py, server/scheduler.py).
    node_monitor_period: float = 5.0
    node_monitor_grace_period: float = 40.0
    node_startup_grace_period: float = 60.0
    # How often the resource quota controller recounts every quota.
    resource_quota_sync_period: float = 300.0
    # How long an Event is kept after its last write (upstream's --event-ttl).
    event_ttl: float = 3600.0
    enable_scheduler: bool = True
    # The horizontal pod autoscaler controller (upstream's --horizontal-pod-autoscaler-* flags).
    horizontal_pod_autoscaler_sync_period: float = 15.0
    horizontal_pod_autoscaler_tolerance: float = 0.1
    horizontal_pod_autoscaler_cpu_initialization_period: float = 300.0
    horizontal_pod_autoscaler_initial_readiness_delay: float = 30.0
    horizontal_pod_autoscaler_downscale_stabilization: float = 300.0
    # The endpoint slice controllers (controllers/endpointslice.py, endpointslicemirroring.py).
    max_endpoints_per_slice: int = 100
    mirroring_max_endpoints_per_subset: int = 1000
    # The resource metrics API (metrics.orch.io): how often node agents are scraped.
    metric_resolution: float = 15.0
    # Leader election of the bundled controllers among API servers sharing one etcd.
    leader_elect: bool = True
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0
    # --workers: API server processes sharing the secure port (server/workers.py).
    workers: int = 1
    # Services: the cluster-IP ranges (one, or two of different families) and the node-port range.
    service_cluster_ip_ranges: tuple[str, ...] = ("10.96.0.0/12",)
    service_node_port_range: tuple[int, int] = (30000, 2768)  # (first port, number of ports)
    # The bundled local-path provisioner (controllers/localpath.py, k3s's local-path provisioner).
    local_path_provisioner: bool = True
    local_path_dir: str = names.LOCAL_PATH_DIR
    local_path_helper_image: str = names.LOCAL_PATH_HELPER_IMAGE
    # Audit logging (--audit-policy-file, --audit-log-*): no policy, no auditing.
    audit_policy: AuditPolicy | None = None
    audit_log: AuditLogOptions | None = None
    audit_webhook: AuditWebhookOptions | None = None

    def feature(self, name: str) -> bool:
        return name in self.feature_gates and self.feature_gates.enabled(name)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=names.APISERVER_NAME,
        description="The orch API server: the control plane's HTTP API on SQLite (default) or etcd.",
        epilog="Sub-commands: 'orch-apiserver token create|list|delete' manage bootstrap tokens.",
    )
    p.add_argument("--version", action="version", version=f"{names.APISERVER_NAME} v{__version__}")
    g = p.add_argument_group("generic")
    g.add_argument(
        "--data-dir",
        default=names.APISERVER_DATA_DIR,
        help="Directory for the SQLite database, generated certificates and the admin "
        "connection config (default %(default)s).",
    )
    g.add_argument(
        "--advertise-address",
        default="",
        help="Address advertised to members of the cluster: the orch Service's endpoints list it "
        "(default: the bind address, or when that is unspecified or loopback the address of the "
        "interface holding the default route). May not be loopback, link-local or unspecified.",
    )
    g.add_argument(
        "--min-request-timeout",
        default="1800",
        help="Minimum watch timeout in seconds; watches last between this and twice it "
        "unless timeoutSeconds is given (default %(default)s).",
    )
    g.add_argument(
        "--enable-priority-and-fairness",
        default="true",
        help="Classify requests into priority levels by FlowSchemas and share the server's seats fairly "
        "between flows (flowcontrol.orch.io); false: plain in-flight limits (default %(default)s).",
    )
    g.add_argument(
        "--max-requests-inflight",
        default="400",
        help="Read-only requests in flight at most (without priority and fairness), or with it, together "
        "with --max-mutating-requests-inflight, the seats priority levels share; 0: no limit (default %(default)s).",
    )
    g.add_argument(
        "--max-mutating-requests-inflight",
        default="200",
        help="Mutating requests in flight at most (without priority and fairness); 0: no limit (default %(default)s).",
    )
    g.add_argument(
        "--request-timeout",
        default="1m0s",
        help="How long a request may take before it is answered 504 (watches, exec, attach, "
        "port-forward, proxy and logs excepted); a request's ?timeout= may lower it (default %(default)s).",
    )
    g.add_argument(
        "--max-request-body-bytes",
        default=str(3 * 1024 * 1024),
        help="Largest accepted request body in bytes (default %(default)s).",
    )
    g.add_argument(
        "--feature-gates",
        default="",
        help="Comma-separated key=true|false pairs. Known gates: " + ", ".join(describe_known(FEATURE_GATES)),
    )
    g.add_argument(
        "--runtime-config",
        default="",
        help="Comma-separated <group>/<version>[=true|false] (or api/all, api/alpha, "
        "api/beta) enabling or disabling group versions.",
    )
    g.add_argument("-v", "--v", dest="verbosity", default="0", help="Log verbosity (0-10).")
    s = p.add_argument_group("secure serving")
    s.add_argument(
        "--bind-address", default="0.0.0.0", help="Address to listen on for the secure port (default %(default)s)."
    )
    s.add_argument("--secure-port", default="6443", help="HTTPS port (default %(default)s).")
    s.add_argument(
        "--workers",
        default="1",
        help="API server processes sharing the secure port (SO_REUSEPORT), each with its own watch cache "
        "over the shared etcd; a supervisor restarts them and passes signals on. More than 1 needs "
        "--storage-backend=etcd3 (default %(default)s).",
    )
    s.add_argument(
        "--tls-cert-file", default="", help="Serving certificate (PEM). Generated under DATA_DIR/pki when omitted."
    )
    s.add_argument("--tls-private-key-file", default="", help="Key of --tls-cert-file (PEM).")
    a = p.add_argument_group("authentication")
    a.add_argument(
        "--client-ca-file",
        default="",
        help="CA bundle whose client certificates authenticate (CN = user, O = groups). "
        "Defaults to the generated cluster CA.",
    )
    a.add_argument(
        "--anonymous-auth",
        nargs="?",
        const="true",
        default="true",
        help="Requests no authenticator claims become user system:anonymous, group "
        "system:unauthenticated (default true); false answers them 401. A bad credential "
        "is always 401.",
    )
    a.add_argument(
        "--token-auth-file",
        default="",
        help='Static bearer tokens: a CSV file of token,user,uid[,"group1,group2"] lines; '
        "read at start (changes need a restart).",
    )
    a.add_argument(
        "--enable-bootstrap-token-auth",
        nargs="?",
        const="true",
        default="false",
        help="Accept bootstrap tokens (<id>.<secret>, from bootstrap-token-<id> secrets of type "
        f"{names.BOOTSTRAP_TOKEN_SECRET_TYPE} in {names.NS_SYSTEM}) as bearer tokens "
        "(default false).",
    )
    a.add_argument(
        "--service-account-key-file",
        action="append",
        default=[],
        help="PEM file of RSA or ECDSA public or private keys that verify service-account "
        "tokens (repeatable). Default: the signing key's public key, plus "
        "--tls-private-key-file when given.",
    )
    a.add_argument(
        "--service-account-signing-key-file",
        default="",
        help="PEM private key (RSA or ECDSA) that signs service-account tokens (TokenRequest). "
        "When neither this nor --service-account-key-file is given, one is generated "
        "on first start at DATA_DIR/pki/sa.key (mode 0600) and kept.",
    )
    a.add_argument(
        "--service-account-issuer",
        action="append",
        default=[],
        help="Issuer (iss) of service-account tokens (repeatable): the first signs new tokens, "
        "all are accepted. Default " + names.DEFAULT_SERVICE_ACCOUNT_ISSUER + ".",
    )
    a.add_argument(
        "--service-account-lookup",
        nargs="?",
        const="true",
        default="true",
        help="Refuse service-account tokens whose account, pod or secret is gone (default true).",
    )
    a.add_argument(
        "--service-account-max-token-expiration",
        default="0s",
        help="Longest lifetime a TokenRequest may get; longer requests are cut to it "
        "(default 0s: no limit beyond the API's 2^32 seconds).",
    )
    a.add_argument(
        "--api-audiences",
        action="append",
        default=[],
        help="Audiences of this API (comma list, repeatable): service-account tokens must be "
        "bound to one of them. Default: the first --service-account-issuer.",
    )
    a.add_argument("--oidc-issuer-url", default="", help="HTTPS URL of the one trusted OpenID Connect issuer.")
    a.add_argument("--oidc-client-id", default="", help="The client ID ID tokens must be issued for (aud).")
    a.add_argument(
        "--oidc-username-claim",
        default="sub",
        help="The claim that is the user name (default sub); claims other than email get a prefix.",
    )
    a.add_argument(
        "--oidc-username-prefix",
        default="",
        help="Prefix of OIDC user names; '-' disables it. Unset: '<issuer URL>#' unless the claim is email.",
    )
    a.add_argument("--oidc-groups-claim", default="", help="The claim holding the user's groups (string or list).")
    a.add_argument("--oidc-groups-prefix", default="", help="Prefix of OIDC group names.")
    a.add_argument(
        "--oidc-required-claim",
        action="append",
        default=[],
        help="key=value a token must carry (comma list, repeatable).",
    )
    a.add_argument("--oidc-ca-file", default="", help="CA bundle of the issuer's web certificate; default host roots.")
    a.add_argument(
        "--oidc-signing-algs",
        action="append",
        default=[],
        help="Accepted signing algorithms (comma list, repeatable; default RS256).",
    )
    a.add_argument(
        "--authentication-token-webhook-config-file",
        default="",
        help="An orchconfig naming the HTTPS backend that reviews bearer tokens (TokenReview).",
    )
    a.add_argument(
        "--authentication-token-webhook-cache-ttl",
        default=None,
        help="How long the webhook's answers are cached (default 2m).",
    )
    a.add_argument(
        "--authentication-token-webhook-version",
        default=None,
        help="The TokenReview version sent to the webhook: v1 (default) or v1beta1.",
    )
    a.add_argument(
        "--requestheader-client-ca-file",
        default="",
        help="CA bundle of the front proxy's client certificates; without it the request headers are never trusted.",
    )
    a.add_argument(
        "--requestheader-allowed-names",
        action="append",
        default=[],
        help="Common names the front proxy's certificate may have (comma list, repeatable; empty: any).",
    )
    a.add_argument(
        "--requestheader-username-headers",
        action="append",
        default=[],
        help="Headers naming the user, first non-empty wins (comma list, repeatable), e.g. X-Remote-User.",
    )
    a.add_argument(
        "--requestheader-group-headers",
        action="append",
        default=[],
        help="Headers naming the user's groups (comma list, repeatable), e.g. X-Remote-Group.",
    )
    a.add_argument(
        "--requestheader-extra-headers-prefix",
        action="append",
        default=[],
        help="Header prefixes of the user's extra attributes (comma list, repeatable), e.g. X-Remote-Extra-.",
    )
    z = p.add_argument_group("authorization and admission")
    z.add_argument(
        "--authorization-mode",
        default="Node,RBAC",
        help="Ordered comma list of authorizers: AlwaysAllow, AlwaysDeny, ABAC, Webhook, RBAC, Node "
        "(default %(default)s). The first to allow or deny decides; members of "
        "system:masters are always allowed.",
    )
    z.add_argument(
        "--authorization-policy-file",
        default="",
        help="The ABAC mode's policies: one JSON Policy per line (needs ABAC in --authorization-mode).",
    )
    z.add_argument(
        "--authorization-webhook-config-file",
        default="",
        help="The Webhook mode's backend: an orchconfig naming its HTTPS URL, CA and the credentials "
        "this server presents (needs Webhook in --authorization-mode).",
    )
    z.add_argument(
        "--authorization-webhook-version",
        default=None,
        help="The SubjectAccessReview version sent to the backend: v1 or v1beta1 (default v1).",
    )
    z.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        default=None,
        help="How long the backend's allowed answers are cached (default 5m0s).",
    )
    z.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        default=None,
        help="How long the backend's other answers are cached (default 30s).",
    )
    z.add_argument(
        "--enable-admission-plugins",
        default="",
        help="Admission plugins to enable in addition to the default ones (comma list; order does not matter).",
    )
    z.add_argument(
        "--disable-admission-plugins",
        default="",
        help="Admission plugins to disable, default ones included (comma list).",
    )
    z.add_argument(
        "--admission-control-config-file",
        default="",
        help="AdmissionConfiguration file (YAML or JSON) giving admission plugins their "
        "configuration, inline or by path (relative to the file's directory).",
    )
    z.add_argument(
        "--default-not-ready-toleration-seconds",
        default="300",
        help="tolerationSeconds DefaultTolerationSeconds gives new pods for the not-ready taint.",
    )
    z.add_argument(
        "--default-unreachable-toleration-seconds",
        default="300",
        help="tolerationSeconds DefaultTolerationSeconds gives new pods for the unreachable taint.",
    )
    au = p.add_argument_group("auditing")
    au.add_argument(
        "--audit-policy-file", default="", help="Audit Policy file (YAML or JSON); without it nothing is audited."
    )
    au.add_argument("--audit-log-path", default="", help="Write audit events to this file ('-': standard output).")
    au.add_argument("--audit-log-maxage", default="0", help="Days to keep rotated audit logs (0: no limit).")
    au.add_argument("--audit-log-maxbackup", default="0", help="Rotated audit logs to keep (0: all).")
    au.add_argument(
        "--audit-log-maxsize", default="0", help="Megabytes an audit log grows to before rotation (0: never)."
    )
    au.add_argument("--audit-log-format", default="json", help="Format of the audit log lines: json.")
    au.add_argument("--audit-log-mode", default="blocking", help="batch, blocking or blocking-strict.")
    au.add_argument("--audit-log-batch-buffer-size", default="10000", help="Events buffered in batch mode.")
    au.add_argument("--audit-log-batch-max-size", default="1", help="Most events in one batch.")
    au.add_argument("--audit-log-batch-max-wait", default="0s", help="Longest wait before a partial batch is written.")
    au.add_argument("--audit-webhook-config-file", default="", help="orchconfig file naming the audit webhook.")
    au.add_argument("--audit-webhook-mode", default="batch", help="batch (requests never wait for the webhook).")
    au.add_argument("--audit-webhook-batch-buffer-size", default="10000", help="Events buffered for the webhook.")
    au.add_argument("--audit-webhook-batch-max-size", default="400", help="Most events in one webhook batch.")
    au.add_argument(
        "--audit-webhook-batch-max-wait", default="30s", help="Longest wait before a partial batch is sent."
    )
    au.add_argument("--audit-webhook-initial-backoff", default="10s", help="Wait before the first retry of a batch.")
    e = p.add_argument_group("storage")
    e.add_argument("--storage-backend", default="sqlite", help="sqlite (default) or etcd3.")
    e.add_argument(
        "--etcd-servers",
        default="",
        help="Comma-separated etcd client URLs (http://host:port), with --storage-backend=etcd3.",
    )
    e.add_argument("--etcd-prefix", default="/registry", help="Key prefix in etcd (default %(default)s).")
    e.add_argument(
        "--encryption-provider-config",
        default="",
        help="EncryptionConfiguration file (YAML or JSON): which resources are encrypted in "
        "storage, by which providers (identity, aescbc, aesgcm, secretbox) and keys.",
    )
    c = p.add_argument_group("certificate controllers")
    c.add_argument(
        "--cluster-signing-duration",
        default="8760h",
        help="Longest lifetime of certificates the built-in signers issue; a request's "
        "spec.expirationSeconds may ask for less (default %(default)s).",
    )
    c.add_argument(
        "--cluster-signing-cert-file",
        default="",
        help="PEM CA certificate the built-in signers sign with (default: the cluster CA, "
        "DATA_DIR/pki/ca.crt). Given with --cluster-signing-key-file.",
    )
    c.add_argument("--cluster-signing-key-file", default="", help="PEM private key of --cluster-signing-cert-file.")
    for flag, signer in _SIGNER_FILE_FLAGS:
        c.add_argument(
            f"--cluster-signing-{flag}-cert-file",
            default="",
            help=f"CA certificate for the {signer} signer only (with the matching key file; "
            "not together with --cluster-signing-cert-file).",
        )
        c.add_argument(f"--cluster-signing-{flag}-key-file", default="", help=f"Key for the {signer} signer only.")
    c.add_argument(
        "--auto-approve-node-serving-certificates",
        nargs="?",
        const="true",
        default="false",
        help=f"Approve {names.SIGNER_NODE_AGENT_SERVING} requests a node makes for itself when "
        "every subject-alt-name is one of the node's reported addresses (default false: "
        "serving certificates need an approver).",
    )
    lifecycle = p.add_argument_group("lifecycle")
    lifecycle.add_argument(
        "--livez-grace-period",
        default="0s",
        help="Time after start during which /livez does not fail for post-start hooks.",
    )
    lifecycle.add_argument(
        "--shutdown-delay-duration",
        default="0s",
        help="On SIGTERM, /readyz fails for this long before the server stops accepting.",
    )
    lifecycle.add_argument(
        "--shutdown-watch-termination-grace-period",
        default="0s",
        help="How long in-flight watches get to drain on shutdown.",
    )
    lifecycle.add_argument("--watch-bookmark-interval", default="60s", help=argparse.SUPPRESS)
    n = p.add_argument_group("node lifecycle and scheduling")
    n.add_argument(
        "--node-monitor-period",
        default="5s",
        help="How often the node lifecycle controller checks node heartbeats (default %(default)s).",
    )
    n.add_argument(
        "--node-monitor-grace-period",
        default="40s",
        help="How long a node may stay silent (no Lease renewal, no Ready heartbeat) before its "
        "conditions become Unknown and it is tainted unreachable (default %(default)s).",
    )
    n.add_argument(
        "--node-startup-grace-period",
        default="1m",
        help="How long a new node may go without posting a Ready condition (default %(default)s).",
    )
    n.add_argument(
        "--resource-quota-sync-period",
        default="5m",
        help="How often the resource quota controller recounts the usage of every quota (default %(default)s).",
    )
    n.add_argument(
        "--event-ttl",
        default="1h",
        help="How long an Event is kept after it was last written (default %(default)s).",
    )
    n.add_argument(
        "--enable-scheduler",
        nargs="?",
        const="true",
        default="true",
        help="Run the bundled scheduler, which binds pods naming default-scheduler (default true).",
    )
    eps = p.add_argument_group("endpoint slices")
    eps.add_argument(
        "--max-endpoints-per-slice",
        default="100",
        help="The most endpoints the endpoint slice controller puts in one EndpointSlice, "
        "1 to 1000 (default %(default)s).",
    )
    eps.add_argument(
        "--mirroring-max-endpoints-per-subset",
        default="1000",
        help="The most addresses of one Endpoints subset the mirroring controller puts in an "
        "EndpointSlice, 1 to 1000 (default %(default)s).",
    )
    n.add_argument(
        "--metric-resolution",
        default="15s",
        help="How often the resource metrics API (metrics.orch.io, kubectl top) scrapes the node agents' "
        "/metrics/resource; CPU usage is the rate over the last two scrapes (default %(default)s).",
    )
    hpa = p.add_argument_group("horizontal pod autoscaler")
    hpa.add_argument(
        "--horizontal-pod-autoscaler-sync-period",
        default="15s",
        help="How often the horizontal pod autoscaler controller reconciles each autoscaler (default %(default)s).",
    )
    hpa.add_argument(
        "--horizontal-pod-autoscaler-tolerance",
        default="0.1",
        help="How far the ratio of a metric to its target may stray from 1.0 before the autoscaler "
        "scales (default %(default)s).",
    )
    hpa.add_argument(
        "--horizontal-pod-autoscaler-cpu-initialization-period",
        default="5m",
        help="After a pod starts, how long its CPU samples count only once it is ready and a full "
        "sample window passed since (default %(default)s).",
    )
    hpa.add_argument(
        "--horizontal-pod-autoscaler-initial-readiness-delay",
        default="30s",
        help="After a pod starts, how long readiness changes are taken as its initial readiness (default %(default)s).",
    )
    hpa.add_argument(
        "--horizontal-pod-autoscaler-downscale-stabilization",
        default="5m",
        help="How far back the autoscaler looks for the highest recommendation before scaling down, "
        "for autoscalers whose behavior does not set a scale-down window (default %(default)s).",
    )
    sv = p.add_argument_group("services")
    sv.add_argument(
        "--service-cluster-ip-range",
        default="10.96.0.0/12",
        help="CIDR the cluster IPs of Services come from; two CIDRs of different IP families, "
        "comma-separated, make the cluster dual-stack (the first is the default family). The "
        "first address goes to the 'orch' Service (default %(default)s).",
    )
    sv.add_argument(
        "--service-node-port-range",
        default="30000-32767",
        help="Port range (inclusive, FIRST-LAST or FIRST+COUNT) node ports of NodePort and "
        "LoadBalancer Services come from (default %(default)s).",
    )
    lp = p.add_argument_group("local volumes")
    lp.add_argument(
        "--local-path-provisioner",
        nargs="?",
        const="true",
        default="true",
        help=f"Run the bundled local-path provisioner and create its default StorageClass "
        f"{names.LOCAL_PATH_STORAGE_CLASS} (provisioner {names.LOCAL_PATH_PROVISIONER}) when absent (default true).",
    )
    lp.add_argument(
        "--local-path-dir",
        default=names.LOCAL_PATH_DIR,
        help="The directory on each node under which local-path volumes are made (default %(default)s).",
    )
    lp.add_argument(
        "--local-path-helper-image",
        default=names.LOCAL_PATH_HELPER_IMAGE,
        help="The image of the helper pods that remove deleted local-path volumes' directories on their "
        "nodes; it needs rm (default %(default)s).",
    )
    le = p.add_argument_group("leader election of the bundled controllers")
    le.add_argument(
        "--leader-elect",
        nargs="?",
        const="true",
        default="true",
        help="With the etcd3 backend, run the controllers (scheduler, node lifecycle, certificate "
        "signing, garbage collection, ...) only in the API server holding the Lease "
        f"{names.NS_SYSTEM}/{names.CONTROLLERS_LEASE_NAME}, so that several API servers on one "
        "etcd do not act twice. A SQLite server is the only one on its data and always runs "
        "them (default %(default)s).",
    )
    le.add_argument(
        "--leader-elect-lease-duration",
        default="15s",
        help="How long other candidates wait after the last renewal before taking over (default %(default)s).",
    )
    le.add_argument(
        "--leader-elect-renew-deadline",
        default="10s",
        help="How long the leader keeps trying to renew before it stops its controllers; less "
        "than the lease duration (default %(default)s).",
    )
    le.add_argument(
        "--leader-elect-retry-period",
        default="2s",
        help="How often candidates try to acquire and the leader renews (default %(default)s).",
    )
    return p


def _duration_seconds(flag: str, value: str) -> float:
    try:
        seconds = parse_duration(value).total_seconds()
    except DurationError as exc:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: {exc}") from None
    if seconds < 0:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: must not be negative")
    return seconds


def _etcd_url_ok(url: str) -> bool:
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port
    except ValueError:  # a port that is not a number or out of range
        return False
    return u.scheme in ("http", "https") and bool(u.hostname) and port is not None and u.path in ("", "/")


def _int(flag: str, value: str, lo: int, hi: int) -> int:
    try:
        n = int(value, 10)
    except ValueError:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: not an integer") from None
    if not lo <= n <= hi:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: must be between {lo} and {hi}")
    return n


def parse_bool(flag: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "t", "yes"):
        return True
    if v in ("false", "0", "f", "no"):
        return False
    raise OptionsError(f"invalid value {value!r} for flag {flag}: expected true or false")


def parse_runtime_config(value: str) -> dict[str, bool]:
    """``group/version[=bool]`` entries; ``api/all``, ``api/alpha``, ``api/beta`` toggle many."""
    out: dict[str, bool] = {}
    if not value.strip():
        return out
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, raw = part.partition("=")
        enabled = parse_bool(f"--runtime-config ({key})", raw) if sep else True
        segments = key.split("/")
        if key in ("api/all", "api/alpha", "api/beta", "api/ga"):
            out[key] = enabled
        elif key == "v1" or key == "api/v1":
            out["v1"] = enabled
        elif len(segments) in (2, 3) and all(segments):
            out[key] = enabled
        else:
            raise OptionsError(
                f"invalid value {value!r} for flag --runtime-config: {key!r} is not "
                "<group>/<version>[/<resource>], api/all, api/alpha or api/beta"
            )
    return out


def parse(argv: Sequence[str]) -> Options:
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    warnings: list[str] = []
    backend = ns.storage_backend.strip()
    if backend not in ("sqlite", "etcd3"):
        raise OptionsError(f"invalid value {backend!r} for flag --storage-backend: must be sqlite or etcd3")
    etcd_servers = tuple(s.strip().rstrip("/") for s in ns.etcd_servers.split(",") if s.strip())
    if backend == "etcd3" and not etcd_servers:
        raise OptionsError("--etcd-servers must be given with --storage-backend=etcd3")
    for url in etcd_servers:
        if not _etcd_url_ok(url):
            raise OptionsError(f"invalid value {url!r} for flag --etcd-servers: expected http://HOST:PORT")
    try:
        ipaddress.ip_address(ns.bind_address)
    except ValueError:
        raise OptionsError(f"invalid value {ns.bind_address!r} for flag --bind-address: not an IP address") from None
    if ns.advertise_address:
        try:
            advertised = ipaddress.ip_address(ns.advertise_address)
        except ValueError:
            raise OptionsError(
                f"invalid value {ns.advertise_address!r} for flag --advertise-address: not an IP address"
            ) from None
        if advertised.is_loopback or advertised.is_link_local or advertised.is_unspecified:
            raise OptionsError(
                f"invalid value {ns.advertise_address!r} for flag --advertise-address: may not be a loopback, "
                "link-local or unspecified address (the orch Service's endpoints cannot list it)"
            )
        endpoint_address = ns.advertise_address
    else:
        try:
            endpoint_address = advertise_address(ns.bind_address)
        except AddressError as exc:
            raise OptionsError(str(exc)) from None
    if bool(ns.tls_cert_file) != bool(ns.tls_private_key_file):
        raise OptionsError("--tls-cert-file and --tls-private-key-file must be given together")
    for flag, path in (
        ("--tls-cert-file", ns.tls_cert_file),
        ("--tls-private-key-file", ns.tls_private_key_file),
        ("--client-ca-file", ns.client_ca_file),
    ):
        if path and not os.path.isfile(path):
            raise OptionsError(f"invalid value {path!r} for flag {flag}: no such file")
    if not ns.etcd_prefix.startswith("/"):
        raise OptionsError(f"invalid value {ns.etcd_prefix!r} for flag --etcd-prefix: must start with '/'")
    try:
        gates = FeatureGates.parse(ns.feature_gates, FEATURE_GATES)
    except FeatureGateError as exc:
        raise OptionsError(f"invalid value {ns.feature_gates!r} for flag --feature-gates: {exc}") from None
    warnings += gates.warnings
    plugins = _admission_plugins(ns.enable_admission_plugins, ns.disable_admission_plugins)
    return Options(
        data_dir=ns.data_dir,
        bind_address=ns.bind_address,
        secure_port=_int("--secure-port", ns.secure_port, 1, 65535),
        storage_backend=backend,
        etcd_servers=etcd_servers,
        etcd_prefix=ns.etcd_prefix.rstrip("/") or "/registry",
        tls_cert_file=ns.tls_cert_file,
        tls_private_key_file=ns.tls_private_key_file,
        client_ca_file=ns.client_ca_file,
        runtime_config=parse_runtime_config(ns.runtime_config),
        livez_grace_period=_duration_seconds("--livez-grace-period", ns.livez_grace_period),
        shutdown_delay_duration=_duration_seconds("--shutdown-delay-duration", ns.shutdown_delay_duration),
        shutdown_watch_termination_grace_period=_duration_seconds(
            "--shutdown-watch-termination-grace-period", ns.shutdown_watch_termination_grace_period
        ),
        feature_gates=gates,
        advertise_address=ns.advertise_address,
        endpoint_address=endpoint_address,
        min_request_timeout=_int("--min-request-timeout", ns.min_request_timeout, 1, 86400),
        watch_bookmark_interval=_duration_seconds("--watch-bookmark-interval", ns.watch_bookmark_interval),
        max_request_body_bytes=_int("--max-request-body-bytes", ns.max_request_body_bytes, 1024, 1 << 30),
        verbosity=_int("-v", ns.verbosity, 0, 10),
        **_flow_control_options(ns),
        warnings=tuple(warnings),
        request_timeout=_request_timeout(ns.request_timeout),
        **_authorization_options(ns),
        admission_plugins=plugins,
        admission_control_config_file=ns.admission_control_config_file,
        admission_config=_admission_config(ns.admission_control_config_file, plugins),
        encryption_provider_config=ns.encryption_provider_config,
        encryption=_encryption(ns.encryption_provider_config),
        default_not_ready_toleration_seconds=_int(
            "--default-not-ready-toleration-seconds", ns.default_not_ready_toleration_seconds, 0, 1 << 31
        ),
        default_unreachable_toleration_seconds=_int(
            "--default-unreachable-toleration-seconds", ns.default_unreachable_toleration_seconds, 0, 1 << 31
        ),
        **_authentication_options(ns),
        **_certificate_options(ns),
        **_node_lifecycle_options(ns),
        **_autoscaler_options(ns),
        service_cluster_ip_ranges=parse_service_cidrs(ns.service_cluster_ip_range),
        service_node_port_range=parse_port_range("--service-node-port-range", ns.service_node_port_range),
        **_local_path_options(ns),
        **_audit_options(ns),
        workers=_workers(ns, backend),
    )


def _flow_control_options(ns: argparse.Namespace) -> dict:
    enabled = parse_bool("--enable-priority-and-fairness", ns.enable_priority_and_fairness)
    read_only = _int("--max-requests-inflight", ns.max_requests_inflight, 0, 1 << 20)
    mutating = _int("--max-mutating-requests-inflight", ns.max_mutating_requests_inflight, 0, 1 << 20)
    if enabled and read_only + mutating <= 0:
        raise OptionsError(
            "--max-requests-inflight plus --max-mutating-requests-inflight must be positive with "
            "--enable-priority-and-fairness (they are the seats the priority levels share)"
        )
    return {
        "enable_priority_and_fairness": enabled,
        "max_requests_inflight": read_only,
        "max_mutating_requests_inflight": mutating,
    }


def _workers(ns: argparse.Namespace, backend: str) -> int:
    """--workers: more than one process only over etcd. The SQLite backend keeps its
    revision counter and its watch feed in the one process that holds the database
    (opened in exclusive locking mode), so a second process could neither write nor see
    the first one's changes."""
    n = _int("--workers", ns.workers, 1, 64)
    if n > 1 and backend != "etcd3":
        raise OptionsError(
            f"--workers={n} needs --storage-backend=etcd3: the sqlite backend serves one process only "
            "(its revision counter and watch events live in the process holding the database)"
        )
    if n > 1 and not parse_bool("--leader-elect", ns.leader_elect):
        raise OptionsError(
            f"--workers={n} needs --leader-elect=true: every worker runs the bundled controllers, "
            "and only leader election keeps them to one active copy"
        )
    return n


def _audit_options(ns: argparse.Namespace) -> dict:
    if ns.audit_log_format != "json":
        raise OptionsError(f"invalid value {ns.audit_log_format!r} for flag --audit-log-format: only json is supported")
    if ns.audit_log_mode not in AUDIT_MODES:
        raise OptionsError(
            f"invalid value {ns.audit_log_mode!r} for flag --audit-log-mode: must be one of {', '.join(AUDIT_MODES)}"
        )
    log_opts = AuditLogOptions(
        path=ns.audit_log_path,
        max_age_days=_int("--audit-log-maxage", ns.audit_log_maxage, 0, 1 << 20),
        max_backups=_int("--audit-log-maxbackup", ns.audit_log_maxbackup, 0, 1 << 20),
        max_size_mb=_int("--audit-log-maxsize", ns.audit_log_maxsize, 0, 1 << 20),
        mode=ns.audit_log_mode,
        batch_buffer_size=_int("--audit-log-batch-buffer-size", ns.audit_log_batch_buffer_size, 1, 1 << 24),
        batch_max_size=_int("--audit-log-batch-max-size", ns.audit_log_batch_max_size, 1, 1 << 20),
        batch_max_wait=_duration_seconds("--audit-log-batch-max-wait", ns.audit_log_batch_max_wait),
    )
    policy = None
    if ns.audit_policy_file:
        try:
            policy = load_audit_policy(ns.audit_policy_file)
        except AuditPolicyError as exc:
            raise OptionsError(f"invalid value {ns.audit_policy_file!r} for flag --audit-policy-file: {exc}") from None
    webhook = None
    if ns.audit_webhook_mode != "batch":
        raise OptionsError(
            f"invalid value {ns.audit_webhook_mode!r} for flag --audit-webhook-mode: only batch is supported "
            "(requests never wait for the audit webhook)"
        )
    wait = _duration_seconds("--audit-webhook-batch-max-wait", ns.audit_webhook_batch_max_wait)
    backoff = _duration_seconds("--audit-webhook-initial-backoff", ns.audit_webhook_initial_backoff)
    buffer_size = _int("--audit-webhook-batch-buffer-size", ns.audit_webhook_batch_buffer_size, 1, 1 << 24)
    max_size = _int("--audit-webhook-batch-max-size", ns.audit_webhook_batch_max_size, 1, 1 << 20)
    if ns.audit_webhook_config_file:
        try:
            target = load_audit_webhook_config(ns.audit_webhook_config_file)
        except AuditWebhookConfigError as exc:
            raise OptionsError(
                f"invalid value {ns.audit_webhook_config_file!r} for flag --audit-webhook-config-file: {exc}"
            ) from None
        webhook = AuditWebhookOptions(target, buffer_size, max_size, wait, backoff)
    return {
        "audit_policy": policy,
        "audit_log": log_opts if ns.audit_log_path else None,
        "audit_webhook": webhook,
    }


def parse_service_cidrs(value: str) -> tuple[str, ...]:
    """One CIDR, or two of different families (dual-stack), in canonical form."""
    flag = "--service-cluster-ip-range"
    parts = [p.strip() for p in value.split(",")]
    if not value.strip() or any(not p for p in parts):
        raise OptionsError(f"invalid value {value!r} for flag {flag}: expected one CIDR or two comma-separated CIDRs")
    if len(parts) > 2:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: may be at most two CIDRs (one per IP family)")
    nets = []
    for part in parts:
        try:
            net = ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise OptionsError(f"invalid value {value!r} for flag {flag}: {part!r} is not a CIDR") from None
        if "/" not in part:
            raise OptionsError(f"invalid value {value!r} for flag {flag}: {part!r} is not a CIDR (no prefix length)")
        usable = net.num_addresses - (2 if net.version == 4 else 1)
        if usable < 1:
            raise OptionsError(f"invalid value {value!r} for flag {flag}: {part} holds no usable address")
        if net.version == 6 and net.prefixlen < 108:
            raise OptionsError(
                f"invalid value {value!r} for flag {flag}: the IPv6 range {part} is too large (prefix at least /108)"
            )
        if net.version == 4 and net.prefixlen < 12:
            raise OptionsError(
                f"invalid value {value!r} for flag {flag}: the IPv4 range {part} is too large (prefix at least /12)"
            )
        nets.append(net)
    if len(nets) == 2 and nets[0].version == nets[1].version:
        raise OptionsError(
            f"invalid value {value!r} for flag {flag}: two CIDRs must be of different IP families (dual-stack)"
        )
    return tuple(str(n) for n in nets)


def parse_port_range(flag: str, value: str) -> tuple[int, int]:
    """``FIRST-LAST`` (inclusive), ``FIRST+COUNT`` or a single port: (first, count)."""
    text = value.strip()
    try:
        if "+" in text:
            a, b = text.split("+", 1)
            first, count = int(a), int(b) + 1
        elif "-" in text:
            a, b = text.split("-", 1)
            first, count = int(a), int(b) - int(a) + 1
        else:
            first, count = int(text), 1
    except ValueError:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: expected FIRST-LAST, e.g. 30000-32767") from None
    if first < 1 or count < 1 or first + count - 1 > 65535:
        raise OptionsError(
            f"invalid value {value!r} for flag {flag}: must be a non-empty range of ports between 1 and 65535"
        )
    return first, count


def _local_path_options(ns: argparse.Namespace) -> dict:
    """The local-path provisioner's switch, directory (absolute, not the root) and helper image."""
    directory = ns.local_path_dir.strip()
    if not directory.startswith("/") or os.path.normpath(directory) == "/":
        raise OptionsError(
            f"invalid value {ns.local_path_dir!r} for flag --local-path-dir: must be an absolute path other than /"
        )
    image = ns.local_path_helper_image.strip()
    if not image or any(c.isspace() for c in image):
        raise OptionsError(f"invalid value {ns.local_path_helper_image!r} for flag --local-path-helper-image")
    return {
        "local_path_provisioner": parse_bool("--local-path-provisioner", ns.local_path_provisioner),
        "local_path_dir": os.path.normpath(directory),
        "local_path_helper_image": image,
    }


def _positive_durations(ns: argparse.Namespace, flags: tuple[tuple[str, str], ...]) -> dict:
    """(flag, attribute) pairs parsed as durations that must be positive: attribute -> seconds."""
    out: dict = {}
    for flag, attr in flags:
        value = getattr(ns, attr)
        seconds = _duration_seconds(flag, value)
        if seconds <= 0:
            raise OptionsError(f"invalid value {value!r} for flag {flag}: must be positive")
        out[attr] = seconds
    return out


def _node_lifecycle_options(ns: argparse.Namespace) -> dict:
    """Periods of the node lifecycle controller, the scheduler switch, and the controllers'
    leader election (positive durations, retry < renew deadline < lease duration)."""
    out = _positive_durations(
        ns,
        (
            ("--node-monitor-period", "node_monitor_period"),
            ("--node-monitor-grace-period", "node_monitor_grace_period"),
            ("--node-startup-grace-period", "node_startup_grace_period"),
            ("--metric-resolution", "metric_resolution"),
            ("--resource-quota-sync-period", "resource_quota_sync_period"),
            ("--event-ttl", "event_ttl"),
            ("--leader-elect-lease-duration", "leader_elect_lease_duration"),
            ("--leader-elect-renew-deadline", "leader_elect_renew_deadline"),
            ("--leader-elect-retry-period", "leader_elect_retry_period"),
        ),
    )
    out["max_endpoints_per_slice"] = _slice_limit(
        "--max-endpoints-per-slice", "endpoint slice max endpoints per slice", ns.max_endpoints_per_slice
    )
    out["mirroring_max_endpoints_per_subset"] = _slice_limit(
        "--mirroring-max-endpoints-per-subset",
        "mirroring max endpoints per subset",
        ns.mirroring_max_endpoints_per_subset,
    )
    out["enable_scheduler"] = parse_bool("--enable-scheduler", ns.enable_scheduler)
    out["leader_elect"] = parse_bool("--leader-elect", ns.leader_elect)
    if out["leader_elect_renew_deadline"] >= out["leader_elect_lease_duration"]:
        raise OptionsError("--leader-elect-renew-deadline must be less than --leader-elect-lease-duration")
        raise OptionsError("--leader-elect-retry-period must be less than --leader-elect-renew-deadline")
    return out


def _autoscaler_options(ns: argparse.Namespace) -> dict:
    """The horizontal pod autoscaler's flags: a positive sync period, non-negative
    durations, a non-negative tolerance."""
    out = _positive_durations(
        ns, (("--horizontal-pod-autoscaler-sync-period", "horizontal_pod_autoscaler_sync_period"),)
    )
    for flag, attr in (
        (
            "--horizontal-pod-autoscaler-cpu-initialization-period",
            "horizontal_pod_autoscaler_cpu_initialization_period",
        ),
        ("--horizontal-pod-autoscaler-initial-readiness-delay", "horizontal_pod_autoscaler_initial_readiness_delay"),
        ("--horizontal-pod-autoscaler-downscale-stabilization", "horizontal_pod_autoscaler_downscale_stabilization"),
    ):
        out[attr] = _duration_seconds(flag, getattr(ns, attr))
    flag, value = "--horizontal-pod-autoscaler-tolerance", ns.horizontal_pod_autoscaler_tolerance
    try:
        tolerance = float(value)
    except ValueError:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: not a number") from None
    if not tolerance >= 0 or tolerance == float("inf"):
        raise OptionsError(f"invalid value {value!r} for flag {flag}: must be a non-negative number")
    out["horizontal_pod_autoscaler_tolerance"] = tolerance
    return out


def _slice_limit(flag: str, what: str, value: str) -> int:
    """An endpoints-per-slice limit: an integer from 1 to 1000 (upstream's bounds and words)."""
    try:
        n = int(value)
    except ValueError:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: must be an integer") from None
    if n < 1:
        raise OptionsError(f"{what} must not be less than 1, but got {n}")
    if n > 1000:
        raise OptionsError(f"{what} must not be more than 1000, but got {n}")
    return n


# --cluster-signing-<flag>-{cert,key}-file: per-signer CA files (upstream's per-controller flags).
_SIGNER_FILE_FLAGS = (
    ("node-agent-serving", names.SIGNER_NODE_AGENT_SERVING),
    ("node-agent-client", names.SIGNER_NODE_AGENT_CLIENT),
    ("apiserver-client", names.SIGNER_APISERVER_CLIENT),
)


def _certificate_options(ns: argparse.Namespace) -> dict:
    """The certificate-controller flags: the duration parses and is positive; signing
    files come in cert/key pairs that exist, and the generic pair excludes the
    per-signer ones."""
    duration = _duration_seconds("--cluster-signing-duration", ns.cluster_signing_duration)
    if duration <= 0:
        raise OptionsError(
            f"invalid value {ns.cluster_signing_duration!r} for flag --cluster-signing-duration: must be positive"
        )

    def pair(prefix: str, cert: str, key: str) -> bool:
        if bool(cert) != bool(key):
            raise OptionsError(f"{prefix}-cert-file and {prefix}-key-file must be given together")
        for flag, path in ((f"{prefix}-cert-file", cert), (f"{prefix}-key-file", key)):
            if path and not os.path.isfile(path):
                raise OptionsError(f"invalid value {path!r} for flag {flag}: no such file")
        return bool(cert)

    generic = pair("--cluster-signing", ns.cluster_signing_cert_file, ns.cluster_signing_key_file)
    files: list[tuple[str, str, str]] = []
    for flag, signer in _SIGNER_FILE_FLAGS:
        attr = "cluster_signing_" + flag.replace("-", "_")
        cert, key = getattr(ns, attr + "_cert_file"), getattr(ns, attr + "_key_file")
        if pair(f"--cluster-signing-{flag}", cert, key):
            if generic:
                raise OptionsError(
                    f"--cluster-signing-{flag}-cert-file cannot be given together with --cluster-signing-cert-file"
                )
            files.append((signer, cert, key))
        elif generic:
            files.append((signer, ns.cluster_signing_cert_file, ns.cluster_signing_key_file))
    return {
        "cluster_signing_duration": duration,
        "cluster_signing_files": tuple(files),
        "auto_approve_node_serving_certificates": parse_bool(
            "--auto-approve-node-serving-certificates", ns.auto_approve_node_serving_certificates
        ),
    }


def _authentication_options(ns: argparse.Namespace) -> dict:
    """The authentication flags, checked: files exist, issuers are distinct URLs or
    plain names, durations parse. File contents are read when the server starts."""
    for flag, path in (
        ("--token-auth-file", ns.token_auth_file),
        ("--service-account-signing-key-file", ns.service_account_signing_key_file),
        *(("--service-account-key-file", f or " ") for f in ns.service_account_key_file),
    ):
        if path and not os.path.isfile(path):
            raise OptionsError(f"invalid value {path!r} for flag {flag}: no such file")
    issuers: list[str] = []
    for issuer in ns.service_account_issuer:
        if not issuer.strip():
            raise OptionsError("invalid value '' for flag --service-account-issuer: must not be empty")
        if ":" in issuer:
            u = urllib.parse.urlsplit(issuer)
            if not u.scheme or not (u.netloc or u.path):
                raise OptionsError(
                    f"invalid value {issuer!r} for flag --service-account-issuer: contains ':' but is not a valid URL"
                )
        if issuer in issuers:
            raise OptionsError(f"invalid value {issuer!r} for flag --service-account-issuer: given more than once")
        issuers.append(issuer)
    issuers = issuers or [names.DEFAULT_SERVICE_ACCOUNT_ISSUER]
    audiences = [a.strip() for v in ns.api_audiences for a in v.split(",") if a.strip()]
    return {
        "anonymous_auth": parse_bool("--anonymous-auth", ns.anonymous_auth),
        "token_auth_file": ns.token_auth_file,
        "enable_bootstrap_token_auth": parse_bool("--enable-bootstrap-token-auth", ns.enable_bootstrap_token_auth),
        "service_account_key_files": tuple(ns.service_account_key_file),
        "service_account_signing_key_file": ns.service_account_signing_key_file,
        "service_account_issuers": tuple(issuers),
        "service_account_lookup": parse_bool("--service-account-lookup", ns.service_account_lookup),
        "service_account_max_token_expiration": _max_token_expiration(ns.service_account_max_token_expiration),
        "api_audiences": tuple(dict.fromkeys(audiences)) or (issuers[0],),
        **_oidc_options(ns),
        **_token_webhook_options(ns),
        **_requestheader_options(ns),
    }


def _comma_list(values: list[str]) -> tuple[str, ...]:
    """A string-slice flag: comma lists, repeatable, blanks dropped."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


# Upstream's accepted OIDC signing algorithms (asymmetric only: never none, never HMAC).
OIDC_SIGNING_ALGS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")


def _oidc_options(ns: argparse.Namespace) -> dict:
    issuer = ns.oidc_issuer_url
    required: list[tuple[str, str]] = []
    for pair in _comma_list(ns.oidc_required_claim):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OptionsError(f"invalid value {pair!r} for flag --oidc-required-claim: expected key=value")
        required.append((key, value))
    algs = _comma_list(ns.oidc_signing_algs) or ("RS256",)
    for alg in algs:
        if alg not in OIDC_SIGNING_ALGS:
            raise OptionsError(
                f"invalid value {alg!r} for flag --oidc-signing-algs: not one of {', '.join(OIDC_SIGNING_ALGS)}"
            )
    if issuer:
        u = urllib.parse.urlsplit(issuer)
        if u.scheme != "https" or not u.netloc:
            raise OptionsError(f"invalid value {issuer!r} for flag --oidc-issuer-url: must be an https:// URL")
        if u.query or u.fragment:
            raise OptionsError(f"invalid value {issuer!r} for flag --oidc-issuer-url: no query or fragment allowed")
        if not ns.oidc_client_id:
            raise OptionsError("--oidc-client-id must be given with --oidc-issuer-url")
        if not ns.oidc_username_claim:
            raise OptionsError("invalid value '' for flag --oidc-username-claim: must not be empty")
    else:
        for flag, value in (
            ("--oidc-client-id", ns.oidc_client_id),
            ("--oidc-username-prefix", ns.oidc_username_prefix),
            ("--oidc-groups-claim", ns.oidc_groups_claim),
            ("--oidc-groups-prefix", ns.oidc_groups_prefix),
            ("--oidc-required-claim", ns.oidc_required_claim),
            ("--oidc-ca-file", ns.oidc_ca_file),
            ("--oidc-signing-algs", ns.oidc_signing_algs),
        ):
            if value:
                raise OptionsError(f"{flag} needs --oidc-issuer-url")
    if ns.oidc_groups_prefix and not ns.oidc_groups_claim:
        raise OptionsError("--oidc-groups-prefix needs --oidc-groups-claim")
    if ns.oidc_ca_file and not os.path.isfile(ns.oidc_ca_file):
        raise OptionsError(f"invalid value {ns.oidc_ca_file!r} for flag --oidc-ca-file: no such file")
    return {
        "oidc_issuer_url": issuer,
        "oidc_client_id": ns.oidc_client_id,
        "oidc_username_claim": ns.oidc_username_claim,
        "oidc_username_prefix": ns.oidc_username_prefix,
        "oidc_groups_claim": ns.oidc_groups_claim,
        "oidc_groups_prefix": ns.oidc_groups_prefix,
        "oidc_required_claims": tuple(required),
        "oidc_ca_file": ns.oidc_ca_file,
        "oidc_signing_algs": algs,
    }


def _token_webhook_options(ns: argparse.Namespace) -> dict:
    path = ns.authentication_token_webhook_config_file
    if path and not os.path.isfile(path):
        raise OptionsError(f"invalid value {path!r} for flag --authentication-token-webhook-config-file: no such file")
    if not path:
        for flag, value in (
            ("--authentication-token-webhook-cache-ttl", ns.authentication_token_webhook_cache_ttl),
            ("--authentication-token-webhook-version", ns.authentication_token_webhook_version),
        ):
            if value is not None:
                raise OptionsError(f"{flag} needs --authentication-token-webhook-config-file")
    version = ns.authentication_token_webhook_version or "v1"
    if version not in ("v1", "v1beta1"):
        raise OptionsError(
            f"invalid value {version!r} for flag --authentication-token-webhook-version: must be v1 or v1beta1"
        )
    return {
        "authentication_token_webhook_config_file": path,
        "authentication_token_webhook_cache_ttl": _duration_seconds(
            "--authentication-token-webhook-cache-ttl", ns.authentication_token_webhook_cache_ttl or "2m"
        ),
        "authentication_token_webhook_version": version,
    }


def _requestheader_options(ns: argparse.Namespace) -> dict:
    ca = ns.requestheader_client_ca_file
    if ca and not os.path.isfile(ca):
        raise OptionsError(f"invalid value {ca!r} for flag --requestheader-client-ca-file: no such file")
    usernames = _comma_list(ns.requestheader_username_headers)
    if not ca:
        for flag, values in (
            ("--requestheader-allowed-names", ns.requestheader_allowed_names),
            ("--requestheader-username-headers", ns.requestheader_username_headers),
            ("--requestheader-group-headers", ns.requestheader_group_headers),
            ("--requestheader-extra-headers-prefix", ns.requestheader_extra_headers_prefix),
        ):
            if _comma_list(values):
                raise OptionsError(
                    f"{flag} needs --requestheader-client-ca-file (headers are trusted only from the proxy)"
                )
    if ca and not usernames:
        raise OptionsError(
            "--requestheader-username-headers must name at least one header with --requestheader-client-ca-file"
        )
    return {
        "requestheader_client_ca_file": ca,
        "requestheader_allowed_names": _comma_list(ns.requestheader_allowed_names),
        "requestheader_username_headers": usernames,
        "requestheader_group_headers": _comma_list(ns.requestheader_group_headers),
        "requestheader_extra_headers_prefix": _comma_list(ns.requestheader_extra_headers_prefix),
    }


def _max_token_expiration(value: str) -> float:
    seconds = _duration_seconds("--service-account-max-token-expiration", value)
    if 0 < seconds < 600:
        raise OptionsError(
            f"invalid value {value!r} for flag --service-account-max-token-expiration: "
            "must be 0 (no limit) or at least 10m, the shortest token lifetime"
        )
    return seconds


def _authorization_modes(value: str) -> tuple[str, ...]:
    try:
        return parse_modes(value)
    except ValueError as exc:
        raise OptionsError(f"invalid value {value!r} for flag --authorization-mode: {exc}") from None


def _request_timeout(value: str) -> float:
    seconds = _duration_seconds("--request-timeout", value)
    if seconds <= 0:
        raise OptionsError(f"invalid value {value!r} for flag --request-timeout: must be greater than 0")
    return seconds


def _authorization_options(ns: argparse.Namespace) -> dict:
    """--authorization-mode with the files of its ABAC and Webhook modes, read now so
    that a bad file stops the start (upstream's rules: a mode needs its file, a file its mode)."""
    modes = _authorization_modes(ns.authorization_mode)
    policy_file, webhook_file = ns.authorization_policy_file, ns.authorization_webhook_config_file
    if "ABAC" in modes and not policy_file:
        raise OptionsError(
            "authorization-mode ABAC's authorization policy file not passed (--authorization-policy-file)"
        )
    if "Webhook" in modes and not webhook_file:
        raise OptionsError(
            "authorization-mode Webhook's authorization config file not passed (--authorization-webhook-config-file)"
        )
    if policy_file and "ABAC" not in modes:
        raise OptionsError("cannot specify --authorization-policy-file without mode ABAC")
    if webhook_file and "Webhook" not in modes:
        raise OptionsError("cannot specify --authorization-webhook-config-file without mode Webhook")
    if not webhook_file:
        for flag, value in (
            ("--authorization-webhook-version", ns.authorization_webhook_version),
            ("--authorization-webhook-cache-authorized-ttl", ns.authorization_webhook_cache_authorized_ttl),
            ("--authorization-webhook-cache-unauthorized-ttl", ns.authorization_webhook_cache_unauthorized_ttl),
        ):
            if value is not None:
                raise OptionsError(f"{flag} needs mode Webhook and --authorization-webhook-config-file")
    version = ns.authorization_webhook_version or "v1"
    if version not in AUTHZ_WEBHOOK_VERSIONS:
        raise OptionsError(f"invalid value {version!r} for flag --authorization-webhook-version: must be v1 or v1beta1")
    policies: tuple[AbacPolicy, ...] = ()
    if policy_file:
        try:
            policies = tuple(load_abac_policies(policy_file))
        except AbacPolicyFileError as exc:
            raise OptionsError(f"invalid value {policy_file!r} for flag --authorization-policy-file: {exc}") from None
    target = None
    if webhook_file:
        try:
            target = load_authz_webhook_config(webhook_file)
        except WebhookConfigError as exc:
            raise OptionsError(str(exc)) from None
    return {
        "authorization_modes": modes,
        "authorization_policy_file": policy_file,
        "authorization_policies": policies,
        "authorization_webhook_config_file": webhook_file,
        "authorization_webhook": target,
        "authorization_webhook_version": version,
        "authorization_webhook_cache_authorized_ttl": _duration_seconds(
            "--authorization-webhook-cache-authorized-ttl", ns.authorization_webhook_cache_authorized_ttl or "5m"
        ),
        "authorization_webhook_cache_unauthorized_ttl": _duration_seconds(
            "--authorization-webhook-cache-unauthorized-ttl", ns.authorization_webhook_cache_unauthorized_ttl or "30s"
        ),
    }


def _admission_config(path: str, plugins: tuple[str, ...]) -> admission_config.AdmissionConfig:
    """The admission configuration file, read and checked for the enabled plugins."""
    if not path:
        return admission_config.AdmissionConfig()
    try:
        config = admission_config.load(path, CONFIGURABLE_NAMES)
        check_plugin_configs(config, plugins)
    except admission_config.AdmissionConfigError as exc:
        raise OptionsError(f"invalid value {path!r} for flag --admission-control-config-file: {exc}") from None
    return config


def _encryption(path: str) -> encryption.Transformers | None:
    if not path:
        return None
    try:
        return encryption.load(path, REGISTRY.kinds)
    except encryption.EncryptionConfigError as exc:
        raise OptionsError(f"invalid value {path!r} for flag --encryption-provider-config: {exc}") from None


def _admission_plugins(enable: str, disable: str) -> tuple[str, ...]:
    def split(v):
        return [n.strip() for n in v.split(",") if n.strip()]

    try:
        return resolve_plugins(split(enable), split(disable))
    except ValueError as exc:
        raise OptionsError(f"invalid admission plugins: {exc}") from None
