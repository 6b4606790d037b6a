"""The node agent as a process: start-up checks, supervised tasks, systemd, health, shutdown.

:class:`AgentProcess` owns the agent's life:

1. start-up checks, in upstream's order: swap (``--fail-swap-on``), the OOM score
   (``--oom-score-adj``), the open-file limit (``--max-open-files``), the agent's
   own cgroup (``--agent-cgroups``) and the lock file (``--lock-file``; waits
   while another process holds it);
2. the supervised tasks start in a fixed order (:meth:`AgentProcess.tasks`):
   log flushing, the health server, the sync loop, then whatever later issues
   add (pod sources, pod workers, node status) and finally the lock-contention
   watcher and the systemd watchdog;
3. once the sync loop has completed an iteration, systemd hears ``READY=1``;
4. on SIGTERM or SIGINT (or lock contention with ``--exit-on-lock-contention``,
   or a task failing) systemd hears ``STOPPING=1`` and the tasks are cancelled
   one at a time in reverse start order, within :data:`SHUTDOWN_TIMEOUT`.
   Containers are never touched here: restarting the agent must not restart pods.

Outside systemd (no ``NOTIFY_SOCKET``) the notifications are no-ops.

Test hooks (environment variables, see ``apiserver_min.api.names``): a fake
``/proc/swaps`` path for the swap probe, a file whose presence stalls the sync
loop, and a shorter sync-loop health threshold.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import dataclasses
import fcntl
import os
import resource
import signal
import socket
import struct
import time
from typing import Awaitable, Callable, Mapping, Sequence

from apiserver_min.api import names
from apiserver_min.api.duration import DurationError, parse_duration

from . import logging as agent_logging
from . import memory
from .cm import ContainerManager
from .config import AgentConfig
from .kerneltunables import differences as kernel_differences
from .node import NodeAgent, NodeStartError

__all__ = [
    "SHUTDOWN_TIMEOUT",
    "StartError",
    "TestHooks",
    "Notifier",
    "swap_devices",
    "LockFile",
    "HealthChecks",
    "SyncLoopMonitor",
    "TaskSpec",
    "Supervisor",
    "AgentProcess",
]

log = agent_logging.get_logger("process")

SHUTDOWN_TIMEOUT = 10.0  # seconds for all tasks to stop after SIGTERM
SYNC_LOOP_PERIOD = 1.0  # upstream's sync loop ticks every second
SYNC_LOOP_MIN_THRESHOLD = 300.0  # /healthz fails after max(2 * --sync-frequency, 5m) without a tick
LOCK_POLL_INTERVAL = 0.1


class StartError(RuntimeError):
    """A start-up check failed; the message says what and how to fix it."""


# --- test hooks ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TestHooks:
    __test__ = False  # not a pytest class

    proc_swaps: str = "/proc/swaps"
    stall_file: str = ""
    sync_loop_threshold: float | None = None
    image_gc_period: float | None = None
    container_gc_period: float | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> "TestHooks":
        def seconds(var: str) -> float | None:
            raw = environ.get(var, "")
            if not raw:
                return None
            try:
                return parse_duration(raw).total_seconds()
            except DurationError as exc:
                raise StartError(f"{var}: {exc}") from None

        return cls(
            proc_swaps=environ.get(names.ENV_AGENT_TEST_PROC_SWAPS, "") or "/proc/swaps",
            stall_file=environ.get(names.ENV_AGENT_TEST_STALL_FILE, ""),
            sync_loop_threshold=seconds(names.ENV_AGENT_TEST_SYNC_LOOP_THRESHOLD),
            image_gc_period=seconds(names.ENV_AGENT_TEST_IMAGE_GC_PERIOD),
            container_gc_period=seconds(names.ENV_AGENT_TEST_CONTAINER_GC_PERIOD),
        )


# --- systemd notification -------------------------------------------------------------


class Notifier:
    """sd_notify(3) over ``NOTIFY_SOCKET``; silent when the variable is absent.

    The variables are taken out of the environment so that processes the agent
    starts later do not talk to systemd in its name.
    """

    def __init__(self, environ: dict[str, str] | os._Environ = os.environ) -> None:
        self.address = environ.pop("NOTIFY_SOCKET", "") or ""
        usec = environ.pop("WATCHDOG_USEC", "") or ""
        pid = environ.pop("WATCHDOG_PID", "") or ""
        self.watchdog_usec = 0
        if usec.isdigit() and (not pid or pid == str(os.getpid())):
            self.watchdog_usec = int(usec)
        self._sock: socket.socket | None = None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *fields: str) -> bool:
        if not self.address:
            return False
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(fields).encode("utf-8"), addr)
            return True
        except OSError as exc:
            if not self._warned:
                log.warning("Failed to notify systemd", err=exc, socket=self.address)
                self._warned = True
            return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


# --- start-up checks ----------------------------------------------------------------


def swap_devices(path: str = "/proc/swaps") -> list[str]:
    """Active swap devices listed in ``path`` (the header line skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    return [ln for ln in lines[1:] if ln.strip()]


def check_swap(cfg: AgentConfig, probe: Callable[[], list[str]]) -> None:
    if not cfg.fail_swap_on:
        return
    devices = probe()
    if devices:
        raise StartError(
            "running with swap on is not supported, please disable swap (swapoff -a) or set "
            "--fail-swap-on=false (failSwapOn: false in the config file); active swap: "
            + "; ".join(" ".join(d.split()) for d in devices)
        )


def check_kernel_defaults(cfg: AgentConfig, proc_sys: str = "/proc/sys") -> None:
    """``protectKernelDefaults``: refuse to start on a kernel whose tunables differ."""
    if not cfg.protect_kernel_defaults:
        return
    problems = kernel_differences(proc_sys)
    if problems:
        raise StartError("protectKernelDefaults is set and the kernel differs: " + "; ".join(problems))


def apply_oom_score_adj(value: int, path: str = "/proc/self/oom_score_adj") -> None:
    try:
        with open(path, "w") as f:
            f.write(str(value))
    except OSError as exc:
        # Upstream carries on: an unprivileged agent can still run.
        log.warning("Failed to apply the OOM score adjustment", err=exc, value=value)
    else:
        log.v(2).info("Applied OOM score adjustment", value=value)


def apply_max_open_files(value: int) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (value, value))
    except (ValueError, OSError) as exc:
        # Without CAP_SYS_RESOURCE the hard limit cannot rise: take what is allowed.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        best = min(value, hard) if hard != resource.RLIM_INFINITY else value
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (best, hard))
        except (ValueError, OSError):
            best = soft
        log.error("Failed to set the open-file limit", err=exc, wanted=value, using=best, hard=hard)
    else:
        log.v(2).info("Set the open-file limit", value=value)


