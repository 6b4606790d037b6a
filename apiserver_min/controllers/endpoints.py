"""The endpoints controller: one Endpoints object per Service with a selector, listing
the selected pods' addresses and ports.

As upstream's: pods that have an IP and are not finished are listed, ready ones in
``addresses`` and the others in ``notReadyAddresses`` (all in ``addresses`` with
``publishNotReadyAddresses``, which also keeps terminating pods; without it a
terminating pod is left out). A named ``targetPort`` is looked up in each pod's
container ports, and a pod without it is left out for that port. Subsets are packed
canonically (addresses grouped by identical port sets, sorted), capped at 1000
addresses with the ``endpoints.orch.io/over-capacity: truncated`` annotation. The
Service's labels are copied (plus ``service.orch.io/headless`` for a Service without a
cluster IP). Nothing is written when nothing changed; the Endpoints go with their
Service. ExternalName Services and Services without a selector are left alone: their
Endpoints belong to whoever writes them.
"""

from __future__ import annotations

import copy
import logging
import math

import orjson

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .endpointsutil import (
    STALE_RETRY,
    PodView,
    ServiceView,
    TriggerTimeTracker,
    Views,
    endpoint_ip_for_service,
    find_port,
    format_trigger_time,
    namespace_terminating,
    pod_view,
    selects,
    service_view,
    services_for_pod_event,
    should_pod_be_in_endpoints,
    should_set_hostname,
    target_ref,
)
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers")

MAX_CAPACITY = 1000  # addresses per Endpoints object
TRUNCATED = "truncated"


# --- packing ---------------------------------------------------------------------------------


def _addr_key(addr: dict) -> tuple[str, str]:
    return (addr.get("ip") or "", (addr.get("targetRef") or {}).get("uid") or "")


def _port_key(port: dict | None) -> tuple:
    if port is None:
        return ("", -1, "", "")
    return (port.get("name") or "", port.get("port") or 0, port.get("protocol") or "", port.get("appProtocol") or "")


def repack_subsets(subsets: list[dict]) -> list[dict]:
    """Subsets in their canonical form: every (address, port) pair expanded, then addresses
    offering the same set of ports (with the same readiness) grouped into one subset; an
    address not ready on any port is not ready on all of them. Addresses sorted by IP and
    UID, ports by name, number and protocol, subsets by their first address."""
    addrs: dict[tuple[str, str], dict] = {}
    by_port: dict[tuple, dict[tuple[str, str], bool]] = {}
    port_of: dict[tuple, dict | None] = {}
    for ss in subsets:
        ports: list[dict | None] = list(ss.get("ports") or []) or [None]
        for port in ports:
            pk = _port_key(port)
            port_of.setdefault(pk, port)
            seen = by_port.setdefault(pk, {})
            for ready, field in ((True, "addresses"), (False, "notReadyAddresses")):
                for a in ss.get(field) or []:
                    ak = _addr_key(a)
                    addrs.setdefault(ak, a)
                    if seen.get(ak, True):  # not ready trumps ready
                        seen[ak] = ready
    groups: dict[frozenset, list[tuple]] = {}
    for pk, seen in by_port.items():
        groups.setdefault(frozenset(seen.items()), []).append(pk)
    out: list[dict] = []
    for members, pks in groups.items():
        ready = sorted((ak for ak, r in members if r))
        not_ready = sorted((ak for ak, r in members if not r))
        subset: dict = {}
        if ready:
            subset["addresses"] = [copy.deepcopy(addrs[ak]) for ak in ready]
        if not_ready:
            subset["notReadyAddresses"] = [copy.deepcopy(addrs[ak]) for ak in not_ready]
        ports = [copy.deepcopy(port_of[pk]) for pk in sorted(pks) if port_of[pk] is not None]
        if ports:
            subset["ports"] = ports
        out.append(subset)
    out.sort(key=_subset_sort_key)
    return out


def _subset_sort_key(ss: dict) -> tuple:
    first = (ss.get("addresses") or ss.get("notReadyAddresses") or [{}])[0]
    return (_addr_key(first), [_port_key(p) for p in ss.get("ports") or []])


