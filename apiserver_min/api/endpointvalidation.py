"""Validation of Endpoints (core ``v1``) and EndpointSlices (``discovery.orch.io/v1``).

The rules, messages and field paths are upstream's (1.27): addresses must be IP
addresses of the slice's ``addressType`` (or domain names for FQDN), and neither
unspecified, loopback, link-local nor link-local multicast; at most 1000 endpoints per
slice, 1 to 100 addresses per endpoint, at most 100 ports with unique names that are
empty or DNS labels; ``addressType`` immutable. (``addressType`` and the ports'
``protocol`` are enumerations, checked with the other enumerated fields.) Endpoints
subsets need addresses (ready or not) and, with more than one port, port names.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from .names import LABEL_ZONE
from .validation import (
    FIELD_VALUE_TOO_MANY,
    INTERNAL_ERROR,
    FieldError,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    validate_labels,
)

__all__ = [
    "validate_endpoints",
    "validate_endpoint_slice",
    "validate_endpoint_slice_update",
    "validate_non_special_ip",
]

MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 100
MAX_TOPOLOGY_LABELS = 16

Errs = list[FieldError]


def _too_many(path: str, actual: int, limit: int) -> FieldError:
    return FieldError(FIELD_VALUE_TOO_MANY, path, actual, f"must have at most {limit} items")


def _parse_ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        # Upstream parses "sloppily": IPv4 octets with leading zeros are accepted.
        parts = value.split(".")
        if len(parts) == 4 and all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts):
            return ipaddress.IPv4Address(".".join(str(int(p)) for p in parts))
        return None


def _link_local_multicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if ip.version == 4:
        return ip in ipaddress.ip_network("224.0.0.0/24")
    return ip.is_multicast and (ip.packed[1] & 0x0F) == 0x02  # scope 2: link-local (ff02::/16 and friends)


def validate_non_special_ip(value: str, path: str) -> Errs:
    """Not unspecified, loopback, link-local or link-local multicast (upstream ValidateNonSpecialIP)."""
    ip = _parse_ip(value)
    if ip is None:
        return [FieldError.invalid(path, value, "must be a valid IP address")]
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # Go's net.IP sees a mapped IPv4 address as that address
    errs: Errs = []
    if ip.is_unspecified:
        errs.append(FieldError.invalid(path, value, f"may not be unspecified ({value})"))
    if ip.is_loopback:
        errs.append(FieldError.invalid(path, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
    if ip.is_link_local and not ip.is_multicast:
        errs.append(FieldError.invalid(path, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
    if _link_local_multicast(ip):
        errs.append(
            FieldError.invalid(path, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
        )
    return errs


def _is_ipv4(value: str) -> bool:
    ip = _parse_ip(value)
    return ip is not None and (ip.version == 4 or ip.ipv4_mapped is not None)


def _is_ipv6(value: str) -> bool:
    ip = _parse_ip(value)
    return ip is not None and ip.version == 6 and ip.ipv4_mapped is None


def _fqdn(value: str, path: str) -> Errs:
    """Upstream IsFullyQualifiedDomainName."""
    if not value:
        return [FieldError.required(path)]
    name = value[:-1] if value.endswith(".") else value
    problems = is_dns1123_subdomain(name)
    if problems:
        return [FieldError.invalid(path, name, ",".join(problems))]
    labels = name.split(".")
    if len(labels) < 2:
        return [FieldError.invalid(path, name, "should be a domain with at least two segments separated by dots")]
    for label in labels:
        problems = is_dns1123_label(label)
        if problems:
            return [FieldError.invalid(path, label, ",".join(problems))]
    return []


def _label(value: str, path: str) -> Errs:
    return [FieldError.invalid(path, value, m) for m in is_dns1123_label(value)]


def _node_name(value: Any, path: str) -> Errs:
    if not isinstance(value, str):
        return [FieldError.type_invalid(path, value, "must be a string")]
    return [FieldError.invalid(path, value, m) for m in is_dns1123_subdomain(value)]


def _app_protocol(value: Any, path: str) -> Errs:
    if value is None:
        return []
    if not isinstance(value, str):
        return [FieldError.type_invalid(path, value, "must be a string")]
    return [FieldError.invalid(path, value, m) for m in is_qualified_name(value)]


def _dicts(value: Any) -> list:
    return value if isinstance(value, list) else []


# --- Endpoints ---------------------------------------------------------------------------------


def validate_endpoints(obj: dict) -> Errs:
    """The ``subsets`` of an Endpoints object (metadata is checked by the strategy)."""
    errs: Errs = []
    for i, subset in enumerate(_dicts(obj.get("subsets"))):
        path = f"subsets[{i}]"
        if not isinstance(subset, dict):
            errs.append(FieldError.type_invalid(path, subset, "must be an object"))
            continue
        addresses, not_ready = _dicts(subset.get("addresses")), _dicts(subset.get("notReadyAddresses"))
        if not addresses and not not_ready:
            errs.append(FieldError.required(path, "must specify `addresses` or `notReadyAddresses`"))
        for j, a in enumerate(addresses):
            errs += _endpoint_address(a, f"{path}.addresses[{j}]")
        for j, a in enumerate(not_ready):
            errs += _endpoint_address(a, f"{path}.notReadyAddresses[{j}]")
        ports = _dicts(subset.get("ports"))
        for j, p in enumerate(ports):
            errs += _endpoints_port(p, len(ports) > 1, f"{path}.ports[{j}]")
    return errs


def _endpoint_address(addr: Any, path: str) -> Errs:
    if not isinstance(addr, dict):
        return [FieldError.type_invalid(path, addr, "must be an object")]
    errs: Errs = []
    ip = addr.get("ip") or ""
    if not isinstance(ip, str):
        return [FieldError.type_invalid(f"{path}.ip", ip, "must be a string")]
    if _parse_ip(ip) is None:
        errs.append(
            FieldError.invalid(f"{path}.ip", ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")
        )
    hostname = addr.get("hostname")
    if hostname:
        errs += _label(hostname, f"{path}.hostname")
    if addr.get("nodeName") is not None:
        errs += _node_name(addr["nodeName"], f"{path}.nodeName")
    return errs + validate_non_special_ip(ip, f"{path}.ip")


def _endpoints_port(port: Any, require_name: bool, path: str) -> Errs:
    if not isinstance(port, dict):
        return [FieldError.type_invalid(path, port, "must be an object")]
    errs: Errs = []
    name = port.get("name") or ""
    if require_name and not name:
        errs.append(FieldError.required(f"{path}.name"))
    elif name:
        errs += _label(name, f"{path}.name")
    number = port.get("port", 0)
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
        errs.append(FieldError.invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive"))
    errs += _app_protocol(port.get("appProtocol"), f"{path}.appProtocol")
    return errs


# --- EndpointSlice -----------------------------------------------------------------------------


def validate_endpoint_slice(obj: dict) -> Errs:
    """``endpoints`` and ``ports`` of an EndpointSlice."""
    errs: Errs = []
    # ``addressType`` and the ports' ``protocol`` are enumerations: the enumerated-field
    # rules (api/enumvalidation.py) check them, with upstream's messages.
    address_type = obj.get("addressType")
    errs += _slice_endpoints(obj.get("endpoints"), address_type)
    errs += _slice_ports(obj.get("ports"))
    return errs


def validate_endpoint_slice_update(new: dict, old: dict) -> Errs:
    errs = validate_endpoint_slice(new)
    if new.get("addressType") != old.get("addressType"):
        errs.append(FieldError.invalid("addressType", new.get("addressType"), "field is immutable"))
    return errs


def _slice_endpoints(endpoints: Any, address_type: Any) -> Errs:
    eps = _dicts(endpoints)
    if len(eps) > MAX_ENDPOINTS:
        return [_too_many("endpoints", len(eps), MAX_ENDPOINTS)]
    errs: Errs = []
    for i, ep in enumerate(eps):
        path = f"endpoints[{i}]"
        if not isinstance(ep, dict):
            errs.append(FieldError.type_invalid(path, ep, "must be an object"))
            continue
        addresses = _dicts(ep.get("addresses"))
        apath = f"{path}.addresses"
        if not addresses:
            errs.append(FieldError.required(apath, "must contain at least 1 address"))
        elif len(addresses) > MAX_ADDRESSES:
            errs.append(_too_many(apath, len(addresses), MAX_ADDRESSES))
        for j, address in enumerate(addresses):
            p = f"{apath}[{j}]"
            if not isinstance(address, str):
                errs.append(FieldError.type_invalid(p, address, "must be a string"))
                continue
            if address_type == "IPv4":
                if not _is_ipv4(address):
                    errs.append(FieldError.invalid(p, address, "must be a valid IPv4 address"))
                errs += validate_non_special_ip(address, p)
            elif address_type == "IPv6":
                if not _is_ipv6(address):
                    errs.append(FieldError.invalid(p, address, "must be a valid IPv6 address"))
                errs += validate_non_special_ip(address, p)
            elif address_type == "FQDN":
                errs += _fqdn(address, p)
        if ep.get("nodeName") is not None:
            errs += _node_name(ep["nodeName"], f"{path}.nodeName")
        topology = ep.get("deprecatedTopology")
        tpath = f"{path}.deprecatedTopology"
        if isinstance(topology, dict):
            if len(topology) > MAX_TOPOLOGY_LABELS:
                errs.append(_too_many(tpath, len(topology), MAX_TOPOLOGY_LABELS))
            errs += validate_labels(topology, tpath)
            if LABEL_ZONE in topology:
                errs.append(
                    FieldError(
                        INTERNAL_ERROR, f"{tpath}[{LABEL_ZONE}]", "", "reserved key was not removed in conversion"
                    )
                )
        if ep.get("hostname") is not None:
            errs += _label(ep["hostname"], f"{path}.hostname")
        hints = ep.get("hints")
        if isinstance(hints, dict):
            errs += _hints(hints, f"{path}.hints")
    return errs


def _hints(hints: dict, path: str) -> Errs:
    zones = _dicts(hints.get("forZones"))
    zpath = f"{path}.forZones"
    if len(zones) > 8:
        return [_too_many(zpath, len(zones), 8)]
    errs: Errs = []
    seen: set[str] = set()
    for i, z in enumerate(zones):
        name = (z or {}).get("name", "") if isinstance(z, dict) else ""
        p = f"{zpath}[{i}].name"
        if name in seen:
            errs.append(FieldError.duplicate(p, name))
        seen.add(name)
        errs += [FieldError.invalid(p, name, m) for m in is_valid_label_value(name)]
    return errs


def _slice_ports(ports: Any) -> Errs:
    items = _dicts(ports)
    if len(items) > MAX_PORTS:
        return [_too_many("ports", len(items), MAX_PORTS)]
    errs: Errs = []
    names: set[str] = set()
    for i, port in enumerate(items):
        path = f"ports[{i}]"
        if not isinstance(port, dict):
            errs.append(FieldError.type_invalid(path, port, "must be an object"))
            continue
        name = port.get("name") or ""
        if name:
            errs += _label(name, f"{path}.name")
        if name in names:
            errs.append(FieldError.duplicate(f"{path}.name", name))
        names.add(name)
        number = port.get("port")
        if number is not None and (not isinstance(number, int) or isinstance(number, bool) or not 0 <= number <= 65535):
            errs.append(FieldError.invalid(f"{path}.port", number, "must be between 0 and 65535, inclusive"))
        errs += _app_protocol(port.get("appProtocol"), f"{path}.appProtocol")
    return errs
