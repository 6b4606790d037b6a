"""The endpoint slice mirroring controller: EndpointSlices for Endpoints that someone other
than the endpoints controller writes, for Services without a selector.

As upstream's: each canonical subset of the Endpoints becomes one slice per address
type (IPv4, IPv6; addresses that parse as neither are skipped), with at most
``--mirroring-max-endpoints-per-subset`` endpoints. Slices are labelled
``orch.io/service-name`` and ``endpointslice.orch.io/managed-by:
endpointslicemirroring-controller.orch.io``, carry the Endpoints' labels and
annotations (but not ``endpoints.orch.io/last-change-trigger-time`` nor the
last-applied configuration) and are owned by the Endpoints. Mirrored slices are
removed when the Endpoints or its Service goes, when the Service gains a selector, or
when the Endpoints is labelled ``endpointslice.orch.io/skip-mirror: "true"`` (as the
API server's own ``orch`` Endpoints are) or carries a leader-election record.
"""

from __future__ import annotations

import copy
import dataclasses
import logging

from ..api import names
from ..api import status as st
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent, Entry
from .endpoints import repack_subsets
from .endpointslice import API_VERSION, SliceTracker, endpoint_key, ports_key, slice_prefix
from .endpointsutil import STALE_RETRY, ServiceView, Views, address_family, namespace_terminating, service_view
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers")

DEFAULT_MAX_ENDPOINTS_PER_SUBSET = 1000
SKIPPED_ANNOTATIONS = (names.ANNOTATION_ENDPOINTS_LAST_CHANGE_TRIGGER_TIME, names.ANNOTATION_LAST_APPLIED)
ADDRESS_TYPES = ("IPv4", "IPv6")


def should_mirror(endpoints: dict) -> bool:
    md = endpoints.get("metadata") or {}
    if (md.get("labels") or {}).get(names.LABEL_SKIP_MIRROR) == "true":
        return False
    return names.ANNOTATION_LEADER_ELECTION_RECORD not in (md.get("annotations") or {})


def _slice_ports(ports: list[dict] | None) -> list[dict]:
    out = []
    for p in ports or []:
        port = {"name": p.get("name") or "", "port": p.get("port"), "protocol": p.get("protocol") or "TCP"}
        if p.get("appProtocol") is not None:
            port["appProtocol"] = p["appProtocol"]
        out.append(port)
    return out


def address_endpoint(address: dict, ready: bool) -> dict:
    ep: dict = {"addresses": [address.get("ip")], "conditions": {"ready": ready}}
    if address.get("targetRef") is not None:
        ep["targetRef"] = copy.deepcopy(address["targetRef"])
    if address.get("nodeName") is not None:
        ep["nodeName"] = address["nodeName"]
    if address.get("hostname"):
        ep["hostname"] = address["hostname"]
    return ep


@dataclasses.dataclass
class MirrorPlan:
    create: list[dict] = dataclasses.field(default_factory=list)
    update: list[dict] = dataclasses.field(default_factory=list)
    delete: list[dict] = dataclasses.field(default_factory=list)
    invalid: int = 0  # addresses that are not IP addresses
    skipped: int = 0  # addresses past the per-subset cap (and the invalid ones)


def _mirror_labels_and_annotations(endpoints: dict) -> tuple[dict, dict]:
    md = endpoints.get("metadata") or {}
    labels = dict(md.get("labels") or {})
    annotations = {k: v for k, v in (md.get("annotations") or {}).items() if k not in SKIPPED_ANNOTATIONS}
    return labels, annotations


