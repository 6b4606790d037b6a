"""agent.cm: CPU topology discovery, exclusive CPU allocation, the CPU manager's checkpoint,
the topology manager's hint merging and admission.

The machine here is a fake sysfs tree: 2 sockets x 2 cores x 2 threads, one NUMA node per
socket, numbered as Linux numbers them (the second threads come after all first threads).
"""

from __future__ import annotations

import json

import pytest

from agent.cm import CgroupError, ContainerManager, ResourceConfig
from agent.cm.cgroupfs import CgroupV1Fs, CgroupV2Fs, detect_layout
from agent.cm.checkpoint import checksum
from agent.cm.cpumanager import (
    CpuInfo,
    CpuManager,
    CpuManagerError,
    container_cpus,
    discover,
    take_by_topology,
    take_distributed,
)
from agent.cm.cpumanager.manager import numa_masks
from agent.cm.cpuset import CpuSetError, format_cpuset, parse_cpuset
from agent.cm.memorymanager import MemoryManager, MemoryManagerError, read_numa_memory
from agent.cm.topology import TopologyHint
from agent.cm.topologymanager import TopologyManager, TopologyManagerError, merge_hints
from agent.config import from_argv
from tests.unit.test_agent_cm import CAP, make_v1_tree, make_v2_tree

# cpu -> (socket, core sibling list, numa)
MACHINE = {
    0: (0, "0,4", 0),
    1: (0, "1,5", 0),
    2: (1, "2,6", 1),
    3: (1, "3,7", 1),
    4: (0, "0,4", 0),
    5: (0, "1,5", 0),
    6: (1, "2,6", 1),
    7: (1, "3,7", 1),
}


def fake_sysfs(tmp_path, machine=MACHINE, numa=True):
    cpu_dir = tmp_path / "cpu"
    node_dir = tmp_path / "node"
    cpu_dir.mkdir()
    node_dir.mkdir()
    (cpu_dir / "online").write_text(format_cpuset(machine) + "\n")
    nodes: dict[int, list[int]] = {}
    for cpu, (socket, siblings, node) in machine.items():
        t = cpu_dir / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{socket}\n")
        (t / "thread_siblings_list").write_text(f"{siblings}\n")
        nodes.setdefault(node, []).append(cpu)
    if numa:
        for node, cpus in nodes.items():
            (node_dir / f"node{node}").mkdir()
            (node_dir / f"node{node}" / "cpulist").write_text(format_cpuset(cpus) + "\n")
    return str(cpu_dir), str(node_dir)


@pytest.fixture
def topo(tmp_path):
    return discover(*fake_sysfs(tmp_path))


def guaranteed(uid, *containers, init=()):
    def c(name, cpu):
        r = {"cpu": cpu, "memory": "64Mi"}
        return {"name": name, "image": "x", "resources": {"requests": r, "limits": r}}

    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default"},
        "spec": {"containers": [c(n, cpu) for n, cpu in containers], "initContainers": [c(n, cpu) for n, cpu in init]},
    }


def best_effort(uid):
    return {"metadata": {"uid": uid, "name": uid}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


# --- cpusets and discovery ------------------------------------------------------------


def test_cpuset_text_round_trip():
    assert parse_cpuset("0-2,7, 9-10") == {0, 1, 2, 7, 9, 10}
    assert format_cpuset({10, 0, 1, 2, 7, 9}) == "0-2,7,9-10"
    assert parse_cpuset("") == frozenset() and format_cpuset([]) == ""
    for bad in ("a", "3-1", "1-", "-2"):
        with pytest.raises(CpuSetError):
            parse_cpuset(bad)


def test_discovery_of_two_sockets_with_hyperthreads_and_two_numa_nodes(topo):
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets, topo.num_numa_nodes) == (8, 4, 2, 2)
    assert topo.cpus_per_core() == 2
    assert topo.cpus[5] == CpuInfo(numa=0, socket=0, core=1)
    assert topo.cpus[6] == CpuInfo(numa=1, socket=1, core=2)
    assert topo.cpus_in_numa([1]) == {2, 3, 6, 7}
    assert topo.numa_per_socket_aligned()


