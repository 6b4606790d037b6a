"""cri.client.CriClient against the real containerd (the session's private
instance) with the images from packaging/images.

Besides the client, these tests pin the containerd 1.6 behaviour that
cri/fake.py imitates (NOT_FOUND on a repeated StopPodSandbox, the error a
host-network sandbox with a hostname gets, exit codes and reasons, ...): when
one of them changes, change the fake too.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from cri import api_pb2 as pb
from cri.client import (
    CriClient,
    DeadlineExceededError,
    ImagePullError,
    NotFoundError,
    UnavailableError,
    UnknownError,
)

BUSYBOX = "orch.local/busybox:1"
PAUSE = "orch.local/pause:1"
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z) (stdout|stderr) ([PF]) (.*)$")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_V2 = (CGROUP_ROOT / "cgroup.controllers").exists()


def memory_limit_file(cgroup_parent: str, container_id: str) -> Path:
    """Where runc (cgroupfs driver) puts a container's memory limit."""
    relative = Path(cgroup_parent.strip("/")) / container_id
    if CGROUP_V2:
        return CGROUP_ROOT / relative / "memory.max"
    return CGROUP_ROOT / "memory" / relative / "memory.limit_in_bytes"


def remove_cgroup_tree(cgroup_parent: str) -> list[str]:
    """rmdir the parent (and anything left below it) in every hierarchy; runc
    creates it but never removes it. Returns directories that could not go."""
    top = cgroup_parent.strip("/")
    roots = [CGROUP_ROOT] if CGROUP_V2 else [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]
    left = []
    for root in roots:
        base = root / top
        if not base.is_dir():
            continue
        for directory in sorted(
            (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ) + [base]:
            try:
                directory.rmdir()
            except OSError:
                left.append(str(directory))
    return left


class Pods:
    """Sandboxes created by one test under one cgroup parent; all removed at the end."""

    def __init__(self, cri: CriClient, log_root: Path):
        self.cri = cri
        self.log_root = log_root
        self.cgroup_parent = f"/orch-e2e-{secrets.token_hex(4)}"
        self.sandbox_ids: list[str] = []

    def sandbox_config(
        self, name: str, *, host_network: bool = False, hostname: str | None = None, pid_mode: int | None = None
    ) -> pb.PodSandboxConfig:
        uid = secrets.token_hex(8)
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="e2e"),
            hostname=(hostname if hostname is not None else ("" if host_network else name)),
            log_directory=str(self.log_root / f"e2e_{name}_{uid}"),
            labels={"orch.io/e2e": "cri"},
        )
        config.linux.cgroup_parent = self.cgroup_parent
        options = config.linux.security_context.namespace_options
        if host_network:
            options.network = pb.NODE
        if pid_mode is not None:
            options.pid = pid_mode
        return config

    async def run(self, config: pb.PodSandboxConfig) -> str:
        sandbox_id = await self.cri.run_pod_sandbox(config)
        self.sandbox_ids.append(sandbox_id)
        return sandbox_id

    async def cleanup(self) -> None:
        for sandbox_id in self.sandbox_ids:
            await self.cri.stop_pod_sandbox(sandbox_id)
            await self.cri.remove_pod_sandbox(sandbox_id)
        left = remove_cgroup_tree(self.cgroup_parent)
        assert not left, f"cgroups left behind: {left}"


def container_config(
    name: str, command, *, image: str = BUSYBOX, memory: int = 0, pid_mode: int = pb.CONTAINER, attempt: int = 0
) -> pb.ContainerConfig:
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=attempt),
        image=pb.ImageSpec(image=image),
        command=list(command) if command else [],
        log_path=f"{name}/{attempt}.log",
        labels={"orch.io/e2e": "cri"},
    )
    config.linux.security_context.namespace_options.pid = pid_mode
    if memory:
        config.linux.resources.memory_limit_in_bytes = memory
    return config


@pytest.fixture
async def cri(containerd, cri_images):
    async with CriClient(containerd.endpoint, request_timeout=30) as client:
        yield client


@pytest.fixture
async def pods(cri, tmp_path):
    tracker = Pods(cri, tmp_path / "pods")
    try:
        yield tracker
    finally:
        await tracker.cleanup()


async def run_container(cri, sandbox_id, sandbox, config) -> str:
    container_id = await cri.create_container(sandbox_id, config, sandbox)
    await cri.start_container(container_id)
    return container_id


