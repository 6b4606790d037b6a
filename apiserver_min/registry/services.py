"""Services: cluster IPs and node ports, the field rules that tie them to the type,
and the Service validation (upstream v1.27's rules, messages and field paths).

The store calls the Service strategy's hooks around each write (``begin_create``,
``begin_update``, ``after_delete``); the strategy hands them to
:class:`ServiceAllocators`, which allocates from the ranges in storage
(``allocator.py``) and returns a :class:`Transaction`: committed when the write
landed (releasing what the update gave up), reverted when anything after the
allocation failed, so a failed create or update leaks nothing. A dry-run request
checks and picks values the same way but keeps none.
"""

from __future__ import annotations

import ipaddress
from typing import Any, TypeGuard

from ..api import names
from ..api import status as st
from ..api import validation as v
from ..api.podvalidation import is_valid_port_name
from .allocator import (
    SECONDARY_SERVICE_IPS_KEY,
    SERVICE_IPS_KEY,
    SERVICE_NODE_PORTS_KEY,
    AllocationError,
    IPAllocator,
    PortAllocator,
    RangeAllocator,
)

FieldError = v.FieldError

SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
IP_FAMILIES = ("IPv4", "IPv6")
MAX_CLIENT_IP_AFFINITY_SECONDS = 86400
DEFAULT_CLIENT_IP_AFFINITY_SECONDS = 10800
NODE_AGENT_PORT = names.AGENT_DEFAULT_PORT


# --- small readers ----------------------------------------------------------------------------


def _spec(svc: dict) -> dict:
    spec = svc.get("spec")
    return spec if isinstance(spec, dict) else {}


def _ports(svc: dict) -> list[dict]:
    ports = _spec(svc).get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _node_port(p: dict) -> int:
    n = p.get("nodePort")
    return n if _is_int(n) else 0


def _hc_port(svc: dict) -> int:
    n = _spec(svc).get("healthCheckNodePort")
    return n if _is_int(n) else 0


def _cluster_ips(svc: dict) -> list[str]:
    ips = _spec(svc).get("clusterIPs")
    return list(ips) if isinstance(ips, list) else []


def _families(svc: dict) -> list[str]:
    fams = _spec(svc).get("ipFamilies")
    return list(fams) if isinstance(fams, list) else []


def _type(svc: dict) -> str:
    t = _spec(svc).get("type")
    return t if isinstance(t, str) else ""


def needs_cluster_ip(svc: dict) -> bool:
    return _type(svc) != "ExternalName"


def needs_node_port(svc: dict) -> bool:
    return _type(svc) in ("NodePort", "LoadBalancer")


def needs_health_check(svc: dict) -> bool:
    spec = _spec(svc)
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def externally_accessible(svc: dict) -> bool:
    spec = _spec(svc)
    t = spec.get("type")
    return t in ("NodePort", "LoadBalancer") or (t == "ClusterIP" and bool(spec.get("externalIPs")))


def is_headless(svc: dict) -> bool:
    return _spec(svc).get("clusterIP") == "None"


def should_allocate_node_ports(svc: dict) -> bool:
    t = _type(svc)
    if t == "NodePort":
        return True
    if t == "LoadBalancer":
        return _spec(svc).get("allocateLoadBalancerNodePorts") is not False
    return False


def family_of(ip: str) -> str:
    try:
        return "IPv4" if ipaddress.ip_address(ip).version == 4 else "IPv6"
    except ValueError:
        return "unknown"


def service_node_ports(svc: dict) -> list[int]:
    return [_node_port(p) for p in _ports(svc) if _node_port(p)]


# --- preparation (upstream's strategy: PrepareForCreate / PrepareForUpdate) ------------------


def normalize_cluster_ips(new: dict, old: dict | None) -> None:
    """Keep ``clusterIP`` and ``clusterIPs`` in step for clients that manage only one."""
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return
    ip = spec.get("clusterIP") or ""
    ips = _cluster_ips(new)
    if old is None:
        if ip and not ips:
            spec["clusterIPs"] = [ip]
        return
    ospec = _spec(old)
    old_ip, old_ips = ospec.get("clusterIP") or "", _cluster_ips(old)
    if old_ips and not ips and old_ip == ip:
        spec["clusterIPs"] = ips = list(old_ips)
    if old_ip != ip:
        if old_ip and not ip and ips == old_ips:
            spec.pop("clusterIPs", None)
            ips = []
        if ip and ips == old_ips:
            spec["clusterIPs"] = [ip]


