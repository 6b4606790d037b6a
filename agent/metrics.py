"""The agent's Prometheus metrics (``/metrics``, ``/metrics/resource``).

A small registry that writes the Prometheus text format (version 0.0.4): no
client library is installed here, and the agent needs only counters, gauges
(some computed at scrape time from the pipeline's state) and histograms.

Metric names follow upstream's with the ``orch_agent_`` prefix
(``names.AGENT_METRICS_PREFIX``): ``orch_agent_pod_worker_duration_seconds``,
``orch_agent_pleg_relist_duration_seconds``, ``orch_agent_running_pods``,
``orch_agent_running_containers``, ``orch_agent_node_name``, plus the standard
``process_*`` metrics. ``/metrics/resource`` is upstream's resource metrics
endpoint (``node_cpu_usage_seconds_total``, ``container_memory_working_set_bytes``,
...), computed from the stats summary.
"""

from __future__ import annotations

import bisect
import math
import os
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import psutil

from apiserver_min.api import names, timeutil

__all__ = [
    "Registry",
    "Counter",
    "Gauge",
    "Histogram",
    "AgentMetrics",
    "resource_metrics",
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PREFIX = names.AGENT_METRICS_PREFIX


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(names_: Sequence[str], values: Sequence[str], extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = list(zip(names_, values)) + list(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in pairs) + "}"


def _num(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_
        self.label_names = tuple(labels)

    def _key(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.label_names):
            raise ValueError(f"metric {self.name}: labels {sorted(labels)} given, {sorted(self.label_names)} expected")
        return tuple(str(labels[n]) for n in self.label_names)

    def samples(self) -> list[str]:
        raise NotImplementedError

    def render(self) -> str:
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        lines += self.samples()
        return "\n".join(lines) + "\n"


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"counter {self.name} cannot decrease")
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def samples(self) -> list[str]:
        return [f"{self.name}{_labels(self.label_names, k)} {_num(v)}" for k, v in sorted(self._values.items())]


class Gauge(_Metric):
    """A gauge set by its owner, or computed at scrape time by ``collect``
    (returning ``{label values tuple: value}``)."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help_: str,
        labels: Sequence[str] = (),
        collect: Callable[[], Mapping[tuple[str, ...], float]] | None = None,
    ) -> None:
        super().__init__(name, help_, labels)
        self._values: dict[tuple[str, ...], float] = {}
        self._collect = collect

    def set(self, value: float, **labels: str) -> None:
        self._values[self._key(labels)] = value

    def samples(self) -> list[str]:
        values = dict(self._values)
        if self._collect is not None:
            values.update(self._collect())
        return [f"{self.name}{_labels(self.label_names, k)} {_num(v)}" for k, v in sorted(values.items())]


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self, name: str, help_: str, labels: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> None:
        super().__init__(name, help_, labels)
        self.buckets = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], list] = {}  # key -> [counts per bucket..., sum, count]

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = [0] * len(self.buckets) + [0.0, 0]
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.buckets):
            series[i] += 1
        series[-2] += value
        series[-1] += 1

    def count(self, **labels: str) -> int:
        series = self._series.get(self._key(labels))
        return series[-1] if series else 0

    def samples(self) -> list[str]:
        out = []
        for key, series in sorted(self._series.items()):
            cumulative = 0
            for bound, n in zip(self.buckets, series):
                cumulative += n
                out.append(
                    f"{self.name}_bucket{_labels(self.label_names, key, [('le', _num(float(bound)))])} {cumulative}"
                )
            out.append(f"{self.name}_bucket{_labels(self.label_names, key, [('le', '+Inf')])} {series[-1]}")
            out.append(f"{self.name}_sum{_labels(self.label_names, key)} {_num(series[-2])}")
            out.append(f"{self.name}_count{_labels(self.label_names, key)} {series[-1]}")
        return out


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}

    def register(self, metric: _Metric) -> Any:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric
        return metric

    def render(self) -> str:
        return "".join(m.render() for _, m in sorted(self._metrics.items()))


def _process_metrics(registry: Registry) -> None:
    proc = psutil.Process()

    def one(fn: Callable[[], float]) -> Callable[[], Mapping[tuple[str, ...], float]]:
        def collect():
            try:
                return {(): fn()}
            except (psutil.Error, OSError):
                return {}

        return collect

    registry.register(
        Gauge(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            collect=one(lambda: sum(proc.cpu_times()[:2])),
        )
    )
    registry.register(
        Gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            collect=one(lambda: proc.memory_info().rss),
        )
    )
    registry.register(
        Gauge(
            "process_virtual_memory_bytes", "Virtual memory size in bytes.", collect=one(lambda: proc.memory_info().vms)
        )
    )
    registry.register(
        Gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            collect=one(proc.create_time),
        )
    )
    registry.register(
        Gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            collect=one(lambda: len(os.listdir(f"/proc/{proc.pid}/fd"))),
        )
    )


class AgentMetrics:
    """The agent's own metrics. ``pods`` gives the pipeline's pod states (objects
    with ``rp``, a RuntimePod or None) for the running pods/containers gauges."""

    def __init__(
        self,
        node_name: str,
        *,
        pods: Callable[[], Iterable[Any]] = lambda: (),
        serving_cert_expiry: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.registry = Registry()
        self._pods = pods
        r = self.registry
        self.pod_worker_duration = r.register(
            Histogram(
                f"{PREFIX}_pod_worker_duration_seconds",
                "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                ("operation_type",),
            )
        )
        self.pleg_relist_duration = r.register(
            Histogram(f"{PREFIX}_pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.")
        )
        self.pleg_last_seen = r.register(
            Gauge(f"{PREFIX}_pleg_last_seen_seconds", "Timestamp in seconds when PLEG was last seen active.")
        )
        r.register(
            Gauge(
                f"{PREFIX}_running_pods", "Number of pods that have a running pod sandbox", collect=self._running_pods
            )
        )
        r.register(
            Gauge(
                f"{PREFIX}_running_containers",
                "Number of containers currently running",
                ("container_state",),
                collect=self._containers,
            )
        )
        r.register(
            Gauge(
                f"{PREFIX}_node_name",
                "The node's name. The count is always 1.",
                ("node",),
                collect=lambda: {(node_name,): 1},
            )
        )
        r.register(
            Gauge(
                f"{PREFIX}_certificate_manager_server_ttl_seconds",
                "Gauge of the shortest TTL (time-to-live) of the agent's serving certificate. "
                "The value is in seconds until certificate expiry (negative if already expired).",
                collect=lambda: {(): round(e - time.time(), 3)} if (e := serving_cert_expiry()) else {},
            )
        )
        _process_metrics(r)
        self._seen_pods: set[str] = set()

    def graceful_shutdown(self, times: Callable[[], Mapping[str, float]]) -> None:
        """The last node shutdown's start and end (``times()`` answers ``start``/``end``
        in unix seconds, those that are known), as upstream's two gauges."""
        for key, help_ in (
            ("start", "Last graceful shutdown start time since unix epoch in seconds"),
            ("end", "Last graceful shutdown end time since unix epoch in seconds"),
        ):
            self.registry.register(
                Gauge(
                    f"{PREFIX}_graceful_shutdown_{key}_time_seconds",
                    help_,
                    collect=lambda key=key: {(): v} if (v := times().get(key)) is not None else {},
                )
            )

    def _running_pods(self) -> Mapping[tuple[str, ...], float]:
        n = 0
        for state in self._pods():
            rp = getattr(state, "rp", None)
            if rp is not None and rp.ready_sandbox is not None:
                n += 1
        return {(): n}

    def _containers(self) -> Mapping[tuple[str, ...], float]:
        counts = {"running": 0, "exited": 0, "created": 0, "unknown": 0}
        for state in self._pods():
            rp = getattr(state, "rp", None)
            for c in rp.containers if rp is not None else []:
                counts[c.state if c.state in counts else "unknown"] += 1
        return {(k,): v for k, v in counts.items()}

    def instrument(self, runtime: Any) -> None:
        """Time the runtime manager's pod syncs and relists (the pod workers' and the
        PLEG's work) by wrapping those two methods of this instance."""
        sync_pod, relist = runtime.sync_pod, runtime.relist

        async def timed_sync(pod, rp, *args, **kwargs):
            uid = ((pod or {}).get("metadata") or {}).get("uid", "")
            op = "sync" if uid in self._seen_pods else "create"
            start = time.perf_counter()
            try:
                return await sync_pod(pod, rp, *args, **kwargs)
            finally:
                self._seen_pods.add(uid)
                self.pod_worker_duration.observe(time.perf_counter() - start, operation_type=op)

        async def timed_relist(*args, **kwargs):
            start = time.perf_counter()
            try:
                return await relist(*args, **kwargs)
            finally:
                self.pleg_relist_duration.observe(time.perf_counter() - start)
                self.pleg_last_seen.set(time.time())

        runtime.sync_pod = timed_sync
        runtime.relist = timed_relist

    def render(self) -> str:
        live = set()
        for state in self._pods():
            uid = ((getattr(state, "pod", None) or {}).get("metadata") or {}).get("uid")
            if uid:
                live.add(uid)
        self._seen_pods &= live
        return self.registry.render()


# --- /metrics/resource -------------------------------------------------------------------------


def _ms(rfc3339: str | None) -> str:
    if not rfc3339:
        return ""
    try:
        return f" {int(timeutil.parse_rfc3339(rfc3339).timestamp() * 1000)}"
    except (ValueError, TypeError):
        return ""


def resource_metrics(summary: Mapping[str, Any] | None) -> str:
    """Upstream's resource metrics from a stats summary (None: only scrape_error 1)."""
    out: list[str] = []

    def family(name: str, help_: str, kind: str, rows: list[str]) -> None:
        out.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n" + "".join(r + "\n" for r in rows))

    if summary is None:
        family(
            "scrape_error",
            "1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
            ["scrape_error 1"],
        )
        return "".join(out)
    node = summary.get("node") or {}
    pods = summary.get("pods") or []
    cpu, mem = node.get("cpu") or {}, node.get("memory") or {}
    ctr_cpu, ctr_mem, ctr_start, pod_cpu, pod_mem = [], [], [], [], []
    for p in pods:
        ref = p.get("podRef") or {}
        pl = [("namespace", ref.get("namespace", "")), ("pod", ref.get("name", ""))]
        for c in p.get("containers") or []:
            cl = _labels((), (), [("container", c.get("name", "")), *pl])
            cc, cm = c.get("cpu") or {}, c.get("memory") or {}
            if "usageCoreNanoSeconds" in cc:
                ctr_cpu.append(
                    f"container_cpu_usage_seconds_total{cl} "
                    f"{_num(cc['usageCoreNanoSeconds'] / 1e9)}{_ms(cc.get('time'))}"
                )
            if "workingSetBytes" in cm:
                ctr_mem.append(f"container_memory_working_set_bytes{cl} {cm['workingSetBytes']}{_ms(cm.get('time'))}")
            if c.get("startTime"):
                try:
                    start = timeutil.parse_rfc3339(c["startTime"]).timestamp()
                    ctr_start.append(f"container_start_time_seconds{cl} {_num(start)}")
                except (ValueError, TypeError):
                    pass
        pc, pm = p.get("cpu") or {}, p.get("memory") or {}
        plabels = _labels((), (), pl)
        if "usageCoreNanoSeconds" in pc:
            pod_cpu.append(
                f"pod_cpu_usage_seconds_total{plabels} {_num(pc['usageCoreNanoSeconds'] / 1e9)}{_ms(pc.get('time'))}"
            )
        if "workingSetBytes" in pm:
            pod_mem.append(f"pod_memory_working_set_bytes{plabels} {pm['workingSetBytes']}{_ms(pm.get('time'))}")
    family(
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "counter",
        ctr_cpu,
    )
    family(
        "container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", "gauge", ctr_mem
    )
    family(
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        "gauge",
        ctr_start,
    )
    if "usageCoreNanoSeconds" in cpu:
        family(
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            "counter",
            [f"node_cpu_usage_seconds_total {_num(cpu['usageCoreNanoSeconds'] / 1e9)}{_ms(cpu.get('time'))}"],
        )
    if "workingSetBytes" in mem:
        family(
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            "gauge",
            [f"node_memory_working_set_bytes {mem['workingSetBytes']}{_ms(mem.get('time'))}"],
        )
    family(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
        pod_cpu,
    )
    family("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", "gauge", pod_mem)
    family(
        "scrape_error",
        "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
        ["scrape_error 0"],
    )
    return "".join(out)
