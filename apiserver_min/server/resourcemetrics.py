"""The resource metrics API (``metrics.orch.io/v1beta1``, also on its upstream group
name ``metrics.k8s.io`` because ``kubectl top`` asks for it there).

Every ``--metric-resolution`` the server scrapes ``/metrics/resource`` of each node
agent that publishes an address (concurrently, each within 90% of the resolution or
10 s), with the client certificate it uses for logs and exec. The agents report
cumulative CPU seconds and working-set bytes with the time each was sampled; the CPU
usage served is the rate between a node's or container's last two samples, so a
figure appears from the second scrape on and ``window`` is the time between them.
A container whose start time changed (it restarted) or whose counter went down starts
over. A pod is served only when every container reported in its last scrape has a
rate, as upstream's metrics server does.

Nothing is stored: the figures live in this process, and a second API server on the
same etcd scrapes for itself. Pulling rather than having agents push keeps the agents
unchanged and the cost on the server, where it is one small request per node per
resolution (measured in the closing note of the workloads issue).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import logging
import time
from typing import Any, Iterable, Mapping

import aiohttp

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo, Registry
from ..api.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
)
from ..api.timeutil import format_rfc3339
from ..registry.rest import RequestContext
from ..storage.cacher import WatchCache
from ..storage.keys import key_prefix
from .context import ServerContext
from .handlers import request_selectors
from .podlogs import agent_client, agent_location, drop_frames

log = logging.getLogger("orch-apiserver.metrics")

MAX_SCRAPE_TIMEOUT = 10.0


# --- the agents' text format -----------------------------------------------------------------


@dataclasses.dataclass
class Sample:
    value: float
    at: float  # seconds since the epoch


@dataclasses.dataclass
class ContainerScrape:
    cpu: Sample | None = None
    memory: Sample | None = None
    start: float | None = None


@dataclasses.dataclass
class Scrape:
    node_cpu: Sample | None = None
    node_memory: Sample | None = None
    containers: dict[tuple[str, str, str], ContainerScrape] = dataclasses.field(default_factory=dict)


def _labels(text: str) -> dict[str, str]:
    """``a="x",b="y\\"z"`` -> {"a": "x", "b": 'y"z'}."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= n or text[eq + 1] != '"':
            raise ValueError(f"malformed labels {text!r}")
        key = text[i:eq].strip().lstrip(",").strip()
        j = eq + 2
        value: list[str] = []
        while j < n and text[j] != '"':
            if text[j] == "\\" and j + 1 < n:
                j += 1
                value.append({"n": "\n"}.get(text[j], text[j]))
            else:
                value.append(text[j])
            j += 1
        out[key] = "".join(value)
        i = j + 1
        while i < n and text[i] in ", ":
            i += 1
    return out


def parse_resource_metrics(text: str, now: float) -> Scrape:
    """The families of ``/metrics/resource`` the API serves; samples without a timestamp
    are dated ``now``. Lines it does not know are skipped; a malformed line of a known
    family is a ValueError."""
    out = Scrape()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_end = min((p for p in (line.find("{"), line.find(" ")) if p >= 0), default=-1)
        if name_end < 0:
            continue
        name = line[:name_end]
        if name not in _FAMILIES:
            continue
        labels: dict[str, str] = {}
        rest = line[name_end:]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                raise ValueError(f"malformed line {line!r}")
            labels = _labels(rest[1:close])
            rest = rest[close + 1 :]
        fields = rest.split()
        if not fields:
            raise ValueError(f"malformed line {line!r}")
        value = float(fields[0])
        at = float(fields[1]) / 1000.0 if len(fields) > 1 else now
        sample = Sample(value, at)
        if name == "node_cpu_usage_seconds_total":
            out.node_cpu = sample
        elif name == "node_memory_working_set_bytes":
            out.node_memory = sample
        else:
            key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
            c = out.containers.setdefault(key, ContainerScrape())
            if name == "container_cpu_usage_seconds_total":
                c.cpu = sample
            elif name == "container_memory_working_set_bytes":
                c.memory = sample
            else:
                c.start = value
    return out


_FAMILIES = frozenset(
    {
        "node_cpu_usage_seconds_total",
        "node_memory_working_set_bytes",
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
    }
)


# --- usage from two scrapes ------------------------------------------------------------------


@dataclasses.dataclass
class Usage:
    timestamp: float
    window: float
    cpu_nanocores: int
    memory_bytes: int


def _rate(prev: Sample | None, cur: Sample | None) -> tuple[float, float] | None:
    """(cores, window seconds) between two cumulative CPU samples, None when not comparable."""
    if prev is None or cur is None or cur.at <= prev.at or cur.value < prev.value:
        return None
    return (cur.value - prev.value) / (cur.at - prev.at), cur.at - prev.at


