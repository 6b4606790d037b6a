"""The device manager: registration rules, the checkpoint, allocation bookkeeping, what a
container gets, topology hints; then the real gRPC path with the sample plugin and the
pod resources API over unix sockets."""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest

from agent.cm.devicemanager import (
    Checkpoint,
    CheckpointError,
    DeviceManager,
    DeviceRunOptions,
    PodDeviceEntry,
    is_extended_resource_name,
    registration_error,
)
from agent.cm.devicemanager.endpoint import EndpointError
from agent.cm.devicemanager.options import DeviceMount, DeviceNode
from agent.cm.topology import TopologyHint
from agent.runtime.container import build_container_config
from agent.runtime.context import NodeContext
from agent.server.podresources import PodResourcesServer, ResourceProviders
from apiserver_min.api import names
from cri.deviceplugin import api_pb2 as dp
from cri.podresources import api_pb2 as pr
from cri.podresources import api_pb2_grpc as pr_grpc
from cri.podresources.v1alpha1 import api_pb2 as pr_alpha
from cri.podresources.v1alpha1 import api_pb2_grpc as pr_alpha_grpc
from tests.deviceplugin_sample import ENV_NAME, RESOURCE, SamplePlugin

W = RESOURCE


def pod(uid: str, *counts: int, init: tuple[int, ...] = (), name: str | None = None) -> dict:
    def c(n: str, k: int) -> dict:
        res = {"limits": {W: str(k)}} if k else {}
        return {"name": n, "image": "orch.local/busybox:1", "resources": res}

    spec: dict = {"containers": [c(f"c{i}", k) for i, k in enumerate(counts)]}
    if init:
        spec["initContainers"] = [c(f"i{i}", k) for i, k in enumerate(init)]
    return {"metadata": {"name": name or uid, "namespace": "default", "uid": uid}, "spec": spec}


class FakeEndpoint:
    """Stands in for a plugin's gRPC client in the bookkeeping tests."""

    def __init__(self, resource: str, *, preferred=None, fail: str = "", pre_start: bool = False) -> None:
        self.resource = resource
        self.options = dp.DevicePluginOptions(
            get_preferred_allocation_available=preferred is not None, pre_start_required=pre_start
        )
        self.preferred = preferred
        self.fail = fail
        self.stopped_at = None
        self.calls: list = []

    @property
    def live(self) -> bool:
        return self.stopped_at is None

    def allocate(self, ids):
        self.calls.append(("Allocate", list(ids)))
        if self.fail:
            raise EndpointError(self.fail)
        return dp.ContainerAllocateResponse(
            envs={"IDS": ",".join(ids)},
            mounts=[dp.Mount(container_path="/opt/w", host_path="/srv/w", read_only=True)],
            devices=[dp.DeviceSpec(container_path="/dev/w0", host_path="/dev/null", permissions="rw")],
            annotations={"w": "1"},
        )

    def preferred_allocation(self, available, must_include, size):
        self.calls.append(("Preferred", list(available), list(must_include), size))
        return self.preferred(available, must_include, size)

    def pre_start_container(self, ids):
        self.calls.append(("PreStart", list(ids)))

    def stop(self, at):
        self.stopped_at = at

    def close(self):
        pass


def manager(
    tmp_path, devices=("w0", "w1"), numa=None, clock=None, preferred=None, **kw
) -> tuple[DeviceManager, FakeEndpoint]:
    t = {"now": 100.0}
    m = DeviceManager(str(tmp_path), clock=clock or (lambda: t["now"]), **kw)
    os.makedirs(m.socket_dir, exist_ok=True)
    ep = FakeEndpoint(W, preferred=preferred)
    m.endpoints[W] = ep  # type: ignore[assignment]
    m.update_devices(W, [device(i, numa=(numa or {}).get(i)) for i in devices])
    return m, ep


def device(i: str, health: str = "Healthy", numa: int | None = None) -> dp.Device:
    d = dp.Device(ID=i, health=health)
    if numa is not None:
        d.topology.nodes.add(ID=numa)
    return d


