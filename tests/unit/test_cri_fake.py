"""cri.client.CriClient against cri.fake.FakeRuntime (a real gRPC server on a
unix socket in this process)."""

from __future__ import annotations

import asyncio
import re
import time

import grpc
import pytest

from cri import api_pb2 as pb
from cri.client import (
    AlreadyExistsError,
    CriClient,
    CriError,
    DeadlineExceededError,
    FailedPreconditionError,
    ImagePullError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
    normalize_endpoint,
)
from cri.fake import (
    ContainerBehavior,
    ExecResult,
    FakeRuntime,
    format_log_line,
    normalize_image_ref,
    rfc3339nano,
)

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z) (stdout|stderr) ([PF]) (.*)$")


@pytest.fixture
async def fake():
    async with FakeRuntime() as runtime:
        yield runtime


@pytest.fixture
async def cri(fake):
    async with CriClient(fake.endpoint, request_timeout=5) as client:
        yield client


def sandbox_config(
    name="web", *, uid=None, namespace="default", log_dir="", host_network=False, hostname=None, labels=None, attempt=0
) -> pb.PodSandboxConfig:
    config = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid or f"uid-{name}", namespace=namespace, attempt=attempt),
        hostname=(name if hostname is None else hostname) if not host_network else (hostname or ""),
        log_directory=str(log_dir),
        labels=labels or {},
    )
    if host_network:
        config.linux.security_context.namespace_options.network = pb.NODE
    return config


def container_config(
    name="app",
    *,
    image="orch.local/busybox:1",
    command=("sleep", "3600"),
    labels=None,
    attempt=0,
    log_path=None,
    memory=0,
) -> pb.ContainerConfig:
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=attempt),
        image=pb.ImageSpec(image=image),
        command=list(command),
        labels=labels or {},
        log_path=log_path if log_path is not None else f"{name}/{attempt}.log",
    )
    if memory:
        config.linux.resources.memory_limit_in_bytes = memory
    return config


async def run_container(cri, sandbox_id, sandbox, config) -> str:
    container_id = await cri.create_container(sandbox_id, config, sandbox)
    await cri.start_container(container_id)
    return container_id


# -- pure helpers ------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("unix:/run/x.sock", "unix:///run/x.sock"),
        ("/run/x.sock", "unix:///run/x.sock"),
    ],
)
def test_normalize_endpoint(given, expected):
    assert normalize_endpoint(given) == expected


@pytest.mark.parametrize("bad", ["", "tcp://127.0.0.1:1234", "unix://relative.sock", "npipe://x"])
def test_normalize_endpoint_rejects(bad):
    with pytest.raises(ValueError):
        normalize_endpoint(bad)


def test_client_rejects_bad_timeout():
    with pytest.raises(ValueError):
        CriClient("unix:///x.sock", request_timeout=0)


@pytest.mark.parametrize(
    "ref, full",
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("someone/app", "docker.io/someone/app:latest"),
        ("orch.local/busybox:1", "orch.local/busybox:1"),
        ("localhost/x", "localhost/x:latest"),
        ("registry:5000/a/b", "registry:5000/a/b:latest"),
        ("registry:5000/a/b@sha256:00", "registry:5000/a/b@sha256:00"),
        ("sha256:abc", "sha256:abc"),
    ],
)
def test_normalize_image_ref(ref, full):
    assert normalize_image_ref(ref) == full


def test_rfc3339nano_trims_trailing_zeros():
    assert rfc3339nano(0) == "1970-01-01T00:00:00Z"
    assert rfc3339nano(1_500_000_000) == "1970-01-01T00:00:01.5Z"
    assert rfc3339nano(1_000_000_123) == "1970-01-01T00:00:01.000000123Z"
    line = format_log_line("stderr", "oops", partial=True, ns=1_000_000_000)
    assert line == "1970-01-01T00:00:01Z stderr P oops\n"


# -- runtime ---------------------------------------------------------------------