def test_discovery_without_numa_directories_is_one_node(tmp_path):
    topo = discover(*fake_sysfs(tmp_path, numa=False))
    assert topo.numa_nodes() == [0] and topo.num_sockets == 2 and not topo.numa_reported
    with pytest.raises(TopologyManagerError, match="not supported on this node: the kernel reports no NUMA node"):
        TopologyManager(from_argv(["--topology-manager-policy=restricted"]), [0], numa_reported=False)
    TopologyManager(from_argv([]), [0], numa_reported=False)  # none needs nothing


# --- allocation order -------------------------------------------------------------------


def test_allocation_takes_whole_sockets_then_whole_cores_then_threads(topo):
    everything = topo.all_cpus()
    assert take_by_topology(topo, everything, 4) == {0, 1, 4, 5}  # a whole socket
    assert take_by_topology(topo, everything, 2) == {0, 4}  # a whole core
    assert take_by_topology(topo, everything, 1) == {0}
    # Best fit: the socket with fewer free CPUs is used first, a partly used core filled first.
    assert take_by_topology(topo, everything - {0}, 1) == {4}
    assert take_by_topology(topo, everything - {0}, 2) == {1, 5}
    assert take_by_topology(topo, everything - {0}, 5) == {2, 3, 6, 7, 4}


def test_allocation_fails_when_short(topo):
    with pytest.raises(Exception, match="not enough cpus available to satisfy request"):
        take_by_topology(topo, {0, 1}, 3)


def test_distribution_over_numa_nodes(topo):
    assert take_distributed(topo, topo.all_cpus(), 2) == {0, 4}  # fits one node: packed
    got = take_distributed(topo, topo.all_cpus(), 6)
    assert len(got & topo.cpus_in_numa([0])) == 3 and len(got & topo.cpus_in_numa([1])) == 3
    got = take_distributed(topo, topo.all_cpus(), 6, group=2)
    assert got == {0, 4, 1, 5, 2, 6} or len(got & topo.cpus_in_numa([0])) in (2, 4)


# --- the CPU manager ----------------------------------------------------------------------


def cfg(tmp_path, *flags):
    return from_argv([f"--root-dir={tmp_path / 'root'}", *flags])


def static_manager(tmp_path, topo, *flags):
    m = CpuManager(cfg(tmp_path, "--cpu-manager-policy=static", *flags), topology=topo)
    m.start()
    return m


def test_integer_guaranteed_containers_only():
    assert container_cpus(guaranteed("a", ("c", "2")), guaranteed("a", ("c", "2"))["spec"]["containers"][0]) == 2
    pod = guaranteed("a", ("c", "1500m"))
    assert container_cpus(pod, pod["spec"]["containers"][0]) == 0
    pod = best_effort("b")
    assert container_cpus(pod, pod["spec"]["containers"][0]) == 0


def test_static_policy_allocates_exclusive_cpus_and_shrinks_the_shared_pool(tmp_path, topo):
    m = static_manager(tmp_path, topo, "--reserved-cpus=0")
    assert m.allocatable_cpus() == set(range(1, 8))
    pod = guaranteed("p1", ("app", "2"))
    m.allocate(pod, pod["spec"]["containers"][0], None)
    assert m.exclusive_cpus("p1", "app") == {1, 5} and m.exclusive_cpus("x", "y") == set()
    # Reserved cpu0 stays shared; its sibling 4 is the best fit for... a whole core (1,5).
    assert m.cpuset_for("p1", "app") == "1,5"
    assert m.cpuset_for("other", "c") == "0,2-4,6-7"
    m.remove_pod("p1")
    assert m.cpuset_for("other", "c") == "0-7"


def test_reserved_from_system_reserved_rounds_up_and_takes_whole_cores(tmp_path, topo):
    m = static_manager(tmp_path, topo, "--system-reserved=cpu=1500m")
    assert m.reserved == {0, 4}
    with pytest.raises(CpuManagerError, match="needs reserved CPUs"):
        CpuManager(cfg(tmp_path, "--cpu-manager-policy=static"), topology=topo)
    with pytest.raises(CpuManagerError, match="does not have: 9"):
        CpuManager(cfg(tmp_path, "--cpu-manager-policy=static", "--reserved-cpus=9"), topology=topo)


