"""ClusterTrustBundleAttest: upstream guards ClusterTrustBundle objects (a bundle
naming a signer may be written only by users with the ``attest`` verb on that
signer). This server does not serve ClusterTrustBundles (upstream's API is alpha and
off by default in v1.27), so, as upstream with that API disabled, enabling the plugin
is accepted and it has nothing to act on: the chain never calls it, and the server
says so at start."""

from __future__ import annotations

import logging
from typing import Any

from ..chain import Attributes

log = logging.getLogger("orch-apiserver.admission")

NOT_SERVED_NOTE = (
    "admission plugin ClusterTrustBundleAttest is enabled, but this server does not serve ClusterTrustBundles; "
    "it has nothing to act on"
)


class ClusterTrustBundleAttest:
    name = "ClusterTrustBundleAttest"
    resources: frozenset[tuple[str, str]] = frozenset()

    def __init__(self) -> None:
        log.info(NOT_SERVED_NOTE)

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        return None


def plugin(server: Any) -> ClusterTrustBundleAttest:
    return ClusterTrustBundleAttest()