def new_mirrored_slice(endpoints: dict, ports: list[dict], address_type: str, name: str) -> dict:
    md = endpoints.get("metadata") or {}
    labels, annotations = _mirror_labels_and_annotations(endpoints)
    labels[names.LABEL_SERVICE_NAME] = md.get("name", "")
    labels[names.LABEL_MANAGED_BY_SLICE] = names.ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME
    meta: dict = {
        "namespace": md.get("namespace", ""),
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "name": md.get("name", ""),
                "uid": md.get("uid", ""),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if annotations:
        meta["annotations"] = annotations
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = slice_prefix(md.get("name", ""))
    return {
        "apiVersion": API_VERSION,
        "kind": "EndpointSlice",
        "metadata": meta,
        "addressType": address_type,
        "endpoints": [],
        "ports": copy.deepcopy(ports),
    }


def mirror(endpoints: dict, existing: list[dict], max_per_subset: int = DEFAULT_MAX_ENDPOINTS_PER_SUBSET) -> MirrorPlan:
    """What to create, update and delete so that ``existing`` (the mirrored slices) say
    what ``endpoints`` says."""
    plan = MirrorPlan()
    desired: dict[tuple, dict[tuple, dict]] = {}
    desired_ports: dict[tuple, list[dict]] = {}
    for subset in repack_subsets(list(endpoints.get("subsets") or [])):
        ports = _slice_ports(subset.get("ports"))
        pk = ports_key(ports)
        for t in ADDRESS_TYPES:
            desired.setdefault((pk, t), {})
            desired_ports[(pk, t)] = ports
        total = len(subset.get("addresses") or []) + len(subset.get("notReadyAddresses") or [])
        added = 0
        for ready, field in ((True, "addresses"), (False, "notReadyAddresses")):
            for address in subset.get(field) or []:
                if added >= max_per_subset:
                    break
                family = address_family(str(address.get("ip") or ""))
                if family is None:
                    plan.invalid += 1
                    continue
                ep = address_endpoint(address, ready)
                desired[(pk, family)][endpoint_key(ep)] = ep
                added += 1
        plan.skipped += total - added
    existing_by_key: dict[tuple, list[dict]] = {}
    for s in existing:
        existing_by_key.setdefault((ports_key(s.get("ports")), s.get("addressType")), []).append(s)
    labels, annotations = _mirror_labels_and_annotations(endpoints)
    for key, wanted in desired.items():
        have = existing_by_key.get(key, [])
        if not wanted:
            plan.delete += have
            continue
        name = ""
        if have:
            plan.delete += have[1:]
            first = have[0]
            fmd = first.get("metadata") or {}
            first_labels = {
                k: v
                for k, v in (fmd.get("labels") or {}).items()
                if k not in (names.LABEL_MANAGED_BY_SLICE, names.LABEL_SERVICE_NAME)
            }
            same_endpoints = {endpoint_key(e): e for e in first.get("endpoints") or []} == wanted
            if same_endpoints and first_labels == labels and (fmd.get("annotations") or {}) == annotations:
                continue
            name = fmd.get("name", "")
        s = new_mirrored_slice(endpoints, desired_ports[key], key[1], name)
        if name:
            s["metadata"]["resourceVersion"] = (have[0].get("metadata") or {}).get("resourceVersion", "")
        s["endpoints"] = list(wanted.values())[:max_per_subset]
        (plan.update if name else plan.create).append(s)
    for key, have in existing_by_key.items():
        if key not in desired:
            plan.delete += have
    _recycle(plan)
    return plan


def _recycle(plan: MirrorPlan) -> None:
    """A create and a delete of one address type become an update of the slice to delete."""
    keep_create: list[dict] = []
    for s in plan.create:
        match = next((d for d in plan.delete if d.get("addressType") == s["addressType"]), None)
        if match is None:
            keep_create.append(s)
            continue
        plan.delete.remove(match)
        md = s["metadata"]
        md.pop("generateName", None)
        md["name"] = (match.get("metadata") or {}).get("name", "")
        rv = (match.get("metadata") or {}).get("resourceVersion")
        if rv:
            md["resourceVersion"] = rv
        plan.update.append(s)
    plan.create = keep_create


class EndpointSliceMirroringController:
    """Mirrors selector-less Services' Endpoints into EndpointSlices."""

    def __init__(self, client: Client, informers: InformerFactory, max_endpoints_per_subset: int = 1000):
        self.client = client
        self.max_per_subset = max_endpoints_per_subset
        self.slice_kind = informers.kind(names.DISCOVERY_GROUP, "v1", "endpointslices")
        self.services = informers.for_resource("", "v1", "services")
        self.endpoints = informers.for_resource("", "v1", "endpoints")
        self.slices = informers.for_kind(self.slice_kind)
        self.svc_views: Views[ServiceView] = Views(service_view)
        self.tracker = SliceTracker()
        self.queue = RateLimitedQueue()
        self.events = EventRecorder(client, informers.registry, "endpoint-slice-mirroring-controller")

    def start(self) -> None:
        self.endpoints.add_handler(self.on_endpoints)
        self.services.add_handler(self.on_service)
        self.slices.add_handler(self.on_slice)

    def on_endpoints(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.endpoints.list():
                self.queue.add((e.namespace, e.name))
            return
        self.queue.add((ev.entry.namespace, ev.entry.name))

    def on_service(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return
        if ev.type == "DELETED":
            self.svc_views.forget(ev.entry.key)
        self.queue.add((ev.entry.namespace, ev.entry.name))

    def on_slice(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.slices.list():
                self._slice_changed(e, False)
            return
        self._slice_changed(ev.entry, ev.type == "DELETED")

    def _slice_changed(self, e: Entry, deleted: bool) -> None:
        if e.labels.get(names.LABEL_MANAGED_BY_SLICE) != names.ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME:
            return
        svc = e.labels.get(names.LABEL_SERVICE_NAME)
        if svc:
            if deleted:
                self.tracker.observed_deletion((e.namespace, svc), e.name)
            self.queue.add((e.namespace, svc))

    async def run(self) -> None:
        await run_worker(self.queue, self.sync, log, "endpointslice mirroring")

    def mirrored(self, ns: str, name: str) -> list[Entry]:
        return [
            e
            for e in self.slices.list(ns)
            if e.labels.get(names.LABEL_SERVICE_NAME) == name
            and e.labels.get(names.LABEL_MANAGED_BY_SLICE) == names.ENDPOINTSLICE_MIRRORING_CONTROLLER_NAME
        ]

    async def sync(self, key: tuple[str, str]) -> None:
        ns, name = key
        ep_entry = self.endpoints.get(ns, name)
        endpoints = ep_entry.object() if ep_entry is not None else None
        svc_entry = self.services.get(ns, name)
        svc = self.svc_views.get(svc_entry) if svc_entry is not None else None
        if endpoints is None or not should_mirror(endpoints) or svc is None or svc.selector is not None:
            self.tracker.forget(key)
            await self._delete_all(ns, name)
            return
        if self.tracker.stale(key, lambda n: self.slices.get(ns, n)):
            self.queue.add_after(key, STALE_RETRY)
            return
        existing = [e.object() for e in self.mirrored(ns, name) if not e.deleting]
        plan = mirror(endpoints, existing, self.max_per_subset)
        uid = ep_entry.uid if ep_entry is not None else ""
        ref = {"kind": "Endpoints", "namespace": ns, "name": name, "uid": uid, "apiVersion": "v1"}
        if plan.invalid:
            message = f"Skipped {plan.invalid} invalid IP addresses when mirroring to EndpointSlices"
            await self.events.record(ref, "Warning", "InvalidIPAddress", message)
        if plan.skipped > plan.invalid:
            message = (
                f"A max of {self.max_per_subset} addresses can be mirrored to EndpointSlices per Endpoints subset. "
                f"{plan.skipped} addresses were skipped"
            )
            await self.events.record(ref, "Warning", "TooManyAddressesToMirror", message)
        if not (endpoints.get("metadata") or {}).get("deletionTimestamp"):
            for s in plan.create:
                try:
                    out = await self.client.create(self.slice_kind, ns, s)
                except st.ApiError as exc:
                    if namespace_terminating(exc):
                        return
                    raise
                self.tracker.wrote(key, out)
        for s in plan.update:
            out = await self.client.update(self.slice_kind, ns, s["metadata"]["name"], s)
            self.tracker.wrote(key, out)
        for s in plan.delete:
            await self._delete(ns, (s.get("metadata") or {}).get("name", ""))
            self.tracker.deleted(key, (s.get("metadata") or {}).get("name", ""))

    async def _delete_all(self, ns: str, name: str) -> None:
        for e in self.mirrored(ns, name):
            if not e.deleting:
                await self._delete(ns, e.name)

    async def _delete(self, ns: str, name: str) -> None:
        try:
            await self.client.delete(self.slice_kind, ns, name)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