def patch_allocated_values(new: dict, old: dict) -> None:
    """An update that leaves out allocated values keeps them (idempotent PUTs)."""
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return
    ospec = _spec(old)
    if needs_cluster_ip(old) and needs_cluster_ip(new):
        if not spec.get("clusterIP") and ospec.get("clusterIP"):
            spec["clusterIP"] = ospec["clusterIP"]
        if not spec.get("clusterIPs") and _cluster_ips(old):
            spec["clusterIPs"] = list(_cluster_ips(old))
    if needs_node_port(old) and needs_node_port(new):
        used = set(service_node_ports(old)) & set(service_node_ports(new))
        by_name = {p.get("name", "") or "": _node_port(p) for p in _ports(old)}
        for p in _ports(new):
            if not _node_port(p):
                prior = by_name.get(p.get("name", "") or "", 0)
                if prior and prior not in used:
                    p["nodePort"] = prior
    if needs_health_check(old) and needs_health_check(new) and not _hc_port(new) and _hc_port(old):
        spec["healthCheckNodePort"] = _hc_port(old)


def drop_type_dependent_fields(new: dict, old: dict) -> None:
    """After a type change, erase what the old type had (and the client did not change)."""
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return
    ospec = _spec(old)
    if needs_cluster_ip(old) and not needs_cluster_ip(new):
        if _cluster_ips(old) == _cluster_ips(new):
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        if _families(old) == _families(new):
            spec.pop("ipFamilies", None)
        if ospec.get("ipFamilyPolicy") == spec.get("ipFamilyPolicy"):
            spec.pop("ipFamilyPolicy", None)
    if needs_node_port(old) and not needs_node_port(new):
        if service_node_ports(old) == service_node_ports(new):
            for p in _ports(new):
                p.pop("nodePort", None)
    if needs_health_check(old) and not needs_health_check(new) and _hc_port(old) == _hc_port(new):
        spec.pop("healthCheckNodePort", None)
    if ospec.get("type") == "LoadBalancer" and spec.get("type") != "LoadBalancer":
        a, b = ospec.get("allocateLoadBalancerNodePorts"), spec.get("allocateLoadBalancerNodePorts")
        if a is not None and a == b:
            spec.pop("allocateLoadBalancerNodePorts", None)
        if ospec.get("loadBalancerClass") == spec.get("loadBalancerClass"):
            spec.pop("loadBalancerClass", None)
    if externally_accessible(old) and not externally_accessible(new):
        if ospec.get("externalTrafficPolicy") == spec.get("externalTrafficPolicy"):
            spec.pop("externalTrafficPolicy", None)
    if spec.get("type") != "LoadBalancer" and isinstance(new.get("status"), dict):
        new["status"]["loadBalancer"] = {}


# --- allocation -------------------------------------------------------------------------------


def _invalid(svc: dict, errs: list[FieldError]) -> st.ApiError:
    name = (svc.get("metadata") or {}).get("name", "")
    return st.invalid("Service", name if isinstance(name, str) else "", v.causes(errs))


class _Operation:
    """The values one request takes from one range: released again on revert; and the
    values it gives up, released on commit. Dry-run takes nothing for real."""

    def __init__(self, alloc: RangeAllocator, dry_run: bool):
        self.alloc = alloc
        self.dry_run = dry_run
        self.taken: list[int] = []
        self.deferred: list[int] = []
        self.mask = 0

    async def allocate(self, index: int) -> None:
        if (self.mask >> index) & 1:
            raise AllocationError(self.alloc.allocated_message)
        await self.alloc.allocate_index(index, self.dry_run)
        self.taken.append(index)
        self.mask |= 1 << index

    async def allocate_next(self) -> int:
        index = await self.alloc.allocate_next_index(self.dry_run, also_taken=self.mask)
        self.taken.append(index)
        self.mask |= 1 << index
        return index

    def release_deferred(self, index: int) -> None:
        self.deferred.append(index)

    async def commit(self) -> None:
        if self.dry_run:
            return
        for i in self.deferred:
            if i not in self.taken:
                await self.alloc.release_index(i)

    async def revert(self) -> None:
        if self.dry_run:
            return
        for i in self.taken:
            await self.alloc.release_index(i)
        self.taken = []


class Transaction:
    """The allocations of one write: ``commit`` once it landed, ``revert`` otherwise."""

    def __init__(self) -> None:
        self.ops: list[_Operation] = []

    def op(self, alloc: RangeAllocator, dry_run: bool) -> _Operation:
        o = _Operation(alloc, dry_run)
        self.ops.append(o)
        return o

    async def commit(self) -> None:
        for o in self.ops:
            await o.commit()

    async def revert(self) -> None:
        for o in self.ops:
            await o.revert()


