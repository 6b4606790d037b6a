"""The ``orch`` Service in ``default``: how workloads reach the API, and its endpoints.

At start the API server creates (or reconciles the ports of) the Service ``orch``
with the first address of the cluster-IP range, port 443 named ``https`` to the
secure port. Every API server keeps a lease record under ``/apiserverleases/<ip>``
in storage, renewed every ``RENEW_SECONDS``; the Endpoints ``orch`` and the
EndpointSlice ``orch`` (label ``orch.io/service-name: orch``) list the addresses
whose lease is fresh, so servers sharing one etcd each add themselves and one
server never removes another live server's address (upstream's lease endpoint
reconciler). On shutdown a server removes its lease and itself.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from typing import Callable

import orjson

from ..api import names
from ..api import status as st
from ..api.kinds import Registry
from ..api.user import SYSTEM_USER
from ..storage.interface import KeyExistsError, KeyNotFoundError
from .services import ServiceAllocators

log = logging.getLogger("orch-apiserver.default-service")

SERVICE_NAME = names.DEFAULT_SERVICE_NAME
SERVICE_NAMESPACE = "default"
PORT_NAME = "https"
SERVICE_PORT = 443
LEASES_PREFIX = "/apiserverleases/"
LEASE_TTL_SECONDS = 45.0
RENEW_SECONDS = 10.0


class DefaultService:
    def __init__(
        self,
        store,
        registry: Registry,
        allocators: ServiceAllocators,
        address: str,
        port: int,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.registry = registry
        self.allocators = allocators
        self.address = address
        self.port = port
        self.clock = clock
        self.services = registry.by_resource("", "v1", "services")
        self.endpoints = registry.by_resource("", "v1", "endpoints")
        self.slices = registry.by_resource(names.DISCOVERY_GROUP, "v1", "endpointslices")

    # --- the Service --------------------------------------------------------------------
    def _service_ports(self) -> list[dict]:
        return [{"name": PORT_NAME, "port": SERVICE_PORT, "protocol": "TCP", "targetPort": self.port}]

    async def ensure_service(self, reconcile_ports: bool = True) -> None:
        """Create the Service when missing; with ``reconcile_ports`` also put its port
        back to this server's (done at start only, so servers sharing one etcd with
        different ports do not take turns rewriting it)."""
        want = {
            "metadata": {
                "name": SERVICE_NAME,
                "namespace": SERVICE_NAMESPACE,
                "labels": {"component": "apiserver", "provider": names.DEFAULT_SERVICE_PROVIDER},
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": self.allocators.primary().first(),
                "ports": self._service_ports(),
                "sessionAffinity": "None",
            },
        }
        try:
            await self.store.get(self.services, SERVICE_NAMESPACE, SERVICE_NAME)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
            # A Service holding the address already (or a racing server) makes this fail:
            # the start-up then stops with the reason.
            try:
                await self.store.create(
                    self.services, SERVICE_NAMESPACE, want, SYSTEM_USER, field_manager=names.APISERVER_FIELD_MANAGER
                )
            except st.ApiError as create_error:
                # Another API server on the same etcd may have created it meanwhile.
                try:
                    await self.store.get(self.services, SERVICE_NAMESPACE, SERVICE_NAME)
                except st.ApiError:
                    raise create_error from None
            else:
                log.info("created Service %s/%s", SERVICE_NAMESPACE, SERVICE_NAME)
                return
        if not reconcile_ports:
            return

        def fix_ports(obj: dict) -> dict:
            spec = obj.setdefault("spec", {})
            mine = self._service_ports()
            if [
                {k: p.get(k) for k in ("name", "port", "protocol", "targetPort")} for p in spec.get("ports") or []
            ] != mine:
                spec["ports"] = mine
            return obj

        await self.store.update(
            self.services,
            SERVICE_NAMESPACE,
            SERVICE_NAME,
            fix_ports,
            SYSTEM_USER,
            field_manager=names.APISERVER_FIELD_MANAGER,
        )

    # --- leases --------------------------------------------------------------------------
    def _lease_key(self, address: str) -> str:
        return LEASES_PREFIX + address

    async def renew_lease(self) -> None:
        value = orjson.dumps({"address": self.address, "port": self.port, "renewTime": self.clock()})
        backend = self.store.backend
        try:
            await backend.update(self._lease_key(self.address), value, 0)
        except KeyNotFoundError:
            try:
                await backend.create(self._lease_key(self.address), value)
            except KeyExistsError:
                await backend.update(self._lease_key(self.address), value, 0)

    async def remove_lease(self) -> None:
        try:
            await self.store.backend.delete(self._lease_key(self.address))
        except KeyNotFoundError:
            pass

    async def live_addresses(self) -> dict[int, list[str]]:
        """The addresses of the API servers whose lease is fresh, by their port."""
        res = await self.store.backend.list(LEASES_PREFIX)
        by_port: dict[int, set[str]] = {}
        cutoff = self.clock() - LEASE_TTL_SECONDS
        for kv in res.items:
            try:
                lease = orjson.loads(kv.value)
                fresh = float(lease.get("renewTime", 0)) >= cutoff
                address, port = str(lease.get("address") or ""), int(lease.get("port") or 0)
                ipaddress.ip_address(address)
            except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
                continue
            if fresh and port:
                by_port.setdefault(port, set()).add(address)
        return {
            port: sorted(addrs, key=lambda a: (ipaddress.ip_address(a).version, ipaddress.ip_address(a)))
            for port, addrs in sorted(by_port.items())
        }

    # --- Endpoints and EndpointSlice -----------------------------------------------------
    async def reconcile_endpoints(self) -> None:
        live = await self.live_addresses()
        subsets = [
            {"addresses": [{"ip": a} for a in addrs], "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}]}
            for port, addrs in live.items()
        ]
        # Labelled not to be mirrored into slices (upstream's skip-mirror): the slice below is its own.
        labels = {names.LABEL_SKIP_MIRROR: "true"}
        await self._put(self.endpoints, {"metadata": {"labels": labels}, "subsets": subsets})
        # One slice holds one port list: the servers serving on this server's port.
        addresses = live.get(self.port, [])
        ports = [{"name": PORT_NAME, "port": self.port, "protocol": "TCP"}]
        family = ipaddress.ip_address(self.address).version
        slice_body = {
            "metadata": {"labels": {names.LABEL_SERVICE_NAME: SERVICE_NAME}},
            "addressType": "IPv4" if family == 4 else "IPv6",
            "endpoints": [
                {"addresses": [a], "conditions": {"ready": True}}
                for a in addresses
                if ipaddress.ip_address(a).version == family
            ],
            "ports": ports,
        }
        await self._put(self.slices, slice_body)

    async def _put(self, kind, body: dict) -> None:
        """Create, or replace the content fields of, the object ``orch`` of ``kind``."""
        obj = {**body, "metadata": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE, **body.get("metadata", {})}}

        def replace(old: dict) -> dict:
            for k, val in body.items():
                if k == "metadata":
                    old["metadata"].setdefault("labels", {}).update(val.get("labels", {}))
                else:
                    old[k] = val
            return old

        await self.store.update(
            kind,
            SERVICE_NAMESPACE,
            SERVICE_NAME,
            replace,
            SYSTEM_USER,
            create_on_missing=True,
            on_missing=lambda: obj,
            field_manager=names.APISERVER_FIELD_MANAGER,
        )

    # --- the loop ------------------------------------------------------------------------
    async def start(self) -> None:
        """First reconcile. A failure is logged, not fatal (as upstream): the loop tries
        again every renewal, and the rest of the API works meanwhile."""
        try:
            await self.ensure_service()
        except st.ApiError as exc:
            log.error("cannot create the Service %s/%s: %s", SERVICE_NAMESPACE, SERVICE_NAME, exc.message)
        await self.renew_lease()
        try:
            await self.reconcile_endpoints()
        except st.ApiError as exc:
            log.error("cannot write the endpoints of %s/%s: %s", SERVICE_NAMESPACE, SERVICE_NAME, exc.message)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with asyncio.timeout(RENEW_SECONDS):
                    await stop.wait()
            except asyncio.TimeoutError:
                pass
            if stop.is_set():
                return
            try:
                await self.renew_lease()
                await self.ensure_service(reconcile_ports=False)  # deleted by someone: put back
                await self.reconcile_endpoints()
            except Exception as exc:  # noqa: BLE001 - retried at the next renewal
                log.warning("reconciling the %s endpoints failed: %s", SERVICE_NAME, exc)

    async def shutdown(self) -> None:
        """Take this server out of the endpoints (others keep theirs)."""
        try:
            await self.remove_lease()
            await self.reconcile_endpoints()
        except Exception as exc:  # noqa: BLE001 - shutting down anyway; the lease expires by itself
            log.warning("removing this server from the %s endpoints failed: %s", SERVICE_NAME, exc)
