"""The orch-agent process under a real NOTIFY_SOCKET: READY, watchdog, health, signals, locks, swap.

Each test starts the real agent (``python -m agent.cli``) as a child process with a
private root dir, a datagram socket standing in for systemd, and the test hooks
(a fake /proc/swaps, a stall file, a short sync-loop threshold) in its environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from apiserver_min.api import names
from tests.components import REPO_ROOT, free_port
from tests.helpers import wait_for as wait_until

SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


class Agent:
    """One orch-agent child process and the notify socket it reports to."""

    def __init__(
        self,
        workdir: Path,
        *args: str,
        notify: bool = True,
        watchdog_usec: int | None = None,
        env: dict[str, str] | None = None,
        healthz: bool = True,
        name: str = "agent",
    ) -> None:
        self.workdir = workdir
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.port = free_port() if healthz else 0
        swaps = workdir / "swaps-empty"
        if not swaps.exists():
            swaps.write_text(SWAPS_HEADER)
        self.argv = [
            sys.executable,
            "-m",
            "agent.cli",
            f"--root-dir={workdir / 'root'}",
            f"--healthz-port={self.port}",
            "--proxy-mode=none",
            "--deprecation-warnings=false",
            # The process, not the pods: no HTTPS view, no runtime, no cgroup tree.
            "--enable-server=false",
            f"--container-runtime-endpoint=unix://{workdir / 'no-runtime.sock'}",
            "--cgroups-per-qos=false",
            "--enforce-node-allocatable=",
            *args,
        ]
        self.env = {**os.environ, names.ENV_AGENT_TEST_PROC_SWAPS: str(swaps), **(env or {})}
        for var in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            self.env.pop(var, None)
        self.messages: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._sock = None
        if notify:
            # A short path: unix socket paths are limited to 108 bytes.
            self._sockdir = tempfile.mkdtemp(prefix="orch-n-", dir="/tmp")
            path = os.path.join(self._sockdir, "notify")
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.bind(path)
            self._sock.settimeout(0.2)
            self.env["NOTIFY_SOCKET"] = path
            if watchdog_usec:
                self.env["WATCHDOG_USEC"] = str(watchdog_usec)
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._running = True
            self._reader.start()
        self.proc: subprocess.Popen | None = None

    def _read(self) -> None:
        while self._running:
            try:
                data = self._sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            with self._cond:
                for field in data.decode().split("\n"):
                    self.messages.append((time.monotonic(), field))
                self._cond.notify_all()

    def start(self) -> "Agent":
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv, cwd=REPO_ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT
        )
        return self

    def wait_message(self, field: str, timeout: float = 15, after: int = 0, prefix: bool = False) -> int:
        """Index of the first message (from ``after`` on) equal to ``field``, or starting with it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, (_, m) in enumerate(self.messages[after:], start=after):
                    if m == field or (prefix and m.startswith(field)):
                        return i
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (
                    self.proc is not None and self.proc.poll() is not None and not self._cond.wait(0.3)
                ):
                    raise AssertionError(f"no {field!r} within {timeout}s; got {self.fields()}\nlog:\n{self.output()}")
                self._cond.wait(min(remaining, 0.2))

    def fields(self) -> list[str]:
        with self._cond:
            return [m for _, m in self.messages]

    def wait_ready(self, timeout: float = 15) -> int:
        return self.wait_message("READY=1", timeout)

    def healthz(self, path: str = "/healthz") -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, ConnectionError):
            return 0, ""  # not listening (yet)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 20) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        try:
            self.log.flush()
        except (AttributeError, ValueError):
            pass
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self._sock is not None:
            self._running = False
            self._reader.join(timeout=2)
            self._sock.close()
            shutil.rmtree(self._sockdir, ignore_errors=True)
        if getattr(self, "log", None):
            self.log.close()


@pytest.fixture
def agents(tmp_path):
    started: list[Agent] = []

    def make(*args: str, **kw) -> Agent:
        a = Agent(tmp_path, *args, name=kw.pop("name", f"agent{len(started)}"), **kw)
        started.append(a)
        return a

    yield make
    for a in started:
        a.close()