class ServiceAllocators:
    """The cluster-IP ranges (one per family, the first the default) and the node-port range."""

    def __init__(self, backend, cidrs: list[str], node_port_base: int, node_port_size: int):
        self.ips: dict[str, IPAllocator] = {}
        for i, c in enumerate(cidrs):
            net = ipaddress.ip_network(c, strict=False)
            alloc = IPAllocator(backend, SERVICE_IPS_KEY if i == 0 else SECONDARY_SERVICE_IPS_KEY, net)
            self.ips[alloc.family] = alloc
        self.default_family = next(iter(self.ips))
        self.ports = PortAllocator(backend, SERVICE_NODE_PORTS_KEY, node_port_base, node_port_size)

    def primary(self) -> IPAllocator:
        return self.ips[self.default_family]

    # --- ip families ---------------------------------------------------------------------
    def init_ip_family_fields(self, svc: dict, old: dict | None) -> None:
        """Default ``ipFamilyPolicy`` and ``ipFamilies`` from the cluster's ranges and the
        request, and refuse families or policies this cluster cannot give."""
        spec = svc.get("spec")
        if not isinstance(spec, dict) or spec.get("type") == "ExternalName":
            return
        if self._matching_prefer_dual_stack(svc, old):
            return
        if spec.get("ipFamilyPolicy") is None:
            if old is not None and _spec(old).get("ipFamilyPolicy") is not None:
                spec["ipFamilyPolicy"] = _spec(old)["ipFamilyPolicy"]
            elif spec.get("clusterIP") == "None" and not spec.get("selector"):
                spec["ipFamilyPolicy"] = "RequireDualStack"
            else:
                spec["ipFamilyPolicy"] = "SingleStack"
        early = validate_cluster_ips_related(svc)
        if early:
            raise _invalid(svc, early)
        policy = spec.get("ipFamilyPolicy")
        errs: list[FieldError] = []
        ips, fams = _cluster_ips(svc), _families(svc)
        if old is not None:
            if policy == "SingleStack":
                if ips == _cluster_ips(old) and len(ips) > 1:
                    spec["clusterIPs"] = ips = ips[:1]
                if fams == _families(old) and len(fams) > 1:
                    spec["ipFamilies"] = fams = fams[:1]
            else:
                if ips and len(ips) < len(_cluster_ips(old)):
                    errs.append(
                        FieldError.invalid(
                            "spec.ipFamilyPolicy", policy, "must be 'SingleStack' to release the secondary cluster IP"
                        )
                    )
                if fams and len(fams) < len(_families(old)):
                    errs.append(
                        FieldError.invalid(
                            "spec.ipFamilyPolicy", policy, "must be 'SingleStack' to release the secondary IP family"
                        )
                    )
        if policy == "SingleStack":
            if len(ips) == 2:
                errs.append(
                    FieldError.invalid(
                        "spec.ipFamilyPolicy",
                        policy,
                        "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
                    )
                )
            if len(fams) == 2:
                errs.append(
                    FieldError.invalid(
                        "spec.ipFamilyPolicy",
                        policy,
                        "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
                    )
                )
        for i, ip in enumerate(ips):
            if ip == "None":
                break
            fam = family_of(ip)
            if i >= len(fams):
                if fam not in self.ips:
                    errs.append(
                        FieldError.invalid(f"spec.clusterIPs[{i}]", ips, f"{fam} is not configured on this cluster")
                    )
                else:
                    fams.append(fam)
        spec_fams_changed = fams != _families(svc)
        if errs:
            raise _invalid(svc, errs)
        if spec_fams_changed:
            spec["ipFamilies"] = list(fams)
        if spec.get("clusterIP") == "None" and not spec.get("selector"):
            if not fams:
                fams = [self.default_family]
            if len(fams) < 2 and policy != "SingleStack":
                fams.append("IPv6" if fams[0] == "IPv4" else "IPv4")
            spec["ipFamilies"] = fams
            return
        if policy == "RequireDualStack" and len(self.ips) < 2:
            errs.append(
                FieldError.invalid(
                    "spec.ipFamilyPolicy", policy, "this cluster is not configured for dual-stack services"
                )
            )
        for i, fam in enumerate(fams):
            if fam not in self.ips:
                errs.append(FieldError.invalid(f"spec.ipFamilies[{i}]", fam, "not configured on this cluster"))
        if errs:
            raise _invalid(svc, errs)
        if not fams:
            fams = [self.default_family]
        if policy != "SingleStack" and len(fams) == 1 and len(self.ips) == 2:
            fams.append("IPv6" if fams[0] == "IPv4" else "IPv4")
        spec["ipFamilies"] = fams

    @staticmethod
    def _matching_prefer_dual_stack(svc: dict, old: dict | None) -> bool:
        if old is None:
            return False
        spec, ospec = _spec(svc), _spec(old)
        if spec.get("ipFamilyPolicy") is None or spec.get("type") != ospec.get("type"):
            return False
        if spec.get("type") not in ("ClusterIP", "NodePort", "LoadBalancer"):
            return False
        if spec.get("ipFamilyPolicy") != "PreferDualStack" or ospec.get("ipFamilyPolicy") != "PreferDualStack":
            return False
        return _cluster_ips(svc) == _cluster_ips(old) and _families(svc) == _families(old)

    # --- cluster IPs ---------------------------------------------------------------------
    async def _alloc_ips(self, svc: dict, wanted: dict[str, str], txn: Transaction, dry_run: bool) -> dict[str, str]:
        out: dict[str, str] = {}
        for fam, ip in wanted.items():
            alloc = self.ips[fam]
            op = txn.op(alloc, dry_run)
            if not ip:
                try:
                    out[fam] = alloc.ip_at(await op.allocate_next())
                except AllocationError as exc:
                    raise st.internal(f"failed to allocate a serviceIP: {exc}") from None
            else:
                try:
                    await op.allocate(alloc.index_of(ip))
                except AllocationError as exc:
                    raise _invalid(
                        svc,
                        [
                            FieldError.invalid(
                                "spec.clusterIPs", _cluster_ips(svc), f"failed to allocate IP {ip}: {exc}"
                            )
                        ],
                    ) from None
                out[fam] = ip
        return out

    async def _alloc_cluster_ips(self, svc: dict, txn: Transaction, dry_run: bool) -> None:
        spec = svc["spec"]
        if spec.get("type") == "ExternalName" or (_cluster_ips(svc)[:1] == ["None"]):
            return
        ips = _cluster_ips(svc)
        fams = _families(svc)
        wanted: dict[str, str] = {}
        for i, fam in enumerate(fams):
            if i >= len(ips):
                ips.append("")
            wanted[fam] = ips[i]
        got = await self._alloc_ips(svc, wanted, txn, dry_run)
        for i, fam in enumerate(fams):
            if fam in got:
                ips[i] = got[fam]
        spec["clusterIPs"] = ips
        if ips:
            spec["clusterIP"] = ips[0]

    def _release_ips_deferred(self, ips: list[str], txn: Transaction) -> None:
        for ip in ips:
            alloc = self.ips.get(family_of(ip))
            if alloc is not None and alloc.contains(ip):
                txn.op(alloc, False).release_deferred(alloc.index_of(ip))

    # --- node ports ----------------------------------------------------------------------
    async def _alloc_node_port(self, svc: dict, op: _Operation, i: int, port: int) -> None:
        try:
            await op.allocate(self.ports.index_of(port))
        except AllocationError as exc:
            raise _invalid(svc, [FieldError.invalid(f"spec.ports[{i}].nodePort", port, str(exc))]) from None

    async def _next_node_port(self, op: _Operation) -> int:
        try:
            return self.ports.base + await op.allocate_next()
        except AllocationError as exc:
            raise st.internal(f"failed to allocate a nodePort: {exc}") from None

    async def _init_node_ports(self, svc: dict, op: _Operation) -> None:
        ports = _ports(svc)
        by_port: dict[Any, int] = {}
        for i, p in enumerate(ports):
            if not _node_port(p) and not should_allocate_node_ports(svc):
                continue
            done = by_port.get(p.get("port"), 0)
            if not done:
                requested = next((_node_port(q) for q in ports if q.get("port") == p.get("port") and _node_port(q)), 0)
                if requested:
                    await self._alloc_node_port(svc, op, i, requested)
                    p["nodePort"] = requested
                else:
                    p["nodePort"] = await self._next_node_port(op)
                by_port[p.get("port")] = p["nodePort"]
            elif _node_port(p) != done:
                if not _node_port(p):
                    p["nodePort"] = done
                else:
                    await self._alloc_node_port(svc, op, i, _node_port(p))

    async def _alloc_health_check(self, svc: dict, op: _Operation) -> None:
        spec = svc["spec"]
        hc = _hc_port(svc)
        if hc:
            try:
                await op.allocate(self.ports.index_of(hc))
            except AllocationError as exc:
                raise st.internal(f"failed to allocate requested HealthCheck NodePort {hc}: {exc}") from None
        else:
            try:
                spec["healthCheckNodePort"] = self.ports.base + await op.allocate_next()
            except AllocationError as exc:
                raise st.internal(f"failed to allocate a HealthCheck NodePort 0: {exc}") from None

    # --- the hooks -----------------------------------------------------------------------
    async def allocate_create(self, svc: dict, dry_run: bool) -> Transaction:
        if not isinstance(svc.get("spec"), dict):
            return Transaction()
        self.init_ip_family_fields(svc, None)
        txn = Transaction()
        try:
            await self._alloc_cluster_ips(svc, txn, dry_run)
            op = txn.op(self.ports, dry_run)
            if needs_node_port(svc):
                await self._init_node_ports(svc, op)
            if needs_health_check(svc):
                await self._alloc_health_check(svc, op)
        except BaseException:
            await txn.revert()
            raise
        return txn

    async def allocate_update(self, new: dict, old: dict, dry_run: bool) -> Transaction:
        if not isinstance(new.get("spec"), dict):
            return Transaction()
        self.init_ip_family_fields(new, old)
        txn = Transaction()
        try:
            await self._update_cluster_ips(new, old, txn, dry_run)
            await self._update_node_ports(new, old, txn.op(self.ports, dry_run))
        except BaseException:
            await txn.revert()
            raise
        return txn

    async def _update_cluster_ips(self, new: dict, old: dict, txn: Transaction, dry_run: bool) -> None:
        if self._matching_prefer_dual_stack(new, old):
            return
        if _type(old) == "ExternalName" and _type(new) != "ExternalName":
            await self._alloc_cluster_ips(new, txn, dry_run)
            return
        if _cluster_ips(old)[:1] == ["None"]:
            return
        if _type(old) != "ExternalName" and _type(new) == "ExternalName":
            self._release_ips_deferred(_cluster_ips(old), txn)
            return
        ofams, nfams = _families(old), _families(new)
        if len(ofams) == 1 and len(nfams) == 2:
            ips = _cluster_ips(new)
            if len(ips) < 2:
                ips.append("")
            got = await self._alloc_ips(new, {nfams[1]: ips[1]}, txn, dry_run)
            ips[1] = got[nfams[1]]
            new["spec"]["clusterIPs"] = ips
        elif len(ofams) == 2 and len(nfams) == 1:
            self._release_ips_deferred(_cluster_ips(old)[1:2], txn)

    async def _update_node_ports(self, new: dict, old: dict, op: _Operation) -> None:
        if needs_node_port(old) and _type(new) in ("ExternalName", "ClusterIP"):
            for n in service_node_ports(old):
                if self.ports.contains(n):
                    op.release_deferred(self.ports.index_of(n))
        if needs_node_port(new):
            old_ports = service_node_ports(old)
            seen: set[tuple[Any, int]] = set()
            done: set[int] = set()
            for i, p in enumerate(_ports(new)):
                if not _node_port(p) and not should_allocate_node_ports(new):
                    continue
                n = _node_port(p)
                if n:
                    if n not in old_ports and n not in done:
                        await self._alloc_node_port(new, op, i, n)
                        done.add(n)
                else:
                    n = await self._next_node_port(op)
                    p["nodePort"] = n
                key = (p.get("protocol"), n)
                if key in seen:
                    raise _invalid(new, [FieldError.duplicate(f"spec.ports[{i}].nodePort", n)])
                seen.add(key)
            kept = set(service_node_ports(new))
            for n in old_ports:
                if n not in kept and self.ports.contains(n):
                    op.release_deferred(self.ports.index_of(n))
        had, has = needs_health_check(old), needs_health_check(new)
        if not had and has:
            await self._alloc_health_check(new, op)
        elif had and not has:
            if _hc_port(old) and self.ports.contains(_hc_port(old)):
                op.release_deferred(self.ports.index_of(_hc_port(old)))
        elif had and has and _hc_port(old) != _hc_port(new):
            raise _invalid(
                new,
                [
                    FieldError.invalid(
                        "spec.healthCheckNodePort",
                        _hc_port(new),
                        "cannot change healthCheckNodePort on loadBalancer service with externalTraffic=Local "
                        "during update",
                    )
                ],
            )

    async def release_all(self, svc: dict) -> None:
        """Give back everything a deleted Service held."""
        if needs_cluster_ip(svc):
            for ip in _cluster_ips(svc) or [_spec(svc).get("clusterIP") or ""]:
                alloc = self.ips.get(family_of(ip)) if ip and ip != "None" else None
                if alloc is not None:
                    await alloc.release(ip)
        for n in service_node_ports(svc):
            await self.ports.release(n)
        if needs_health_check(svc) and _hc_port(svc):
            await self.ports.release(_hc_port(svc))


