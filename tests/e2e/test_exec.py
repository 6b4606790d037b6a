"""exec and attach through the agent's relay onto containerd's streaming server, and
``kubectl exec`` through orch-apiserver and a joined agent (the one-node cluster of
test_cluster_join.py)."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import threading
import time
import types
import urllib.request

import aiohttp
import pytest

from agent.server import AgentServer, RuntimeStreaming
from apiserver_min.api import names
from tests.apiserver_fixtures import KUBECTL, kubectl_binary
from tests.components import free_port
from tests.e2e.test_cluster_join import cluster  # noqa: F401 - the module's cluster fixture
from tests.e2e.test_cri_containerd import container_config, cri, pods, run_container  # noqa: F401 - fixtures, used by name

V5, V4 = names.STREAM_PROTOCOL_V5, names.STREAM_PROTOCOL_V4


def exec_params(*command: str, **flags: str) -> list[tuple[str, str]]:
    return [("command", c) for c in command] + list(flags.items())


async def ws_session(
    url: str, params=(), *, stdin: bytes | None = None, protocols=(V5,), close_stdin: bool = True, timeout: float = 20
) -> tuple[bytes, bytes, dict | None, str | None]:
    """Run one exec/attach WebSocket session: (stdout, stderr, status from channel 3, protocol)."""
    out, err, status = b"", b"", None
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
        async with s.ws_connect(
            url, params=list(params), protocols=protocols, timeout=aiohttp.ClientWSTimeout(ws_close=5)
        ) as ws:
            if stdin is not None:
                await ws.send_bytes(b"\x00" + stdin)
                if close_stdin:
                    await ws.send_bytes(bytes([255, 0]))

            async def read() -> None:
                nonlocal out, err, status
                async for msg in ws:
                    assert msg.type == aiohttp.WSMsgType.BINARY, msg
                    ch, data = msg.data[0], msg.data[1:]
                    if ch == 1:
                        out += data
                    elif ch == 2:
                        err += data
                    elif ch == 3 and data:
                        status = json.loads(data)

            await asyncio.wait_for(read(), timeout)
            return out, err, status, ws.protocol


# --- the agent's relay onto containerd ---------------------------------------------------------


async def test_agent_relays_exec_to_containerd(cri, pods, tmp_path):  # noqa: F811 - the imported fixtures are requested by name
    sandbox = pods.sandbox_config("ex")
    sandbox_id = await pods.run(sandbox)
    cid = await run_container(cri, sandbox_id, sandbox, container_config("app", ["sleep", "3600"]))
    info = types.SimpleNamespace(id=cid, running=True)
    state = types.SimpleNamespace(
        pod={"metadata": {"name": "ex", "namespace": "default", "uid": "u1"}},
        rp=types.SimpleNamespace(latest=lambda name: info if name == "app" else None),
    )

    def find(ns, name):
        return state if (ns, name) == ("default", "ex") else None

    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name="n",
        pods=lambda: [],
        locate_log=lambda *a: None,
        streaming=RuntimeStreaming(cri, find),
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    await started
    base = f"wss://127.0.0.1:{server.port}/exec/default/ex/app"
    try:
        out, err, status, proto = await ws_session(
            base, exec_params("sh", "-c", "echo out; echo err >&2", output="1", error="1")
        )
        assert (out, err, proto) == (b"out\n", b"err\n", V5)
        assert status == {"metadata": {}, "status": "Success"}

        out, _, status, _ = await ws_session(base, exec_params("sh", "-c", "exit 3", output="1", error="1"))
        assert status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]

        # stdin, half-closed with the v5 close message, reaches cat, which then ends.
        payload = b"line one\n" + b"x" * 100_000 + b"\n"
        out, _, status, _ = await ws_session(base, exec_params("cat", input="1", output="1", error="1"), stdin=payload)
        assert out == payload and status["status"] == "Success"

        # A v4 client (no close message) still gets output and the exit status.
        out, _, status, proto = await ws_session(base, exec_params("echo", "v4", output="1"), protocols=(V4,))
        assert (out, proto, status["status"]) == (b"v4\n", V4, "Success")

        # A TTY merges the streams; the resize channel is accepted.
        out, _, status, _ = await ws_session(base, exec_params("sh", "-c", "echo tty >&2", output="1", tty="1"))
        assert out.replace(b"\r", b"") == b"tty\n" and status["status"] == "Success"

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await s.ws_connect(
                    f"https://127.0.0.1:{server.port}/exec/default/ex/db?command=ls&output=1", protocols=(V5,)
                )
            assert e.value.status == 404
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await s.ws_connect(f"{base}?command=ls&output=1", protocols=("channel.k8s.io",))
            assert e.value.status == 400
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- kubectl exec through orch-apiserver and a joined agent --------------------------------------


@pytest.fixture(scope="module")
def box(cluster):  # noqa: F811 - pytest passes the imported cluster fixture by name
    """The cluster's node joined and a busybox pod running on it."""
    if cluster.agent is None or cluster.agent.poll() is not None:
        cluster.start_agent(cluster.agent_argv(cluster.token()))
    cluster.wait(lambda: cluster.node_ready() == "True", 30, "node Ready")
    cluster.kubectl(
        "run",
        "box",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--overrides",
        json.dumps({"spec": {"terminationGracePeriodSeconds": 1}}),
        "--",
        "sleep",
        "3600",
    )
    cluster.wait(lambda: (p := cluster.get("pod", "box")) and p["status"].get("phase") == "Running", 30, "box Running")
    yield cluster
    cluster.kubectl("delete", "pod", "box", "--grace-period=1", check=False)


