"""The node's heartbeat Lease (``coordination.orch.io/v1``, namespace ``orch-node-lease``).

Upstream's node lease controller: the Lease named after the node is renewed
every quarter of its duration (10 s for the default 40 s) with ``holderIdentity``
the node, ``leaseDurationSeconds`` and ``renewTime`` (RFC 3339 with
microseconds). The last Lease written is reused, so a renewal is one PUT; a
failed or conflicting renewal falls back to reading the Lease again, creating
it when missing, with back-off (200 ms doubling to 7 s) while that fails.

The Lease is owned by the Node (an owner reference with the Node's uid), so it
goes away with the Node; after the Node is registered again (a new uid) the
next renewal points the reference at the new Node. Renewals bypass the client's
rate limit, as heartbeats do.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Callable

from apiserver_min.api import names
from apiserver_min.api.timeutil import format_rfc3339_micro
from apiserver_min.api.timeutil import now as utc_now

from .. import logging as agent_logging

__all__ = ["LeaseManager", "lease_path", "RENEW_FRACTION", "MAX_UPDATE_RETRIES"]

log = agent_logging.get_logger("lease")

RENEW_FRACTION = 0.25  # upstream renews every duration/4
MAX_UPDATE_RETRIES = 5
BACKOFF_START = 0.2
BACKOFF_MAX = 7.0
LEASE_API_VERSION = f"{names.COORDINATION_GROUP}/v1"


def lease_path(name: str = "") -> str:
    base = f"/apis/{LEASE_API_VERSION}/namespaces/{names.NS_NODE_LEASE}/leases"
    return f"{base}/{name}" if name else base


def _http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class LeaseManager:
    def __init__(
        self,
        client,
        *,
        node_name: str,
        duration_seconds: int = 40,
        node_uid: Callable[[], str],
        renew_interval: float | None = None,
    ) -> None:
        """``node_uid`` answers the registered Node's uid ("" while there is none)."""
        if duration_seconds < 1:
            raise ValueError(f"nodeLeaseDurationSeconds: must be at least 1, got {duration_seconds}")
        self.client = client
        self.node_name = node_name
        self.duration_seconds = int(duration_seconds)
        self.node_uid = node_uid
        self.renew_interval = renew_interval if renew_interval is not None else self.duration_seconds * RENEW_FRACTION
        self.lease: dict | None = None  # the last Lease the server accepted
        self.renewals = 0

    async def run(self) -> None:
        while True:
            await self.sync()
            await asyncio.sleep(self.renew_interval)

    async def sync(self) -> None:
        """One renewal, as upstream's controller: update the cached Lease, else ensure it exists."""
        if self.lease is not None:
            try:
                await self._retry_update(self.lease)
                return
            except Exception as exc:
                log.info(
                    "Failed to update lease using latest lease, fallback to ensure lease", node=self.node_name, err=exc
                )
        lease, created = await self._backoff_ensure()
        self.lease = lease
        if not created:
            try:
                await self._retry_update(lease)
            except Exception as exc:
                log.error("Will retry updating lease", node=self.node_name, err=exc, interval=self.renew_interval)

    async def _backoff_ensure(self) -> tuple[dict, bool]:
        delay = BACKOFF_START
        while True:
            try:
                return await self._ensure()
            except Exception as exc:
                log.error("Failed to ensure lease exists, will retry", node=self.node_name, interval=delay, err=exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    async def _ensure(self) -> tuple[dict, bool]:
        try:
            return await self.client.get(lease_path(self.node_name), rate_limited=False), False
        except Exception as exc:
            if _http_status(exc) != 404:
                raise
        created = await self.client.create(lease_path(), self.new_lease(None), rate_limited=False)
        self.renewals += 1
        return created, True

    async def _retry_update(self, base: dict) -> None:
        last: Exception | None = None
        for attempt in range(MAX_UPDATE_RETRIES):
            try:
                self.lease = await self.client.update(
                    lease_path(self.node_name), self.new_lease(base), rate_limited=False
                )
                self.renewals += 1
                return
            except Exception as exc:
                last = exc
                log.error("Failed to update lease", node=self.node_name, attempt=attempt + 1, err=exc)
                if _http_status(exc) in (404, 409):
                    break  # gone or changed underneath: read it again
        self.lease = None
        assert last is not None
        if _http_status(last) in (404, 409):
            raise last
        raise RuntimeError(f"failed {MAX_UPDATE_RETRIES} attempts to update lease: {last}") from last

    def new_lease(self, base: dict | None) -> dict:
        """``base`` (or a new Lease) renewed now, owned by the current Node when it has one."""
        if base is None:
            lease = {
                "apiVersion": LEASE_API_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": names.NS_NODE_LEASE},
                "spec": {},
            }
        else:
            lease = copy.deepcopy(base)
            lease.setdefault("apiVersion", LEASE_API_VERSION)
            lease.setdefault("kind", "Lease")
        spec = lease.setdefault("spec", {})
        spec["holderIdentity"] = self.node_name
        spec["leaseDurationSeconds"] = self.duration_seconds
        spec["renewTime"] = format_rfc3339_micro(utc_now())
        uid = ""
        try:
            uid = self.node_uid() or ""
        except Exception as exc:
            log.warning("Cannot tell the node's uid for the lease owner", err=exc)
        if uid:
            md = lease.setdefault("metadata", {})
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid}
            refs = [
                r
                for r in md.get("ownerReferences") or []
                if not (r.get("kind") == "Node" and r.get("apiVersion") == "v1")
            ]
            md["ownerReferences"] = refs + [owner]
        return lease
