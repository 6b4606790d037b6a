"""What the endpoints, endpoint slice and mirroring controllers share.

Pods and Services are read from informers as stored bytes; the controllers need a
few of their fields many times over (every sync of a Service looks at every pod it
selects), so :class:`Views` parses each object once per stored revision into a small
view. The rules are upstream's: which pods belong in endpoints, how a service port
finds its number on a pod, which address families a Service wants, and the
``last-change-trigger-time`` bookkeeping.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import ipaddress
from typing import Any, Callable, Generic, Iterable, TypeVar

import orjson

from ..api import status as st
from ..api.helpers import dict_at, list_at
from ..api.timeutil import format_rfc3339_nano, parse_rfc3339
from ..storage.cacher import CacheEvent, Entry

V = TypeVar("V")

STALE_RETRY = 0.02  # seconds: the informer has not yet seen this controller's own last write


@dataclasses.dataclass(slots=True, frozen=True)
class ContainerPort:
    name: str
    port: int
    protocol: str


@dataclasses.dataclass(slots=True)
class PodView:
    namespace: str
    name: str
    uid: str
    labels: dict
    node_name: str
    hostname: str
    subdomain: str
    ips: tuple[str, ...]
    ready: bool
    ready_since: float  # the Ready condition's lastTransitionTime (epoch seconds), 0 if none
    terminating: bool
    terminal: bool
    ports: tuple[ContainerPort, ...]


@dataclasses.dataclass(slots=True)
class ServicePort:
    name: str
    port: int
    protocol: str
    target_port: int | str
    app_protocol: str | None


@dataclasses.dataclass(slots=True)
class ServiceView:
    namespace: str
    name: str
    uid: str
    labels: dict
    selector: dict | None  # None: absent or empty (nothing selected by this controller)
    type: str
    cluster_ip: str
    ip_families: tuple[str, ...]
    ports: tuple[ServicePort, ...]
    publish_not_ready: bool
    created: float
    deleting: bool

    @property
    def ip_set(self) -> bool:
        """Upstream's IsServiceIPSet: a cluster IP that is neither empty nor ``None``."""
        return self.cluster_ip not in ("", "None")

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"


def _epoch(ts: Any) -> float:
    if not isinstance(ts, str) or not ts:
        return 0.0
    try:
        return parse_rfc3339(ts).timestamp()
    except ValueError:
        return 0.0


def pod_view(obj: dict) -> PodView:
    md, spec, status = dict_at(obj, "metadata"), dict_at(obj, "spec"), dict_at(obj, "status")
    ips = tuple(str(p.get("ip")) for p in list_at(status, "podIPs") if isinstance(p, dict) and p.get("ip"))
    if not ips and status.get("podIP"):
        ips = (str(status["podIP"]),)
    ready, since = False, 0.0
    for c in list_at(status, "conditions"):
        if isinstance(c, dict) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
            since = _epoch(c.get("lastTransitionTime"))
            break
    ports: list[ContainerPort] = []
    for c in list_at(spec, "containers"):
        if not isinstance(c, dict):
            continue
        for p in list_at(c, "ports"):
            if isinstance(p, dict) and isinstance(p.get("containerPort"), int):
                ports.append(ContainerPort(str(p.get("name") or ""), p["containerPort"], p.get("protocol") or "TCP"))
    return PodView(
        namespace=str(md.get("namespace") or ""),
        name=str(md.get("name") or ""),
        uid=str(md.get("uid") or ""),
        labels=dict_at(md, "labels"),
        node_name=str(spec.get("nodeName") or ""),
        hostname=str(spec.get("hostname") or ""),
        subdomain=str(spec.get("subdomain") or ""),
        ips=ips,
        ready=ready,
        ready_since=since,
        terminating=bool(md.get("deletionTimestamp")),
        terminal=status.get("phase") in ("Succeeded", "Failed"),
        ports=tuple(ports),
    )


def service_view(obj: dict) -> ServiceView:
    md, spec = dict_at(obj, "metadata"), dict_at(obj, "spec")
    ports = []
    for p in list_at(spec, "ports"):
        if not isinstance(p, dict):
            continue
        port = p.get("port") if isinstance(p.get("port"), int) else 0
        target = p.get("targetPort")
        if target in (None, 0, ""):
            target = port
        ports.append(
            ServicePort(
                name=str(p.get("name") or ""),
                port=port,
                protocol=p.get("protocol") or "TCP",
                target_port=target if isinstance(target, (int, str)) else port,
                app_protocol=p.get("appProtocol"),
            )
        )
    selector = spec.get("selector")
    return ServiceView(
        namespace=str(md.get("namespace") or ""),
        name=str(md.get("name") or ""),
        uid=str(md.get("uid") or ""),
        labels=dict_at(md, "labels"),
        selector=dict(selector) if isinstance(selector, dict) and selector else None,
        type=spec.get("type") or "ClusterIP",
        cluster_ip=str(spec.get("clusterIP") or ""),
        ip_families=tuple(str(f) for f in list_at(spec, "ipFamilies")),
        ports=tuple(ports),
        publish_not_ready=spec.get("publishNotReadyAddresses") is True,
        created=_epoch(md.get("creationTimestamp")),
        deleting=bool(md.get("deletionTimestamp")),
    )