# --- registration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, ok",
    [
        ("example.com/widget", True),
        ("nvidia.com/gpu", True),
        ("widget", False),  # no domain: a native resource name
        (f"{names.DOMAIN}/widget", False),  # the project's own domain
        (f"foo.{names.DOMAIN}/widget", False),
        ("requests.example.com/widget", False),
        ("example.com/", False),
        ("example.com/wid get", False),
        ("-bad-.com/widget", False),
    ],
)
def test_extended_resource_names(name, ok):
    assert is_extended_resource_name(name) is ok


def test_registration_errors_say_what_is_wrong():
    assert registration_error("v1beta1", W, "widget.sock") == ""
    assert registration_error("v1alpha", W, "widget.sock") == (
        'requested API version "v1alpha" is not supported by orch-agent. Supported versions are ["v1beta1"]'
    )
    assert registration_error("v1beta1", "widget", "widget.sock") == 'the ResourceName "widget" is invalid'
    assert "endpoint" in registration_error("v1beta1", W, "../widget.sock")
    assert "endpoint" in registration_error("v1beta1", W, "")
    assert "belongs to orch-agent" in registration_error("v1beta1", W, names.DEVICE_PLUGIN_AGENT_SOCKET)


# --- checkpoint --------------------------------------------------------------------------


def test_checkpoint_round_trip_and_shape(tmp_path):
    cp = Checkpoint(
        [PodDeviceEntry("uid-1", "c", W, {-1: ["w0"], 1: ["w1"]}, b"\x0a\x03abc")],
        {W: ["w1", "w0"]},
    )
    path = str(tmp_path / "cp")
    cp.write(path)
    doc = json.loads(open(path).read())
    assert set(doc) == {"Data", "Checksum"}
    entry = doc["Data"]["PodDeviceEntries"][0]
    assert entry == {
        "PodUID": "uid-1",
        "ContainerName": "c",
        "ResourceName": W,
        "DeviceIDs": {"-1": ["w0"], "1": ["w1"]},
        "AllocResp": "CgNhYmM=",
    }
    assert doc["Data"]["RegisteredDevices"] == {W: ["w0", "w1"]}
    back = Checkpoint.read(path)
    assert back is not None
    assert back.entries == cp.entries
    assert back.registered == {W: ["w0", "w1"]}
    assert Checkpoint.read(str(tmp_path / "absent")) is None


def test_checkpoint_refuses_tampering(tmp_path):
    path = tmp_path / "cp"
    Checkpoint([PodDeviceEntry("uid-1", "c", W, {-1: ["w0"]})], {W: ["w0"]}).write(str(path))
    doc = json.loads(path.read_text())
    doc["Data"]["PodDeviceEntries"][0]["DeviceIDs"]["-1"] = ["w1"]
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="checksum"):
        Checkpoint.read(str(path))
    path.write_text("{not json")
    with pytest.raises(CheckpointError, match="not JSON"):
        Checkpoint.read(str(path))


# --- allocation bookkeeping --------------------------------------------------------------


def test_capacity_counts_all_devices_and_allocatable_the_healthy(tmp_path):
    m, _ = manager(tmp_path, devices=())
    m.update_devices(W, [device("w0"), device("w1", "Unhealthy"), device("w2")])
    assert m.capacity() == ({W: 3}, {W: 2}, set())


def test_allocation_refusal_and_release(tmp_path):
    active: list[dict] = []
    m, ep = manager(tmp_path, active_pods=lambda: active)
    a = pod("a", 1)
    assert m.admit(a).admit
    active.append(a)
    assert ep.calls == [("Allocate", ["w0"])]
    big = m.admit(pod("big", 3))
    assert (big.admit, big.reason) == (False, "UnexpectedAdmissionError")
    assert big.message == (
        f"Allocate failed due to requested number of devices unavailable for {W}. Requested: 3, Available: 1, "
        "which is unexpected"
    )
    assert "big" not in m.pod_devices
    b = pod("b", 1)
    assert m.admit(b).admit
    active.append(b)
    assert m.container_devices("b", "c0") == {W: {-1: ["w1"]}}
    refused = m.admit(pod("c", 1))
    assert not refused.admit and "Requested: 1, Available: 0" in refused.message
    # A re-admission (agent restart) keeps what the container holds, no new Allocate.
    calls = len(ep.calls)
    assert m.admit(a).admit and len(ep.calls) == calls
    # Pod a ends: its device is free again (the sweep of pods no longer active).
    active.remove(a)
    assert m.admit(pod("c", 1)).admit
    assert m.container_devices("c", "c0") == {W: {-1: ["w0"]}}
    # Requests of resources no plugin serves are not the device manager's business.
    other = pod("o", 0)
    other["spec"]["containers"][0]["resources"] = {"limits": {"vendor.io/thing": "1"}}
    assert m.admit(other).admit