def test_state_file_round_trip_and_policy_change_refused(tmp_path, topo):
    m = static_manager(tmp_path, topo, "--reserved-cpus=0")
    pod = guaranteed("p1", ("app", "1"))
    m.allocate(pod, pod["spec"]["containers"][0], None)
    path = tmp_path / "root" / "cpu_manager_state"
    data = json.loads(path.read_text())
    assert data["policyName"] == "static"
    assert data["defaultCpuSet"] == "0-3,5-7" and data["entries"] == {"p1": {"app": "4"}}
    assert data["checksum"] == checksum(data)
    again = static_manager(tmp_path, topo, "--reserved-cpus=0")
    assert again.cpuset_for("p1", "app") == "4"
    with pytest.raises(CpuManagerError, match='configured policy "none" differs from state checkpoint policy "static"'):
        CpuManager(cfg(tmp_path), topology=topo).start()
    data["defaultCpuSet"] = "0-7"
    path.write_text(json.dumps(data))
    with pytest.raises(CpuManagerError, match="corrupted"):
        static_manager(tmp_path, topo, "--reserved-cpus=0")


def test_init_container_cpus_are_reused_by_app_containers(tmp_path, topo):
    m = static_manager(tmp_path, topo, "--reserved-cpus=0")
    pod = guaranteed("p", ("app", "2"), init=(("init", "2"),))
    m.allocate(pod, pod["spec"]["initContainers"][0], None)
    m.allocate(pod, pod["spec"]["containers"][0], None)
    assert m.cpuset_for("p", "init") == m.cpuset_for("p", "app")
    assert len(m.default) == 6


def test_policy_options_and_their_gates(tmp_path, topo):
    with pytest.raises(CpuManagerError, match="Alpha-level Options not enabled"):
        CpuManager(
            cfg(
                tmp_path,
                "--cpu-manager-policy=static",
                "--reserved-cpus=0",
                "--cpu-manager-policy-options=align-by-socket=true",
            ),
            topology=topo,
        )
    with pytest.raises(CpuManagerError, match='unsupported cpumanager option: "bogus"'):
        CpuManager(
            cfg(tmp_path, "--cpu-manager-policy=static", "--reserved-cpus=0", "--cpu-manager-policy-options=bogus=1"),
            topology=topo,
        )
    with pytest.raises(CpuManagerError, match="static CPU manager policy only"):
        CpuManager(cfg(tmp_path, "--cpu-manager-policy-options=full-pcpus-only=true"), topology=topo)
    m = static_manager(tmp_path, topo, "--reserved-cpus=0", "--cpu-manager-policy-options=full-pcpus-only=true")
    pod = guaranteed("p", ("app", "1"))
    with pytest.raises(Exception, match="SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2") as e:
        m.allocate(pod, pod["spec"]["containers"][0], None)
    assert getattr(e.value, "reason", "") == "SMTAlignmentError"


def test_cpu_hints_prefer_the_narrowest_numa_sets(tmp_path, topo):
    m = static_manager(tmp_path, topo, "--reserved-cpus=0")
    pod = guaranteed("p", ("app", "3"))
    hints = m.get_topology_hints(pod, pod["spec"]["containers"][0])["cpu"]
    assert hints == [
        TopologyHint(frozenset({0}), True),
        TopologyHint(frozenset({1}), True),
        TopologyHint(frozenset({0, 1}), False),
    ]
    pod5 = guaranteed("q", ("app", "5"))
    assert m.get_topology_hints(pod5, pod5["spec"]["containers"][0])["cpu"] == [TopologyHint(frozenset({0, 1}), True)]
    m.allocate(pod, pod["spec"]["containers"][0], TopologyHint(frozenset({1}), True))
    assert parse_cpuset(m.cpuset_for("p", "app")) <= topo.cpus_in_numa([1])
    # An existing assignment answers with its own NUMA set.
    assert m.get_topology_hints(pod, pod["spec"]["containers"][0])["cpu"] == [TopologyHint(frozenset({1}), True)]


def test_reconcile_releases_gone_pods_and_reports_changed_cpusets_only(tmp_path, topo):
    m = static_manager(tmp_path, topo, "--reserved-cpus=0")
    m.container_created("be1", m.cpuset_for("be", "c"))
    assert m.reconcile([("be", [("c", "be1")])], sources_ready=True) == []
    pod = guaranteed("g", ("app", "1"))
    m.allocate(pod, pod["spec"]["containers"][0], None)
    m.container_created("g1", m.cpuset_for("g", "app"))
    updates = m.reconcile([("be", [("c", "be1")]), ("g", [("app", "g1")])], sources_ready=True)
    assert updates == [("be1", "0-3,5-7")]
    m.container_created("be1", "0-3,5-7")
    assert m.reconcile([("be", [("c", "be1")]), ("g", [("app", "g1")])], sources_ready=True) == []
    # Until every source was seen, a missing pod keeps its CPUs.
    assert m.reconcile([("be", [("c", "be1")])], sources_ready=False) == []
    assert "g" in m.assignments
    assert m.reconcile([("be", [("c", "be1")])], sources_ready=True) == [("be1", "0-7")]
    assert "g" not in m.assignments


