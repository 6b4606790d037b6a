"""The bundled controllers and the scheduler: identities, informers, start and stop.

Each controller is an API client in the server's process: it reads through informers
over the watch cache and writes through its own :class:`~apiserver_min.client.local.LocalClient`,
authorized and admitted as its service account ``system:serviceaccount:orch-system:<name>``
(upstream's ``--use-service-account-credentials``), bound by the default policy to
``system:controller:<name>``. Their updates are recorded in managedFields as the
controller manager's (``FIELD_MANAGER``), the scheduler's as ``orch-scheduler``.

The default RBAC policy is reconciled first, as the API server itself (the roles do
not exist before it), and the watch cache is brought up to that write before any
controller writes: RBAC reads its rules from the cache. A controller's failed item
is retried after a short delay anyway.
"""

from __future__ import annotations

import asyncio
import logging

from ..api import names
from ..api.kinds import Registry
from ..api.user import SYSTEM_USER, UserInfo
from ..authz.authorizer import Authorizer
from ..client.informer import InformerFactory
from ..client.local import LocalClient, controller_user
from ..options import Options
from ..registry.store import Store
from ..scheduler.scheduler import FIELD_MANAGER as SCHEDULER_FIELD_MANAGER
from ..scheduler.scheduler import Scheduler
from ..storage.cacher import WatchCache
from .bootstrap import BootstrapControllers
from .bootstrappolicy import reconcile_default_policy
from .bootstrappriority import ensure_system_priority_classes
from .certificates import CsrControllers
from .clusterroleaggregation import ClusterRoleAggregator
from .cronjob import CronJobController
from .daemonset import DaemonSetController
from .deployment import DeploymentController
from .disruption import DisruptionController
from .endpoints import EndpointsController
from .endpointslice import EndpointSliceController
from .endpointslicemirroring import EndpointSliceMirroringController
from .ephemeral import EphemeralVolumeController
from .eventttl import EventTTLController
from .garbagecollector import GarbageCollector
from .horizontalpodautoscaler import HorizontalPodAutoscalerController, PodMetricsSource
from .job import JobController
from .leaderelection import LeaderElector
from .localpath import LocalPathProvisioner
from .namespace import NamespaceController
from .nodelifecycle import NodeLifecycleController
from .persistentvolume import PersistentVolumeController
from .protection import PvcProtectionController, PvProtectionController
from .queue import FIELD_MANAGER
from .replicaset import ReplicaSetController
from .resourcequota import ResourceQuotaController
from .serviceaccounts import ServiceAccountsController
from .statefulset import StatefulSetController
from .ttlafterfinished import TTLAfterFinishedController

log = logging.getLogger("orch-apiserver.controllers")

# The controller manager's own user: it holds the controllers' Lease (upstream's
# kube-controller-manager elects as system:kube-controller-manager).
CONTROLLER_MANAGER_USER = UserInfo(names.CONTROLLER_MANAGER_USER, groups=(names.GROUP_AUTHENTICATED,))