# --- validation (upstream ValidateService / ValidateServiceUpdate) -----------------------------

_IP_MSG = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"


def is_valid_ip(value: Any) -> list[str]:
    if not isinstance(value, str):
        return [_IP_MSG]
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return [_IP_MSG]
    return []


def validate_non_special_ip(ip: str, path: str) -> list[FieldError]:
    addr = ipaddress.ip_address(ip)
    errs = []
    if addr.is_unspecified:
        errs.append(FieldError.invalid(path, ip, "may not be unspecified (0.0.0.0)"))
    if addr.is_loopback:
        errs.append(FieldError.invalid(path, ip, "may not be in the loopback range (127.0.0.0/8)"))
    if addr.is_link_local and (addr.version == 6 or addr in ipaddress.ip_network("169.254.0.0/16")):
        errs.append(FieldError.invalid(path, ip, "may not be in the link-local range (169.254.0.0/16)"))
    link_local_mc = ipaddress.ip_network("224.0.0.0/24") if addr.version == 4 else ipaddress.ip_network("ff02::/16")
    if addr in link_local_mc:
        errs.append(FieldError.invalid(path, ip, "may not be in the link-local multicast range (224.0.0.0/24)"))
    return errs


def validate_cluster_ips_related(svc: dict) -> list[FieldError]:
    spec = _spec(svc)
    if spec.get("type") == "ExternalName":
        return []
    errs: list[FieldError] = []
    ip = spec.get("clusterIP") or ""
    ips = _cluster_ips(svc)
    if ip:
        if not ips:
            errs.append(FieldError.required("spec.clusterIPs"))
        elif ips[0] != ip:
            errs.append(FieldError.invalid("spec.clusterIPs", ips, "first value must match `clusterIP`"))
    elif ips:
        errs.append(FieldError.invalid("spec.clusterIPs", ips, "must be empty when `clusterIP` is not specified"))
    seen: set[str] = set()
    for i, fam in enumerate(_families(svc)):
        if fam in seen:
            errs.append(FieldError.duplicate(f"spec.ipFamilies[{i}]", fam))
        seen.add(fam)
    bad = False
    for i, one in enumerate(ips):
        if i == 0 and one == "None":
            if len(ips) > 1:
                bad = True
                errs.append(FieldError.invalid("spec.clusterIPs", ips, "'None' must be the first and only value"))
            continue
        msgs = is_valid_ip(one)
        bad = bad or bool(msgs)
        errs += [FieldError.invalid(f"spec.clusterIPs[{i}]", one, m) for m in msgs]
    if len(ips) > 2:
        errs.append(FieldError.invalid("spec.clusterIPs", ips, "may only hold up to 2 values"))
    if bad:
        return errs
    if len(ips) > 1 and len({family_of(x) for x in ips}) != len(ips):
        errs.append(FieldError.invalid("spec.clusterIPs", ips, "may specify no more than one IP for each IP family"))
    fams = _families(svc)
    if not is_headless(svc) and ips and fams:
        for i, one in enumerate(ips[: len(fams)]):
            if fams[i] == "IPv4" and family_of(one) == "IPv6":
                errs.append(
                    FieldError.invalid(
                        f"spec.clusterIPs[{i}]", one, f"expected an IPv4 value as indicated by `ipFamilies[{i}]`"
                    )
                )
            if fams[i] == "IPv6" and family_of(one) != "IPv6":
                errs.append(
                    FieldError.invalid(
                        f"spec.clusterIPs[{i}]", one, f"expected an IPv6 value as indicated by `ipFamilies[{i}]`"
                    )
                )
    return errs