# --- systemd notification ---------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_ready_then_watchdog_then_stopping(agents, sig):
    agent = agents(watchdog_usec=200_000).start()
    ready = agent.wait_ready()
    fields = agent.fields()
    assert fields[0] == "STATUS=Starting (standalone mode)"
    assert "WATCHDOG=1" not in fields[:ready], "pinged before READY=1"
    assert fields[ready + 1] == "STATUS=Running (standalone mode)"
    # Pings every WATCHDOG_USEC / 2 = 100 ms.
    first = agent.wait_message("WATCHDOG=1", after=ready)
    agent.wait_message("WATCHDOG=1", after=first + 5, timeout=5)
    with agent._cond:
        pings = [t for t, m in agent.messages if m == "WATCHDOG=1"]
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    assert len(pings) >= 5
    assert 0.05 < sorted(gaps)[len(gaps) // 2] < 0.3, gaps
    agent.signal(sig)
    stopping = agent.wait_message("STOPPING=1")
    assert agent.wait() == 0, agent.output()
    assert agent.fields()[stopping + 1] == "STATUS=Shutting down"
    out = agent.output()
    assert f'"Received signal, shutting down" signal="{sig.name}"' in out
    assert (
        'stop_order=["watchdog","eviction","container-gc","image-gc","sync-loop","pod-sources","pod-resources","device-manager","health-server","log-flush"]'
        in out
    )


def test_bad_connection_config_fails_the_start(agents, tmp_path):
    conn = tmp_path / "agent.orchconfig"
    conn.write_text("apiVersion: v1\nkind: Config\n")
    agent = agents(f"--orchconfig={conn}").start()
    assert agent.wait() == 1
    assert "invalid connection config (--orchconfig)" in agent.output()
    assert "Traceback" not in agent.output()


def test_start_line_names_version_and_mode(agents, tmp_path):
    from agent.client.config import write_orchconfig
    from apiserver_min import pki

    ca, key = pki.make_ca()
    client_cert = tmp_path / "client.pem"
    leaf_key = pki.new_key()
    leaf = pki.sign_leaf(ca, key, leaf_key.public_key(), "system:node:vm", ["system:nodes"])
    client_cert.write_bytes(pki.cert_pem(leaf) + pki.key_pem(leaf_key))
    conn = tmp_path / "agent.orchconfig"
    # A server nobody listens on: the agent is ready (static pods) and keeps trying to register.
    write_orchconfig(
        str(conn),
        server="https://127.0.0.1:9",
        ca_data=pki.cert_pem(ca),
        cert_file=str(client_cert),
        key_file=str(client_cert),
    )
    agent = agents(f"--orchconfig={conn}").start()
    agent.wait_message("READY=1")
    assert agent.fields()[0] == "STATUS=Starting (api-server mode)"
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    lines = [ln for ln in agent.output().splitlines() if '"Starting orch-agent"' in ln]
    assert len(lines) == 1 and 'version="v0.1.0"' in lines[0] and 'mode="api-server"' in lines[0], lines


def test_json_logging(agents):
    agent = agents("--logging-format=json", "-v=2").start()
    agent.wait_ready()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    import json

    records = [json.loads(ln) for ln in agent.output().splitlines() if ln.startswith("{")]
    start = [r for r in records if r["msg"] == "Starting orch-agent"]
    assert start and start[0]["mode"] == "standalone" and start[0]["v"] == 0
    assert any(r["msg"] == "Started task" and r["v"] == 2 for r in records)


def test_no_notify_socket_is_fine(agents):
    agent = agents(notify=False).start()
    wait_until(lambda: agent.healthz() == (200, "ok"))
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0, agent.output()


# --- health -------------------------------------------------------------------------


def test_healthz_fails_while_the_sync_loop_stalls(agents, tmp_path):
    stall = tmp_path / "stall"
    agent = agents(
        watchdog_usec=200_000,
        env={
            names.ENV_AGENT_TEST_STALL_FILE: str(stall),
            names.ENV_AGENT_TEST_SYNC_LOOP_THRESHOLD: "400ms",
        },
    ).start()
    agent.wait_ready()
    assert agent.healthz() == (200, "ok")
    assert agent.healthz("/healthz?verbose") == (200, "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n")
    assert agent.healthz("/healthz/syncloop") == (200, "ok")
    assert agent.healthz("/nope")[0] == 404

    stall.touch()
    code, body = wait_until(lambda: (r := agent.healthz())[0] == 500 and r)
    assert "[+]ping ok" in body and "[-]syncloop failed: sync loop took longer than expected" in body
    assert body.endswith("healthz check failed\n")
    assert agent.healthz("/healthz/syncloop")[0] == 500
    # The watchdog stops pinging while unhealthy, and says why.
    unhealthy = agent.wait_message("STATUS=Unhealthy: syncloop: sync loop took longer than expected", prefix=True)
    time.sleep(0.6)
    with agent._cond:
        late = [m for m in agent.fields()[unhealthy + 1 :] if m == "WATCHDOG=1"]
    assert late == []

    stall.unlink()
    wait_until(lambda: agent.healthz() == (200, "ok"))
    agent.wait_message("WATCHDOG=1", after=unhealthy + 1)
    # The status and the first ping are two datagrams: either may arrive first.
    agent.wait_message("STATUS=Running (standalone mode)", after=unhealthy + 1)
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0


def test_healthz_port_zero_disables_the_server(agents):
    agent = agents(healthz=False).start()
    agent.wait_ready()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    out = agent.output()
    assert "Serving health checks" not in out
    assert (
        'stop_order=["eviction","container-gc","image-gc","sync-loop","pod-sources","pod-resources","device-manager","log-flush"]'
        in out
    )


def test_healthz_port_in_use_fails_start(agents):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        agent = agents()
        agent.port = blocker.getsockname()[1]
        agent.argv = [a if not a.startswith("--healthz-port=") else f"--healthz-port={agent.port}" for a in agent.argv]
        agent.start()
        assert agent.wait() == 1
        assert "READY=1" not in agent.fields()
        assert "cannot serve health checks on 127.0.0.1" in agent.output()
    finally:
        blocker.close()


# --- start-up checks ------------------------------------------------------------------


def test_swap_on_refuses_to_start(agents, tmp_path):
    swaps = tmp_path / "swaps-on"
    swaps.write_text(SWAPS_HEADER + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n")
    agent = agents(env={names.ENV_AGENT_TEST_PROC_SWAPS: str(swaps)}).start()
    assert agent.wait() == 1
    out = agent.output()
    assert "running with swap on is not supported, please disable swap" in out
    assert "/swapfile file 1048572 0 -2" in out
    assert "READY=1" not in agent.fields()
    assert any(f.startswith("STATUS=Failed to start: running with swap on") for f in agent.fields())

    agent = agents("--fail-swap-on=false", env={names.ENV_AGENT_TEST_PROC_SWAPS: str(swaps)}).start()
    agent.wait_ready()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0


def test_invalid_configuration_exits_2_with_every_error(agents):
    agent = agents("--oom-score-adj=5000", "--max-pods=-1", "--container-runtime=docker").start()
    assert agent.wait() == 2
    out = agent.output()
    assert out.startswith("orch-agent: error: invalid configuration (3 errors):")
    assert "oomScoreAdj (--oom-score-adj): Invalid value: 5000" in out
    assert "maxPods (--max-pods): Invalid value: -1" in out
    assert '--container-runtime: Unsupported value: "docker"' in out
    assert agent.fields() == []


def test_oom_score_adj_and_open_files(agents):
    agent = agents("--oom-score-adj=500", "--max-open-files=4096").start()
    agent.wait_ready()
    pid = agent.proc.pid
    assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "500"
    limits = Path(f"/proc/{pid}/limits").read_text()
    line = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
    assert line.split()[3:5] == ["4096", "4096"], line
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0


def _own_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if controllers in ("memory", ""):
            return path
    return "/"


def test_agent_cgroups_moves_the_agent(agents):
    from agent.process import _cgroup_mounts

    if os.geteuid() != 0:
        pytest.skip("moving a process between cgroups needs root")
    mounts = _cgroup_mounts()
    if not mounts:
        pytest.skip("no cgroup file system mounted")
    name = f"{_own_cgroup().rstrip('/')}/orch-agent-test-{uuid.uuid4().hex[:8]}"
    # Directories that do not exist yet, deepest last, so the test removes only its own.
    created = []
    for point, _, _ in mounts:
        path = point
        for part in [p for p in name.split("/") if p]:
            path = os.path.join(path, part)
            if not os.path.isdir(path):
                created.append(path)
    try:
        agent = agents(f"--agent-cgroups={name}").start()
        agent.wait_ready()
        groups = Path(f"/proc/{agent.proc.pid}/cgroup").read_text().splitlines()
        assert groups and all(line.split(":", 2)[2] == name for line in groups), groups
        assert "Moved the agent into its cgroup" in agent.output()
        agent.signal(signal.SIGTERM)
        assert agent.wait() == 0
    finally:
        for path in sorted(created, key=len, reverse=True):
            try:
                os.rmdir(path)
            except OSError:
                pass


# --- lock file --------------------------------------------------------------------------


def test_lock_file_contention_hands_over(agents, tmp_path):
    lock = tmp_path / "agent.lock"
    first = agents(f"--lock-file={lock}", "--exit-on-lock-contention", name="first").start()
    first.wait_ready()
    second = agents(f"--lock-file={lock}", "--exit-on-lock-contention", name="second").start()
    # The second agent opens the lock file: the first exits cleanly and releases it ...
    assert first.wait() == 0, first.output()
    assert "Another process opened the lock file; exiting" in first.output()
    assert "STOPPING=1" in first.fields()
    # ... and the second takes over.
    second.wait_ready()
    assert (
        "Waiting for the lock file, held by another process" in second.output()
        or '"Acquired the lock file"' in second.output()
    )
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_lock_file_waits_without_exit_on_contention(agents, tmp_path):
    lock = tmp_path / "agent.lock"
    first = agents(f"--lock-file={lock}", name="first").start()
    first.wait_ready()
    second = agents(f"--lock-file={lock}", name="second").start()
    wait_until(lambda: "Waiting for the lock file" in second.output())
    time.sleep(1.0)
    assert "READY=1" not in second.fields()
    assert first.proc.poll() is None
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    second.wait_ready()
    # A signal while waiting for the lock also stops cleanly.
    third = agents(f"--lock-file={lock}", name="third").start()
    wait_until(lambda: "Waiting for the lock file" in third.output())
    third.signal(signal.SIGTERM)
    assert third.wait() == 0
    assert "READY=1" not in third.fields()
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_runonce_exits_after_one_sync(agents):
    agent = agents("--runonce").start()
    assert agent.wait() == 0, agent.output()
    assert "runonce: one sync completed" in agent.output()