class Controllers:
    """Owns the controllers' tasks; ``ca_files`` are the cluster CA's certificate and key,
    ``server_url`` the address ``cluster-info`` publishes, ``pod_metrics`` where the
    horizontal pod autoscaler reads pods' resource usage (the resource metrics API)."""

    def __init__(
        self,
        opts: Options,
        store: Store,
        cache: WatchCache,
        registry: Registry,
        authorizer: Authorizer,
        *,
        ca_files: tuple[str, str],
        server_url: str,
        pod_metrics: PodMetricsSource,
    ):
        self.opts = opts
        self.store = store
        self.cache = cache
        self.registry = registry
        self.authorizer = authorizer
        self.ca_files = ca_files
        self.server_url = server_url
        self.pod_metrics = pod_metrics
        self.informers: InformerFactory | None = None
        self._tasks: list[asyncio.Task] = []
        self.bootstrap: BootstrapControllers | None = None
        self.elector: LeaderElector | None = None
        self._elector_task: asyncio.Task | None = None

    def client(self, controller: str, field_manager: str = FIELD_MANAGER) -> LocalClient:
        """The client of one controller, as its service account."""
        return LocalClient(self.store, self.authorizer, controller_user(controller), field_manager)

    async def start(self) -> None:
        """The default RBAC policy (every server reconciles it at start, as upstream's
        bootstrap-roles hook), then the controllers: at once with SQLite or without
        --leader-elect, else whenever this server holds the controllers' Lease."""
        await reconcile_default_policy(self.store)
        # The built-in PriorityClasses, as every upstream API server creates them.
        await ensure_system_priority_classes(
            LocalClient(self.store, self.authorizer, SYSTEM_USER, names.APISERVER_FIELD_MANAGER), self.registry
        )
        # RBAC authorizes from the watch cache: let it see the policy just written.
        if await self.cache.sync(timeout=10.0) is None:
            log.warning("the watch cache did not catch up with the default policy; controllers retry until it does")
        opts = self.opts
        if opts.leader_elect and opts.storage_backend == "etcd3":
            self.elector = LeaderElector(
                LocalClient(self.store, self.authorizer, CONTROLLER_MANAGER_USER, FIELD_MANAGER),
                self.registry,
                lease_duration=opts.leader_elect_lease_duration,
                renew_deadline=opts.leader_elect_renew_deadline,
                retry_period=opts.leader_elect_retry_period,
                on_started=self._start_controllers,
                on_stopped=self._stop_controllers,
            )
            self._elector_task = asyncio.create_task(self.elector.run(), name="leader-election")
        else:
            await self._start_controllers()

    @property
    def leading(self) -> bool:
        """Whether this server runs the controllers now."""
        return self.elector.leading if self.elector is not None else bool(self._tasks)

    async def _start_controllers(self) -> None:
        opts = self.opts
        informers = self.informers = InformerFactory(self.cache, self.registry)
        ca_cert = self.ca_files[0]
        tasks: list[asyncio.Task] = []

        namespaces = NamespaceController(self.client("namespace-controller"), informers)
        gc = GarbageCollector(self.client("generic-garbage-collector"), informers)
        # The ClusterRole aggregation controller that fills admin/edit/view.
        aggregator = ClusterRoleAggregator(self.client("clusterrole-aggregation-controller"), informers)
        # Every active namespace's default ServiceAccount and orch-root-ca.crt ConfigMap.
        serviceaccounts = ServiceAccountsController(
            self.client("service-account-controller"), self.client("root-ca-cert-publisher"), informers, ca_cert
        )
        # Every quota's status: hard from the spec, used recounted from the informers.
        quotas = ResourceQuotaController(
            self.client("resourcequota-controller"), informers, sync_period=opts.resource_quota_sync_period
        )
        for c in (namespaces, gc, aggregator, serviceaccounts, quotas):
            c.start()
        tasks += [
            asyncio.create_task(namespaces.run(), name="namespace-controller"),
            asyncio.create_task(gc.run(), name="garbage-collector"),
            asyncio.create_task(aggregator.run(), name="clusterrole-aggregator"),
            asyncio.create_task(serviceaccounts.run(), name="serviceaccounts-controller"),
            asyncio.create_task(quotas.run(), name="resourcequota-controller"),
        ]
        # Certificate requests, then bootstrap tokens (bootstrap signer and token cleaner).
        csr = CsrControllers(
            self.client("certificate-controller"),
            informers,
            self.authorizer,
            ca_files=self.ca_files,
            signing_files=opts.cluster_signing_files,
            max_lifetime_seconds=opts.cluster_signing_duration,
            auto_approve_serving=opts.auto_approve_node_serving_certificates,
        )
        tasks += csr.start()
        self.bootstrap = BootstrapControllers(
            self.client("bootstrap-signer"), self.client("token-cleaner"), informers, ca_cert, self.server_url
        )
        tasks += self.bootstrap.start()
        # Node heartbeats, condition taints and NoExecute evictions; then the scheduler
        # (--enable-scheduler), which places pods on the nodes that controller keeps honest.
        nodelifecycle = NodeLifecycleController(
            self.client("node-controller"),
            informers,
            monitor_period=opts.node_monitor_period,
            grace_period=opts.node_monitor_grace_period,
            startup_grace_period=opts.node_startup_grace_period,
        )
        nodelifecycle.start()
        tasks.append(asyncio.create_task(nodelifecycle.run(), name="node-lifecycle-controller"))
        # Endpoints and EndpointSlices that follow the pods of Services with a selector, and
        # slices mirrored from the Endpoints others write for Services without one.
        endpoints = EndpointsController(self.client("endpoint-controller"), informers)
        slices = EndpointSliceController(
            self.client("endpointslice-controller"), informers, opts.max_endpoints_per_slice
        )
        mirroring = EndpointSliceMirroringController(
            self.client("endpointslicemirroring-controller"), informers, opts.mirroring_max_endpoints_per_subset
        )
        for ctl, task_name in (
            (endpoints, "endpoint-controller"),
            (slices, "endpointslice-controller"),
            (mirroring, "endpointslicemirroring-controller"),
        ):
            ctl.start()
            tasks.append(asyncio.create_task(ctl.run(), name=task_name))
        # Jobs run their pods to completion; cron jobs create jobs on their schedule; finished
        # jobs with ttlSecondsAfterFinished are deleted when it expires.
        jobs = JobController(self.client("job-controller"), informers)
        cronjobs = CronJobController(self.client("cronjob-controller"), informers)
        ttl = TTLAfterFinishedController(self.client("ttl-after-finished-controller"), informers)
        for batch_controller in (jobs, cronjobs, ttl):
            batch_controller.start()
        tasks += [
            asyncio.create_task(jobs.run(), name="job-controller"),
            asyncio.create_task(cronjobs.run(), name="cronjob-controller"),
            asyncio.create_task(ttl.run(), name="ttl-after-finished-controller"),
        ]
        # Events are kept --event-ttl after their last write (the API server's own work upstream).
        event_ttl = EventTTLController(
            LocalClient(self.store, self.authorizer, SYSTEM_USER, names.APISERVER_FIELD_MANAGER),
            informers,
            opts.event_ttl,
        )
        event_ttl.start()
        tasks.append(asyncio.create_task(event_ttl.run(), name="event-ttl"))
        # The workload controllers of apps/v1 with ControllerRevisions: DaemonSets and StatefulSets.
        daemonsets = DaemonSetController(self.client("daemon-set-controller"), informers)
        statefulsets = StatefulSetController(self.client("statefulset-controller"), informers)
        for w in (daemonsets, statefulsets):
            w.start()
        tasks += [
            asyncio.create_task(daemonsets.run(), name="daemon-set-controller"),
            asyncio.create_task(statefulsets.run(), name="statefulset-controller"),
        ]
        # Horizontal pod autoscalers: each target's scale from its pods' metrics.
        autoscaler = HorizontalPodAutoscalerController(
            self.client("horizontal-pod-autoscaler"),
            informers,
            self.pod_metrics,
            sync_period=opts.horizontal_pod_autoscaler_sync_period,
            tolerance=opts.horizontal_pod_autoscaler_tolerance,
            cpu_initialization_period=opts.horizontal_pod_autoscaler_cpu_initialization_period,
            initial_readiness_delay=opts.horizontal_pod_autoscaler_initial_readiness_delay,
            downscale_stabilization=opts.horizontal_pod_autoscaler_downscale_stabilization,
        )
        autoscaler.start()
        tasks.append(asyncio.create_task(autoscaler.run(), name="horizontal-pod-autoscaler"))
        # Disruption budgets' status, which pods/eviction charges.
        disruption = DisruptionController(self.client("disruption-controller"), informers)
        disruption.start()
        tasks.append(asyncio.create_task(disruption.run(), name="disruption-controller"))
        # Workloads: ReplicaSets and ReplicationControllers keep their pods, Deployments their ReplicaSets.
        workloads = {
            "replicaset-controller": ReplicaSetController(
                self.client("replicaset-controller"),
                informers,
                informers.kind(names.APPS_GROUP, "v1", "replicasets"),
                "replicaset-controller",
            ),
            "replication-controller": ReplicaSetController(
                self.client("replication-controller"),
                informers,
                informers.kind("", "v1", "replicationcontrollers"),
                "replication-controller",
            ),
            "deployment-controller": DeploymentController(self.client("deployment-controller"), informers),
        }
        for task_name, controller in workloads.items():
            controller.start()
            tasks.append(asyncio.create_task(controller.run(), name=task_name))
        # Claims bound to volumes; the bundled local-path provisioner (--local-path-provisioner).
        binder = PersistentVolumeController(self.client("persistent-volume-binder"), informers)
        binder.start()
        tasks.append(asyncio.create_task(binder.run(), name="persistent-volume-binder"))
        # The claims of pods' generic ephemeral volumes.
        ephemeral = EphemeralVolumeController(self.client("ephemeral-volume-controller"), informers)
        ephemeral.start()
        tasks.append(asyncio.create_task(ephemeral.run(), name="ephemeral-volume-controller"))
        # The finalizers StorageObjectInUseProtection puts on claims and volumes.
        pvc_protection = PvcProtectionController(self.client("pvc-protection-controller"), informers)
        pv_protection = PvProtectionController(self.client("pv-protection-controller"), informers)
        for p in (pvc_protection, pv_protection):
            p.start()
        tasks.append(asyncio.create_task(pvc_protection.run(), name="pvc-protection-controller"))
        tasks.append(asyncio.create_task(pv_protection.run(), name="pv-protection-controller"))
        if opts.local_path_provisioner:
            localpath = LocalPathProvisioner(
                self.client("local-path-provisioner"),
                informers,
                base_dir=opts.local_path_dir,
                helper_image=opts.local_path_helper_image,
            )
            localpath.start()
            tasks.append(asyncio.create_task(localpath.run(), name="local-path-provisioner"))
        if opts.enable_scheduler:
            scheduler = Scheduler(self.client("scheduler", SCHEDULER_FIELD_MANAGER), informers)
            scheduler.start()
            tasks.append(asyncio.create_task(scheduler.run(), name="scheduler"))
        self._tasks = tasks

    async def _stop_controllers(self) -> None:
        if self.bootstrap is not None:
            self.bootstrap.stop()
            self.bootstrap = None
        if self.informers is not None:
            self.informers.stop()
            self.informers = None
        for t in reversed(self._tasks):
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks = []

    async def stop(self) -> None:
        if self._elector_task is not None:
            self._elector_task.cancel()
            try:
                await self._elector_task
            except (asyncio.CancelledError, Exception):
                pass
            self._elector_task = None
        await self._stop_controllers()
