"""Image garbage collection: keep the image file system under the thresholds.

The policy is upstream's (``--image-gc-high-threshold``, ``--image-gc-low-threshold``,
``--minimum-image-ttl-duration``):

* every :data:`IMAGE_GC_PERIOD` the runtime's images are listed and remembered in
  memory: when each was first seen and when it was last seen in use. An image is in
  use while any container (running or exited) was made from it; the runtime's
  sandbox image and ``--pod-infra-container-image`` always count as in use, and
  images the runtime marks ``pinned`` are never touched. Images found by the very
  first listing get an unknown ("long ago") first-seen time, as upstream: an agent
  restart does not reset their age;
* the usage is that of the file system holding the runtime's images (the mount
  point ``ImageFsInfo`` names, measured with statvfs): ``100 - available/capacity``
  in whole percent. At or above the high threshold, unused images are removed, the
  least recently used first (then the first seen first), skipping those first seen
  less than the minimum age ago, until the bytes needed to get down to the low
  threshold are freed;
* when not enough could be freed, a ``FreeDiskSpaceFailed`` warning goes to the
  node; a pass that fails twice in a row reports ``ImageGCFailed``.

``--image-gc-high-threshold=100`` turns the collector off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Awaitable, Callable, Iterable

from cri import api_pb2 as pb
from cri.client import CriError

from .. import logging as agent_logging

__all__ = ["IMAGE_GC_PERIOD", "ImageGCError", "ImageGCPolicy", "ImageGCManager", "ImageRecord", "image_fs_usage"]

log = agent_logging.get_logger("imagegc")

IMAGE_GC_PERIOD = 300.0  # upstream's ImageGCPeriod (5 minutes); no config field

# (pod or None, event type, reason, message), as the agent's EventRecorder takes them
EventSink = Callable[[dict | None, str, str, str], None]
# mount point -> (capacity bytes, available bytes)
FsUsage = Callable[[str], tuple[int, int]]


class ImageGCError(Exception):
    """A pass that could not do what the policy asks; the message says why."""


@dataclasses.dataclass(frozen=True)
class ImageGCPolicy:
    high_threshold: int = 85  # percent
    low_threshold: int = 80  # percent
    min_age: float = 120.0  # seconds

    @property
    def disabled(self) -> bool:
        return self.high_threshold >= 100

    def problems(self) -> list[str]:
        out = []
        if not 0 <= self.high_threshold <= 100:
            out.append(f"invalid high threshold {self.high_threshold}: must be between 0 and 100")
        if not 0 <= self.low_threshold <= 100:
            out.append(f"invalid low threshold {self.low_threshold}: must be between 0 and 100")
        if self.low_threshold > self.high_threshold:
            out.append(
                f"low threshold {self.low_threshold} must not be greater than high threshold {self.high_threshold}"
            )
        if self.min_age < 0:
            out.append(f"invalid minimum age {self.min_age:g}s: must not be negative")
        return out


@dataclasses.dataclass
class ImageRecord:
    first_detected: float  # wall clock seconds; 0.0 for images present at the first listing
    last_used: float = 0.0  # 0.0: never seen in use
    size: int = 0
    pinned: bool = False
    tags: tuple[str, ...] = ()


def image_fs_usage(mountpoint: str) -> tuple[int, int]:
    """(capacity, available) bytes of the file system holding ``mountpoint``. A mount point
    the runtime names but has not created yet lives on its parent's file system."""
    path = mountpoint or "/"
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