class Views(Generic[V]):
    """Parsed views of one kind's entries, each made once per stored revision."""

    def __init__(self, make: Callable[[dict], V]):
        self._make = make
        self._views: dict[str, tuple[int, V]] = {}

    def get(self, entry: Entry) -> V:
        hit = self._views.get(entry.key)
        if hit is not None and hit[0] == entry.rv:
            return hit[1]
        view = self._make(orjson.loads(entry.raw))
        self._views[entry.key] = (entry.rv, view)
        return view

    def forget(self, key: str) -> None:
        self._views.pop(key, None)


def selects(selector: dict | None, labels: dict | None) -> bool:
    """A Service's equality selector against an object's labels; None selects nothing."""
    if not selector or labels is None:
        return False
    for k, v in selector.items():
        if labels.get(k) != v:
            return False
    return True


def services_for_pod_event(services: Iterable[Entry], svc_views: Views[ServiceView], ev: CacheEvent) -> set[str]:
    """Names of the Services (in the pod's namespace) that select the pod now or did before."""
    label_sets = [ev.entry.labels]
    if ev.prev is not None and ev.prev.labels != ev.entry.labels:
        label_sets.append(ev.prev.labels)
    out: set[str] = set()
    for e in services:
        sel = svc_views.get(e).selector
        if any(selects(sel, labels) for labels in label_sets):
            out.add(e.name)
    return out


def should_pod_be_in_endpoints(pod: PodView, include_terminating: bool) -> bool:
    """Not finished, has an IP, and not being deleted unless terminating pods are wanted."""
    if pod.terminal or not pod.ips:
        return False
    return include_terminating or not pod.terminating


def find_port(pod: PodView, port: ServicePort) -> int | None:
    """The pod's number for a service port: a number as is, a name looked up among the
    pod's container ports of the same protocol (None when no container has it)."""
    target = port.target_port
    if isinstance(target, int):
        return target
    if target.isdigit():  # an IntOrString that arrived as digits in a string
        return int(target)
    for cp in pod.ports:
        if cp.name == target and cp.protocol == port.protocol:
            return cp.port
    return None


def should_set_hostname(pod: PodView, svc: ServiceView) -> bool:
    return bool(pod.hostname) and pod.subdomain == svc.name and pod.namespace == svc.namespace


def is_ipv6(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).version == 6
    except ValueError:
        return ":" in ip


def address_family(ip: str) -> str | None:
    """``IPv4`` or ``IPv6`` for a parsable address, else None."""
    try:
        return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"
    except ValueError:
        return None


def service_address_types(svc: ServiceView) -> list[str]:
    """The EndpointSlice address types a Service wants (upstream getAddressTypesForService):
    its ipFamilies; without them the family of its cluster IP; a headless Service
    without families gets both."""
    types = [f for f in ("IPv4", "IPv6") if f in svc.ip_families]
    if types:
        return types
    if svc.ip_set:
        return ["IPv6" if is_ipv6(svc.cluster_ip) else "IPv4"]
    return ["IPv4", "IPv6"]


def endpoint_ip_for_service(svc: ServiceView, pod: PodView) -> str:
    """The pod IP of the Service's (first) family, for Endpoints; "" when the pod has none."""
    if svc.ip_families:
        want_v6 = svc.ip_families[0] == "IPv6"
    elif svc.ip_set:
        want_v6 = is_ipv6(svc.cluster_ip)
    else:
        want_v6 = is_ipv6(pod.ips[0]) if pod.ips else False
    for ip in pod.ips:
        if is_ipv6(ip) == want_v6:
            return ip
    return ""


class TriggerTimeTracker:
    """The ``last-change-trigger-time`` of a Service's endpoints (upstream's tracker): on
    the first sync, the Service's creation time; afterwards the earliest pod Ready
    transition (or Service creation) newer than what the previous sync saw; none when
    nothing relevant changed."""

    def __init__(self) -> None:
        self._state: dict[tuple[str, str], tuple[dict[str, float], float]] = {}

    def compute(self, svc: ServiceView, pods: Iterable[PodView]) -> float:
        key = (svc.namespace, svc.name)
        known = self._state.get(key)
        last_pods, last_svc = known if known is not None else ({}, 0.0)
        changed = 0.0
        now_pods: dict[str, float] = {}
        for p in pods:
            if p.ready_since:
                now_pods[p.name] = p.ready_since
                if p.ready_since > last_pods.get(p.name, 0.0):
                    changed = p.ready_since if not changed else min(changed, p.ready_since)
        if svc.created > last_svc:
            changed = svc.created if not changed else min(changed, svc.created)
        self._state[key] = (now_pods, svc.created)
        if known is None:
            return svc.created
        return changed

    def forget(self, namespace: str, name: str) -> None:
        self._state.pop((namespace, name), None)


def format_trigger_time(epoch: float) -> str:
    return format_rfc3339_nano(_dt.datetime.fromtimestamp(epoch, _dt.timezone.utc))


def target_ref(pod: PodView) -> dict:
    return {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


def namespace_terminating(exc: st.ApiError) -> bool:
    """A create refused because the namespace is being deleted (upstream's NamespaceTerminating cause)."""
    causes = (exc.details or {}).get("causes") or []
    if any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes):
        return True
    return exc.code == 403 and "because it is being terminated" in exc.message