# --- hint merging -------------------------------------------------------------------------


def H(nodes, preferred):
    return TopologyHint(None if nodes is None else frozenset(nodes), preferred)


def test_numa_masks_smallest_first():
    assert numa_masks([0, 1]) == [frozenset({0}), frozenset({1}), frozenset({0, 1})]


def test_merge_picks_the_narrowest_preferred_common_hint():
    cpu = {"cpu": [H({0}, True), H({1}, True), H({0, 1}, False)]}
    dev = {"example.com/gpu": [H({1}, True), H({0, 1}, False)]}
    for policy in ("best-effort", "restricted", "single-numa-node"):
        assert merge_hints(policy, [0, 1], [cpu, dev]) == (H({1}, True), True)


def test_merge_without_a_preferred_hint_per_policy():
    cpu = {"cpu": [H({0}, True), H({0, 1}, False)]}
    dev = {"example.com/gpu": [H({1}, True), H({0, 1}, False)]}
    # Non-preferred: the size closest to the largest of the providers' narrowest sets (1), lower id first.
    assert merge_hints("best-effort", [0, 1], [cpu, dev]) == (H({0}, False), True)
    assert merge_hints("restricted", [0, 1], [cpu, dev]) == (H({0}, False), False)
    best, admit = merge_hints("single-numa-node", [0, 1], [cpu, dev])
    assert not admit and not best.preferred


def test_merge_of_providers_without_opinion_is_any_preferred():
    assert merge_hints("restricted", [0, 1], [{}, {"cpu": None}]) == (H({0, 1}, True), True)
    assert merge_hints("single-numa-node", [0, 1], [{}]) == (H(None, True), True)
    # An impossible request: restricted refuses.
    assert merge_hints("restricted", [0, 1], [{"cpu": []}])[1] is False


def test_single_numa_node_refuses_what_needs_two_nodes():
    cpu = {"cpu": [H({0, 1}, True)]}
    assert merge_hints("single-numa-node", [0, 1], [cpu])[1] is False
    assert merge_hints("restricted", [0, 1], [cpu]) == (H({0, 1}, True), True)


# --- topology manager admission --------------------------------------------------------


def test_topology_manager_refuses_with_topology_affinity_error(tmp_path, topo):
    cpu = static_manager(tmp_path, topo, "--reserved-cpus=0")
    tm = TopologyManager(cfg(tmp_path, "--topology-manager-policy=single-numa-node"), topo.numa_nodes())
    tm.add_hint_provider(cpu)
    ok = guaranteed("fits", ("app", "3"))
    assert tm.admit(ok).admit
    assert parse_cpuset(cpu.cpuset_for("fits", "app")) in (topo.cpus_in_numa([0]) - {0}, topo.cpus_in_numa([1]) - {2})
    too_big = guaranteed("big", ("app", "5"))
    result = tm.admit(too_big)
    assert (result.admit, result.reason, result.message) == (
        False,
        "TopologyAffinityError",
        "Resources cannot be allocated with Topology locality",
    )


def test_topology_manager_pod_scope_aligns_all_containers(tmp_path, topo):
    cpu = static_manager(tmp_path, topo, "--reserved-cpus=0")
    tm = TopologyManager(
        cfg(tmp_path, "--topology-manager-policy=restricted", "--topology-manager-scope=pod"), topo.numa_nodes()
    )
    tm.add_hint_provider(cpu)
    pod = guaranteed("p", ("a", "2"), ("b", "1"))
    assert tm.admit(pod).admit
    used = parse_cpuset(cpu.cpuset_for("p", "a")) | parse_cpuset(cpu.cpuset_for("p", "b"))
    assert len(topo.numa_of_cpus(used)) == 1


def test_topology_manager_reports_provider_failures(tmp_path, topo):
    cpu = static_manager(tmp_path, topo, "--reserved-cpus=0")
    tm = TopologyManager(cfg(tmp_path), topo.numa_nodes())
    tm.add_hint_provider(cpu)
    result = tm.admit(guaranteed("huge", ("app", "8")))
    assert result.reason == "UnexpectedAdmissionError"
    assert result.message == "Allocate failed due to not enough cpus available to satisfy request, which is unexpected"