def test_no_release_before_the_sources_are_seen(tmp_path):
    ready = {"v": False}
    m, _ = manager(tmp_path, active_pods=lambda: [], sources_ready=lambda: ready["v"])
    assert m.admit(pod("a", 2)).admit
    assert not m.admit(pod("b", 1)).admit  # a restarted agent does not know its pods yet: nothing freed
    ready["v"] = True
    assert m.admit(pod("b", 1)).admit


def test_plugin_failure_frees_the_reservation(tmp_path):
    m, ep = manager(tmp_path)
    ep.fail = "rpc error: code = Internal desc = broken"
    r = m.admit(pod("a", 1))
    assert not r.admit and "broken" in r.message
    assert m.allocated_ids(W) == set()


def test_preferred_allocation_is_asked_and_followed(tmp_path):
    m, ep = manager(tmp_path, devices=("w0", "w1", "w2"), preferred=lambda avail, must, size: sorted(avail)[-size:])
    assert m.admit(pod("a", 2)).admit
    assert ep.calls[0] == ("Preferred", ["w0", "w1", "w2"], [], 2)
    assert m.container_devices("a", "c0") == {W: {-1: ["w1", "w2"]}}


def test_init_container_devices_are_reused_by_app_containers(tmp_path):
    m, _ = manager(tmp_path)
    p = pod("a", 1, 1, init=(2,))
    assert m.admit(p).admit
    held = {c: m.container_devices("a", c)[W][-1] for c in ("i0", "c0", "c1")}
    assert sorted(held["i0"]) == ["w0", "w1"]
    assert sorted(held["c0"] + held["c1"]) == ["w0", "w1"]


def test_checkpoint_survives_a_restart_and_plugin_loss_follows_the_grace(tmp_path):
    t = {"now": 100.0}
    m, _ = manager(tmp_path, clock=lambda: t["now"])
    assert m.admit(pod("a", 1)).admit
    again = DeviceManager(str(tmp_path), clock=lambda: t["now"], stop_grace=300.0)
    again.load_checkpoint()
    assert again.container_devices("a", "c0") == {W: {-1: ["w0"]}}
    # Known from the checkpoint, its plugin not back yet: no devices to hand out.
    assert again.capacity() == ({W: 0}, {W: 0}, set())
    assert again.admit(pod("a", 1)).admit  # the pod already holding its device is admitted again
    refused = again.admit(pod("b", 1))
    assert not refused.admit
    t["now"] += 301
    assert again.capacity() == ({}, {}, {W})
    assert json.loads(open(again.checkpoint_path).read())["Data"]["RegisteredDevices"] == {}


def test_plugin_disconnect_makes_devices_unhealthy_at_once(tmp_path):
    m, ep = manager(tmp_path)
    m._plugin_disconnected(ep)  # type: ignore[arg-type]
    assert m.capacity() == ({W: 2}, {W: 0}, set())


def test_run_options_reach_the_cri_config(tmp_path):
    m, _ = manager(tmp_path)
    p = pod("a", 1)
    p["spec"]["containers"][0]["env"] = [{"name": "IDS", "value": "mine"}]
    assert m.admit(p).admit
    opts = m.run_options(p, p["spec"]["containers"][0])
    assert opts == DeviceRunOptions(
        envs=[("IDS", "w0")],
        mounts=[DeviceMount("/opt/w", "/srv/w", True)],
        devices=[DeviceNode("/dev/w0", "/dev/null", "rw")],
        annotations={"w": "1"},
    )
    ctx = NodeContext(node_name="n", root_dir=str(tmp_path / "root"), pod_logs_dir=str(tmp_path / "logs"))
    config = build_container_config(
        p, p["spec"]["containers"][0], ctx, restart_count=0, pod_ip="", volume_paths={}, device_options=opts
    ).config
    envs = [(e.key, e.value) for e in config.envs]
    assert envs.index(("IDS", "w0")) < envs.index(("IDS", "mine"))  # the container's own value wins
    assert [(d.container_path, d.host_path, d.permissions) for d in config.devices] == [("/dev/w0", "/dev/null", "rw")]
    assert (config.mounts[0].container_path, config.mounts[0].readonly) == ("/opt/w", True)
    assert config.annotations["w"] == "1"