def kubectl_exec(box, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--kubeconfig", box.kubeconfig, "exec", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(box.work)},
    )


def test_kubectl_exec_output_exit_code_and_stdin(box):
    t0 = time.monotonic()
    r = kubectl_exec(box, "box", "--", "echo", "hi")
    assert (r.returncode, r.stdout) == (0, "hi\n"), r.stderr
    assert time.monotonic() - t0 < 10

    r = kubectl_exec(box, "box", "--", "sh", "-c", "echo to-err >&2; exit 3")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "to-err" in r.stderr

    r = kubectl_exec(box, "-i", "box", "--", "cat", stdin="data\nmore data\n")
    assert (r.returncode, r.stdout) == (0, "data\nmore data\n"), r.stderr

    r = kubectl_exec(box, "-i", "box", "--", "wc", "-c", stdin="x" * 200_000)
    assert (r.returncode, r.stdout.strip()) == (0, "200000"), r.stderr


def test_kubectl_127_execs_over_spdy(box):
    """kubectl before 1.30 speaks SPDY: output, exit code, and stdin to its end."""
    kubectl = [kubectl_binary("1.27"), "--kubeconfig", box.kubeconfig, "exec"]
    env = {**os.environ, "HOME": str(box.work)}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*kubectl, *args], input=stdin, capture_output=True, text=True, timeout=60, env=env)

    r = run("box", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (r.returncode, r.stdout) == (3, "out\n") and "err" in r.stderr, r
    r = run("-i", "box", "--", "wc", "-c", stdin="x" * 100_000)
    assert (r.returncode, r.stdout.strip()) == (0, "100000"), r.stderr


def test_kubectl_exec_errors_are_clean(box):
    r = kubectl_exec(box, "box", "-c", "nope", "--", "true")
    assert r.returncode == 1
    assert "container nope is not valid for pod box" in r.stderr, r.stderr

    r = kubectl_exec(box, "nosuchpod", "--", "true")
    assert r.returncode == 1
    assert 'pods "nosuchpod" not found' in r.stderr, r.stderr

    r = kubectl_exec(box, "box", "--", "/no/such/binary")
    assert r.returncode != 0
    assert "no/such/binary" in r.stderr, r.stderr


def test_kubectl_port_forward_reaches_the_pod(box):
    box.kubectl(
        "run",
        "pf",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--overrides",
        json.dumps({"spec": {"terminationGracePeriodSeconds": 1}}),
        "--",
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/var/www",
    )
    box.wait(lambda: (p := box.get("pod", "pf")) and p["status"].get("phase") == "Running", 30, "pf Running")
    local = free_port()
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", box.kubeconfig, "port-forward", "pod/pf", f"{local}:8080"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(box.work)},
    )
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def fetch() -> bytes | None:
            try:
                with opener.open(f"http://127.0.0.1:{local}/", timeout=5) as r:
                    return r.read()
            except OSError:
                return None

        assert box.wait(fetch, 20, "an answer through kubectl port-forward") == b"orch busybox\n"
        assert fetch() == b"orch busybox\n"  # a second connection over the same tunnel
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        box.kubectl("delete", "pod", "pf", "--grace-period=1", check=False)
    assert "error" not in err.lower(), err