async def test_version_and_status(cri):
    version = await cri.version()
    assert version.runtime_name == "fake-cri"
    assert version.runtime_api_version == "v1"
    status = await cri.status()
    conditions = {c.type: c.status for c in status.status.conditions}
    assert conditions == {"RuntimeReady": True, "NetworkReady": True}


async def test_status_condition_knob(fake, cri):
    fake.set_condition("NetworkReady", False, "NetworkPluginNotReady", "cni config uninitialized")
    status = await cri.status(verbose=True)
    network = next(c for c in status.status.conditions if c.type == "NetworkReady")
    assert not network.status and network.reason == "NetworkPluginNotReady"
    assert "config" in status.info


# -- sandboxes ---------------------------------------------------------------------


async def test_sandbox_lifecycle(cri, tmp_path):
    config = sandbox_config(log_dir=tmp_path, labels={"orch.io/managed": "true"})
    sandbox_id = await cri.run_pod_sandbox(config)
    status = (await cri.pod_sandbox_status(sandbox_id)).status
    assert status.state == pb.SANDBOX_READY
    assert status.metadata.name == "web"
    assert status.network.ip.startswith("10.88.")
    assert status.created_at > 0
    assert dict(status.labels) == {"orch.io/managed": "true"}

    assert [s.id for s in await cri.list_pod_sandbox()] == [sandbox_id]
    assert await cri.list_pod_sandbox(label_selector={"orch.io/managed": "false"}) == []
    assert len(await cri.list_pod_sandbox(state=pb.SANDBOX_READY)) == 1

    await cri.stop_pod_sandbox(sandbox_id)
    status = (await cri.pod_sandbox_status(sandbox_id)).status
    assert status.state == pb.SANDBOX_NOTREADY
    assert status.network.ip == ""
    assert await cri.list_pod_sandbox(state=pb.SANDBOX_READY) == []

    await cri.remove_pod_sandbox(sandbox_id)
    with pytest.raises(NotFoundError):
        await cri.pod_sandbox_status(sandbox_id)
    assert await cri.list_pod_sandbox() == []


async def test_stop_and_remove_of_gone_sandbox_are_done(cri):
    # The client treats NOT_FOUND as done ...
    await cri.stop_pod_sandbox("0" * 64)
    await cri.remove_pod_sandbox("0" * 64)
    # ... because the runtime (like containerd) answers NOT_FOUND to Stop.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await cri.runtime_stub.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id="0" * 64))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_sandbox_name_is_reserved_per_attempt(cri):
    await cri.run_pod_sandbox(sandbox_config())
    with pytest.raises(UnknownError, match="failed to reserve sandbox name"):
        await cri.run_pod_sandbox(sandbox_config())
    await cri.run_pod_sandbox(sandbox_config(attempt=1))


async def test_host_network_sandbox(cri):
    with pytest.raises(UnknownError, match="unable to set hostname"):
        await cri.run_pod_sandbox(sandbox_config("h", host_network=True, hostname="h"))
    sandbox_id = await cri.run_pod_sandbox(sandbox_config("h", host_network=True))
    status = (await cri.pod_sandbox_status(sandbox_id)).status
    assert status.network.ip == ""
    assert status.linux.namespaces.options.network == pb.NODE


async def test_sysctls_like_runc(cri):
    config = sandbox_config("s1")
    config.linux.sysctls["net.ipv4.ip_unprivileged_port_start"] = "0"
    await cri.run_pod_sandbox(config)
    config = sandbox_config("s2")
    config.linux.sysctls["vm.swappiness"] = "10"
    with pytest.raises(UnknownError, match="not in a separate kernel namespace"):
        await cri.run_pod_sandbox(config)
    config = sandbox_config("s3", host_network=True)
    config.linux.sysctls["net.core.somaxconn"] = "1024"
    with pytest.raises(UnknownError, match="not allowed in host network namespace"):
        await cri.run_pod_sandbox(config)


async def test_unknown_runtime_handler(cri):
    with pytest.raises(UnknownError, match="no runtime for"):
        await cri.run_pod_sandbox(sandbox_config(), runtime_handler="kata")


