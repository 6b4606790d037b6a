"""Images for containers: pull policies, serialized pulls, registry rate limits, pull back-off.

containerd 1.6's PullImage contacts the registry even when the image is present
(and fails offline), so ``IfNotPresent`` and ``Never`` ask ``ImageStatus`` first
and only ``Always`` (or a missing image) pulls. Errors carry upstream's waiting
reasons: ``ErrImageNeverPull``, ``ErrImagePull``, ``ImagePullBackOff``,
``InvalidImageName``.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Callable

from cri import api_pb2 as pb
from cri.client import CriError, ImagePullError

from .. import logging as agent_logging
from .backoff import Backoff
from .credentialprovider import CredentialProviders
from .interfaces import ImageService

__all__ = ["ImageError", "ImageManager", "default_pull_policy"]

log = agent_logging.get_logger("images")

_REFERENCE = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


class ImageError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def default_pull_policy(image: str) -> str:
    """Upstream's defaulting: ``Always`` for ``:latest`` or no tag, else ``IfNotPresent``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


class _TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.clock = clock
        self.stamp = clock()

    def try_take(self) -> bool:
        if self.qps <= 0:
            return True
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class ImageManager:
    def __init__(
        self,
        cri: ImageService,
        *,
        serialize: bool = True,
        qps: float = 5,
        burst: int = 10,
        backoff: Backoff | None = None,
        credentials: CredentialProviders | None = None,
    ) -> None:
        self.cri = cri
        self.credentials = credentials  # --image-credential-provider-config plugins
        self._lock = asyncio.Lock() if serialize else None
        self._bucket = _TokenBucket(qps, burst)
        self.backoff = backoff or Backoff()
        self.backoff_since: dict[tuple, float] = {}  # when the last failed pull of a key happened
        self.on_event: Callable[[str, str, str], None] = lambda reason, image, message: None

    async def ensure(
        self,
        image: str,
        policy: str,
        *,
        pod_uid: str,
        container: str,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str:
        """Make the image present per the policy; returns the image reference (ID)."""
        if not image or not _REFERENCE.match(image.lower()):
            raise ImageError(
                "InvalidImageName", f'Failed to apply default image tag "{image}": couldn\'t parse image reference'
            )
        policy = policy or default_pull_policy(image)
        present = await self.cri.image_status(image)
        if policy == "Never":
            if present is None:
                raise ImageError(
                    "ErrImageNeverPull", f'Container image "{image}" is not present with pull policy of Never'
                )
            return present.id
        if policy == "IfNotPresent" and present is not None:
            return present.id
        key = (pod_uid, container, image)
        wait = self.backoff.remaining(key, self.backoff_since.get(key, 0.0))
        if wait > 0:
            raise ImageError("ImagePullBackOff", f'Back-off pulling image "{image}"')
        if not self._bucket.try_take():
            raise ImageError("ErrImagePull", "pull QPS exceeded")
        self.on_event("Pulling", image, f'Pulling image "{image}"')
        t0 = time.monotonic()
        auths = await self.credentials.auth_configs(image) if self.credentials is not None else []
        try:
            if self._lock is not None:
                async with self._lock:
                    ref = await self._pull(image, auths, sandbox_config)
            else:
                ref = await self._pull(image, auths, sandbox_config)
        except (ImagePullError, CriError) as exc:
            self.backoff.next(key)
            self.backoff_since[key] = time.time()
            raise ImageError("ErrImagePull", f'failed to pull image "{image}": {exc.details or exc}') from None
        self.backoff.reset(key)
        self.backoff_since.pop(key, None)
        self.on_event("Pulled", image, f'Successfully pulled image "{image}" in {time.monotonic() - t0:.3f}s')
        return ref

    async def _pull(self, image: str, auths: list[pb.AuthConfig], sandbox_config: pb.PodSandboxConfig | None) -> str:
        """Anonymously without credentials; else with each in turn until one works (the last error otherwise)."""
        if not auths:
            return await self.cri.pull_image(image, sandbox_config=sandbox_config)
        for auth in auths[:-1]:
            try:
                return await self.cri.pull_image(image, auth, sandbox_config=sandbox_config)
            except ImagePullError:
                log.v(2).info("Pull with one credential failed; trying the next", image=image)
        return await self.cri.pull_image(image, auths[-1], sandbox_config=sandbox_config)
