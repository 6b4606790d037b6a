"""agent.cm: QoS, requests, cgroup arithmetic and files, naming, allocatable, admission.

The cgroup trees here are plain directories shaped like the kernel's (v1
hybrid and v2); the real cgroupfs is exercised in
tests/integration/test_agent_cgroups.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from agent.cm import AdmitResult, CgroupError, ContainerManager, pod_qos_class, pod_requests
from agent.cm.admission import admit
from agent.cm.allocatable import (
    allocatable_absolute,
    cpuset_size,
    hard_eviction_reservation,
    hugepage_resource_name,
    machine_capacity,
    node_allocatable,
    node_reservation,
    pods_capacity,
)
from agent.cm.cgroupfs import (
    CgroupV1Fs,
    CgroupV2Fs,
    ResourceConfig,
    _layout_from_mounts,
    _parse_mountinfo,
    cpu_max_value,
    detect_layout,
    hugepage_cgroup_size,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    shares_to_weight,
)
from agent.cm.manager import resource_config_for_pod
from agent.cm.qos import pod_limits
from agent.cm.systemd import (
    BusResult,
    SystemdBus,
    check_systemd,
    encode_properties,
    expand_slice,
    parse_slice,
    resource_properties,
    slice_name,
    slice_properties,
    to_systemd,
)
from agent.config import from_argv

MI = 1 << 20
GI = 1 << 30


# --- pod builders -----------------------------------------------------------------


def container(name="c", requests=None, limits=None):
    res = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res}


def pod(uid="u-1", containers=None, init=None, overhead=None, name=None):
    spec = {"containers": containers if containers is not None else [container()]}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"uid": uid, "name": name or f"p-{uid}", "namespace": "default"}, "spec": spec}


GUARANTEED_POD = pod("g-1", [container(limits={"cpu": "500m", "memory": "128Mi"})])
BURSTABLE_POD = pod(
    "b-1", [container(requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "1", "memory": "256Mi"})]
)
BEST_EFFORT_POD = pod("e-1")


# --- QoS ------------------------------------------------------------------------------


def test_qos_best_effort_when_nothing_is_set():
    assert pod_qos_class(BEST_EFFORT_POD) == "BestEffort"
    zero = pod("z", [container(requests={"cpu": "0", "memory": "0"})])
    assert pod_qos_class(zero) == "BestEffort"


def test_qos_guaranteed_from_limits_alone_because_requests_default_to_limits():
    assert pod_qos_class(GUARANTEED_POD) == "Guaranteed"
    equal = pod(
        "g2", [container(requests={"cpu": "0.5", "memory": "128Mi"}, limits={"cpu": "500m", "memory": "134217728"})]
    )
    assert pod_qos_class(equal) == "Guaranteed"  # values compared, not spellings


def test_qos_burstable_cases():
    assert pod_qos_class(BURSTABLE_POD) == "Burstable"
    only_cpu = pod("x", [container(limits={"cpu": "1"})])
    assert pod_qos_class(only_cpu) == "Burstable"
    requests_only = pod("x", [container(requests={"memory": "1Gi"})])
    assert pod_qos_class(requests_only) == "Burstable"
    one_unlimited = pod("x", [container("a", limits={"cpu": "1", "memory": "1Gi"}), container("b")])
    assert pod_qos_class(one_unlimited) == "Burstable"


def test_qos_counts_init_containers():
    full = {"cpu": "1", "memory": "1Gi"}
    init_unlimited = pod("x", [container(limits=full)], init=[container("init")])
    assert pod_qos_class(init_unlimited) == "Burstable"
    init_limited = pod("x", [container(limits=full)], init=[container("init", limits=full)])
    assert pod_qos_class(init_limited) == "Guaranteed"
    init_only = pod("x", [container()], init=[container("init", requests={"cpu": "100m"})])
    assert pod_qos_class(init_only) == "Burstable"


# --- requests and limits ------------------------------------------------------------


def test_pod_requests_take_max_of_app_sum_and_any_init_container_plus_overhead():
    p = pod(
        "r",
        [
            container("a", requests={"cpu": "200m", "memory": "100Mi"}),
            container("b", requests={"cpu": "300m", "memory": "50Mi", "example.com/gpu": "1"}),
        ],
        init=[container("i1", requests={"cpu": "1", "memory": "10Mi"}), container("i2", limits={"memory": "200Mi"})],
        overhead={"cpu": "10m", "memory": "1Mi"},
    )
    assert pod_requests(p) == {"cpu": 1010, "memory": 201 * MI, "example.com/gpu": 1}


def test_pod_limits_report_whether_every_container_declared_them():
    lim = pod_limits(BURSTABLE_POD)
    assert lim.limits == {"cpu": 1000, "memory": 256 * MI}
    assert lim.cpu_declared and lim.memory_declared
    partial = pod(
        "x",
        [container("a", limits={"cpu": "1", "memory": "1Gi"}), container("b", limits={"cpu": "1"})],
        overhead={"cpu": "100m", "ephemeral-storage": "1Gi"},
    )
    lim = pod_limits(partial)
    assert lim.limits == {"cpu": 2100, "memory": GI}  # overhead only where a limit exists
    assert lim.cpu_declared and not lim.memory_declared


def test_bad_quantity_names_the_field():
    bad = pod("x", [container(requests={"cpu": "lots"})])
    with pytest.raises(ValueError, match=r"spec\.containers\[0\]\.resources\.requests\.cpu"):
        pod_requests(bad)


# --- arithmetic -------------------------------------------------------------------------


def test_shares_quota_weight_arithmetic():
    assert [milli_cpu_to_shares(m) for m in (0, 1, 100, 250, 1000, 300_000)] == [2, 2, 102, 256, 1024, 262144]
    assert milli_cpu_to_quota(0, 100_000) == 0
    assert milli_cpu_to_quota(5, 100_000) == 1000  # at least 1 ms
    assert milli_cpu_to_quota(250, 100_000) == 25_000
    assert milli_cpu_to_quota(1500, 50_000) == 75_000
    assert [shares_to_weight(s) for s in (2, 1024, 262144)] == [1, 39, 10000]
    assert cpu_max_value(50_000, 100_000) == "50000 100000"
    assert cpu_max_value(-1, 100_000) == "max 100000"


def test_hugepage_names():
    assert hugepage_cgroup_size(2 * MI) == "2MB"
    assert hugepage_cgroup_size(GI) == "1GB"
    assert hugepage_cgroup_size(64 * 1024) == "64KB"
    assert hugepage_resource_name(2 * MI) == "hugepages-2Mi"
    assert hugepage_resource_name(GI) == "hugepages-1Gi"


def test_resource_config_for_pod_per_qos_class():
    g = resource_config_for_pod(GUARANTEED_POD)
    assert (g.cpu_shares, g.cpu_quota, g.cpu_period, g.memory) == (512, 50_000, 100_000, 128 * MI)
    b = resource_config_for_pod(BURSTABLE_POD, pod_pids_limit=64)
    assert (b.cpu_shares, b.cpu_quota, b.memory, b.pids) == (256, 100_000, 256 * MI, 64)
    half = pod(
        "h",
        [
            container("a", requests={"cpu": "100m"}, limits={"memory": "1Gi"}),
            container("b", requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "1Gi"}),
        ],
    )
    h = resource_config_for_pod(half)
    assert h.cpu_shares == 204 and h.cpu_quota is None and h.cpu_period is None and h.memory == 2 * GI
    e = resource_config_for_pod(BEST_EFFORT_POD)
    assert (e.cpu_shares, e.cpu_quota, e.memory, e.pids) == (2, None, None, None)
    assert resource_config_for_pod(GUARANTEED_POD, cfs_quota=False).cpu_quota == -1
    # A custom period is used for the quota only with the CustomCPUCFSQuotaPeriod gate.
    assert resource_config_for_pod(GUARANTEED_POD, period_us=50_000).cpu_quota == 50_000
    c = resource_config_for_pod(GUARANTEED_POD, period_us=50_000, custom_period=True)
    assert (c.cpu_quota, c.cpu_period) == (25_000, 50_000)


# --- layout detection -----------------------------------------------------------------------

HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_layout_from_mount_table():
    layout = _layout_from_mounts("/sys/fs/cgroup", _parse_mountinfo(HYBRID_MOUNTINFO))
    assert layout.version == 1 and layout.hybrid
    mounts = layout.controller_mounts()
    assert mounts["cpu"] == mounts["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert mounts["systemd"] == "/sys/fs/cgroup/systemd"
    assert mounts["unified"] == "/sys/fs/cgroup/unified"
    v2 = _layout_from_mounts("/sys/fs/cgroup", _parse_mountinfo(V2_MOUNTINFO))
    assert v2.version == 2 and v2.controller_mounts() == {"unified": "/sys/fs/cgroup"}
    assert _layout_from_mounts("/elsewhere", _parse_mountinfo(HYBRID_MOUNTINFO)) is None


def test_layout_of_this_machine_matches_its_mounts():
    with open("/proc/self/mountinfo") as f:
        text = f.read()
    if " - cgroup" not in text:
        pytest.skip("no cgroup filesystem mounted here")
    layout = detect_layout("/sys/fs/cgroup")
    kinds = {fs for mp, fs, _ in _parse_mountinfo(text) if mp == "/sys/fs/cgroup"}
    assert layout.version == (2 if "cgroup2" in kinds else 1)


def test_no_cgroup_filesystem_is_a_clear_error(tmp_path):
    with pytest.raises(CgroupError, match="no cgroup filesystem found at"):
        detect_layout(str(tmp_path), mountinfo="/nonexistent")


# --- fake trees --------------------------------------------------------------------------

V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd")


def make_v1_tree(root, cgroup_root=""):
    for c in V1_CONTROLLERS:
        d = root / c
        d.mkdir(parents=True)
        (d / "cgroup.procs").write_text("")
        if cgroup_root:
            (d / cgroup_root.strip("/")).mkdir(parents=True)
    (root / "hugetlb" / "hugetlb.2MB.limit_in_bytes").write_text("")
    (root / "hugetlb" / "hugetlb.1GB.limit_in_bytes").write_text("")
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("")
    (root / "unified" / "cgroup.procs").write_text("")
    return root


def make_v2_tree(root, controllers="cpuset cpu io memory hugetlb pids"):
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers)
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("")
    return root


def make_hugepages(root, sizes_kb=(2048, 1048576), counts=(16, 0)):
    for kb, n in zip(sizes_kb, counts):
        d = root / f"hugepages-{kb}kB"
        d.mkdir(parents=True)
        (d / "nr_hugepages").write_text(f"{n}\n")
    return root


def cfg_of(*flags):
    return from_argv(list(flags))


CAP = {"cpu": 4000, "memory": 8 * GI, "pods": 110, "ephemeral-storage": 100 * GI}


def manager(tmp_path, *flags, capacity=CAP, tree="v1", **kw):
    sysfs = tmp_path / "cg"
    if tree == "v1":
        make_v1_tree(sysfs)
    else:
        make_v2_tree(sysfs)
    huge = tmp_path / "hugepages"
    if not huge.exists():
        huge.mkdir()
    pid_max = tmp_path / "pid_max"
    pid_max.write_text("4194304\n")
    kw.setdefault("hugepages_dir", str(huge))
    cm = ContainerManager(
        cfg_of(*flags), sysfs=str(sysfs), capacity=capacity, mountinfo="/nonexistent", pid_max_path=str(pid_max), **kw
    )
    return cm, sysfs


def read(path):
    with open(path) as f:
        return f.read().strip()


def test_v1_start_builds_the_qos_tree_and_enforces_allocatable(tmp_path):
    cm, sysfs = manager(tmp_path, "--orch-reserved=cpu=500m,memory=1Gi", "--system-reserved=memory=512Mi,pid=1000")
    cm.start()
    for c in ("cpu", "memory", "pids", "cpuset", "systemd"):
        for d in ("orchpods", "orchpods/burstable", "orchpods/besteffort"):
            assert (sysfs / c / d).is_dir(), (c, d)
    assert (sysfs / "unified" / "orchpods" / "burstable").is_dir()
    assert read(sysfs / "cpu/orchpods/cpu.shares") == str(milli_cpu_to_shares(3500))
    # capacity - reserved, without the 100Mi eviction threshold
    assert read(sysfs / "memory/orchpods/memory.limit_in_bytes") == str(8 * GI - GI - 512 * MI)
    assert read(sysfs / "pids/orchpods/pids.max") == str(4194304 - 1000)
    assert read(sysfs / "cpu/orchpods/besteffort/cpu.shares") == "2"
    assert read(sysfs / "cpu/orchpods/burstable/cpu.shares") == "2"
    assert cm.enforcement_error == ""


def test_without_pods_enforcement_orchpods_gets_capacity(tmp_path):
    cm, sysfs = manager(tmp_path, "--enforce-node-allocatable=", "--orch-reserved=memory=1Gi")
    cm.start()
    assert read(sysfs / "memory/orchpods/memory.limit_in_bytes") == str(8 * GI)
    assert read(sysfs / "cpu/orchpods/cpu.shares") == str(milli_cpu_to_shares(4000))


def test_v1_pod_cgroups_limits_and_qos_shares(tmp_path):
    cm, sysfs = manager(tmp_path, "--pod-max-pids=256")
    cm.start()
    assert cm.ensure_pod(GUARANTEED_POD) == "/orchpods/podg-1"
    g = sysfs / "cpu/orchpods/podg-1"
    assert read(g / "cpu.shares") == "512"
    assert read(g / "cpu.cfs_period_us") == "100000"
    assert read(g / "cpu.cfs_quota_us") == "50000"
    assert read(sysfs / "memory/orchpods/podg-1/memory.limit_in_bytes") == str(128 * MI)
    assert read(sysfs / "pids/orchpods/podg-1/pids.max") == "256"

    assert cm.ensure_pod(BURSTABLE_POD) == "/orchpods/burstable/podb-1"
    other = pod("b-2", [container(requests={"cpu": "750m"})])
    cm.ensure_pod(other)
    assert not (sysfs / "cpu/orchpods/burstable/podb-2/cpu.cfs_quota_us").exists()  # no cpu limit
    assert not (sysfs / "memory/orchpods/burstable/podb-2/memory.limit_in_bytes").exists()
    assert read(sysfs / "cpu/orchpods/burstable/cpu.shares") == str(milli_cpu_to_shares(1000))

    assert cm.ensure_pod(BEST_EFFORT_POD) == "/orchpods/besteffort/pode-1"
    assert read(sysfs / "cpu/orchpods/besteffort/pode-1/cpu.shares") == "2"
    assert cm.pod_uids() == {"g-1", "b-1", "b-2", "e-1"}
    assert cm.ensure_pod(BURSTABLE_POD) == "/orchpods/burstable/podb-1"  # idempotent

    assert cm.remove_pod("b-2") is True
    assert read(sysfs / "cpu/orchpods/burstable/cpu.shares") == str(milli_cpu_to_shares(250))
    for c in V1_CONTROLLERS + ("unified",):
        assert not (sysfs / c / "orchpods/burstable/podb-2").exists(), c
    assert cm.remove_pod("b-2") is False
    assert cm.pod_uids() == {"g-1", "b-1", "e-1"}

    cm.update_qos([])  # the owner says nothing runs any more
    assert read(sysfs / "cpu/orchpods/burstable/cpu.shares") == "2"
    dirs = cm.pod_cgroup_dirs("g-1")
    assert dirs["memory"] == str(sysfs / "memory/orchpods/podg-1")
    assert dirs["unified"] == str(sysfs / "unified/orchpods/podg-1")


def test_cfs_quota_off_writes_unlimited(tmp_path):
    cm, sysfs = manager(tmp_path, "--cpu-cfs-quota=false")
    cm.start()
    cm.ensure_pod(GUARANTEED_POD)
    assert read(sysfs / "cpu/orchpods/podg-1/cpu.cfs_quota_us") == "-1"


def test_hugetlb_limits(tmp_path):
    make_hugepages(tmp_path / "hugepages")
    cap = {**CAP, "hugepages-2Mi": 32 * MI, "hugepages-1Gi": 0}
    cm, sysfs = manager(tmp_path, capacity=cap)
    cm.start()
    assert read(sysfs / "hugetlb/orchpods/hugetlb.2MB.limit_in_bytes") == str(32 * MI)
    assert read(sysfs / "hugetlb/orchpods/hugetlb.1GB.limit_in_bytes") == "0"
    assert read(sysfs / "hugetlb/orchpods/burstable/hugetlb.2MB.limit_in_bytes") == str(1 << 62)
    hp = pod("h-1", [container(limits={"cpu": "1", "memory": "64Mi", "hugepages-2Mi": "8Mi"})])
    cm.ensure_pod(hp)
    assert read(sysfs / "hugetlb/orchpods/podh-1/hugetlb.2MB.limit_in_bytes") == str(8 * MI)
    assert read(sysfs / "hugetlb/orchpods/podh-1/hugetlb.1GB.limit_in_bytes") == "0"
    # huge pages are taken out of allocatable memory
    assert cm.allocatable()["memory"] == 8 * GI - 100 * MI - 32 * MI


def test_remove_pod_kills_leftover_processes(tmp_path):
    cm, sysfs = manager(tmp_path)
    cm.start()
    cm.ensure_pod(BURSTABLE_POD)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        (sysfs / "memory/orchpods/burstable/podb-1/cgroup.procs").write_text(f"{proc.pid}\n")
        assert cm.remove_pod("b-1") is True
        assert proc.wait(timeout=10) == -9
        assert not (sysfs / "memory/orchpods/burstable/podb-1").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_orphan_pod_cgroups_are_found_and_removed_after_a_restart(tmp_path):
    cm, sysfs = manager(tmp_path)
    cm.start()
    cm.ensure_pod(GUARANTEED_POD)
    cm.ensure_pod(BEST_EFFORT_POD)
    fresh = ContainerManager(
        cm.cfg, sysfs=str(sysfs), capacity=CAP, mountinfo="/nonexistent", hugepages_dir=str(tmp_path / "hugepages")
    )
    fresh.start()
    assert fresh.pod_uids() == {"g-1", "e-1"}
    assert fresh.pod_cgroup_dirs("e-1")["cpu"] == str(sysfs / "cpu/orchpods/besteffort/pode-1")
    assert fresh.remove_pod("g-1") and fresh.remove_pod("e-1")
    assert fresh.pod_uids() == set()


def test_cgroup_root_must_exist(tmp_path):
    cm, sysfs = manager(tmp_path, "--cgroup-root=/orch-test")
    with pytest.raises(CgroupError, match=r'cgroup root "/orch-test" \(--cgroup-root\) does not exist'):
        cm.start()
    for c in V1_CONTROLLERS:
        (sysfs / c / "orch-test").mkdir()
    cm.start()
    assert cm.cgroup_parent(GUARANTEED_POD) == "/orch-test/orchpods/podg-1"
    cm.ensure_pod(GUARANTEED_POD)
    assert (sysfs / "memory/orch-test/orchpods/podg-1/memory.limit_in_bytes").is_file()


def test_not_started_is_an_error(tmp_path):
    cm, _ = manager(tmp_path)
    with pytest.raises(CgroupError, match="not started"):
        cm.ensure_pod(GUARANTEED_POD)


def test_without_cgroups_per_qos_nothing_is_created(tmp_path):
    cm, sysfs = manager(tmp_path, "--cgroups-per-qos=false", "--enforce-node-allocatable=")
    cm.start()
    assert cm.ensure_pod(GUARANTEED_POD) == ""
    assert not (sysfs / "cpu/orchpods").exists()
    assert cm.pod_uids() == set() and cm.remove_pod("g-1") is False


def test_reserved_cgroups_are_enforced_when_asked(tmp_path):
    flags = (
        "--enforce-node-allocatable=pods,system-reserved",
        "--system-reserved=cpu=1,memory=1Gi",
        "--system-reserved-cgroup=/system",
    )
    cm, sysfs = manager(tmp_path, *flags)
    with pytest.raises(CgroupError, match=r'cannot enforce system-reserved: the cgroup "/system"'):
        cm.start()
    for c in V1_CONTROLLERS:
        (sysfs / c / "system").mkdir()
    cm.start()
    assert read(sysfs / "memory/system/memory.limit_in_bytes") == str(GI)
    assert read(sysfs / "cpu/system/cpu.shares") == "1024"


def test_qos_reserved_memory_with_gate(tmp_path):
    cm, sysfs = manager(tmp_path, "--feature-gates=QOSReserved=true", "--qos-reserved=memory=50%")
    cm.start()
    cm.ensure_pod(GUARANTEED_POD)  # 128Mi requested
    cm.ensure_pod(BURSTABLE_POD)  # 64Mi requested
    burst = 8 * GI - 128 * MI // 2
    assert read(sysfs / "memory/orchpods/burstable/memory.limit_in_bytes") == str(burst)
    assert read(sysfs / "memory/orchpods/besteffort/memory.limit_in_bytes") == str(burst - 32 * MI)


def test_v1_cpuset_copies_parent_cpus(tmp_path):
    sysfs = make_v1_tree(tmp_path / "cg")
    (sysfs / "cpuset/cpuset.cpus").write_text("0-3\n")
    (sysfs / "cpuset/cpuset.mems").write_text("0\n")
    fs = CgroupV1Fs(detect_layout(str(sysfs), mountinfo="/nonexistent"))
    # A kernel makes the files empty in a new cpuset cgroup; mimic it for the first level.
    (sysfs / "cpuset/a").mkdir()
    (sysfs / "cpuset/a/cpuset.cpus").write_text("")
    (sysfs / "cpuset/a/cpuset.mems").write_text("")
    fs._copy_cpuset(str(sysfs / "cpuset"), str(sysfs / "cpuset/a"))
    assert read(sysfs / "cpuset/a/cpuset.cpus") == "0-3" and read(sysfs / "cpuset/a/cpuset.mems") == "0"


# --- cgroup v2 ------------------------------------------------------------------------------


def test_v2_files_and_controller_delegation(tmp_path):
    cm, sysfs = manager(tmp_path, "--pod-max-pids=100", tree="v2")
    cm.start()
    assert set(read(sysfs / "cgroup.subtree_control").split()) >= {"cpu", "memory", "pids"}
    assert set(read(sysfs / "orchpods/cgroup.subtree_control").split()) >= {"cpu", "memory", "pids"}
    assert read(sysfs / "orchpods/cpu.weight") == str(shares_to_weight(milli_cpu_to_shares(4000)))
    assert read(sysfs / "orchpods/memory.max") == str(8 * GI)
    assert read(sysfs / "orchpods/besteffort/cpu.weight") == "1"

    assert cm.ensure_pod(GUARANTEED_POD) == "/orchpods/podg-1"
    d = sysfs / "orchpods/podg-1"
    assert read(d / "cpu.weight") == str(shares_to_weight(512))
    assert read(d / "cpu.max") == "50000 100000"
    assert read(d / "memory.max") == str(128 * MI)
    assert read(d / "pids.max") == "100"
    assert cm.pod_cgroup_dirs("g-1") == {"unified": str(d)}
    assert cm.remove_pod("g-1") and not d.exists()


def test_v2_missing_controller_is_a_clear_error(tmp_path):
    sysfs = make_v2_tree(tmp_path / "cg", controllers="cpu cpuset pids")
    cm = ContainerManager(
        cfg_of(), sysfs=str(sysfs), capacity=CAP, mountinfo="/nonexistent", hugepages_dir=str(tmp_path)
    )
    with pytest.raises(CgroupError, match=r"Cgroup subsystem not mounted: \[memory\]"):
        cm.start()


def test_v2_controller_not_delegated_is_named(tmp_path):
    sysfs = make_v2_tree(tmp_path / "cg")
    fs = CgroupV2Fs(detect_layout(str(sysfs), mountinfo="/nonexistent"))
    (sysfs / "made-by-someone-else").mkdir()  # the root delegates nothing to it
    with pytest.raises(
        CgroupError,
        match=r"memory\.max on .*made-by-someone-else: the memory "
        r"controller is not enabled there",
    ):
        fs.update("made-by-someone-else", ResourceConfig(memory=GI))
    fs.create("made-by-someone-else")  # delegates what the root has
    fs.update("made-by-someone-else", ResourceConfig(memory=GI))
    assert read(sysfs / "made-by-someone-else/memory.max") == str(GI)


def test_v1_missing_memory_controller_refused(tmp_path):
    sysfs = make_v1_tree(tmp_path / "cg")
    shutil.rmtree(sysfs / "memory")
    cm = ContainerManager(cfg_of(), sysfs=str(sysfs), capacity=CAP, mountinfo="/nonexistent")
    with pytest.raises(CgroupError, match=r"not mounted: \[memory\]"):
        cm.start()


# --- systemd driver -------------------------------------------------------------------------


def test_systemd_names():
    cg = ("orchpods", "burstable", "pod1234-5678-ab")
    assert slice_name(cg) == "orchpods-burstable-pod1234_5678_ab.slice"
    assert to_systemd(cg) == ("/orchpods.slice/orchpods-burstable.slice/orchpods-burstable-pod1234_5678_ab.slice")
    assert parse_slice(to_systemd(cg)) == cg
    assert parse_slice("/system.slice") == ("system",)
    assert parse_slice("/") == () and slice_name(()) == "-.slice" and expand_slice("-.slice") == "/"
    for bad in ("a--b.slice", "-a.slice", "a.scope", "a/b.slice"):
        with pytest.raises(CgroupError, match="invalid slice name"):
            expand_slice(bad)


def test_busctl_argv_for_a_pod_slice():
    bus = SystemdBus(cgroup_version=1, runner=lambda argv: BusResult(0))
    res = ResourceConfig(cpu_shares=512, cpu_quota=12_345, cpu_period=100_000, memory=128 * MI, pids=64)
    argv = bus.start_transient_unit_argv("orchpods-podx.slice", slice_properties(("orchpods", "podx"), res, 1))
    assert argv == [
        "busctl",
        "call",
        "--timeout=30",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        "orchpods-podx.slice",
        "replace",
        "12",
        "Description",
        "s",
        "orch-agent orchpods-podx.slice",
        "Wants",
        "as",
        "1",
        "orchpods.slice",
        "MemoryAccounting",
        "b",
        "true",
        "CPUAccounting",
        "b",
        "true",
        "BlockIOAccounting",
        "b",
        "true",
        "TasksAccounting",
        "b",
        "true",
        "DefaultDependencies",
        "b",
        "false",
        "CPUShares",
        "t",
        "512",
        "CPUQuotaPerSecUSec",
        "t",
        "130000",  # 123450 rounded up to 10 ms
        "CPUQuotaPeriodUSec",
        "t",
        "100000",
        "MemoryLimit",
        "t",
        str(128 * MI),
        "TasksMax",
        "t",
        "64",
        "0",
    ]
    v2 = resource_properties(ResourceConfig(cpu_shares=1024, cpu_quota=-1, cpu_period=100_000, memory=-1), 2)
    assert v2 == [
        ("CPUWeight", "t", 39),
        ("CPUQuotaPerSecUSec", "t", (1 << 64) - 1),
        ("CPUQuotaPeriodUSec", "t", 100_000),
        ("MemoryMax", "t", (1 << 64) - 1),
    ]
    assert encode_properties([("Wants", "as", ["a.slice", "b.slice"])]) == [
        "1",
        "Wants",
        "as",
        "2",
        "a.slice",
        "b.slice",
    ]
    assert bus.stop_unit_argv("x.slice")[-4:] == ["StopUnit", "ss", "x.slice", "replace"]


def test_existing_unit_gets_its_properties_updated_and_errors_are_clear():
    calls = []

    def runner(argv):
        calls.append(argv)
        if "StartTransientUnit" in argv:
            return BusResult(1, "", "Call failed: Unit orchpods.slice already exists.\n")
        if "StopUnit" in argv:
            return BusResult(1, "", "Call failed: Unit orchpods.slice not loaded.\n")
        return BusResult(0)

    bus = SystemdBus(cgroup_version=2, runner=runner)
    bus.ensure_slice(("orchpods",), ResourceConfig(cpu_shares=2))
    assert [a[6] for a in calls] == ["StartTransientUnit", "SetUnitProperties"]
    assert calls[1][7:] == ["sba(sv)", "orchpods.slice", "true", "1", "CPUWeight", "t", "1"]
    bus.stop(("orchpods",))  # not loaded: already gone
    failing = SystemdBus(cgroup_version=1, runner=lambda argv: BusResult(1, "", "Access denied"))
    with pytest.raises(CgroupError, match="systemd: StartTransientUnit orchpods.slice failed: Access denied"):
        failing.ensure_slice(("orchpods",), ResourceConfig())


def test_systemd_driver_refused_without_systemd(tmp_path):
    with pytest.raises(CgroupError, match=r"needs systemd as the init system.*does not exist"):
        check_systemd(str(tmp_path / "run-systemd-system"))
    cm, _ = manager(tmp_path, "--cgroup-driver=systemd", systemd_run_dir=str(tmp_path / "nope"))
    with pytest.raises(CgroupError, match="--cgroup-driver=cgroupfs"):
        cm.start()


def test_systemd_driver_with_a_recorded_bus(tmp_path):
    calls = []

    def runner(argv):
        calls.append(argv)
        return BusResult(0)

    run_dir = tmp_path / "run-systemd"
    run_dir.mkdir()
    bus = SystemdBus(cgroup_version=1, runner=runner)
    cm, sysfs = manager(tmp_path, "--cgroup-driver=systemd", systemd_run_dir=str(run_dir), bus=bus)
    cm.start()
    started = [a[8] for a in calls if a[6] == "StartTransientUnit"]
    assert started == ["orchpods.slice", "orchpods-burstable.slice", "orchpods-besteffort.slice"]
    p = pod("1234-ab", [container(requests={"cpu": "100m"})])
    assert cm.cgroup_parent(p) == "orchpods-burstable-pod1234_ab.slice"
    assert cm.ensure_pod(p) == "orchpods-burstable-pod1234_ab.slice"
    d = sysfs / "cpu/orchpods.slice/orchpods-burstable.slice/orchpods-burstable-pod1234_ab.slice"
    assert read(d / "cpu.shares") == "102"
    assert cm.pod_uids() == {"1234-ab"}
    calls.clear()
    assert cm.remove_pod("1234-ab") is True
    assert ["StopUnit", "ss", "orchpods-burstable-pod1234_ab.slice", "replace"] == calls[0][6:]
    assert not d.exists()


# --- capacity and allocatable --------------------------------------------------------------


def test_pods_capacity():
    assert pods_capacity(110, 0, 2) == 110
    assert pods_capacity(110, 10, 2) == 20
    assert pods_capacity(15, 10, 2) == 15


def test_machine_capacity_measures_this_host(tmp_path):
    import psutil

    make_hugepages(tmp_path / "hp", counts=(4, 0))
    cfg = cfg_of(f"--root-dir={tmp_path}/not/yet/there", "--pods-per-core=3")
    cap = machine_capacity(cfg, hugepages_dir=str(tmp_path / "hp"))
    cores = os.cpu_count()
    assert cap["cpu"] == cores * 1000
    assert cap["memory"] == psutil.virtual_memory().total
    st = os.statvfs(tmp_path)
    assert cap["ephemeral-storage"] == st.f_blocks * st.f_frsize
    assert cap["pods"] == min(110, 3 * cores)
    assert cap["hugepages-2Mi"] == 8 * MI and cap["hugepages-1Gi"] == 0


def test_allocatable_subtracts_reservations_and_hard_eviction():
    cfg = cfg_of(
        "--orch-reserved=cpu=200m,memory=500Mi",
        "--system-reserved=cpu=300m,ephemeral-storage=1Gi",
        "--eviction-hard=memory.available<100Mi,nodefs.available<10%",
    )
    res = node_reservation(cfg, CAP)
    nodefs = int(float(100 * GI) * 0.10000000149011612)  # upstream's float32 10%
    assert res == {"cpu": 500, "memory": 600 * MI, "ephemeral-storage": GI + nodefs}
    alloc = node_allocatable(CAP, res)
    assert alloc == {"cpu": 3500, "memory": 8 * GI - 600 * MI, "pods": 110, "ephemeral-storage": 100 * GI - GI - nodefs}
    assert allocatable_absolute(CAP, {"memory": GI}, {"cpu": 100}) == {
        "cpu": 3900,
        "memory": 7 * GI,
        "pods": 110,
        "ephemeral-storage": 100 * GI,
    }


def test_eviction_thresholds_that_reserve_nothing():
    assert hard_eviction_reservation({"memory.available": "0%", "nodefs.available": "100%"}, CAP) == {}
    assert hard_eviction_reservation({"memory.available": "5%"}, CAP) == {
        "memory": int(float(8 * GI) * 0.05000000074505806)
    }
    cfg = cfg_of("--experimental-allocatable-ignore-eviction=true")
    assert node_reservation(cfg, CAP) == {}


def test_reserved_cpus_replace_the_cpu_reservation():
    assert cpuset_size("0-3,8") == 5
    cfg = cfg_of("--reserved-cpus=0-1", "--system-reserved=cpu=100m", "--orch-reserved=cpu=300m", "--eviction-hard=")
    assert node_reservation(cfg, CAP) == {"cpu": 2000}
    with pytest.raises(ValueError, match="invalid cpuset"):
        cpuset_size("3-1")


def test_allocatable_never_negative():
    cfg = cfg_of("--orch-reserved=cpu=10", "--eviction-hard=")
    cm = ContainerManager(cfg, capacity=CAP)
    assert cm.allocatable()["cpu"] == 0
    assert cm.capacity() == CAP


# --- admission --------------------------------------------------------------------------------

ALLOC = {"cpu": 1200, "memory": GI, "pods": 3, "ephemeral-storage": 10 * GI, "example.com/gpu": 1}


def req_pod(uid, **requests):
    return pod(uid, [container(requests={k.replace("_", "-"): v for k, v in requests.items()})])


def test_admission_out_of_cpu_with_upstream_message():
    running = [req_pod("a", cpu="500m")]
    r = admit(req_pod("new", cpu="1"), running, ALLOC)
    assert r == AdmitResult(
        False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1000, used: 500, capacity: 1200"
    )
    assert admit(req_pod("new", cpu="700m"), running, ALLOC).admit


def test_admission_memory_storage_and_extended_resources():
    r = admit(req_pod("n", memory="2Gi"), [], ALLOC)
    assert (r.reason, r.message) == (
        "OutOfmemory",
        f"Node didn't have enough resource: memory, requested: {2 * GI}, used: 0, capacity: {GI}",
    )
    r = admit(req_pod("n", ephemeral_storage="11Gi"), [], ALLOC)
    assert r.reason == "OutOfephemeral-storage"
    gpu = pod("n", [container(requests={"example.com/gpu": "2"}, limits={"example.com/gpu": "2"})])
    assert admit(gpu, [], ALLOC).reason == "OutOfexample.com/gpu"
    other = pod("n", [container(limits={"vendor.io/fpga": "1"})])
    assert admit(other, [], ALLOC).admit  # the node does not advertise it: ignored, as upstream


def test_admission_pod_count_comes_first_and_counts_only_others():
    running = [req_pod(u) for u in ("a", "b", "c")]
    r = admit(req_pod("d", cpu="5"), running, ALLOC)
    assert r == AdmitResult(
        False, "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
    )
    assert admit(running[0], running, ALLOC).admit  # already counted: not twice


def test_admission_uses_init_containers_and_overhead():
    p = pod("i", [container(requests={"cpu": "100m"})], init=[container("init", requests={"cpu": "1300m"})])
    assert admit(p, [], ALLOC).reason == "OutOfcpu"
    p = pod("o", [container(requests={"cpu": "1"})], overhead={"cpu": "250m"})
    assert "requested: 1250" in admit(p, [], ALLOC).message


def test_best_effort_pod_fits_a_full_node_and_manager_admit_uses_allocatable(tmp_path):
    full = [req_pod("a", cpu="1200m", memory="1Gi")]
    assert admit(BEST_EFFORT_POD, full, ALLOC).admit
    cm = ContainerManager(
        cfg_of("--eviction-hard=memory.available<100Mi"), capacity={"cpu": 1000, "memory": GI, "pods": 2}
    )
    r = cm.admit(req_pod("x", memory="1000Mi"), [])
    assert r.reason == "OutOfmemory" and f"capacity: {GI - 100 * MI}" in r.message
    assert cm.admit(req_pod("x", cpu="lots"), []).admit is False
