"""The CRI ``PodSandboxConfig`` for a pod: identity, hostname, DNS, namespaces, sysctls.

A pure function of (pod, node context) apart from reading the resolv.conf file,
so the runtime manager can rebuild it at any time (a sandbox is recreated with
the next ``attempt`` when it dies) and tests can check every field.

Choices, each as upstream makes them:

* Labels: the pod's labels, then the agent's identity labels on top (pod name,
  namespace, uid, and ``io.orch.managed=true``), so a pod label can never
  disguise or hide a sandbox; the agent lists only sandboxes with the managed label.
* The sandbox's own seccomp profile is always RuntimeDefault, whatever the pod
  asks for: the profile of the pause process is not the user's business, and a
  pod-level Localhost profile written for the application could stop the pause
  process. The pod's profile applies to its containers (see container.py).
* ``readonly_rootfs`` is never set on the sandbox (it is a container setting).
* Sysctls are checked here, against upstream 1.27's safe set plus
  ``--allowed-unsafe-sysctls``; a network sysctl on a host-network pod (or an
  IPC one on a host-IPC pod) is refused, since it would change the node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.logging import get_logger
from apiserver_min.api import names
from apiserver_min.api.validation import go_quote, is_dns1123_label
from cri import api_pb2 as pb

from .context import NodeContext
from .errors import REASON_CREATE_SANDBOX, REASON_SYSCTL_FORBIDDEN, PodConfigError

__all__ = [
    "build_sandbox_config",
    "sandbox_labels",
    "pod_hostname_and_domain",
    "dns_config",
    "parse_resolv_conf",
    "check_sysctls",
    "sysctl_allowlist_problems",
    "normalize_sysctl_name",
    "namespace_options",
    "port_mappings",
    "has_privileged_container",
    "SAFE_SYSCTLS",
    "MAX_DNS_NAMESERVERS",
    "MAX_DNS_SEARCH_PATHS",
    "MAX_DNS_SEARCH_LIST_CHARS",
]

log = get_logger(__name__)

# Upstream 1.27's safe sysctls: namespaced, and unable to affect other pods or the node.
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
)

# resolv.conf limits of libc as upstream applies them (ExpandedDNSConfig is on in 1.27).
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048
_MAX_SEARCH_DOMAIN_LENGTH = 253  # longer search domains abort some glibc versions
_MAX_RESOLV_CONF_BYTES = 10 << 20
_CLUSTER_DNS_OPTIONS = ("ndots:5",)
_HOSTNAME_MAX = 63

_IPC = "ipc"
_NET = "net"
_SYSCTL_NAMESPACES = {"kernel.sem": _IPC}
_SYSCTL_PREFIX_NAMESPACES = (("kernel.shm", _IPC), ("kernel.msg", _IPC), ("fs.mqueue.", _IPC), ("net.", _NET))

_PROTOCOLS = {"TCP": pb.TCP, "UDP": pb.UDP, "SCTP": pb.SCTP}


def _spec(pod: dict) -> dict:
    return pod.get("spec") or {}


def _meta(pod: dict) -> dict:
    return pod.get("metadata") or {}


def _namespace(pod: dict) -> str:
    return _meta(pod).get("namespace") or "default"


# --- the config ---------------------------------------------------------------------------


def build_sandbox_config(pod: dict, ctx: NodeContext, *, attempt: int, cgroup_parent: str) -> pb.PodSandboxConfig:
    """The sandbox config for ``pod``'s ``attempt``-th sandbox.

    Raises PodConfigError: ``SysctlForbidden`` for a sysctl this node refuses,
    ``CreatePodSandboxError`` for an invalid hostname/subdomain or an unreadable
    resolv.conf.
    """
    meta = _meta(pod)
    spec = _spec(pod)
    name = meta.get("name") or ""
    namespace = _namespace(pod)
    uid = meta.get("uid") or ""
    sysctls = check_sysctls(pod, ctx)
    host_network = bool(spec.get("hostNetwork"))

    config = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=attempt),
        log_directory=ctx.pod_log_dir(namespace, name, uid),
        labels=sandbox_labels(pod),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        port_mappings=port_mappings(pod),
    )
    if not host_network:
        # containerd refuses a hostname without a private UTS namespace.
        config.hostname = pod_hostname_and_domain(pod, ctx)[0]
    config.dns_config.CopyFrom(dns_config(pod, ctx))

    linux = config.linux
    linux.cgroup_parent = cgroup_parent
    linux.sysctls.update(sysctls)
    sc = linux.security_context
    sc.namespace_options.CopyFrom(namespace_options(pod))
    sc.privileged = has_privileged_container(pod)
    sc.seccomp.profile_type = pb.SecurityProfile.RuntimeDefault
    pod_sc = spec.get("securityContext") or {}
    if pod_sc.get("runAsUser") is not None:
        sc.run_as_user.value = int(pod_sc["runAsUser"])
    if pod_sc.get("runAsGroup") is not None:
        sc.run_as_group.value = int(pod_sc["runAsGroup"])
    sc.supplemental_groups.extend(supplemental_groups(pod))
    return config


def sandbox_labels(pod: dict) -> dict[str, str]:
    """The pod's labels with the agent's identity labels on top."""
    meta = _meta(pod)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels[names.CRI_LABEL_POD_NAME] = meta.get("name") or ""
    labels[names.CRI_LABEL_POD_NAMESPACE] = _namespace(pod)
    labels[names.CRI_LABEL_POD_UID] = meta.get("uid") or ""
    labels[names.CRI_LABEL_MANAGED] = names.CRI_LABEL_MANAGED_VALUE
    return labels


def supplemental_groups(pod: dict) -> list[int]:
    """fsGroup first, then supplementalGroups, as upstream orders them."""
    pod_sc = _spec(pod).get("securityContext") or {}
    groups: list[int] = []
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    groups.extend(int(g) for g in pod_sc.get("supplementalGroups") or [])
    return groups


def has_privileged_container(pod: dict) -> bool:
    """Any container, init or ephemeral container privileged: the sandbox must be too."""
    spec = _spec(pod)
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if ((c.get("securityContext") or {}).get("privileged")) is True:
                return True
    return False


def namespace_options(pod: dict) -> pb.NamespaceOption:
    """Host namespaces as the pod asks; PID is per container unless the pod shares it."""
    spec = _spec(pod)
    options = pb.NamespaceOption(
        network=pb.NODE if spec.get("hostNetwork") else pb.POD,
        ipc=pb.NODE if spec.get("hostIPC") else pb.POD,
    )
    if spec.get("hostPID"):
        options.pid = pb.NODE
    elif spec.get("shareProcessNamespace"):
        options.pid = pb.POD
    else:
        options.pid = pb.CONTAINER
    return options


def port_mappings(pod: dict) -> list[pb.PortMapping]:
    """Container ports that ask for a host port.

    Upstream sends every port and the runtime's portmap plugin skips those with
    no host port; sending only those is the same for the runtime and keeps the
    config small. A port name repeated in one container counts once (upstream).
    """
    result: list[pb.PortMapping] = []
    for c in _spec(pod).get("containers") or []:
        seen: set[str] = set()
        for port in c.get("ports") or []:
            host_ip = port.get("hostIP") or ""
            protocol = port.get("protocol") or "TCP"
            container_port = int(port.get("containerPort") or 0)
            host_port = int(port.get("hostPort") or 0)
            family = "any"
            if host_ip:
                try:
                    family = "v6" if ipaddress.ip_address(host_ip).version == 6 else "v4"
                except ValueError:
                    family = "v4"
            key = port.get("name") or f"{family}-{protocol}-{host_ip}:{container_port}:{host_port}"
            if key in seen:
                log.info(
                    "Port name conflicted, it is defined more than once",
                    pod=_meta(pod).get("name"),
                    container=c.get("name"),
                    port_name=key,
                )
                continue
            seen.add(key)
            if host_port <= 0:
                continue
            result.append(
                pb.PortMapping(
                    protocol=_PROTOCOLS.get(protocol, pb.TCP),
                    container_port=container_port,
                    host_port=host_port,
                    host_ip=host_ip,
                )
            )
    return result


# --- hostname -------------------------------------------------------------------------------


def pod_hostname_and_domain(pod: dict, ctx: NodeContext) -> tuple[str, str]:
    """(hostname, domain): ``spec.hostname`` or the pod name, cut to 63 characters
    without a trailing ``-``/``.``; the domain is ``<subdomain>.<ns>.svc.<cluster domain>``
    when the pod has a subdomain, else empty."""
    spec = _spec(pod)
    pod_name = _meta(pod).get("name") or ""
    hostname = pod_name
    if spec.get("hostname"):
        hostname = str(spec["hostname"])
        errs = is_dns1123_label(hostname)
        if errs:
            raise PodConfigError(
                REASON_CREATE_SANDBOX, f"pod Hostname {go_quote(hostname)} is not a valid DNS label: {';'.join(errs)}"
            )
    if len(hostname) > _HOSTNAME_MAX:
        truncated = hostname[:_HOSTNAME_MAX].rstrip("-.")
        log.error(
            "Hostname for pod was too long, truncated it",
            pod=pod_name,
            hostname_max_len=_HOSTNAME_MAX,
            truncated_hostname=truncated,
        )
        if not truncated:
            raise PodConfigError(
                REASON_CREATE_SANDBOX, f"hostname for pod {go_quote(pod_name)} was invalid: {go_quote(hostname)}"
            )
        hostname = truncated
    domain = ""
    subdomain = spec.get("subdomain")
    if subdomain:
        errs = is_dns1123_label(str(subdomain))
        if errs:
            raise PodConfigError(
                REASON_CREATE_SANDBOX,
                f"pod Subdomain {go_quote(str(subdomain))} is not a valid DNS label: {';'.join(errs)}",
            )
        domain = f"{subdomain}.{_namespace(pod)}.svc.{ctx.cluster_domain}"
    return hostname, domain


# --- DNS ------------------------------------------------------------------------------------


def parse_resolv_conf(text: str) -> tuple[list[str], list[str], list[str]]:
    """(nameservers, searches, options) of a resolv.conf, read as upstream reads it:
    nameservers accumulate, the last ``search`` line wins (trailing dots dropped,
    a lone ``.`` ignored), ``options`` accumulate with a later option replacing an
    earlier one of the same name."""
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("#"):
            continue
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            servers.append(fields[1])
        elif fields[0] == "search":
            searches = [s.removesuffix(".") for s in fields[1:] if s != "."]
        elif fields[0] == "options":
            options = _append_options(options, fields[1:])
    return servers, searches, options


def _append_options(options: Iterable[str], new: Iterable[str]) -> list[str]:
    by_name: dict[str, str] = {}
    for option in [*options, *new]:
        by_name[option.split(":", 1)[0]] = option
    return list(by_name.values())


def _merge_dns_options(existing: Iterable[str], pod_options: Iterable[Mapping[str, Any]]) -> list[str]:
    """The pod's dnsConfig options override the base ones of the same name."""
    values: dict[str, str] = {}
    for option in existing:
        name, _, value = option.partition(":")
        values[name] = value
    for pod_option in pod_options:
        pod_value = pod_option.get("value")
        values[str(pod_option.get("name") or "")] = "" if pod_value is None else str(pod_value)
    return [f"{k}:{v}" if v else k for k, v in values.items()]


