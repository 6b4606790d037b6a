"""Image and container garbage collection (agent/images/) on the fake CRI runtime."""

from __future__ import annotations

import asyncio
import os

import pytest

from agent.config import from_argv
from agent.images import ContainerGC, ContainerGCPolicy, ImageGCError, ImageGCManager, ImageGCPolicy
from agent.validation import validate
from apiserver_min.api import names
from cri import api_pb2 as pb
from cri.client import CriClient
from cri.fake import FakeRuntime

MiB = 1024 * 1024
CAPACITY = 100 * MiB


@pytest.fixture
async def fake():
    async with FakeRuntime() as runtime:
        yield runtime


@pytest.fixture
async def cri(fake):
    async with CriClient(fake.endpoint, request_timeout=5) as client:
        yield client


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Disk:
    """A file system of 100 MiB holding the fake runtime's images plus ``other`` bytes."""

    def __init__(self, fake: FakeRuntime, other: int = 0) -> None:
        self.fake = fake
        self.other = other
        self.asked: list[str] = []

    def __call__(self, mountpoint: str) -> tuple[int, int]:
        self.asked.append(mountpoint)
        used = self.other + sum(i.size for i in self.fake.images.values())
        return CAPACITY, CAPACITY - used


def tags(fake: FakeRuntime) -> set[str]:
    return {t for i in fake.images.values() for t in i.repo_tags}


async def run_pod(cri, fake, uid: str, containers: dict[str, str], *, ready: bool = True) -> tuple[str, list[str]]:
    """A sandbox with the agent's labels and one container per name (image by name); their IDs."""
    labels = {names.CRI_LABEL_MANAGED: names.CRI_LABEL_MANAGED_VALUE, names.CRI_LABEL_POD_UID: uid}
    config = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=f"p-{uid}", namespace="default", uid=uid, attempt=len(fake.sandboxes)),
        labels=labels,
        log_directory=f"/tmp/unused-{uid}",
    )
    sid = await cri.run_pod_sandbox(config)
    cids = []
    for name, image in containers.items():
        cc = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=len(fake.containers)),
            image=pb.ImageSpec(image=image),
            labels={**labels, names.CRI_LABEL_CONTAINER_NAME: name},
            command=["sleep", "1000"],
        )
        cids.append(await cri.create_container(sid, cc, config))
    if not ready:
        fake.kill_sandbox(sid)
    return sid, cids


# --- image GC ---------------------------------------------------------------------------


def image_gc(cri, fake, disk, clock, **policy) -> ImageGCManager:
    return ImageGCManager(
        cri,
        ImageGCPolicy(**{"high_threshold": 50, "low_threshold": 40, "min_age": 120.0, **policy}),
        kept=lambda: {"orch.local/pause:1"},
        fs_usage=disk,
        clock=clock,
        events=lambda pod, type_, reason, message: events.append((type_, reason, message)),
    )


events: list[tuple[str, str, str]] = []


@pytest.fixture(autouse=True)
def _clear_events():
    events.clear()


async def test_removes_least_recently_used_first_down_to_the_low_threshold(cri, fake):
    clock = Clock()
    for n in range(1, 5):
        fake.preload_image(f"orch.local/extra{n}:1", size=10 * MiB)
    disk = Disk(fake, other=20 * MiB)  # 20 + 40 + ~2 (busybox, pause): ~62% used
    gc = image_gc(cri, fake, disk, clock)
    await gc.detect()  # the first listing: ages unknown ("long ago")
    # extra3 and extra1 are used by containers, in that order, then their pods go away.
    _, (c3,) = await run_pod(cri, fake, "u3", {"app": "orch.local/extra3:1"})
    clock.now += 10
    await gc.detect()
    await cri.remove_container(c3)
    _, (c1,) = await run_pod(cri, fake, "u1", {"app": "orch.local/extra1:1"})
    clock.now += 10
    await gc.detect()
    await cri.remove_container(c1)
    clock.now += 10
    busybox = fake._find_image("orch.local/busybox:1").size
    # ~62% -> 40% needs ~22 MiB: the never used (busybox, extra2, extra4) go first, then extra3,
    # used before extra1; then enough is freed.
    freed = await gc.garbage_collect()
    assert freed == 30 * MiB + busybox
    assert tags(fake) == {"orch.local/pause:1", "orch.local/extra1:1"}
    assert disk.asked and disk.asked[0] == str(fake.dir / "snapshots")
    assert not events


