"""Leader election of the bundled controllers through a Lease.

Several API servers may share one etcd. The scheduler, the node lifecycle
controller, the certificate approver and signer, the bootstrap signer, the
garbage collector and the other bundled controllers must then act once, not
once per server: each server is a candidate for the Lease
``orch-system/orch-controllers`` and only its holder runs them (upstream's
controller manager and scheduler elect the same way, with Leases in their
system namespace).

The algorithm is upstream's ``tryAcquireOrRenew``:

* the Lease is read from storage (never the watch cache) and written with a
  compare-and-swap, so two candidates cannot both win one round;
* a candidate does not trust the holder's ``renewTime`` (clocks of different
  machines differ): it notes the local time at which it last saw the Lease
  *change*, and takes over only when the Lease has not changed for
  ``leaseDurationSeconds`` by its own clock;
* the leader renews every retry period; if it cannot renew for the renew
  deadline, it stops its controllers and becomes a candidate again (upstream
  exits the process; stopping the controllers has the same effect without
  taking the API server down);
* on a clean shutdown the leader releases the Lease (holder cleared, duration
  1 s), so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import socket
import time
import uuid
from typing import Awaitable, Callable

from ..api import names
from ..api import status as st
from ..api.kinds import Registry
from ..api.timeutil import format_rfc3339_micro
from ..api.timeutil import now as utc_now
from ..client.informer import served_kind
from ..client.interface import Client

log = logging.getLogger("orch-apiserver.leaderelection")
# The Lease writes are the controller manager's (upstream: kube-controller-manager's own
# leader election, as its own user), recorded so in managedFields: the client given is
# the controller manager's, with this field manager.
FIELD_MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER


class _NotAcquirable(Exception):
    """Another candidate holds a Lease that is still fresh."""


def default_identity() -> str:
    """``<host>_<random>``, as upstream: unique per process, readable per machine."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaderElector:
    """Campaigns for one Lease; runs ``on_started`` when it leads, awaits ``on_stopped``
    when it loses the lead (then campaigns again). The Lease is read and written
    through ``client`` (a read-modify-write against storage, never the watch cache)."""

    def __init__(
        self,
        client: Client,
        registry: Registry,
        *,
        name: str = names.CONTROLLERS_LEASE_NAME,
        namespace: str = names.NS_SYSTEM,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], Awaitable[None]],
        on_stopped: Callable[[], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration")
        self.client = client
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started, self.on_stopped = on_started, on_stopped
        self.clock = clock
        self.kind = served_kind(registry, names.COORDINATION_GROUP, "v1", "leases")
        self.leading = False
        self.transitions_seen = 0
        # What we last saw of the Lease and when (our clock): the freshness test.
        self._observed: tuple | None = None
        self._observed_at = 0.0

    # --- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead, and campaign again, until cancelled (then release)."""
        try:
            while True:
                await self._acquire()
                self.leading = True
                log.info(
                    "became the leader of the bundled controllers (lease %s/%s, identity %s)",
                    self.namespace,
                    self.name,
                    self.identity,
                )
                try:
                    await self.on_started()
                    await self._renew_until_lost()
                finally:
                    self.leading = False
                    await asyncio.shield(self.on_stopped())
                log.warning(
                    "lost the lead of the bundled controllers (lease %s/%s); they are stopped "
                    "here until this server leads again",
                    self.namespace,
                    self.name,
                )
        except asyncio.CancelledError:
            await asyncio.shield(self._release())
            raise

    async def _acquire(self) -> None:
        announced = False
        while True:
            if await self._try_acquire_or_renew():
                return
            if not announced:
                holder = self._observed[0] if self._observed else "?"
                log.info(
                    "waiting to lead the bundled controllers: lease %s/%s is held by %s",
                    self.namespace,
                    self.name,
                    holder,
                )
                announced = True
            await asyncio.sleep(self.retry_period)

    async def _renew_until_lost(self) -> None:
        last_renewal = self.clock()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                async with asyncio.timeout(max(0.1, self.renew_deadline - (self.clock() - last_renewal))):
                    ok = await self._try_acquire_or_renew()
            except asyncio.TimeoutError:
                ok = False
            if ok:
                last_renewal = self.clock()
            elif self.clock() - last_renewal >= self.renew_deadline:
                return

    # --- one round ------------------------------------------------------------------------

    def _observe(self, spec: dict) -> None:
        record = (
            spec.get("holderIdentity") or "",
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    def _lease_spec(self, old: dict | None, now: _dt.datetime) -> dict:
        stamp = format_rfc3339_micro(now)
        old = old or {}
        holder = old.get("holderIdentity") or ""
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "renewTime": stamp,
            "acquireTime": old.get("acquireTime") if holder == self.identity and old.get("acquireTime") else stamp,
            "leaseTransitions": int(old.get("leaseTransitions") or 0)
            + (1 if holder and holder != self.identity else 0),
        }
        return spec

    async def _try_acquire_or_renew(self) -> bool:
        def compute(old: dict) -> dict:
            spec = old.get("spec") or {}
            self._observe(spec)
            holder = spec.get("holderIdentity") or ""
            fresh = self.clock() - self._observed_at < float(spec.get("leaseDurationSeconds") or 0)
            if holder and holder != self.identity and fresh:
                raise _NotAcquirable(holder)
            old["spec"] = self._lease_spec(spec, utc_now())
            return old

        def create() -> dict:
            return {
                "apiVersion": f"{names.COORDINATION_GROUP}/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._lease_spec(None, utc_now()),
            }

        try:
            try:
                obj = await self.client.update(self.kind, self.namespace, self.name, compute)
            except st.ApiError as exc:
                if exc.code != 404:
                    raise
                obj = await self.client.create(self.kind, self.namespace, create())
        except _NotAcquirable:
            return False
        except st.ApiError as exc:
            # 409: another candidate wrote first (or created the Lease): next round.
            if exc.code != 409:
                log.warning("leader election: cannot write lease %s/%s: %s", self.namespace, self.name, exc.message)
            return False
        except Exception as exc:  # noqa: BLE001 - storage unavailable: not the leader this round
            log.warning("leader election: cannot write lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._observe(obj.get("spec") or {})
        return True

    async def _release(self) -> None:
        """Give the Lease up on shutdown, so that a standby takes over at once."""
        if not self.leading and (self._observed is None or self._observed[0] != self.identity):
            return

        def compute(old: dict) -> dict:
            spec = old.get("spec") or {}
            if (spec.get("holderIdentity") or "") != self.identity:
                raise _NotAcquirable(spec.get("holderIdentity") or "")
            stamp = format_rfc3339_micro(utc_now())
            old["spec"] = dict(spec, holderIdentity="", leaseDurationSeconds=1, renewTime=stamp, acquireTime=stamp)
            return old

        try:
            async with asyncio.timeout(5):
                await self.client.update(self.kind, self.namespace, self.name, compute)
            log.info("released the lease %s/%s", self.namespace, self.name)
        except (_NotAcquirable, asyncio.TimeoutError, st.ApiError):
            pass
        except Exception as exc:  # noqa: BLE001 - releasing is best effort at shutdown
            log.warning("leader election: cannot release lease %s/%s: %s", self.namespace, self.name, exc)
