"""The runtime's sandbox image, not the agent's: a containerd configured with another one.

Any stock containerd names its own CRI ``sandbox_image`` (``registry.k8s.io/pause:3.x``
or whatever its operator chose) and pulls it itself. Here a private containerd names
``registry.example/pause:3.9``, which is the pause image from packaging/images imported
under that name (no registry is reachable and none is contacted), and lacks
``orch.local/pause:1`` (the default of ``--pod-infra-container-image``). An agent with
default flags must run a static pod on it: it never pulls a sandbox image itself.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from tests.components import Containerd, image_builder
from tests.e2e.test_agent_static_pods import Agent, _hierarchies, _rm_cgroup_tree, container, crictl_ps, pod_manifest

RUNTIME_SANDBOX_IMAGE = "registry.example/pause:3.9"


@pytest.fixture(scope="module")
def other_containerd():
    """A private containerd whose sandbox image is RUNTIME_SANDBOX_IMAGE, with orch's
    busybox and the pause image imported only under that other name."""
    builder = image_builder()
    if not Path(builder.DEFAULT_BUSYBOX).is_file():
        pytest.skip(f"test images need {builder.DEFAULT_BUSYBOX} (Debian busybox-static)")
    with Containerd(sandbox_image=RUNTIME_SANDBOX_IMAGE) as instance:
        builder.ensure_images(instance.address, names=[builder.BUSYBOX_IMAGE])
        pause = dataclasses.replace(builder.IMAGES[builder.PAUSE_IMAGE], name=RUNTIME_SANDBOX_IMAGE)
        builder.import_image(instance.address, builder.build_image(pause))
        present = builder.image_digests_in_containerd(instance.address)
        assert RUNTIME_SANDBOX_IMAGE in present and builder.PAUSE_IMAGE not in present, present
        yield instance


@pytest.fixture(scope="module")
def cgroup_root():
    rel = f"/orch-e2e-{uuid.uuid4().hex[:8]}"
    for root in _hierarchies():
        (root / rel.strip("/")).mkdir(exist_ok=True)
    yield rel
    _rm_cgroup_tree(rel)


def test_static_pod_runs_on_the_runtime_sandbox_image(other_containerd, cgroup_root, tmp_path):
    agent = Agent(tmp_path, other_containerd, cgroup_root).start()  # default --pod-infra-container-image
    try:
        agent.write("sb", pod_manifest("sb", [container("app", "sleep", "3600")]))
        pod = agent.wait_pod("sb", lambda p: p["status"].get("phase") == "Running", 20, "Running")
        assert pod["status"]["containerStatuses"][0]["state"].get("running"), pod["status"]
        # The sandbox runs the runtime's image; the agent pulled nothing.
        assert RUNTIME_SANDBOX_IMAGE in crictl_ps(other_containerd)
        images = image_builder().image_digests_in_containerd(other_containerd.address)
        assert image_builder().PAUSE_IMAGE not in images, images
        output = agent.output()
        assert "FailedCreatePodSandBox" not in output and "failed to pull" not in output
        assert f'"Runtime sandbox image" image="{RUNTIME_SANDBOX_IMAGE}"' in output  # kept from GC
        (agent.manifests / "sb.yaml").unlink()
        agent.wait(lambda: not (agent.try_pods() or {"items": [1]})["items"], 30, "the pod gone")
    finally:
        agent.stop()