async def test_missing_sandbox_image(fake, cri):
    fake.remove_image("orch.local/pause:1")
    with pytest.raises(UnknownError, match="failed to get sandbox image"):
        await cri.run_pod_sandbox(sandbox_config())


# -- containers --------------------------------------------------------------------


async def test_container_lifecycle_and_logs(fake, cri, tmp_path):
    fake.set_behavior(ContainerBehavior(logs=(("stdout", "hello"), ("stderr", "warn"))), container="app")
    sandbox = sandbox_config(log_dir=tmp_path / "pods" / "web")
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await cri.create_container(sandbox_id, container_config(), sandbox)

    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_CREATED
    assert status.started_at == 0
    await cri.start_container(container_id)
    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_RUNNING
    assert status.started_at >= status.created_at > 0
    assert status.image.image == "orch.local/busybox:1"
    assert status.image_ref.startswith("sha256:")
    assert status.log_path == str(tmp_path / "pods" / "web" / "app" / "0.log")

    lines = open(status.log_path).read().splitlines()
    parsed = [LOG_LINE.match(line).groups()[2:] for line in lines]
    assert parsed == [("stdout", "F", "hello"), ("stderr", "F", "warn")]
    fake.write_log(container_id, "stdout", "part", partial=True)
    assert open(status.log_path).read().splitlines()[-1].endswith(" stdout P part")

    [listed] = await cri.list_containers(pod_sandbox_id=sandbox_id)
    assert listed.id == container_id and listed.state == pb.CONTAINER_RUNNING
    assert listed.image_ref == status.image_ref

    await cri.stop_container(container_id, 10)
    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_EXITED
    assert (status.exit_code, status.reason) == (143, "Error")
    assert status.finished_at >= status.started_at

    await cri.remove_container(container_id)
    with pytest.raises(NotFoundError):
        await cri.container_status(container_id)
    await cri.remove_container(container_id)  # unknown IDs succeed, like containerd
    with pytest.raises(NotFoundError):
        await cri.stop_container(container_id)


async def test_container_exits_after_n_seconds_with_code(fake, cri):
    fake.set_behavior(ContainerBehavior(exit_after=0.1, exit_code=3), container="crash")
    fake.set_behavior(ContainerBehavior(exit_after=0.05), container="job")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    crash = await run_container(cri, sandbox_id, sandbox, container_config("crash"))
    job = await run_container(cri, sandbox_id, sandbox, container_config("job"))
    await fake.wait_for(lambda: fake.containers[crash].state == pb.CONTAINER_EXITED)
    await fake.wait_for(lambda: fake.containers[job].state == pb.CONTAINER_EXITED)
    crash_status = (await cri.container_status(crash)).status
    job_status = (await cri.container_status(job)).status
    assert (crash_status.exit_code, crash_status.reason) == (3, "Error")
    assert (job_status.exit_code, job_status.reason) == (0, "Completed")
    assert crash_status.finished_at - crash_status.started_at >= 90_000_000
    exited = await cri.list_containers(state=pb.CONTAINER_EXITED)
    assert {c.id for c in exited} == {crash, job}
    with pytest.raises(UnknownError, match="CONTAINER_EXITED state"):
        await cri.start_container(crash)


async def test_oom_and_scheduled_exit(fake, cri):
    fake.set_behavior(ContainerBehavior(oom=True, exit_after=0.01), container="hog")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    hog = await run_container(cri, sandbox_id, sandbox, container_config("hog"))
    other = await run_container(cri, sandbox_id, sandbox, container_config("other"))
    fake.schedule_exit(other, 0.01, exit_code=2)
    await fake.wait_for(lambda: all(c.state == pb.CONTAINER_EXITED for c in fake.containers.values()))
    hog_status = (await cri.container_status(hog)).status
    assert (hog_status.exit_code, hog_status.reason) == (137, "OOMKilled")
    assert (await cri.container_status(other)).status.exit_code == 2


