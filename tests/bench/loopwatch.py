"""An event-loop stall watcher for benchmarks (tests/bench/apiserver_watched.py runs the
API server with it, tests/bench/hollow.py ``--loop-watch`` the hollow nodes).

:class:`Watch` adds two things to a process that only observe:

* a heartbeat timer on the server's event loop every 20 ms: how late each tick fires
  is the loop's lag (the time a request that arrived at that moment waited before the
  loop could look at it), kept as a histogram;
* a sampler thread that every 5 ms, while the heartbeat is more than 50 ms overdue
  (the loop is stuck in one callback), records the main thread's Python stack; and,
  whether stalled or not, whether the loop thread was running Python code at all.

SIGUSR1 closes a period: its report is written to ``<out stem>.<n><suffix>`` and the
counters start again. The report (rewritten every 10 s and at exit) gives the lag histogram, the seconds the
loop spent stalled, and the stacks that held it, heaviest first: where the milliseconds
of a slow request went when the server itself was the cause. The sampler takes the
GIL like any thread, so the figures are samples, not exact times.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import threading
import time
from pathlib import Path

BEAT_S = 0.02
SAMPLE_S = 0.005
STALL_S = 0.05
LAG_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
STACK_DEPTH = 14


class Watch:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.main_ident = threading.main_thread().ident
        self.last_beat = time.monotonic()
        self.stop = threading.Event()
        self.rotate_wanted = threading.Event()
        self.period = 0
        self.reset()

    def reset(self) -> None:
        self.lag_counts = [0] * (len(LAG_BOUNDS) + 1)
        self.lag_max = 0.0
        self.lag_total = 0.0
        self.beats = 0
        self.stall_samples = 0
        self.samples = 0
        self.busy_samples = 0
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.busy_inclusive: collections.Counter[str] = collections.Counter()
        self.roots: collections.Counter[str] = collections.Counter()
        self.stalls: list[float] = []  # durations of stalls over STALL_S, from the heartbeat
        self.started = time.monotonic()

    def rotate(self) -> None:
        """Close the current period (SIGUSR1): its report goes to ``<out>.<n>`` and the
        counters start again, so a run can be cut into start-up, steady state and load."""
        self.rotate_wanted.set()

    # --- the heartbeat, on the loop ----------------------------------------------------------
    def start_beat(self, loop: asyncio.AbstractEventLoop) -> None:
        due = time.monotonic() + BEAT_S

        def beat(due: float) -> None:
            now = time.monotonic()
            lag = max(0.0, now - due)
            self.last_beat = now
            self.beats += 1
            self.lag_total += lag
            self.lag_max = max(self.lag_max, lag)
            i = 0
            while i < len(LAG_BOUNDS) and lag > LAG_BOUNDS[i]:
                i += 1
            self.lag_counts[i] += 1
            if lag > STALL_S:
                self.stalls.append(lag)
            loop.call_at(loop.time() + BEAT_S, beat, now + BEAT_S)

        loop.call_at(loop.time() + BEAT_S, beat, due)

    def start(self, loop: asyncio.AbstractEventLoop) -> threading.Thread:
        """The heartbeat on ``loop`` (which must run on the main thread) and the sampler thread."""
        self.start_beat(loop)
        loop.add_signal_handler(signal.SIGUSR1, self.rotate)
        sampler = threading.Thread(target=self.sample_forever, name="loopwatch", daemon=True)
        sampler.start()
        return sampler

    def close(self, sampler: threading.Thread | None) -> None:
        self.stop.set()
        if sampler is not None:
            sampler.join(1)
        self.write()

    # --- the sampler thread ------------------------------------------------------------------
    def sample_forever(self) -> None:
        next_write = time.monotonic() + 10
        while not self.stop.wait(SAMPLE_S):
            frame = sys._current_frames().get(self.main_ident)  # noqa: SLF001 - a sampler's business
            if frame is None:
                continue
            self.samples += 1
            stack = []
            f = frame
            while f is not None:
                code = f.f_code
                stack.append(f"{short(code.co_filename)}:{code.co_name}:{f.f_lineno}")
                f = f.f_back
            root = task_root(stack)
            busy = root is not None
            if root is not None:
                self.busy_samples += 1
                self.roots[root] += 1
                for fn in {s.rsplit(":", 1)[0] for s in stack}:
                    self.busy_inclusive[fn] += 1
            if time.monotonic() - self.last_beat > STALL_S and busy:
                self.stall_samples += 1
                self.stacks[tuple(stack[:STACK_DEPTH])] += 1
                for fn in {s.rsplit(":", 1)[0] for s in stack}:
                    self.inclusive[fn] += 1
            if self.rotate_wanted.is_set():
                self.rotate_wanted.clear()
                self.write(self.out.with_name(f"{self.out.stem}.{self.period}{self.out.suffix}"))
                self.period += 1
                self.reset()
            if time.monotonic() >= next_write:
                next_write = time.monotonic() + 10
                self.write()

    def write(self, out: Path | None = None) -> None:
        out = out or self.out
        wall = time.monotonic() - self.started
        lines = [
            f"loopwatch: {wall:.0f} s, {self.beats} heartbeats every {BEAT_S * 1000:.0f} ms; "
            f"lag mean {self.lag_total / max(1, self.beats) * 1000:.1f} ms, max {self.lag_max * 1000:.0f} ms",
            f"stalls over {STALL_S * 1000:.0f} ms: {len(self.stalls)}, {sum(self.stalls):.1f} s in all "
            f"(loop stalled {self.stall_samples * SAMPLE_S:.1f} s by samples); "
            f"loop thread busy in {self.busy_samples} of {self.samples} samples",
            "lag histogram (upper bound: heartbeats):",
        ]
        bounds = [f"<= {b * 1000:g} ms" for b in LAG_BOUNDS] + [f"> {LAG_BOUNDS[-1] * 1000:g} ms"]
        lines += [f"  {b:>12}: {n}" for b, n in zip(bounds, self.lag_counts)]
        lines.append(f"functions on the stack while stalled (samples of {SAMPLE_S * 1000:g} ms, inclusive):")
        lines += [f"  {n:6d}  {fn}" for fn, n in self.inclusive.most_common(40)]
        lines.append("busy samples by the task or callback running (its outermost frame): which loop costs what")
        lines += [f"  {n:6d}  {n / max(1, self.busy_samples):6.1%}  {fn}" for fn, n in self.roots.most_common(30)]
        lines.append("functions on the stack while busy (inclusive):")
        lines += [f"  {n:6d}  {fn}" for fn, n in self.busy_inclusive.most_common(40)]
        lines.append("stalled stacks, heaviest first (innermost frame first):")
        for stack, n in self.stacks.most_common(25):
            lines.append(f"  {n} samples:")
            lines += [f"      {s}" for s in stack]
        tmp = out.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, out)


def task_root(stack: list[str]) -> str | None:
    """The outermost frame above the event loop's own (innermost-first ``stack``): the task
    or callback the loop is running; None when the loop thread runs no Python code of
    anyone's (idle in select, or in the loop's C code)."""
    for i in range(len(stack) - 1, -1, -1):
        if "asyncio/" in stack[i]:
            inner = i - 1
            while inner >= 0 and "asyncio/" in stack[inner]:
                inner -= 1
            if inner < 0:
                return None
            # Idle: the selector's select; otherwise the first frame above the loop machinery.
            if "selectors.py" in stack[inner]:
                return None
            return stack[inner].rsplit(":", 1)[0]
    return None


def short(path: str) -> str:
    for marker in ("/apiserver_min/", "/site-packages/", "/lib/python3"):
        i = path.find(marker)
        if i >= 0:
            return path[i + 1 :]
    return path
