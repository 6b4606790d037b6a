"""The pod side of a running agent, built from its configuration.

:class:`NodeAgent` assembles the parts of the data flow (DESIGN.md) and hands
the process its supervised tasks, in start order:

``pod-sources`` (file and URL sources feeding the pod config merge) →
``agent-server`` (the HTTPS read-only view) → the pipeline (pod manager, pod
workers, PLEG, housekeeping, log rotation), which the process runs as its sync
loop. In API-server mode :meth:`NodeAgent.run_cluster` adds the API-server pod
source, the status manager, the pod manager's mirror pods, node status, lease,
events and certificate rotation.

Construction does the start-up work that may fail with a clear message
(cgroups and the QoS tree, node allocatable): the process turns
:class:`agent.process.StartError` into a failed start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import ssl
from typing import TYPE_CHECKING, Callable

from apiserver_min.api import names
from cri.api_pb2 import LinuxContainerResources
from cri.client import CriClient, CriError

from . import logging as agent_logging
from . import pods as podutil
from . import predicates
from .cm import CgroupError, ContainerManager
from .cm.devicemanager import DeviceManager
from .events import EventRecorder
from .eviction import EvictionConfig, EvictionManager, ThresholdError, evictor, parse_thresholds
from .images import CONTAINER_GC_PERIOD, IMAGE_GC_PERIOD, ContainerGC, ContainerGCPolicy, ImageGCManager, ImageGCPolicy
from .metrics import AgentMetrics
from .nodeshutdown import SHUTDOWN_STATE_FILE, ShutdownManager, budgets_from_config
from .podmanager import PodManager
from .pods import SOURCE_API, SOURCE_FILE, SOURCE_HTTP
from .prober import ProbeManager
from .prober import hooks as prober_hooks
from .runtime.backoff import Backoff
from .runtime.context import DEFAULT_RUNTIME_ENDPOINT, NodeContext, node_name_from
from .runtime.credentialprovider import CredentialProviderError, CredentialProviders
from .runtime.credentialprovider import load_config as load_credential_config
from .runtime.images import ImageManager
from .runtime.keyring import NodeDockerConfig
from .runtime.manager import RuntimeManager
from .runtime.volumes import VolumeManager
from .server import AgentServer, LogTarget, RuntimeStreaming, configz_document
from .server.auth import Authenticator, TokenWebhookAuthenticator, WebhookAuthorizer, X509Authenticator, api_review
from .server.logs import LogRotator
from .server.podresources import MemoryBlock, PodResourcesServer, ResourceProviders
from .server.stats import StatsProvider
from .sources.file import FileSource
from .sources.merge import PodConfig
from .status.nodestatus import (
    NodeStatusManager,
    node_addresses,
    node_hostname,
    node_labels,
    node_taints,
    runtime_version_from,
)
from .workers import PodPipeline, default_host_ip

if TYPE_CHECKING:
    from .services import ServiceCache

__all__ = ["NodeAgent", "NodeStartError"]

log = agent_logging.get_logger("node")


class NodeStartError(RuntimeError):
    """The node side cannot start; the message says why and what to change."""


class NodeAgent:
    def __init__(
        self,
        cfg,
        *,
        version: str = "",
        beat: Callable[[], None] = lambda: None,
        tick: float = 1.0,
        container_manager: ContainerManager | None = None,
        pod_logs_dir: str = "",
    ) -> None:
        """``container_manager`` and ``pod_logs_dir`` replace the ones from the flags
        (and upstream's fixed ``/var/log/pods``): the scale benchmark's hollow nodes,
        many in one process, each have their own (tests/bench/hollow.py)."""
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
        self.ctx = NodeContext.from_config(
            cfg,
            node_name=self.node_name,
            host_ip=self.host_ip,
            allocatable_cpu_millis=allocatable.get("cpu", 0),
            allocatable_memory=allocatable.get("memory", 0),
        )
        if pod_logs_dir:
            self.ctx = dataclasses.replace(self.ctx, pod_logs_dir=pod_logs_dir)
        endpoint = cfg.container_runtime_endpoint or DEFAULT_RUNTIME_ENDPOINT
        self.cri = CriClient(
            endpoint,
            cfg.image_service_endpoint or None,
            request_timeout=cfg.runtime_request_timeout.total_seconds() or 120.0,
        )
        self.events = EventRecorder(self.node_name)
        self.images = ImageManager(
            self.cri,
            serialize=cfg.serialize_image_pulls,
            qps=cfg.registry_qps,
            burst=cfg.registry_burst,
            backoff=Backoff(),
            credentials=self._credential_providers(),
            node_config=NodeDockerConfig(cfg.root_dir),
        )
        self.images.on_event = lambda reason, image, message: log.v(2).info(
            "Image", reason=reason, image=image, message=message
        )
        self.volumes = VolumeManager(self.ctx)
        self.objects = None  # cluster mode: the ObjectCache of referenced ConfigMaps/Secrets
        self.pipeline: PodPipeline | None = None
        self.probes = ProbeManager(
            self.cri,
            self._probe_changed,
            on_event=lambda pod, container, type_, reason, message: self.events(pod, type_, reason, message),
            user_agent_version=_major_minor(version),
        )
        self.runtime = RuntimeManager(
            self.cri,
            self.ctx,
            images=self.images,
            volumes=self.volumes,
            cgroups=self.cgroups,
            probes=self.probes,
            events=self.events,
            hooks=prober_hooks,
        )
        # The container GC below keeps the dead instances the policy asks for; no pruning at start.
        self.runtime.dead_containers_kept = None
        self.runtime.cpusets = self.cgroups
        self.image_gc = ImageGCManager(
            self.cri,
            ImageGCPolicy(
                high_threshold=cfg.image_gc_high_threshold,
                low_threshold=cfg.image_gc_low_threshold,
                min_age=cfg.minimum_image_ttl_duration.total_seconds(),
            ),
            kept=self.runtime.images_kept_from_gc,
            prepare=self.runtime.learn_sandbox_image,
            events=self.events,
        )
        self.config = PodConfig(self.node_name)
        sources = []
        self.sources: list = []
        self.cluster_mode = str(cfg.mode) == "api-server"
        if self.cluster_mode:
            sources.append(SOURCE_API)
            self._check_connection_config()
        if cfg.pod_manifest_path:
            sources.append(SOURCE_FILE)
            self.sources.append(
                FileSource(cfg.pod_manifest_path, self.node_name, cfg.file_check_frequency.total_seconds(), self.config)
            )
        if cfg.manifest_url:
            from .sources.url import UrlSource  # loaded by the nodes that use one, as the API source

            sources.append(SOURCE_HTTP)
            self.sources.append(
                UrlSource(
                    cfg.manifest_url,
                    cfg.manifest_url_header,
                    self.node_name,
                    cfg.http_check_frequency.total_seconds(),
                    self.config,
                )
            )
        max_size = (
            int(cfg.container_log_max_size.value())
            if hasattr(cfg.container_log_max_size, "value")
            else int(cfg.container_log_max_size)
        )
        rotator = LogRotator(self.cri, max_size=max_size, max_files=max(2, cfg.container_log_max_files))
        self.podmanager = PodManager()
        self.pipeline = PodPipeline(
            config=self.config,
            runtime=self.runtime,
            podmanager=self.podmanager,
            probes=self.probes,
            cgroups=self.cgroups,
            events=self.events,
            sources=tuple(sources),
            sync_frequency=cfg.sync_frequency.total_seconds(),
            host_ip=self.host_ip,
            rotator=rotator,
            beat=beat,
            tick=tick,
            keep_terminated_pod_volumes=cfg.keep_terminated_pod_volumes,
        )
        pipeline = self.pipeline
        # Device plugins: the allocations of a previous run are known before any pod is admitted.
        self.devices = DeviceManager(
            cfg.root_dir, active_pods=pipeline.pods_holding_resources, sources_ready=pipeline.sources_seen
        )
        self.devices.load_checkpoint()
        pipeline.devices = self.devices
        self.runtime.devices = self.devices
        self.pod_resources: PodResourcesServer | None = None
        if _feature(cfg, "KubeletPodResources"):
            cm = self.cgroups
            self.pod_resources = PodResourcesServer(
                cfg.root_dir,
                ResourceProviders(
                    pods=self.podmanager.pods,
                    devices=self.devices.container_devices,
                    allocatable_devices=self.devices.allocatable_devices,
                    update_devices=self.devices.update_allocated,
                    # The CPU and memory managers' exclusive CPUs and NUMA-placed memory.
                    cpu_ids=cm.exclusive_cpus,
                    allocatable_cpu_ids=cm.allocatable_cpus,
                    memory=lambda uid, c: [MemoryBlock(*b) for b in cm.memory_blocks(uid, c)],
                    allocatable_memory=lambda: [MemoryBlock(*b) for b in cm.allocatable_memory()],
                ),
                feature=lambda gate: _feature(cfg, gate),
            )
        self.node_status: NodeStatusManager | None = None  # cluster mode, once joined
        self.shutdown = ShutdownManager(
            budgets_from_config(cfg),
            pods=pipeline.active_pods,
            kill=self._kill_for_shutdown,
            events=self.events,
            node_changed=self._node_changed,
            disruption_conditions=cfg.feature_gates.enabled("PodDisruptionConditions"),
            state_file=(
                os.path.join(cfg.root_dir, SHUTDOWN_STATE_FILE)
                if cfg.feature_gates.enabled("GracefulNodeShutdownBasedOnPodPriority")
                else None
            ),
        )
        if self.shutdown.enabled:
            pipeline.admit_handlers.append(self.shutdown.admit)
        if isinstance(self.cgroups, ContainerManager):
            self.cgroups.add_device_manager(self.devices)
            self.cgroups.inactive_pod_uids = lambda: [
                s.uid
                for s in pipeline.pods.values()
                if s.rejected or s.terminating or (s.status or {}).get("phase") in ("Succeeded", "Failed")
            ]
        self.container_gc = ContainerGC(
            self.cri,
            ContainerGCPolicy(
                min_age=cfg.minimum_container_ttl_duration.total_seconds(),
                max_per_pod_container=cfg.maximum_dead_containers_per_container,
                max_containers=cfg.maximum_dead_containers,
            ),
            pod_known=pipeline.has_pod,
            sources_ready=pipeline.sources_seen,
            pod_logs_dir=self.ctx.pod_logs_dir,
            forget=self.runtime.forget_container,
            events=self.events,
        )
        self.client = None  # the API client, once joined (cluster mode)
        self.server: AgentServer | None = None
        self.read_only_server: AgentServer | None = None  # --read-only-port
        self.metrics = AgentMetrics(
            self.node_name,
            pods=lambda: list(self.pipeline.pods.values()),
            serving_cert_expiry=lambda: self.server.serving_cert_expiry if self.server is not None else None,
        )
        self.metrics.instrument(self.runtime)
        if self.shutdown.enabled and self.shutdown.state_file:
            self.metrics.graceful_shutdown(self.shutdown.metrics)
        self.stats = StatsProvider(
            node_name=self.node_name,
            root_dir=cfg.root_dir,
            cri=self.cri,
            cgroups=self.cgroups,
            pods=lambda: [(s.pod, s.rp) for s in self.pipeline.pods.values()],
            volume_stats_period=cfg.volume_stats_agg_period.total_seconds(),
        )
        self.eviction = self._eviction_manager()
        self.pipeline.admit_handlers.append(self.eviction.admit)
        self.pipeline.admit_handlers.append(self._admit_fit)
        if cfg.enable_server:
            authenticate, authorize, client_ca = self._server_auth()
            self.server = AgentServer(
                address=cfg.address,
                port=cfg.port,
                cert_dir=cfg.cert_dir,
                tls_cert_file=cfg.tls_cert_file,
                tls_private_key_file=cfg.tls_private_key_file,
                tls_cipher_suites=cfg.tls_cipher_suites,
                tls_min_version=cfg.tls_min_version,
                enable_system_log_handler=cfg.enable_system_log_handler,
                set_verbosity=agent_logging.set_verbosity if cfg.enable_debug_flags_handler else None,
                node_name=self.node_name,
                pods=self.pipeline.pods_view,
                locate_log=self.locate_log,
                problems=self.config.problems,
                authenticate=authenticate,
                authorize=authorize,
                client_ca=client_ca,
                enable_debugging_handlers=cfg.enable_debugging_handlers,
                running_pods=self.running_pods,
                stats=self.stats.summary,
                metrics=self.metrics.render,
                configz=lambda: configz_document(cfg),
                streaming=RuntimeStreaming(self.cri, self.pipeline.find),
            )
            if cfg.rotate_server_certificates and not cfg.tls_cert_file:
                self._use_issued_serving_certificate()
            if cfg.read_only_port:
                self.read_only_server = AgentServer(
                    address=cfg.address,
                    port=cfg.read_only_port,
                    cert_dir=cfg.cert_dir,
                    node_name=self.node_name,
                    pods=self.pipeline.pods_view,
                    locate_log=self.locate_log,
                    problems=self.config.problems,
                    enable_debugging_handlers=False,
                    stats=self.stats.summary,
                    metrics=self.metrics.render,
                    plain_http=True,
                )
        log.info(
            "Node agent assembled",
            node=self.node_name,
            runtime=endpoint,
            sources=",".join(sources) or "none",
            allocatable=allocatable,
        )

    def _credential_providers(self) -> CredentialProviders | None:
        cfg = self.cfg
        if not cfg.image_credential_provider_config:
            return None
        try:
            providers = load_credential_config(
                cfg.image_credential_provider_config, cfg.image_credential_provider_bin_dir
            )
        except CredentialProviderError as exc:
            raise NodeStartError(f"invalid --image-credential-provider-config: {exc}") from None
        return CredentialProviders(providers, cfg.image_credential_provider_bin_dir)

    def _eviction_manager(self) -> EvictionManager:
        cfg = self.cfg
        try:
            thresholds = parse_thresholds(
                cfg.eviction_hard,
                cfg.eviction_soft,
                cfg.eviction_soft_grace_period,
                cfg.eviction_minimum_reclaim,
                cfg.enforce_node_allocatable,
            )
        except ThresholdError as exc:
            raise NodeStartError(f"invalid eviction thresholds: {exc}") from None
        config = EvictionConfig(
            thresholds=tuple(thresholds),
            monitoring_interval=cfg.housekeeping_interval.total_seconds() or 10.0,
            pressure_transition_period=cfg.eviction_pressure_transition_period.total_seconds(),
            max_pod_grace_period=int(cfg.eviction_max_pod_grace_period),
            kernel_memcg_notification=bool(cfg.kernel_memcg_notification),
            disruption_conditions=bool(cfg.feature("PodDisruptionConditions")),
            local_storage_capacity_isolation=bool(cfg.local_storage_capacity_isolation),
        )
        pipeline = self.pipeline
        assert pipeline is not None
        manager = EvictionManager(
            config,
            stats=self.stats,
            active_pods=pipeline.active_pods,
            evict=evictor(pipeline.kill_pod),
            image_gc=self.image_gc,
            container_gc=self.container_gc,
            events=self.events,
            dedicated_image_fs=self._dedicated_image_fs,
            memcg_dirs=self._memcg_dirs,
        )
        manager.on_conditions_changed = self._node_changed
        return manager

    async def _dedicated_image_fs(self) -> bool:
        """Whether the runtime's images live on another file system than ``--root-dir``."""
        info = await self.cri.image_fs_info()
        if not info.image_filesystems:
            return False
        mount = info.image_filesystems[0].fs_id.mountpoint or self.cfg.root_dir

        def device(path: str) -> int:
            while path and not os.path.exists(path) and os.path.dirname(path) != path:
                path = os.path.dirname(path)
            return os.stat(path).st_dev

        root, images = await asyncio.to_thread(lambda: (device(self.cfg.root_dir), device(mount)))
        return root != images

    def _memcg_dirs(self, which: str) -> dict[str, str]:
        """The memory cgroup a memory threshold watches: the root ("/") or the pods' ("pods")."""
        if which == "pods":
            return self.cgroups.qos_cgroup_dirs("Guaranteed")
        return dict(self.cgroups.driver.dirs(()))

    def _check_connection_config(self) -> None:
        """A connection config that cannot work, with no bootstrap config to replace it, stops the start."""
        cfg = self.cfg
        if cfg.bootstrap_orchconfig or not os.path.exists(cfg.orchconfig):
            if not cfg.bootstrap_orchconfig and not os.path.exists(cfg.orchconfig):
                raise NodeStartError(
                    f"--orchconfig {cfg.orchconfig} does not exist and no "
                    "--bootstrap-orchconfig is given to obtain a client certificate"
                )
            return
        from .client.config import load_orchconfig  # the API client: cluster mode's

        try:
            load_orchconfig(cfg.orchconfig)
        except ValueError as exc:
            raise NodeStartError(f"invalid connection config (--orchconfig): {exc}") from None

    def _server_auth(self):
        """(authenticate, authorize, client CA PEM) of the agent's server from the flags
        (see :mod:`agent.server.auth`). In cluster mode the client CA defaults to the
        cluster CA of the connection config, so the API server's client certificate
        (``pods/log``) is recognised without a ``--client-ca-file``."""
        cfg = self.cfg
        client_ca = self._client_ca()
        review = api_review(lambda: self.client)
        token = None
        if cfg.authentication_token_webhook:
            token = TokenWebhookAuthenticator(review, cfg.authentication_token_webhook_cache_ttl.total_seconds())
        authenticate = Authenticator(
            x509_auth=X509Authenticator() if client_ca else None, token_auth=token, anonymous=bool(cfg.anonymous_auth)
        )
        authorize = None
        if cfg.authorization_mode == "Webhook":
            authorize = WebhookAuthorizer(
                review,
                authorized_ttl=cfg.authorization_webhook_cache_authorized_ttl.total_seconds(),
                unauthorized_ttl=cfg.authorization_webhook_cache_unauthorized_ttl.total_seconds(),
            )
        return authenticate, authorize, client_ca

    def _client_ca(self) -> bytes | None:
        cfg = self.cfg
        if cfg.client_ca_file:
            try:
                with open(cfg.client_ca_file, "rb") as f:
                    data = f.read()
                ssl.create_default_context(cadata=data.decode("ascii"))
            except (OSError, ValueError, ssl.SSLError) as exc:
                raise NodeStartError(
                    f"--client-ca-file {cfg.client_ca_file}: not a readable PEM "
                    f"certificate bundle: {getattr(exc, 'strerror', None) or exc}"
                ) from None
            return data
        if self.cluster_mode:
            from .client.config import OrchconfigError, load_orchconfig

            for path in (cfg.orchconfig, cfg.bootstrap_orchconfig):
                if path and os.path.exists(path):
                    try:
                        ca = load_orchconfig(path).ca_data
                    except (OrchconfigError, ValueError, OSError):
                        continue
                    if ca:
                        return ca
        return None

    def _use_issued_serving_certificate(self) -> None:
        """Serve a still valid pair from an earlier rotation from the start."""
        # Certificate bootstrap and rotation need the cryptography library: loaded here and
        # in cluster mode only, a standalone node never maps it.
        from .certificates.bootstrap import PairStore, certificate_valid

        store = PairStore(self.cfg.cert_dir, names.AGENT_SERVER_CERT_PREFIX)
        pair = store.load()
        if pair is not None and certificate_valid(pair[0]) and self.server is not None:
            self.server.reload_certificate(store.current_path, store.current_path)

    async def running_pods(self) -> list[dict]:
        """``/runningpods/``: the pods with a ready sandbox or running containers in the
        runtime, as upstream shows them (name, namespace, uid; running containers' names
        and images)."""
        out = []
        for uid, rp in (await self.runtime.all_runtime_pods()).items():
            running = rp.running_containers
            if not running and rp.ready_sandbox is None:
                continue
            out.append(
                {
                    "metadata": {"name": rp.name, "namespace": rp.namespace, "uid": uid, "creationTimestamp": None},
                    "spec": {
                        "containers": [
                            {"name": c.name, "image": c.image, "resources": {}}
                            for c in sorted(running, key=lambda c: c.name)
                        ]
                    },
                    "status": {},
                }
            )
        return sorted(out, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))

    def _admit_fit(self, pod: dict) -> tuple[str, str]:
        """Upstream's general predicates (node affinity, node name, host ports, NoExecute
        taints, OS) against the Node as last read, or as the node registers itself
        before that (and when running without an API server)."""
        node = self.node_status.node if self.node_status is not None else None
        if node is None:
            node = {
                "metadata": {"name": self.node_name, "labels": node_labels(self.cfg, node_hostname(self.cfg))},
                "spec": {"taints": node_taints(self.cfg)},
            }
        assert self.pipeline is not None
        uid = podutil.uid(pod)
        others = [p for p in self.pipeline.active_pods() if podutil.uid(p) != uid]
        return predicates.admit(pod, node, others)

    async def _kill_for_shutdown(self, pod: dict, grace: int, update_status: Callable[[dict], None]) -> None:
        """The node shutdown manager's way to stop a pod: through its pod worker."""
        assert self.pipeline is not None
        done = self.pipeline.kill_pod(
            podutil.uid(pod), grace=grace, update_status=update_status, reason="node shutdown"
        )
        if done is not None:
            await asyncio.shield(done)

    def _node_changed(self) -> None:
        if self.node_status is not None:
            self.node_status.poke()

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

    # --- cluster mode ---------------------------------------------------------------------

    async def run_cluster(self) -> None:
        """Join the API server: client certificate, Node, lease, API pods, status, mirror pods, events."""
        from .certificates.bootstrap import ensure_client_certificate  # see _use_issued_serving_certificate
        from .certificates.rotation import rotate_client_certificate, rotate_serving_certificate
        from .client import client_from_config
        from .eventsink import ApiEventSink
        from .mirrorclient import MirrorClient
        from .objectcache import ObjectCache
        from .services import ServiceCache
        from .sources.apiserver import ApiPodSource
        from .status.lease import LeaseManager
        from .status.manager import StatusManager

        cfg = self.cfg
        assert self.pipeline is not None
        path = await ensure_client_certificate(cfg, self.node_name)
        client = client_from_config(cfg, path, version=self.version)
        self.client = client
        tasks: list = []
        sink = ApiEventSink(client, node_name=self.node_name, qps=cfg.event_qps, burst=cfg.event_burst)
        self.events.sinks.append(sink)
        sink_task = asyncio.ensure_future(sink.run())
        tasks.append(sink_task)
        try:
            status = NodeStatusManager(
                cfg,
                client,
                node_name=self.node_name,
                cgroups=self.cgroups,
                runtime_ready=lambda: self.pipeline.runtime_ready,
                runtime_version=lambda: runtime_version_from(self.cri),
                list_images=self.cri.list_images,
                events=self.events,
                version=self.version,
                host_ip=self.host_ip,
                extended_resources=self.devices.capacity,
                shutdown=self.shutdown.not_ready_message,
                pressure=self.eviction.pressure,
            )
            self.devices.on_change = status.poke
            await status.register()
            self.node_status = status
            objects = ObjectCache(client, on_change=self.pipeline.wake)
            self.objects = objects
            self.volumes.objects = objects.get
            self.volumes.tokens = objects.token
            self.volumes.prefetch = objects.prefetch
            # Every Service, for the containers' service variables (enableServiceLinks).
            services = ServiceCache(client, cfg.master_service_namespace)
            self.runtime.service_env = services.env_for
            self.podmanager.mirror_client = MirrorClient(client, self.node_name, lambda: status.node_uid)
            statuses = StatusManager(client, mirrors=self.podmanager)
            self.podmanager.on_mirror_created = statuses.resend
            self.pipeline.on_status = statuses.set_status

            def terminated(pod: dict) -> None:
                objects.forget(podutil.uid(pod))
                statuses.terminated(pod)

            self.pipeline.on_terminated = terminated
            for state in list(self.pipeline.pods.values()):
                if state.status:
                    statuses.set_status(state.pod, state.status)
            source = ApiPodSource(client, self.node_name, self.config, mirrors=self.podmanager)
            lease = LeaseManager(
                client,
                node_name=self.node_name,
                duration_seconds=cfg.node_lease_duration_seconds,
                node_uid=lambda: status.node_uid,
            )
            runs = [status.run(), lease.run(), source.run(), statuses.run(), self.podmanager.run(), services.run()]
            if cfg.proxy_mode == "nftables":
                runs.append(self._run_proxy(client, services))
            else:
                log.info("Service proxy off", proxyMode=cfg.proxy_mode)
            if cfg.rotate_certificates:
                runs.append(rotate_client_certificate(cfg, self.node_name, client))
            if cfg.rotate_server_certificates and self.server is not None and not cfg.tls_cert_file:

                def addresses() -> list[str]:
                    return [a["address"] for a in node_addresses(cfg.node_ip, self.host_ip, status.hostname)]

                runs.append(
                    rotate_serving_certificate(
                        client, self.node_name, addresses, cfg.cert_dir, self.server.reload_certificate
                    )
                )
            tasks += [asyncio.ensure_future(r) for r in runs]
            log.info(
                "Joined the cluster", node=self.node_name, server=client.conn.server if hasattr(client, "conn") else ""
            )
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.objects is not None:
                await self.objects.close()
            await client.close()

    async def _run_proxy(self, client, services: ServiceCache) -> None:
        """The node service proxy, on the Services informer of the service variables (one
        watch per node); a failure to start it (no nft command) is logged, and the node
        keeps running its pods."""
        from .proxy.nft import NftError
        from .proxy.proxier import ServiceProxy

        cfg = self.cfg
        try:
            proxy = ServiceProxy(
                client,
                self.node_name,
                cluster_cidr=cfg.cluster_cidr,
                masquerade_bit=cfg.iptables_masquerade_bit,
                services_informer=services.informer,
                localhost_nodeports=cfg.iptables_localhost_nodeports,
                state_dir=cfg.root_dir,
            )
        except NftError as exc:
            log.error("Service proxy not started", err=exc)
            return
        await proxy.run()

    # --- tasks --------------------------------------------------------------------------

    async def run_sources(self) -> None:
        if self.cfg.pod_cidr:
            await self.set_pod_cidr(self.cfg.pod_cidr)
        if not self.sources:
            await asyncio.Event().wait()
        await asyncio.gather(*(s.run() for s in self.sources))

    async def set_pod_cidr(self, pod_cidr: str, attempts: int = 30, interval: float = 2.0) -> bool:
        """Standalone mode's --pod-cidr handed to the runtime (CRI UpdateRuntimeConfig), as the
        control plane's assignment is in cluster mode; retried while the runtime is not up."""
        for attempt in range(attempts):
            try:
                await self.cri.update_runtime_config(pod_cidr)
            except CriError as exc:
                if attempt + 1 == attempts:
                    log.error("Cannot hand the pod CIDR to the runtime", pod_cidr=pod_cidr, err=exc)
                    return False
                await asyncio.sleep(interval)
                continue
            log.info("Pod CIDR handed to the runtime", pod_cidr=pod_cidr)
            return True
        return False

    async def run_server(self, started: asyncio.Future | None = None) -> None:
        assert self.server is not None
        await self.server.serve(started)

    async def run_read_only_server(self) -> None:
        assert self.read_only_server is not None
        await self.read_only_server.serve()

    async def run_device_manager(self) -> None:
        await self.devices.run()

    async def run_pod_resources(self) -> None:
        assert self.pod_resources is not None
        await self.pod_resources.run()

    async def run_shutdown(self) -> None:
        await self.shutdown.run()

    async def run_image_gc(self, period: float | None = None) -> None:
        await self.image_gc.run(period or IMAGE_GC_PERIOD)

    async def run_container_gc(self, period: float | None = None) -> None:
        await self.container_gc.run(period or CONTAINER_GC_PERIOD)

    async def run_eviction(self) -> None:
        await self.eviction.run()

    @property
    def reconciles_cpusets(self) -> bool:
        return bool(getattr(self.cgroups, "reconciles_cpusets", False))

    async def run_cpuset_reconcile(self) -> None:
        """Every --cpu-manager-reconcile-period: release the CPUs of pods that are gone and
        tell the runtime the cpusets that changed (the shared pool shrinks and grows)."""
        period = max(0.1, self.cfg.cpu_manager_reconcile_period.total_seconds())
        while True:
            await asyncio.sleep(period)
            try:
                await self.reconcile_cpusets_once()
            except Exception as exc:  # one bad pass must not end reconciliation
                log.error("CPU manager reconciliation failed", err=exc)

    async def reconcile_cpusets_once(self) -> None:
        assert self.pipeline is not None
        pods = []
        for state in list(self.pipeline.pods.values()):
            if state.rejected or state.terminating or (state.status or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            running = [(c.name, c.id) for c in state.rp.running_containers] if state.rp is not None else []
            pods.append((state.uid, running))
        updates = self.cgroups.reconcile_cpusets(pods, sources_ready=self.pipeline.sources_seen())
        for cid, cpuset in updates:
            try:
                await self.cri.update_container_resources(cid, linux=LinuxContainerResources(cpuset_cpus=cpuset))
            except CriError as exc:
                log.warning("Cannot update the cpuset of a container", id=cid[:13], cpuset=cpuset, err=exc)
                continue
            self.cgroups.container_created(cid, cpuset)
            log.info("Updated the cpuset of a container", id=cid[:13], cpuset=cpuset)

    async def run_pipeline(self) -> None:
        assert self.pipeline is not None
        try:
            await self.pipeline.run()
        finally:
            await self.probes.close()
            await self.cri.close()


def _feature(cfg, gate: str) -> bool:
    """A feature gate's value; a gate this agent does not know is off."""
    try:
        return bool(cfg.feature(gate))
    except Exception:
        return False


def _major_minor(version: str) -> str:
    parts = version.lstrip("v").split(".")
    if len(parts) >= 2 and parts[0].isdigit():
        return f"{parts[0]}.{parts[1]}"
    return "1.27"