async def test_stop_timeout_semantics(fake, cri):
    fake.set_behavior(ContainerBehavior(ignore_sigterm=True), container="stubborn")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    stubborn = await run_container(cri, sandbox_id, sandbox, container_config("stubborn"))
    killed = await run_container(cri, sandbox_id, sandbox, container_config("killed"))
    created = await cri.create_container(sandbox_id, container_config("later"), sandbox)

    start = time.monotonic()
    await cri.stop_container(stubborn, 1)
    assert time.monotonic() - start >= 0.9
    assert (await cri.container_status(stubborn)).status.exit_code == 137

    await cri.stop_container(killed, 0)
    assert (await cri.container_status(killed)).status.exit_code == 137

    await cri.stop_container(created, 5)  # containerd: a created container stays created
    assert (await cri.container_status(created)).status.state == pb.CONTAINER_CREATED
    await cri.start_container(created)


async def test_start_error(fake, cri):
    fake.set_behavior(ContainerBehavior(start_error='exec: "nope": executable file not found'), container="bad")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await cri.create_container(sandbox_id, container_config("bad"), sandbox)
    with pytest.raises(UnknownError, match="executable file not found"):
        await cri.start_container(container_id)
    status = (await cri.container_status(container_id)).status
    assert status.state == pb.CONTAINER_EXITED
    assert (status.exit_code, status.reason) == (128, "StartError")
    assert "executable file not found" in status.message


async def test_create_container_errors(fake, cri):
    sandbox = sandbox_config()
    with pytest.raises(NotFoundError, match="failed to find sandbox"):
        await cri.create_container("f" * 64, container_config(), sandbox)
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    with pytest.raises(NotFoundError, match="failed to resolve image"):
        await cri.create_container(sandbox_id, container_config(image="nope:1"), sandbox)
    await cri.create_container(sandbox_id, container_config(), sandbox)
    with pytest.raises(UnknownError, match="failed to reserve container name"):
        await cri.create_container(sandbox_id, container_config(), sandbox)
    await cri.create_container(sandbox_id, container_config(attempt=1), sandbox)
    fake.kill_sandbox(sandbox_id)
    assert (await cri.pod_sandbox_status(sandbox_id)).status.state == pb.SANDBOX_NOTREADY
    with pytest.raises(NotFoundError, match="no running task found"):
        await cri.create_container(sandbox_id, container_config(attempt=2), sandbox)


async def test_stop_and_remove_sandbox_take_containers(fake, cri):
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config())
    await cri.stop_pod_sandbox(sandbox_id)
    status = (await cri.container_status(container_id)).status
    assert (status.state, status.exit_code, status.reason) == (pb.CONTAINER_EXITED, 137, "Error")
    await cri.remove_pod_sandbox(sandbox_id)
    assert await cri.list_containers() == []
    # A ready sandbox is stopped first, then removed with its containers.
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    await run_container(cri, sandbox_id, sandbox, container_config())
    await cri.remove_pod_sandbox(sandbox_id)
    assert fake.containers == {} and fake.sandboxes == {}


async def test_list_containers_filters(cri):
    sandbox_a, sandbox_b = sandbox_config("a"), sandbox_config("b")
    a = await cri.run_pod_sandbox(sandbox_a)
    b = await cri.run_pod_sandbox(sandbox_b)
    c1 = await run_container(cri, a, sandbox_a, container_config("x", labels={"tier": "web"}))
    c2 = await cri.create_container(b, container_config("y", labels={"tier": "db"}), sandbox_b)
    assert {c.id for c in await cri.list_containers()} == {c1, c2}
    assert [c.id for c in await cri.list_containers(pod_sandbox_id=b)] == [c2]
    assert [c.id for c in await cri.list_containers(label_selector={"tier": "web"})] == [c1]
    assert [c.id for c in await cri.list_containers(state=pb.CONTAINER_CREATED)] == [c2]
    assert [c.id for c in await cri.list_containers(id=c1[:12])] == [c1]
    assert [s.id for s in await cri.list_pod_sandbox(id=a)] == [a]