async def wait_state(cri, container_id, state, timeout=10.0) -> pb.ContainerStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = (await cri.container_status(container_id)).status
        if status.state == state:
            return status
        assert time.monotonic() < deadline, f"container stayed {status.state}, wanted {state}"
        await asyncio.sleep(0.05)


def http_get(url: str, timeout: float = 5.0) -> bytes:
    # No proxies: the pod network is local.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with opener.open(url, timeout=2) as response:
                return response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# -- runtime and images ------------------------------------------------------------


async def test_version_and_status(cri):
    version = await cri.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"
    conditions = {c.type: c.status for c in (await cri.status()).status.conditions}
    assert conditions == {"RuntimeReady": True, "NetworkReady": True}


async def test_imported_images_are_present(cri, cri_images):
    for name in (BUSYBOX, PAUSE):
        image = await cri.image_status(name)
        assert image is not None, name
        assert image.id == cri_images[name]
        assert name in image.repo_tags
        assert image.size > 500_000
    listed = {image.id for image in await cri.list_images()}
    assert set(cri_images.values()) <= listed
    assert await cri.image_status("orch.local/missing:1") is None
    fs = await cri.image_fs_info()
    assert fs.image_filesystems and fs.image_filesystems[0].fs_id.mountpoint


async def test_pull_fails_fast_with_a_typed_error(cri):
    # No registry is reachable; containerd 1.6 even tries for a present image.
    for name in ("orch.local/missing:1", BUSYBOX):
        start = time.monotonic()
        with pytest.raises(ImagePullError, match="failed to resolve reference"):
            await cri.pull_image(name, timeout=20)
        assert time.monotonic() - start < 5
    assert await cri.image_status(BUSYBOX) is not None


# -- a pod on the pod network ------------------------------------------------------------


async def test_httpd_pod_end_to_end(cri, pods):
    sandbox = pods.sandbox_config("web")
    start = time.monotonic()
    sandbox_id = await pods.run(sandbox)
    status = (await cri.pod_sandbox_status(sandbox_id)).status
    assert status.state == pb.SANDBOX_READY
    pod_ip = status.network.ip
    assert re.fullmatch(r"10\.88\.\d+\.\d+", pod_ip), pod_ip

    config = container_config(
        "httpd",
        ["sh", "-c", "echo starting httpd; echo to-stderr >&2; exec httpd -f -p 8080 -h /var/www"],
        memory=64 * 1024 * 1024,
    )
    container_id = await run_container(cri, sandbox_id, sandbox, config)
    elapsed = time.monotonic() - start
    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_RUNNING
    assert status.started_at > 0
    assert status.image.image == BUSYBOX
    assert elapsed < 5, f"sandbox + container took {elapsed:.2f}s"

    # HTTP from the host to the pod IP.
    assert http_get(f"http://{pod_ip}:8080/") == b"orch busybox\n"

    # Logs at <log_directory>/<log_path> in the CRI format.
    log_path = Path(sandbox.log_directory) / "httpd" / "0.log"
    assert status.log_path == str(log_path)
    deadline = time.monotonic() + 5
    while "to-stderr" not in (log_path.read_text() if log_path.exists() else ""):
        assert time.monotonic() < deadline, "log lines did not appear"
        await asyncio.sleep(0.05)
    parsed = [LOG_LINE.match(line) for line in log_path.read_text().splitlines()]
    assert all(parsed), log_path.read_text()
    entries = {(m.group(3), m.group(4), m.group(5)) for m in parsed}
    assert ("stdout", "F", "starting httpd") in entries
    assert ("stderr", "F", "to-stderr") in entries

    # The memory limit in the container's cgroup.
    limit_file = memory_limit_file(pods.cgroup_parent, container_id)
    assert int(limit_file.read_text()) == 64 * 1024 * 1024
    await cri.update_container_resources(
        container_id, pb.LinuxContainerResources(memory_limit_in_bytes=96 * 1024 * 1024)
    )
    assert int(limit_file.read_text()) == 96 * 1024 * 1024
    status = (await cri.container_status(container_id)).status
    assert status.resources.linux.memory_limit_in_bytes == 96 * 1024 * 1024

    # ExecSync: output and exit code; past its timeout, DeadlineExceeded.
    result = await cri.exec_sync(container_id, ["cat", "/var/www/index.html"], exec_timeout=5)
    assert (result.stdout, result.stderr, result.exit_code) == (b"orch busybox\n", b"", 0)
    result = await cri.exec_sync(container_id, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.stdout, result.stderr, result.exit_code) == (b"out\n", b"err\n", 3)
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        await cri.exec_sync(container_id, ["sleep", "30"], exec_timeout=1)
    assert time.monotonic() - start < 5

    # Stats.
    stats = await cri.container_stats(container_id)
    assert stats.memory.working_set_bytes.value > 0
    pod_stats = await cri.pod_sandbox_stats(sandbox_id)
    assert container_id in [c.attributes.id for c in pod_stats.linux.containers]

    # Streaming URLs from the stream server on loopback.
    assert (await cri.exec(container_id, ["sh"])).startswith("http://127.0.0.1:")
    assert "/portforward/" in await cri.port_forward(sandbox_id, [8080])

    # Stop, remove; then the sandbox, twice. busybox httpd installs no SIGTERM
    # handler, and as PID 1 of its namespace the kernel drops the signal: the
    # stop waits out the grace period and ends with SIGKILL.
    start = time.monotonic()
    await cri.stop_container(container_id, 2)
    assert 1.9 <= time.monotonic() - start < 6
    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_EXITED
    assert (status.exit_code, status.reason) == (137, "Error")
    assert status.finished_at >= status.started_at
    await cri.remove_container(container_id)
    with pytest.raises(NotFoundError):
        await cri.container_status(container_id)

    await cri.stop_pod_sandbox(sandbox_id)
    assert (await cri.pod_sandbox_status(sandbox_id)).status.state == pb.SANDBOX_NOTREADY
    await cri.remove_pod_sandbox(sandbox_id)
    with pytest.raises(NotFoundError):
        await cri.pod_sandbox_status(sandbox_id)
    # Again, on a sandbox that is gone: done, not an error.
    await cri.stop_pod_sandbox(sandbox_id)
    await cri.remove_pod_sandbox(sandbox_id)


