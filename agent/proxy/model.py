"""What the proxy serves, read from Services and EndpointSlices (pure, no I/O).

A Service contributes one :class:`ServicePort` per port of each served address
family (IPv4 only here: the node proxy programs ``table ip``; the IPv4 address
of a dual-stack Service is served, its IPv6 one and IPv6-only Services are
reported once each and skipped). Its endpoints are the union of every
EndpointSlice labelled ``orch.io/service-name: <name>`` in its namespace, each
address once, with the port whose name and protocol equal the service port's.

Which endpoints take traffic follows the slice conditions as upstream's proxy
reads them: ``ready`` (nil means ready) endpoints; when a set has no ready
endpoint, the ones that are ``serving`` and ``terminating`` (so connections
drain to pods that are shutting down instead of failing). Traffic policies:
``internalTrafficPolicy: Local`` restricts cluster-IP traffic, and
``externalTrafficPolicy: Local`` node-port and external-IP traffic, to the
endpoints whose ``nodeName`` is this node.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Iterable, Mapping

from apiserver_min.api import names

__all__ = ["Endpoint", "ServicePort", "service_ports", "endpoints_for", "usable", "DEFAULT_AFFINITY_TIMEOUT"]

DEFAULT_AFFINITY_TIMEOUT = 10800  # seconds (upstream's default ClientIP timeout: 3 hours)
PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}


@dataclasses.dataclass(frozen=True, order=True)
class Endpoint:
    ip: str
    port: int
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    node: str = ""


@dataclasses.dataclass(frozen=True)
class ServicePort:
    """One port of one Service, with everything the rules need."""

    namespace: str
    name: str
    port_name: str
    protocol: str  # nft spelling: tcp, udp, sctp
    port: int
    cluster_ip: str  # "" when headless / unset: no cluster-IP rules
    external_ips: tuple[str, ...] = ()
    node_port: int = 0
    affinity_timeout: int = 0  # seconds; 0 = no session affinity
    internal_local: bool = False
    external_local: bool = False

    @property
    def key(self) -> str:
        """``ns/name/proto/port``: unique per service port, spelt with characters nft names allow."""
        return f"{self.namespace}/{self.name}/{self.protocol}/{self.port_name or self.port}"

    @property
    def has_external(self) -> bool:
        return bool(self.external_ips or self.node_port)


def _ipv4(value: object) -> str:
    """The canonical spelling of an IPv4 address, or "" (inet_pton is strict and ~50x
    cheaper than ipaddress, which matters at thousands of endpoints per sync)."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, value))
    except OSError:
        return ""


def service_ports(svc: Mapping) -> tuple[list[ServicePort], list[str]]:
    """The service ports the proxy programs for ``svc``, and notes for the operator
    (what it leaves out and why)."""
    md = svc.get("metadata") or {}
    spec = svc.get("spec") or {}
    ns, name = md.get("namespace") or "", md.get("name") or ""
    notes: list[str] = []
    labels = md.get("labels") or {}
    if names.LABEL_SERVICE_PROXY_NAME in labels:
        return [], []  # served by another proxy (upstream's service-proxy-name label)
    stype = spec.get("type") or "ClusterIP"
    if stype == "ExternalName":
        return [], []
    raw_ip = spec.get("clusterIP") or ""
    if raw_ip == "None":
        return [], []  # headless: no virtual IP to program
    # A dual-stack Service's IPv4 address may be its second (clusterIPs[1]).
    raw_ips = [ip for ip in spec.get("clusterIPs") or [] if isinstance(ip, str) and ip] or ([raw_ip] if raw_ip else [])
    cluster_ip = next((v4 for v4 in map(_ipv4, raw_ips) if v4), "")
    for ip in raw_ips:
        if not _ipv4(ip):
            notes.append(f"cluster IP {ip} is not IPv4; this proxy programs IPv4 only")
    external_ips = []
    for ip in spec.get("externalIPs") or []:
        v4 = _ipv4(ip)
        if v4:
            external_ips.append(v4)
        else:
            notes.append(f"external IP {ip!r} is not an IPv4 address; not programmed")
    if stype == "LoadBalancer" and ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress"):
        notes.append("load-balancer ingress addresses are not programmed (no load-balancer support on this node)")
    timeout = 0
    if spec.get("sessionAffinity") == "ClientIP":
        cfg = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}).get("timeoutSeconds")
        timeout = cfg if isinstance(cfg, int) and not isinstance(cfg, bool) and cfg > 0 else DEFAULT_AFFINITY_TIMEOUT
    internal_local = spec.get("internalTrafficPolicy") == "Local"
    external_local = spec.get("externalTrafficPolicy") == "Local"
    out = []
    for p in spec.get("ports") or []:
        if not isinstance(p, dict):
            continue
        proto = PROTOCOLS.get(p.get("protocol") or "TCP")
        port = p.get("port")
        if proto is None or not isinstance(port, int) or not 0 < port < 65536:
            notes.append(f"port {p.get('name') or port!r}: protocol or number not servable")
            continue
        node_port = p.get("nodePort") if stype in ("NodePort", "LoadBalancer") else 0
        if not isinstance(node_port, int) or not 0 < node_port < 65536:
            node_port = 0
        if not cluster_ip and not external_ips and not node_port:
            continue
        out.append(
            ServicePort(
                namespace=ns,
                name=name,
                port_name=p.get("name") or "",
                protocol=proto,
                port=port,
                cluster_ip=cluster_ip,
                external_ips=tuple(external_ips),
                node_port=node_port,
                affinity_timeout=timeout,
                internal_local=internal_local,
                external_local=external_local,
            )
        )
    return out, notes


def _cond(conditions: Mapping, name: str, default: bool) -> bool:
    v = conditions.get(name)
    return default if v is None else bool(v)


def endpoints_for(sp: ServicePort, slices: Iterable[Mapping]) -> list[Endpoint]:
    """The endpoints of ``sp`` in ``slices`` (the Service's slices), sorted, each
    address once (the first slice naming it wins)."""
    seen: dict[str, Endpoint] = {}
    for sl in slices:
        if sl.get("addressType") != "IPv4":
            continue
        port = None
        for ep_port in sl.get("ports") or []:
            if not isinstance(ep_port, dict):
                continue
            if (ep_port.get("name") or "") != sp.port_name:
                continue
            if PROTOCOLS.get(ep_port.get("protocol") or "TCP") != sp.protocol:
                continue
            port = ep_port.get("port")
            break
        if not isinstance(port, int) or not 0 < port < 65536:
            continue
        for ep in sl.get("endpoints") or []:
            if not isinstance(ep, dict):
                continue
            addrs = ep.get("addresses") or []
            ip = _ipv4(addrs[0]) if addrs else ""  # addresses are interchangeable: upstream uses the first
            if not ip or ip in seen:
                continue
            cond = ep.get("conditions") or {}
            ready = _cond(cond, "ready", True)
            seen[ip] = Endpoint(
                ip=ip,
                port=port,
                ready=ready,
                serving=_cond(cond, "serving", ready),
                terminating=_cond(cond, "terminating", False),
                node=ep.get("nodeName") or "",
            )
    return sorted(seen.values())


def usable(endpoints: Iterable[Endpoint]) -> list[Endpoint]:
    """Ready endpoints; when none, the serving and terminating ones."""
    eps = list(endpoints)
    ready = [e for e in eps if e.ready]
    if ready:
        return ready
    return [e for e in eps if e.serving and e.terminating]
