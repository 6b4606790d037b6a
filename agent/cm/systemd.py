"""The systemd cgroup driver: slice names and transient units over D-Bus.

When systemd is the init system it owns the cgroup tree; a process that makes
cgroups behind its back sees them reset on the next ``daemon-reload``. So with
``--cgroup-driver=systemd`` every agent-made cgroup is a transient *slice* unit
that systemd creates, with the limits as unit properties, and the agent then
also writes the same limits into the files (as upstream's runc library does,
so the values are in force even where systemd lacks a property).

Names follow upstream: the components ``("orchpods", "burstable", "pod<uid>")``
become the unit ``orchpods-burstable-pod<uid>.slice`` (a ``-`` inside a
component is written ``_``, since systemd reads ``-`` as nesting), which lives
at ``/orchpods.slice/orchpods-burstable.slice/orchpods-burstable-pod<uid>.slice``
in every hierarchy.

D-Bus is driven through ``busctl call org.freedesktop.systemd1 ...``
(``StartTransientUnit``, ``SetUnitProperties``, ``StopUnit``): it ships with
systemd, speaks the real API, and keeps the agent free of a D-Bus library. The
argument vectors are built by pure functions and the runner is injectable, so
both are unit-tested on hosts without systemd.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

from apiserver_min.api import names

from .cgroupfs import (
    UINT64_MAX,
    CgroupError,
    CgroupFs,
    CgroupfsDriver,
    CgroupName,
    ResourceConfig,
    shares_to_weight,
)

__all__ = [
    "SYSTEMD_RUN_DIR",
    "escape",
    "unescape",
    "slice_name",
    "expand_slice",
    "parse_slice",
    "to_systemd",
    "resource_properties",
    "slice_properties",
    "encode_properties",
    "BusResult",
    "SystemdBus",
    "SystemdDriver",
    "check_systemd",
]

# sd_booted(3): systemd is PID 1 exactly when this directory exists.
SYSTEMD_RUN_DIR = "/run/systemd/system"
SLICE_SUFFIX = ".slice"
ROOT_SLICE = "-.slice"

_DEST = "org.freedesktop.systemd1"
_PATH = "/org/freedesktop/systemd1"
_IFACE = "org.freedesktop.systemd1.Manager"


# --- names ---------------------------------------------------------------------------


def escape(part: str) -> str:
    """A name component as systemd needs it: ``-`` means nesting, so it becomes ``_``."""
    return part.replace("-", "_")


def unescape(part: str) -> str:
    return part.replace("_", "-")


def slice_name(cg: CgroupName) -> str:
    """``("orchpods", "burstable", "pod1-2")`` -> ``orchpods-burstable-pod1_2.slice``."""
    if not cg:
        return ROOT_SLICE
    return "-".join(escape(p) for p in cg) + SLICE_SUFFIX


def expand_slice(unit: str) -> str:
    """``a-b-c.slice`` -> ``/a.slice/a-b.slice/a-b-c.slice`` (systemd's nesting of slices)."""
    if not unit.endswith(SLICE_SUFFIX) or "/" in unit:
        raise CgroupError(f"invalid slice name {unit!r}: expected <name>.slice without '/'")
    if unit == ROOT_SLICE:
        return "/"
    stem = unit[: -len(SLICE_SUFFIX)]
    if not stem or stem.startswith("-") or stem.endswith("-") or "--" in stem:
        raise CgroupError(f"invalid slice name {unit!r}: empty component between '-'")
    out, prefix = [], ""
    for comp in stem.split("-"):
        prefix = f"{prefix}-{comp}" if prefix else comp
        out.append(prefix + SLICE_SUFFIX)
    return "/" + "/".join(out)


def parse_slice(text: str) -> CgroupName:
    """A slice name or path (``/system.slice``, ``a-b.slice``) as components, upstream's way."""
    base = os.path.basename(text.rstrip("/")) if text.strip("/") else ""
    if not base or base == ROOT_SLICE:
        return ()
    if base.endswith(SLICE_SUFFIX):
        base = base[: -len(SLICE_SUFFIX)]
    return tuple(unescape(p) for p in base.split("-"))


def to_systemd(cg: CgroupName) -> str:
    """The directory of a cgroup under each hierarchy: ``/orchpods.slice/orchpods-burstable.slice``."""
    return expand_slice(slice_name(cg))


# --- unit properties -----------------------------------------------------------------

# (name, D-Bus signature, value): value is str, bool, int or a list for "as"/"au".
Property = tuple[str, str, object]


def _cpu_quota_per_sec(quota: int, period: int) -> int:
    """systemd keeps quota as µs per second at 1% granularity: round up to 10 ms."""
    if quota <= 0:
        return UINT64_MAX
    per_sec = quota * 1_000_000 // period
    if per_sec % 10_000:
        per_sec = (per_sec // 10_000 + 1) * 10_000
    return per_sec


def resource_properties(res: ResourceConfig, cgroup_version: int) -> list[Property]:
    """Unit properties for limits, named as systemd spells them on cgroup v1 and v2."""
    props: list[Property] = []
    if res.cpu_shares:
        if cgroup_version == 2:
            props.append(("CPUWeight", "t", shares_to_weight(res.cpu_shares)))
        else:
            props.append(("CPUShares", "t", res.cpu_shares))
    if res.cpu_quota is not None and res.cpu_quota != 0:
        period = res.cpu_period or 100_000
        props.append(("CPUQuotaPerSecUSec", "t", _cpu_quota_per_sec(res.cpu_quota, period)))
        if res.cpu_period:
            props.append(("CPUQuotaPeriodUSec", "t", res.cpu_period))
    if res.memory is not None and res.memory != 0:
        value = UINT64_MAX if res.memory < 0 else res.memory
        props.append(("MemoryMax" if cgroup_version == 2 else "MemoryLimit", "t", value))
    if res.pids is not None and res.pids != 0:
        props.append(("TasksMax", "t", UINT64_MAX if res.pids < 0 else res.pids))
    return props


def slice_properties(cg: CgroupName, res: ResourceConfig, cgroup_version: int) -> list[Property]:
    """Everything StartTransientUnit gets for the slice of ``cg``.

    The parent slice is a ``Wants=`` (how slices nest), accounting is on for
    every controller the agent reads, and default dependencies are off so the
    slice does not get ordered against shutdown targets.
    """
    unit = slice_name(cg)
    props: list[Property] = [("Description", "s", f"{names.AGENT_NAME} {unit}")]
    parent = slice_name(cg[:-1])
    if parent != ROOT_SLICE:
        props.append(("Wants", "as", [parent]))
    props += [
        ("MemoryAccounting", "b", True),
        ("CPUAccounting", "b", True),
        ("IOAccounting" if cgroup_version == 2 else "BlockIOAccounting", "b", True),
        ("TasksAccounting", "b", True),
        ("DefaultDependencies", "b", False),
    ]
    return props + resource_properties(res, cgroup_version)


def encode_properties(props: Sequence[Property]) -> list[str]:
    """busctl's text form of an ``a(sv)``: the count, then name, signature, value(s) each."""
    out = [str(len(props))]
    for name, sig, value in props:
        out += [name, sig]
        if sig.startswith("a"):
            items = list(value)  # type: ignore[arg-type]
            out.append(str(len(items)))
            out += [str(v) for v in items]
        elif sig == "b":
            out.append("true" if value else "false")
        else:
            out.append(str(value))
    return out


# --- the bus -----------------------------------------------------------------------


@dataclass(frozen=True)
class BusResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


Runner = Callable[[list[str]], BusResult]


def _run(argv: list[str], timeout: float) -> BusResult:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise CgroupError(f"{argv[0]} not found: the systemd cgroup driver needs busctl (part of systemd)") from None
    except subprocess.TimeoutExpired:
        raise CgroupError(f"{' '.join(argv[:6])} ...: no answer from systemd within {timeout:g}s") from None
    return BusResult(p.returncode, p.stdout, p.stderr)


class SystemdBus:
    """systemd's manager API through ``busctl call`` (argv builders are public for tests)."""

    def __init__(
        self, *, cgroup_version: int, runner: Runner | None = None, busctl: str = "busctl", timeout: float = 30.0
    ) -> None:
        self.cgroup_version = cgroup_version
        self.busctl = busctl
        self.timeout = timeout
        self._runner = runner or (lambda argv: _run(argv, timeout + 5))

    def _call(self, method: str, signature: str, *args: str) -> list[str]:
        return [self.busctl, "call", f"--timeout={self.timeout:g}", _DEST, _PATH, _IFACE, method, signature, *args]

    def start_transient_unit_argv(self, unit: str, props: Sequence[Property]) -> list[str]:
        # "replace": a queued job for the same unit is replaced; no aux units ("0").
        return self._call("StartTransientUnit", "ssa(sv)a(sa(sv))", unit, "replace", *encode_properties(props), "0")

    def set_unit_properties_argv(self, unit: str, props: Sequence[Property]) -> list[str]:
        # runtime=true: the change lasts until reboot, like the transient unit itself.
        return self._call("SetUnitProperties", "sba(sv)", unit, "true", *encode_properties(props))

    def stop_unit_argv(self, unit: str) -> list[str]:
        return self._call("StopUnit", "ss", unit, "replace")

    def _check(self, argv: list[str], result: BusResult, what: str) -> None:
        if result.returncode != 0:
            why = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
            raise CgroupError(f"systemd: {what} failed: {why}")

    def ensure_slice(self, cg: CgroupName, res: ResourceConfig) -> None:
        """Start the transient slice, or update its properties when it exists already."""
        unit = slice_name(cg)
        argv = self.start_transient_unit_argv(unit, slice_properties(cg, res, self.cgroup_version))
        result = self._runner(argv)
        if result.returncode != 0 and "already exists" in (result.stderr + result.stdout):
            self.set_properties(cg, res)
            return
        self._check(argv, result, f"StartTransientUnit {unit}")

    def set_properties(self, cg: CgroupName, res: ResourceConfig) -> None:
        unit = slice_name(cg)
        props = resource_properties(res, self.cgroup_version)
        if not props:
            return
        argv = self.set_unit_properties_argv(unit, props)
        self._check(argv, self._runner(argv), f"SetUnitProperties {unit}")

    def stop(self, cg: CgroupName) -> None:
        unit = slice_name(cg)
        argv = self.stop_unit_argv(unit)
        result = self._runner(argv)
        text = result.stderr + result.stdout
        if result.returncode != 0 and ("not loaded" in text or "NoSuchUnit" in text):
            return  # already gone
        self._check(argv, result, f"StopUnit {unit}")


def check_systemd(run_dir: str = SYSTEMD_RUN_DIR, busctl: str = "busctl") -> None:
    """Refuse the systemd driver where systemd is not the init system."""
    if not os.path.isdir(run_dir):
        raise CgroupError(
            f'cgroup driver "systemd" (--cgroup-driver, cgroupDriver) needs systemd as the init '
            f"system, but {run_dir} does not exist on this host (systemd is not PID 1); use "
            f"--cgroup-driver=cgroupfs and configure the container runtime to match"
        )
    if shutil.which(busctl) is None:
        raise CgroupError(
            f'cgroup driver "systemd" needs {busctl} (from systemd) on PATH to '
            "create slices over D-Bus; it was not found"
        )


class SystemdDriver(CgroupfsDriver):
    """The ``systemd`` driver: cgroups are transient slices; files are written as well."""

    name = "systemd"

    def __init__(self, fs: CgroupFs, bus: SystemdBus | None = None, *, run_dir: str = SYSTEMD_RUN_DIR) -> None:
        super().__init__(fs)
        self.bus = bus or SystemdBus(cgroup_version=fs.layout.version)
        self.run_dir = run_dir

    @staticmethod
    def parse(text: str) -> CgroupName:  # type: ignore[override]
        return parse_slice(text)

    @staticmethod
    def fs_name(cg: CgroupName) -> str:  # type: ignore[override]
        return to_systemd(cg)

    @staticmethod
    def runtime_name_of(cg: CgroupName) -> str:  # type: ignore[override]
        # The runtime's systemd driver takes the slice unit; it uses only the
        # last element of a path anyway.
        return slice_name(cg)

    def rel(self, cg: CgroupName) -> str:
        return to_systemd(cg).strip("/")

    def child_name(self, parent: CgroupName, dirname: str) -> str | None:
        if not dirname.endswith(SLICE_SUFFIX):
            return None  # scopes of containers, not sub-cgroups the agent made
        comps = parse_slice(dirname)
        if comps[:-1] != parent:
            return None
        return comps[-1]

    def create(self, cg: CgroupName, res: ResourceConfig) -> None:
        self.bus.ensure_slice(cg, res)
        # systemd made the directories where it manages a controller; make the
        # rest (and all of them where nothing was started) before writing.
        self.fs.create(self.rel(cg))
        self.fs.update(self.rel(cg), res)

    def update(self, cg: CgroupName, res: ResourceConfig) -> None:
        self.bus.set_properties(cg, res)
        self.fs.update(self.rel(cg), res)

    def destroy(self, cg: CgroupName) -> bool:
        rel = self.rel(cg)
        present = any(os.path.isdir(d) for d in self.fs.dirs(rel).values())
        if present:
            self.fs.kill(rel)  # upstream kills the pod's processes before stopping the unit
        self.bus.stop(cg)
        return self.fs.remove(rel) or present

    def check(self) -> None:
        check_systemd(self.run_dir, self.bus.busctl)
