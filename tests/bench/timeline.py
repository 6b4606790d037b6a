"""A timeline of one Deployment's pods and ReplicaSets, for bench_scale.py's ``--timeline``.

Watches, from the benchmark's own client, the pods and ReplicaSets of one namespace
and records when each pod was first seen, bound to a node, Running, Ready, marked for
deletion and gone, and every change of a ReplicaSet's ``spec.replicas`` and
``status.availableReplicas``; samples the API server's and the hollow processes' CPU
seconds each second. :meth:`Timeline.report` prints a row per second (or per ``step``):
what happened in that second, the sets' sizes at its end, and the CPU each side used,
so the idle stretches of a rollout (nothing CPU-bound, nothing moving) stand out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Callable

from agent.client.rest import ApiClient, ApiConnectionError


@dataclasses.dataclass
class PodTimes:
    rs: str = ""
    seen: float | None = None
    bound: float | None = None
    running: float | None = None
    ready: float | None = None
    deleting: float | None = None
    gone: float | None = None


def _ready(pod: dict) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


class Timeline:
    """Pods and ReplicaSets of ``namespace`` as the benchmark's watches see them."""

    def __init__(self, client: ApiClient, namespace: str, cpu: dict[str, Callable[[], float]]) -> None:
        self.client = client
        self.namespace = namespace
        self.cpu = cpu
        self.pods: dict[str, PodTimes] = {}
        # ReplicaSet name -> [(t, spec.replicas, status.replicas, status.availableReplicas)]
        self.sets: dict[str, list[tuple[float, int, int, int]]] = {}
        self.cpu_samples: list[tuple[float, dict[str, float]]] = []
        self.marks: list[tuple[float, str]] = []
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._watch(f"/api/v1/namespaces/{self.namespace}/pods", self._see_pod)),
            asyncio.create_task(self._watch(f"/apis/apps/v1/namespaces/{self.namespace}/replicasets", self._see_rs)),
            asyncio.create_task(self._sample()),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def mark(self, what: str) -> None:
        self.marks.append((time.monotonic(), what))

    async def _sample(self) -> None:
        while True:
            self.cpu_samples.append((time.monotonic(), {k: f() for k, f in self.cpu.items()}))
            await asyncio.sleep(1.0)

    async def _watch(self, path: str, see: Callable[[str, dict, float], None]) -> None:
        listed = await self.client.get(path)
        rv = listed["metadata"]["resourceVersion"]
        now = time.monotonic()
        for obj in listed["items"]:
            see("ADDED", obj, now)
        while True:
            try:
                async for ev_type, obj in self.client.watch(
                    path, params={"resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "600"}
                ):
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev_type != "BOOKMARK":
                        see(ev_type, obj, time.monotonic())
            except ApiConnectionError:
                await asyncio.sleep(0.2)

    def _see_pod(self, ev_type: str, pod: dict, now: float) -> None:
        md = pod.get("metadata") or {}
        p = self.pods.get(md.get("uid", ""))
        if p is None:
            owner = next((r.get("name", "") for r in md.get("ownerReferences") or [] if r.get("controller")), "")
            p = self.pods[md.get("uid", "")] = PodTimes(rs=owner, seen=now)
        if ev_type == "DELETED":
            p.gone = p.gone or now
            p.deleting = p.deleting or now
            return
        if p.bound is None and (pod.get("spec") or {}).get("nodeName"):
            p.bound = now
        if p.running is None and (pod.get("status") or {}).get("phase") == "Running":
            p.running = now
        if p.ready is None and _ready(pod):
            p.ready = now
        if p.deleting is None and md.get("deletionTimestamp"):
            p.deleting = now

    def _see_rs(self, ev_type: str, rs: dict, now: float) -> None:
        name = (rs.get("metadata") or {}).get("name", "")
        spec = (rs.get("spec") or {}).get("replicas", 1)
        st = rs.get("status") or {}
        row = (now, spec, st.get("replicas", 0), st.get("availableReplicas", 0))
        series = self.sets.setdefault(name, [])
        if not series or series[-1][1:] != row[1:]:
            series.append(row)

    def report(self, t0: float, t1: float, step: float = 1.0) -> str:
        """Rows of ``step`` seconds from ``t0`` to ``t1`` (monotonic clock)."""
        sets = sorted(self.sets, key=lambda n: self.sets[n][0][0])
        fields = ("seen", "bound", "running", "ready", "deleting", "gone")
        head = f"{'t':>6} " + " ".join(f"{f[:7]:>7}" for f in fields)
        head += "".join(f" {('rs ' + n[-5:]):>15}" for n in sets)
        head += "".join(f" {('cpu ' + k)[:10]:>10}" for k in self.cpu)
        lines = [head, f"{'':>6} {'(pods that reached each state in the row)':<55}  per set: spec/replicas/available"]
        n = int((t1 - t0) / step) + 1
        counts = [dict.fromkeys(fields, 0) for _ in range(n)]
        for p in self.pods.values():
            for f in fields:
                v = getattr(p, f)
                if v is not None and t0 <= v < t0 + n * step:
                    counts[int((v - t0) / step)][f] += 1
        marks = sorted(self.marks)
        for i in range(n):
            lo, hi = t0 + i * step, t0 + (i + 1) * step
            row = f"{lo - t0:6.1f} " + " ".join(f"{counts[i][f]:>7}" for f in fields)
            for name in sets:
                cur = None
                for r in self.sets[name]:
                    if r[0] < hi:
                        cur = r
                row += f" {('%d/%d/%d' % cur[1:]) if cur else '-':>15}"
            for k in self.cpu:
                row += f" {self._cpu_between(k, lo, hi):>10.2f}"
            for t, what in marks:
                if lo <= t < hi:
                    row += f"  <- {what}"
            lines.append(row)
        return "\n".join(lines)

    def _cpu_between(self, key: str, lo: float, hi: float) -> float:
        """CPU seconds of ``key`` between the samples nearest ``lo`` and ``hi``."""
        before = [s for t, s in self.cpu_samples if t <= lo + 0.5]
        after = [s for t, s in self.cpu_samples if t <= hi + 0.5]
        if not before or not after:
            return 0.0
        return after[-1][key] - before[-1][key]

    def cpu_total(self, key: str, lo: float, hi: float) -> float:
        return self._cpu_between(key, lo, hi)

    def summary(self) -> str:
        """Per ReplicaSet: how many pods, and the p50 / p99 / max of each step of their lives."""

        def pct(values: list[float], q: float) -> str:
            if not values:
                return "   n/a"
            ordered = sorted(values)
            return f"{ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))]:6.2f}"

        steps = (
            ("seen→bound", "seen", "bound"),
            ("bound→Running", "bound", "running"),
            ("Running→Ready", "running", "ready"),
            ("deleting→gone", "deleting", "gone"),
        )
        lines = ["  pod steps (seconds, p50 / p99 / max):"]
        for name in sorted(self.sets, key=lambda n: self.sets[n][0][0]):
            pods = [p for p in self.pods.values() if p.rs == name]
            lines.append(f"    ReplicaSet {name}: {len(pods)} pods")
            for label, a, b in steps:
                values = [
                    getattr(p, b) - getattr(p, a)
                    for p in pods
                    if getattr(p, a) is not None and getattr(p, b) is not None
                ]
                if values:
                    lines.append(
                        f"      {label:<15} {pct(values, 50)} {pct(values, 99)} {max(values):6.2f}  (n={len(values)})"
                    )
        return "\n".join(lines)
