"""The repair loop of the Service ranges: the bitmaps in storage made to match the Services.

At start (before the server serves) and then periodically, every API server rebuilds
each range's bitmap from the Services in storage: a value no Service holds is freed
(after it has looked leaked for ``LEAK_ROUNDS`` rounds in a row, so a value taken by a
create that has not landed yet is not freed under it); a value two Services hold, or one
outside the configured range, is reported as a Warning Event on the Service, as
upstream's repair controllers do. A stored bitmap of another range (the flags changed)
is replaced. The bitmap is written with a compare-and-swap on the revision read before
the Services were listed, so an allocation made meanwhile makes the round start over.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from ..api import names
from ..api.codec import decode_stored
from ..api.kinds import Registry
from ..api.timeutil import format_rfc3339, now
from ..api.user import SYSTEM_USER
from ..storage.keys import key_prefix
from .allocator import RangeAllocator
from .services import ServiceAllocators, family_of, needs_health_check, service_node_ports

log = logging.getLogger("orch-apiserver.service-repair")

REPAIR_INTERVAL_SECONDS = 180.0  # upstream's
LEAK_ROUNDS = 3
IP_REPAIR_COMPONENT = "ipallocator-repair-controller"
PORT_REPAIR_COMPONENT = "portallocator-repair-controller"


class _Range:
    """One range's rebuilt bitmap and the problems found while rebuilding it."""

    def __init__(self, alloc: RangeAllocator):
        self.alloc = alloc
        self.bits = 0


class ServiceRangeRepair:
    def __init__(
        self,
        store,
        registry: Registry,
        allocators: ServiceAllocators,
        interval: float = REPAIR_INTERVAL_SECONDS,
    ):
        self.store = store
        self.registry = registry
        self.allocators = allocators
        self.interval = interval
        kind, event_kind = registry.by_resource("", "v1", "services"), registry.by_resource("", "v1", "events")
        assert kind is not None and event_kind is not None
        self.kind, self.event_kind = kind, event_kind
        # (storage key, index) -> rounds in a row the value looked leaked
        self.leaks: dict[tuple[str, int], int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with asyncio.timeout(self.interval):
                    await stop.wait()
            except asyncio.TimeoutError:
                pass
            if stop.is_set():
                return
            try:
                await self.repair()
            except Exception as exc:  # noqa: BLE001 - one failed round is retried at the next
                log.warning("service range repair failed: %s", exc)

    async def repair(self, attempts: int = 10) -> None:
        for _ in range(attempts):
            if await self._round():
                return
        log.warning("service range repair: the ranges kept changing during %d rounds; trying later", attempts)

    async def _round(self) -> bool:
        ranges: list[RangeAllocator] = [*self.allocators.ips.values(), self.allocators.ports]
        snaps = {r.store.key: await r.store.read() for r in ranges}
        listed = await self.store.backend.list(key_prefix(self.kind))
        rebuilt = {r.store.key: _Range(r) for r in ranges}
        events: list[tuple[dict, str, str, str]] = []
        for kv in listed.items:
            svc = decode_stored(kv.value, kv.mod_revision)
            spec = svc.get("spec") or {}
            if spec.get("type") != "ExternalName":
                for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []):
                    if not isinstance(ip, str) or ip == "None":
                        continue
                    fam = family_of(ip)
                    alloc = self.allocators.ips.get(fam)
                    if alloc is None:
                        continue  # a family this server does not serve: not its to judge
                    if not alloc.contains(ip):
                        events.append(
                            (
                                svc,
                                "ClusterIPOutOfRange",
                                f"Cluster IP [{fam}]: {ip} is not within the configured Service CIDR "
                                f"{alloc.cidr}; please recreate service",
                                IP_REPAIR_COMPONENT,
                            )
                        )
                        continue
                    r = rebuilt[alloc.store.key]
                    i = alloc.index_of(ip)
                    if (r.bits >> i) & 1:
                        events.append(
                            (
                                svc,
                                "ClusterIPAlreadyAllocated",
                                f"Cluster IP [{fam}]:{ip} was assigned to multiple services; please recreate service",
                                IP_REPAIR_COMPONENT,
                            )
                        )
                    r.bits |= 1 << i
            ports = list(service_node_ports(svc))
            hc = spec.get("healthCheckNodePort")
            if needs_health_check(svc) and isinstance(hc, int) and hc:
                ports.append(hc)
            pr = rebuilt[self.allocators.ports.store.key]
            for port in dict.fromkeys(ports):
                if not self.allocators.ports.contains(port):
                    events.append(
                        (
                            svc,
                            "PortOutOfRange",
                            f"Port {port} is not within the port range {self.allocators.ports.range_text}; "
                            "please recreate service",
                            PORT_REPAIR_COMPONENT,
                        )
                    )
                    continue
                i = self.allocators.ports.index_of(port)
                if (pr.bits >> i) & 1:
                    events.append(
                        (
                            svc,
                            "PortAlreadyAllocated",
                            f"Port {port} was assigned to multiple services; please recreate service",
                            PORT_REPAIR_COMPONENT,
                        )
                    )
                pr.bits |= 1 << i
        for key, r in rebuilt.items():
            snap = snaps[key]
            stored = snap.bits
            leaked = stored & ~r.bits
            i = 0
            still: dict[tuple[str, int], int] = {}
            while leaked:
                if leaked & 1:
                    rounds = self.leaks.get((key, i), 0) + 1
                    if rounds < LEAK_ROUNDS:
                        still[(key, i)] = rounds
                        r.bits |= 1 << i  # kept for now: may be a create in flight
                    else:
                        log.info("service range repair: releasing leaked value %d of %s", i, key)
                leaked >>= 1
                i += 1
            if r.bits == stored and snap.revision != 0 and snap.range == r.alloc.store.range_spec:
                self._keep_leaks(key, still)
                continue
            if not await r.alloc.store.write(snap, r.bits):
                return False
            self._keep_leaks(key, still)
        for svc, reason, message, component in events:
            await self._event(svc, reason, message, component)
        return True

    def _keep_leaks(self, key: str, still: dict[tuple[str, int], int]) -> None:
        for k in [k for k in self.leaks if k[0] == key]:
            del self.leaks[k]
        self.leaks.update(still)

    async def _event(self, svc: dict, reason: str, message: str, component: str) -> None:
        md = svc.get("metadata") or {}
        ns = md.get("namespace", "default")
        ts = format_rfc3339(now())
        event = {
            "metadata": {"name": f"{md.get('name', '')}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": {
                "kind": "Service",
                "apiVersion": "v1",
                "namespace": ns,
                "name": md.get("name", ""),
                "uid": md.get("uid", ""),
                "resourceVersion": md.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": component},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "reportingComponent": component,
        }
        log.warning("service %s/%s: %s", ns, md.get("name", ""), message)
        try:
            await self.store.create(
                self.event_kind, ns, event, SYSTEM_USER, field_manager=names.APISERVER_FIELD_MANAGER
            )
        except Exception as exc:  # noqa: BLE001 - an event that cannot be recorded is only logged
            log.warning("could not record event %s: %s", reason, exc)