def _omit_duplicates(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _host_dns(ctx: NodeContext) -> tuple[list[str], list[str], list[str]]:
    if not ctx.resolv_conf:
        return [], [], []
    try:
        with open(ctx.resolv_conf, "rb") as fh:
            data = fh.read(_MAX_RESOLV_CONF_BYTES + 1)
    except OSError as exc:
        raise PodConfigError(
            REASON_CREATE_SANDBOX, f"could not open resolv conf file {ctx.resolv_conf}: {exc.strerror or exc}"
        ) from None
    if len(data) > _MAX_RESOLV_CONF_BYTES:
        raise PodConfigError(
            REASON_CREATE_SANDBOX, f"resolv conf file {ctx.resolv_conf} is larger than {_MAX_RESOLV_CONF_BYTES} bytes"
        )
    return parse_resolv_conf(data.decode(errors="replace"))


def _dns_policy_type(pod: dict) -> str:
    """ "none", "cluster" or "host" for the pod's dnsPolicy (ClusterFirst on the
    host network means host DNS; an unknown policy is treated as ClusterFirst)."""
    spec = _spec(pod)
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "None":
        return "none"
    if policy == "ClusterFirstWithHostNet":
        return "cluster"
    if policy == "ClusterFirst":
        return "host" if spec.get("hostNetwork") else "cluster"
    if policy == "Default":
        return "host"
    log.error("Invalid DNSPolicy, falling back to ClusterFirst", pod=_meta(pod).get("name"), dns_policy=policy)
    return "cluster"


def dns_config(pod: dict, ctx: NodeContext) -> pb.DNSConfig:
    """The pod's resolver settings.

    * ClusterFirst (not host network) and ClusterFirstWithHostNet, with
      ``--cluster-dns``: the cluster servers only, searches ``<ns>.svc.<domain>``,
      ``svc.<domain>``, ``<domain>`` and then the host's, options ``ndots:5``.
      Without cluster DNS: as Default, and a log line says so.
    * Default: the host resolv.conf's servers, searches and options. With
      ``--resolv-conf=""`` the pod gets no host DNS: upstream then writes
      ``nameserver 127.0.0.1`` and ``search .`` explicitly, because an empty DNS
      config makes the runtime copy the host's resolv.conf after all.
    * None: nothing but ``spec.dnsConfig``.
    ``spec.dnsConfig`` is merged into every policy (servers and searches appended
    without duplicates, options by name). Then libc's limits apply: at most 3
    servers and 32 searches, no search over 253 characters, the search line at
    most 2048 characters; anything cut is logged.
    """
    kind = _dns_policy_type(pod)
    servers: list[str]
    searches: list[str]
    options: list[str]
    if kind == "none":
        servers, searches, options = [], [], []
    else:
        servers, searches, options = _host_dns(ctx)
        if kind == "cluster" and ctx.cluster_dns:
            servers = list(ctx.cluster_dns)
            if ctx.cluster_domain:
                domain = ctx.cluster_domain
                searches = _omit_duplicates([f"{_namespace(pod)}.svc.{domain}", f"svc.{domain}", domain, *searches])
            options = list(_CLUSTER_DNS_OPTIONS)
        else:
            if kind == "cluster":
                log.warning(
                    "No cluster DNS IP configured (--cluster-dns): pod with dnsPolicy "
                    "ClusterFirst falls back to the Default policy",
                    pod=f"{_meta(pod).get('name')}_{_namespace(pod)}",
                    reason="MissingClusterDNS",
                )
            if not ctx.resolv_conf:
                servers = ["::1" if _is_ipv6(ctx.host_ip) else "127.0.0.1"]
                searches = ["."]
    extra = _spec(pod).get("dnsConfig")
    if extra:
        servers = _omit_duplicates([*servers, *(str(s) for s in extra.get("nameservers") or [])])
        searches = _omit_duplicates([*searches, *(str(s) for s in extra.get("searches") or [])])
        options = _merge_dns_options(options, extra.get("options") or [])
    return pb.DNSConfig(servers=_fit_servers(pod, servers), searches=_fit_searches(pod, searches), options=options)


def _is_ipv6(ip: str) -> bool:
    try:
        return bool(ip) and ipaddress.ip_address(ip).version == 6
    except ValueError:
        return False


def _fit_servers(pod: dict, servers: list[str]) -> list[str]:
    if len(servers) > MAX_DNS_NAMESERVERS:
        servers = servers[:MAX_DNS_NAMESERVERS]
        log.error(
            "Nameserver limits were exceeded, some nameservers have been omitted",
            pod=_meta(pod).get("name"),
            applied=" ".join(servers),
        )
    return servers


def _fit_searches(pod: dict, searches: list[str]) -> list[str]:
    exceeded = False
    if len(searches) > MAX_DNS_SEARCH_PATHS:
        searches = searches[:MAX_DNS_SEARCH_PATHS]
        exceeded = True
    kept = [s for s in searches if len(s) <= _MAX_SEARCH_DOMAIN_LENGTH]
    if len(kept) != len(searches):
        exceeded = True
    searches = kept
    line_len = len(" ".join(searches))
    while searches and line_len > MAX_DNS_SEARCH_LIST_CHARS:
        line_len -= len(searches.pop()) + 1
        exceeded = True
    if exceeded:
        log.error(
            "Search Line limits were exceeded, some search paths have been omitted",
            pod=_meta(pod).get("name"),
            applied=" ".join(searches),
        )
    return searches


# --- sysctls --------------------------------------------------------------------------------


def normalize_sysctl_name(name: str) -> str:
    """``net/ipv4/ip_forward`` -> ``net.ipv4.ip_forward``; a name whose first
    separator is a dot is already normal (dots and slashes swap otherwise, so
    ``net/ipv4/conf/eth0.100/rp_filter`` keeps its interface name)."""
    for ch in name:
        if ch == ".":
            return name
        if ch == "/":
            return name.translate(str.maketrans("./", "/."))
    return name


def _sysctl_namespace(name: str) -> str:
    if name in _SYSCTL_NAMESPACES:
        return _SYSCTL_NAMESPACES[name]
    for prefix, ns in _SYSCTL_PREFIX_NAMESPACES:
        if name.startswith(prefix):
            return ns
    return ""


def _allowlist(ctx: NodeContext) -> tuple[dict[str, str], dict[str, str]]:
    """(exact names, prefixes) -> namespace, from the safe set and the flag."""
    exact: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for pattern in (*SAFE_SYSCTLS, *ctx.allowed_unsafe_sysctls):
        name = normalize_sysctl_name(pattern)
        star = name.find("*")
        stem = name[:star] if star != -1 else name
        ns = _sysctl_namespace(stem)
        if not ns:
            continue  # not namespaced: never allowed (see sysctl_allowlist_problems)
        (prefixes if star != -1 else exact)[stem] = ns
    return exact, prefixes


def sysctl_allowlist_problems(patterns: Iterable[str]) -> list[str]:
    """Why entries of ``--allowed-unsafe-sysctls`` cannot be used: upstream refuses
    to start with a sysctl that is not namespaced (it would change the node)."""
    problems = []
    for pattern in patterns:
        name = normalize_sysctl_name(pattern)
        stem = name.split("*", 1)[0]
        if not _sysctl_namespace(stem):
            problems.append(f"the sysctls {go_quote(stem)} are not known to be namespaced")
    return problems


def check_sysctls(pod: dict, ctx: NodeContext) -> dict[str, str]:
    """The pod's sysctls (names normalized to dots) if this node allows them all.

    Raises PodConfigError(SysctlForbidden) naming the first refused sysctl.
    """
    spec = _spec(pod)
    entries: Sequence[Mapping[str, Any]] = (spec.get("securityContext") or {}).get("sysctls") or []
    if not entries:
        return {}
    exact, prefixes = _allowlist(ctx)
    host_net = bool(spec.get("hostNetwork"))
    host_ipc = bool(spec.get("hostIPC"))
    result: dict[str, str] = {}
    for entry in entries:
        name = normalize_sysctl_name(str(entry.get("name") or ""))
        ns = exact.get(name)
        if ns is None:
            ns = next((n for p, n in prefixes.items() if name.startswith(p)), None)
        if ns is None:
            reason = f"{go_quote(name)} not allowlisted"
        elif (ns == _NET and host_net) or (ns == _IPC and host_ipc):
            reason = f"{go_quote(name)} not allowed with host {ns} enabled"
        else:
            result[name] = str(entry.get("value") or "")
            continue
        raise PodConfigError(REASON_SYSCTL_FORBIDDEN, f"forbidden sysctl: {reason}")
    return result