def _cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup/cgroup2 mount, deduplicated."""
    seen: set[str] = set()
    out = []
    with open(mountinfo, encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            rest = right.split()
            if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
                continue
            point = fields[4].replace("\\040", " ")
            if point in seen:
                continue
            seen.add(point)
            out.append((point, rest[0], set(rest[2].split(","))))
    return out


def move_to_cgroup(name: str, pid: int | None = None) -> list[str]:
    """Put ``pid`` (default: this process) into cgroup ``name`` on every hierarchy.

    Returns the cgroup directories written. Missing directories are created; on
    a cgroup v1 cpuset hierarchy a new group inherits its parent's CPUs and
    memory nodes, without which no process could join it.
    """
    pid = os.getpid() if pid is None else pid
    rel = name.strip("/")
    written = []
    errors = []
    for point, fstype, opts in _cgroup_mounts():
        target = os.path.join(point, rel) if rel else point
        try:
            _make_cgroup(point, rel, cpuset=fstype == "cgroup" and "cpuset" in opts)
            with open(os.path.join(target, "cgroup.procs"), "w") as f:
                f.write(str(pid))
            written.append(target)
        except OSError as exc:
            errors.append(f"{target}: {exc.strerror or exc}")
    if errors:
        raise StartError(f"cannot move the agent into cgroup {name} (--agent-cgroups): " + "; ".join(errors))
    return written


def _make_cgroup(point: str, rel: str, cpuset: bool) -> None:
    path = point
    for part in [p for p in rel.split("/") if p]:
        parent, path = path, os.path.join(path, part)
        if os.path.isdir(path):
            continue
        os.mkdir(path)
        if cpuset:
            for knob in ("cpuset.cpus", "cpuset.mems"):
                with open(os.path.join(parent, knob)) as f:
                    value = f.read().strip()
                with open(os.path.join(path, knob), "w") as f:
                    f.write(value)


class LockFile:
    """``--lock-file``: an exclusive flock held for the agent's lifetime.

    :meth:`acquire` waits (polling, so a signal can still stop the agent) while
    another process holds the lock. :meth:`watch_contention` reports when some
    other process opens the file, which is how a second agent asks for it
    (``--exit-on-lock-contention``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    async def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StartError(f"cannot open the lock file {self.path} (--lock-file): {exc.strerror or exc}") from None
        waited = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waited:
                        log.info("Waiting for the lock file, held by another process", path=self.path)
                        waited = True
                    await asyncio.sleep(LOCK_POLL_INTERVAL)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        log.info("Acquired the lock file", path=self.path, waited=waited)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    async def watch_contention(self) -> None:
        """Return when another process opens (or deletes) the lock file."""
        libc = ctypes.CDLL(None, use_errno=True)
        in_open, in_delete_self = 0x20, 0x400
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise StartError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        try:
            if libc.inotify_add_watch(fd, os.fsencode(self.path), in_open | in_delete_self) < 0:
                raise StartError(f"cannot watch the lock file {self.path}: {os.strerror(ctypes.get_errno())}")
            loop = asyncio.get_running_loop()
            event = asyncio.Event()
            loop.add_reader(fd, event.set)
            try:
                while True:
                    await event.wait()
                    event.clear()
                    try:
                        data = os.read(fd, 4096)
                    except BlockingIOError:
                        continue
                    masks = []
                    off = 0
                    while off + 16 <= len(data):
                        _wd, mask, _cookie, length = struct.unpack_from("iIII", data, off)
                        masks.append(mask)
                        off += 16 + length
                    if any(m & (in_open | in_delete_self) for m in masks):
                        return
            finally:
                loop.remove_reader(fd)
        finally:
            os.close(fd)


# --- health ---------------------------------------------------------------------------


class SyncLoopMonitor:
    """When the sync loop last completed an iteration; unhealthy when too long ago."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.last: float | None = None
        self.iterations = 0
        self.first = asyncio.Event()

    def beat(self) -> None:
        self.last = time.monotonic()
        self.iterations += 1
        self.first.set()

    def check(self) -> str | None:
        if self.last is None:
            return None  # not started yet: upstream reports healthy until the first iteration
        age = time.monotonic() - self.last
        if age > self.threshold:
            return f"sync loop took longer than expected: last iteration {age:.1f}s ago (threshold {self.threshold:g}s)"
        return None


class HealthChecks:
    """Named checks; each returns None when healthy or a reason."""

    def __init__(self) -> None:
        self._checks: dict[str, Callable[[], str | None]] = {"ping": lambda: None}

    def add(self, name: str, check: Callable[[], str | None]) -> None:
        self._checks[name] = check

    @property
    def names(self) -> list[str]:
        return list(self._checks)

    def run(self, only: str | None = None) -> list[tuple[str, str | None]]:
        items = self._checks.items() if only is None else [(only, self._checks[only])]
        out = []
        for name, fn in items:
            try:
                out.append((name, fn()))
            except Exception as exc:  # a broken check is a failing check
                out.append((name, f"check raised {exc!r}"))
        return out

    def healthy(self) -> bool:
        return all(err is None for _, err in self.run())

    def first_failure(self) -> str | None:
        for name, err in self.run():
            if err is not None:
                return f"{name}: {err}"
        return None


async def serve_health(checks: HealthChecks, host: str, port: int, started: asyncio.Future | None = None) -> None:
    """``/healthz`` (and ``/healthz/<check>``) on ``host:port`` until cancelled."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                head = await reader.readuntil(b"\r\n\r\n")
            method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
            target = rest.rsplit(" ", 1)[0]
            path, _, query = target.partition("?")
            status, body = _health_response(checks, method, path, query)
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"X-Content-Type-Options: nosniff\r\nContent-Length: {len(payload)}\r\n"
                f"Connection: close\r\n\r\n".encode()
                + (payload if method != "HEAD" else b"")
            )
            await writer.drain()
        except (
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            UnicodeDecodeError,
        ):
            pass
        finally:
            writer.close()

    try:
        server = await asyncio.start_server(handle, host, port, reuse_address=True)
    except OSError as exc:
        err = StartError(
            f"cannot serve health checks on {host}:{port} (--healthz-bind-address, "
            f"--healthz-port): {exc.strerror or exc}"
        )
        if started is not None and not started.done():
            started.set_exception(err)
            return
        raise err from None
    log.info("Serving health checks", address=f"{host}:{port}", path="/healthz")
    if started is not None and not started.done():
        started.set_result(True)
    async with server:
        await server.serve_forever()


