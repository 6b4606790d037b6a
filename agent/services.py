"""The Services the node's pods get environment variables for (cluster mode).

Upstream's agent keeps every Service of the cluster in a list + watch cache and renders
``<NAME>_SERVICE_HOST`` and friends from it when a container starts. Until that
cache has been listed once, a container of a pod from the API server is not started
(its config fails with a message saying so, and is retried): otherwise a pod could
start without the ``ORCH_SERVICE_*`` variables of the ``orch`` Service, which
in-cluster clients read. Static pods do not wait.
"""

from __future__ import annotations

import asyncio
from typing import Mapping

from . import pods as podutil
from .client.informer import Informer
from .client.rest import ApiClient
from .runtime.env import MASTER_SERVICE_NAMESPACE, service_environment
from .runtime.errors import REASON_CREATE_CONTAINER_CONFIG, PodConfigError

__all__ = ["ServiceCache", "NOT_SYNCED"]

NOT_SYNCED = "services have not yet been read at least once, cannot construct envvars"


class ServiceCache:
    """Every Service, through one informer over ``/api/v1/services``; the node's service
    proxy adds its handlers to the same informer (one Services watch per node)."""

    def __init__(self, client: ApiClient, master_namespace: str = MASTER_SERVICE_NAMESPACE) -> None:
        self.informer = Informer(client, "/api/v1/services", name="services")
        self.master_namespace = master_namespace  # --master-service-namespace

    async def run(self) -> None:
        await self.informer.run()

    def start(self) -> asyncio.Task:
        return asyncio.ensure_future(self.run())

    def env_for(self, pod: dict) -> Mapping[str, str]:
        """The pod's service variables; raises PodConfigError before the first list
        (except for static pods, which get what is known)."""
        if not self.informer.synced and not podutil.is_static(pod):
            raise PodConfigError(REASON_CREATE_CONTAINER_CONFIG, NOT_SYNCED)
        enable = podutil.spec(pod).get("enableServiceLinks")
        return service_environment(
            list(self.informer.cache.values()),
            podutil.namespace(pod),
            enable is None or bool(enable),
            self.master_namespace,
        )