class ImageGCManager:
    """Tracks image use and frees the image file system (see the module docstring).

    ``kept`` returns the image names never to remove (the runtime manager's
    ``images_kept_from_gc``); ``prepare`` is awaited before each pass (the runtime
    manager's ``learn_sandbox_image``, so the runtime's sandbox image is known even
    before the first pod).
    """

    def __init__(
        self,
        cri,
        policy: ImageGCPolicy,
        *,
        kept: Callable[[], Iterable[str]] = tuple,
        prepare: Callable[[], Awaitable[object]] | None = None,
        events: EventSink | None = None,
        fs_usage: FsUsage = image_fs_usage,
        clock: Callable[[], float] = time.time,
    ) -> None:
        problems = policy.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.cri = cri
        self.policy = policy
        self.kept = kept
        self.prepare = prepare
        self.events: EventSink = events or (lambda pod, type_, reason, message: None)
        self.fs_usage = fs_usage
        self.clock = clock
        self.records: dict[str, ImageRecord] = {}
        self.initialized = False
        self.passes = 0

    # -- tracking --------------------------------------------------------------------

    async def _images_in_use(self, images: list[pb.Image]) -> set[str]:
        """IDs of the images that containers use, plus the sandbox and kept images."""
        if self.prepare is not None:
            await self.prepare()
        refs: set[str] = set()
        for name in self.kept():
            try:
                status = await self.cri.image_status(name)
            except CriError as exc:
                log.v(4).info("Cannot resolve a kept image", image=name, err=exc.details or exc)
                status = None
            refs.add(name)
            if status is not None:
                refs.add(status.id)
        for c in await self.cri.list_containers():
            for ref in (c.image_ref, c.image.image):
                if ref:
                    refs.add(ref)
        in_use = set()
        for image in images:
            names = {image.id, *image.repo_tags, *image.repo_digests}
            if names & refs:
                in_use.add(image.id)
        return in_use

    async def detect_images(self, detect_time: float) -> set[str]:
        """List the images, update the records; the IDs of images in use."""
        images = await self.cri.list_images()
        in_use = await self._images_in_use(images)
        now = self.clock()
        present = set()
        for image in images:
            present.add(image.id)
            record = self.records.get(image.id)
            if record is None:
                log.v(5).info("Image is new", image_id=image.id)
                record = self.records[image.id] = ImageRecord(first_detected=detect_time)
            if image.id in in_use:
                record.last_used = now
            record.size = int(image.size)
            record.pinned = bool(image.pinned)
            record.tags = tuple(image.repo_tags)
        for gone in set(self.records) - present:
            log.v(5).info("Image is no longer present; forgetting it", image_id=gone)
            del self.records[gone]
        return in_use

    async def detect(self) -> None:
        """One periodic listing; the first successful one dates images "long ago"."""
        await self.detect_images(self.clock() if self.initialized else 0.0)
        self.initialized = True

    # -- collecting ------------------------------------------------------------------------

    async def usage(self) -> tuple[int, int, int]:
        """(usage percent, capacity, available) of the image file system."""
        info = await self.cri.image_fs_info()
        if not info.image_filesystems:
            raise ImageGCError("the container runtime reports no image file system")
        mount = info.image_filesystems[0].fs_id.mountpoint
        try:
            capacity, available = await asyncio.to_thread(self.fs_usage, mount)
        except OSError as exc:
            raise ImageGCError(f"cannot measure the image file system at {mount}: {exc.strerror or exc}") from None
        if available > capacity:
            log.info("Availability is larger than capacity", available=available, capacity=capacity)
            available = capacity
        if capacity <= 0:
            message = "invalid capacity 0 on image filesystem"
            self.events(None, "Warning", "InvalidDiskCapacity", message)
            raise ImageGCError(message)
        return 100 - (available * 100) // capacity, capacity, available

    async def garbage_collect(self) -> int:
        """One pass: free space when usage reached the high threshold. Bytes freed."""
        self.passes += 1
        usage, capacity, available = await self.usage()
        if usage < self.policy.high_threshold:
            log.v(4).info("Image file system usage under the high threshold", usage=usage)
            return 0
        to_free = capacity * (100 - self.policy.low_threshold) // 100 - available
        log.info(
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
            usage=usage,
            high_threshold=self.policy.high_threshold,
            amount_to_free=to_free,
            low_threshold=self.policy.low_threshold,
        )
        freed = await self.free_space(to_free, self.clock())
        if freed < to_free:
            message = (
                f"Failed to garbage collect required amount of images. Attempted to free {to_free} bytes, "
                f"but only found {freed} bytes eligible to free."
            )
            self.events(None, "Warning", "FreeDiskSpaceFailed", message)
            raise ImageGCError(message)
        return freed

    async def free_space(self, to_free: int, free_time: float) -> int:
        """Remove unused images, least recently used first, until ``to_free`` bytes are freed."""
        in_use = await self.detect_images(free_time)
        candidates = []
        for image_id, record in self.records.items():
            if image_id in in_use:
                log.v(5).info("Image is being used", image_id=image_id)
                continue
            if record.pinned:
                log.v(5).info("Image is pinned, skipping garbage collection", image_id=image_id)
                continue
            candidates.append((record.last_used, record.first_detected, image_id))
        candidates.sort()
        freed = 0
        errors = []
        for last_used, first_detected, image_id in candidates:
            record = self.records[image_id]
            if last_used >= free_time:
                log.v(5).info("Image was used too recently", image_id=image_id)
                continue
            if free_time - first_detected < self.policy.min_age:
                log.v(5).info(
                    "Image is younger than the minimum age, not eligible for garbage collection",
                    image_id=image_id,
                    age=f"{free_time - first_detected:.0f}s",
                    min_age=f"{self.policy.min_age:g}s",
                )
                continue
            log.info("Removing image to free bytes", image_id=image_id, tags=",".join(record.tags), size=record.size)
            try:
                await self.cri.remove_image(image_id)
            except CriError as exc:
                errors.append(f"{image_id}: {exc.details or exc}")
                continue
            del self.records[image_id]
            freed += record.size
            if freed >= to_free:
                break
        if errors:
            raise ImageGCError(
                f"wanted to free {to_free} bytes, but freed {freed} bytes space with errors in image deletion: "
                + "; ".join(errors)
            )
        return freed

    async def delete_unused_images(self) -> int:
        """Every unused image old enough, whatever the thresholds (the eviction manager's
        node-level reclaim, as upstream's DeleteUnusedImages). Bytes freed."""
        log.info("Attempting to delete unused images")
        return await self.free_space(1 << 62, self.clock())

    # -- the task ------------------------------------------------------------------------

    async def run(self, period: float = IMAGE_GC_PERIOD) -> None:
        """Detect at once, then every ``period`` detect and collect, until cancelled.

        The first collection comes one period after start: upstream's first attempt at
        start almost always fails while its stats warm up, and judging images before the
        node's pods had a chance to create their containers would remove their images.
        """
        if self.policy.disabled:
            log.v(2).info("ImageGCHighThresholdPercent is set 100, Disable image GC")
            await asyncio.Event().wait()
        failed_before = False
        while True:
            try:
                await self.detect()
            except CriError as exc:
                log.info("Failed to monitor images", err=exc.details or exc)
            await asyncio.sleep(period)
            try:
                await self.garbage_collect()
            except (ImageGCError, CriError) as exc:
                message = str(exc) if isinstance(exc, ImageGCError) else (exc.details or str(exc))
                if failed_before:
                    log.error("Image garbage collection failed multiple times in a row", err=message)
                    self.events(None, "Warning", "ImageGCFailed", message)
                else:
                    log.error("Image garbage collection failed once", err=message)
                failed_before = True
            else:
                log.v(1 if failed_before else 4).info("Image garbage collection succeeded")
                failed_before = False
