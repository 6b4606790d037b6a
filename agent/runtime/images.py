"""Images for containers: pull policies, serialized pulls, registry rate limits, pull back-off.

containerd 1.6's PullImage contacts the registry even when the image is present
(and fails offline), so ``IfNotPresent`` and ``Never`` ask ``ImageStatus`` first
and only ``Always`` (or a missing image) pulls. Errors carry upstream's waiting
reasons: ``ErrImageNeverPull``, ``ErrImagePull``, ``ImagePullBackOff``,
``InvalidImageName``. Registry credentials come from the pod's ``imagePullSecrets``,
the node's Docker config file and the credential provider plugins (:mod:`.keyring`).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable, Mapping, Sequence

from cri import api_pb2 as pb
from cri.client import CriError, ImagePullError

from .. import logging as agent_logging
from .backoff import Backoff
from .credentialprovider import CredentialProviders
from .interfaces import ImageService
from .keyring import DockerConfigError, Keyring, NodeDockerConfig, pull_secret_configs, repository

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
        node_config: NodeDockerConfig | None = None,
    ) -> None:
        self.cri = cri
        self.credentials = credentials  # --image-credential-provider-config plugins
        self.node_config = node_config  # the node's own Docker config file
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
        pull_secrets: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """Make the image present per the policy; returns the image reference (ID).
        ``pull_secrets`` are the pod's image pull Secrets (the objects)."""
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
        try:
            auths = await self.auth_configs(image, pull_secrets)
            if self._lock is not None:
                async with self._lock:
                    ref = await self._pull(image, auths, sandbox_config)
            else:
                ref = await self._pull(image, auths, sandbox_config)
        except (ImagePullError, CriError, DockerConfigError) as exc:
            self.backoff.next(key)
            self.backoff_since[key] = time.time()
            detail = getattr(exc, "details", "") or exc
            raise ImageError("ErrImagePull", f'failed to pull image "{image}": {detail}') from None
        self.backoff.reset(key)
        self.backoff_since.pop(key, None)
        self.on_event("Pulled", image, f'Successfully pulled image "{image}" in {time.monotonic() - t0:.3f}s')
        return ref

    async def auth_configs(self, image: str, pull_secrets: Sequence[Mapping[str, Any]] = ()) -> list[pb.AuthConfig]:
        """Upstream's order: the credentials of the pod's pull secrets, then the node's own
        (its Docker config file and the credential provider plugins, one keyring), each the
        most specific location first. A pull secret that cannot be read raises
        DockerConfigError."""
        repo = repository(image)
        own = Keyring(pull_secret_configs(pull_secrets)).lookup(repo)
        node = Keyring()
        if self.node_config is not None:
            node.add(self.node_config.get())
        if self.credentials is not None:
            for config in await self.credentials.docker_configs(repo):
                node.add(config)
        return [c.auth_config() for c in own + node.lookup(repo)]

    async def _pull(self, image: str, auths: list[pb.AuthConfig], sandbox_config: pb.PodSandboxConfig | None) -> str:
        """Anonymously when no credential applies; else with each in turn until one works
        (the last error otherwise; as upstream, no anonymous attempt then)."""
        if not auths:
            return await self.cri.pull_image(image, sandbox_config=sandbox_config)
        for auth in auths[:-1]:
            try:
                return await self.cri.pull_image(image, auth, sandbox_config=sandbox_config)
            except ImagePullError:
                log.v(2).info("Pull with one credential failed; trying the next", image=image)
        return await self.cri.pull_image(image, auths[-1], sandbox_config=sandbox_config)