def build_subsets(svc: ServiceView, pods: list[PodView]) -> list[dict]:
    """The packed subsets of a Service's selected pods (upstream's syncService body)."""
    subsets: list[dict] = []
    tolerate = svc.publish_not_ready
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, tolerate):
            continue
        ip = endpoint_ip_for_service(svc, pod)
        if not ip:
            continue
        addr: dict = {"ip": ip}
        if should_set_hostname(pod, svc):
            addr["hostname"] = pod.hostname
        if pod.node_name:
            addr["nodeName"] = pod.node_name
        addr["targetRef"] = target_ref(pod)
        field = "addresses" if tolerate or pod.ready else "notReadyAddresses"
        if not svc.ports:
            if svc.headless:  # a headless Service may have no ports
                subsets.append({field: [addr]})
            continue
        for sp in svc.ports:
            number = find_port(pod, sp)
            if number is None:
                continue
            port: dict = {"name": sp.name, "port": number, "protocol": sp.protocol}
            if sp.app_protocol is not None:
                port["appProtocol"] = sp.app_protocol
            subsets.append({field: [addr], "ports": [port]})
    return repack_subsets(subsets)


def _count(subsets: list[dict]) -> int:
    return sum(len(ss.get("addresses") or []) + len(ss.get("notReadyAddresses") or []) for ss in subsets)


def truncate_subsets(subsets: list[dict]) -> bool:
    """Cut the subsets down to MAX_CAPACITY addresses in place, ready ones first, each
    subset keeping its share (rounded up, the last ones getting what is left). True
    when something was cut."""
    total_ready = sum(len(ss.get("addresses") or []) for ss in subsets)
    total_not_ready = sum(len(ss.get("notReadyAddresses") or []) for ss in subsets)
    if total_ready + total_not_ready <= MAX_CAPACITY:
        return False
    truncate_ready = total_ready > MAX_CAPACITY
    if truncate_ready:
        room, total, field = MAX_CAPACITY, total_ready, "addresses"
    else:
        room, total, field = MAX_CAPACITY - total_ready, total_not_ready, "notReadyAddresses"
    left = room
    for ss in subsets:
        have = ss.get(field) or []
        share = min(math.ceil(len(have) / total * room), left)
        kept = have[:share]
        if kept:
            ss[field] = kept
        else:
            ss.pop(field, None)
        if truncate_ready:
            ss.pop("notReadyAddresses", None)
        left -= len(kept)
    return True


def _capacity_annotation_ok(annotations: dict, subsets: list[dict]) -> bool:
    n = _count(subsets)
    if n > MAX_CAPACITY:
        return False
    return names.ANNOTATION_ENDPOINTS_OVER_CAPACITY not in annotations or n == MAX_CAPACITY


def desired_endpoints(svc: ServiceView, subsets: list[dict], current: dict | None, trigger_time: float) -> dict | None:
    """The Endpoints object to write for ``svc``, or None when ``current`` already says it."""
    truncated = truncate_subsets(subsets)
    if current is not None:
        md = current.get("metadata") or {}
        labels = dict(md.get("labels") or {})
        labels.pop(names.LABEL_HEADLESS_SERVICE, None)
        if (
            (current.get("subsets") or []) == subsets
            and labels == svc.labels
            and _capacity_annotation_ok(md.get("annotations") or {}, current.get("subsets") or [])
            and (names.ANNOTATION_ENDPOINTS_OVER_CAPACITY in (md.get("annotations") or {})) == truncated
        ):
            return None
        new = copy.deepcopy(current)
    else:
        new = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": svc.name, "namespace": svc.namespace}}
    md = new.setdefault("metadata", {})
    if subsets:
        new["subsets"] = subsets
    else:
        new.pop("subsets", None)
    labels = dict(svc.labels)
    if svc.ip_set:
        labels.pop(names.LABEL_HEADLESS_SERVICE, None)
    else:
        labels[names.LABEL_HEADLESS_SERVICE] = ""
    if labels:
        md["labels"] = labels
    else:
        md.pop("labels", None)
    annotations = dict(md.get("annotations") or {})
    if trigger_time:
        annotations[names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME] = format_trigger_time(trigger_time)
    else:
        annotations.pop(names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME, None)
    if truncated:
        annotations[names.ANNOTATION_ENDPOINTS_OVER_CAPACITY] = TRUNCATED
    else:
        annotations.pop(names.ANNOTATION_ENDPOINTS_OVER_CAPACITY, None)
    if annotations:
        md["annotations"] = annotations
    else:
        md.pop("annotations", None)
    return new