class UsageStore:
    """The last two scrapes' worth of samples, by node and by container."""

    def __init__(self) -> None:
        self._node_prev: dict[str, Scrape] = {}
        self._node_cur: dict[str, Scrape] = {}
        # node -> {(namespace, pod): {container: (prev, cur)}}
        self._pods: dict[str, dict[tuple[str, str], dict[str, tuple[ContainerScrape | None, ContainerScrape]]]] = {}

    def record(self, node: str, scrape: Scrape) -> None:
        prev = self._node_cur.get(node)
        if prev is not None:
            self._node_prev[node] = prev
        self._node_cur[node] = scrape
        old = self._pods.get(node, {})
        pods: dict[tuple[str, str], dict[str, tuple[ContainerScrape | None, ContainerScrape]]] = {}
        for (ns, pod, container), cur in scrape.containers.items():
            before = old.get((ns, pod), {}).get(container)
            last = before[1] if before is not None else None
            if last is not None and last.start is not None and cur.start is not None and last.start != cur.start:
                last = None  # restarted: its counter starts over
            pods.setdefault((ns, pod), {})[container] = (last, cur)
        self._pods[node] = pods

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the nodes not in ``keep`` (deleted, or no longer reachable)."""
        kept = set(keep)
        for d in (self._node_prev, self._node_cur, self._pods):
            for node in [n for n in d if n not in kept]:
                del d[node]

    def node(self, name: str) -> Usage | None:
        prev, cur = self._node_prev.get(name), self._node_cur.get(name)
        if cur is None or prev is None or cur.node_memory is None or cur.node_cpu is None:
            return None
        rate = _rate(prev.node_cpu, cur.node_cpu)
        if rate is None:
            return None
        return Usage(cur.node_cpu.at, rate[1], round(rate[0] * 1e9), int(cur.node_memory.value))

    def nodes(self) -> list[str]:
        return list(self._node_cur)

    def pods(self) -> Iterable[tuple[str, str, dict[str, Usage]]]:
        """(namespace, pod, {container: usage}) for pods every container of which has a rate."""
        for pods in self._pods.values():
            for (ns, pod), containers in pods.items():
                usage: dict[str, Usage] = {}
                for container, (prev, cur) in containers.items():
                    rate = _rate(prev.cpu if prev is not None else None, cur.cpu)
                    if rate is None or cur.memory is None or cur.cpu is None:
                        break
                    usage[container] = Usage(cur.cpu.at, rate[1], round(rate[0] * 1e9), int(cur.memory.value))
                else:
                    if usage:
                        yield ns, pod, usage


# --- quantities --------------------------------------------------------------------------------


def cpu_quantity(nanocores: int) -> str:
    return f"{max(0, nanocores)}n"


def memory_quantity(value: int) -> str:
    """Bytes in the largest binary suffix that divides them exactly."""
    value = max(0, value)
    for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def _duration(seconds: float) -> str:
    """A Go duration string of whole milliseconds ("15.003s")."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}s".replace(".000s", "s")


def _stamp(at: float) -> str:
    return format_rfc3339(_dt.datetime.fromtimestamp(int(at), _dt.timezone.utc))


# --- the scraper -----------------------------------------------------------------------------