async def test_images_in_use_and_the_sandbox_image_are_kept(cri, fake):
    clock = Clock()
    fake.preload_image("orch.local/unused:1", size=5 * MiB)
    disk = Disk(fake, other=80 * MiB)
    gc = image_gc(cri, fake, disk, clock, high_threshold=1, low_threshold=0, min_age=0.0)
    # busybox is used by an exited container (still in use), pause by nothing but it is the sandbox image.
    _, (cid,) = await run_pod(cri, fake, "u1", {"app": "orch.local/busybox:1"})
    await cri.start_container(cid)
    fake.exit_container(cid, 0)
    await gc.detect()
    with pytest.raises(ImageGCError, match="Failed to garbage collect required amount of images"):
        await gc.garbage_collect()
    assert tags(fake) == {"orch.local/busybox:1", "orch.local/pause:1"}
    assert [e[:2] for e in events] == [("Warning", "FreeDiskSpaceFailed")]
    assert "but only found 5242880 bytes eligible to free" in events[0][2]


async def test_pinned_images_are_kept(cri, fake):
    fake.preload_image("orch.local/pinned:1", size=5 * MiB)
    fake.images[fake._find_image("orch.local/pinned:1").id].pinned = True
    gc = image_gc(cri, fake, Disk(fake, other=80 * MiB), Clock(), min_age=0.0)
    await gc.detect()
    with pytest.raises(ImageGCError):
        await gc.garbage_collect()
    assert "orch.local/pinned:1" in tags(fake)


async def test_minimum_age_counts_from_first_detection(cri, fake):
    clock = Clock()
    gc = image_gc(cri, fake, Disk(fake, other=80 * MiB), clock, min_age=120.0)
    await gc.detect()  # busybox and pause: present at the first listing, old enough at once
    fake.preload_image("orch.local/new:1", size=5 * MiB)
    clock.now += 60
    await gc.detect()  # new: first seen now
    clock.now += 60  # 60 s later: 60 s old, younger than 2m
    with pytest.raises(ImageGCError):
        await gc.garbage_collect()
    assert "orch.local/new:1" in tags(fake)
    assert "orch.local/busybox:1" not in tags(fake)  # old and unused
    clock.now += 61
    with pytest.raises(ImageGCError):
        await gc.garbage_collect()  # still not enough to reach 40%, but new goes now
    assert "orch.local/new:1" not in tags(fake)
    assert "orch.local/pause:1" in tags(fake)


async def test_under_the_high_threshold_nothing_is_removed(cri, fake):
    fake.preload_image("orch.local/unused:1", size=5 * MiB)
    gc = image_gc(cri, fake, Disk(fake, other=40 * MiB), Clock(), min_age=0.0)  # ~47% < 50%
    await gc.detect()
    assert await gc.garbage_collect() == 0
    assert "orch.local/unused:1" in tags(fake)


async def test_usage_at_the_high_threshold_triggers(cri, fake):
    fake.preload_image("orch.local/unused:1", size=5 * MiB)
    base = sum(i.size for i in fake.images.values())
    gc = image_gc(cri, fake, Disk(fake, other=50 * MiB - base), Clock(), min_age=0.0, low_threshold=45)
    await gc.detect()
    assert await gc.garbage_collect() >= 5 * MiB
    assert "orch.local/unused:1" not in tags(fake)


async def test_zero_capacity_is_reported(cri, fake):
    gc = image_gc(cri, fake, lambda mount: (0, 0), Clock())
    with pytest.raises(ImageGCError, match="invalid capacity 0"):
        await gc.garbage_collect()
    assert [e[1] for e in events] == ["InvalidDiskCapacity"]


