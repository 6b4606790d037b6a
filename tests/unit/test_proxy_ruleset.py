"""The service proxy's rules as data and as nft scripts (no nft needed)."""

from __future__ import annotations

import pytest

from agent.proxy import model, nft, ruleset
from agent.proxy.nft import LibNftRunner, NftError, NftRunner
from agent.proxy.proxier import ServiceIndex, ServiceProxy
from apiserver_min.api import names
from apiserver_min.api.user import UserInfo
from apiserver_min.authz.authorizer import AuthzAttributes, Decision
from apiserver_min.authz.node import NodeAuthorizer, NodeGraph

T = "ip orch-proxy"


def svc(name="web", ns="default", **spec) -> dict:
    base = {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    base.update(spec)
    return {"metadata": {"namespace": ns, "name": name}, "spec": base}


def eps_slice(*eps, name="web-1", ns="default", service="web", port=8080) -> dict:
    out = []
    for e in eps:
        ip, _, node = e.partition("@")
        cond = {}
        if ip.endswith("!"):  # not ready
            ip, cond = ip[:-1], {"ready": False}
        elif ip.endswith("~"):  # terminating but serving
            ip, cond = ip[:-1], {"ready": False, "serving": True, "terminating": True}
        out.append({"addresses": [ip], "nodeName": node or "n1", "conditions": cond})
    return {
        "metadata": {"namespace": ns, "name": name, "labels": {names.LABEL_SERVICE_NAME: service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": out,
    }


def rules_for(service: dict, *slices: dict, node="n1", cidr="") -> ruleset.Ruleset:
    ports, _ = model.service_ports(service)
    return ruleset.build(((sp, model.endpoints_for(sp, list(slices))) for sp in ports), node, cidr)


SVC = "svc-default/web/tcp/http"
EP_A = "ep-default/web/tcp/http__10.0.0.1/8080"
EP_B = "ep-default/web/tcp/http__10.0.0.2/8080"


def test_one_service_several_endpoints_random_balance():
    rs = rules_for(svc(), eps_slice("10.0.0.1", "10.0.0.2", "10.0.0.3!"))
    assert rs.elements[ruleset.SERVICE_IPS] == {"10.96.0.10 . tcp . 80": f"goto {SVC}"}
    assert rs.elements[ruleset.CLUSTER_IPS] == {"10.96.0.10": ""}
    assert rs.chains[SVC] == (f"numgen random mod 2 vmap {{ 0 : goto {EP_A}, 1 : goto {EP_B} }}",)
    assert rs.chains[EP_A] == (
        "ip saddr 10.0.0.1 jump mark-for-masquerade",  # hairpin
        "meta l4proto tcp dnat to 10.0.0.1:8080",
    )
    assert not rs.sets and not rs.elements[ruleset.NO_EP_SERVICES]
    script = ruleset.full_script(rs, 1 << 14)
    assert script.startswith(f"add table {T}\ndelete table {T}\n")
    assert f"add element {T} service-ips {{ 10.96.0.10 . tcp . 80 : goto {SVC} }}" in script
    assert "meta mark set meta mark | 0x00004000" in script
    # Chains exist before any rule jumps to them.
    assert script.index(f"add chain {T} {EP_A}\n") < script.index(f"add rule {T} {SVC} ")


def test_single_endpoint_is_a_plain_goto():
    rs = rules_for(svc(), eps_slice("10.0.0.1"))
    assert rs.chains[SVC] == (f"goto {EP_A}",)


def test_session_affinity_sets_with_the_timeout():
    rs = rules_for(
        svc(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}),
        eps_slice("10.0.0.1", "10.0.0.2"),
    )
    aff_a = "aff-default/web/tcp/http__10.0.0.1/8080"
    assert rs.sets == {aff_a: 60, "aff-default/web/tcp/http__10.0.0.2/8080": 60}
    assert rs.chains[SVC][0] == f"ip saddr @{aff_a} goto {EP_A}"
    assert f"update @{aff_a} {{ ip saddr }}" in rs.chains[EP_A]
    assert "flags dynamic,timeout ; timeout 60s" in ruleset.full_script(rs, 1 << 14)
    # The default timeout is upstream's three hours.
    rs = rules_for(svc(sessionAffinity="ClientIP"), eps_slice("10.0.0.1"))
    assert set(rs.sets.values()) == {10800}


def test_no_endpoints_rejects_and_no_local_endpoints_drops():
    rs = rules_for(svc(), eps_slice())
    assert rs.elements[ruleset.NO_EP_SERVICES] == {"10.96.0.10 . tcp . 80": "goto reject-chain"}
    assert not rs.elements[ruleset.SERVICE_IPS] and not rs.chains
    rs = rules_for(svc(), eps_slice("10.0.0.1!"))  # only not-ready endpoints: none usable
    assert rs.elements[ruleset.NO_EP_SERVICES] == {"10.96.0.10 . tcp . 80": "goto reject-chain"}
    rs = rules_for(svc(internalTrafficPolicy="Local"), eps_slice("10.0.0.1@n2"), node="n1")
    assert rs.elements[ruleset.NO_EP_SERVICES] == {"10.96.0.10 . tcp . 80": "drop"}
    script = ruleset.full_script(rs, 1 << 14)
    assert "reject with tcp reset" in script and "add rule ip orch-proxy reject-chain reject" in script


def test_internal_traffic_policy_local_uses_only_this_nodes_endpoints():
    rs = rules_for(svc(internalTrafficPolicy="Local"), eps_slice("10.0.0.1@n1", "10.0.0.2@n2"), node="n1")
    assert rs.elements[ruleset.SERVICE_IPS] == {"10.96.0.10 . tcp . 80": "goto loc-default/web/tcp/http"}
    assert rs.chains["loc-default/web/tcp/http"] == (f"goto {EP_A}",)
    assert EP_B not in rs.chains


def test_terminating_serving_endpoints_are_the_fallback():
    rs = rules_for(svc(), eps_slice("10.0.0.1~", "10.0.0.2!"))
    assert rs.chains[SVC] == (f"goto {EP_A}",)
    rs = rules_for(svc(), eps_slice("10.0.0.1~", "10.0.0.2"))  # a ready one wins
    assert rs.chains[SVC] == (f"goto {EP_B}",)


def test_node_ports_and_external_ips_with_cluster_policy():
    rs = rules_for(
        svc(type="NodePort", externalIPs=["192.0.2.50"], ports=[{"name": "http", "port": 80, "nodePort": 30080}]),
        eps_slice("10.0.0.1"),
        cidr="10.0.0.0/16",
    )
    ext = "ext-default/web/tcp/http"
    assert rs.elements[ruleset.SERVICE_NODEPORTS] == {"tcp . 30080": f"goto {ext}"}
    assert rs.elements[ruleset.SERVICE_IPS]["192.0.2.50 . tcp . 80"] == f"goto {ext}"
    assert rs.chains[ext] == ("jump mark-for-masquerade", f"goto {SVC}")
    # With --cluster-cidr, cluster-IP traffic from outside the pods is masqueraded.
    assert rs.chains[SVC][0] == "ip daddr 10.96.0.10 ip saddr != 10.0.0.0/16 jump mark-for-masquerade"
    # Node ports never on 127/8.
    assert "fib daddr type local ip daddr != 127.0.0.0/8" in ruleset.full_script(rs, 1 << 14)


def test_external_traffic_policy_local():
    spec = dict(type="NodePort", externalTrafficPolicy="Local", ports=[{"name": "http", "port": 80, "nodePort": 30080}])
    ext = "ext-default/web/tcp/http"
    rs = rules_for(svc(**spec), eps_slice("10.0.0.1@n1", "10.0.0.2@n2"), node="n1", cidr="10.0.0.0/16")
    assert rs.chains[ext] == (
        "fib saddr type local jump mark-for-masquerade",
        f"fib saddr type local goto {SVC}",
        f"ip saddr 10.0.0.0/16 goto {SVC}",
        "goto loc-default/web/tcp/http",
    )
    assert rs.chains["loc-default/web/tcp/http"] == (f"goto {EP_A}",)
    # No endpoint on this node: outside traffic is dropped, the node's own still served.
    rs = rules_for(svc(**spec), eps_slice("10.0.0.2@n2"), node="n1")
    assert rs.chains[ext][-1] == "drop"
    # No endpoint anywhere: rejected.
    rs = rules_for(svc(**spec), eps_slice(), node="n1")
    assert rs.elements[ruleset.NO_EP_NODEPORTS] == {"tcp . 30080": "goto reject-chain"}


def test_what_is_not_proxied():
    assert model.service_ports(svc(clusterIP="None")) == ([], [])
    assert model.service_ports(svc(type="ExternalName", clusterIP="")) == ([], [])
    labelled = svc()
    labelled["metadata"]["labels"] = {names.LABEL_SERVICE_PROXY_NAME: "other"}
    assert model.service_ports(labelled) == ([], [])
    ports, notes = model.service_ports(svc(clusterIP="fd00::10"))
    assert ports == [] and "IPv4 only" in notes[0]
    # Slice ports are matched by name and protocol; other slices' services do not mix in.
    sp = model.service_ports(svc())[0][0]
    other = eps_slice("10.0.0.9")
    other["ports"][0]["name"] = "metrics"
    assert model.endpoints_for(sp, [other]) == []


def test_incremental_update_renders_only_the_change():
    old = rules_for(svc(), eps_slice("10.0.0.1", "10.0.0.2"))
    new = rules_for(svc(), eps_slice("10.0.0.1"))
    script = ruleset.diff_script(old, new)
    assert script.splitlines() == [
        f"flush chain {T} {SVC}",
        f"add rule {T} {SVC} goto {EP_A}",
        f"flush chain {T} {EP_B}",
        f"delete chain {T} {EP_B}",
    ]
    assert ruleset.diff_script(new, new) == ""
    # Back to two endpoints: the new chain is made before the service chain refers to it.
    lines = ruleset.diff_script(new, old).splitlines()
    assert lines[0] == f"add chain {T} {EP_B}"
    balance = next(i for i, ln in enumerate(lines) if ln.startswith(f"add rule {T} {SVC} numgen"))
    assert lines.index(f"flush chain {T} {SVC}") < balance
    assert not any(EP_A in ln and "dnat" in ln for ln in lines)  # the unchanged endpoint is left alone


def test_incremental_to_no_endpoints_and_away():
    old = rules_for(svc(), eps_slice("10.0.0.1"))
    none = rules_for(svc(), eps_slice())
    lines = ruleset.diff_script(old, none).splitlines()
    # Map elements go before the chains they point to.
    assert lines.index(f"delete element {T} service-ips {{ 10.96.0.10 . tcp . 80 }}") < lines.index(
        f"delete chain {T} {SVC}"
    )
    assert f"add element {T} no-endpoint-services {{ 10.96.0.10 . tcp . 80 : goto reject-chain }}" in lines
    gone = ruleset.diff_script(none, ruleset.Ruleset()).splitlines()
    assert gone == [
        f"delete element {T} no-endpoint-services {{ 10.96.0.10 . tcp . 80 }}",
        f"delete element {T} cluster-ips {{ 10.96.0.10 }}",
    ]


def test_affinity_timeout_change_recreates_the_sets_safely():
    a = rules_for(svc(sessionAffinity="ClientIP"), eps_slice("10.0.0.1"))
    b = rules_for(
        svc(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 30}}),
        eps_slice("10.0.0.1"),
    )
    lines = ruleset.diff_script(a, b).splitlines()
    aff = "aff-default/web/tcp/http__10.0.0.1/8080"
    # Chains referring to the set are emptied before it is deleted, and refilled after.
    assert lines.index(f"flush chain {T} {EP_A}") < lines.index(f"delete set {T} {aff}")
    assert lines.index(f"flush chain {T} {SVC}") < lines.index(f"delete set {T} {aff}")
    assert lines.index(f"delete set {T} {aff}") < lines.index(f"add rule {T} {EP_A} update @{aff} {{ ip saddr }}")


