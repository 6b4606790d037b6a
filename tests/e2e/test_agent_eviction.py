"""Eviction under disk pressure on a one-node cluster (orch-apiserver, the session's
containerd, a joined agent, kubectl).

The agent's ``--root-dir`` is a 64 MiB tmpfs made for the test, so filling it is
cheap and touches nothing else; ``--eviction-hard=nodefs.available<50%`` with a
1 s ``--housekeeping-interval`` and a 3 s transition period. Three pods write into
an emptyDir on it: a static pod (the largest user, but never evicted), a
BestEffort pod (1 MiB, above its zero request) and a Burstable pod (2 MiB, within
its 16 MiB ephemeral-storage request). A filler file then takes the free space
under half: the node reports DiskPressure and the controller taints it, the
scheduler and the node's own admission refuse newcomers, the BestEffort pod is
evicted before the Burstable one, the static pod keeps running. Removing the
filler lifts the threshold and the condition clears after the transition period.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import ApiServerProcess
from tests.components import free_port
from tests.e2e.harness import NODE, Cluster, new_cgroup_root

HOUSEKEEPING = 1.0
TRANSITION = 3.0
TMPFS_SIZE = 64 << 20

POD = """
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: orch.local/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, "dd if=/dev/zero of=/data/f bs=1M count=MB 2>/dev/null; exec sleep 3600"]
    volumeMounts: [{name: d, mountPath: /data}]
    RESOURCES
  volumes:
  - {name: d, emptyDir: {}}
"""


def manifest(name: str, mb: int, resources: str = "") -> str:
    return POD.replace("NAME", name).replace("MB", str(mb)).replace("RESOURCES", resources)


@pytest.fixture(scope="module")
def cluster(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("eviction")
    root = work / "root"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(root)], check=True)
    cg = new_cgroup_root("orch-evict")
    (work / "manifests").mkdir()
    (work / "manifests" / "static.yaml").write_text(manifest("static", 4))
    try:
        with ApiServerProcess(
            str(work / "api"),
            free_port(),
            extra_args=["--enable-bootstrap-token-auth", "--node-monitor-period=1s"],
        ) as api:
            c = Cluster(work, api, containerd, cg)
            argv = c.agent_argv(c.token()) + [
                "--eviction-hard=nodefs.available<50%",
                f"--housekeeping-interval={HOUSEKEEPING:g}s",
                f"--eviction-pressure-transition-period={TRANSITION:g}s",
            ]
            c.start_agent(argv)
            c.wait(lambda: c.node_ready() == "True", 30, "node Ready")
            yield c
            for name in ("be", "burst", "late", "bound"):
                c.kubectl("delete", "pod", name, "--grace-period=0", "--wait=false", check=False)
            (work / "manifests" / "static.yaml").unlink()
            # The agent removes a terminated pod's directory last: none left, nothing left running.
            c.wait(lambda: not _pod_dirs(c), 30, "the pods to be removed")
            c.stop_agent()
            c.cleanup()
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _pod_dirs(c: Cluster) -> list[str]:
    try:
        return os.listdir(c.work / "root" / "pods")
    except OSError:
        return []


def apply(c: Cluster, text: str) -> None:
    path = c.work / f"m-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(text)
    c.kubectl("apply", "-f", str(path))


def phase(c: Cluster, name: str) -> str:
    pod = c.get("pod", name)
    return (pod or {}).get("status", {}).get("phase", "")


def condition(c: Cluster, ctype: str) -> str:
    node = c.get("node", NODE) or {}
    return next((x["status"] for x in node.get("status", {}).get("conditions", []) if x["type"] == ctype), "")


def taints(c: Cluster) -> set[str]:
    node = c.get("node", NODE) or {}
    return {t["key"] for t in node.get("spec", {}).get("taints") or []}


def test_disk_pressure_evicts_besteffort_before_burstable_never_static_and_clears(cluster):
    c = cluster
    apply(c, manifest("be", 1))
    apply(
        c,
        manifest("burst", 2, "resources: {requests: {cpu: 10m, ephemeral-storage: 16Mi}}"),
    )
    for name in ("be", "burst", f"static-{NODE}"):
        c.wait(lambda n=name: phase(c, n) == "Running", 60, f"{name} Running")
    c.wait(lambda: os.path.exists(c.work / "root") and _used(c) > 6 << 20, 20, "the pods' data written")
    assert condition(c, "DiskPressure") == "False"

    # Fill the file system until less than half of it is free.
    st = os.statvfs(c.work / "root")
    available, capacity = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    filler = c.work / "root" / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * (available - int(capacity * 0.4)))
    filled = time.monotonic()
    c.wait(lambda: condition(c, "DiskPressure") == "True", 15, "DiskPressure")
    reported = time.monotonic() - filled
    print(f"DiskPressure reported {reported:.2f}s after the disk filled (housekeeping {HOUSEKEEPING:g}s)")
    c.wait(lambda: "node.orch.io/disk-pressure" in taints(c), 15, "the disk-pressure taint")

    c.wait(lambda: phase(c, "be") == "Failed" and phase(c, "burst") == "Failed", 30, "both pods evicted")
    be = c.get("pod", "be")
    assert be["status"]["reason"] == "Evicted"
    assert be["status"]["message"].startswith("The node was low on resource: ephemeral-storage. Threshold quantity: ")
    assert any(x["type"] == "DisruptionTarget" and x["status"] == "True" for x in be["status"]["conditions"])
    log = c.log.read_text(errors="replace")
    order = [p.strip('"') for p in re.findall(r"Evicting pod.*?pod=(\S+)", log)]
    assert order[:2] == ["be_default", "burst_default"], order
    assert "cannot evict a critical pod" in log
    assert phase(c, f"static-{NODE}") == "Running"

    # Newcomers: the scheduler leaves one pending (the taint), the node refuses one bound to it.
    apply(c, manifest("late", 0))
    c.wait(
        lambda: "disk-pressure" in c.kubectl("get", "events", "--field-selector=involvedObject.name=late").stdout,
        20,
        "the scheduler's refusal",
    )
    assert phase(c, "late") == "Pending"
    apply(c, manifest("bound", 0).replace("spec:\n", f"spec:\n  nodeName: {NODE}\n", 1))
    c.wait(lambda: phase(c, "bound") == "Failed", 20, "the node's refusal")
    bound = c.get("pod", "bound")
    assert (bound["status"]["reason"], bound["status"]["message"]) == (
        "Evicted",
        names.POD_REJECTED_MESSAGE_PREFIX + "The node had condition: [DiskPressure]. ",
    )

    filler.unlink()
    lifted = time.monotonic()
    c.wait(lambda: condition(c, "DiskPressure") == "False", 20, "DiskPressure to clear")
    cleared = time.monotonic() - lifted
    print(f"DiskPressure cleared {cleared:.2f}s after the threshold was lifted (transition {TRANSITION:g}s)")
    # The period runs from the last round that saw the pressure, which may come up to one
    # housekeeping interval before the filler went.
    assert cleared >= TRANSITION - HOUSEKEEPING - 0.5
    c.wait(lambda: "node.orch.io/disk-pressure" not in taints(c), 15, "the taint removed")
    assert phase(c, f"static-{NODE}") == "Running"


def _used(c: Cluster) -> int:
    st = os.statvfs(c.work / "root")
    return (st.f_blocks - st.f_bfree) * st.f_frsize
