"""The e2e harness of a one-node cluster: an orch-apiserver, an orch-agent joined to it
with a bootstrap token on the session's containerd, under a cgroup root of its own,
and kubectl against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.components import REPO_ROOT, free_port

NODE = "n1"
CGROUP_FS = Path("/sys/fs/cgroup")


def _hierarchies() -> list[Path]:
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()]


def new_cgroup_root(prefix: str = "orch-join") -> str:
    """A fresh cgroup root (in every hierarchy) for one cluster's pods."""
    cg = f"/{prefix}-{uuid.uuid4().hex[:8]}"
    for root in _hierarchies():
        (root / cg.strip("/")).mkdir(exist_ok=True)
    return cg


class Cluster:
    def __init__(self, work: Path, api, containerd, cgroup_root: str) -> None:
        self.work, self.api, self.containerd, self.cg = work, api, containerd, cgroup_root
        self.kubeconfig = str(work / "api" / "admin.orchconfig")
        self.agent: subprocess.Popen | None = None
        self.join_argv: list[str] = []
        self.log = work / "agent.log"

    def token(self, *extra: str) -> list[str]:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "apiserver_min.cli",
                "token",
                "create",
                "--data-dir",
                str(self.work / "api"),
                "--print-join-command",
                *extra,
            ],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split()

    def agent_argv(self, join: list[str]) -> list[str]:
        # A lease renewed every 2 s: the API server here gives up on a node after 6 s.
        config = self.work / "agent-config.yaml"
        config.write_text(
            "kind: AgentConfiguration\napiVersion: agent.config.orch.io/v1beta1\nnodeLeaseDurationSeconds: 8\n"
        )
        return [
            sys.executable,
            "-m",
            "agent.cli",
            *join[1:],
            f"--config={config}",
            f"--root-dir={self.work}/root",
            f"--pod-manifest-path={self.work}/manifests",
            f"--hostname-override={NODE}",
            f"--container-runtime-endpoint=unix://{self.containerd.socket}",
            f"--port={free_port()}",
            "--address=127.0.0.1",
            "--node-ip=127.0.0.1",
            "--healthz-port=0",
            "--proxy-mode=none",  # the service proxy has its own test (test_service_proxy.py)
            f"--cert-dir={self.work}/pki",
            f"--cgroup-root={self.cg}",
            "--fail-swap-on=false",
            "--deprecation-warnings=false",
            "-v=2",
        ]

    def start_agent(self, argv: list[str]) -> subprocess.Popen:
        self.agent = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        return self.agent

    def stop_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(20)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(5)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "HOME": str(self.work)},
        )
        if check:
            assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def get(self, *args: str) -> dict | None:
        r = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.2)
        log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}\n{log}")

    def node_ready(self) -> str:
        node = self.get("node", NODE)
        if not node:
            return ""
        for c in node.get("status", {}).get("conditions", []):
            if c["type"] == "Ready":
                return c["status"]
        return ""

    def cleanup(self) -> None:
        for root in _hierarchies():
            base = root / self.cg.strip("/")
            if base.is_dir():
                for d in sorted(
                    (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
                ) + [base]:
                    try:
                        d.rmdir()
                    except OSError:
                        pass