async def test_gone_sandbox_answers_not_found_to_stop(cri, pods):
    """Why the client swallows NOT_FOUND (and what the fake imitates)."""
    sandbox_id = await pods.run(pods.sandbox_config("gone"))
    await cri.stop_pod_sandbox(sandbox_id)
    await cri.remove_pod_sandbox(sandbox_id)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await cri.runtime_stub.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    # RemovePodSandbox of a gone sandbox succeeds outright.
    await cri.runtime_stub.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))


async def test_host_network_sandbox(cri, pods):
    with pytest.raises(UnknownError, match="unable to set hostname without a private UTS"):
        await pods.run(pods.sandbox_config("hostnet-named", host_network=True, hostname="x"))
    sandbox = pods.sandbox_config("hostnet", host_network=True)
    sandbox_id = await pods.run(sandbox)
    status = (await cri.pod_sandbox_status(sandbox_id)).status
    assert status.state == pb.SANDBOX_READY
    assert status.network.ip == ""
    container_id = await run_container(cri, sandbox_id, sandbox, container_config("sleeper", ["sleep", "3600"]))
    host_name = os.uname().nodename
    result = await cri.exec_sync(container_id, ["hostname"], exec_timeout=5)
    assert result.stdout.decode().strip() == host_name


async def test_container_exit_codes_and_state_errors(cri, pods):
    """The answers cri/fake.py imitates."""
    sandbox = pods.sandbox_config("exits")
    sandbox_id = await pods.run(sandbox)
    failed = await run_container(cri, sandbox_id, sandbox, container_config("failed", ["sh", "-c", "exit 3"]))
    done = await run_container(cri, sandbox_id, sandbox, container_config("done", ["true"]))
    failed_status = await wait_state(cri, failed, pb.CONTAINER_EXITED)
    done_status = await wait_state(cri, done, pb.CONTAINER_EXITED)
    assert (failed_status.exit_code, failed_status.reason) == (3, "Error")
    assert (done_status.exit_code, done_status.reason) == (0, "Completed")

    with pytest.raises(UnknownError, match="CONTAINER_EXITED state"):
        await cri.start_container(failed)
    with pytest.raises(UnknownError, match="CONTAINER_EXITED state"):
        await cri.exec_sync(failed, ["true"])
    with pytest.raises(UnknownError, match="container is not running"):
        await cri.reopen_container_log(failed)
    with pytest.raises(UnknownError, match="failed to reserve container name"):
        await cri.create_container(sandbox_id, container_config("failed", ["true"]), sandbox)
    with pytest.raises(NotFoundError, match="failed to resolve image"):
        await cri.create_container(sandbox_id, container_config("x", ["true"], image="orch.local/missing:1"), sandbox)

    created = await cri.create_container(sandbox_id, container_config("idle", ["sleep", "60"]), sandbox)
    await cri.stop_container(created, 1)  # a created container stays created
    assert (await cri.container_status(created)).status.state == pb.CONTAINER_CREATED

    await cri.remove_container(failed)
    await cri.remove_container(failed)  # unknown: fine
    with pytest.raises(NotFoundError):
        await cri.stop_container(failed, 1)

    # sleep as PID 1 ignores SIGTERM: a stop waits out the grace period, then 137.
    sleeper = await run_container(cri, sandbox_id, sandbox, container_config("sleeper", ["sleep", "3600"]))
    start = time.monotonic()
    await cri.stop_container(sleeper, 1)
    assert time.monotonic() - start >= 0.9
    assert (await cri.container_status(sleeper)).status.exit_code == 137

    # StopPodSandbox kills what still runs: 137, "Error".
    runner = await run_container(cri, sandbox_id, sandbox, container_config("runner", ["sleep", "3600"]))
    await cri.stop_pod_sandbox(sandbox_id)
    status = (await cri.container_status(runner)).status
    assert (status.state, status.exit_code, status.reason) == (pb.CONTAINER_EXITED, 137, "Error")
    assert (await cri.pod_sandbox_status(sandbox_id)).status.network.ip == ""
    with pytest.raises(NotFoundError, match="no running task found"):
        await cri.create_container(sandbox_id, container_config("late", ["true"]), sandbox)


