"""The proxy's nftables rules as data, and the ``nft -f`` script that gets there.

Everything lives in one table of its own (``table ip orch-proxy``); nothing
outside it is touched. The fixed part (base chains on the hooks, the dispatch
maps, masquerading, rejecting) is written on a full sync only; each service
port adds chains and map elements, which an incremental sync adds, rewrites or
removes one by one, all in one transaction (``nft -f`` applies a script
atomically: either every line or none).

Layout (``P`` = ``ns/name/proto/portname``, ``E`` = ``IP/port`` of an endpoint)::

  nat-prerouting, nat-output (nat, dstnat)  -> services
  services: ip daddr . l4proto . dport vmap @service-ips
            fib daddr type local (not 127/8) l4proto . dport vmap @service-nodeports
  svc-P   cluster endpoints: affinity look-ups, then numgen random mod N vmap -> ep-P__E
  loc-P   node-local endpoints (a Local traffic policy), the same shape
  ext-P   node-port and external-IP traffic: masquerade mark, then svc-P or loc-P
  ep-P__E hairpin masquerade mark, affinity set update, dnat to E
  filter-prerouting, filter-output (filter, dstnat - 10): new connections to a
            service port without endpoints -> reject (none at all) or drop (none on
            this node under a Local policy), from the no-endpoint-* maps
  filter-*-post-dnat (dstnat + 10): anything still addressed to a cluster IP is
            for a port the service does not have -> reject
  nat-postrouting (srcnat): masquerade what carries the masquerade mark

Session affinity (``ClientIP``): each endpoint has a set ``aff-P__E`` of client
addresses with the service's timeout; the endpoint chain refreshes the client's
entry, the service chain sends a client found in an endpoint's set there.

Masquerading (the source rewritten to the node's address, so replies come back
through this node): traffic from a pod to a service that lands on that same pod
(hairpin); node-port and external-IP traffic with ``externalTrafficPolicy:
Cluster``; with ``--cluster-cidr`` set, cluster-IP traffic from outside that
range.

Node ports on 127.0.0.0/8 (``localhost_nodeports``, as upstream's iptables proxy
with ``--iptables-localhost-nodeports``): the node's own connections to
``127.0.0.1:<nodePort>`` are translated in nat-output (never in prerouting, so a
packet from elsewhere addressed to 127/8 is not forwarded to a pod) and always
masqueraded (a 127/8 source cannot leave the host). That needs the sysctl
``net.ipv4.conf.all.route_localnet=1`` (set by the proxier), which also makes
the kernel accept 127/8 addresses arriving on other interfaces; the
``localnet-guard`` chain drops those (upstream's guard against CVE-2020-8558):
new connections to 127.0.0.0/8 that did not come in on ``lo`` and were not
translated.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from apiserver_min.api import names

from .model import Endpoint, ServicePort, usable

__all__ = ["Ruleset", "build", "full_script", "diff_script", "delete_script", "TABLE"]

TABLE = names.PROXY_NFT_TABLE
FAMILY = "ip"
# Map names (type ipv4_addr . inet_proto . inet_service or inet_proto . inet_service, verdict values)
SERVICE_IPS = "service-ips"
SERVICE_NODEPORTS = "service-nodeports"
NO_EP_SERVICES = "no-endpoint-services"
NO_EP_NODEPORTS = "no-endpoint-nodeports"
CLUSTER_IPS = "cluster-ips"  # a plain set of addresses
DYNAMIC_MAPS = (SERVICE_IPS, SERVICE_NODEPORTS, NO_EP_SERVICES, NO_EP_NODEPORTS, CLUSTER_IPS)
REJECT_CHAIN = "reject-chain"
LOCALNET_GUARD = "localnet-guard"
LOOPBACK_NET = "127.0.0.0/8"
MARK_CHAIN = "mark-for-masquerade"
DSTNAT, SRCNAT = -100, 100  # the hook priorities of destination and source NAT


@dataclasses.dataclass
class Ruleset:
    """The per-service part of the table: regular chains with their rules, the
    elements of the dispatch maps (key -> verdict; "" for plain set elements) and
    the affinity sets (name -> timeout seconds)."""

    chains: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    elements: dict[str, dict[str, str]] = dataclasses.field(default_factory=lambda: {m: {} for m in DYNAMIC_MAPS})
    sets: dict[str, int] = dataclasses.field(default_factory=dict)

    def size(self) -> tuple[int, int, int]:
        return len(self.chains), sum(len(v) for v in self.elements.values()), len(self.sets)


def _ep_chain(sp: ServicePort, ep: Endpoint) -> str:
    return f"ep-{sp.key}__{ep.ip}/{ep.port}"


def _aff_set(sp: ServicePort, ep: Endpoint) -> str:
    return f"aff-{sp.key}__{ep.ip}/{ep.port}"


def _balance(sp: ServicePort, eps: list[Endpoint]) -> list[str]:
    rules = []
    if sp.affinity_timeout:
        for ep in eps:
            rules.append(f"ip saddr @{_aff_set(sp, ep)} goto {_ep_chain(sp, ep)}")
    if len(eps) == 1:
        rules.append(f"goto {_ep_chain(sp, eps[0])}")
    else:
        arms = ", ".join(f"{i} : goto {_ep_chain(sp, ep)}" for i, ep in enumerate(eps))
        rules.append(f"numgen random mod {len(eps)} vmap {{ {arms} }}")
    return rules


def _add_service(rs: Ruleset, sp: ServicePort, endpoints: list[Endpoint], node: str, cluster_cidr: str) -> None:
    cluster = usable(endpoints)
    local = usable(e for e in endpoints if e.node == node and node)
    svc, loc, ext = f"svc-{sp.key}", f"loc-{sp.key}", f"ext-{sp.key}"
    used: dict[str, Endpoint] = {}

    def chain_for(eps: list[Endpoint], name: str) -> str:
        if name in rs.chains:
            return name
        for ep in eps:
            used[_ep_chain(sp, ep)] = ep
        rules = _balance(sp, eps)
        if name == svc and cluster_cidr and sp.cluster_ip:
            # Cluster-IP traffic from outside the pods: masqueraded, so replies come back here.
            rules.insert(0, f"ip daddr {sp.cluster_ip} ip saddr != {cluster_cidr} jump {MARK_CHAIN}")
        rs.chains[name] = tuple(rules)
        return name

    # Cluster-IP traffic.
    internal = local if sp.internal_local else cluster
    triple = f"{sp.cluster_ip} . {sp.protocol} . {sp.port}" if sp.cluster_ip else ""
    if sp.cluster_ip:
        rs.elements[CLUSTER_IPS][sp.cluster_ip] = ""
        if internal:
            target = chain_for(internal, loc if sp.internal_local else svc)
            rs.elements[SERVICE_IPS][triple] = f"goto {target}"
        else:
            rs.elements[NO_EP_SERVICES][triple] = "drop" if cluster else f"goto {REJECT_CHAIN}"

    # Node-port and external-IP traffic.
    if sp.has_external:
        external = local if sp.external_local else cluster
        if external or (sp.external_local and cluster):
            rules: list[str] = []
            if sp.external_local:
                # The node's own traffic and pods' traffic keep cluster behaviour.
                if cluster:
                    cl = chain_for(cluster, svc)
                    rules.append(f"fib saddr type local jump {MARK_CHAIN}")
                    rules.append(f"fib saddr type local goto {cl}")
                    if cluster_cidr:
                        rules.append(f"ip saddr {cluster_cidr} goto {cl}")
                rules.append(f"goto {chain_for(local, loc)}" if local else "drop")
            else:
                rules.append(f"jump {MARK_CHAIN}")
                rules.append(f"goto {chain_for(cluster, svc)}")
            rs.chains[ext] = tuple(rules)
            verdict = f"goto {ext}"
            for ip in sp.external_ips:
                rs.elements[SERVICE_IPS][f"{ip} . {sp.protocol} . {sp.port}"] = verdict
            if sp.node_port:
                rs.elements[SERVICE_NODEPORTS][f"{sp.protocol} . {sp.node_port}"] = verdict
        else:
            verdict = "drop" if cluster else f"goto {REJECT_CHAIN}"
            for ip in sp.external_ips:
                rs.elements[NO_EP_SERVICES][f"{ip} . {sp.protocol} . {sp.port}"] = verdict
            if sp.node_port:
                rs.elements[NO_EP_NODEPORTS][f"{sp.protocol} . {sp.node_port}"] = verdict

    for name, ep in used.items():
        rules = [f"ip saddr {ep.ip} jump {MARK_CHAIN}"]
        if sp.affinity_timeout:
            aff = _aff_set(sp, ep)
            rs.sets[aff] = sp.affinity_timeout
            rules.append(f"update @{aff} {{ ip saddr }}")
        rules.append(f"meta l4proto {sp.protocol} dnat to {ep.ip}:{ep.port}")
        rs.chains[name] = tuple(rules)


def build(services: Iterable[tuple[ServicePort, list[Endpoint]]], node: str, cluster_cidr: str = "") -> Ruleset:
    """The per-service part of the table for these service ports and their endpoints."""
    rs = Ruleset()
    for sp, eps in services:
        _add_service(rs, sp, eps, node, cluster_cidr)
    return rs


# --- scripts --------------------------------------------------------------------------------


def _t() -> str:
    return f"{FAMILY} {TABLE}"


def _fixed(mark: int, localhost_nodeports: bool = False) -> list[str]:
    t = _t()
    m = f"0x{mark:08x}"
    lines = [
        f'add table {t} {{ comment "rules of the {names.AGENT_NAME} service proxy" ; }}',
        f"add map {t} {SERVICE_IPS} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}",
        f"add map {t} {SERVICE_NODEPORTS} {{ type inet_proto . inet_service : verdict ; }}",
        f"add map {t} {NO_EP_SERVICES} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}",
        f"add map {t} {NO_EP_NODEPORTS} {{ type inet_proto . inet_service : verdict ; }}",
        f"add set {t} {CLUSTER_IPS} {{ type ipv4_addr ; }}",
        f"add chain {t} {MARK_CHAIN}",
        f"add rule {t} {MARK_CHAIN} meta mark set meta mark | {m}",
        f"add chain {t} masquerading",
        f"add rule {t} masquerading meta mark & {m} == 0 return",
        f"add rule {t} masquerading meta mark set meta mark ^ {m}",
        f"add rule {t} masquerading masquerade fully-random",
        f"add chain {t} {REJECT_CHAIN}",
        f"add rule {t} {REJECT_CHAIN} meta l4proto tcp reject with tcp reset",
        f"add rule {t} {REJECT_CHAIN} reject",
        f"add chain {t} services",
        f"add rule {t} services ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}",
        f"add rule {t} services fib daddr type local ip daddr != 127.0.0.0/8 "
        f"meta l4proto . th dport vmap @{SERVICE_NODEPORTS}",
        f"add chain {t} endpoints-check",
        f"add rule {t} endpoints-check ip daddr . meta l4proto . th dport vmap @{NO_EP_SERVICES}",
        f"add rule {t} endpoints-check fib daddr type local ip daddr != 127.0.0.0/8 "
        f"meta l4proto . th dport vmap @{NO_EP_NODEPORTS}",
        f"add chain {t} cluster-ips-check",
        f"add rule {t} cluster-ips-check ip daddr @{CLUSTER_IPS} goto {REJECT_CHAIN}",
    ]
    hooks = (
        # Numeric priorities: nft accepts the symbolic "dstnat" on prerouting only.
        ("nat-prerouting", "nat", "prerouting", DSTNAT, "jump services"),
        ("nat-output", "nat", "output", DSTNAT, "jump services"),
        ("nat-postrouting", "nat", "postrouting", SRCNAT, "jump masquerading"),
        ("filter-prerouting", "filter", "prerouting", DSTNAT - 10, "ct state new jump endpoints-check"),
        ("filter-output", "filter", "output", DSTNAT - 10, "ct state new jump endpoints-check"),
        ("filter-prerouting-post-dnat", "filter", "prerouting", DSTNAT + 10, "ct state new jump cluster-ips-check"),
        ("filter-output-post-dnat", "filter", "output", DSTNAT + 10, "ct state new jump cluster-ips-check"),
    )
    for name, typ, hook, prio, rule in hooks:
        lines.append(f"add chain {t} {name} {{ type {typ} hook {hook} priority {prio} ; policy accept ; }}")
        if localhost_nodeports and name == "nat-output":
            lines.append(
                f"add rule {t} {name} ip daddr {LOOPBACK_NET} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"
            )
        if localhost_nodeports and name == "filter-output":
            lines.append(
                f"add rule {t} {name} ct state new ip daddr {LOOPBACK_NET} meta l4proto . th dport vmap @{NO_EP_NODEPORTS}"
            )
        lines.append(f"add rule {t} {name} {rule}")
    if localhost_nodeports:
        lines.append(f"add chain {t} {LOCALNET_GUARD} {{ type filter hook input priority 0 ; policy accept ; }}")
        lines.append(
            f'add rule {t} {LOCALNET_GUARD} iifname != "lo" ip daddr {LOOPBACK_NET} '
            "ct state != { established, related } ct status & dnat == 0 drop"
        )
    return lines


def _element(map_name: str, key: str, value: str) -> str:
    return f"{key} : {value}" if value else key


def full_script(rs: Ruleset, mark: int, localhost_nodeports: bool = False) -> str:
    """The whole table from scratch: the old one (if any) goes in the same transaction."""
    t = _t()
    lines = [f"add table {t}", f"delete table {t}"] + _fixed(mark, localhost_nodeports)
    for name, timeout in rs.sets.items():
        lines.append(f"add set {t} {name} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}")
    for name in rs.chains:
        lines.append(f"add chain {t} {name}")
    for name, rules in rs.chains.items():
        lines.extend(f"add rule {t} {name} {r}" for r in rules)
    for m, elems in rs.elements.items():
        if elems:
            lines.append(f"add element {t} {m} {{ {', '.join(_element(m, k, v) for k, v in elems.items())} }}")
    return "\n".join(lines) + "\n"


def diff_script(old: Ruleset, new: Ruleset) -> str:
    """Only what changed from ``old`` (what the table holds) to ``new``, ordered so that
    nothing is deleted while referenced and nothing referenced before it exists; ""
    when nothing changed."""
    t = _t()
    lines: list[str] = []
    for name, timeout in new.sets.items():
        if old.sets.get(name) != timeout:
            if name in old.sets:
                continue  # a changed timeout: handled below by re-creating the set
            lines.append(f"add set {t} {name} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}")
    retimed = [n for n, to in new.sets.items() if n in old.sets and old.sets[n] != to]
    new_chains = [n for n in new.chains if n not in old.chains]
    lines.extend(f"add chain {t} {n}" for n in new_chains)
    # Chains whose rules refer to a re-created set must be emptied before the set goes.
    touching = {n for n in old.chains if any(f"@{s} " in r for s in retimed for r in old.chains[n])}
    for n in sorted(touching):
        if n in new.chains:
            lines.append(f"flush chain {t} {n}")
    for s in retimed:
        lines.append(f"delete set {t} {s}")
        lines.append(f"add set {t} {s} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {new.sets[s]}s ; }}")
    for name, rules in new.chains.items():
        prev = old.chains.get(name)
        if prev == rules and name not in touching:
            continue
        if prev is not None and name not in touching:
            lines.append(f"flush chain {t} {name}")
        lines.extend(f"add rule {t} {name} {r}" for r in rules)
    for m in DYNAMIC_MAPS:
        was, now = old.elements.get(m, {}), new.elements.get(m, {})
        gone = [k for k, v in was.items() if k not in now or now[k] != v]
        if gone:
            lines.append(f"delete element {t} {m} {{ {', '.join(gone)} }}")
    for m in DYNAMIC_MAPS:
        was, now = old.elements.get(m, {}), new.elements.get(m, {})
        added = [_element(m, k, v) for k, v in now.items() if was.get(k) != v]
        if added:
            lines.append(f"add element {t} {m} {{ {', '.join(added)} }}")
    removed = [n for n in old.chains if n not in new.chains]
    for n in removed:
        lines.append(f"flush chain {t} {n}")
    for n in removed:
        lines.append(f"delete chain {t} {n}")
    for s in old.sets:
        if s not in new.sets:
            lines.append(f"delete set {t} {s}")
    return "\n".join(lines) + "\n" if lines else ""


def delete_script() -> str:
    """Remove the whole table (``add`` first, so a missing table is no error)."""
    return f"add table {_t()}\ndelete table {_t()}\n"
