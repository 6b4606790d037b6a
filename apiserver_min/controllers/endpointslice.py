"""The endpoint slice controller: ``discovery.orch.io/v1`` EndpointSlices for every Service
with a selector, per address type, at most ``--max-endpoints-per-slice`` endpoints each.

As upstream's reconciler, it changes as few slices as it can: slices whose endpoints
are all still wanted and unchanged are left alone; a slice that lost or changed
endpoints is updated, and filled up with new endpoints before any new slice is made;
remaining new endpoints go into the unchanged slice that they fill closest to full, or
into new slices; a create and a delete of the same address type become one update.
A Service without endpoints keeps one empty placeholder slice per address type.

Each endpoint carries ``conditions`` (``ready``: serving and not terminating, or
always with ``publishNotReadyAddresses``; ``serving``: the pod's Ready condition;
``terminating``: the pod is being deleted), ``nodeName``, ``zone`` (the node's
``topology.orch.io/zone`` label) and ``targetRef``. Slices are labelled
``orch.io/service-name`` and ``endpointslice.orch.io/managed-by:
endpointslice-controller.orch.io`` (plus the Service's own labels) and owned by the
Service, so the garbage collector removes them with it.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Callable

from ..api import names
from ..api import status as st
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent, Entry
from .endpointsutil import (
    STALE_RETRY,
    PodView,
    ServiceView,
    TriggerTimeTracker,
    Views,
    find_port,
    format_trigger_time,
    is_ipv6,
    namespace_terminating,
    pod_view,
    selects,
    service_address_types,
    service_view,
    services_for_pod_event,
    should_pod_be_in_endpoints,
    should_set_hostname,
    target_ref,
)
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers")

DEFAULT_MAX_ENDPOINTS_PER_SLICE = 100
API_VERSION = f"{names.DISCOVERY_GROUP}/v1"
RESERVED_LABELS = (names.LABEL_SERVICE_NAME, names.LABEL_MANAGED_BY_SLICE, names.LABEL_HEADLESS_SERVICE)
DELETED = -1


# --- endpoints and ports ---------------------------------------------------------------------


def endpoint_key(ep: dict) -> tuple:
    """An endpoint's identity across syncs: its addresses, hostname and target."""
    ref = ep.get("targetRef") or {}
    return (
        tuple(sorted(ep.get("addresses") or [])),
        ep.get("hostname") or "",
        ref.get("namespace") or "",
        ref.get("name") or "",
    )


def ports_key(ports: list[dict] | None) -> tuple:
    """A set of slice ports, in any order."""
    return tuple(
        sorted(
            (p.get("name") or "", p.get("port") or 0, p.get("protocol") or "TCP", p.get("appProtocol") or "")
            for p in ports or []
        )
    )


def endpoint_ports(svc: ServiceView, pod: PodView) -> list[dict]:
    """The slice ports of one pod for a Service (a pod without a named port lacks that port)."""
    out: list[dict] = []
    if not svc.ports and svc.headless:
        return out
    for sp in svc.ports:
        number = find_port(pod, sp)
        if number is None:
            continue
        port: dict = {"name": sp.name, "port": number, "protocol": sp.protocol}
        if sp.app_protocol is not None:
            port["appProtocol"] = sp.app_protocol
        out.append(port)
    return out


def pod_endpoint(pod: PodView, zone: str, svc: ServiceView, address_type: str) -> dict:
    serving = pod.ready
    terminating = pod.terminating
    ready = svc.publish_not_ready or (serving and not terminating)
    want_v6 = address_type == "IPv6"
    ep: dict = {
        "addresses": [ip for ip in pod.ips if is_ipv6(ip) == want_v6],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": target_ref(pod),
    }
    if pod.node_name:
        ep["nodeName"] = pod.node_name
    if zone:
        ep["zone"] = zone
    if should_set_hostname(pod, svc):
        ep["hostname"] = pod.hostname
    return ep


