"""The sandbox image is the runtime's: the agent never pulls one before RunPodSandbox.

A runtime configured with another sandbox image than ``--pod-infra-container-image``
(any stock containerd) must still start pods. The agent records the runtime's own
sandbox image (verbose CRI Status) so an image garbage collector keeps it, beside
the flag's image. The fake runtime, like containerd, pulls its sandbox image itself.
"""

from __future__ import annotations

import grpc
import pytest

from agent.runtime.context import NodeContext
from agent.runtime.images import ImageManager
from agent.runtime.manager import RuntimeManager
from agent.runtime.volumes import VolumeManager
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from cri.client import CriClient, UnavailableError
from cri.fake import FakeRuntime

OTHER = "registry.example/pause:3.9"


def _pod(name: str = "web") -> dict:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "orch.local/busybox:1",
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ]
        },
    }
    apply_defaults("", "v1", "Pod", pod)
    return pod


@pytest.fixture
def ctx(tmp_path) -> NodeContext:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.0.0.2\n")
    return NodeContext(
        node_name="node-1",
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "logs"),
        resolv_conf=str(resolv),
    )


async def _sync_once(fake: FakeRuntime, ctx: NodeContext) -> tuple[RuntimeManager, object]:
    cri = CriClient(fake.endpoint, request_timeout=5)
    runtime = RuntimeManager(cri, ctx, images=ImageManager(cri), volumes=VolumeManager(ctx))
    pod = _pod()
    try:
        result = await runtime.sync_pod(pod, await runtime.runtime_pod(pod["metadata"]["uid"]))
    finally:
        await cri.close()
    return runtime, result


async def test_pod_starts_when_the_runtime_has_another_sandbox_image(ctx):
    """Only the runtime's own sandbox image is present; --pod-infra-container-image is not."""
    async with FakeRuntime(sandbox_image=OTHER, images=("orch.local/busybox:1", OTHER)) as fake:
        runtime, result = await _sync_once(fake, ctx)
        assert result.pod_error is None, result.pod_error
        assert not result.waiting, result.waiting
        methods = [m for m, _ in fake.calls]
        assert "PullImage" not in methods
        assert names.AGENT_PAUSE_IMAGE not in [r.image.image for m, r in fake.calls if m == "ImageStatus"]
        assert methods.count("RunPodSandbox") == 1 and len(fake.sandboxes) == 1
        assert fake._find_image(names.AGENT_PAUSE_IMAGE) is None  # nothing pulled it
        assert runtime.runtime_sandbox_image == OTHER
        assert runtime.images_kept_from_gc() == {OTHER, names.AGENT_PAUSE_IMAGE}


async def test_the_runtime_pulls_its_own_sandbox_image(ctx):
    """Absent but pullable: the runtime (here the fake, as containerd) pulls it on RunPodSandbox."""
    async with FakeRuntime(sandbox_image=OTHER, images=("orch.local/busybox:1",)) as fake:
        fake.allow_pull(OTHER)
        runtime, result = await _sync_once(fake, ctx)
        assert result.pod_error is None, result.pod_error
        assert "PullImage" not in [m for m, _ in fake.calls]
        assert fake._find_image(OTHER) is not None


async def test_a_sandbox_image_the_runtime_cannot_get_is_the_runtime_error(ctx):
    async with FakeRuntime(sandbox_image=OTHER, images=("orch.local/busybox:1",)) as fake:
        runtime, result = await _sync_once(fake, ctx)
        reason, message = result.pod_error
        assert reason == "FailedCreatePodSandBox"
        assert f'failed to get sandbox image "{OTHER}"' in message
        assert "PullImage" not in [m for m, _ in fake.calls]


async def test_cri_client_reads_the_runtime_sandbox_image():
    async with FakeRuntime(sandbox_image=OTHER) as fake:
        async with CriClient(fake.endpoint, request_timeout=5) as cri:
            assert await cri.sandbox_image() == OTHER
            fake.fail_next("Status", grpc.StatusCode.UNAVAILABLE, "down")
            with pytest.raises(UnavailableError):
                await cri.sandbox_image()


async def test_runtime_that_does_not_report_keeps_the_flag_image_only(ctx):
    async with FakeRuntime() as fake:
        original = fake._rpc_Status

        def status(request):
            response = original(request)
            response.info.clear()
            return response

        fake._rpc_Status = status
        runtime, result = await _sync_once(fake, ctx)
        assert result.pod_error is None
        assert runtime.runtime_sandbox_image == ""
        assert runtime.images_kept_from_gc() == {names.AGENT_PAUSE_IMAGE}


async def test_the_sandbox_image_is_asked_again_until_the_runtime_answers(ctx):
    async with FakeRuntime(sandbox_image=OTHER) as fake:
        async with CriClient(fake.endpoint, request_timeout=5) as cri:
            runtime = RuntimeManager(cri, ctx, images=ImageManager(cri), volumes=VolumeManager(ctx))
            fake.fail_next("Status", grpc.StatusCode.UNAVAILABLE, "down")
            assert await runtime.learn_sandbox_image() == ""
            assert await runtime.learn_sandbox_image() == OTHER
            assert await runtime.learn_sandbox_image() == OTHER
            assert [m for m, _ in fake.calls].count("Status") == 2  # asked once it answered