# --- the controller --------------------------------------------------------------------------


class EndpointsController:
    """Keeps each selecting Service's Endpoints equal to its ready and not-ready pods."""

    def __init__(self, client: Client, informers: InformerFactory):
        self.client = client
        self.svc_kind = informers.kind("", "v1", "services")
        self.ep_kind = informers.kind("", "v1", "endpoints")
        self.services = informers.for_kind(self.svc_kind)
        self.pods = informers.for_resource("", "v1", "pods")
        self.endpoints = informers.for_kind(self.ep_kind)
        self.svc_views: Views[ServiceView] = Views(service_view)
        self.pod_views: Views[PodView] = Views(pod_view)
        self.triggers = TriggerTimeTracker()
        self.queue = RateLimitedQueue()
        self.events = EventRecorder(client, informers.registry, "endpoint-controller")
        self._written: dict[tuple[str, str], int] = {}  # key -> revision of this controller's last write

    def start(self) -> None:
        self.services.add_handler(self.on_service)
        self.pods.add_handler(self.on_pod)
        self.endpoints.add_handler(self.on_endpoints)

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
            return  # the services' replay looks at every pod again
        if ev.type == "DELETED":
            self.pod_views.forget(ev.entry.key)
        ns = ev.entry.namespace
        for name in services_for_pod_event(self.services.list(ns), self.svc_views, ev):
            self.queue.add((ns, name))

    def on_endpoints(self, ev: CacheEvent | None) -> None:
        if ev is None:
            # Upstream's leftover check: Endpoints whose Service is gone are deleted.
            for e in self.endpoints.list():
                if names.ANNOTATION_LEADER_ELECTION_RECORD not in _annotations(e.raw):
                    self.queue.add((e.namespace, e.name))
            return
        if ev.type == "DELETED":
            key = (ev.entry.namespace, ev.entry.name)
            self._written.pop(key, None)  # whatever this controller wrote last is gone
            self.queue.add(key)

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "endpoints")

    async def sync(self, key: tuple[str, str]) -> None:
        ns, name = key
        svc_entry = self.services.get(ns, name)
        if svc_entry is None:
            self.triggers.forget(ns, name)
            self._written.pop(key, None)
            if self.endpoints.get(ns, name) is not None:
                try:
                    await self.client.delete(self.ep_kind, ns, name)
                except st.ApiError as exc:
                    if exc.code != 404:
                        raise
            return
        svc = self.svc_views.get(svc_entry)
        if svc.type == "ExternalName" or svc.selector is None:
            return
        pods = [self.pod_views.get(e) for e in self.pods.list(ns) if selects(svc.selector, e.labels)]
        trigger = self.triggers.compute(svc, pods)
        cur = self.endpoints.get(ns, name)
        written = self._written.get(key, 0)
        if written and (cur is None or cur.rv < written):
            self.queue.add_after(key, STALE_RETRY)  # our own last write is not in the informer yet
            return
        self._written.pop(key, None)
        current = cur.object() if cur is not None else None
        new = desired_endpoints(svc, build_subsets(svc, pods), current, trigger)
        if new is None:
            return
        try:
            if current is None:
                out = await self.client.create(self.ep_kind, ns, new)
            else:
                out = await self.client.update(self.ep_kind, ns, name, new)
        except st.ApiError as exc:
            if current is None and exc.code == 403 and namespace_terminating(exc):
                return  # creates keep failing in a terminating namespace; drop the item
            ref = {"kind": "Endpoints", "namespace": ns, "name": name, "apiVersion": "v1"}
            if current is None:
                what = ("FailedToCreateEndpoint", f"Failed to create endpoint for service {ns}/{name}: {exc.message}")
            else:
                what = ("FailedToUpdateEndpoint", f"Failed to update endpoint {ns}/{name}: {exc.message}")
            await self.events.record(ref, "Warning", *what)
            raise
        self._written[key] = int(out["metadata"]["resourceVersion"])


def _annotations(raw: bytes) -> dict:
    if b"annotations" not in raw:
        return {}
    return dict_at(dict_at(orjson.loads(raw), "metadata"), "annotations")