def slice_labels(existing: dict | None, svc: ServiceView, controller: str) -> tuple[dict, bool]:
    """The labels a slice of ``svc`` should carry, and whether its copied Service labels differ."""
    current = {k: v for k, v in ((existing or {}).get("labels") or {}).items() if k not in RESERVED_LABELS}
    wanted = {k: v for k, v in svc.labels.items() if k not in RESERVED_LABELS}
    changed = current != wanted
    if not svc.ip_set:
        wanted[names.LABEL_HEADLESS_SERVICE] = ""
    wanted[names.LABEL_SERVICE_NAME] = svc.name
    wanted[names.LABEL_MANAGED_BY_SLICE] = controller
    return wanted, changed


def slice_prefix(name: str) -> str:
    """``<name>-`` as the generateName, unless that is too long to generate from."""
    return f"{name}-" if len(name) + 1 <= 253 - 5 else name


def new_slice(svc: ServiceView, ports: list[dict], address_type: str) -> dict:
    labels, _ = slice_labels(None, svc, names.ENDPOINTSLICE_CONTROLLER_NAME)
    return {
        "apiVersion": API_VERSION,
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": slice_prefix(svc.name),
            "namespace": svc.namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": svc.name,
                    "uid": svc.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": address_type,
        "endpoints": [],
        "ports": copy.deepcopy(ports),
    }


def owned_by(slice_: dict, svc: ServiceView) -> bool:
    for ref in (slice_.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("uid") == svc.uid and ref.get("kind") == "Service" and ref.get("apiVersion") == "v1":
            return True
    return False


def _name(slice_: dict) -> str:
    return (slice_.get("metadata") or {}).get("name") or ""


# --- the reconciler ----------------------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    create: list[dict] = dataclasses.field(default_factory=list)
    update: list[dict] = dataclasses.field(default_factory=list)
    delete: list[dict] = dataclasses.field(default_factory=list)
    missing_nodes: list[str] = dataclasses.field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def reconcile(
    svc: ServiceView,
    pods: list[PodView],
    existing: list[dict],
    node_zone: Callable[[str], str | None],
    max_per_slice: int = DEFAULT_MAX_ENDPOINTS_PER_SLICE,
    trigger_time: float = 0.0,
) -> Plan:
    """What to create, update and delete so that ``existing`` (the Service's slices, as
    stored) list ``pods``. ``node_zone(name)`` is a node's zone ("" without one), None
    when the node does not exist: such pods are left out (and reported in
    ``missing_nodes``) unless the Service publishes not-ready addresses."""
    plan = Plan()
    wanted_types = service_address_types(svc)
    by_type: dict[str, list[dict]] = {}
    for s in existing:
        if s.get("addressType") not in wanted_types:
            plan.delete.append(s)
        else:
            by_type.setdefault(s["addressType"], []).append(s)
    for address_type in wanted_types:
        _reconcile_type(plan, svc, pods, by_type.get(address_type, []), node_zone, max_per_slice, address_type)
    _finalize(plan, svc, trigger_time)
    return plan


def _reconcile_type(
    plan: Plan,
    svc: ServiceView,
    pods: list[PodView],
    existing: list[dict],
    node_zone: Callable[[str], str | None],
    max_per_slice: int,
    address_type: str,
) -> None:
    create: list[dict] = []
    update: list[dict] = []
    delete: list[dict] = []
    existing_by_ports: dict[tuple, list[dict]] = {}
    for s in existing:
        if owned_by(s, svc):
            existing_by_ports.setdefault(ports_key(s.get("ports")), []).append(s)
        else:
            delete.append(s)
    desired: dict[tuple, dict[tuple, dict]] = {}
    desired_ports: dict[tuple, list[dict]] = {}
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, True):
            continue
        ports = endpoint_ports(svc, pod)
        pk = ports_key(ports)
        bucket = desired.setdefault(pk, {})
        desired_ports.setdefault(pk, ports)
        zone = node_zone(pod.node_name)
        if zone is None:
            plan.missing_nodes.append(pod.node_name)
            if not svc.publish_not_ready:
                continue
            zone = ""
        ep = pod_endpoint(pod, zone, svc, address_type)
        if ep["addresses"]:
            bucket[endpoint_key(ep)] = ep
    for pk, wanted in desired.items():
        c, u, d = _reconcile_ports(
            svc, existing_by_ports.get(pk, []), wanted, desired_ports[pk], max_per_slice, address_type
        )
        create += c
        update += u
        delete += d
    for pk, slices in existing_by_ports.items():
        if pk not in desired:
            delete += slices
    if len(existing) == len(delete) and not create:
        placeholder = new_slice(svc, [], address_type)
        if len(delete) == 1 and _is_placeholder(delete[0], placeholder):
            delete = []
        else:
            create.append(placeholder)
    plan.create += create
    plan.update += update
    plan.delete += delete