def test_kubectl_attach_streams_the_containers_output(box):
    box.kubectl(
        "run",
        "ticker",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--overrides",
        json.dumps({"spec": {"terminationGracePeriodSeconds": 1}}),
        "--",
        "sh",
        "-c",
        "i=0; while true; i=$((i+1)); do echo tick-$i; sleep 0.3; done",
    )
    box.wait(lambda: (p := box.get("pod", "ticker")) and p["status"].get("phase") == "Running", 30, "ticker Running")
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", box.kubeconfig, "attach", "ticker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(box.work)},
    )
    watchdog = threading.Timer(30, proc.kill)  # a stream that never delivers must not hang the run
    watchdog.start()
    try:
        line = proc.stdout.readline()  # blocks until the attached stream delivers a line
        assert line.startswith("tick-"), (line, proc.poll())
    finally:
        watchdog.cancel()
        proc.kill()
        proc.communicate(timeout=10)
        box.kubectl("delete", "pod", "ticker", "--grace-period=1", check=False)


# --- kubectl debug -it: an ephemeral container in a running pod -----------------------------------


def debug_session(box, binary: str, pod: str, name: str, typed: bytes, timeout: float = 30) -> str:
    """``kubectl debug -it POD --target=app -- sh`` on a pseudo-terminal, as a user runs it:
    once kubectl says it attached, type ``typed``; everything it printed until it exits."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [binary, "--kubeconfig", box.kubeconfig, "debug", "-it", pod, "--image=orch.local/busybox:1"]
        + ["--image-pull-policy=Never", "--target=app", f"--container={name}", "--", "sh"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "HOME": str(box.work)},
        start_new_session=True,
    )
    os.close(slave)
    out, sent = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other side closed: kubectl exited
                    break
                if not chunk:
                    break
                out += chunk
            if not sent and b"If you don't see a command prompt" in out:
                os.write(master, typed)
                sent = True
            if proc.poll() is not None and not ready:
                break
        else:
            raise AssertionError(f"kubectl debug did not finish within {timeout}s:\n{out.decode(errors='replace')}")
        assert proc.wait(10) == 0, out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(master)
    return out.decode(errors="replace").replace("\r", "")


@pytest.fixture(scope="module")
def target(box):
    box.kubectl(
        "run",
        "target",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--overrides",
        json.dumps(
            {
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "app",
                            "image": "orch.local/busybox:1",
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "31337"],
                        }
                    ],
                }
            }
        ),
    )
    box.wait(lambda: (p := box.get("pod", "target")) and p["status"].get("phase") == "Running", 30, "target Running")
    yield box.get("pod", "target")
    box.kubectl("delete", "pod", "target", "--grace-period=1", "--wait=false", check=False)


@pytest.mark.parametrize(
    "binary, name", [(KUBECTL, "dbg132"), (kubectl_binary("1.27"), "dbg127")], ids=["1.32", "1.27"]
)
def test_kubectl_debug_gives_a_shell_beside_the_target(box, target, binary, name):
    out = debug_session(box, binary, "target", name, b"echo hello-$((6*7)); ps; exit\n")
    assert "hello-42" in out, out
    assert "sleep 31337" in out, f"the target's processes are not visible:\n{out}"

    pod = box.get("pod", "target")
    # The pod and its container carried on: same container, no restart.
    [app] = pod["status"]["containerStatuses"]
    [before] = target["status"]["containerStatuses"]
    assert (app["containerID"], app["restartCount"]) == (before["containerID"], 0)
    # The shell exited with the session: reported terminated, not started again.
    state = box.wait(lambda: _ephemeral(box, name).get("state", {}).get("terminated"), 10, f"{name} terminated")
    assert state["exitCode"] == 0 and _ephemeral(box, name)["restartCount"] == 0


def _ephemeral(box, name: str) -> dict:
    pod = box.get("pod", "target") or {}
    for s in pod.get("status", {}).get("ephemeralContainerStatuses") or []:
        if s["name"] == name:
            return s
    return {}
