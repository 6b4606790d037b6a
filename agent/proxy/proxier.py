"""The node service proxy: Services and EndpointSlices in, nftables rules out.

:class:`ServiceProxy` keeps two informers (all Services, all EndpointSlices),
remembers which services an event touched, and at most every
``min_sync_interval`` seconds rebuilds the rules of just those services and
applies the difference to what the table holds in one ``nft`` transaction. The
first sync, and any sync after a failed one, writes the whole table. Rules stay
in place when the agent stops (connections keep working while it restarts);
``--proxy-cleanup`` removes them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Mapping, Protocol

from apiserver_min.api import names

from .. import logging as agent_logging
from ..client.informer import Informer, object_key
from . import model, ruleset
from .conntrack import ConntrackCleaner, Flow, UdpTarget, stale_flows, udp_target
from .localnet import LocalnetSysctl, SysctlError
from .nft import LibNftRunner, NftError, NftRunner, make_runner

__all__ = ["ServiceProxy", "ServiceIndex", "cleanup"]

log = agent_logging.get_logger("proxy")

SERVICES_PATH = "/api/v1/services"
SLICES_PATH = f"/apis/{names.DISCOVERY_GROUP}/v1/endpointslices"


class Runner(Protocol):
    async def apply(self, script: str) -> None: ...


class Cleaner(Protocol):
    async def delete(self, flows: set[Flow]) -> int: ...


def _slice_service(sl: Mapping) -> str:
    md = sl.get("metadata") or {}
    svc = (md.get("labels") or {}).get(names.LABEL_SERVICE_NAME)
    return f"{md.get('namespace') or ''}/{svc}" if svc else ""


class ServiceIndex:
    """Services and their EndpointSlices by service key (``ns/name``), and the
    rules each service contributes."""

    def __init__(self, node: str, cluster_cidr: str = "") -> None:
        self.node = node
        self.cluster_cidr = cluster_cidr
        self.services: dict[str, Mapping] = {}
        self.slices: dict[str, dict[str, Mapping]] = {}  # service key -> slice key -> slice
        self._slice_owner: dict[str, str] = {}  # slice key -> service key
        self._noted: dict[str, tuple[str, ...]] = {}

    # --- changes (return the service keys touched) ------------------------------------
    def set_service(self, svc: Mapping) -> str:
        key = object_key(dict(svc))
        self.services[key] = svc
        return key

    def delete_service(self, svc: Mapping) -> str:
        key = object_key(dict(svc))
        self.services.pop(key, None)
        self._noted.pop(key, None)
        return key

    def set_slice(self, sl: Mapping) -> list[str]:
        skey = object_key(dict(sl))
        touched = []
        prev = self._slice_owner.get(skey)
        owner = _slice_service(sl)
        if prev and prev != owner:
            self.slices.get(prev, {}).pop(skey, None)
            touched.append(prev)
        if owner:
            self.slices.setdefault(owner, {})[skey] = sl
            self._slice_owner[skey] = owner
            touched.append(owner)
        else:
            self._slice_owner.pop(skey, None)
        return touched

    def delete_slice(self, sl: Mapping) -> list[str]:
        skey = object_key(dict(sl))
        owner = self._slice_owner.pop(skey, None)
        if owner:
            group = self.slices.get(owner, {})
            group.pop(skey, None)
            if not group:
                self.slices.pop(owner, None)
            return [owner]
        return []

    # --- rules --------------------------------------------------------------------------
    def fragment(self, key: str) -> ruleset.Ruleset:
        """The rules of one service (empty when it is gone or not proxied)."""
        svc = self.services.get(key)
        if svc is None:
            return ruleset.Ruleset()
        ports, notes = model.service_ports(svc)
        if notes and tuple(notes) != self._noted.get(key):
            self._noted[key] = tuple(notes)
            for note in notes:
                log.warning("Service partly not proxied", service=key, reason=note)
        slices = list(self.slices.get(key, {}).values())
        return ruleset.build(((sp, model.endpoints_for(sp, slices)) for sp in ports), self.node, self.cluster_cidr)

    def udp_targets(self, key: str) -> dict[str, UdpTarget]:
        """The UDP service ports of one service and where their rules send (empty when none)."""
        svc = self.services.get(key)
        spec_ports = ((svc or {}).get("spec") or {}).get("ports") or []
        if not any(isinstance(p, dict) and p.get("protocol") == "UDP" for p in spec_ports):
            return {}
        ports, _ = model.service_ports(svc or {})
        slices = list(self.slices.get(key, {}).values())
        return {
            sp.key: udp_target(sp, model.endpoints_for(sp, slices), self.node) for sp in ports if sp.protocol == "udp"
        }


def merge(fragments: Mapping[str, ruleset.Ruleset]) -> ruleset.Ruleset:
    out = ruleset.Ruleset()
    for frag in fragments.values():
        out.chains.update(frag.chains)
        out.sets.update(frag.sets)
        for m, elems in frag.elements.items():
            out.elements[m].update(elems)
    return out


class ServiceProxy:
    """Programs this node's service rules from the API server's Services and EndpointSlices."""

    def __init__(
        self,
        client,
        node_name: str,
        *,
        cluster_cidr: str = "",
        masquerade_bit: int = 14,
        runner: Runner | None = None,
        informer_factory: Callable[..., Informer] = Informer,
        services_informer: Informer | None = None,
        localhost_nodeports: bool = False,
        state_dir: str = "",
        conntrack: Cleaner | None = None,
        min_sync_interval: float = 0.05,
        check_period: float = 30.0,
    ) -> None:
        self.index = ServiceIndex(node_name, cluster_cidr)
        # Node ports on 127.0.0.0/8 (--iptables-localhost-nodeports): on once the sysctl is set.
        self.localhost_nodeports_wanted = localhost_nodeports
        self.localhost_nodeports = False
        self.localnet = LocalnetSysctl(state_dir)
        self.conntrack: Cleaner = conntrack if conntrack is not None else ConntrackCleaner()
        self.udp_applied: dict[str, dict[str, UdpTarget]] = {}  # UDP service ports, per service
        self.mark = 1 << masquerade_bit
        self.runner: Runner = runner if runner is not None else make_runner()
        self.min_sync_interval = min_sync_interval
        self.check_period = check_period  # seconds without events after which the table is checked
        # The agent's one Services informer when given (its owner runs it: one watch per node
        # for the service variables and the proxy), else one of the proxy's own.
        self._own_services = services_informer is None
        self.services = (
            informer_factory(client, SERVICES_PATH, name="proxy-services")
            if services_informer is None
            else services_informer
        )
        self.slices = informer_factory(client, SLICES_PATH, name="proxy-endpointslices")
        self.services.add_handler(
            on_add=self._service_changed, on_update=lambda _o, n: self._service_changed(n), on_delete=self._service_gone
        )
        self.slices.add_handler(on_add=self._slice_changed, on_update=self._slice_updated, on_delete=self._slice_gone)
        self.applied: dict[str, ruleset.Ruleset] = {}  # what the table holds, per service
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._need_full = True
        self.syncs = 0  # completed syncs (tests, metrics)
        self.last_sync_seconds = 0.0

    # --- informer handlers ----------------------------------------------------------------
    def _mark(self, keys) -> None:
        self._dirty.update(keys)
        self._wake.set()

    def _service_changed(self, svc: dict) -> None:
        self._mark([self.index.set_service(svc)])

    def _service_gone(self, svc: dict) -> None:
        self._mark([self.index.delete_service(svc)])

    def _slice_changed(self, sl: dict) -> None:
        self._mark(self.index.set_slice(sl))

    def _slice_updated(self, _old: dict, new: dict) -> None:
        self._mark(self.index.set_slice(new))

    def _slice_gone(self, sl: dict) -> None:
        self._mark(self.index.delete_slice(sl))

    # --- syncing ------------------------------------------------------------------------
    async def _table_intact(self) -> bool:
        check = getattr(self.runner, "chain_exists", None)
        if check is None:
            return True
        return bool(await asyncio.to_thread(check, ruleset.FAMILY, ruleset.TABLE, "services"))

    async def sync(self) -> None:
        """Apply what changed since the last sync (everything, the first time or after a failure)."""
        started = time.monotonic()
        dirty, self._dirty = self._dirty, set()
        full = self._need_full
        keys: set[str] = set()
        if full:
            keys = set(self.index.services) | set(self.applied) | dirty
            fragments = {k: self.index.fragment(k) for k in keys}
            fragments = {k: f for k, f in fragments.items() if f.chains or any(f.elements.values())}
            script = ruleset.full_script(merge(fragments), self.mark, self.localhost_nodeports)
        else:
            fragments = {k: self.index.fragment(k) for k in dirty}
            script = "".join(
                ruleset.diff_script(self.applied.get(k, ruleset.Ruleset()), f) for k, f in fragments.items()
            )
        try:
            if script:
                await self.runner.apply(script)
        except NftError as exc:
            self._dirty |= dirty
            self._need_full = True
            log.error("Applying the service rules failed; the next sync rewrites the whole table", err=exc, full=full)
            raise
        if full:
            self.applied = fragments
            self._need_full = False
        else:
            for k, f in fragments.items():
                if f.chains or any(f.elements.values()):
                    self.applied[k] = f
                else:
                    self.applied.pop(k, None)
        flows = self._udp_changes((keys | set(self.udp_applied)) if full else set(fragments))
        self.syncs += 1
        self.last_sync_seconds = time.monotonic() - started
        chains, elements, sets = merge(self.applied).size() if full else (0, 0, 0)
        log.v(2 if not full else 0).info(
            "Synced service rules",
            full=full,
            services=len(fragments),
            lines=script.count("\n"),
            seconds=round(self.last_sync_seconds, 4),
            **({"chains": chains, "elements": elements, "affinitySets": sets} if full else {}),
        )
        if flows:
            await self.conntrack.delete(flows)

    def _udp_changes(self, keys: set[str]) -> set[Flow]:
        """Record the UDP service ports of ``keys`` as applied; the conntrack flows made stale."""
        flows: set[Flow] = set()
        for k in keys:
            new = self.index.udp_targets(k)
            old = self.udp_applied.get(k, {})
            if old or new:
                flows |= stale_flows(old, new)
            if new:
                self.udp_applied[k] = new
            else:
                self.udp_applied.pop(k, None)
        return flows

    def _localnet(self) -> None:
        """Set (or put back) route_localnet for node ports on 127.0.0.0/8. Set only after the
        first sync, so the table's guard against outside packets to 127/8 is already in place."""
        if self.localhost_nodeports_wanted:
            try:
                changed = self.localnet.enable()
            except (SysctlError, OSError) as exc:
                log.warning(
                    "Node ports on 127.0.0.0/8 are not served: the sysctl they need could not be set",
                    err=str(exc),
                )
                self.localhost_nodeports = False
                self._need_full = True
                self._wake.set()
                return
            if changed:
                log.info("Set a sysctl for node ports on 127.0.0.0/8", sysctl=f"{self.localnet.name}=1")
            return
        try:
            old = self.localnet.restore()
        except (SysctlError, OSError) as exc:
            log.warning("Could not put back a sysctl the proxy had set", err=str(exc))
            return
        if old is not None:
            log.info("Put back a sysctl the proxy had set", sysctl=f"{self.localnet.name}={old}")

    async def run(self) -> None:
        """Watch and sync until cancelled."""
        tasks = [asyncio.create_task(self.slices.run(), name="proxy-slices-informer")]
        if self._own_services:
            tasks.append(asyncio.create_task(self.services.run(), name="proxy-services-informer"))
        failures = 0
        try:
            await self.services.wait_synced()
            await self.slices.wait_synced()
            # A shared informer may have listed before this proxy's handler was added.
            for svc in list(self.services.cache.values()):
                self._service_changed(svc)
            self.localhost_nodeports = self.localhost_nodeports_wanted
            if not self.localhost_nodeports_wanted:
                await asyncio.to_thread(self._localnet)
            localnet_pending = self.localhost_nodeports_wanted
            log.info(
                "Service proxy started",
                mode="nftables",
                via=getattr(self.runner, "path", type(self.runner).__name__),
                table=f"{ruleset.FAMILY} {ruleset.TABLE}",
                node=self.index.node,
                clusterCIDR=self.index.cluster_cidr or None,
                localhostNodePorts=self.localhost_nodeports,
                ipFamilies="IPv4 (IPv6 services are not programmed; each is logged)",
            )
            while True:
                for t in tasks:
                    if t.done():
                        t.result()
                self._wake.clear()
                try:
                    await self.sync()
                    failures = 0
                except NftError:
                    failures += 1
                    await asyncio.sleep(min(30.0, 0.5 * 2**failures))
                    self._wake.set()
                    continue
                if localnet_pending:
                    localnet_pending = False
                    await asyncio.to_thread(self._localnet)
                    if self._need_full:
                        continue
                try:
                    async with asyncio.timeout(self.check_period):
                        await self._wake.wait()
                except asyncio.TimeoutError:
                    # Quiet for a while: make sure nobody removed or flushed the table.
                    if not await self._table_intact():
                        log.warning(
                            "The service proxy's table is missing or damaged; writing it again",
                            table=f"{ruleset.FAMILY} {ruleset.TABLE}",
                        )
                        self._need_full = True
                    continue
                await asyncio.sleep(self.min_sync_interval)  # gather a burst of events into one sync
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def cleanup(runner: LibNftRunner | NftRunner | None = None, state_dir: str = "") -> tuple[bool, str | None]:
    """Remove the proxy's table and put back the sysctl it set (``--proxy-cleanup``):
    whether there was a table, and the sysctl value restored (None: not changed by the proxy).
    Raises NftError or SysctlError."""
    runner = runner or make_runner()
    # The sysctl first: the table holds the guard that goes with it.
    restored = LocalnetSysctl(state_dir).restore()
    existed = runner.table_exists(ruleset.FAMILY, ruleset.TABLE)
    runner.apply_sync(ruleset.delete_script())
    return existed, restored