def _validate_port(p: dict, i: int, require_name: bool, names_seen: set[str]) -> list[FieldError]:
    path = f"spec.ports[{i}]"
    errs: list[FieldError] = []
    name = p.get("name") or ""
    if require_name and not name:
        errs.append(FieldError.required(f"{path}.name"))
    elif name:
        errs += [FieldError.invalid(f"{path}.name", name, m) for m in v.is_dns1123_label(name)]
        if name in names_seen:
            errs.append(FieldError.duplicate(f"{path}.name", name))
        names_seen.add(name)
    port = p.get("port")
    if not _is_int(port) or not 1 <= port <= 65535:
        errs.append(FieldError.invalid(f"{path}.port", port if port is not None else 0, _PORT_RANGE))
    target = p.get("targetPort")
    if _is_int(target):
        if not 1 <= target <= 65535:
            errs.append(FieldError.invalid(f"{path}.targetPort", target, _PORT_RANGE))
    elif isinstance(target, str):
        errs += [FieldError.invalid(f"{path}.targetPort", target, m) for m in is_valid_port_name(target)]
    app = p.get("appProtocol")
    if isinstance(app, str):
        errs += [FieldError.invalid(f"{path}.appProtocol", app, m) for m in v.is_qualified_name(app)]
    return errs


