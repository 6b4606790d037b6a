"""The address an API server advertises when ``--advertise-address`` is not given.

As upstream: the bind address, unless it is unspecified (``0.0.0.0``, ``::``)
or loopback; then the address of the interface holding the default route (IPv4
first, then IPv6). The ``orch`` Service's endpoints list this address, and
endpoints may not be loopback ones.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

__all__ = ["AddressError", "advertise_address", "default_route_address"]

SIOCGIFADDR = 0x8915
RTF_UP = 0x1


class AddressError(RuntimeError):
    """No address to advertise could be found."""


def _ipv4_default_interfaces(proc_net: str) -> list[str]:
    """Interfaces with an IPv4 default route, lowest metric first."""
    found: list[tuple[int, str]] = []
    try:
        with open(f"{proc_net}/route") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        cols = line.split()
        if len(cols) < 8:
            continue
        iface, dest, flags, metric, mask = cols[0], cols[1], cols[3], cols[6], cols[7]
        try:
            if int(dest, 16) == 0 and int(mask, 16) == 0 and int(flags, 16) & RTF_UP:
                found.append((int(metric), iface))
        except ValueError:
            continue
    return [iface for _, iface in sorted(found)]


def _ipv4_of(iface: str) -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", iface[:15].encode()))
    except OSError:
        return ""
    return socket.inet_ntoa(raw[20:24])


def _ipv6_default_interfaces(proc_net: str) -> list[str]:
    found: list[tuple[int, str]] = []
    try:
        with open(f"{proc_net}/ipv6_route") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        cols = line.split()
        if len(cols) < 10:
            continue
        dest, plen, metric, flags, iface = cols[0], cols[1], cols[5], cols[8], cols[9]
        try:
            if int(dest, 16) == 0 and int(plen, 16) == 0 and int(flags, 16) & RTF_UP and iface != "lo":
                found.append((int(metric, 16), iface))
        except ValueError:
            continue
    return [iface for _, iface in sorted(found)]


def _ipv6_of(iface: str, proc_net: str) -> str:
    try:
        with open(f"{proc_net}/if_inet6") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        cols = line.split()
        if len(cols) >= 6 and cols[5] == iface:
            addr = ipaddress.IPv6Address(bytes.fromhex(cols[0]))
            if addr.is_global or addr.is_private and not addr.is_link_local:
                return str(addr)
    return ""


def default_route_address(proc_net: str = "/proc/net") -> str:
    """The address of the interface holding the default route (IPv4 first), or ""."""
    for iface in _ipv4_default_interfaces(proc_net):
        if addr := _ipv4_of(iface):
            return addr
    for iface in _ipv6_default_interfaces(proc_net):
        if addr := _ipv6_of(iface, proc_net):
            return addr
    return ""


def advertise_address(bind_address: str, proc_net: str = "/proc/net") -> str:
    """The bind address when it is a specific, non-loopback one; else the default-route
    interface's address. Raises AddressError when there is none."""
    ip = ipaddress.ip_address(bind_address)
    if not (ip.is_unspecified or ip.is_loopback):
        return bind_address
    found = default_route_address(proc_net)
    if not found:
        raise AddressError(
            f"no address to advertise: --bind-address {bind_address} is "
            f"{'unspecified' if ip.is_unspecified else 'loopback'} and there is no default route in "
            "/proc/net/route or /proc/net/ipv6_route to take an interface address from; "
            "set --advertise-address or a specific --bind-address"
        )
    return found
