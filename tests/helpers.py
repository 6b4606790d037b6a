"""Small helpers the test files share: one of each, so they behave the same everywhere."""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

from agent.cm import AdmitResult

T = TypeVar("T")


def uniq(prefix: str = "t") -> str:
    """A name no other test uses: ``prefix`` and 8 random hex digits (a valid DNS label)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", interval: float = 0.05) -> T:
    """``predicate()`` until it returns something truthy, which is returned; after
    ``timeout`` seconds an AssertionError naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")
        time.sleep(interval)


def console_script(name: str) -> Path:
    """The project's console script ``name`` (``orch-apiserver``, ``orch-agent``): the one
    installed beside the running interpreter (its virtual environment), else the one on PATH.
    The path beside the interpreter is returned when neither exists, for the skip message."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    return Path(found) if found is not None else beside


def require_binary(name: str, package: str) -> str:
    """The path of the executable ``name``, or a skip naming the Debian package that has it."""
    import pytest

    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not on PATH (Debian package {package})")
    return found


__all__: list[Any] = ["console_script", "require_binary", "uniq", "wait_for"]


class FakeCgroups:
    """One stand-in for the agent's container manager (``agent.cm``), with every facet the
    tests use: node capacity and allocatable (node status); admission and the pod cgroup
    lifecycle, recorded (the pod pipeline; ``runtime``: the fake CRI runtime, to note how
    many sandboxes it had started when a pod's cgroup was made; ``refuse``: pod name ->
    the AdmitResult to answer); and per-pod cgroup directories on a file tree under
    ``root`` (the stats summary; ``write`` fills one in)."""

    DEFAULT_CAPACITY = {
        "cpu": 4000,
        "memory": 8 * 2**30,
        "pods": 110,
        "ephemeral-storage": 100 * 2**30,
        "hugepages-2Mi": 0,
        "pid": 4194304,
    }
    DEFAULT_ALLOCATABLE = {
        "cpu": 3900,
        "memory": 8 * 2**30 - 100 * 2**20,
        "pods": 110,
        "ephemeral-storage": 90 * 2**30,
        "hugepages-2Mi": 0,
    }

    def __init__(
        self,
        root: Path | None = None,
        *,
        runtime: Any = None,
        refuse: dict[str, Any] | None = None,
        capacity: dict[str, int] | None = None,
        allocatable: dict[str, int] | None = None,
    ) -> None:
        self.root = root
        self.runtime = runtime
        self.refuse = refuse or {}
        self.cap = capacity or dict(self.DEFAULT_CAPACITY)
        self.alloc = allocatable or dict(self.DEFAULT_ALLOCATABLE)
        self.ensured: list[tuple[str, int]] = []  # (uid, RunPodSandbox calls at that moment)
        self.removed: list[str] = []
        self.admitted: list[str] = []
        self.qos_updates = 0

    # --- node status ---------------------------------------------------------------------------
    def capacity(self) -> dict[str, int]:
        return dict(self.cap)

    def allocatable(self) -> dict[str, int]:
        return dict(self.alloc)

    # --- the pod pipeline ----------------------------------------------------------------------
    def ensure_pod(self, pod: dict) -> str:
        calls = self.runtime.call_counts["RunPodSandbox"] if self.runtime is not None else 0
        self.ensured.append((pod["metadata"]["uid"], calls))
        return ""

    def remove_pod(self, uid: str) -> None:
        self.removed.append(uid)

    def admit(self, pod: dict, active: list[dict]) -> AdmitResult:
        name = pod["metadata"]["name"]
        if name in self.refuse:
            return self.refuse[name]
        self.admitted.append(name)
        return AdmitResult(True)

    def pod_uids(self) -> list[str]:
        return []

    def update_qos(self, pods: list[dict]) -> None:
        self.qos_updates += 1

    # --- cgroup files for the stats summary (cgroup v1 layout) ---------------------------------
    @property
    def per_qos(self) -> bool:
        return self.root is not None

    def _dirs(self, rel: str) -> dict[str, str]:
        assert self.root is not None, "FakeCgroups(root=...) for cgroup files"
        return {c: str(self.root / c / rel) for c in ("cpuacct", "memory", "pids")}

    def write(self, rel: str, cpu_ns: int, usage: int, inactive_file: int, rss: int, pids: int) -> None:
        d = self._dirs(rel)
        for path in d.values():
            Path(path).mkdir(parents=True, exist_ok=True)
        Path(d["cpuacct"], "cpuacct.usage").write_text(f"{cpu_ns}\n")
        Path(d["memory"], "memory.usage_in_bytes").write_text(f"{usage}\n")
        Path(d["memory"], "memory.limit_in_bytes").write_text("9223372036854771712\n")
        Path(d["memory"], "memory.stat").write_text(
            f"cache 5\nrss {rss}\ntotal_rss {rss}\ntotal_inactive_file {inactive_file}\ntotal_pgfault 7\ntotal_pgmajfault 1\n"
        )
        Path(d["pids"], "pids.current").write_text(f"{pids}\n")

    def pod_cgroup_dirs(self, uid: str) -> dict[str, str]:
        return self._dirs(f"orchpods/pod{uid}")

    def qos_cgroup_dirs(self, qos: str) -> dict[str, str]:
        return self._dirs("orchpods")
