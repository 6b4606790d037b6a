"""Idle cost of the CPU and memory managers (not a test): python tests/bench/bench_resource_managers.py

On a simulated 64-CPU, 2-socket, 2-NUMA-node machine with 30 pods (15 Guaranteed with
exclusive CPUs and NUMA-placed memory, 15 BestEffort), prints:

* the reconciliation pass when nothing changed (what the agent does every
  --cpu-manager-reconcile-period, 10 s by default), as a share of one core at that
  period; target <= 0.01% of a core (the whole agent's idle target is 1%), beside the
  same-run baseline of the none policy;
* the admission of one Guaranteed pod through the topology manager (single-numa-node,
  CPU and memory hints merged), without the two checkpoint writes; target <= 5 ms; and
  with them (each is fsync'd, so that figure is the disk's).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agent.cm.cpumanager import CpuInfo, CpuManager, CpuTopology
from agent.cm.cpumanager import manager as cpu_manager_module
from agent.cm.memorymanager import MemoryManager
from agent.cm.memorymanager import manager as memory_manager_module
from agent.cm.topologymanager import TopologyManager
from agent.config import from_argv

PERIOD_S = 10.0
RECONCILE_TARGET_PCT = 0.01
ADMIT_TARGET_MS = 5.0
GI = 1 << 30


def machine() -> CpuTopology:
    cpus = {}
    for cpu in range(64):
        core = cpu % 32
        socket = core // 16
        cpus[cpu] = CpuInfo(numa=socket, socket=socket, core=core)
    return CpuTopology(cpus)


def pod(uid: str, guaranteed: bool) -> dict:
    res = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}} if guaranteed else {}
    return {"metadata": {"uid": uid, "name": uid}, "spec": {"containers": [{"name": "c", "resources": res}]}}


def timed(fn, n: int) -> float:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)


def admission_ms(topo: CpuTopology, d: str, pods: list[dict]) -> float:
    flags = [f"--root-dir={d}", "--topology-manager-policy=single-numa-node"]
    cfg = from_argv(
        [*flags, "--cpu-manager-policy=static", "--reserved-cpus=0", "--memory-manager-policy=Static"]
        + ["--reserved-memory=0:memory=100Mi"]
    )
    cpu = CpuManager(cfg, topology=topo)
    cpu.start()
    mem = MemoryManager(
        cfg, numa_memory={0: {"memory": 64 * GI}, 1: {"memory": 64 * GI}}, reservation={"memory": 100 << 20}
    )
    mem.start()
    tm = TopologyManager(cfg, topo.numa_nodes())
    tm.add_hint_provider(cpu)
    tm.add_hint_provider(mem)
    times = []
    for p in pods:
        t0 = time.perf_counter()
        assert tm.admit(p).admit
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    topo = machine()
    pods = [pod(f"g{i}", True) for i in range(15)]
    with tempfile.TemporaryDirectory() as d:
        with_writes = admission_ms(topo, f"{d}/a", pods)
        real = cpu_manager_module.write_checkpoint
        cpu_manager_module.write_checkpoint = memory_manager_module.write_checkpoint = lambda path, data: None
        try:
            compute = admission_ms(topo, f"{d}/b", pods)
        finally:
            cpu_manager_module.write_checkpoint = memory_manager_module.write_checkpoint = real
    with tempfile.TemporaryDirectory() as d:
        cpu = CpuManager(
            from_argv([f"--root-dir={d}", "--cpu-manager-policy=static", "--reserved-cpus=0"]), topology=topo
        )
        cpu.start()
        pods = [pod(f"p{i}", i % 2 == 0) for i in range(30)]
        for p in pods:
            cpu.allocate(p, p["spec"]["containers"][0], None)
        running = [(p["metadata"]["uid"], [("c", f"cid-{p['metadata']['uid']}")]) for p in pods]
        for cid, cpuset in cpu.reconcile(running, sources_ready=True):
            cpu.container_created(cid, cpuset)
        static_s = timed(lambda: cpu.reconcile(running, sources_ready=True), 2000)
        none = CpuManager(from_argv([f"--root-dir={d}/none"]))
        none.start()
        none_s = timed(lambda: none.reconcile(running, sources_ready=True), 2000)
    share = static_s / PERIOD_S * 100
    print(f"reconcile, 30 pods, nothing changed: {static_s * 1e6:8.1f} us per pass = {share:.5f}% of a core at 10 s")
    print(f"  target <= {RECONCILE_TARGET_PCT}% ; baseline (none policy, same run): {none_s * 1e6:.1f} us per pass")
    print(f"admission of a Guaranteed pod (single-numa-node, CPU + memory hints): {compute:.3f} ms")
    print(f"  target <= {ADMIT_TARGET_MS} ms ; with the two fsync'd checkpoint writes: {with_writes:.3f} ms")


if __name__ == "__main__":
    main()
