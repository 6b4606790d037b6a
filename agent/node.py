"""The pod side of a running agent, built from its configuration.

:class:`NodeAgent` assembles the parts of the data flow (DESIGN.md) and hands
the process its supervised tasks, in start order:

``pod-sources`` (file and URL sources feeding the pod config merge) →
``agent-server`` (the HTTPS read-only view) → the pipeline (pod workers, PLEG,
housekeeping, log rotation), which the process runs as its sync loop.

Construction does the start-up work that may fail with a clear message
(cgroups and the QoS tree, node allocatable): the process turns
:class:`agent.process.StartError` into a failed start.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from apiserver_min.api import names
from cri.client import CriClient

from . import logging as agent_logging
from . import pods as podutil
from .cm import CgroupError, ContainerManager
from .events import EventRecorder
from .logs import LogRotator
from .pods import SOURCE_FILE, SOURCE_HTTP
from .prober import ProbeManager
from .prober import hooks as prober_hooks
from .runtime.backoff import Backoff
from .runtime.context import DEFAULT_RUNTIME_ENDPOINT, NodeContext, node_name_from
from .runtime.images import ImageManager
from .runtime.manager import RuntimeManager
from .runtime.volumes import VolumeManager
from .server import AgentServer, LogTarget
from .sources.file import FileSource
from .sources.merge import PodConfig
from .sources.url import UrlSource
from .workers import PodPipeline, default_host_ip

__all__ = ["NodeAgent", "NodeStartError"]

log = agent_logging.get_logger("node")


class NodeStartError(RuntimeError):
    """The node side cannot start; the message says why and what to change."""


class NodeAgent:
    def __init__(self, cfg, *, version: str = "", beat: Callable[[], None] = lambda: None,
                 tick: float = 1.0, container_manager: ContainerManager | None = None) -> None:
        self.cfg = cfg
        self.version = version
        self.node_name = node_name_from(cfg)
        self.host_ip = default_host_ip(cfg.node_ip)
        try:
            self.cgroups = container_manager or ContainerManager(cfg)
            self.cgroups.start()
        except CgroupError as exc:
            raise NodeStartError(f"failed to start the container manager: {exc}") from None
        allocatable = self.cgroups.allocatable()
        self.ctx = NodeContext.from_config(cfg, node_name=self.node_name, host_ip=self.host_ip,
                                           allocatable_cpu_millis=allocatable.get("cpu", 0),
                                           allocatable_memory=allocatable.get("memory", 0))
        endpoint = cfg.container_runtime_endpoint or DEFAULT_RUNTIME_ENDPOINT
        self.cri = CriClient(endpoint, cfg.image_service_endpoint or None,
                             request_timeout=cfg.runtime_request_timeout.total_seconds() or 120.0)
        self.events = EventRecorder(self.node_name)
        self.images = ImageManager(self.cri, serialize=cfg.serialize_image_pulls,
                                   qps=cfg.registry_qps, burst=cfg.registry_burst,
                                   backoff=Backoff())
        self.images.on_event = lambda reason, image, message: log.v(2).info(
            "Image", reason=reason, image=image, message=message)
        self.volumes = VolumeManager(self.ctx)
        self.pipeline: PodPipeline | None = None
        self.probes = ProbeManager(self.cri, self._probe_changed,
                                   on_event=lambda pod, container, type_, reason, message:
                                   self.events(pod, type_, reason, message),
                                   user_agent_version=_major_minor(version))
        self.runtime = RuntimeManager(self.cri, self.ctx, images=self.images, volumes=self.volumes,
                                      cgroups=self.cgroups, probes=self.probes, events=self.events,
                                      hooks=prober_hooks)
        self.config = PodConfig(self.node_name)
        sources = []
        self.sources: list = []
        if cfg.pod_manifest_path:
            sources.append(SOURCE_FILE)
            self.sources.append(FileSource(cfg.pod_manifest_path, self.node_name,
                                           cfg.file_check_frequency.total_seconds(), self.config))
        if cfg.manifest_url:
            sources.append(SOURCE_HTTP)
            self.sources.append(UrlSource(cfg.manifest_url, cfg.manifest_url_header, self.node_name,
                                          cfg.http_check_frequency.total_seconds(), self.config))
        max_size = int(cfg.container_log_max_size.value()) if hasattr(cfg.container_log_max_size, "value") \
            else int(cfg.container_log_max_size)
        rotator = LogRotator(self.cri, max_size=max_size, max_files=max(2, cfg.container_log_max_files))
        self.pipeline = PodPipeline(config=self.config, runtime=self.runtime, probes=self.probes,
                                    cgroups=self.cgroups, events=self.events, sources=tuple(sources),
                                    sync_frequency=cfg.sync_frequency.total_seconds(),
                                    host_ip=self.host_ip, rotator=rotator, beat=beat,
                                    tick=tick)
        self.server: AgentServer | None = None
        if cfg.enable_server:
            self.server = AgentServer(address=cfg.address, port=cfg.port, cert_dir=cfg.cert_dir,
                                      tls_cert_file=cfg.tls_cert_file,
                                      tls_private_key_file=cfg.tls_private_key_file,
                                      node_name=self.node_name, pods=self.pipeline.pods_view,
                                      locate_log=self.locate_log, problems=self.config.problems)
        log.info("Node agent assembled", node=self.node_name, runtime=endpoint,
                 sources=",".join(sources) or "none", allocatable=allocatable)

    def _probe_changed(self, uid: str) -> None:
        if self.pipeline is not None:
            self.pipeline.wake(uid)

    # --- the read-only view's log lookup ----------------------------------------------

    def locate_log(self, namespace: str, name: str, container: str, previous: bool) -> LogTarget | None:
        assert self.pipeline is not None
        state = self.pipeline.find(namespace, name)
        if state is None or state.rp is None:
            return None
        info = state.rp.previous(container) if previous else state.rp.latest(container)
        if info is None or not info.log_path:
            return None
        cid = info.id

        def is_running() -> bool:
            current = state.rp
            return current is not None and any(c.id == cid and c.running for c in current.containers)

        return LogTarget(info.log_path, is_running)

    # --- tasks --------------------------------------------------------------------------

    async def run_sources(self) -> None:
        if not self.sources:
            await asyncio.Event().wait()
        await asyncio.gather(*(s.run() for s in self.sources))

    async def run_server(self, started: asyncio.Future | None = None) -> None:
        assert self.server is not None
        await self.server.serve(started)

    async def run_pipeline(self) -> None:
        assert self.pipeline is not None
        try:
            await self.pipeline.run()
        finally:
            await self.probes.close()
            await self.cri.close()


def _major_minor(version: str) -> str:
    parts = version.lstrip("v").split(".")
    if len(parts) >= 2 and parts[0].isdigit():
        return f"{parts[0]}.{parts[1]}"
    return "1.27"


_ = (names, podutil)
