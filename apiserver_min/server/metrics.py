"""The server's Prometheus metrics, in the text exposition format."""

from __future__ import annotations

import bisect
import collections
from typing import Callable

BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60)


def _labels(names: tuple[str, ...], values: tuple) -> str:
    return ",".join(f'{n}="{_esc(str(v))}"' for n, v in zip(names, values))


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    REQ_LABELS = ("verb", "group", "version", "resource", "subresource", "scope", "component", "code")
    DUR_LABELS = ("verb", "group", "version", "resource", "subresource", "scope", "component")
    DEPRECATED_LABELS = ("group", "version", "resource", "subresource", "removed_release")

    def __init__(self):
        self.requests: collections.Counter = collections.Counter()
        self.durations: dict[tuple, list] = {}
        self.deprecated: set[tuple] = set()
        self.watchers: collections.Counter = collections.Counter()
        self.object_counts: Callable[[], dict[str, int]] = lambda: {}
        # Other parts' metrics (admission webhooks, say): each gives its exposition lines.
        self.sources: list[Callable[[], list[str]]] = []

    def observe(
        self,
        verb: str,
        group: str,
        version: str,
        resource: str,
        subresource: str,
        scope: str,
        code: int,
        seconds: float,
    ) -> None:
        self.requests[(verb, group, version, resource, subresource, scope, "apiserver", code)] += 1
        key = (verb, group, version, resource, subresource, scope, "apiserver")
        h = self.durations.get(key)
        if h is None:
            h = self.durations[key] = [[0] * len(BUCKETS), 0, 0.0]
        i = bisect.bisect_left(BUCKETS, seconds)
        if i < len(BUCKETS):
            h[0][i] += 1
        h[1] += 1
        h[2] += seconds

    def deprecated_request(self, group: str, version: str, resource: str, subresource: str, removed: str) -> None:
        self.deprecated.add((group, version, resource, subresource, removed))

    def watchers_inc(self, kind, delta: int) -> None:
        self.watchers[(kind.group, kind.version, kind.kind)] += delta

    def render(self) -> str:
        out = [
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, "
            "dry run value, group, version, resource, scope, component, and HTTP response code.",
            "# TYPE apiserver_request_total counter",
        ]
        for key, n in sorted(self.requests.items(), key=lambda kv: tuple(map(str, kv[0]))):
            out.append(f"apiserver_request_total{{{_labels(self.REQ_LABELS, key)}}} {n}")
        out += [
            "# HELP apiserver_request_duration_seconds Response latency distribution in seconds.",
            "# TYPE apiserver_request_duration_seconds histogram",
        ]
        for key, (buckets, count, total) in sorted(self.durations.items(), key=lambda kv: tuple(map(str, kv[0]))):
            lbl = _labels(self.DUR_LABELS, key)
            acc = 0
            for b, n in zip(BUCKETS, buckets):
                acc += n
                out.append(f'apiserver_request_duration_seconds_bucket{{{lbl},le="{b}"}} {acc}')
            out.append(f'apiserver_request_duration_seconds_bucket{{{lbl},le="+Inf"}} {count}')
            out.append(f"apiserver_request_duration_seconds_sum{{{lbl}}} {total}")
            out.append(f"apiserver_request_duration_seconds_count{{{lbl}}} {count}")
        out += [
            "# HELP apiserver_requested_deprecated_apis Gauge of deprecated APIs that have been requested, "
            "broken out by API group, version, resource, subresource, and removed_release.",
            "# TYPE apiserver_requested_deprecated_apis gauge",
        ]
        for key in sorted(self.deprecated):
            out.append(f"apiserver_requested_deprecated_apis{{{_labels(self.DEPRECATED_LABELS, key)}}} 1")
        out += [
            "# HELP apiserver_registered_watchers Number of currently registered watchers for a given resource.",
            "# TYPE apiserver_registered_watchers gauge",
        ]
        for (g, v, k), n in sorted(self.watchers.items()):
            out.append(f'apiserver_registered_watchers{{group="{g}",kind="{k}",version="{v}"}} {n}')
        out += [
            "# HELP apiserver_storage_objects Number of stored objects at the time of last check split by kind.",
            "# TYPE apiserver_storage_objects gauge",
        ]
        for res, n in sorted(self.object_counts().items()):
            out.append(f'apiserver_storage_objects{{resource="{_esc(res)}"}} {n}')
        for source in self.sources:
            out += source()
        return "\n".join(out) + "\n"