async def test_update_resources_and_reopen_log(cri, tmp_path):
    sandbox = sandbox_config(log_dir=tmp_path)
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config(memory=64 << 20))
    status = (await cri.container_status(container_id)).status
    assert status.resources.linux.memory_limit_in_bytes == 64 << 20
    await cri.update_container_resources(container_id, pb.LinuxContainerResources(memory_limit_in_bytes=128 << 20))
    status = (await cri.container_status(container_id)).status
    assert status.resources.linux.memory_limit_in_bytes == 128 << 20

    log = tmp_path / "app" / "0.log"
    log.rename(tmp_path / "app" / "0.log.1")
    await cri.reopen_container_log(container_id)
    assert log.exists()
    await cri.stop_container(container_id)
    with pytest.raises(UnknownError, match="container is not running"):
        await cri.reopen_container_log(container_id)
    with pytest.raises(UnknownError):
        await cri.update_container_resources(container_id, pb.LinuxContainerResources())


# -- exec --------------------------------------------------------------------------


async def test_exec_sync_default_and_script(fake, cri):
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config())

    result = await cri.exec_sync(container_id, ["echo", "hi", "there"])
    assert (result.stdout, result.exit_code) == (b"hi there\n", 0)
    assert (await cri.exec_sync(container_id, ["false"])).exit_code == 1
    assert (await cri.exec_sync(container_id, ["sh", "-c", "exit 7"])).exit_code == 7

    fake.on_exec(["cat", "/tmp/ready"], ExecResult(exit_code=1, stderr="no such file"))
    result = await cri.exec_sync(container_id, ["cat", "/tmp/ready"])
    assert (result.exit_code, result.stderr) == (1, b"no such file")

    calls = []

    async def probe(container, cmd):
        calls.append((container.name, cmd))
        return ExecResult(stdout=b"ok")

    fake.on_exec(["/probe"], probe, container="app")
    assert (await cri.exec_sync(container_id, ["/probe", "-v"])).stdout == b"ok"
    assert calls == [("app", ["/probe", "-v"])]


async def test_exec_sync_timeout_is_deadline_exceeded(fake, cri):
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config())
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="timeout 1s exceeded"):
        await cri.exec_sync(container_id, ["sleep", "10"], exec_timeout=1)
    assert 0.9 <= time.monotonic() - start < 3


async def test_exec_sync_needs_a_running_container(cri):
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await cri.create_container(sandbox_id, container_config(), sandbox)
    with pytest.raises(UnknownError, match="CONTAINER_CREATED state"):
        await cri.exec_sync(container_id, ["true"])
    with pytest.raises(NotFoundError):
        await cri.exec_sync("e" * 64, ["true"])


async def test_streaming_urls(cri):
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config())
    assert "/exec/" in await cri.exec(container_id, ["sh"], tty=True, stdin=True)
    assert "/attach/" in await cri.attach(container_id)
    assert "/portforward/" in await cri.port_forward(sandbox_id, [80])
    with pytest.raises(NotFoundError):
        await cri.port_forward("nope")


# -- stats -------------------------------------------------------------------------


async def test_stats(fake, cri):
    fake.set_behavior(ContainerBehavior(memory_bytes=10 << 20))
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config(memory=64 << 20))
    stats = await cri.container_stats(container_id)
    assert stats.attributes.id == container_id
    assert stats.memory.working_set_bytes.value == 10 << 20
    assert stats.memory.available_bytes.value == 54 << 20
    assert [s.attributes.id for s in await cri.list_container_stats()] == [container_id]
    pod = await cri.pod_sandbox_stats(sandbox_id)
    assert pod.attributes.id == sandbox_id
    assert [c.attributes.id for c in pod.linux.containers] == [container_id]
    assert [s.attributes.id for s in await cri.list_pod_sandbox_stats()] == [sandbox_id]
    with pytest.raises(NotFoundError):
        await cri.pod_sandbox_stats("nope")


# -- images ------------------------------------------------------------------------


