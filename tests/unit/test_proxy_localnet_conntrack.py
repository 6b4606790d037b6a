"""The service proxy's localhost node ports (rules, sysctl record), stale UDP conntrack
flows, and its use of a shared Services informer (no nft, no netlink needed)."""

from __future__ import annotations

import asyncio

from agent.proxy import model, ruleset
from agent.proxy.conntrack import Flow, UdpTarget, stale_flows
from agent.proxy.localnet import STATE_FILE, LocalnetSysctl
from agent.proxy.proxier import ServiceProxy
from tests.unit.test_proxy_ruleset import FakeInformer, FakeRunner, eps_slice, svc

T = "ip orch-proxy"


def test_localhost_nodeports_only_in_the_output_path_with_the_guard():
    off = ruleset.full_script(ruleset.Ruleset(), 1 << 14)
    assert "daddr 127.0.0.0/8 meta l4proto" not in off and ruleset.LOCALNET_GUARD not in off
    on = ruleset.full_script(ruleset.Ruleset(), 1 << 14, localhost_nodeports=True).splitlines()
    assert f"add rule {T} nat-output ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports" in on
    assert (
        f"add rule {T} filter-output ct state new ip daddr 127.0.0.0/8 meta l4proto . th dport vmap "
        "@no-endpoint-nodeports" in on
    )
    # Never from prerouting: a packet from elsewhere to 127/8 is not forwarded to a pod.
    assert not [line for line in on if "prerouting" in line and "daddr 127.0.0.0/8 meta" in line]
    # The localhost rule comes before the general one in nat-output.
    nat_out = [line for line in on if line.startswith(f"add rule {T} nat-output ")]
    assert nat_out[-1].endswith("jump services") and "127.0.0.0/8" in nat_out[0]
    assert f"add chain {T} localnet-guard {{ type filter hook input priority 0 ; policy accept ; }}" in on
    assert (
        f'add rule {T} localnet-guard iifname != "lo" ip daddr 127.0.0.0/8 '
        "ct state != { established, related } ct status & dnat == 0 drop" in on
    )


def test_route_localnet_recorded_and_restored_only_when_changed(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net/ipv4/conf/all").mkdir(parents=True)
    knob = proc / "net/ipv4/conf/all/route_localnet"
    state = tmp_path / "root"
    knob.write_text("0\n")
    s = LocalnetSysctl(str(state), proc_sys=str(proc))
    assert s.enable() is True and knob.read_text() == "1"
    assert s.recorded() == "0"
    assert s.enable() is False  # already set: the first record stays
    assert s.recorded() == "0"
    assert s.restore() == "0" and knob.read_text() == "0"
    assert not (state / STATE_FILE).exists()
    assert s.restore() is None
    # Set by someone else before: left alone, nothing recorded.
    knob.write_text("1\n")
    assert s.enable() is False and s.recorded() is None
    assert s.restore() is None and knob.read_text().strip() == "1"


def _t(*addrs, port=53, node_port=0, eps=()):
    return UdpTarget(tuple(addrs), port, node_port, frozenset(eps))


def test_stale_udp_flows():
    k = "default/dns/udp/dns"
    # An endpoint removed: entries translated to it, toward each address and the node port.
    old = {k: _t("10.96.0.10", "203.0.113.5", node_port=30053, eps=("10.0.0.1", "10.0.0.2"))}
    new = {k: _t("10.96.0.10", "203.0.113.5", node_port=30053, eps=("10.0.0.2",))}
    assert stale_flows(old, new) == {
        Flow("10.96.0.10", 53, "10.0.0.1"),
        Flow("203.0.113.5", 53, "10.0.0.1"),
        Flow("", 30053, "10.0.0.1"),
    }
    # Nothing changed: nothing to delete.
    assert stale_flows(new, new) == set()
    # The service gone: everything toward its addresses and node port.
    assert stale_flows(new, {}) == {Flow("10.96.0.10", 53), Flow("203.0.113.5", 53), Flow("", 30053)}
    # From no endpoints to some: the entries made while it rejected.
    assert stale_flows({k: _t("10.96.0.10")}, {k: _t("10.96.0.10", eps=("10.0.0.1",))}) == {Flow("10.96.0.10", 53)}
    # A changed cluster IP: the old one's entries.
    assert stale_flows({k: _t("10.96.0.10", eps=("10.0.0.1",))}, {k: _t("10.96.0.11", eps=("10.0.0.1",))}) == {
        Flow("10.96.0.10", 53)
    }
    f = Flow("", 30053, "10.0.0.1")
    assert f.matches("192.0.2.2", 30053, "10.0.0.1") and not f.matches("192.0.2.2", 30053, "10.0.0.2")
    assert not Flow("10.96.0.10", 53).matches("10.96.0.11", 53, "10.0.0.1")


class FakeCleaner:
    def __init__(self) -> None:
        self.calls: list[set[Flow]] = []

    async def delete(self, flows: set[Flow]) -> int:
        self.calls.append(set(flows))
        return len(flows)


def _udp_slice(*ips):
    sl = eps_slice(*ips, service="dns", name="dns-1", port=5353)
    sl["ports"] = [{"name": "dns", "port": 5353, "protocol": "UDP"}]
    return sl


async def test_proxy_deletes_stale_udp_entries_after_applying():
    runner, cleaner = FakeRunner(), FakeCleaner()
    proxy = ServiceProxy(None, "n1", runner=runner, informer_factory=FakeInformer, conntrack=cleaner)
    add_svc, delete_svc = proxy.services.handlers[0][0], proxy.services.handlers[0][2]
    add_slice, update_slice = proxy.slices.handlers[0][0], proxy.slices.handlers[0][1]
    dns = svc(name="dns", clusterIP="10.96.0.53", ports=[{"name": "dns", "port": 53, "protocol": "UDP"}])
    add_svc(dns)
    add_svc(svc())  # TCP only: never looked at
    await proxy.sync()
    assert cleaner.calls == []  # no endpoints yet, nothing to delete
    add_slice(_udp_slice("10.0.0.1", "10.0.0.2"))
    await proxy.sync()
    assert cleaner.calls[-1] == {Flow("10.96.0.53", 53)}
    update_slice(None, _udp_slice("10.0.0.2"))
    await proxy.sync()
    assert cleaner.calls[-1] == {Flow("10.96.0.53", 53, "10.0.0.1")}
    delete_svc(dns)
    await proxy.sync()
    assert cleaner.calls[-1] == {Flow("10.96.0.53", 53)} and proxy.udp_applied == {}
    assert len(cleaner.calls) == 3


class SharedInformer(FakeInformer):
    """An informer some other owner runs, already listed."""

    def __init__(self, items) -> None:
        super().__init__(None, "")
        self.cache = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in items}
        self.synced = True
        self.ran = False

    async def wait_synced(self, timeout=None) -> bool:
        return True

    async def run(self) -> None:
        self.ran = True  # a shared informer is run by its owner, not by the proxy