class FakeRunner:
    def __init__(self) -> None:
        self.scripts: list[str] = []
        self.fail = False

    async def apply(self, script: str) -> None:
        if self.fail:
            raise NftError("refused")
        self.scripts.append(script)


class FakeInformer:
    def __init__(self, client, path, **kw) -> None:
        self.handlers = []

    def add_handler(self, on_add=None, on_update=None, on_delete=None) -> None:
        self.handlers.append((on_add, on_update, on_delete))


async def test_proxy_syncs_full_then_only_the_touched_service():
    runner = FakeRunner()
    proxy = ServiceProxy(None, "n1", runner=runner, informer_factory=FakeInformer)
    add_svc = proxy.services.handlers[0][0]
    add_slice, update_slice = proxy.slices.handlers[0][0], proxy.slices.handlers[0][1]
    add_svc(svc())
    add_svc(svc(name="db", clusterIP="10.96.0.11"))
    add_slice(eps_slice("10.0.0.1", "10.0.0.2"))
    await proxy.sync()
    assert runner.scripts[-1].startswith(f"add table {T}\ndelete table {T}")
    assert set(proxy.applied) == {"default/web", "default/db"}
    update_slice(None, eps_slice("10.0.0.1"))
    await proxy.sync()
    assert "default/db" not in runner.scripts[-1] and "delete table" not in runner.scripts[-1]
    assert f"delete chain {T} {EP_B}" in runner.scripts[-1]
    # A failed apply makes the next sync a full one, with the change still in it.
    runner.fail = True
    update_slice(None, eps_slice("10.0.0.1", "10.0.0.2"))
    with pytest.raises(NftError):
        await proxy.sync()
    runner.fail = False
    await proxy.sync()
    assert runner.scripts[-1].startswith(f"add table {T}\ndelete table {T}") and EP_B in runner.scripts[-1]