async def test_images(fake, cri):
    names = {tag for image in await cri.list_images() for tag in image.repo_tags}
    assert names == {"orch.local/busybox:1", "orch.local/pause:1"}
    busybox = await cri.image_status("orch.local/busybox:1")
    assert busybox is not None and busybox.id.startswith("sha256:") and busybox.size > 0
    assert (await cri.image_status(busybox.id)).id == busybox.id
    assert await cri.image_status("orch.local/missing:1") is None
    assert [i.id for i in await cri.list_images("orch.local/busybox:1")] == [busybox.id]

    fs = await cri.image_fs_info()
    assert fs.image_filesystems[0].used_bytes.value >= busybox.size

    await cri.remove_image("orch.local/busybox:1")
    assert await cri.image_status("orch.local/busybox:1") is None
    await cri.remove_image("orch.local/busybox:1")  # absent: fine


async def test_pull_fails_offline_even_for_present_images(fake, cri):
    for name in ("orch.local/busybox:1", "nginx:1.25"):
        start = time.monotonic()
        with pytest.raises(ImagePullError, match="failed to resolve reference") as info:
            await cri.pull_image(name)
        assert time.monotonic() - start < 1
        assert info.value.code == grpc.StatusCode.UNKNOWN


async def test_pull_from_fake_registry(fake, cri):
    fake.allow_pull("nginx:1.25")
    assert await cri.image_status("nginx:1.25") is None
    image_ref = await cri.pull_image("nginx:1.25")
    image = await cri.image_status("docker.io/library/nginx:1.25")
    assert image.id == image_ref
    assert image.repo_digests[0].startswith("docker.io/library/nginx@sha256:")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await cri.create_container(sandbox_id, container_config(image="nginx:1.25"), sandbox)
    status = (await cri.container_status(container_id)).status
    assert status.image_ref == image.repo_digests[0]
    assert status.image_id == image.id


# -- errors, timeouts, reconnects ----------------------------------------------------


@pytest.mark.parametrize(
    "code, error",
    [
        (grpc.StatusCode.NOT_FOUND, NotFoundError),
        (grpc.StatusCode.UNAVAILABLE, UnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceededError),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExistsError),
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError),
        (grpc.StatusCode.FAILED_PRECONDITION, FailedPreconditionError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhaustedError),
        (grpc.StatusCode.PERMISSION_DENIED, PermissionDeniedError),
        (grpc.StatusCode.UNIMPLEMENTED, UnimplementedError),
        (grpc.StatusCode.INTERNAL, InternalError),
        (grpc.StatusCode.UNKNOWN, UnknownError),
    ],
)
async def test_typed_errors(fake, cri, code, error):
    fake.fail_next("CreateContainer", code, "boom")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    with pytest.raises(error) as info:
        await cri.create_container(sandbox_id, container_config(), sandbox)
    assert isinstance(info.value, CriError)
    assert (info.value.method, info.value.code, info.value.details) == ("CreateContainer", code, "boom")
    assert str(info.value) == f"CRI CreateContainer: {code.name}: boom"
    # One failure only, and nothing was created by the failed call.
    assert fake.containers == {}
    await cri.create_container(sandbox_id, container_config(), sandbox)


async def test_fail_next_times_and_call_log(fake, cri):
    fake.fail_next("Version", grpc.StatusCode.INTERNAL, times=2)
    for _ in range(2):
        with pytest.raises(InternalError):
            await cri.version()
    await cri.version()
    assert fake.call_counts["Version"] == 3
    assert [method for method, _ in fake.calls] == ["Version"] * 3
    with pytest.raises(ValueError):
        fake.fail_next("NoSuchMethod")


async def test_unimplemented_like_containerd_1_6(cri):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await cri.runtime_stub.RuntimeConfig(pb.RuntimeConfigRequest())
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in cri.runtime_stub.GetContainerEvents(pb.GetEventsRequest()):
            pass
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_request_timeout_gives_deadline_exceeded(fake):
    fake.set_delay("ListPodSandbox", 1.0)
    async with CriClient(fake.endpoint, request_timeout=0.2) as cri:
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            await cri.list_pod_sandbox()
        assert time.monotonic() - start < 0.8
        # Per-call override.
        assert await cri.list_pod_sandbox(timeout=3) == []