async def test_repeated_failures_report_image_gc_failed(cri, fake):
    gc = image_gc(cri, fake, Disk(fake, other=95 * MiB), Clock(), min_age=0.0)
    task = asyncio.create_task(gc.run(0.02))
    try:
        for _ in range(200):
            if any(e[1] == "ImageGCFailed" for e in events):
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    reasons = [e[1] for e in events]
    assert "ImageGCFailed" in reasons
    # The first failure only logs; the event comes from the second in a row.
    assert reasons.index("ImageGCFailed") > reasons.index("FreeDiskSpaceFailed")


async def test_high_threshold_100_disables(cri, fake):
    fake.preload_image("orch.local/unused:1", size=5 * MiB)
    gc = image_gc(cri, fake, Disk(fake, other=99 * MiB), Clock(), high_threshold=100, min_age=0.0)
    task = asyncio.create_task(gc.run(0.01))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert gc.passes == 0 and "orch.local/unused:1" in tags(fake)


def test_policy_problems():
    with pytest.raises(ValueError, match="must not be greater than high threshold"):
        ImageGCManager(None, ImageGCPolicy(high_threshold=50, low_threshold=60))
    with pytest.raises(ValueError, match="between 0 and 100"):
        ImageGCManager(None, ImageGCPolicy(high_threshold=101, low_threshold=60))


def _problems(*argv: str) -> list[str]:
    return validate(from_argv(list(argv)))


def test_validation_of_the_flags():
    assert not [p for p in _problems() if "image" in p.lower()]
    assert any(
        p.startswith("imageGCLowThresholdPercent (--image-gc-low-threshold): Invalid value: 85: must be less than")
        for p in _problems("--image-gc-low-threshold=85")
    )
    assert any("between 0 and 100" in p for p in _problems("--image-gc-high-threshold=101"))
    assert not _problems("--image-gc-high-threshold=1", "--image-gc-low-threshold=0")


# --- container GC -----------------------------------------------------------------------


def container_gc(cri, clock, known: set[str], *, ready: bool = True, logs: str = "", **policy) -> ContainerGC:
    return ContainerGC(
        cri,
        ContainerGCPolicy(**policy),
        pod_known=lambda uid: uid in known,
        sources_ready=lambda: ready,
        pod_logs_dir=logs,
        clock=clock,
    )


async def dead_instances(cri, fake, uid: str, name: str, count: int, start: float, step: float = 10.0) -> list[str]:
    """``count`` exited instances of one container of pod ``uid``, created ``step`` s apart from ``start``."""
    sid = next(
        (s.id for s in fake.sandboxes.values() if s.config.metadata.uid == uid),
        None,
    )
    if sid is None:
        sid, _ = await run_pod(cri, fake, uid, {})
    config = fake.sandboxes[sid].config
    out = []
    for n in range(count):
        cc = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=len(fake.containers) + 100),
            image=pb.ImageSpec(image="orch.local/busybox:1"),
            labels={**config.labels, names.CRI_LABEL_CONTAINER_NAME: name},
        )
        cid = await cri.create_container(sid, cc, config)
        fake.containers[cid].created_at = int((start + n * step) * 1e9)
        fake.containers[cid].state = pb.CONTAINER_EXITED
        out.append(cid)
    return out


async def test_dead_containers_beyond_the_per_container_limit_go_oldest_first(cri, fake):
    clock = Clock()
    ids = await dead_instances(cri, fake, "u1", "app", 4, clock.now - 100)
    other = await dead_instances(cri, fake, "u1", "side", 1, clock.now - 100)
    result = await container_gc(cri, clock, {"u1"}, max_per_pod_container=2).garbage_collect()
    assert result.containers == [ids[1], ids[0]]
    assert set(fake.containers) == {ids[2], ids[3], other[0]}


async def test_minimum_ttl_protects_young_dead_containers(cri, fake):
    clock = Clock()
    old = await dead_instances(cri, fake, "u1", "app", 2, clock.now - 100)
    young = await dead_instances(cri, fake, "u1", "app", 2, clock.now - 20)
    gc = container_gc(cri, clock, {"u1"}, min_age=60.0, max_per_pod_container=1)
    await gc.garbage_collect()
    # Only the two old ones are evictable; the newer of them is kept as the one allowed.
    assert set(fake.containers) == {old[1], *young}
    clock.now += 60
    await gc.garbage_collect()
    assert set(fake.containers) == {young[1]}