def test_topology_manager_limits():
    with pytest.raises(TopologyManagerError, match="more than 8 NUMA nodes"):
        TopologyManager(from_argv(["--topology-manager-policy=best-effort"]), range(9))
    with pytest.raises(TopologyManagerError, match='scope "pod" is not supported on this node'):
        TopologyManager(from_argv(["--topology-manager-scope=pod"]), [0])


def test_container_manager_admission_runs_the_topology_manager(tmp_path, topo):
    sysfs = tmp_path / "cg"
    make_v1_tree(sysfs)
    (tmp_path / "pid_max").write_text("4194304\n")
    (tmp_path / "huge").mkdir()
    cm = ContainerManager(
        cfg(tmp_path, "--cpu-manager-policy=static", "--reserved-cpus=0", "--topology-manager-policy=single-numa-node"),
        sysfs=str(sysfs),
        capacity={**CAP, "cpu": 8000},
        mountinfo="/nonexistent",
        pid_max_path=str(tmp_path / "pid_max"),
        hugepages_dir=str(tmp_path / "huge"),
        cpu_topology=topo,
    )
    cm.start()
    pod = guaranteed("g", ("app", "2"))
    assert cm.admit(pod, []).admit
    cpus, _ = cm.container_cpuset(pod, pod["spec"]["containers"][0])
    assert len(parse_cpuset(cpus)) == 2
    assert cm.container_cpuset(best_effort("b"), {"name": "c"})[0] == format_cpuset(
        topo.all_cpus() - parse_cpuset(cpus)
    )
    refused = cm.admit(guaranteed("big", ("app", "5")), [pod])
    assert refused.reason == "TopologyAffinityError"
    assert "big" not in cm.cpu_manager.assignments
    cm.remove_pod("g")
    assert cm.container_cpuset(best_effort("b"), {"name": "c"})[0] == "0-7"
    # A pod the agent is terminating gives its CPUs back before a newcomer is placed
    # (a static pod's manifest replaced: the old pod still stops while the new one is admitted).
    old, new = guaranteed("old", ("app", "4")), guaranteed("new", ("app", "4"))
    assert cm.admit(old, []).admit
    assert not cm.admit(new, []).admit
    cm.inactive_pod_uids = lambda: ["old"]
    assert cm.admit(new, []).admit
    assert "old" not in cm.cpu_manager.assignments


# --- the memory manager -------------------------------------------------------------------

GI = 1 << 30
MI = 1 << 20


def mem_pod(uid, *containers, init=()):
    def c(name, mem):
        r = {"cpu": "1", "memory": mem}
        return {"name": name, "image": "x", "resources": {"requests": r, "limits": r}}

    return {
        "metadata": {"uid": uid, "name": uid},
        "spec": {"containers": [c(n, m) for n, m in containers], "initContainers": [c(n, m) for n, m in init]},
    }


def memory_manager(tmp_path, *flags, nodes=2):
    numa = {n: {"memory": 4 * GI} for n in range(nodes)}
    m = MemoryManager(
        cfg(tmp_path, "--memory-manager-policy=Static", "--reserved-memory=0:memory=612Mi", *flags),
        numa_memory=numa,
        reservation={"memory": 612 * MI},
    )
    m.start()
    return m


def test_numa_memory_from_sysfs(tmp_path):
    node = tmp_path / "node" / "node1"
    (node / "hugepages" / "hugepages-2048kB").mkdir(parents=True)
    (node / "meminfo").write_text("Node 1 MemTotal:       1024 kB\nNode 1 MemFree:  10 kB\n")
    (node / "hugepages" / "hugepages-2048kB" / "nr_hugepages").write_text("3\n")
    assert read_numa_memory(str(tmp_path / "node"), {}) == {1: {"memory": 1 << 20, "hugepages-2Mi": 3 * 2 * MI}}
    assert read_numa_memory(str(tmp_path / "none"), {"memory": 5, "cpu": 1}) == {0: {"memory": 5}}


