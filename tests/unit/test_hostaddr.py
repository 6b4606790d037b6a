"""The address an API server advertises without --advertise-address (apiserver_min/hostaddr.py)."""

from __future__ import annotations

import pytest

from apiserver_min import hostaddr
from apiserver_min.hostaddr import AddressError, advertise_address

ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"


def _proc(tmp_path, route: str = "", ipv6_route: str = "", if_inet6: str = ""):
    (tmp_path / "route").write_text(ROUTE_HEADER + route)
    (tmp_path / "ipv6_route").write_text(ipv6_route)
    (tmp_path / "if_inet6").write_text(if_inet6)
    return str(tmp_path)


def test_a_specific_bind_address_is_advertised(tmp_path):
    assert advertise_address("192.0.2.7", _proc(tmp_path)) == "192.0.2.7"


def test_loopback_or_unspecified_bind_advertises_the_default_route_interface(tmp_path, monkeypatch):
    route = (
        "eth1\t00000000\t0102A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    )
    monkeypatch.setattr(hostaddr, "_ipv4_of", {"eth0": "192.0.2.2", "eth1": "192.168.2.9"}.get)
    proc = _proc(tmp_path, route)
    assert advertise_address("127.0.0.1", proc) == "192.0.2.2"  # the lowest metric
    assert advertise_address("0.0.0.0", proc) == "192.0.2.2"


def test_ipv6_default_route_when_there_is_no_ipv4_one(tmp_path):
    ipv6_route = (
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n"
    )
    if_inet6 = "fe800000000000000000000000000002 02 40 20 80 eth0\n20010db8000000000000000000000002 02 40 00 80 eth0\n"
    proc = _proc(tmp_path, ipv6_route=ipv6_route, if_inet6=if_inet6)
    assert advertise_address("::1", proc) == "2001:db8::2"


def test_no_default_route_is_an_error_naming_the_flag(tmp_path):
    with pytest.raises(AddressError, match="set --advertise-address"):
        advertise_address("127.0.0.1", _proc(tmp_path))


def test_this_machine_has_an_address_to_advertise():
    # The real /proc/net (every test server binds 127.0.0.1 and relies on this).
    got = advertise_address("127.0.0.1")
    assert got and not got.startswith("127.")
