"""cgroup filesystems (v1, hybrid, v2) and the cgroupfs driver.

The node agent writes pod and QoS limits itself, straight into the cgroup
filesystem, as upstream does through its cgroup manager. This module knows
three things:

* the arithmetic that turns millicores into ``cpu.shares`` / ``cpu.weight`` and
  CFS quota, exactly as upstream rounds it (the runtime and the agent must agree
  to the unit, and operators compare the files with upstream nodes);
* where the hierarchies are (:func:`detect_layout`): cgroup v2 when the root
  itself is a ``cgroup2`` mount, otherwise one v1 mount per controller (plus
  the empty v2 ``unified`` hierarchy of a hybrid host, where runc also places
  processes and which therefore must be cleaned too);
* how to create, configure, list and remove a cgroup in every hierarchy
  (:class:`CgroupV1Fs`, :class:`CgroupV2Fs`), and how the cgroupfs driver names
  cgroups (:class:`CgroupfsDriver`: the name is the path).

Everything takes the sysfs root as a parameter, so the same code runs against a
plain directory tree in unit tests. Where a real kernel creates a file by
itself and a plain tree cannot, the fallback follows the kernel's rule and says
so at the spot.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Mapping

__all__ = [
    "CgroupError",
    "MIN_SHARES",
    "MAX_SHARES",
    "SHARES_PER_CPU",
    "QUOTA_PERIOD_US",
    "MIN_QUOTA_PERIOD_US",
    "HUGEPAGE_UNBOUNDED",
    "CgroupName",
    "milli_cpu_to_shares",
    "milli_cpu_to_quota",
    "shares_to_weight",
    "cpu_max_value",
    "hugepage_cgroup_size",
    "hugepage_sizes",
    "ResourceConfig",
    "Hierarchy",
    "CgroupLayout",
    "detect_layout",
    "CgroupFs",
    "CgroupV1Fs",
    "CgroupV2Fs",
    "CgroupfsDriver",
    "fs_for_layout",
]

log = logging.getLogger(__name__)


class CgroupError(RuntimeError):
    """The cgroup setup cannot be used or changed; the message tells an operator what and where."""


# Upstream's constants (pkg/kubelet/cm helpers).
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD_US = 100_000
MIN_QUOTA_PERIOD_US = 1000
# QoS tiers get an effectively unlimited hugetlb limit, as upstream's 1 << 62.
HUGEPAGE_UNBOUNDED = 1 << 62
# systemd's and the kernel's "no limit" for 64-bit values.
UINT64_MAX = (1 << 64) - 1

# A cgroup name as path components under the sysfs root, driver-independent:
# ("orchpods", "burstable", "pod<uid>").
CgroupName = tuple[str, ...]

_V1_CONTROLLERS = frozenset(
    {
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "devices",
        "freezer",
        "net_cls",
        "net_prio",
        "perf_event",
        "blkio",
        "pids",
        "hugetlb",
        "rdma",
        "misc",
    }
)
# Controllers whose hierarchy must hold a cgroup before the agent calls it
# present (upstream's list for Validate/Exists); hugetlb only when mounted.
_NEEDED_V1 = ("cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb")
# v2 controllers the agent enables down its subtree; it needs cpu, memory, pids.
_V2_WANTED = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc")
_V2_REQUIRED = ("cpu", "memory", "pids")


# --- arithmetic ------------------------------------------------------------------


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a cpu request: milli*1024/1000 clamped to [2, 262144]; 0 -> 2.

    Zero maps to the minimum rather than the kernel default (1024) so that a
    pod without requests really gets the least weight.
    """
    if milli_cpu <= 0:
        return MIN_SHARES
    shares = (milli_cpu * SHARES_PER_CPU) // MILLI_CPU_TO_CPU
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def milli_cpu_to_quota(milli_cpu: int, period_us: int) -> int:
    """CFS quota (µs per period) for a cpu limit; at least 1 ms; 0 when there is no limit."""
    if milli_cpu <= 0:
        return 0
    return max(MIN_QUOTA_PERIOD_US, (milli_cpu * period_us) // MILLI_CPU_TO_CPU)


def shares_to_weight(shares: int) -> int:
    """cgroup v2 cpu.weight (1..10000) for a v1 cpu.shares value (2..262144)."""
    if shares <= 0:
        return 0
    shares = max(MIN_SHARES, min(MAX_SHARES, shares))
    return 1 + ((shares - 2) * 9999) // 262142


def cpu_max_value(quota_us: int, period_us: int) -> str:
    """cgroup v2 cpu.max: ``"<quota> <period>"``, ``"max <period>"`` when unlimited."""
    return f"{'max' if quota_us is None or quota_us < 0 else quota_us} {period_us}"


def hugepage_cgroup_size(size_bytes: int) -> str:
    """The page-size spelling of hugetlb file names: 2097152 -> ``2MB``, 1 GiB -> ``1GB``."""
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    value, i = size_bytes, 0
    while value >= 1024 and value % 1024 == 0 and i < len(units) - 1:
        value //= 1024
        i += 1
    return f"{value}{units[i]}"


def hugepage_sizes(hugepages_dir: str = "/sys/kernel/mm/hugepages") -> dict[int, int]:
    """Page size in bytes -> configured page count, from ``hugepages-<n>kB`` directories."""
    out: dict[int, int] = {}
    try:
        entries = os.listdir(hugepages_dir)
    except OSError:
        return out
    for entry in entries:
        if not (entry.startswith("hugepages-") and entry.endswith("kB")):
            continue
        try:
            size = int(entry[len("hugepages-") : -2]) * 1024
        except ValueError:
            continue
        count = 0
        try:
            with open(os.path.join(hugepages_dir, entry, "nr_hugepages")) as f:
                count = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pass
        out[size] = count
    return out


# --- what to write -----------------------------------------------------------------


@dataclass(frozen=True)
class ResourceConfig:
    """Limits for one cgroup; ``None`` leaves a setting as it is.

    ``cpu_quota`` is µs per ``cpu_period`` (-1 unlimited); ``memory`` and
    ``pids`` use -1 for unlimited. ``hugepages`` maps page size (bytes) to a
    limit (bytes); when given, every other page size the kernel offers is set to
    0, as upstream does, so a pod cannot use huge pages it did not request.
    ``cpuset_cpus``/``cpuset_mems`` are kernel lists (``0-3,8``) for cpuset.cpus and
    cpuset.mems (the CPU and memory managers' placement).
    """

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory: int | None = None
    pids: int | None = None
    hugepages: Mapping[int, int] | None = None
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None


# --- layout ------------------------------------------------------------------------


@dataclass(frozen=True)
class Hierarchy:
    """One mounted hierarchy: its directory and the controllers bound to it."""

    key: str  # "cpu", "cpu,cpuacct", "systemd", "unified"
    mountpoint: str
    controllers: frozenset[str] = field(default_factory=frozenset)
    v2: bool = False


@dataclass(frozen=True)
class CgroupLayout:
    sysfs: str
    version: int  # 1 (legacy or hybrid) or 2 (unified)
    hierarchies: tuple[Hierarchy, ...]
    # True when found from a plain directory tree's shape rather than the mount
    # table: files then behave like ordinary files, and the few places where
    # the kernel acts by itself are emulated (see CgroupV2Fs, CgroupFs.remove).
    emulated: bool = False

    def mount_for(self, controller: str) -> str | None:
        for h in self.hierarchies:
            if controller in h.controllers and not (self.version == 1 and h.v2):
                return h.mountpoint
        return None

    def controller_mounts(self) -> dict[str, str]:
        """Controller (or ``systemd``/``unified``) -> mountpoint, one entry per name."""
        out: dict[str, str] = {}
        for h in self.hierarchies:
            if h.v2:
                out["unified"] = h.mountpoint
            else:
                for c in sorted(h.controllers):
                    out[c] = h.mountpoint
        return out

    @property
    def hybrid(self) -> bool:
        return self.version == 1 and any(h.v2 for h in self.hierarchies)


def _unescape_mount(s: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _parse_mountinfo(text: str) -> list[tuple[str, str, str]]:
    """(mountpoint, fstype, super options) of every line."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if " - " not in line or len(parts) < 7:
            continue
        sep = parts.index("-")
        if sep + 3 > len(parts):
            continue
        mounts.append((_unescape_mount(parts[4]), parts[sep + 1], parts[sep + 3]))
    return mounts


def _layout_from_mounts(sysfs: str, mounts: list[tuple[str, str, str]]) -> CgroupLayout | None:
    root = os.path.normpath(sysfs)
    under = [
        (mp, fs, opts)
        for mp, fs, opts in mounts
        if os.path.normpath(mp) == root or os.path.normpath(mp).startswith(root + os.sep)
    ]
    # The last mount on a path wins (a later mount hides an earlier one).
    by_mp: dict[str, tuple[str, str]] = {}
    for mp, fs, opts in under:
        by_mp[os.path.normpath(mp)] = (fs, opts)
    if by_mp.get(root, ("", ""))[0] == "cgroup2":
        return CgroupLayout(sysfs, 2, (Hierarchy("unified", root, _v2_controllers(root), True),))
    hierarchies = []
    for mp, (fs, opts) in sorted(by_mp.items()):
        if fs == "cgroup":
            ctrls = set()
            for o in opts.split(","):
                if o in _V1_CONTROLLERS:
                    ctrls.add(o)
                elif o.startswith("name="):
                    ctrls.add(o[len("name=") :])
            if ctrls:
                hierarchies.append(Hierarchy(",".join(sorted(ctrls)), mp, frozenset(ctrls)))
        elif fs == "cgroup2" and mp != root:
            hierarchies.append(Hierarchy("unified", mp, frozenset(), True))
    if not any(not h.v2 for h in hierarchies):
        return None
    return CgroupLayout(sysfs, 1, tuple(hierarchies))


def _v2_controllers(path: str) -> frozenset[str]:
    try:
        with open(os.path.join(path, "cgroup.controllers")) as f:
            return frozenset(f.read().split())
    except OSError:
        return frozenset()


def _layout_from_tree(sysfs: str) -> CgroupLayout | None:
    """A plain directory tree laid out like the kernel's (unit tests, chroots).

    v2 when the root has ``cgroup.controllers``; otherwise every subdirectory
    with ``cgroup.procs`` is a v1 hierarchy named after its controllers
    (``cpu,cpuacct``), and one with ``cgroup.controllers`` is the unified one.
    """
    root = os.path.normpath(sysfs)
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return CgroupLayout(sysfs, 2, (Hierarchy("unified", root, _v2_controllers(root), True),), emulated=True)
    hierarchies = []
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    for entry in entries:
        mp = os.path.join(root, entry)
        if os.path.islink(mp) or not os.path.isdir(mp):
            continue  # "cpu" -> "cpu,cpuacct" symlinks name the same hierarchy
        if os.path.isfile(os.path.join(mp, "cgroup.controllers")):
            hierarchies.append(Hierarchy("unified", mp, frozenset(), True))
        elif os.path.isfile(os.path.join(mp, "cgroup.procs")):
            ctrls = frozenset(c[len("name=") :] if c.startswith("name=") else c for c in entry.split(","))
            hierarchies.append(Hierarchy(",".join(sorted(ctrls)), mp, ctrls))
    if not any(not h.v2 for h in hierarchies):
        return None
    return CgroupLayout(sysfs, 1, tuple(hierarchies), emulated=True)


def detect_layout(sysfs: str = "/sys/fs/cgroup", *, mountinfo: str = "/proc/self/mountinfo") -> CgroupLayout:
    """Find the cgroup hierarchies under ``sysfs``: v2 when it is a cgroup2 mount, else v1.

    The mount table decides; when it has no cgroup mount under ``sysfs`` (a
    directory tree standing in for one), the tree's own shape decides.
    """
    try:
        with open(mountinfo) as f:
            mounts = _parse_mountinfo(f.read())
    except OSError:
        mounts = []
    layout = _layout_from_mounts(sysfs, mounts) or _layout_from_tree(sysfs)
    if layout is None:
        raise CgroupError(
            f"no cgroup filesystem found at {sysfs}: it is neither a cgroup2 mount "
            "nor a directory holding cgroup v1 controller mounts (check `mount`)"
        )
    return layout


# --- file helpers ------------------------------------------------------------------


def _write(path: str, value: object) -> None:
    text = str(value)
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise CgroupError(f"cannot write {text!r} to {path}: {exc.strerror or exc}") from None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _read_pids(path: str) -> set[int]:
    try:
        with open(path) as f:
            return {int(x) for x in f.read().split()}
    except (OSError, ValueError):
        return set()


# --- the filesystems ---------------------------------------------------------------


class CgroupFs:
    """Operations on one relative cgroup path (``orchpods/burstable/pod<uid>``) in every hierarchy."""

    version = 0

    def __init__(self, layout: CgroupLayout, *, hugepages_dir: str = "/sys/kernel/mm/hugepages") -> None:
        self.layout = layout
        self.hugepages_dir = hugepages_dir

    # paths

    def dirs(self, rel: str) -> dict[str, str]:
        """Controller (or ``unified``/``systemd``) -> absolute directory of ``rel``."""
        rel = rel.strip("/")
        return {k: os.path.join(mp, rel) if rel else mp for k, mp in self.layout.controller_mounts().items()}

    def _unique_dirs(self, rel: str) -> list[str]:
        seen: list[str] = []
        for d in self.dirs(rel).values():
            if d not in seen:
                seen.append(d)
        return seen

    def needed(self) -> tuple[str, ...]:
        raise NotImplementedError

    def missing(self, rel: str) -> dict[str, str]:
        """Needed hierarchies where ``rel`` does not exist: key -> directory."""
        dirs = self.dirs(rel)
        return {k: dirs[k] for k in self.needed() if k in dirs and not os.path.isdir(dirs[k])}

    def exists(self, rel: str) -> bool:
        return not self.missing(rel)

    def children(self, rel: str) -> set[str]:
        """Names of sub-cgroups of ``rel`` in any hierarchy."""
        out: set[str] = set()
        for d in self._unique_dirs(rel):
            try:
                with os.scandir(d) as it:
                    out.update(e.name for e in it if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
        return out

    # creation

    def create(self, rel: str) -> None:
        """Make ``rel`` (and its missing ancestors) in every hierarchy."""
        for d in self._unique_dirs(rel):
            self._makedirs(d)

    def _makedirs(self, d: str) -> None:
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup directory {d}: {exc.strerror or exc}") from None

    def update(self, rel: str, res: ResourceConfig) -> None:
        raise NotImplementedError

    # processes and removal

    def pids(self, rel: str) -> set[int]:
        """Every process in ``rel`` or below, in any hierarchy."""
        out: set[int] = set()
        for d in self._unique_dirs(rel):
            if not os.path.isdir(d):
                continue
            for dirpath, _dirnames, _files in os.walk(d):
                out |= _read_pids(os.path.join(dirpath, "cgroup.procs"))
        return out

    def _thaw(self, rel: str) -> None:
        pass

    def kill(self, rel: str) -> None:
        self._thaw(rel)
        for pid in sorted(self.pids(rel)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except OSError as exc:
                log.warning("cannot kill process %d in cgroup %s: %s", pid, rel, exc.strerror or exc)

    def remove(self, rel: str, *, timeout: float = 10.0) -> bool:
        """Kill what runs in ``rel``, then rmdir its tree deepest-first in every hierarchy.

        Killed processes leave their cgroups asynchronously, so rmdir is retried
        (re-killing stragglers) with a growing pause until ``timeout``. Returns
        True when any directory was removed; raises :class:`CgroupError` naming
        what is left when the time runs out.
        """
        rel = rel.strip("/")
        if not rel:
            raise CgroupError("refusing to remove the root cgroup")
        dirs = [d for d in self._unique_dirs(rel) if os.path.isdir(d)]
        if not dirs:
            return False
        self.kill(rel)
        deadline = time.monotonic() + timeout
        delay = 0.01
        removed = False
        while True:
            left: list[tuple[str, str]] = []
            for d in dirs:
                if not os.path.isdir(d):
                    continue
                for dirpath, _dirnames, _files in os.walk(d, topdown=False):
                    try:
                        os.rmdir(dirpath)
                        removed = True
                    except FileNotFoundError:
                        removed = True
                    except OSError as exc:
                        if self.layout.emulated and exc.errno == errno.ENOTEMPTY and _only_files(dirpath):
                            # A plain directory tree (tests) keeps the files a kernel would drop.
                            _remove_plain_tree(dirpath)
                            removed = True
                            continue
                        left.append((dirpath, exc.strerror or str(exc)))
            if not left:
                return removed
            if time.monotonic() >= deadline:
                what = "; ".join(f"{p}: {why}" for p, why in left[:5])
                raise CgroupError(
                    f"cannot remove cgroup {rel}: {len(left)} directories left "
                    f"({what}); processes still inside: {sorted(self.pids(rel)) or 'none'}"
                )
            self.kill(rel)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _only_files(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return all(not e.is_dir(follow_symlinks=False) for e in it)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """A process that has not exited (a zombie has: the kernel takes it out of its cgroups)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[:1]
    return bool(state) and state[0] not in ("Z", "X")


def _remove_plain_tree(path: str) -> None:
    # Only for an emulated tree: a real cgroupfs directory without sub-cgroups
    # is removable with rmdir once no live process is left in it, so the same
    # rule is applied to the pids the plain cgroup.procs file lists.
    if any(_alive(pid) for pid in _read_pids(os.path.join(path, "cgroup.procs"))):
        raise OSError(errno.EBUSY, "processes still listed in cgroup.procs")
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


class CgroupV1Fs(CgroupFs):
    """cgroup v1 (legacy or hybrid): one directory per controller hierarchy."""

    version = 1

    def needed(self) -> tuple[str, ...]:
        mounts = self.layout.controller_mounts()
        return tuple(c for c in _NEEDED_V1 if c in mounts)

    def create(self, rel: str) -> None:
        # cpuset: a new v1 cpuset cgroup starts with empty cpus and mems and
        # cannot take a process; fill every empty level on the way down from
        # its parent, as runc does (the cgroup root may be such a level too).
        cpuset_mp = self.layout.mount_for("cpuset")
        if cpuset_mp:
            parts = [p for p in rel.strip("/").split("/") if p]
            cur = cpuset_mp
            for part in parts:
                parent, cur = cur, os.path.join(cur, part)
                self._makedirs(cur)
                self._copy_cpuset(parent, cur)
        super().create(rel)

    @staticmethod
    def _copy_cpuset(parent: str, child: str) -> None:
        for name in ("cpuset.cpus", "cpuset.mems"):
            target = os.path.join(child, name)
            if not os.path.isfile(target):
                continue
            try:
                if _read(target):
                    continue
                value = _read(os.path.join(parent, name))
            except OSError:
                continue
            if value:
                _write(target, value)

    def _thaw(self, rel: str) -> None:
        d = self.dirs(rel).get("freezer")
        if not d:
            return
        state = os.path.join(d, "freezer.state")
        try:
            if _read(state) != "THAWED":
                _write(state, "THAWED")
        except (OSError, CgroupError):
            pass

    def hugepage_page_sizes(self) -> list[str]:
        """Page sizes the hugetlb controller offers (``2MB``), from its root files."""
        mp = self.layout.mount_for("hugetlb")
        if not mp:
            return []
        try:
            names = os.listdir(mp)
        except OSError:
            return []
        return sorted(
            n[len("hugetlb.") : -len(".limit_in_bytes")]
            for n in names
            if n.startswith("hugetlb.") and n.endswith(".limit_in_bytes")
        )

    def update(self, rel: str, res: ResourceConfig) -> None:
        dirs = self.dirs(rel)
        cpu = dirs.get("cpu")
        if cpu:
            if res.cpu_shares is not None:
                _write(os.path.join(cpu, "cpu.shares"), res.cpu_shares)
            if res.cpu_quota is not None:
                quota = res.cpu_quota if res.cpu_quota > 0 else -1
                period_file = os.path.join(cpu, "cpu.cfs_period_us")
                quota_file = os.path.join(cpu, "cpu.cfs_quota_us")
                if res.cpu_period is None:
                    _write(quota_file, quota)
                else:
                    # The kernel checks quota against the period in force: if
                    # the period cannot go first, write the quota first.
                    try:
                        _write(period_file, res.cpu_period)
                        _write(quota_file, quota)
                    except CgroupError:
                        _write(quota_file, quota)
                        _write(period_file, res.cpu_period)
        mem = dirs.get("memory")
        if mem and res.memory is not None:
            _write(os.path.join(mem, "memory.limit_in_bytes"), res.memory if res.memory > 0 else -1)
        pids = dirs.get("pids")
        if pids and res.pids is not None:
            _write(os.path.join(pids, "pids.max"), "max" if res.pids < 0 else res.pids)
        hug = dirs.get("hugetlb")
        if hug and res.hugepages is not None:
            wanted = {hugepage_cgroup_size(size): limit for size, limit in res.hugepages.items()}
            for size in sorted(set(self.hugepage_page_sizes()) | set(wanted)):
                _write(os.path.join(hug, f"hugetlb.{size}.limit_in_bytes"), wanted.get(size, 0))
        cpuset = dirs.get("cpuset")
        if res.cpuset_cpus is not None or res.cpuset_mems is not None:
            if not cpuset:
                raise CgroupError(f"cannot set a cpuset on {rel}: the cpuset controller is not mounted")
            if res.cpuset_mems is not None:
                _write(os.path.join(cpuset, "cpuset.mems"), res.cpuset_mems)
            if res.cpuset_cpus is not None:
                _write(os.path.join(cpuset, "cpuset.cpus"), res.cpuset_cpus)


class CgroupV2Fs(CgroupFs):
    """cgroup v2: one tree; controllers are enabled level by level in cgroup.subtree_control."""

    version = 2

    def needed(self) -> tuple[str, ...]:
        return ("unified",)

    def _controllers(self, d: str) -> frozenset[str]:
        """Controllers available in ``d``.

        The kernel gives every cgroup a ``cgroup.controllers`` listing what its
        parent enabled in ``cgroup.subtree_control``; an emulated tree gets the
        same answer from the parent's file.
        """
        if self.layout.emulated and d != self.layout.hierarchies[0].mountpoint:
            try:
                with open(os.path.join(os.path.dirname(d), "cgroup.subtree_control")) as f:
                    return frozenset(f.read().split())
            except OSError:
                return frozenset()
        return _v2_controllers(d)

    def _enable_subtree(self, d: str) -> None:
        """Enable in ``d``'s subtree every wanted controller ``d`` has (cpu, memory, pids required)."""
        available = self._controllers(d)
        path = os.path.join(d, "cgroup.subtree_control")
        try:
            enabled = set(_read(path).split())
        except OSError:
            enabled = set()
        for c in _V2_WANTED:
            if c not in available or c in enabled:
                continue
            try:
                if self.layout.emulated:
                    enabled.add(c)  # the kernel would list it by name from now on
                    with open(path, "w") as f:
                        f.write(" ".join(x for x in _V2_WANTED if x in enabled))
                else:
                    with open(path, "w") as f:
                        f.write(f"+{c}")
            except OSError as exc:
                if c in _V2_REQUIRED:
                    raise CgroupError(f"cannot enable the {c} controller in {path}: {exc.strerror or exc}") from None
                log.info("cgroup v2: controller %s not enabled in %s: %s", c, path, exc)

    def create(self, rel: str) -> None:
        root = self.layout.hierarchies[0].mountpoint
        parts = [p for p in rel.strip("/").split("/") if p]
        cur = root
        self._enable_subtree(cur)
        for part in parts:
            cur = os.path.join(cur, part)
            self._makedirs(cur)
            self._enable_subtree(cur)

    def hugepage_page_sizes(self) -> list[str]:
        return sorted(hugepage_cgroup_size(s) for s in hugepage_sizes(self.hugepages_dir))

    def update(self, rel: str, res: ResourceConfig) -> None:
        d = self.dirs(rel)["unified"]
        ctrls = self._controllers(d)

        def need(c: str, what: str) -> bool:
            if c in ctrls:
                return True
            raise CgroupError(
                f"cannot set {what} on {d}: the {c} controller is not enabled "
                f"there (see {os.path.dirname(d)}/cgroup.subtree_control)"
            )

        if res.cpu_shares is not None and need("cpu", "cpu.weight"):
            _write(os.path.join(d, "cpu.weight"), shares_to_weight(res.cpu_shares))
        if res.cpu_quota is not None and need("cpu", "cpu.max"):
            period = res.cpu_period or QUOTA_PERIOD_US
            _write(os.path.join(d, "cpu.max"), cpu_max_value(res.cpu_quota if res.cpu_quota > 0 else -1, period))
        if res.memory is not None and need("memory", "memory.max"):
            _write(os.path.join(d, "memory.max"), res.memory if res.memory > 0 else "max")
        if res.pids is not None and need("pids", "pids.max"):
            _write(os.path.join(d, "pids.max"), "max" if res.pids < 0 else res.pids)
        if res.hugepages is not None and "hugetlb" in ctrls:
            wanted = {hugepage_cgroup_size(size): limit for size, limit in res.hugepages.items()}
            for size in sorted(set(self.hugepage_page_sizes()) | set(wanted)):
                limit = wanted.get(size, 0)
                _write(os.path.join(d, f"hugetlb.{size}.max"), "max" if limit >= HUGEPAGE_UNBOUNDED else limit)
        if res.cpuset_mems is not None and need("cpuset", "cpuset.mems"):
            _write(os.path.join(d, "cpuset.mems"), res.cpuset_mems)
        if res.cpuset_cpus is not None and need("cpuset", "cpuset.cpus"):
            _write(os.path.join(d, "cpuset.cpus"), res.cpuset_cpus)

    def kill(self, rel: str) -> None:
        # cgroup.kill (Linux 5.14+) kills the whole subtree atomically.
        d = self.dirs(rel)["unified"]
        kill_file = os.path.join(d, "cgroup.kill")
        if not self.layout.emulated and os.path.isfile(kill_file):
            try:
                _write(kill_file, 1)
            except CgroupError as exc:
                log.warning("%s", exc)
        super().kill(rel)


def fs_for_layout(layout: CgroupLayout, *, hugepages_dir: str = "/sys/kernel/mm/hugepages") -> CgroupFs:
    cls = CgroupV2Fs if layout.version == 2 else CgroupV1Fs
    return cls(layout, hugepages_dir=hugepages_dir)


# --- the cgroupfs driver -----------------------------------------------------------


class CgroupfsDriver:
    """The ``cgroupfs`` driver: a cgroup's name is its path (``/orchpods/burstable/pod<uid>``)."""

    name = "cgroupfs"

    def __init__(self, fs: CgroupFs) -> None:
        self.fs = fs

    @staticmethod
    def parse(text: str) -> CgroupName:
        """An absolute cgroupfs name (``--cgroup-root``) as components."""
        return tuple(p for p in text.split("/") if p)

    @staticmethod
    def fs_name(cg: CgroupName) -> str:
        """What the runtime gets as cgroup parent, and the path under each hierarchy."""
        return "/" + "/".join(cg)

    @staticmethod
    def runtime_name_of(cg: CgroupName) -> str:
        """The CRI cgroup_parent for ``cg``."""
        return "/" + "/".join(cg)

    def rel(self, cg: CgroupName) -> str:
        return "/".join(cg)

    def child_name(self, parent: CgroupName, dirname: str) -> str | None:
        """The last component of a cgroup found as ``dirname`` under ``parent``."""
        return dirname

    def dirs(self, cg: CgroupName) -> dict[str, str]:
        return self.fs.dirs(self.rel(cg))

    def missing(self, cg: CgroupName) -> dict[str, str]:
        return self.fs.missing(self.rel(cg))

    def exists(self, cg: CgroupName) -> bool:
        return self.fs.exists(self.rel(cg))

    def children(self, cg: CgroupName) -> set[str]:
        return {n for d in self.fs.children(self.rel(cg)) if (n := self.child_name(cg, d))}

    def create(self, cg: CgroupName, res: ResourceConfig) -> None:
        self.fs.create(self.rel(cg))
        self.fs.update(self.rel(cg), res)

    def update(self, cg: CgroupName, res: ResourceConfig) -> None:
        self.fs.update(self.rel(cg), res)

    def pids(self, cg: CgroupName) -> set[int]:
        return self.fs.pids(self.rel(cg))

    def destroy(self, cg: CgroupName) -> bool:
        return self.fs.remove(self.rel(cg))

    def check(self) -> None:
        """Nothing to check: cgroupfs needs only the mounted filesystem."""