def _is_placeholder(s: dict, placeholder: dict) -> bool:
    md = s.get("metadata") or {}
    return (
        not s.get("endpoints")
        and not s.get("ports")
        and s.get("addressType") == placeholder["addressType"]
        and (md.get("labels") or {}) == placeholder["metadata"]["labels"]
    )


def _reconcile_ports(
    svc: ServiceView,
    existing: list[dict],
    wanted: dict[tuple, dict],
    ports: list[dict],
    max_per_slice: int,
    address_type: str,
) -> tuple[list[dict], list[dict], list[dict]]:
    by_name: dict[str, dict] = {}
    unchanged: list[str] = []
    to_update: list[str] = []
    to_delete: list[str] = []
    remaining = dict(wanted)
    # 1. Keep what is still wanted in each slice; note slices that lost or changed endpoints.
    for s in existing:
        name = _name(s)
        by_name[name] = s
        kept: list[dict] = []
        changed = False
        for ep in s.get("endpoints") or []:
            key = endpoint_key(ep)
            got = remaining.pop(key, None)
            if got is not None:
                kept.append(got)
                if got != ep:
                    changed = True
        labels, labels_changed = slice_labels(s.get("metadata"), svc, names.ENDPOINTSLICE_CONTROLLER_NAME)
        if changed or len(kept) != len(s.get("endpoints") or []):
            if not kept:
                to_delete.append(name)
            else:
                new = copy.deepcopy(s)
                new["endpoints"] = kept
                new["metadata"]["labels"] = labels
                by_name[name] = new
                to_update.append(name)
        elif labels_changed or (s.get("metadata") or {}).get("labels") != labels:
            new = copy.deepcopy(s)
            new["metadata"]["labels"] = labels
            by_name[name] = new
            to_update.append(name)
        else:
            unchanged.append(name)
    pending = list(remaining.values())
    # 2. Fill the slices being updated anyway, fullest first.
    if pending and to_update:
        for name in sorted(to_update, key=lambda n: -len(by_name[n]["endpoints"])):
            s = by_name[name]
            while pending and len(s["endpoints"]) < max_per_slice:
                s["endpoints"].append(pending.pop())
    # 3. The rest into the unchanged slice they fill closest to full, else new slices.
    create: list[dict] = []
    while pending:
        target: dict | None = None
        if len(pending) < max_per_slice and unchanged:
            target = _slice_to_fill([by_name[n] for n in unchanged], len(pending), max_per_slice)
        if target is None:
            target = new_slice(svc, ports, address_type)
        else:
            target = copy.deepcopy(target)
            by_name[_name(target)] = target
        while pending and len(target["endpoints"]) < max_per_slice:
            target["endpoints"].append(pending.pop())
        if _name(target):
            to_update.append(_name(target))
            unchanged.remove(_name(target))
        else:
            create.append(target)
    return create, [by_name[n] for n in to_update], [by_name[n] for n in to_delete]


def _slice_to_fill(slices: list[dict], n: int, max_per_slice: int) -> dict | None:
    best, best_diff = None, max_per_slice
    for s in slices:
        diff = max_per_slice - (n + len(s.get("endpoints") or []))
        if 0 <= diff < best_diff:
            best, best_diff = s, diff
            if diff == 0:
                break
    return best