def test_slices_move_between_services():
    idx = ServiceIndex("n1")
    assert idx.set_slice(eps_slice("10.0.0.1")) == ["default/web"]
    moved = eps_slice("10.0.0.1", service="db")
    assert idx.set_slice(moved) == ["default/web", "default/db"]
    assert "default/web" not in idx.slices or not idx.slices["default/web"]
    assert idx.delete_slice(moved) == ["default/db"]


def test_runner_refuses_a_missing_library_and_command(monkeypatch):
    with pytest.raises(NftError, match="cannot load"):
        LibNftRunner("libnftables-missing.so.0")
    monkeypatch.setattr(nft, "nft_path", lambda: None)
    with pytest.raises(NftError, match="nft command was not found"):
        NftRunner()
    # Without the library the command is used.
    monkeypatch.setattr(nft, "LIBRARY", "libnftables-missing.so.0")
    monkeypatch.setattr(nft.LibNftRunner.__init__, "__defaults__", ("libnftables-missing.so.0",))
    monkeypatch.setattr(nft, "nft_path", lambda: "/usr/sbin/nft")
    assert isinstance(nft.make_runner(), NftRunner)


def test_nodes_may_read_services_and_endpointslices():
    node = NodeAuthorizer(NodeGraph("pods/", "pvcs/"))
    user = UserInfo("system:node:n1", groups=(names.GROUP_NODES,))
    for group, resource in (("", "services"), (names.DISCOVERY_GROUP, "endpointslices")):
        for verb in ("list", "watch", "get"):
            attrs = AuthzAttributes(user, verb, True, api_group=group, api_version="v1", resource=resource)
            assert node.authorize(attrs)[0] is Decision.ALLOW, (resource, verb)
    write = AuthzAttributes(user, "create", True, api_group=names.DISCOVERY_GROUP, resource="endpointslices")
    assert node.authorize(write)[0] is not Decision.ALLOW