def test_memory_hints_allocation_and_cpuset_mems(tmp_path):
    m = memory_manager(tmp_path)
    p1 = mem_pod("p1", ("a", "3Gi"))
    assert m.get_topology_hints(p1, p1["spec"]["containers"][0]) == {
        "memory": [H({0}, True), H({1}, True), H({0, 1}, False)]
    }
    big = mem_pod("big", ("a", "5Gi"))
    assert m.get_topology_hints(big, big["spec"]["containers"][0]) == {"memory": [H({0, 1}, True)]}
    m.allocate(p1, p1["spec"]["containers"][0], H({0}, True))
    assert m.mems_for("p1", "a") == "0"
    assert m.container_blocks("p1", "a") == [("memory", 3 * GI, (0,))]
    assert m.allocatable_memory() == [("memory", 4 * GI - 612 * MI, (0,)), ("memory", 4 * GI, (1,))]
    # Node 0 now serves a single-node reservation: no multi-node set may include it, and it is short.
    p2 = mem_pod("p2", ("a", "2Gi"))
    assert m.get_topology_hints(p2, p2["spec"]["containers"][0]) == {"memory": [H({1}, True)]}
    state = json.loads((tmp_path / "root" / "memory_manager_state").read_text())
    assert state["policyName"] == "Static"
    assert state["machineState"]["0"]["memoryMap"]["memory"] == {
        "total": 4 * GI,
        "systemReserved": 612 * MI,
        "allocatable": 4 * GI - 612 * MI,
        "reserved": 3 * GI,
        "free": GI - 612 * MI,
    }
    assert state["machineState"]["0"]["numberOfAssignments"] == 1
    assert state["entries"] == {"p1": {"a": [{"numaAffinity": [0], "type": "memory", "size": 3 * GI}]}}
    again = memory_manager(tmp_path)
    assert again.mems_for("p1", "a") == "0"
    again.remove_pod("p1")
    assert again.nodes[0].memory["memory"]["free"] == 4 * GI - 612 * MI

    def restart(reserved_mi, node0_gi):
        m = MemoryManager(
            cfg(tmp_path, "--memory-manager-policy=Static", f"--reserved-memory=0:memory={reserved_mi}Mi"),
            numa_memory={0: {"memory": node0_gi * GI}, 1: {"memory": 4 * GI}},
            reservation={"memory": reserved_mi * MI},
        )
        m.start()
        return m

    with pytest.raises(MemoryManagerError, match="expected machine state is different"):
        restart(512, 4)
    # A node whose memory grew (a hypervisor added some) keeps its reservations.
    again.allocate(p1, p1["spec"]["containers"][0], H({0}, True))
    assert restart(612, 5).nodes[0].memory["memory"]["free"] == 2 * GI - 612 * MI
    with pytest.raises(MemoryManagerError, match="less than the 3221225472 its pods reserved"):
        restart(612, 3)


def test_init_container_memory_passes_to_app_containers(tmp_path):
    m = memory_manager(tmp_path)
    pod = mem_pod("p", ("app", "1Gi"), init=(("init", "1Gi"),))
    m.allocate(pod, pod["spec"]["initContainers"][0], H({1}, True))
    m.allocate(pod, pod["spec"]["containers"][0], H({1}, True))
    assert m.nodes[1].memory["memory"]["reserved"] == GI


def test_memory_manager_configuration_errors(tmp_path):
    with pytest.raises(MemoryManagerError, match='total amount "641728512" of type "memory"'):
        MemoryManager(
            cfg(tmp_path, "--memory-manager-policy=Static", "--reserved-memory=0:memory=612Mi"),
            numa_memory={0: {"memory": 4 * GI}},
            reservation={"memory": 100 * MI},
        )
    with pytest.raises(MemoryManagerError, match="NUMA node 3, which this machine does not have"):
        MemoryManager(
            cfg(tmp_path, "--memory-manager-policy=Static", "--reserved-memory=3:memory=100Mi"),
            numa_memory={0: {"memory": 4 * GI}},
            reservation={"memory": 100 * MI},
        )
    with pytest.raises(MemoryManagerError, match="Static memory manager policy only"):
        MemoryManager(cfg(tmp_path, "--reserved-memory=0:memory=100Mi"), numa_memory={}, reservation={})