_PORT_RANGE = "must be between 1 and 65535, inclusive"


def _port_key(p: dict) -> str:
    """The (protocol, port) pair as upstream prints it: a whole ServicePort, Go-style."""
    return v.GoValue(
        f'core.ServicePort{{Name:"", Protocol:"{p.get("protocol", "")}", AppProtocol:(*string)(nil), '
        f'Port:{p.get("port")}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:""}}, NodePort:0}}'
    )


def validate_service(svc: dict) -> list[FieldError]:
    """The spec rules of upstream's ValidateService (metadata and the enumerations are
    the base strategy's)."""
    spec = svc.get("spec")
    if not isinstance(spec, dict):
        return [FieldError.required("spec")]
    errs: list[FieldError] = []
    typ = spec.get("type")
    ports = _ports(svc)
    headless = is_headless(svc)
    if not ports and not headless and typ != "ExternalName":
        errs.append(FieldError.required("spec.ports"))
    if typ == "LoadBalancer":
        for i, p in enumerate(ports):
            if p.get("port") == NODE_AGENT_PORT:
                errs.append(
                    FieldError.invalid(
                        f"spec.ports[{i}]",
                        NODE_AGENT_PORT,
                        f"may not expose port {NODE_AGENT_PORT} externally since it is used by {names.AGENT_NAME}",
                    )
                )
        if headless:
            errs.append(
                FieldError.invalid("spec.clusterIP", "None", "may not be set to 'None' for LoadBalancer services")
            )
    elif typ == "NodePort":
        if headless:
            errs.append(FieldError.invalid("spec.clusterIP", "None", "may not be set to 'None' for NodePort services"))
    elif typ == "ExternalName":
        if _cluster_ips(svc) or spec.get("clusterIP"):
            errs.append(FieldError.forbidden("spec.clusterIPs", "may not be set for ExternalName services"))
        if _families(svc):
            errs.append(FieldError.forbidden("spec.ipFamilies", "may not be set for ExternalName services"))
        if spec.get("ipFamilyPolicy") is not None:
            errs.append(FieldError.forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"))
        cname = spec.get("externalName")
        cname = cname.removesuffix(".") if isinstance(cname, str) else ""
        if cname:
            errs += [FieldError.invalid("spec.externalName", cname, m) for m in v.is_dns1123_subdomain(cname)]
        else:
            errs.append(FieldError.required("spec.externalName"))
    names_seen: set[str] = set()
    for i, p in enumerate(ports):
        errs += _validate_port(p, i, len(ports) > 1, names_seen)
    selector = spec.get("selector")
    if isinstance(selector, dict):
        errs += v.validate_labels(selector, "spec.selector")
    affinity = spec.get("sessionAffinity")
    if not affinity:
        errs.append(FieldError.required("spec.sessionAffinity"))
    config = spec.get("sessionAffinityConfig")
    if affinity == "ClientIP":
        errs += _validate_client_ip_config(config)
    elif affinity == "None" and config is not None:
        errs.append(FieldError.forbidden("spec.sessionAffinityConfig", "must not be set when session affinity is None"))
    errs += validate_cluster_ips_related(svc)
    externals = spec.get("externalIPs")
    for i, ip in enumerate(externals if isinstance(externals, list) else []):
        msgs = is_valid_ip(ip)
        if msgs:
            errs += [FieldError.invalid(f"spec.externalIPs[{i}]", ip, m) for m in msgs]
        else:
            errs += validate_non_special_ip(ip, f"spec.externalIPs[{i}]")
    if not typ:
        errs.append(FieldError.required("spec.type"))
    if typ in ("ClusterIP", "ExternalName"):
        for i, p in enumerate(ports):
            if _node_port(p):
                errs.append(
                    FieldError.forbidden(f"spec.ports[{i}].nodePort", f"may not be used when `type` is '{typ}'")
                )
    seen_np: set[tuple[Any, int]] = set()
    for i, p in enumerate(ports):
        if not _node_port(p):
            continue
        key = (p.get("protocol"), _node_port(p))
        if key in seen_np:
            errs.append(FieldError.duplicate(f"spec.ports[{i}].nodePort", _node_port(p)))
        seen_np.add(key)
    seen_ports: set[tuple[Any, Any]] = set()
    for i, p in enumerate(ports):
        key2 = (p.get("protocol"), p.get("port"))
        if key2 in seen_ports:
            errs.append(FieldError.duplicate(f"spec.ports[{i}]", _port_key(p)))
        seen_ports.add(key2)
    ranges = spec.get("loadBalancerSourceRanges")
    if isinstance(ranges, list) and ranges:
        if typ != "LoadBalancer":
            errs.append(
                FieldError.forbidden("spec.LoadBalancerSourceRanges", "may only be used when `type` is 'LoadBalancer'")
            )
        for r in ranges:
            try:
                ipaddress.ip_network(str(r).strip(), strict=False)
            except ValueError:
                errs.append(
                    FieldError.invalid(
                        "spec.LoadBalancerSourceRanges",
                        "[" + " ".join(str(x) for x in ranges) + "]",
                        "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 ",
                    )
                )
                break
    if spec.get("allocateLoadBalancerNodePorts") is not None and typ != "LoadBalancer":
        errs.append(
            FieldError.forbidden("spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'")
        )
    lbc = spec.get("loadBalancerClass")
    if lbc is not None:
        if typ == "LoadBalancer":
            errs += [FieldError.invalid("spec.loadBalancerClass", lbc, m) for m in v.is_qualified_name(str(lbc))]
        else:
            errs.append(
                FieldError.forbidden("spec.loadBalancerClass", "may only be used when service type is 'LoadBalancer'")
            )
    errs += _validate_external_traffic(svc)
    if spec.get("internalTrafficPolicy") is None and typ in ("ClusterIP", "NodePort", "LoadBalancer"):
        errs.append(FieldError.required("spec.internalTrafficPolicy"))
    return errs


def _validate_client_ip_config(config: Any) -> list[FieldError]:
    why = "when session affinity type is ClientIP"
    if not isinstance(config, dict):
        return [FieldError.required("spec.sessionAffinityConfig", why)]
    client = config.get("clientIP")
    if not isinstance(client, dict):
        return [FieldError.required("spec.sessionAffinityConfig.clientIP", why)]
    timeout = client.get("timeoutSeconds")
    if timeout is None:
        return [FieldError.required("spec.sessionAffinityConfig.clientIP.timeoutSeconds", why)]
    if not _is_int(timeout) or not 0 < timeout <= MAX_CLIENT_IP_AFFINITY_SECONDS:
        return [
            FieldError.invalid(
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                timeout,
                f"must be greater than 0 and less than {MAX_CLIENT_IP_AFFINITY_SECONDS}",
            )
        ]
    return []


def _validate_external_traffic(svc: dict) -> list[FieldError]:
    spec = _spec(svc)
    errs: list[FieldError] = []
    etp = spec.get("externalTrafficPolicy")
    if not externally_accessible(svc):
        if etp in ("Cluster", "Local"):  # other values: the enumeration rule's error
            errs.append(
                FieldError.invalid(
                    "spec.externalTrafficPolicy", etp, "may only be set for externally-accessible services"
                )
            )
    elif not etp:
        errs.append(FieldError.required("spec.externalTrafficPolicy"))
    hc = spec.get("healthCheckNodePort")
    hc_set = hc is not None and hc != 0
    if not needs_health_check(svc):
        if hc_set:
            errs.append(
                FieldError.invalid(
                    "spec.healthCheckNodePort",
                    hc,
                    "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
                )
            )
    elif not hc_set:
        errs.append(FieldError.required("spec.healthCheckNodePort"))
    elif not _is_int(hc) or not 1 <= hc <= 65535:
        errs.append(FieldError.invalid("spec.healthCheckNodePort", hc, _PORT_RANGE))
    return errs


def validate_service_update(new: dict, old: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    ntype, otype = _type(new), _type(old)
    if ntype != "ExternalName" and otype != "ExternalName":
        nips, oips = _cluster_ips(new), _cluster_ips(old)
        if not (is_headless(old) and is_headless(new)):
            if len(oips) == len(nips):
                for i, ip in enumerate(oips):
                    if ip != nips[i]:
                        errs.append(FieldError.invalid(f"spec.clusterIPs[{i}]", nips, "may not change once set"))
            elif len(oips) > len(nips):
                if not nips:
                    errs.append(FieldError.invalid("spec.clusterIPs[0]", nips, "primary clusterIP can not be unset"))
                if oips and nips and nips[0] != oips[0]:
                    errs.append(FieldError.invalid("spec.clusterIPs[0]", nips, "may not change once set"))
                if len(nips) == 1 and _spec(new).get("ipFamilyPolicy") != "SingleStack":
                    errs.append(
                        FieldError.invalid(
                            "spec.clusterIPs[0]",
                            nips,
                            "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
                        )
                    )
            elif oips and nips[0] != oips[0]:
                errs.append(FieldError.invalid("spec.clusterIPs[0]", nips, "may not change once set"))
        if is_headless(old) == is_headless(new) and not is_headless(new):
            nf, of = _families(new), _families(old)
            if len(of) == len(nf):
                if nf != of:
                    errs.append(FieldError.invalid("spec.ipFamilies[0]", nf, "may not change once set"))
            elif len(of) > len(nf):
                if not nf:
                    errs.append(FieldError.invalid("spec.ipFamilies[0]", nf, "primary ipFamily can not be unset"))
                elif nf[0] != of[0]:
                    errs.append(FieldError.invalid("spec.ipFamilies[0]", nips, "may not change once set"))
            elif of and nf[0] != of[0]:
                errs.append(FieldError.invalid("spec.ipFamilies[0]", nips, "may not change once set"))
    if otype == "LoadBalancer" and ntype == "LoadBalancer":
        if _spec(old).get("loadBalancerClass") != _spec(new).get("loadBalancerClass"):
            errs.append(
                FieldError.invalid(
                    "spec.loadBalancerClass", _spec(new).get("loadBalancerClass"), "may not change once set"
                )
            )
    return errs + validate_service(new)


def validate_load_balancer_status(svc: dict) -> list[FieldError]:
    """status.loadBalancer.ingress entries (upstream ValidateLoadBalancerStatus)."""
    status = svc.get("status")
    lb = status.get("loadBalancer") if isinstance(status, dict) else None
    ingress = lb.get("ingress") if isinstance(lb, dict) else None
    errs: list[FieldError] = []
    for i, entry in enumerate(ingress if isinstance(ingress, list) else []):
        if not isinstance(entry, dict):
            continue
        path = f"status.loadBalancer.ingress[{i}]"
        ip, host = entry.get("ip"), entry.get("hostname")
        if ip and is_valid_ip(ip):
            errs.append(FieldError.invalid(f"{path}.ip", ip, "must be a valid IP address"))
        if isinstance(host, str) and host:
            errs += [FieldError.invalid(f"{path}.hostname", host, m) for m in v.is_dns1123_subdomain(host)]
            if not is_valid_ip(host):
                errs.append(FieldError.invalid(f"{path}.hostname", host, "must be a DNS name, not an IP address"))
    return errs