def _finalize(plan: Plan, svc: ServiceView, trigger_time: float) -> None:
    """Creates and deletes of one address type become updates of the slices to delete."""
    i = 0
    while i < len(plan.delete) and plan.create:
        doomed = plan.delete[i]
        fresh = plan.create[-1]
        if doomed.get("addressType") == fresh["addressType"] and owned_by(doomed, svc):
            md = fresh["metadata"]
            md["name"] = _name(doomed)
            md.pop("generateName", None)
            rv = (doomed.get("metadata") or {}).get("resourceVersion")
            if rv:
                md["resourceVersion"] = rv
            plan.create.pop()
            plan.update.append(fresh)
            plan.delete.pop(i)
        else:
            i += 1
    if svc.deleting:
        plan.create = []  # the garbage collector is removing this Service's slices
    for s in plan.create + plan.update:
        md = s["metadata"]
        annotations = dict(md.get("annotations") or {})
        if trigger_time:
            annotations[names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME] = format_trigger_time(trigger_time)
        else:
            annotations.pop(names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME, None)
        if annotations:
            md["annotations"] = annotations
        else:
            md.pop("annotations", None)


# --- what the informer has not seen yet --------------------------------------------------------


class SliceTracker:
    """The revisions of the slices a controller wrote (or deleted) per Service, so that a
    sync does not act on an informer that has not yet seen them (upstream's
    endpointSliceTracker)."""

    def __init__(self) -> None:
        self._expected: dict[tuple[str, str], dict[str, int]] = {}

    def wrote(self, key: tuple[str, str], slice_: dict) -> None:
        md = slice_["metadata"]
        self._expected.setdefault(key, {})[md["name"]] = int(md["resourceVersion"])

    def deleted(self, key: tuple[str, str], name: str) -> None:
        self._expected.setdefault(key, {})[name] = DELETED

    def observed_deletion(self, key: tuple[str, str], name: str) -> None:
        """The informer saw the slice go (whoever deleted it): nothing more to wait for."""
        expected = self._expected.get(key)
        if expected is not None:
            expected.pop(name, None)

    def stale(self, key: tuple[str, str], lookup: Callable[[str], Entry | None]) -> bool:
        expected = self._expected.get(key)
        if not expected:
            return False
        for name, rv in expected.items():
            e = lookup(name)
            if rv == DELETED:
                if e is not None:
                    return True
            elif e is None or e.rv < rv:
                return True
        del self._expected[key]
        return False

    def forget(self, key: tuple[str, str]) -> None:
        self._expected.pop(key, None)


# --- the controller ----------------------------------------------------------------------------


