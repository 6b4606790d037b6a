"""``--workers N``: several API server processes sharing the secure port.

The process started by the user becomes a supervisor. It starts worker 0 (the same
command line, run as a worker) and waits until it serves, so that the first start's
files (PKI, service-account key, the bootstrap namespaces) are made by one process,
then starts the others. Every worker opens the port with ``SO_REUSEPORT``: the
kernel spreads new connections across them. Each worker is a whole API server with
its own watch cache over the shared etcd; the bundled controllers run under leader
election, so one worker's copy is active. A worker that exits while the supervisor
is not stopping is started again after a back-off; SIGTERM and SIGINT are passed to
every worker and the supervisor exits when all have (with 0 when all exited 0, or by
that signal while still starting).

A worker learns its role from the environment (``WORKER_ENV``: its index and the
descriptor of the pipe on which it reports that it serves), so its command line is
exactly the user's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import Sequence

from ..api import names

log = logging.getLogger(__name__)

WORKER_ENV = "ORCH_APISERVER_WORKER"
# How long worker 0 may take to serve on a first start (PKI generation, etcd connect).
FIRST_START_TIMEOUT = 120.0
RESTART_BACKOFF_MIN = 1.0
RESTART_BACKOFF_MAX = 30.0
# A worker that served this long before exiting restarts with the shortest back-off.
STABLE_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1


def worker_role() -> tuple[int, int] | None:
    """(index, ready descriptor) when this process is a worker, else None."""
    raw = os.environ.get(WORKER_ENV)
    if not raw:
        return None
    index, _, fd = raw.partition(":")
    return int(index), int(fd)


def report_serving(fd: int) -> None:
    """Tell the supervisor this worker serves (once; the descriptor is closed)."""
    try:
        os.write(fd, b"1")
        os.close(fd)
    except OSError as exc:
        log.warning("cannot report to the supervisor: %s", exc)


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: a supervisor killed with SIGKILL takes its
    # workers along (they would otherwise keep the port with nobody restarting them).
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Worker:
    def __init__(self, index: int):
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.ready_fd = -1
        self.started = 0.0
        self.backoff = RESTART_BACKOFF_MIN
        self.restart_at = 0.0

    def start(self, command: Sequence[str]) -> None:
        r, w = os.pipe()
        env = dict(os.environ)
        env[WORKER_ENV] = f"{self.index}:{w}"
        self.proc = subprocess.Popen(list(command), env=env, pass_fds=(w,), preexec_fn=_die_with_parent)
        os.close(w)
        if self.ready_fd >= 0:
            os.close(self.ready_fd)
        self.ready_fd = r
        self.started = time.monotonic()
        log.info("worker %d started (pid %d)", self.index, self.proc.pid)

    def wait_serving(self, timeout: float) -> bool:
        """True once the worker reports that it serves; False when it exits or the time is up."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            readable, _, _ = select.select([self.ready_fd], [], [], min(left, 0.5))
            if readable:
                return os.read(self.ready_fd, 1) == b"1"


class Supervisor:
    def __init__(self, command: Sequence[str], count: int, port: int):
        self.command = list(command)
        self.port = port
        self.workers = [Worker(i) for i in range(count)]
        self.stopping = False
        self.signalled = 0  # the signal passed on to the workers

    def _signal(self, signum: int, _frame: object) -> None:
        if not self.stopping:
            log.info("supervisor: %s received; stopping %d workers", signal.Signals(signum).name, len(self.workers))
        self.stopping = True
        self.signalled = signum
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signum)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._signal)
        first = self.workers[0]
        first.start(self.command)
        if not first.wait_serving(FIRST_START_TIMEOUT):
            if self.stopping:  # stopped while it started
                return self._reap_all()
            log.error("%s: worker 0 did not start serving; stopping", names.APISERVER_NAME)
            self._signal(signal.SIGTERM, None)
            return self._reap_all() or 1
        for w in self.workers[1:]:
            if not self.stopping:
                w.start(self.command)
        serving = 1 + sum(1 for w in self.workers[1:] if not self.stopping and w.wait_serving(FIRST_START_TIMEOUT))
        if serving == len(self.workers):
            log.info("supervisor: all %d workers serve on port %s", serving, self.port)
        else:
            log.error("supervisor: %d of %d workers serve; the others are started again", serving, len(self.workers))
        while not self.stopping:
            self._tend()
            time.sleep(0.2)
        return self._reap_all()

    def _tend(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.proc is None:
                if now >= w.restart_at and not self.stopping:
                    w.start(self.command)
                continue
            code = w.proc.poll()
            if code is None:
                continue
            if self.stopping:
                return
            if now - w.started >= STABLE_SECONDS:
                w.backoff = RESTART_BACKOFF_MIN
            log.error(
                "worker %d (pid %d) exited with %d; starting it again in %.0fs", w.index, w.proc.pid, code, w.backoff
            )
            w.proc = None
            w.restart_at = now + w.backoff
            w.backoff = min(w.backoff * 2, RESTART_BACKOFF_MAX)

    def _reap_all(self) -> int:
        worst = 0
        for w in self.workers:
            if w.proc is None:
                continue
            code = w.proc.wait()
            log.info("worker %d (pid %d) exited with %d", w.index, w.proc.pid, code)
            # A worker still starting when the signal came ends by it: that is a clean stop.
            if code != 0 and code != -self.signalled:
                worst = code if code > 0 else 1
        for w in self.workers:
            if w.ready_fd >= 0:
                os.close(w.ready_fd)
                w.ready_fd = -1
        return worst


def supervise(argv: Sequence[str], count: int, port: int) -> int:
    """Run ``count`` workers of ``orch-apiserver ARGV`` until SIGTERM/SIGINT."""
    return Supervisor([sys.executable, "-m", "apiserver_min.cli", *argv], count, port).run()
