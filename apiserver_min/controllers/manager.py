"""Bundled controllers: namespace finalization and garbage collection.

Both are driven by watch-cache events in the same process and write through
the generic store as the system user, exactly as an outside client would, their
updates recorded in managedFields as the controller manager's (``FIELD_MANAGER``).
Work is queued by object key and done by one task per controller; a failed
item is retried after a short delay.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..scheduler.scheduler import Scheduler
from .bootstrap import BootstrapControllers
from .bootstrappolicy import reconcile_default_policy
from .certificates import CsrControllers
from .clusterroleaggregation import ClusterRoleAggregator
from .garbagecollector import GarbageCollector
from .leaderelection import LeaderElector
from .namespace import NamespaceController
from .nodelifecycle import NodeLifecycleController
from .serviceaccounts import ServiceAccountsController

if TYPE_CHECKING:
    from ..client.host import ControllerHost

log = logging.getLogger("orch-apiserver.controllers")


class Controllers:
    def __init__(self, server: "ControllerHost"):
        self.server = server
        self.namespaces = NamespaceController(server)
        self.gc = GarbageCollector(server)
        self._tasks: list[asyncio.Task] = []
        # CSR approver/signer/cleaner; constructing it also installs the CSR strategy's
        # admission hook, which must be in place before the first request.
        self.csr = CsrControllers(server)
        self.bootstrap = BootstrapControllers(server)
        self.elector = None
        self._elector_task: asyncio.Task | None = None
        self._listeners: list = []

    async def start(self) -> None:
        """The default RBAC policy (every server reconciles it at start, as upstream's
        bootstrap-roles hook), then the controllers: at once with SQLite or without
        --leader-elect, else whenever this server holds the controllers' Lease."""
        await reconcile_default_policy(self.server.store)
        opts = self.server.opts
        if getattr(opts, "leader_elect", False) and getattr(opts, "storage_backend", "sqlite") == "etcd3":
            self.elector = LeaderElector(
                self.server,
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
        for c in (self.namespaces, self.gc):
            self._listen(c.on_event)
        self._tasks = [
            asyncio.create_task(self.namespaces.run(), name="namespace-controller"),
            asyncio.create_task(self.gc.run(), name="garbage-collector"),
        ]
        # The ClusterRole aggregation controller that fills admin/edit/view.
        self.aggregator = ClusterRoleAggregator(self.server.store, self.server.rbac_index)
        self._tasks.append(asyncio.create_task(self.aggregator.run(), name="clusterrole-aggregator"))
        # Every active namespace's default ServiceAccount and orch-root-ca.crt ConfigMap.
        self.serviceaccounts = ServiceAccountsController(self.server)
        self._listen(self.serviceaccounts.on_event)
        self._tasks.append(asyncio.create_task(self.serviceaccounts.run(), name="serviceaccounts-controller"))
        # Certificate requests, then bootstrap tokens (bootstrap signer and token cleaner).
        # (Their start() subscribes their listeners itself.)
        self._tasks += self.csr.start()
        self._tasks += self.bootstrap.start()
        self._listeners += [self.csr.on_event, self.bootstrap.on_event]
        # Node heartbeats, condition taints and NoExecute evictions; then the scheduler
        # (--enable-scheduler), which places pods on the nodes that controller keeps honest.
        self.nodelifecycle = NodeLifecycleController(self.server)
        self._listen(self.nodelifecycle.on_event)
        self._tasks.append(asyncio.create_task(self.nodelifecycle.run(), name="node-lifecycle-controller"))
        if getattr(self.server.opts, "enable_scheduler", True):
            self.scheduler = Scheduler(self.server)
            self._listen(self.scheduler.on_event)
            self._tasks.append(asyncio.create_task(self.scheduler.run(), name="scheduler"))

    def _listen(self, on_event) -> None:
        """Subscribe a fresh controller to the watch cache, then replay what it holds."""
        self.server.cache.listeners.append(on_event)
        self._listeners.append(on_event)
        on_event(None, None)

    async def _stop_controllers(self) -> None:
        self.bootstrap.stop()
        for fn in self._listeners:
            try:
                self.server.cache.listeners.remove(fn)
            except ValueError:
                pass
        self._listeners = []
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