async def test_pause_image_holds_sandbox_and_reaps_orphans(cri, pods):
    # Containers sharing the sandbox's PID namespace: the pause shell is PID 1,
    # and orphans are re-parented to it.
    sandbox = pods.sandbox_config("shared-pid", pid_mode=pb.POD)
    sandbox_id = await pods.run(sandbox)
    config = container_config("main", ["sh", "-c", "sh -c 'sleep 1 &'; sleep 3600"], pid_mode=pb.POD)
    container_id = await run_container(cri, sandbox_id, sandbox, config)
    cmdline = (await cri.exec_sync(container_id, ["cat", "/proc/1/cmdline"], exec_timeout=5)).stdout
    assert b"trap" in cmdline, cmdline
    await asyncio.sleep(2)  # the orphaned `sleep 1` has exited by now
    states = (await cri.exec_sync(container_id, ["sh", "-c", "cat /proc/[0-9]*/stat"], exec_timeout=5)).stdout.decode()
    zombies = [line for line in states.splitlines() if line.split(") ", 1)[1].startswith("Z")]
    assert not zombies, states
    assert (await cri.pod_sandbox_status(sandbox_id)).status.state == pb.SANDBOX_READY


async def test_pause_process_exits_promptly_on_sigterm(cri, pods):
    # The pause image as an ordinary container: PID 1 of its own namespace.
    sandbox = pods.sandbox_config("pause-term")
    sandbox_id = await pods.run(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config("pause", None, image=PAUSE))
    await asyncio.sleep(0.3)
    assert (await cri.container_status(container_id)).status.state == pb.CONTAINER_RUNNING
    start = time.monotonic()
    await cri.stop_container(container_id, 10)
    assert time.monotonic() - start < 2
    status = (await cri.container_status(container_id)).status
    assert (status.exit_code, status.reason) == (0, "Completed")


async def test_reconnect_after_containerd_restart(containerd, cri, pods):
    sandbox = pods.sandbox_config("survivor")
    sandbox_id = await pods.run(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config("sleeper", ["sleep", "3600"]))
    await cri.version()
    containerd.stop_daemon()
    try:
        start = time.monotonic()
        with pytest.raises(UnavailableError):
            await cri.version()
        with pytest.raises(UnavailableError):
            await cri.list_pod_sandbox()
        assert time.monotonic() - start < 1, "calls must fail fast while the runtime is down"
    finally:
        await asyncio.to_thread(containerd.restart)
    version = await cri.wait_ready(timeout=10)
    assert version.runtime_name == "containerd"
    # The same client object, and the pod survived the restart.
    assert sandbox_id in [s.id for s in await cri.list_pod_sandbox()]
    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_RUNNING
    result = await cri.exec_sync(container_id, ["echo", "back"], exec_timeout=5)
    assert result.stdout == b"back\n"
