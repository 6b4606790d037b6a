"""Image garbage collection on a real containerd, with the thresholds forced low.

A private containerd (so the collector cannot touch the images other tests share)
whose CRI sandbox image is ``registry.example/pause:gc`` holds three images: orch's
busybox (used by a static pod), that sandbox image (used by the pod's sandbox, which
no CRI container lists) and an extra image nothing uses. An agent started with
``--image-gc-high-threshold=1 --image-gc-low-threshold=0`` and a short collection
period (a test hook) must remove the extra image (present at start, so old enough
under the default two minutes) and keep the two others; the pod keeps running, and
the shortfall is reported as upstream does (``FreeDiskSpaceFailed``): the disk holds
more than images.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from apiserver_min.api import names
from tests.components import Containerd, image_builder
from tests.e2e.test_agent_static_pods import (
    Agent,
    _hierarchies,
    _rm_cgroup_tree,
    container,
    crictl_ps,
    pod_manifest,
)

SANDBOX_IMAGE = "registry.example/pause:gc"
EXTRA_IMAGE = "orch.local/gc-extra:1"
GC_PERIOD = "6s"


@pytest.fixture(scope="module")
def gc_containerd():
    builder = image_builder()
    if not Path(builder.DEFAULT_BUSYBOX).is_file():
        pytest.skip(f"test images need {builder.DEFAULT_BUSYBOX} (Debian busybox-static)")
    with Containerd(sandbox_image=SANDBOX_IMAGE) as instance:
        builder.ensure_images(instance.address, names=[builder.BUSYBOX_IMAGE])
        pause = dataclasses.replace(builder.IMAGES[builder.PAUSE_IMAGE], name=SANDBOX_IMAGE)
        builder.import_image(instance.address, builder.build_image(pause))
        # Another image ID than busybox's: the same layer, a config with a label of its own.
        extra = dataclasses.replace(
            builder.IMAGES[builder.BUSYBOX_IMAGE], name=EXTRA_IMAGE, labels=(("orch.test", "image-gc"),)
        )
        built = builder.build_image(extra)
        builder.import_image(instance.address, built)
        yield instance


@pytest.fixture
def cgroup_root():
    rel = f"/orch-e2e-{uuid.uuid4().hex[:8]}"
    for root in _hierarchies():
        (root / rel.strip("/")).mkdir(exist_ok=True)
    yield rel
    _rm_cgroup_tree(rel)


def test_unused_image_is_removed_and_used_and_sandbox_images_stay(gc_containerd, cgroup_root, tmp_path, monkeypatch):
    builder = image_builder()
    before = builder.image_digests_in_containerd(gc_containerd.address)
    assert {builder.BUSYBOX_IMAGE, SANDBOX_IMAGE, EXTRA_IMAGE} <= set(before), before
    monkeypatch.setenv(names.ENV_AGENT_TEST_IMAGE_GC_PERIOD, GC_PERIOD)
    agent = Agent(tmp_path, gc_containerd, cgroup_root, "--image-gc-high-threshold=1", "--image-gc-low-threshold=0")
    agent.write("gc", pod_manifest("gc", [container("app", "sleep", "3600")]))
    agent.start()
    try:
        agent.wait_pod("gc", lambda p: p["status"].get("phase") == "Running", 20, "Running")
        # The pod was running before the first collection (one period after start).
        assert "Removing image to free bytes" not in agent.output()

        def extra_gone():
            return EXTRA_IMAGE not in builder.image_digests_in_containerd(gc_containerd.address)

        agent.wait(extra_gone, 40, f"{EXTRA_IMAGE} to be garbage collected")
        after = builder.image_digests_in_containerd(gc_containerd.address)
        assert builder.BUSYBOX_IMAGE in after and SANDBOX_IMAGE in after, after
        pod = agent.pod("gc")
        assert pod is not None and pod["status"]["containerStatuses"][0]["state"].get("running"), pod
        output = agent.output()
        assert "Disk usage on image filesystem is over the high threshold" in output
        assert "Removing image to free bytes" in output
        # Only the extra image was removed.
        assert output.count("Removing image to free bytes") == 1, output[-4000:]
        assert "FreeDiskSpaceFailed" in output
    finally:
        agent.stop()


def test_dead_containers_beyond_the_limit_are_removed(gc_containerd, cgroup_root, tmp_path, monkeypatch):
    """With --maximum-dead-containers-per-container=0 the exited container of a finished pod
    goes once older than the TTL; the pod's (stopped) sandbox, its newest, stays."""
    monkeypatch.setenv(names.ENV_AGENT_TEST_CONTAINER_GC_PERIOD, "2s")
    agent = Agent(
        tmp_path,
        gc_containerd,
        cgroup_root,
        "--maximum-dead-containers-per-container=0",
        "--minimum-container-ttl-duration=10s",
    )
    agent.write("done", pod_manifest("done", [container("app", "true")], restartPolicy="Never"))
    agent.start()
    try:
        agent.wait_pod("done", lambda p: p["status"].get("phase") == "Succeeded", 20, "Succeeded")

        def listed() -> str:
            return crictl_ps(gc_containerd)

        assert image_builder().BUSYBOX_IMAGE in listed()  # not before the TTL
        agent.wait(lambda: image_builder().BUSYBOX_IMAGE not in listed(), 30, "the dead container to be removed")
        assert SANDBOX_IMAGE in listed()
    finally:
        agent.stop()