def test_topology_manager_aligns_cpu_and_memory(tmp_path, topo):
    cpu = static_manager(tmp_path, topo, "--reserved-cpus=0")
    mem = memory_manager(tmp_path)
    tm = TopologyManager(cfg(tmp_path, "--topology-manager-policy=single-numa-node"), topo.numa_nodes())
    tm.add_hint_provider(cpu)
    tm.add_hint_provider(mem)
    pod = guaranteed("p", ("app", "2"))
    pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = "3Gi"
    pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "3Gi"
    assert tm.admit(pod).admit
    node = topo.numa_of_cpus(parse_cpuset(cpu.cpuset_for("p", "app")))
    assert {int(mem.mems_for("p", "app"))} == node
    q = guaranteed("q", ("app", "1"))
    q["spec"]["containers"][0]["resources"]["limits"]["memory"] = "3Gi"
    q["spec"]["containers"][0]["resources"]["requests"]["memory"] = "3Gi"
    assert tm.admit(q).admit
    assert mem.mems_for("q", "app") != mem.mems_for("p", "app")
    # 2Gi more fits on no single node now (each has at most 1Gi free).
    r = guaranteed("r", ("app", "1"))
    r["spec"]["containers"][0]["resources"]["limits"]["memory"] = "2Gi"
    r["spec"]["containers"][0]["resources"]["requests"]["memory"] = "2Gi"
    result = tm.admit(r)
    assert result.reason == "TopologyAffinityError"


def test_cgroup_driver_writes_cpusets(tmp_path):
    sysfs = make_v1_tree(tmp_path / "cg")
    fs = CgroupV1Fs(detect_layout(str(sysfs), mountinfo="/nonexistent"))
    fs.create("/a")
    fs.update("/a", ResourceConfig(cpuset_cpus="1", cpuset_mems="0"))
    assert (sysfs / "cpuset/a/cpuset.cpus").read_text() == "1"
    assert (sysfs / "cpuset/a/cpuset.mems").read_text() == "0"
    v2 = make_v2_tree(tmp_path / "v2", controllers="cpu memory pids")
    fs2 = CgroupV2Fs(detect_layout(str(v2), mountinfo="/nonexistent"))
    fs2.create("/b")
    with pytest.raises(CgroupError, match="the cpuset controller is not enabled"):
        fs2.update("/b", ResourceConfig(cpuset_cpus="1"))


def test_pod_cgroup_gets_the_memory_managers_nodes(tmp_path):
    sysfs = make_v1_tree(tmp_path / "cg")
    (tmp_path / "pid_max").write_text("4194304\n")
    (tmp_path / "huge").mkdir()
    node = tmp_path / "node" / "node0"
    node.mkdir(parents=True)
    (node / "meminfo").write_text("Node 0 MemTotal:       8388608 kB\n")
    cm = ContainerManager(
        cfg(tmp_path, "--memory-manager-policy=Static", "--reserved-memory=0:memory=100Mi"),
        sysfs=str(sysfs),
        capacity=CAP,
        mountinfo="/nonexistent",
        pid_max_path=str(tmp_path / "pid_max"),
        hugepages_dir=str(tmp_path / "huge"),
        sys_node=str(tmp_path / "node"),
    )
    cm.start()
    pod = guaranteed("g", ("app", "1"))
    assert cm.admit(pod, []).admit
    assert cm.container_cpuset(pod, pod["spec"]["containers"][0]) == ("", "0")
    cm.ensure_pod(pod)
    assert (sysfs / "cpuset/orchpods/podg/cpuset.mems").read_text() == "0"
    assert cm.reconciles_cpusets
    cm.reconcile_cpusets([], sources_ready=True)
    assert "g" not in cm.memory_manager.entries


def test_reconcile_period_without_a_static_manager_is_refused(tmp_path):
    sysfs = make_v1_tree(tmp_path / "cg")
    (tmp_path / "pid_max").write_text("4194304\n")
    (tmp_path / "huge").mkdir()
    cm = ContainerManager(
        cfg(tmp_path, "--cpu-manager-reconcile-period=5s"),
        sysfs=str(sysfs),
        capacity=CAP,
        mountinfo="/nonexistent",
        pid_max_path=str(tmp_path / "pid_max"),
        hugepages_dir=str(tmp_path / "huge"),
    )
    with pytest.raises(CgroupError, match="--cpu-manager-reconcile-period .* is not supported on this node"):
        cm.start()


