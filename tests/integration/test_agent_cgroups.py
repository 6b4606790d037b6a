"""The container manager on this machine's real cgroup v1 filesystem.

Everything happens under a unique cgroup root (``/orch-test-<hex>``) created
by the fixture in every hierarchy and removed afterwards - processes first -
even when a test fails, so nothing else on the host is touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from agent.cm import ContainerManager
from agent.cm.cgroupfs import CgroupError, detect_layout, milli_cpu_to_shares
from agent.config import from_argv

SYSFS = "/sys/fs/cgroup"
MI = 1 << 20
GI = 1 << 30


def _v1_layout():
    if os.geteuid() != 0:
        pytest.skip(f"cgroup integration tests need root (running as uid {os.geteuid()})")
    try:
        layout = detect_layout(SYSFS)
    except CgroupError as exc:
        pytest.skip(f"no usable cgroup filesystem: {exc}")
    if layout.version != 1 or layout.mount_for("memory") is None:
        pytest.skip(
            "these tests need the cgroup v1 memory controller (this host is "
            f"{'cgroup v2' if layout.version == 2 else 'v1 without memory'})"
        )
    return layout


def _kill_and_remove(top: str) -> None:
    for _ in range(50):
        pids = set()
        for dirpath, _dirs, _files in os.walk(top):
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    pids |= {int(x) for x in f.read().split()}
            except OSError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        busy = False
        for dirpath, _dirs, _files in os.walk(top, topdown=False):
            try:
                os.rmdir(dirpath)
            except FileNotFoundError:
                pass
            except OSError:
                busy = True
        if not busy:
            return
        time.sleep(0.05)


@pytest.fixture
def cgroup_root():
    """A fresh ``/orch-test-<hex>`` in every hierarchy; removed afterwards, processes killed."""
    layout = _v1_layout()
    name = f"/orch-test-{uuid.uuid4().hex[:12]}"
    tops = sorted({os.path.join(mp, name.strip("/")) for mp in layout.controller_mounts().values()})
    try:
        for top in tops:
            os.mkdir(top)
        yield name, layout
    finally:
        for top in tops:
            if os.path.isdir(top):
                _kill_and_remove(top)
        left = [t for t in tops if os.path.exists(t)]
        assert not left, f"cgroups left behind: {left}"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _pod(uid: str, requests: dict, limits: dict) -> dict:
    return {
        "metadata": {"uid": uid, "name": f"p-{uid[:8]}", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests, "limits": limits}}]
        },
    }


CAP = {"cpu": 2000, "memory": 4 * GI, "pods": 110, "ephemeral-storage": 20 * GI}


def test_pod_cgroup_limits_and_removal_on_the_real_cgroupfs(cgroup_root):
    root, layout = cgroup_root
    cfg = from_argv([f"--cgroup-root={root}", "--orch-reserved=cpu=100m,memory=256Mi", "--pod-max-pids=128"])
    cm = ContainerManager(cfg, capacity=CAP)
    cm.start()

    mounts = layout.controller_mounts()
    orchpods_mem = os.path.join(mounts["memory"], root.strip("/"), "orchpods")
    assert _read(os.path.join(orchpods_mem, "memory.limit_in_bytes")) == str(4 * GI - 256 * MI)
    assert _read(os.path.join(mounts["cpu"], root.strip("/"), "orchpods", "cpu.shares")) == str(
        milli_cpu_to_shares(1900)
    )

    uid = str(uuid.uuid4())
    pod = _pod(uid, {"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m", "memory": "128Mi"})
    parent = cm.ensure_pod(pod)
    assert parent == f"{root}/orchpods/burstable/pod{uid}"
    dirs = cm.pod_cgroup_dirs(uid)
    assert _read(os.path.join(dirs["cpu"], "cpu.shares")) == "256"
    assert _read(os.path.join(dirs["cpu"], "cpu.cfs_period_us")) == "100000"
    assert _read(os.path.join(dirs["cpu"], "cpu.cfs_quota_us")) == "50000"
    assert _read(os.path.join(dirs["memory"], "memory.limit_in_bytes")) == str(128 * MI)
    if "pids" in dirs:
        assert _read(os.path.join(dirs["pids"], "pids.max")) == "128"
    burstable_cpu = os.path.join(mounts["cpu"], root.strip("/"), "orchpods", "burstable", "cpu.shares")
    assert _read(burstable_cpu) == "256"
    assert cm.ensure_pod(pod) == parent  # idempotent
    assert cm.pod_uids() == {uid}

    proc = subprocess.Popen(["sleep", "600"])
    try:
        for key in ("memory", "cpu", "pids", "cpuset"):
            if key in dirs:
                with open(os.path.join(dirs[key], "cgroup.procs"), "w") as f:
                    f.write(str(proc.pid))
        with open(f"/proc/{proc.pid}/cgroup") as f:
            assert f"memory:{root}/orchpods/burstable/pod{uid}" in f.read()

        assert cm.remove_pod(uid) is True
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for d in dirs.values():
        assert not os.path.exists(d), d
    assert cm.pod_uids() == set()
    assert _read(burstable_cpu) == "2"
    assert cm.remove_pod(uid) is False


def test_guaranteed_and_best_effort_placement(cgroup_root):
    root, layout = cgroup_root
    cm = ContainerManager(from_argv([f"--cgroup-root={root}"]), capacity=CAP)
    cm.start()
    g_uid, e_uid = str(uuid.uuid4()), str(uuid.uuid4())
    g = _pod(g_uid, {}, {"cpu": "1", "memory": "32Mi"})
    e = _pod(e_uid, {}, {})
    assert cm.ensure_pod(g) == f"{root}/orchpods/pod{g_uid}"
    assert cm.ensure_pod(e) == f"{root}/orchpods/besteffort/pod{e_uid}"
    gd, ed = cm.pod_cgroup_dirs(g_uid), cm.pod_cgroup_dirs(e_uid)
    assert _read(os.path.join(gd["cpu"], "cpu.cfs_quota_us")) == "100000"
    assert _read(os.path.join(gd["memory"], "memory.limit_in_bytes")) == str(32 * MI)
    assert _read(os.path.join(ed["cpu"], "cpu.shares")) == "2"
    # A fresh manager (an agent restart) finds both as cgroups and cleans them up.
    again = ContainerManager(from_argv([f"--cgroup-root={root}"]), capacity=CAP)
    again.start()
    assert again.pod_uids() == {g_uid, e_uid}
    assert again.remove_pod(g_uid) and again.remove_pod(e_uid)
    assert not any(os.path.exists(d) for d in [*gd.values(), *ed.values()])