class EndpointSliceController:
    """Keeps each selecting Service's EndpointSlices equal to its pods."""

    def __init__(self, client: Client, informers: InformerFactory, max_endpoints_per_slice: int = 100):
        self.client = client
        self.max_per_slice = max_endpoints_per_slice
        self.slice_kind = informers.kind(names.DISCOVERY_GROUP, "v1", "endpointslices")
        self.services = informers.for_resource("", "v1", "services")
        self.pods = informers.for_resource("", "v1", "pods")
        self.nodes = informers.for_resource("", "v1", "nodes")
        self.slices = informers.for_kind(self.slice_kind)
        self.svc_views: Views[ServiceView] = Views(service_view)
        self.pod_views: Views[PodView] = Views(pod_view)
        self.triggers = TriggerTimeTracker()
        self.tracker = SliceTracker()
        self.queue = RateLimitedQueue()
        self.events = EventRecorder(client, informers.registry, "endpoint-slice-controller")

    def start(self) -> None:
        self.services.add_handler(self.on_service)
        self.pods.add_handler(self.on_pod)
        self.slices.add_handler(self.on_slice)
        self.nodes.add_handler(self.on_node)

    def on_service(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.services.list():
                self.queue.add((e.namespace, e.name))
            return
        if ev.type == "DELETED":
            self.svc_views.forget(ev.entry.key)
        self.queue.add((ev.entry.namespace, ev.entry.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        if ev.type == "DELETED":
            self.pod_views.forget(ev.entry.key)
        ns = ev.entry.namespace
        for name in services_for_pod_event(self.services.list(ns), self.svc_views, ev):
            self.queue.add((ns, name))

    def on_slice(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        labels = ev.entry.labels
        if labels.get(names.LABEL_MANAGED_BY_SLICE) != names.ENDPOINTSLICE_CONTROLLER_NAME:
            return
        svc = labels.get(names.LABEL_SERVICE_NAME)
        if svc:
            key = (ev.entry.namespace, svc)
            if ev.type == "DELETED":
                self.tracker.observed_deletion(key, ev.entry.name)
            self.queue.add(key)

    def on_node(self, ev: CacheEvent | None) -> None:
        """A node that appears, goes or changes zone: resync the Services of its pods."""
        if ev is None:
            return
        if ev.type == "MODIFIED" and ev.prev is not None:
            if ev.prev.labels.get(names.LABEL_ZONE) == ev.entry.labels.get(names.LABEL_ZONE):
                return
        node = ev.entry.name
        namespaces = {e.namespace for e in self.pods.list() if e.fields.get("spec.nodeName") == node}
        for ns in namespaces:
            for e in self.services.list(ns):
                self.queue.add((ns, e.name))

    def node_zone(self, name: str) -> str | None:
        if not name:
            return None
        e = self.nodes.get("", name)
        if e is None:
            return None
        return e.labels.get(names.LABEL_ZONE, "")

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "endpointslices")

    def service_slices(self, ns: str, name: str, managed_by: str) -> list[Entry]:
        return [
            e
            for e in self.slices.list(ns)
            if e.labels.get(names.LABEL_SERVICE_NAME) == name
            and e.labels.get(names.LABEL_MANAGED_BY_SLICE) == managed_by
            and not e.deleting
        ]

    async def sync(self, key: tuple[str, str]) -> None:
        ns, name = key
        svc_entry = self.services.get(ns, name)
        if svc_entry is None:
            self.triggers.forget(ns, name)
            self.tracker.forget(key)
            return  # the garbage collector deletes the slices the Service owned
        svc = self.svc_views.get(svc_entry)
        if svc.type == "ExternalName" or svc.selector is None:
            return
        if self.tracker.stale(key, lambda n: self.slices.get(ns, n)):
            self.queue.add_after(key, STALE_RETRY)
            return
        pods = [self.pod_views.get(e) for e in self.pods.list(ns) if selects(svc.selector, e.labels)]
        existing = [e.object() for e in self.service_slices(ns, name, names.ENDPOINTSLICE_CONTROLLER_NAME)]
        trigger = self.triggers.compute(svc, pods)
        plan = reconcile(svc, pods, existing, self.node_zone, self.max_per_slice, trigger)
        try:
            await self.apply(key, plan)
        except st.ApiError as exc:
            ref = {"kind": "Service", "namespace": ns, "name": name, "uid": svc.uid, "apiVersion": "v1"}
            message = f"Error updating Endpoint Slices for Service {ns}/{name}: {exc.message}"
            await self.events.record(ref, "Warning", "FailedToUpdateEndpointSlices", message)
            raise
        if plan.missing_nodes and not svc.publish_not_ready:
            raise st.ApiError(
                404,
                "NotFound",
                f"skipped pods of Service {ns}/{name}: node(s) {', '.join(sorted(set(plan.missing_nodes)))} not found",
            )

    async def apply(self, key: tuple[str, str], plan: Plan) -> None:
        ns = key[0]
        for s in plan.create:
            try:
                out = await self.client.create(self.slice_kind, ns, s)
            except st.ApiError as exc:
                if namespace_terminating(exc):
                    return
                raise
            self.tracker.wrote(key, out)
        for s in plan.update:
            out = await self.client.update(self.slice_kind, ns, _name(s), s)
            self.tracker.wrote(key, out)
        for s in plan.delete:
            try:
                await self.client.delete(self.slice_kind, ns, _name(s))
            except st.ApiError as exc:
                if exc.code != 404:
                    raise
            self.tracker.deleted(key, _name(s))
