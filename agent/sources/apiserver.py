"""The API-server pod source: the pods bound to this node, from a watch.

:class:`ApiPodSource` watches the pods whose ``spec.nodeName`` is this node
through an informer and hands their set to the pod config merge as the ``api``
source (``Op.SET`` snapshots), as the file and URL sources do. Mirror pods are
not pods to run: the source hands them to the pod manager
(:class:`agent.podmanager.PodManager`), which keeps them in step with the
static pods.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Protocol

from agent import logging as agent_logging
from agent import pods as podutil
from agent.client.informer import Informer
from agent.client.interface import InformerInterface
from agent.client.rest import ApiClient
from agent.pods import SOURCE_API, Op, PodSink, PodUpdate, is_mirror

__all__ = ["ApiPodSource", "MirrorPodSink"]

log = agent_logging.get_logger("sources")


class MirrorPodSink(Protocol):
    """Who is told about the mirror pods in the API (the pod manager)."""

    def set_mirror_pods(self, mirrors: dict[str, dict]) -> None: ...


class ApiPodSource:
    """Pods bound to this node, from a watch, as SET snapshots of the ``api`` source."""

    def __init__(
        self,
        client: ApiClient,
        node_name: str,
        config: PodSink,
        *,
        mirrors: MirrorPodSink | None = None,
        informer_factory: Callable[..., InformerInterface] | None = None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.config = config
        self.mirrors = mirrors
        factory: Callable[..., InformerInterface] = informer_factory or Informer
        self.informer = factory(
            client, "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node_name}"}, name="pods"
        )
        self.informer.add_handler(on_add=self._changed, on_update=self._changed, on_delete=self._changed)
        self._pending = asyncio.Event()

    def _changed(self, *objs: Any) -> None:
        self._pending.set()

    def snapshot(self) -> list[dict]:
        """The pods to run, the informer's own objects: the merge only reads them and copies
        what it keeps (a copy of every pod of the node on every event was most of the
        agent's CPU while pods came and went)."""
        return [p for p in self.informer.cache.values() if not is_mirror(p)]

    def mirror_pods(self) -> dict[str, dict]:
        return {podutil.full_name(p): p for p in self.informer.cache.values() if is_mirror(p)}

    async def run(self) -> None:
        runner = asyncio.create_task(self.informer.run(), name="pod-informer")
        try:
            await self.informer.wait_synced()
            while True:
                if runner.done():
                    runner.result()
                self._pending.clear()
                self.config.push(PodUpdate.make(Op.SET, SOURCE_API, self.snapshot()))
                if self.mirrors is not None:
                    self.mirrors.set_mirror_pods(self.mirror_pods())
                await self._pending.wait()
                await asyncio.sleep(0.01)  # coalesce a burst of events into one SET
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