class ListedSlices(FakeInformer):
    cache: dict = {}

    async def wait_synced(self, timeout=None) -> bool:
        return True

    async def run(self) -> None:
        await asyncio.Event().wait()


async def test_proxy_uses_a_shared_services_informer_listed_before_it_started():
    runner = FakeRunner()
    shared = SharedInformer([svc()])
    proxy = ServiceProxy(
        None, "n1", runner=runner, informer_factory=ListedSlices, services_informer=shared, check_period=5
    )
    assert proxy.services is shared and shared.handlers  # its handler is on the shared informer
    task = asyncio.create_task(proxy.run())
    try:
        for _ in range(100):
            if proxy.syncs:
                break
            await asyncio.sleep(0.01)
        assert "default/web" in proxy.applied  # the service listed before the proxy's handler
        assert not shared.ran  # one Services watch per node: the owner's
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_dual_stack_service_gets_its_ipv4_address_and_the_ipv6_one_is_noted():
    ports, notes = model.service_ports(svc(clusterIP="fd00::10", clusterIPs=["fd00::10", "10.96.0.10"]))
    assert [p.cluster_ip for p in ports] == ["10.96.0.10"]
    assert notes == ["cluster IP fd00::10 is not IPv4; this proxy programs IPv4 only"]
    ports, notes = model.service_ports(svc(clusterIP="fd00::10", clusterIPs=["fd00::10"]))
    assert ports == [] and notes


async def _run_until(proxy: ServiceProxy, cond) -> None:
    task = asyncio.create_task(proxy.run())
    try:
        for _ in range(200):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_without_the_sysctl_localhost_node_ports_are_left_out(tmp_path):
    runner = FakeRunner()
    proxy = ServiceProxy(
        None,
        "n1",
        runner=runner,
        informer_factory=ListedSlices,
        services_informer=SharedInformer([svc()]),
        localhost_nodeports=True,
        check_period=5,
    )
    proxy.localnet = LocalnetSysctl(str(tmp_path / "root"), proc_sys=str(tmp_path / "no-proc"))
    # The first full sync has the rules (and the guard) before the sysctl is tried; it
    # cannot be set here, so the next full sync goes without them.
    await _run_until(proxy, lambda: len(runner.scripts) >= 2)
    assert ruleset.LOCALNET_GUARD in runner.scripts[0]
    assert ruleset.LOCALNET_GUARD not in runner.scripts[1] and "delete table" in runner.scripts[1]
    assert proxy.localhost_nodeports is False


async def test_turned_off_the_sysctl_the_proxy_set_is_put_back(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net/ipv4/conf/all").mkdir(parents=True)
    (proc / "net/ipv4/conf/all/route_localnet").write_text("0")
    sysctl = LocalnetSysctl(str(tmp_path / "root"), proc_sys=str(proc))
    assert sysctl.enable()  # an earlier run with localhost node ports
    runner = FakeRunner()
    proxy = ServiceProxy(
        None, "n1", runner=runner, informer_factory=ListedSlices, services_informer=SharedInformer([]), check_period=5
    )
    proxy.localnet = sysctl
    await _run_until(proxy, lambda: runner.scripts)
    assert sysctl.current() == "0" and sysctl.recorded() is None
    assert ruleset.LOCALNET_GUARD not in runner.scripts[0]