def test_align_by_socket_prefers_sets_within_the_fewest_sockets(tmp_path):
    # 2 sockets, 2 NUMA nodes each, 2 single-thread cores per node.
    machine = {cpu: (cpu // 4, str(cpu), cpu // 2) for cpu in range(8)}
    topo = discover(*fake_sysfs(tmp_path, machine))
    flags = ("--reserved-cpus=0", "--cpu-manager-policy-options=align-by-socket=true")
    m = CpuManager(
        cfg(tmp_path, "--cpu-manager-policy=static", "--feature-gates=CPUManagerPolicyAlphaOptions=true", *flags),
        topology=topo,
    )
    m.start()
    pod = guaranteed("p", ("app", "2"))
    hints = {h.numa_affinity: h.preferred for h in m.get_topology_hints(pod, pod["spec"]["containers"][0])["cpu"]}
    assert hints[frozenset({1})] and hints[frozenset({2})]
    assert hints[frozenset({0, 1})] and hints[frozenset({2, 3})]  # within one socket
    assert not hints[frozenset({1, 2})]  # across sockets
    m.allocate(pod, pod["spec"]["containers"][0], TopologyHint(frozenset({1}), True))
    assert parse_cpuset(m.cpuset_for("p", "app")) <= topo.cpus_in_sockets([0])
    with pytest.raises(CpuManagerError, match="incompatible with CPUManager align-by-socket"):
        CpuManager(
            cfg(
                tmp_path,
                "--cpu-manager-policy=static",
                "--feature-gates=CPUManagerPolicyAlphaOptions=true",
                "--topology-manager-policy=single-numa-node",
                *flags,
            ),
            topology=topo,
        )


def test_distribute_across_numa_option(tmp_path, topo):
    m = CpuManager(
        cfg(
            tmp_path,
            "--cpu-manager-policy=static",
            "--reserved-cpus=0",
            "--feature-gates=CPUManagerPolicyAlphaOptions=true",
            "--cpu-manager-policy-options=distribute-cpus-across-numa=true",
        ),
        topology=topo,
    )
    m.start()
    pod = guaranteed("p", ("app", "6"))
    m.allocate(pod, pod["spec"]["containers"][0], None)
    got = parse_cpuset(m.cpuset_for("p", "app"))
    assert len(got & topo.cpus_in_numa([0])) == 3 and len(got & topo.cpus_in_numa([1])) == 3


class FakeDevices:
    """A device manager stand-in: its devices sit on NUMA node 1."""

    def __init__(self):
        self.allocated: list[tuple[str, str, object]] = []
        self.freed: list[str] = []

    def get_topology_hints(self, pod, container):
        return {"example.com/dev": [H({1}, True)]} if container.get("name") == "app" else {}

    def get_pod_topology_hints(self, pod):
        return {"example.com/dev": [H({1}, True)]}

    def allocate(self, pod, container, affinity):
        self.allocated.append((pod["metadata"]["uid"], container["name"], affinity))

    def free_pod(self, uid):
        self.freed.append(uid)


def test_devices_are_aligned_with_cpus_through_the_container_manager(tmp_path, topo):
    sysfs = make_v1_tree(tmp_path / "cg")
    (tmp_path / "pid_max").write_text("4194304\n")
    (tmp_path / "huge").mkdir()
    cm = ContainerManager(
        cfg(tmp_path, "--cpu-manager-policy=static", "--reserved-cpus=0", "--topology-manager-policy=single-numa-node"),
        sysfs=str(sysfs),
        capacity={**CAP, "cpu": 8000},
        mountinfo="/nonexistent",
        pid_max_path=str(tmp_path / "pid_max"),
        hugepages_dir=str(tmp_path / "huge"),
        cpu_topology=topo,
    )
    cm.start()
    devices = FakeDevices()
    cm.add_device_manager(devices)
    assert cm.allocates_devices
    pod = guaranteed("g", ("app", "2"))
    assert cm.admit(pod, []).admit
    assert parse_cpuset(cm.cpu_manager.cpuset_for("g", "app")) <= topo.cpus_in_numa([1])
    assert devices.allocated == [("g", "app", H({1}, True))]
    # A pod refused after its devices were allocated gives them back.
    too_big = guaranteed("big", ("app", "1"))
    too_big["spec"]["containers"][0]["resources"]["requests"]["memory"] = "64Gi"
    too_big["spec"]["containers"][0]["resources"]["limits"]["memory"] = "64Gi"
    result = cm.admit(too_big, [pod])
    assert result.reason == "OutOfmemory"
    assert devices.freed == ["big"] and "big" not in cm.cpu_manager.assignments
