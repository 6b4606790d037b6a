"""packaging/quickstart.sh brings up the one-node cluster the README promises: the API
server on SQLite, orch's own containerd, an agent joined with a bootstrap token, the
static pod (as a mirror pod) and the API pod `demo` running; `status` reports it and
`stop` takes everything down, pods included. Every path is private to the test (a
temporary venv, data dirs, run and log dirs, free ports, its own node name), so a
quickstart cluster already running on the machine is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.components import REPO_ROOT, Containerd, free_port, missing_binaries

pytestmark = pytest.mark.slow

SCRIPT = REPO_ROOT / "packaging" / "quickstart.sh"
NODE = "qs-node"


@pytest.fixture(scope="module")
def qs(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the quickstart needs root")
    missing = missing_binaries([*Containerd.binaries, "curl", "setsid"])
    if missing or not Path("/bin/busybox").exists():
        pytest.skip(f"the quickstart needs {', '.join(missing) or '/bin/busybox'} (see tests/run.sh)")
    base = tmp_path_factory.mktemp("qs")
    # The venv is reused by the module's tests; pip fills it from its cache or PyPI.
    env = {
        **os.environ,
        "ORCH_DATA_DIR": str(base / "api"),
        "ORCH_PORT": str(free_port()),
        "ORCH_AGENT_ROOT": str(base / "agent"),
        "ORCH_AGENT_PORT": str(free_port()),
        "ORCH_AGENT_FLAGS": "--healthz-port=0 --proxy-mode=none",
        "ORCH_MANIFEST_DIR": str(base / "manifests"),
        "ORCH_CONTAINERD_DIR": str(base / "ctrd"),
        "ORCH_CNI_CONF_DIR": str(base / "cni"),
        "ORCH_NODE_NAME": NODE,
        "ORCH_VENV": str(base / "venv"),
        "ORCH_RUN_DIR": str(base / "run"),
        "ORCH_LOG_DIR": str(base / "log"),
        "ORCH_WAIT": "120",
        "HOME": str(base),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
    }
    q = Quickstart(base, env)
    yield q
    q.run("stop", check=False, timeout=120)


class Quickstart:
    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.base, self.env = base, env
        self.kubeconfig = str(base / "api" / "admin.orchconfig")

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["bash", str(SCRIPT), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check:
            assert r.returncode == 0, (args, r.stdout[-3000:], r.stderr[-3000:], self.logs())
        return r

    def logs(self) -> str:
        out = []
        for f in sorted((self.base / "log").glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-2000:]}")
        return "\n".join(out)

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        if shutil.which("kubectl") is None:
            pytest.skip("kubectl is not installed")
        r = subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HOME": str(self.base)},
        )
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def pid(self, name: str) -> int | None:
        f = self.base / "run" / f"{name}.pid"
        try:
            pid = int(f.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if psutil.pid_exists(pid) else None


def test_start_brings_up_the_one_node_cluster(qs):
    r = qs.run()
    out = r.stdout
    assert "orch is running: a one-node cluster." in out, out
    assert f"node {NODE} is Ready" in out
    assert "both pods are Running" in out
    assert f"kubectl --kubeconfig {qs.kubeconfig} get pods" in out
    assert "packaging/quickstart.sh stop" in out
    for name in ("orch-apiserver", "containerd", "orch-agent"):
        assert qs.pid(name), name

    nodes = json.loads(qs.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == [NODE]
    ready = {c["type"]: c["status"] for c in nodes[0]["status"]["conditions"]}
    assert ready["Ready"] == "True"
    pods = {p["metadata"]["name"]: p for p in json.loads(qs.kubectl("get", "pods", "-o", "json").stdout)["items"]}
    assert set(pods) == {"demo", f"static-web-{NODE}"}
    for p in pods.values():
        assert p["status"]["phase"] == "Running" and p["spec"]["nodeName"] == NODE
    mirror = pods[f"static-web-{NODE}"]
    assert "orch.io/config.mirror" in mirror["metadata"]["annotations"]

    # The static pod's web server answers on its pod IP (the busybox image's /var/www).
    ip = mirror["status"]["podIP"]
    deadline = time.monotonic() + 20
    while True:
        c = subprocess.run(["curl", "-sS", "--max-time", "2", f"http://{ip}:8080/"], capture_output=True, text=True)
        if c.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert c.stdout == "orch busybox\n", c.stderr


def test_status_and_rerun_leave_it_alone(qs):
    pids = {n: qs.pid(n) for n in ("orch-apiserver", "containerd", "orch-agent")}
    assert all(pids.values()), pids
    s = qs.run("status")
    assert f"node {NODE} Ready: True" in s.stdout and "pod demo: Running" in s.stdout, s.stdout
    again = qs.run()
    for name in pids:
        assert f"{name} is already running" in again.stdout or "containerd is already running" in again.stdout
        assert qs.pid(name) == pids[name], name
    assert "pod default/demo already exists" in again.stdout


def test_stop_takes_everything_down(qs):
    shims_before = _shims(qs)
    assert shims_before, "the pods' containerd shims should be running"
    r = qs.run("stop", timeout=180)
    assert "removed pod default/demo" in r.stdout, r.stdout
    for name in ("orch-apiserver", "containerd", "orch-agent"):
        assert qs.pid(name) is None, name
    deadline = time.monotonic() + 15
    while _shims(qs) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not _shims(qs)
    mounts = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(qs.base))
    ]
    assert mounts == []
    status = qs.run("status", check=False)
    assert status.returncode == 3 and "orch-agent: not running" in status.stdout


def _shims(qs) -> list[int]:
    """containerd shims of the test's containerd (their command line names its state dir)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "containerd-shim" in cmd and str(qs.base) in cmd:
            out.append(p.pid)
    return out
