"""Static pods on the real containerd: the standalone agent end to end.

One ``orch-agent`` process (module-scoped) runs against the session's private
containerd with a manifest directory, a private cgroup root and its HTTPS
read-only view; each test drops its own manifests and removes them. The
restart tests (``kill -9`` of the agent, a containerd restart) come last.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests.components import REPO_ROOT, free_port

BUSYBOX = "orch.local/busybox:1"
CGROUP_FS = Path("/sys/fs/cgroup")
V2 = (CGROUP_FS / "cgroup.controllers").exists()
NODE = "e2e-node"


def _hierarchies() -> list[Path]:
    if V2:
        return [CGROUP_FS]
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()]


def _rm_cgroup_tree(rel: str) -> None:
    for root in _hierarchies():
        base = root / rel.strip("/")
        if not base.is_dir():
            continue
        for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [base]:
            try:
                d.rmdir()
            except OSError:
                pass


class Agent:
    def __init__(self, work: Path, containerd, cgroup_root: str, *extra: str) -> None:
        self.work = work
        self.containerd = containerd
        self.cgroup_root = cgroup_root
        self.manifests = work / "manifests"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None
        self.log = work / "agent.log"
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        self.ssl = ctx

    def start(self) -> "Agent":
        argv = [
            sys.executable,
            "-m",
            "agent.cli",
            f"--root-dir={self.work / 'root'}",
            f"--pod-manifest-path={self.manifests}",
            f"--hostname-override={NODE}",
            f"--container-runtime-endpoint=unix://{self.containerd.socket}",
            f"--port={self.port}",
            "--address=127.0.0.1",
            "--healthz-port=0",
            f"--cert-dir={self.work / 'pki'}",
            f"--cgroup-root={self.cgroup_root}",
            "--file-check-frequency=2s",
            "--fail-swap-on=false",
            "--deprecation-warnings=false",
            "--sync-frequency=10s",
            "-v=2",
            *self.extra,
        ]
        self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        self.wait(lambda: self.try_pods() is not None, 20, "agent server up")
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}{path}", context=self.ssl, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def try_pods(self) -> dict | None:
        try:
            status, body = self.get("/pods", timeout=2)
        except OSError:
            return None
        return json.loads(body) if status == 200 else None

    def pod(self, name: str) -> dict | None:
        data = self.try_pods() or {"items": []}
        for p in data["items"]:
            if p["metadata"]["name"] == f"{name}-{NODE}":
                return p
        return None

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"agent exited with {self.proc.returncode}\n{self.output()[-4000:]}")
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}\n{self.output()[-4000:]}")

    def wait_pod(self, name: str, predicate, timeout: float, what: str) -> dict:
        def check():
            p = self.pod(name)
            return p if p is not None and predicate(p) else None

        return self.wait(check, timeout, f"{name}: {what}")

    def write(self, name: str, pod: dict) -> Path:
        path = self.manifests / f"{name}.yaml"
        tmp = self.manifests / f".{name}.tmp"
        tmp.write_text(yaml.safe_dump(pod))
        os.replace(tmp, path)
        return path


def pod_manifest(name: str, containers: list[dict], **spec) -> dict:
    # busybox sleep as PID 1 ignores SIGTERM: a short grace keeps removals quick.
    spec.setdefault("terminationGracePeriodSeconds", 2)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def container(name: str, *command: str, **extra) -> dict:
    return {"name": name, "image": BUSYBOX, "imagePullPolicy": "Never", "command": list(command), **extra}


def cstatus(pod: dict, name: str) -> dict:
    for s in pod["status"].get("containerStatuses", []):
        if s["name"] == name:
            return s
    return {}


def condition(pod: dict, type_: str) -> str:
    for c in pod["status"].get("conditions", []):
        if c["type"] == type_:
            return c["status"]
    return ""


def crictl_ps(containerd) -> str:
    return containerd.ctr("-n", "k8s.io", "containers", "ls", check=False).stdout


@pytest.fixture(scope="module")
def cgroup_root():
    rel = f"/orch-e2e-{uuid.uuid4().hex[:8]}"
    for root in _hierarchies():
        (root / rel.strip("/")).mkdir(exist_ok=True)
    yield rel
    _rm_cgroup_tree(rel)


@pytest.fixture(scope="module")
def agent(containerd, cri_images, cgroup_root, tmp_path_factory):
    a = Agent(tmp_path_factory.mktemp("agent"), containerd, cgroup_root).start()
    yield a
    for f in a.manifests.iterdir():
        f.unlink()
    try:
        a.wait(lambda: not (a.try_pods() or {"items": [1]})["items"], 60, "all pods gone")
    finally:
        a.stop()


def _pod_cgroup_dir(controller: str, cgroup_root: str, qos: str, uid: str) -> Path:
    parts = [cgroup_root.strip("/"), "orchpods"]
    if qos != "Guaranteed":
        parts.append(qos.lower())
    parts.append(f"pod{uid}")
    base = CGROUP_FS if V2 else CGROUP_FS / controller
    return base.joinpath(*parts)


# --- the acceptance checks -----------------------------------------------------------


def test_httpd_pod_runs_ready_with_limits(agent, cgroup_root):
    manifest = pod_manifest(
        "web",
        [
            container(
                "httpd",
                "httpd",
                "-f",
                "-p",
                "8080",
                "-h",
                "/etc",
                ports=[{"name": "http", "containerPort": 8080}],
                resources={"limits": {"memory": "64Mi", "cpu": "250m"}},
                readinessProbe={"httpGet": {"path": "/hostname", "port": "http"}, "periodSeconds": 1},
                livenessProbe={"httpGet": {"path": "/hostname", "port": 8080}, "periodSeconds": 2},
            )
        ],
    )
    t0 = time.monotonic()
    agent.write("web", manifest)
    pod = agent.wait_pod("web", lambda p: cstatus(p, "httpd").get("state", {}).get("running"), 5, "running within 5 s")
    running_after = time.monotonic() - t0
    pod = agent.wait_pod("web", lambda p: condition(p, "Ready") == "True", 10, "Ready")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["qosClass"] == "Guaranteed"
    ip = pod["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8080/hostname", timeout=5) as r:
        assert r.status == 200
        assert r.read().strip() == b"web-" + NODE.encode()
    uid = pod["metadata"]["uid"]
    cid = cstatus(pod, "httpd")["containerID"].split("://", 1)[1]
    pod_mem = _pod_cgroup_dir("memory", cgroup_root, "Guaranteed", uid)
    pod_cpu = _pod_cgroup_dir("cpu", cgroup_root, "Guaranteed", uid)
    if V2:
        assert (pod_mem / "memory.max").read_text().strip() == str(64 * 1024 * 1024)
        assert (pod_mem / cid / "memory.max").read_text().strip() == str(64 * 1024 * 1024)
        assert (pod_cpu / "cpu.max").read_text().split()[0] == "25000"
        assert (pod_cpu / cid / "cpu.max").read_text().split()[0] == "25000"
    else:
        assert int((pod_mem / "memory.limit_in_bytes").read_text()) == 64 * 1024 * 1024
        assert int((pod_mem / cid / "memory.limit_in_bytes").read_text()) == 64 * 1024 * 1024
        assert int((pod_cpu / "cpu.cfs_quota_us").read_text()) == 25000
        assert int((pod_cpu / cid / "cpu.cfs_quota_us").read_text()) == 25000
        assert int((pod_cpu / "cpu.cfs_period_us").read_text()) == 100000
    # Logs through the agent's view.
    status, body = agent.get(f"/containerLogs/default/web-{NODE}/httpd")
    assert status == 200, body
    assert running_after < 5


def test_crash_loop_backs_off_and_never_leaves_terminated(agent):
    agent.write("crash", pod_manifest("crash", [container("c", "sh", "-c", "echo boom; exit 3")]))
    agent.write(
        "once", pod_manifest("once", [container("c", "sh", "-c", "echo bye >&2; exit 3")], restartPolicy="Never")
    )
    pod = agent.wait_pod("once", lambda p: p["status"].get("phase") == "Failed", 15, "Failed")
    term = cstatus(pod, "c")["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert cstatus(pod, "c")["restartCount"] == 0

    pod = agent.wait_pod(
        "crash",
        lambda p: (
            cstatus(p, "c").get("restartCount", 0) >= 1
            and cstatus(p, "c")["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
        ),
        20,
        "first back-off",
    )
    waiting = cstatus(pod, "c")["state"]["waiting"]
    assert "back-off 10s" in waiting["message"]
    assert cstatus(pod, "c")["lastState"]["terminated"]["exitCode"] == 3
    first = time.monotonic()
    pod = agent.wait_pod(
        "crash",
        lambda p: "back-off 20s" in cstatus(p, "c")["state"].get("waiting", {}).get("message", ""),
        30,
        "doubled back-off",
    )
    assert time.monotonic() - first >= 8, "the restart did not wait for the back-off"
    assert cstatus(pod, "c")["restartCount"] >= 2
    status, body = agent.get(f"/containerLogs/default/crash-{NODE}/c?previous=true")
    assert status == 200 and b"boom" in body
    (agent.manifests / "crash.yaml").unlink()
    (agent.manifests / "once.yaml").unlink()
    agent.wait(lambda: agent.pod("crash") is None and agent.pod("once") is None, 30, "crash pods gone")


def test_liveness_restarts_and_readiness_only_unreadies(agent, tmp_path):
    live = container(
        "live",
        "sh",
        "-c",
        "touch /tmp/ok; sleep 2; rm /tmp/ok; sleep 3600",
        livenessProbe={"exec": {"command": ["cat", "/tmp/ok"]}, "periodSeconds": 1, "failureThreshold": 1},
        terminationGracePeriodSeconds=None,
    )
    live.pop("terminationGracePeriodSeconds")
    ready = container(
        "ready",
        "sh",
        "-c",
        "touch /tmp/ok; sleep 3; rm /tmp/ok; sleep 3600",
        readinessProbe={"exec": {"command": ["cat", "/tmp/ok"]}, "periodSeconds": 1, "failureThreshold": 1},
    )
    agent.write("probes", pod_manifest("probes", [live, ready], terminationGracePeriodSeconds=1))
    agent.wait_pod("probes", lambda p: cstatus(p, "ready").get("ready") is True, 10, "ready")
    pod = agent.wait_pod("probes", lambda p: cstatus(p, "live").get("restartCount", 0) >= 1, 20, "liveness restart")
    pod = agent.wait_pod("probes", lambda p: cstatus(p, "ready").get("ready") is False, 15, "unready")
    assert cstatus(pod, "ready")["restartCount"] == 0
    assert "running" in cstatus(pod, "ready")["state"]
    assert condition(pod, "Ready") == "False"
    (agent.manifests / "probes.yaml").unlink()
    agent.wait(lambda: agent.pod("probes") is None, 30, "probes pod gone")


def test_removing_manifest_runs_prestop_and_cleans_up(agent, cgroup_root, containerd, tmp_path):
    marker_dir = tmp_path / "hooks"
    marker_dir.mkdir()
    manifest = pod_manifest(
        "stopper",
        [
            container(
                "c",
                "sh",
                "-c",
                "trap 'exit 0' TERM; while true; do sleep 1; done",
                resources={"requests": {"cpu": "100m"}},
                volumeMounts=[{"name": "hooks", "mountPath": "/hooks"}],
                lifecycle={"preStop": {"exec": {"command": ["sh", "-c", "echo stopped > /hooks/prestop"]}}},
            )
        ],
        volumes=[{"name": "hooks", "hostPath": {"path": str(marker_dir), "type": "Directory"}}],
        terminationGracePeriodSeconds=10,
    )
    agent.write("stopper", manifest)
    pod = agent.wait_pod("stopper", lambda p: p["status"].get("phase") == "Running", 10, "running")
    uid = pod["metadata"]["uid"]
    pod_dir = _pod_cgroup_dir("cpu", cgroup_root, "Burstable", uid)
    assert pod_dir.is_dir()
    t0 = time.monotonic()
    (agent.manifests / "stopper.yaml").unlink()
    agent.wait(lambda: agent.pod("stopper") is None, 15, "pod gone")
    assert time.monotonic() - t0 < 10
    assert (marker_dir / "prestop").read_text().strip() == "stopped"
    sandboxes = containerd.ctr("-n", "k8s.io", "containers", "ls", check=False).stdout
    assert uid not in sandboxes
    agent.wait(lambda: not pod_dir.exists(), 5, "pod cgroup removed")


def test_malformed_manifest_is_reported_and_others_run(agent):
    (agent.manifests / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [}\n")
    (agent.manifests / "invalid.yaml").write_text(yaml.safe_dump(pod_manifest("Invalid_Name", [])))
    agent.write("good", pod_manifest("good", [container("c", "sleep", "3600")]))
    agent.wait_pod("good", lambda p: p["status"].get("phase") == "Running", 10, "good running")

    def problems():
        data = agent.try_pods() or {}
        locs = {p["location"]: p["message"] for p in data.get("problems", [])}
        return locs if len(locs) >= 2 else None

    locs = agent.wait(problems, 10, "two problems reported")
    assert any(k.endswith("broken.yaml") for k in locs)
    assert any(k.endswith("invalid.yaml") for k in locs)
    assert "broken.yaml" in agent.output() and "invalid.yaml" in agent.output()
    for name in ("broken", "invalid", "good"):
        (agent.manifests / f"{name}.yaml").unlink()
    agent.wait(lambda: agent.pod("good") is None, 20, "good pod gone")


class _Manifests(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # the handler method name http.server calls
        self.send_response(200)
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args):
        pass


def test_manifest_url_and_unreachable_url_keeps_pods(agent, containerd):
    # One agent per runtime (a second one would see the first one's pods as orphans):
    # restart the module's agent with a manifest URL.
    handler = type(
        "H",
        (_Manifests,),
        {"body": yaml.safe_dump(pod_manifest("fromurl", [container("c", "sleep", "3600")])).encode()},
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/pods.yaml"
    agent.stop()
    agent.extra = [f"--manifest-url={url}", "--http-check-frequency=1s"]
    agent.start()
    try:
        pod = agent.wait_pod("fromurl", lambda p: p["status"].get("phase") == "Running", 15, "url pod running")
        cid = cstatus(pod, "c")["containerID"]
        server.shutdown()
        server.server_close()
        agent.wait(
            lambda: "Failed to read pods from URL, keeping the last good set" in agent.output(), 10, "a failed fetch"
        )
        time.sleep(1.5)
        pod = agent.pod("fromurl")
        assert pod is not None and pod["status"]["phase"] == "Running"
        assert cstatus(pod, "c")["containerID"] == cid
    finally:
        agent.stop()
        agent.extra = []
        agent.start()
    # Without the URL source its pod is nobody's: housekeeping removes it.
    agent.wait(lambda: cid.split("://")[1][:12] not in crictl_ps(containerd), 30, "orphan removed")
    assert agent.pod("fromurl") is None


def test_kill9_adopts_and_containerd_restart_recovers(agent, containerd):
    agent.write("survivor", pod_manifest("survivor", [container("c", "sleep", "3600")]))
    pod = agent.wait_pod("survivor", lambda p: p["status"].get("phase") == "Running", 10, "running")
    cid = cstatus(pod, "c")["containerID"]
    agent.kill9()
    agent.start()
    pod = agent.wait_pod("survivor", lambda p: cstatus(p, "c").get("ready") is True, 15, "adopted")
    assert cstatus(pod, "c")["containerID"] == cid
    assert cstatus(pod, "c")["restartCount"] == 0
    time.sleep(2)
    assert cstatus(agent.pod("survivor"), "c")["containerID"] == cid

    containerd.stop_daemon()
    time.sleep(1)
    containerd.restart()
    agent.write("after", pod_manifest("after", [container("c", "sleep", "3600")]))
    agent.wait_pod("after", lambda p: p["status"].get("phase") == "Running", 30, "runs after restart")
    assert cstatus(agent.pod("survivor"), "c")["containerID"] == cid
    for name in ("survivor", "after"):
        (agent.manifests / f"{name}.yaml").unlink()
    agent.wait(lambda: agent.pod("survivor") is None and agent.pod("after") is None, 30, "gone")


_ = (shutil,)
