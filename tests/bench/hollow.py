"""Hollow nodes: many real node agents in one process, each on its own fake CRI runtime.

    .venv/bin/python tests/bench/hollow.py --data-dir SERVER_DATA_DIR --server https://127.0.0.1:PORT \\
        --nodes 100 [--first 0] [--prefix hollow-] [--work-dir DIR] [--duration S] [-v N]

A hollow node is the node agent's own code (:class:`agent.process.AgentProcess` and
:class:`agent.node.NodeAgent`: registration, node status every
``--node-status-update-frequency``, lease renewal, the API pod source's watch, pod
workers, the status manager, mirror pods, events, the service cache) with these
parts swapped, and only these:

* the CRI runtime is :class:`cri.fake.FakeRuntime` (a real gRPC server on a unix
  socket of the node's own; "containers" are states and timers, nothing runs);
* the container manager is :class:`HollowContainerManager`: no cgroups
  (``--cgroups-per-qos=false``), the machine's capacity replaced by fixed figures
  (:data:`HOLLOW_CAPACITY`), nothing read from ``/sys`` or ``/proc``;
* memory-backed volumes (Secrets, token projections, ``medium: Memory``) are plain
  directories, not a tmpfs each, and the static pod directory is polled, not
  watched with inotify (:class:`HollowAgentProcess`);
* container logs go to the node's own directory (``<work dir>/<node>/pod-logs``), not
  ``/var/log/pods``: the container GC of each agent removes the log directories of pods
  it does not know, so agents sharing that directory would remove each other's (and
  those of any other agent on the machine);
* the client certificate is pre-issued with the server's CA (``DATA_DIR/pki``) for
  ``system:node:<name>`` in ``system:nodes``, as TLS bootstrap would end; no CSR.

Flags that keep host-touching parts off: ``--proxy-mode=none`` (no nftables),
``--enable-server=false`` (no HTTPS port per node), ``--healthz-port=0``,
``--node-ip=127.0.0.1`` (no address detection), ``--oom-score-adj=0``,
``--max-open-files`` at the hard limit the process has. Every node
runs one static pod (a manifest in a directory all nodes share) and so creates one
mirror pod, ``hollow-static-<node>`` in ``orch-system``.

Pod IPs come from the node's own /24 of 10.64.0.0/10 (node index 0..16383).
Pods must use the images the fake runtime preloads (``orch.local/busybox:1``).

Run as a program it starts ``--nodes`` hollow nodes, prints one JSON line
(``{"ready": N, "rss_bytes": ..., "start_seconds": ...}``) when all have started,
and runs until SIGTERM/SIGINT or ``--duration``; bench_scale.py starts several such
processes to spread a thousand nodes over the cores. ``--nice N`` runs the process at
nice N; ``--loop-watch FILE`` writes an event-loop stall report (tests/bench/loopwatch.py);
``--profile FILE`` cProfiles a window of the steady state (``--profile-delay``,
``--profile-seconds``) to split the agents' CPU by loop. Not a test, and never in
production: the fake runtime runs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ipaddress
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agent import logging as agent_logging  # noqa: E402
from agent.cm import ContainerManager  # noqa: E402
from agent.config import from_argv  # noqa: E402
from agent.process import AgentProcess, Notifier, TestHooks  # noqa: E402
from agent.sources.file import FileSource  # noqa: E402
from agent.validation import validate  # noqa: E402
from apiserver_min.api import names  # noqa: E402
from apiserver_min.pki import Pki, cert_pem, connection_config, key_pem, new_key, sign_leaf  # noqa: E402
from apiserver_min.version import __version__  # noqa: E402
from cri.fake import FakeRuntime  # noqa: E402
from tests.bench.loopwatch import Watch  # noqa: E402

__all__ = [
    "HOLLOW_CAPACITY",
    "HOLLOW_IMAGE",
    "STATIC_POD_NAME",
    "HollowAgentProcess",
    "HollowContainerManager",
    "HollowNode",
    "HollowNodes",
    "issue_node_orchconfig",
    "write_static_manifest",
]

# What each hollow node reports as its machine: 4 CPUs, 16 GiB, 110 pods.
HOLLOW_CAPACITY: Mapping[str, int] = {
    "cpu": 4000,
    "memory": 16 * 2**30,
    "pods": 110,
    "ephemeral-storage": 100 * 2**30,
}
HOLLOW_IMAGE = "orch.local/busybox:1"
STATIC_POD_NAME = "hollow-static"
POD_NETWORK = ipaddress.ip_network("10.64.0.0/10")


class HollowContainerManager(ContainerManager):
    """The container manager without cgroups: capacity from :data:`HOLLOW_CAPACITY`
    (or the caller's), admission and allocatable as usual, no cgroup tree.

    Needs ``--cgroups-per-qos=false``: with it the real manager creates nothing per
    pod either, so the only host access left is the start-up detection skipped here.
    """

    def __init__(self, cfg, capacity: Mapping[str, int] = HOLLOW_CAPACITY) -> None:
        if getattr(cfg, "cgroups_per_qos", True):
            raise ValueError("a hollow node runs with --cgroups-per-qos=false")
        super().__init__(cfg, capacity=capacity)

    def start(self) -> None:
        """No cgroup tree to detect or create; the resource managers (CPU, memory and
        topology, with their default ``none`` policies) are built as on a real node, since
        the device manager joins the topology manager as a hint provider."""
        with self._lock:
            self._start_resource_managers()


class HollowAgentProcess(AgentProcess):
    """The agent process with the node's memory-backed volumes as plain directories
    (a tmpfs per Secret or token volume of thousands of pods would be mounts on the
    host for nothing: no container reads them), and its static pod directory polled
    every ``--file-check-frequency`` instead of watched with inotify (the user's
    inotify instances, 128 by default, are shared with every other process)."""

    def _build_node(self):
        node = super()._build_node()
        node.volumes.tmpfs = False
        for source in node.sources:
            if isinstance(source, FileSource):
                source.inotify = False
        return node


def issue_node_orchconfig(data_dir: str | os.PathLike, server_url: str, node_name: str, path: Path) -> Path:
    """Write an orchconfig at ``path`` with a client certificate for ``node_name``,
    signed by the server's CA (what TLS bootstrap would leave behind)."""
    pki = Pki(str(data_dir))
    ca_cert, ca_key = pki.load_ca()
    key = new_key()
    user = names.NODE_USER_PREFIX + node_name
    cert = sign_leaf(ca_cert, ca_key, key.public_key(), user, [names.GROUP_NODES], client=True)
    with open(pki.ca_cert, "rb") as f:
        ca_pem = f.read()
    doc = connection_config(server_url, ca_pem, user, cert_pem_data=cert_pem(cert), key_pem_data=key_pem(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(doc, fh)
    return path


def write_static_manifest(directory: Path) -> Path:
    """The static pod every hollow node runs (one container, the preloaded image)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{STATIC_POD_NAME}.yaml"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": STATIC_POD_NAME, "namespace": names.NS_SYSTEM},
        "spec": {"containers": [{"name": "main", "image": HOLLOW_IMAGE, "command": ["sleep", "1000000"]}]},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(pod))
    os.replace(tmp, path)
    return path


def open_files_limit() -> int:
    """The hard open-file limit (what each agent may set without privileges it lacks)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1_000_000 if hard == resource.RLIM_INFINITY else hard


def pod_cidr_of(index: int) -> str:
    """Node ``index``'s own /24 of :data:`POD_NETWORK`."""
    subnets = 2 ** (24 - POD_NETWORK.prefixlen)
    if not 0 <= index < subnets:
        raise ValueError(f"hollow node index {index} outside 0..{subnets - 1}")
    base = int(POD_NETWORK.network_address) + (index << 8)
    return f"{ipaddress.ip_address(base)}/24"


class HollowNode:
    """One node agent on its own fake runtime; :meth:`start` returns once it runs."""

    def __init__(
        self, name: str, index: int, work_dir: Path, orchconfig: Path, manifests: Path, extra_flags: tuple[str, ...]
    ) -> None:
        self.name = name
        self.index = index
        self.dir = work_dir
        self.orchconfig = orchconfig
        self.manifests = manifests
        self.extra_flags = extra_flags
        self.fake: FakeRuntime | None = None
        self.process: HollowAgentProcess | None = None
        self.task: asyncio.Task | None = None

    def flags(self) -> list[str]:
        assert self.fake is not None
        return [
            f"--hostname-override={self.name}",
            f"--root-dir={self.dir / 'root'}",
            f"--cert-dir={self.dir / 'pki'}",
            f"--orchconfig={self.orchconfig}",
            f"--container-runtime-endpoint={self.fake.endpoint}",
            f"--pod-manifest-path={self.manifests}",
            "--cgroups-per-qos=false",
            "--enforce-node-allocatable=",
            "--proxy-mode=none",
            "--enable-server=false",
            "--healthz-port=0",
            "--node-ip=127.0.0.1",
            "--oom-score-adj=0",
            "--fail-swap-on=false",
            f"--max-open-files={open_files_limit()}",
            *self.extra_flags,
        ]

    async def start(self) -> None:
        self.fake = FakeRuntime(socket_dir=self.dir / "cri", pod_cidr=pod_cidr_of(self.index), record_calls=0)
        await self.fake.start()
        try:
            cfg = from_argv(self.flags())
            errors = validate(cfg)
        except Exception:
            await self.fake.stop()
            raise
        if errors:
            await self.fake.stop()
            raise ValueError(f"hollow node {self.name}: " + "; ".join(errors))
        self.process = HollowAgentProcess(
            cfg,
            version=__version__,
            hooks=TestHooks(),
            notifier=Notifier({}),
            container_manager=HollowContainerManager(cfg),
            pod_logs_dir=str(self.dir / "pod-logs"),
            handle_signals=False,
        )
        self.task = asyncio.create_task(self.process.run(), name=f"hollow-{self.name}")
        ready = asyncio.create_task(self.process.ready.wait())
        await asyncio.wait({ready, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            raise RuntimeError(f"hollow node {self.name} stopped during start (exit code {self.task.result()})")

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def stop(self) -> int | None:
        code = None
        if self.process is not None and self.task is not None:
            self.process.request_stop("hollow node stopped")
            code = await self.task
        if self.fake is not None:
            await self.fake.stop()
        return code


class HollowNodes:
    """``count`` hollow nodes ``<prefix><first>``, ``<prefix><first+1>``, ... against one server."""

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike,
        server_url: str,
        count: int,
        first: int = 0,
        prefix: str = "hollow-",
        work_dir: str | os.PathLike | None = None,
        extra_flags: tuple[str, ...] = (),
        start_concurrency: int = 8,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.server_url = server_url
        self.own_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="orch-hollow-"))
        self.manifests = self.work_dir / "manifests"
        self.extra_flags = tuple(extra_flags)
        self.start_concurrency = start_concurrency
        self.nodes = [
            HollowNode(
                f"{prefix}{i}",
                i,
                self.work_dir / f"{prefix}{i}",
                self.work_dir / f"{prefix}{i}" / "agent.orchconfig",
                self.manifests,
                self.extra_flags,
            )
            for i in range(first, first + count)
        ]

    async def start(self) -> None:
        write_static_manifest(self.manifests)
        for node in self.nodes:
            issue_node_orchconfig(self.data_dir, self.server_url, node.name, node.orchconfig)
        gate = asyncio.Semaphore(self.start_concurrency)

        async def one(node: HollowNode) -> None:
            async with gate:
                await node.start()

        try:
            await asyncio.gather(*(one(n) for n in self.nodes))
        except BaseException:
            await self.stop()
            raise

    def failed(self) -> list[str]:
        return [n.name for n in self.nodes if n.task is not None and n.task.done()]

    async def stop(self) -> None:
        await asyncio.gather(*(n.stop() for n in self.nodes), return_exceptions=True)
        if self.own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)


async def profile_window(out: str, delay: float, seconds: float) -> None:
    """cProfile the whole process (every node's loops) from ``delay`` s after start for
    ``seconds`` s; the statistics go to ``out`` (pstats format): which loop of the agent
    costs what in the steady state."""
    await asyncio.sleep(delay)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await asyncio.sleep(seconds)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


class ProfileWindows:
    """cProfile windows of this process: SIGUSR1 starts one, SIGUSR2 ends it and writes
    ``<dir>/hollow-<first>-<n>.pstats`` (a benchmark's view of where the agents' CPU goes)."""

    def __init__(self, directory: str, first: int) -> None:
        self.dir = Path(directory)
        self.first = first
        self.count = 0
        self.prof: cProfile.Profile | None = None

    def on(self) -> None:
        if self.prof is None:
            self.prof = cProfile.Profile()
            self.prof.enable()

    def off(self) -> None:
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.disable()
            self.dir.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(str(self.dir / f"hollow-{self.first}-{self.count}.pstats"))
            self.count += 1


async def _main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.profile_dir:
        windows = ProfileWindows(args.profile_dir, args.first)
        loop.add_signal_handler(signal.SIGUSR1, windows.on)
        loop.add_signal_handler(signal.SIGUSR2, windows.off)
    nodes = HollowNodes(
        data_dir=args.data_dir,
        server_url=args.server,
        count=args.nodes,
        first=args.first,
        prefix=args.prefix,
        work_dir=args.work_dir,
        extra_flags=tuple(args.agent_flag),
    )
    t0 = time.monotonic()
    watch = Watch(Path(args.loop_watch)) if args.loop_watch else None
    sampler = watch.start(loop) if watch is not None else None
    try:
        await nodes.start()
        proc = psutil.Process()
        print(
            json.dumps(
                {
                    "ready": len(nodes.nodes),
                    "rss_bytes": proc.memory_info().rss,
                    "start_seconds": round(time.monotonic() - t0, 2),
                    "pid": os.getpid(),
                }
            ),
            flush=True,
        )
        if args.profile:
            profile_task = asyncio.create_task(profile_window(args.profile, args.profile_delay, args.profile_seconds))
        try:
            await asyncio.wait_for(stop.wait(), args.duration or None)
        except asyncio.TimeoutError:
            pass
        if args.profile:
            profile_task.cancel()
            await asyncio.gather(profile_task, return_exceptions=True)
        failed = nodes.failed()
        if failed:
            print(json.dumps({"failed": failed}), flush=True)
        return 1 if failed else 0
    finally:
        await nodes.stop()
        if watch is not None:
            watch.close(sampler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True, help="the API server's data dir (its pki/ca.key signs node certs)")
    ap.add_argument("--server", required=True, help="the API server's URL")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--first", type=int, default=0, help="index of the first node (several processes)")
    ap.add_argument("--prefix", default="hollow-")
    ap.add_argument("--work-dir", default=None, help="per-node root dirs (default: a temporary dir, removed)")
    ap.add_argument("--duration", type=float, default=0, help="seconds to run (default: until SIGTERM)")
    ap.add_argument("--agent-flag", action="append", default=[], help="an extra orch-agent flag for every node")
    ap.add_argument("--log-file", default="", help="the agents' log (default: stderr)")
    ap.add_argument("-v", type=int, default=0, help="the agents' log verbosity")
    ap.add_argument("--profile", default="", help="cProfile a window of the steady state into this file")
    ap.add_argument("--profile-delay", type=float, default=20.0, help="seconds after start-up the window opens")
    ap.add_argument("--profile-seconds", type=float, default=30.0, help="length of the profiled window")
    ap.add_argument("--loop-watch", default="", help="write an event-loop stall report here (tests/bench/loopwatch.py)")
    ap.add_argument(
        "--nice", type=int, default=None, help="run at this nice value (0..19; not inherited from the caller)"
    )
    ap.add_argument("--profile-dir", default="", help="SIGUSR1/SIGUSR2 start and end cProfile windows written here")
    args = ap.parse_args(argv)
    if args.nice is not None:
        if not 0 <= args.nice <= 19:
            ap.error("--nice must be 0..19")
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    if args.log_file:
        Path(args.log_file).parent.mkdir(parents=True, exist_ok=True)
    log_stream = open(args.log_file, "a") if args.log_file else None  # noqa: SIM115 - closed at exit
    agent_logging.configure(verbosity=args.v, stdout=log_stream, stderr=log_stream)
    try:
        return asyncio.run(_main(args))
    finally:
        agent_logging.flush()
        if log_stream is not None:
            log_stream.close()


if __name__ == "__main__":
    sys.exit(main())