async def test_pre_start_container_when_the_plugin_asks(tmp_path):
    m, ep = manager(tmp_path)
    p = pod("a", 2)
    assert m.admit(p).admit
    await m.pre_start(p, p["spec"]["containers"][0])
    assert ("PreStart", ["w0", "w1"]) not in ep.calls  # not asked for
    ep.options.pre_start_required = True
    await m.pre_start(p, p["spec"]["containers"][0])
    assert ep.calls[-1] == ("PreStart", ["w0", "w1"])


def test_topology_hints_from_the_plugins_numa_nodes(tmp_path):
    m, _ = manager(tmp_path, devices=("w0", "w1", "w2"), numa={"w0": 0, "w1": 1, "w2": 1})
    c = pod("a", 2)["spec"]["containers"][0]
    hints = m.get_topology_hints(pod("a", 2), c)[W]
    assert hints == [TopologyHint(frozenset({1}), True), TopologyHint(frozenset({0, 1}), False)]
    # Allocation with the merged affinity keeps the devices on NUMA node 1.
    m.allocate(pod("a", 2), c, TopologyHint(frozenset({1}), True))
    assert m.container_devices("a", "c0") == {W: {1: ["w1", "w2"]}}
    assert m.get_topology_hints(pod("a", 2), c)[W] == [TopologyHint(frozenset({1}), True)]
    assert m.get_topology_hints(pod("b", 2), pod("b", 2)["spec"]["containers"][0])[W] == []
    plain, _ = manager(tmp_path / "plain")
    assert plain.get_topology_hints(pod("x", 1), pod("x", 1)["spec"]["containers"][0]) == {W: None}


# --- real gRPC ---------------------------------------------------------------------------


