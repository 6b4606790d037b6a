"""Raw CRI figures on the real containerd (not a test): python tests/bench/bench_cri.py

Starts a private containerd (tests/components.py), imports the test images,
and times the CRI calls the agent issues for a pod, through cri.client:

  * RunPodSandbox (pod network via the CNI bridge), CreateContainer +
    StartContainer (busybox `sleep`), their sum ("pod start"), and
    StopPodSandbox + RemovePodSandbox, for N pods one at a time;
  * the same N pods with C calls in flight: time until all run, time until all
    are gone, and the per-call latencies under that load;
  * RunPodSandbox on the host network, for comparison.

These are the "raw" baselines the static-pod benchmark of issue 6 compares
against; `raw_pod_run()` is importable so that benchmark can measure them in
the same run. Options: --pods N (30), --concurrency C (8), --endpoint unix://...
to use a running containerd that already has the images.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cri import api_pb2 as pb
from cri.client import CriClient
from tests.components import Containerd, image_builder

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclasses.dataclass
class RawRun:
    """Per-call latencies (seconds) and wall times of one batch of pods."""

    pods: int
    concurrency: int
    run_sandbox: list[float] = dataclasses.field(default_factory=list)
    create_start: list[float] = dataclasses.field(default_factory=list)
    pod_start: list[float] = dataclasses.field(default_factory=list)
    stop_remove: list[float] = dataclasses.field(default_factory=list)
    all_running: float = 0.0
    all_removed: float = 0.0


def sandbox_config(name: str, cgroup_parent: str, log_root: Path, *, host_network: bool = False) -> pb.PodSandboxConfig:
    uid = secrets.token_hex(8)
    config = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="bench"),
        hostname="" if host_network else name,
        log_directory=str(log_root / f"bench_{name}_{uid}"),
        labels={"orch.io/bench": "cri"},
    )
    config.linux.cgroup_parent = cgroup_parent
    if host_network:
        config.linux.security_context.namespace_options.network = pb.NODE
    return config


def container_config(name: str = "sleep") -> pb.ContainerConfig:
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name),
        image=pb.ImageSpec(image="orch.local/busybox:1"),
        command=["sleep", "3600"],
        log_path=f"{name}/0.log",
    )
    config.linux.security_context.namespace_options.pid = pb.CONTAINER
    return config


async def raw_pod_run(
    cri: CriClient, pods: int, concurrency: int, *, cgroup_parent: str, log_root: Path, prefix: str = "raw"
) -> RawRun:
    """Start `pods` pods (sandbox + one container) with `concurrency` pods in
    flight, wait for all, then stop and remove them the same way."""
    result = RawRun(pods, concurrency)
    gate = asyncio.Semaphore(concurrency)
    sandbox_ids: list[str] = []

    async def start(index: int) -> None:
        async with gate:
            config = sandbox_config(f"{prefix}-{index}", cgroup_parent, log_root)
            t0 = time.perf_counter()
            sandbox_id = await cri.run_pod_sandbox(config)
            sandbox_ids.append(sandbox_id)
            t1 = time.perf_counter()
            container_id = await cri.create_container(sandbox_id, container_config(), config)
            await cri.start_container(container_id)
            t2 = time.perf_counter()
            result.run_sandbox.append(t1 - t0)
            result.create_start.append(t2 - t1)
            result.pod_start.append(t2 - t0)

    async def stop(sandbox_id: str) -> None:
        async with gate:
            t0 = time.perf_counter()
            await cri.stop_pod_sandbox(sandbox_id)
            await cri.remove_pod_sandbox(sandbox_id)
            result.stop_remove.append(time.perf_counter() - t0)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(start(i) for i in range(pods)))
        result.all_running = time.perf_counter() - t0
    finally:
        t0 = time.perf_counter()
        await asyncio.gather(*(stop(sandbox_id) for sandbox_id in sandbox_ids))
        result.all_removed = time.perf_counter() - t0
    return result


async def host_network_sandboxes(cri: CriClient, count: int, *, cgroup_parent: str, log_root: Path) -> list[float]:
    times = []
    for index in range(count):
        config = sandbox_config(f"host-{index}", cgroup_parent, log_root, host_network=True)
        t0 = time.perf_counter()
        sandbox_id = await cri.run_pod_sandbox(config)
        times.append(time.perf_counter() - t0)
        await cri.stop_pod_sandbox(sandbox_id)
        await cri.remove_pod_sandbox(sandbox_id)
    return times


def remove_cgroup_tree(cgroup_parent: str) -> None:
    """runc creates the parent in every hierarchy and never removes it."""
    top = cgroup_parent.strip("/")
    v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
    for root in [CGROUP_ROOT] if v2 else [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]:
        base = root / top
        if base.is_dir():
            for directory in sorted(
                (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ) + [base]:
                try:
                    directory.rmdir()
                except OSError:
                    pass


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (
        f"median {statistics.median(ordered) * 1000:6.1f} ms   p90 {p90 * 1000:6.1f} ms   "
        f"max {ordered[-1] * 1000:6.1f} ms   (n={len(ordered)})"
    )


def report(title: str, run: RawRun) -> None:
    print(f"\n{title}: {run.pods} pods, {run.concurrency} in flight")
    print(f"  RunPodSandbox (pod network)      {_ms(run.run_sandbox)}")
    print(f"  CreateContainer+StartContainer   {_ms(run.create_start)}")
    print(f"  pod start (sum of the above)     {_ms(run.pod_start)}")
    print(f"  StopPodSandbox+RemovePodSandbox  {_ms(run.stop_remove)}")
    print(f"  all {run.pods} running after {run.all_running:6.2f} s; all removed after {run.all_removed:6.2f} s")


async def bench(endpoint: str, pods: int, concurrency: int) -> None:
    cgroup_parent = f"/orch-bench-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="orch-bench-cri-") as tmp:
        log_root = Path(tmp)
        try:
            async with CriClient(endpoint, request_timeout=60) as cri:
                version = await cri.version()
                print(f"runtime: {version.runtime_name} {version.runtime_version}")
                # Warm-up: first sandbox pays for snapshot and CNI set-up.
                await raw_pod_run(cri, 2, 1, cgroup_parent=cgroup_parent, log_root=log_root, prefix="warm")
                sequential = await raw_pod_run(
                    cri, pods, 1, cgroup_parent=cgroup_parent, log_root=log_root, prefix="seq"
                )
                report("sequential", sequential)
                concurrent = await raw_pod_run(
                    cri, pods, concurrency, cgroup_parent=cgroup_parent, log_root=log_root, prefix="conc"
                )
                report("concurrent", concurrent)
                host = await host_network_sandboxes(cri, 10, cgroup_parent=cgroup_parent, log_root=log_root)
                print(f"\nRunPodSandbox (host network)       {_ms(host)}")
                left = await cri.list_pod_sandbox(label_selector={"orch.io/bench": "cri"})
                assert not left, f"{len(left)} bench sandboxes left"
        finally:
            remove_cgroup_tree(cgroup_parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--endpoint", default=None, help="a running containerd's CRI endpoint (images must be imported)"
    )
    args = parser.parse_args()
    if args.endpoint:
        asyncio.run(bench(args.endpoint, args.pods, args.concurrency))
        return
    with Containerd() as containerd:
        image_builder().ensure_images(containerd.address)
        asyncio.run(bench(containerd.endpoint, args.pods, args.concurrency))


if __name__ == "__main__":
    main()