async def test_running_containers_are_never_removed(cri, fake):
    clock = Clock()
    _, (running,) = await run_pod(cri, fake, "u1", {"app": "orch.local/busybox:1"})
    await cri.start_container(running)
    fake.containers[running].created_at = int((clock.now - 500) * 1e9)
    dead = await dead_instances(cri, fake, "u1", "app", 1, clock.now - 100)
    await container_gc(cri, clock, {"u1"}, max_per_pod_container=0).garbage_collect()
    assert set(fake.containers) == {running}
    assert dead[0] not in fake.containers


async def test_node_wide_limit(cri, fake):
    clock = Clock()
    a = await dead_instances(cri, fake, "u1", "a", 3, clock.now - 300)
    b = await dead_instances(cri, fake, "u2", "b", 3, clock.now - 200)
    c = await dead_instances(cri, fake, "u3", "c", 1, clock.now - 100)
    # 7 dead, at most 4: an even share is 1 each (3 left), which fits.
    await container_gc(cri, clock, {"u1", "u2", "u3"}, max_per_pod_container=-1, max_containers=4).garbage_collect()
    assert set(fake.containers) == {a[2], b[2], c[0]}
    # At most 2 with 3 groups: one each, then the oldest on the node goes.
    await container_gc(cri, clock, {"u1", "u2", "u3"}, max_per_pod_container=-1, max_containers=2).garbage_collect()
    assert set(fake.containers) == {b[2], c[0]}


async def test_negative_limits_keep_everything(cri, fake):
    clock = Clock()
    ids = await dead_instances(cri, fake, "u1", "app", 3, clock.now - 100)
    await container_gc(cri, clock, {"u1"}, max_per_pod_container=-1, max_containers=-1).garbage_collect()
    assert set(fake.containers) == set(ids)


async def test_pods_that_are_gone_lose_dead_containers_sandboxes_and_logs(cri, fake, tmp_path):
    clock = Clock()
    logs = tmp_path / "pods"
    for entry in ("default_gone_u9", "default_here_u1", "default_running_u5"):
        (logs / entry / "app").mkdir(parents=True)
    gone = await dead_instances(cri, fake, "u9", "app", 2, clock.now - 100)
    gone_sandbox = fake.containers[gone[0]].sandbox_id
    fake.kill_sandbox(gone_sandbox)
    kept = await dead_instances(cri, fake, "u1", "app", 1, clock.now - 100)
    _, (orphan_running,) = await run_pod(cri, fake, "u5", {"app": "orch.local/busybox:1"})
    await cri.start_container(orphan_running)
    # Before every source was seen, nothing counts as gone.
    gc = container_gc(cri, clock, {"u1"}, ready=False, logs=str(logs), max_per_pod_container=-1)
    result = await gc.garbage_collect()
    assert not result.sandboxes and not result.log_dirs and set(gone) <= set(fake.containers)
    result = await container_gc(cri, clock, {"u1"}, logs=str(logs)).garbage_collect()
    assert set(result.containers) == set(gone)
    assert result.sandboxes == [gone_sandbox] and gone_sandbox not in fake.sandboxes
    assert kept[0] in fake.containers
    # u5 still runs in the runtime: its logs stay until the pod is removed.
    assert sorted(os.listdir(logs)) == ["default_here_u1", "default_running_u5"]


async def test_old_dead_sandboxes_of_a_pod_go_but_the_newest_stays(cri, fake):
    clock = Clock()
    first, _ = await run_pod(cri, fake, "u1", {}, ready=False)
    second, _ = await run_pod(cri, fake, "u1", {}, ready=False)
    with_container, _ = await run_pod(cri, fake, "u1", {"app": "orch.local/busybox:1"}, ready=False)
    for n, sid in enumerate((first, with_container, second)):
        fake.sandboxes[sid].created_at = int((clock.now - 300 + n * 10) * 1e9)
    result = await container_gc(cri, clock, {"u1"}, max_per_pod_container=-1).garbage_collect()
    # second is the newest (kept); with_container still has a container (active).
    assert result.sandboxes == [first]
    assert set(fake.sandboxes) == {second, with_container}