async def test_long_calls_get_their_own_deadlines(fake):
    """ExecSync and StopContainer add their own timeout to request_timeout; PullImage
    uses image_pull_timeout."""
    fake.allow_pull("slow:1")
    fake.set_delay("PullImage", 0.5)
    fake.on_exec(["work"], ExecResult(duration=0.5))
    async with CriClient(fake.endpoint, request_timeout=0.2, image_pull_timeout=5) as cri:
        await cri.pull_image("slow:1")
        sandbox = sandbox_config()
        sandbox_id = await cri.run_pod_sandbox(sandbox)
        container_id = await run_container(cri, sandbox_id, sandbox, container_config())
        assert (await cri.exec_sync(container_id, ["work"], exec_timeout=2)).exit_code == 0
        assert (await cri.exec_sync(container_id, ["work"])).exit_code == 0  # no deadline
        with pytest.raises(DeadlineExceededError):
            await cri.exec_sync(container_id, ["work"], timeout=0.1)
    async with CriClient(fake.endpoint, request_timeout=5, image_pull_timeout=0.1) as cri:
        with pytest.raises(DeadlineExceededError):
            await cri.pull_image("slow:1")


async def test_unavailable_fast_while_down_then_same_client_works(fake, cri):
    sandbox_id = await cri.run_pod_sandbox(sandbox_config())
    await fake.down()
    for _ in range(3):
        start = time.monotonic()
        with pytest.raises(UnavailableError):
            await cri.version()
        assert time.monotonic() - start < 0.5
    await fake.up()
    deadline = time.monotonic() + 5
    while True:
        try:
            await cri.version()
            break
        except UnavailableError:
            assert time.monotonic() < deadline, "client did not reconnect within 5 s"
            await asyncio.sleep(0.05)
    assert [s.id for s in await cri.list_pod_sandbox()] == [sandbox_id]  # state kept


async def test_wait_ready(fake):
    await fake.down()
    async with CriClient(fake.endpoint, request_timeout=1) as cri:
        with pytest.raises(UnavailableError):
            await cri.wait_ready(timeout=0.3)

        async def come_back():
            await asyncio.sleep(0.3)
            await fake.up()

        task = asyncio.create_task(come_back())
        version = await cri.wait_ready(timeout=5)
        await task
        assert version.runtime_name == "fake-cri"


async def test_unreachable_endpoint(tmp_path):
    async with CriClient(f"unix://{tmp_path}/nothing.sock", request_timeout=1) as cri:
        start = time.monotonic()
        with pytest.raises(UnavailableError, match="nothing.sock"):
            await cri.version()
        assert time.monotonic() - start < 0.5


async def test_separate_image_endpoint(fake, tmp_path):
    async with FakeRuntime(images=["other.local/only-here:1"]) as image_runtime:
        async with CriClient(fake.endpoint, image_runtime.endpoint) as cri:
            tags = {tag for image in await cri.list_images() for tag in image.repo_tags}
            assert tags == {"other.local/only-here:1"}
            assert (await cri.version()).runtime_name == "fake-cri"
            assert image_runtime.call_counts["ListImages"] == 1
            assert fake.call_counts["ListImages"] == 0


async def test_client_reconnects_after_close(fake):
    cri = CriClient(fake.endpoint)
    await cri.version()  # connects lazily
    await cri.close()
    await cri.version()
    await cri.close()


async def test_fake_survives_restart_with_timers(fake, cri):
    fake.set_behavior(ContainerBehavior(exit_after=0.3, exit_code=5), container="c")
    sandbox = sandbox_config()
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await run_container(cri, sandbox_id, sandbox, container_config("c"))
    await fake.restart(down_for=0.05)
    await fake.wait_for(lambda: fake.containers[container_id].state == pb.CONTAINER_EXITED)
    await cri.wait_ready(timeout=5)
    assert (await cri.container_status(container_id)).status.exit_code == 5
