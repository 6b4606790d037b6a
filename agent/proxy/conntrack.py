"""Stale UDP conntrack entries, removed when a UDP service's backends change.

Only the first packet of a flow passes the NAT hooks; the kernel's connection
tracking sends every later packet of the same 5-tuple where the first one went.
For TCP a dead backend ends the connection; a UDP client that keeps its source
port (DNS resolvers, many game and media protocols) would keep talking to an
endpoint that is gone, or keep being rejected after the service got endpoints.
So after each sync, as upstream's proxy does, the proxy deletes the UDP entries
(over netlink, pyroute2's conntrack socket):

* toward a service address and port that went away (a cluster IP or external
  IP deleted or changed, a node port released);
* toward a service address and port (or node port) that now has endpoints and
  had none (entries made while it rejected);
* that were translated to an endpoint the service no longer uses.

:func:`stale_flows` decides (pure); :class:`ConntrackCleaner` deletes.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Any, Iterable, Mapping

from .. import logging as agent_logging
from .model import Endpoint, ServicePort, usable

__all__ = ["UdpTarget", "Flow", "udp_target", "stale_flows", "ConntrackCleaner"]

log = agent_logging.get_logger("proxy")


@dataclasses.dataclass(frozen=True)
class UdpTarget:
    """What one UDP service port sends where: its addresses (cluster and external IPs),
    port, node port, and the endpoint addresses its rules translate to."""

    addresses: tuple[str, ...]
    port: int
    node_port: int
    endpoints: frozenset[str]


@dataclasses.dataclass(frozen=True, order=True)
class Flow:
    """UDP entries whose original destination port is ``dport`` and address ``dst``
    ("" = any: a node port on any of the node's addresses), and, when ``endpoint`` is
    set, whose replies come from it (the entries translated to that endpoint)."""

    dst: str
    dport: int
    endpoint: str = ""

    def matches(self, orig_dst: str, orig_dport: int, reply_src: str) -> bool:
        return (
            orig_dport == self.dport
            and (not self.dst or orig_dst == self.dst)
            and (not self.endpoint or reply_src == self.endpoint)
        )


def udp_target(sp: ServicePort, endpoints: Iterable[Endpoint], node: str) -> UdpTarget:
    eps = list(endpoints)
    used = {e.ip for e in usable(eps)} | {e.ip for e in usable(e for e in eps if node and e.node == node)}
    addresses = ((sp.cluster_ip,) if sp.cluster_ip else ()) + tuple(sp.external_ips)
    return UdpTarget(addresses, sp.port, sp.node_port, frozenset(used))


def stale_flows(old: Mapping[str, UdpTarget], new: Mapping[str, UdpTarget]) -> set[Flow]:
    """The flows to delete after the rules went from ``old`` to ``new`` (both keyed by
    service port)."""
    out: set[Flow] = set()
    for key, o in old.items():
        n = new.get(key)
        kept = set(n.addresses) if n is not None and n.port == o.port else set()
        for addr in o.addresses:
            if addr not in kept:
                out.add(Flow(addr, o.port))
        node_port_kept = n is not None and n.node_port == o.node_port
        if o.node_port and not node_port_kept:
            out.add(Flow("", o.node_port))
        gone = o.endpoints - (n.endpoints if n is not None else frozenset())
        for ep in sorted(gone):
            for addr in o.addresses:
                if addr in kept:
                    out.add(Flow(addr, o.port, ep))
            if o.node_port and node_port_kept:
                out.add(Flow("", o.node_port, ep))
    for key, n in new.items():
        before = old.get(key)
        if not n.endpoints or (before is not None and before.endpoints):
            continue
        for addr in n.addresses:
            out.add(Flow(addr, n.port))
        if n.node_port:
            out.add(Flow("", n.node_port))
    return out


class ConntrackCleaner:
    """Deletes the UDP conntrack entries of :class:`Flow` s through netlink."""

    def __init__(self) -> None:
        self.deleted = 0  # entries deleted so far (tests, logs)

    async def delete(self, flows: Iterable[Flow]) -> int:
        """Delete the entries of ``flows``; the number deleted. Netlink failures are
        logged (the entries then time out by themselves)."""
        wanted = sorted(set(flows))
        if not wanted:
            return 0
        # pyroute2 is loaded when a UDP service's backends first change (about 6 MB a
        # node without UDP services never loads).
        import pyroute2

        attr_tuple = pyroute2.conntrack.NFCTAttrTuple  # loaded by the package's own import
        count = 0
        ct: Any = pyroute2.AsyncConntrack()
        try:
            await ct.setup_endpoint()
            by_port: dict[int, list[Flow]] = {}
            for f in wanted:
                by_port.setdefault(f.dport, []).append(f)
            for dport, group in by_port.items():
                dsts = {f.dst for f in group}
                # The kernel filters by the original tuple (5.8+); older kernels dump
                # everything and the match below filters.
                dst = next(iter(dsts)) if len(dsts) == 1 and "" not in dsts else None
                flt = attr_tuple(proto=socket.IPPROTO_UDP, dport=dport, daddr=dst)
                entries = [e async for e in await ct.dump_entries(tuple_orig=flt)]
                for entry in entries:
                    orig, reply = entry.tuple_orig, entry.tuple_reply
                    if orig.proto != socket.IPPROTO_UDP:
                        continue
                    if any(f.matches(orig.daddr, orig.dport, reply.saddr) for f in group):
                        try:
                            await ct.delete(entry)
                            count += 1
                        except Exception as exc:  # gone meanwhile (ENOENT) or refused
                            log.v(4).info("Conntrack entry not deleted", entry=repr(orig), err=str(exc))
        except Exception as exc:
            log.warning("Deleting stale UDP conntrack entries failed; they time out instead", err=str(exc))
        finally:
            try:
                ct.close()
            except Exception:
                pass
        self.deleted += count
        if count:
            log.v(2).info("Deleted stale UDP conntrack entries", entries=count, flows=len(wanted))
        return count