class ResourceMetrics:
    """Scrapes the agents every ``resolution`` seconds and answers the metrics API."""

    def __init__(self, server: ServerContext, cache: WatchCache, registry: Registry, resolution: float):
        self.server = server
        self.cache = cache
        self.resolution = resolution
        self.usage = UsageStore()
        self.node_kind = _kind(registry, "", "v1", "nodes")
        self.pod_kind = _kind(registry, "", "v1", "pods")
        self._failing: set[str] = set()
        self._task: asyncio.Task | None = None

    def _entries(self, kind: KindInfo) -> Iterable[Any]:
        return self.cache.cache(key_prefix(kind)).items.values()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="resource-metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    async def run(self) -> None:
        while True:
            began = time.monotonic()
            try:
                await self.scrape_all()
            except Exception:  # noqa: BLE001 - a failed round is logged; the next one comes
                log.exception("resource metrics: scrape round failed")
            await asyncio.sleep(max(0.0, self.resolution - (time.monotonic() - began)))

    async def scrape_all(self) -> None:
        nodes = [e.object() for e in self._entries(self.node_kind)]
        timeout = aiohttp.ClientTimeout(total=min(MAX_SCRAPE_TIMEOUT, self.resolution * 0.9))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            done = await asyncio.gather(*(self._scrape(session, n) for n in nodes))
        self.usage.forget(name for name in done if name)

    async def _scrape(self, session: aiohttp.ClientSession, node: Mapping) -> str:
        """Scrape one node; its name when it answered, "" otherwise."""
        name = str((node.get("metadata") or {}).get("name", ""))
        try:
            address, port = agent_location(node)
        except st.ApiError:
            return ""
        host = f"[{address}]" if ":" in address else address
        url = f"https://{host}:{port}/metrics/resource"
        try:
            resp = await agent_client(self.server).open(session, url)
            async with resp:
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
                text = await resp.text()
            scrape = parse_resource_metrics(text, time.time())
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
            if name not in self._failing:
                log.warning("resource metrics: cannot scrape node %s at %s: %s", name, url, exc or type(exc).__name__)
                self._failing.add(name)
            # A node that does not answer fails every round: its exception's frames would keep
            # the round's session in a reference cycle until a full garbage collection.
            drop_frames(exc)
            return ""
        if name in self._failing:
            log.info("resource metrics: node %s answers again", name)
            self._failing.discard(name)
        self.usage.record(name, scrape)
        return name

    # --- serving ---------------------------------------------------------------------------
    def node_metrics(self, labels: LabelSelector | None, fields: FieldSelector | None) -> list[dict]:
        out = []
        for e in self._entries(self.node_kind):
            usage = self.usage.node(e.name)
            if usage is None or not _selected(e, labels, fields):
                continue
            out.append(
                {
                    "metadata": {"name": e.name, "creationTimestamp": _stamp(time.time()), "labels": dict(e.labels)},
                    "timestamp": _stamp(usage.timestamp),
                    "window": _duration(usage.window),
                    "usage": {"cpu": cpu_quantity(usage.cpu_nanocores), "memory": memory_quantity(usage.memory_bytes)},
                }
            )
        return sorted(out, key=lambda o: o["metadata"]["name"])

    def pod_metrics(
        self, namespace: str | None, labels: LabelSelector | None, fields: FieldSelector | None
    ) -> list[dict]:
        pods = {(e.namespace, e.name): e for e in self._entries(self.pod_kind)}
        out = []
        for ns, pod, containers in self.usage.pods():
            if namespace and ns != namespace:
                continue
            e = pods.get((ns, pod))
            if e is None or not _selected(e, labels, fields):
                continue
            first = next(iter(containers.values()))
            out.append(
                {
                    "metadata": {
                        "name": pod,
                        "namespace": ns,
                        "creationTimestamp": _stamp(time.time()),
                        "labels": dict(e.labels),
                    },
                    "timestamp": _stamp(first.timestamp),
                    "window": _duration(first.window),
                    "containers": [
                        {
                            "name": c,
                            "usage": {"cpu": cpu_quantity(u.cpu_nanocores), "memory": memory_quantity(u.memory_bytes)},
                        }
                        for c, u in sorted(containers.items())
                    ],
                }
            )
        return sorted(out, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))


def _kind(registry: Registry, group: str, version: str, resource: str) -> KindInfo:
    kind = registry.by_resource(group, version, resource)
    if kind is None:
        raise LookupError(f"no kind serves {group or 'core'}/{version} {resource}")
    return kind


def _selected(entry: Any, labels: LabelSelector | None, fields: FieldSelector | None) -> bool:
    if labels is not None and not labels.matches(entry.labels):
        return False
    if fields is not None and not fields.matches({"metadata.name": entry.name, "metadata.namespace": entry.namespace}):
        return False
    return True


class NodeMetricsREST:
    """GET and LIST of ``metrics.orch.io/v1beta1`` nodes."""

    def __init__(self, metrics: ResourceMetrics):
        self.metrics = metrics

    async def get(self, ctx: RequestContext) -> dict:
        fields = parse_field_selector(f"metadata.name={ctx.name}")
        found = self.metrics.node_metrics(None, fields)
        if not found:
            raise st.not_found("nodes", ctx.name, names.METRICS_GROUP)
        return {"kind": "NodeMetrics", "apiVersion": f"{names.METRICS_GROUP}/v1beta1", **found[0]}

    async def list(self, ctx: RequestContext) -> dict:
        labels, fields = request_selectors(ctx.kind, ctx.query) if ctx.kind is not None else (None, None)
        return {
            "kind": "NodeMetricsList",
            "apiVersion": f"{names.METRICS_GROUP}/v1beta1",
            "metadata": {},
            "items": self.metrics.node_metrics(labels, fields),
        }


class PodMetricsREST:
    """GET and LIST of ``metrics.orch.io/v1beta1`` pods."""

    def __init__(self, metrics: ResourceMetrics):
        self.metrics = metrics

    async def get(self, ctx: RequestContext) -> dict:
        fields = parse_field_selector(f"metadata.name={ctx.name}")
        found = self.metrics.pod_metrics(ctx.namespace, None, fields)
        if not found:
            raise st.not_found("pods", ctx.name, names.METRICS_GROUP)
        return {"kind": "PodMetrics", "apiVersion": f"{names.METRICS_GROUP}/v1beta1", **found[0]}

    async def list(self, ctx: RequestContext) -> dict:
        labels, fields = request_selectors(ctx.kind, ctx.query) if ctx.kind is not None else (None, None)
        return {
            "kind": "PodMetricsList",
            "apiVersion": f"{names.METRICS_GROUP}/v1beta1",
            "metadata": {},
            "items": self.metrics.pod_metrics(ctx.namespace or None, labels, fields),
        }