def _health_response(checks: HealthChecks, method: str, path: str, query: str) -> tuple[str, str]:
    if method not in ("GET", "HEAD"):
        return "405 Method Not Allowed", "method not allowed\n"
    path = path.rstrip("/") or "/"
    verbose = "verbose" in query.split("&") or any(q.startswith("verbose=") for q in query.split("&"))
    if path == "/healthz":
        results = checks.run()
    elif path.startswith("/healthz/") and path[len("/healthz/") :] in checks.names:
        results = checks.run(path[len("/healthz/") :])
        name, err = results[0]
        return ("200 OK", "ok") if err is None else ("500 Internal Server Error", f"internal server error: {err}\n")
    else:
        return "404 Not Found", "404 page not found\n"
    failed = any(err is not None for _, err in results)
    if not failed and not verbose:
        return "200 OK", "ok"
    lines = []
    for name, err in results:
        lines.append(f"[+]{name} ok" if err is None else f"[-]{name} failed: {err}")
    lines.append("healthz check failed" if failed else "healthz check passed")
    return ("500 Internal Server Error" if failed else "200 OK"), "\n".join(lines) + "\n"


# --- supervision ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A long-lived task of the agent: ``run()`` returns only when the task is done.

    ``critical`` tasks stop the agent when they end or fail; others are only logged.
    Tasks are stopped by cancellation and may clean up in ``finally``.
    """

    name: str
    run: Callable[[], Awaitable[None]]
    critical: bool = True


class Supervisor:
    """Starts named tasks in order and stops them in reverse order within a bound.

    Not an ``asyncio.TaskGroup``: a TaskGroup cancels every task at once when one
    fails, and the agent must stop its parts in a known order even then.
    """

    def __init__(self, stop_timeout: float = SHUTDOWN_TIMEOUT) -> None:
        self.stop_timeout = stop_timeout
        self._specs: list[TaskSpec] = []
        self._tasks: list[tuple[TaskSpec, asyncio.Task]] = []
        self.ended = asyncio.Event()  # a critical task ended (see .failure)
        self.failure: str | None = None
        self.stop_order: list[str] = []

    def add(self, spec: TaskSpec) -> None:
        if any(s.name == spec.name for s in self._specs):
            raise ValueError(f"duplicate task name {spec.name!r}")
        self._specs.append(spec)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self._specs]

    def start(self) -> None:
        for spec in self._specs:
            task = asyncio.create_task(self._wrap(spec), name=spec.name)
            self._tasks.append((spec, task))
            log.v(2).info("Started task", task=spec.name)

    async def _wrap(self, spec: TaskSpec) -> None:
        try:
            await spec.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("Task failed", err=exc, task=spec.name)
            if spec.critical and self.failure is None:
                self.failure = f"task {spec.name} failed: {exc}"
                self.ended.set()
            return
        if spec.critical and self.failure is None:
            self.failure = f"task {spec.name} ended"
            self.ended.set()

    async def stop(self) -> bool:
        """Cancel tasks last-started first; False if some did not stop in time."""
        deadline = time.monotonic() + self.stop_timeout
        clean = True
        for spec, task in reversed(self._tasks):
            if not task.done():
                task.cancel()
                remaining = max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait({task}, timeout=remaining)
                if not done:
                    log.error("Task did not stop in time", task=spec.name, timeout=f"{self.stop_timeout:g}s")
                    clean = False
                    continue
            self.stop_order.append(spec.name)
            log.v(2).info("Stopped task", task=spec.name)
        self._tasks.clear()
        return clean


# --- the agent process ----------------------------------------------------------------


class AgentProcess:
    """The composition root of a running agent (see the module docstring)."""

    def __init__(
        self,
        cfg: AgentConfig,
        *,
        version: str = "",
        hooks: TestHooks | None = None,
        notifier: Notifier | None = None,
        swap_probe: Callable[[], list[str]] | None = None,
        extra_tasks: Sequence[TaskSpec] = (),
        shutdown_timeout: float = SHUTDOWN_TIMEOUT,
        with_node: bool = True,
        container_manager: ContainerManager | None = None,
        pod_logs_dir: str = "",
        handle_signals: bool = True,
    ) -> None:
        """``container_manager`` and ``pod_logs_dir`` replace the ones built from the
        flags (and the fixed ``/var/log/pods``), and
        ``handle_signals=False`` leaves SIGTERM/SIGINT to the caller (which stops the
        agent with :meth:`request_stop`): both for running many agents in one process
        on the fake runtime (the hollow nodes of ``tests/bench/hollow.py``)."""
        self.cfg = cfg
        self.version = version
        self.hooks = hooks if hooks is not None else TestHooks.from_environ()
        self.notifier = notifier if notifier is not None else Notifier()
        self.swap_probe = swap_probe or (lambda: swap_devices(self.hooks.proc_swaps))
        self.extra_tasks = tuple(extra_tasks)
        self.supervisor = Supervisor(shutdown_timeout)
        threshold = self.hooks.sync_loop_threshold
        if threshold is None:
            threshold = max(2 * cfg.sync_frequency.total_seconds(), SYNC_LOOP_MIN_THRESHOLD)
        self.sync_monitor = SyncLoopMonitor(threshold)
        self.health = HealthChecks()
        self.health.add("log", self._log_check)
        self.health.add("syncloop", self.sync_monitor.check)
        self.lock: LockFile | None = None
        self._stop = asyncio.Event()
        self.ready = asyncio.Event()
        self._stop_reason = ""
        self._exit_code = 0
        self._last_status = ""
        self.node = None  # agent.node.NodeAgent, built at start
        self.with_node = with_node
        self.container_manager = container_manager
        self.pod_logs_dir = pod_logs_dir
        self.handle_signals = handle_signals

    # Tasks, in start order. Later issues insert theirs where marked.
    def tasks(self) -> list[TaskSpec]:
        cfg = self.cfg
        specs = [TaskSpec("log-flush", self._flush_logs)]
        if cfg.healthz_port:
            specs.append(TaskSpec("health-server", self._serve_health))
        if self.node is not None:
            # Device plugins register before pods start (their allocations come from the checkpoint).
            # Not critical: a node whose plugin socket cannot be served still runs its other pods.
            specs.append(TaskSpec("device-manager", self.node.run_device_manager, critical=False))
            if self.node.pod_resources is not None:
                specs.append(TaskSpec("pod-resources", self.node.run_pod_resources, critical=False))
            specs.append(TaskSpec("pod-sources", self.node.run_sources))
            if self.node.server is not None:
                specs.append(TaskSpec("agent-server", self.node.run_server))
            if self.node.read_only_server is not None:
                specs.append(TaskSpec("agent-read-only-server", self.node.run_read_only_server))
            if self.node.cluster_mode:
                specs.append(TaskSpec("cluster", self.node.run_cluster))
        # The sync loop is the pod pipeline (pod workers, relist, housekeeping).
        specs.append(TaskSpec("sync-loop", self._sync_loop))
        if self.node is not None:
            # Garbage collection beside the pipeline (upstream's image and container GC loops).
            hooks = self.hooks
            specs.append(TaskSpec("image-gc", lambda: self.node.run_image_gc(hooks.image_gc_period), critical=False))
            specs.append(
                TaskSpec("container-gc", lambda: self.node.run_container_gc(hooks.container_gc_period), critical=False)
            )
            if self.node.reconciles_cpusets:
                # The CPU manager's reconciliation (static policy only).
                specs.append(TaskSpec("cpuset-reconcile", self.node.run_cpuset_reconcile, critical=False))
            if self.node.shutdown.enabled:
                # Graceful node shutdown: logind's delay lock and the pods stopped by priority.
                specs.append(TaskSpec("node-shutdown", self.node.run_shutdown, critical=False))
            specs.append(TaskSpec("eviction", self.node.run_eviction, critical=False))
        # The API server pod source, node status and lease come here (cluster mode).
        specs.extend(self.extra_tasks)
        if cfg.exit_on_lock_contention and self.lock is not None:
            specs.append(TaskSpec("lock-contention", self._watch_lock))
        if self.notifier.enabled and self.notifier.watchdog_usec:
            specs.append(TaskSpec("watchdog", self._watchdog))
        return specs

    def request_stop(self, reason: str, exit_code: int = 0) -> None:
        if not self._stop.is_set():
            self._stop_reason = reason
            self._exit_code = exit_code
            self._stop.set()

    def _status(self, text: str) -> None:
        if text != self._last_status:
            self._last_status = text
            self.notifier.notify(f"STATUS={text}")

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        # asyncio's default executor (asyncio.to_thread), as it would be, with its workers
        # named for the system (``top -H``, /proc/PID/task/*/comm): they start on demand up
        # to its bound and stay, and so are told apart from threads that should not grow.
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio", initializer=_name_thread)
        )
        signals_seen = []

        def on_signal(sig: signal.Signals) -> None:
            signals_seen.append(sig)
            if len(signals_seen) > 1:
                log.warning("Second signal, exiting immediately", signal=sig.name)
                agent_logging.flush()
                os._exit(128 + sig.value)
            log.info("Received signal, shutting down", signal=sig.name)
            self.request_stop(f"signal {sig.name}")

        handled = (signal.SIGTERM, signal.SIGINT) if self.handle_signals else ()
        for sig in handled:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            return await self._run()
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            if self.lock is not None:
                self.lock.release()
            self.notifier.close()

    async def _run(self) -> int:
        cfg = self.cfg
        self._status(f"Starting ({cfg.mode} mode)")
        try:
            self._preflight()
            if cfg.lock_file:
                self.lock = LockFile(cfg.lock_file)
                acquire = asyncio.create_task(self.lock.acquire())
                stop_wait = asyncio.create_task(self._stop.wait())
                await asyncio.wait({acquire, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                if not acquire.done():
                    acquire.cancel()
                    await asyncio.gather(acquire, return_exceptions=True)
                    log.info("Stopped while waiting for the lock file", reason=self._stop_reason)
                    return self._exit_code
                acquire.result()
            if self.with_node:
                self.node = self._build_node()
        except StartError as exc:
            log.error("Failed to start the agent", err=exc)
            self._status(f"Failed to start: {exc}")
            return 1

        for spec in self.tasks():
            self.supervisor.add(spec)
        health_started: asyncio.Future = loop_future()
        self._health_started = health_started
        self.supervisor.start()
        log.info("Started tasks", tasks=self.supervisor.names)

        # Ready once the health server listens (or failed) and the sync loop ran once.
        try:
            if self.cfg.healthz_port:
                await self._until_stop(health_started)
                if health_started.done() and not health_started.cancelled() and health_started.exception() is not None:
                    raise health_started.exception()  # type: ignore[misc]
            await self._until_stop(self.sync_monitor.first.wait())
        except StartError as exc:
            log.error("Failed to start the agent", err=exc)
            self._status(f"Failed to start: {exc}")
            await self.supervisor.stop()
            return 1

        if not self._stop.is_set() and not self.supervisor.ended.is_set():
            self.notifier.notify("READY=1", f"STATUS=Running ({cfg.mode} mode)")
            self._last_status = f"Running ({cfg.mode} mode)"
            self.ready.set()
            log.info("Agent is ready", mode=str(cfg.mode), tasks=len(self.supervisor.names))
            # What start-up freed goes back to the system now, not at the first trim of the sync loop.
            took = memory.release_free_memory(collect=True)
            log.v(4).info("Released free memory", seconds=round(took, 3))
            if cfg.runonce:
                self.request_stop("runonce: one sync completed")

        ended = asyncio.create_task(self.supervisor.ended.wait())
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        stopped.cancel()
        if not self._stop.is_set():
            self.request_stop(self.supervisor.failure or "a task ended", exit_code=1)

        self.notifier.notify("STOPPING=1", "STATUS=Shutting down")
        log.info("Shutting down", reason=self._stop_reason)
        clean = await self.supervisor.stop()
        if not clean and self._exit_code == 0:
            self._exit_code = 1
        log.info("Agent stopped", exit_code=self._exit_code, stop_order=self.supervisor.stop_order)
        agent_logging.flush()
        return self._exit_code

    async def _until_stop(self, aw) -> None:
        """Await ``aw`` unless a stop is requested or a critical task ends first."""
        task = asyncio.ensure_future(aw)
        stop = asyncio.create_task(self._stop.wait())
        ended = asyncio.create_task(self.supervisor.ended.wait())
        await asyncio.wait({task, stop, ended}, return_when=asyncio.FIRST_COMPLETED)
        for t in (stop, ended):
            t.cancel()
        if not task.done():
            task.cancel()

    def _preflight(self) -> None:
        cfg = self.cfg
        check_swap(cfg, self.swap_probe)
        check_kernel_defaults(cfg)
        apply_oom_score_adj(cfg.oom_score_adj)
        apply_max_open_files(cfg.max_open_files)
        if cfg.agent_cgroups:
            dirs = move_to_cgroup(cfg.agent_cgroups)
            log.info("Moved the agent into its cgroup", cgroup=cfg.agent_cgroups, hierarchies=len(dirs))

    # --- tasks ---

    async def _flush_logs(self) -> None:
        period = max(0.01, self.cfg.log_flush_frequency.total_seconds())
        try:
            while True:
                agent_logging.flush()
                await asyncio.sleep(period)
        finally:
            agent_logging.flush()

    def _log_check(self) -> str | None:
        period = self.cfg.log_flush_frequency.total_seconds()
        age = time.monotonic() - agent_logging.last_flush()
        limit = max(2 * period, 60.0)
        if age > limit:
            return f"logging not flushed for {age:.0f}s"
        return None

    async def _serve_health(self) -> None:
        await serve_health(
            self.health, self.cfg.healthz_bind_address, self.cfg.healthz_port, started=self._health_started
        )

    def _sync_period(self) -> float:
        period = SYNC_LOOP_PERIOD
        if self.hooks.sync_loop_threshold is not None:
            period = min(period, self.hooks.sync_loop_threshold / 4)
        return period

    def _beat(self) -> None:
        stall = self.hooks.stall_file
        if stall and os.path.exists(stall):
            log.v(4).info("Sync loop stalled by the test hook", file=stall)
        else:
            self.sync_monitor.beat()
            log.v(6).info("Sync loop iteration", iteration=self.sync_monitor.iterations)

    def _build_node(self):
        try:
            return NodeAgent(
                self.cfg,
                version=self.version,
                beat=self._beat,
                tick=self._sync_period(),
                container_manager=self.container_manager,
                pod_logs_dir=self.pod_logs_dir,
            )
        except NodeStartError as exc:
            raise StartError(str(exc)) from None

    async def _sync_loop(self) -> None:
        """The main loop: the pod pipeline when the node side runs, else a bare liveness tick."""
        if self.node is not None:
            await self.node.run_pipeline()
            return
        period = self._sync_period()
        while True:
            self._beat()
            await asyncio.sleep(period)

    async def _watch_lock(self) -> None:
        assert self.lock is not None
        await self.lock.watch_contention()
        log.info("Another process opened the lock file; exiting (--exit-on-lock-contention)", path=self.lock.path)
        self.request_stop("lock file contention")
        await asyncio.Event().wait()  # stay until stopped, so it is not reported as ended

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_usec / 2e6
        withheld = False
        await self.ready.wait()  # systemd arms the watchdog once start-up completed
        while True:
            failure = self.health.first_failure()
            if failure is None:
                self.notifier.notify("WATCHDOG=1")
                if withheld:
                    log.info("Healthy again; resuming watchdog pings")
                    self._status(f"Running ({self.cfg.mode} mode)")
                    withheld = False
            elif not withheld:
                log.error("Unhealthy; withholding watchdog pings", reason=failure)
                self._status(f"Unhealthy: {failure}")
                withheld = True
            await asyncio.sleep(interval)


WORKER_THREAD_NAME = f"{names.AGENT_NAME}-pool"[:15]  # the kernel keeps 15 bytes


def _name_thread() -> None:
    """The calling thread's system name (prctl PR_SET_NAME), for the executor's workers."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, WORKER_THREAD_NAME.encode(), 0, 0, 0)


def loop_future() -> asyncio.Future:
    return asyncio.get_running_loop().create_future()


def run_agent(cfg: AgentConfig, version: str = "") -> int:
    """Run the agent until it stops; the process exit code."""
    proc = AgentProcess(cfg, version=version)
    return asyncio.run(proc.run())