async def _until(cond, timeout=10.0, what=""):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_sample_plugin_over_grpc_and_pod_resources(tmp_path):
    root = str(tmp_path)
    pods: list[dict] = []
    changes = []
    m = DeviceManager(root, active_pods=lambda: pods, on_change=lambda: changes.append(1))
    m.load_checkpoint()
    task = asyncio.create_task(m.run())
    lister = PodResourcesServer(
        root,
        ResourceProviders(
            pods=lambda: pods,
            devices=m.container_devices,
            allocatable_devices=m.allocatable_devices,
            update_devices=m.update_allocated,
        ),
    )
    started = asyncio.get_running_loop().create_future()
    pr_task = asyncio.create_task(lister.run(started))
    plugin = SamplePlugin(m.socket_dir, numa={"widget-0": 0})
    try:
        await _until(lambda: os.path.exists(m.socket_path), what="the registration socket")
        bad = SamplePlugin(m.socket_dir, version="v1alpha1", endpoint="bad.sock")
        with pytest.raises(grpc.RpcError) as info:
            await asyncio.to_thread(bad.register)
        assert "not supported by orch-agent" in info.value.details()
        plugin.start()
        await asyncio.to_thread(plugin.register)
        await _until(lambda: m.capacity()[1].get(W) == 2, what="two healthy widgets")
        assert changes
        p = pod("uid-a", 1, name="pa")
        assert m.admit(p).admit
        pods.append(p)
        # The sample prefers the highest id.
        assert m.container_devices("uid-a", "c0") == {W: {-1: ["widget-1"]}}
        assert ("GetPreferredAllocation", ["widget-1"]) in plugin.calls
        opts = m.run_options(p, p["spec"]["containers"][0])
        assert (ENV_NAME, "widget-1") in opts.envs
        refused = m.admit(pod("uid-b", 3))
        assert "Requested: 3, Available: 1" in refused.message
        # Health changes arrive over ListAndWatch.
        plugin.set_health("widget-0", "Unhealthy")
        await _until(lambda: m.capacity()[:2] == ({W: 2}, {W: 1}), what="one unhealthy widget")

        await started
        async with grpc.aio.insecure_channel(f"unix://{lister.socket_path}") as ch:
            stub = pr_grpc.PodResourcesListerStub(ch)
            listed = await stub.List(pr.ListPodResourcesRequest())
            (entry,) = listed.pod_resources
            assert (entry.name, entry.namespace) == ("pa", "default")
            assert entry.containers[0].name == "c0"
            assert [(d.resource_name, list(d.device_ids)) for d in entry.containers[0].devices] == [(W, ["widget-1"])]
            alloc = await stub.GetAllocatableResources(pr.AllocatableResourcesRequest())
            assert [(d.device_ids[0], [n.ID for n in d.topology.nodes]) for d in alloc.devices] == [("widget-1", [])]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Get(pr.GetPodResourcesRequest(pod_name="pa", pod_namespace="default"))
            assert info.value.details() == "PodResources API Get method disabled"
            old = await pr_alpha_grpc.PodResourcesListerStub(ch).List(pr_alpha.ListPodResourcesRequest())
            assert [
                (p.name, [(d.resource_name, list(d.device_ids)) for d in p.containers[0].devices])
                for p in old.pod_resources
            ] == [("pa", [(W, ["widget-1"])])]

        # The plugin goes away: its devices are unhealthy at once.
        await asyncio.to_thread(plugin.stop)
        await _until(lambda: m.capacity()[1].get(W) == 0, what="allocatable 0 after the plugin left")
        assert m.capacity()[0][W] == 2  # capacity stays for the grace period
    finally:
        plugin.stop()
        for t in (task, pr_task):
            t.cancel()
        await asyncio.gather(task, pr_task, return_exceptions=True)
    assert not os.path.exists(m.socket_path)


def test_pod_resources_rate_limit(tmp_path):
    async def scenario():
        server = PodResourcesServer(str(tmp_path), ResourceProviders(pods=lambda: []), qps=0.001, burst=2)
        started = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(server.run(started))
        await started
        try:
            async with grpc.aio.insecure_channel(f"unix://{server.socket_path}") as ch:
                stub = pr_grpc.PodResourcesListerStub(ch)
                await stub.List(pr.ListPodResourcesRequest())
                await stub.List(pr.ListPodResourcesRequest())
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.List(pr.ListPodResourcesRequest())
                assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert info.value.details() == "rejected by rate limit"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


async def test_a_socket_path_too_long_is_a_clear_error(tmp_path):
    m = DeviceManager(str(tmp_path / ("x" * 120)))
    with pytest.raises(OSError, match="longer than the 107 bytes"):
        await m.run()


@pytest.mark.parametrize(
    "module, message, field, number",
    [
        (dp, "RegisterRequest", "options", 4),
        (dp, "DevicePluginOptions", "get_preferred_allocation_available", 2),
        (dp, "Device", "topology", 3),
        (dp, "ContainerPreferredAllocationRequest", "allocation_size", 3),
        (dp, "ContainerAllocateResponse", "cdi_devices", 5),
        (dp, "DeviceSpec", "permissions", 3),
        (pr, "AllocatableResourcesResponse", "memory", 3),
        (pr, "ContainerResources", "dynamic_resources", 5),
        (pr, "ContainerMemory", "topology", 3),
        (pr, "GetPodResourcesRequest", "pod_namespace", 2),
    ],
)
def test_protos_keep_upstreams_wire_numbers(module, message, field, number):
    assert module.DESCRIPTOR.message_types_by_name[message].fields_by_name[field].number == number


def test_proto_packages_and_services():
    assert (dp.DESCRIPTOR.package, pr.DESCRIPTOR.package) == ("v1beta1", "v1")
    assert set(dp.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name) == {
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    }
    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"].server_streaming
    assert set(pr.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name) == {
        "List",
        "GetAllocatableResources",
        "Get",
    }
