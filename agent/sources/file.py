"""The manifest-path source (``--pod-manifest-path``): static pods from files.

The path is a directory of manifests (dot-files and subdirectories skipped,
files read in name order) or a single manifest file. The whole path is read
again every ``--file-check-frequency`` and soon after inotify reports a change,
and every read sends the complete set to the merge (``Op.SET``), so a file
added, changed or removed becomes an ADD, a REMOVE+ADD (new content, new UID)
or a REMOVE there.

A file that cannot be used (unreadable, malformed, invalid, or naming a pod
another file already names) is logged once when the problem appears and kept
as a :class:`ManifestProblem` for the agent's ``/pods`` view while it lasts; it
never keeps the other files' pods from running.

inotify is used through ``ctypes`` (``inotify_init1``/``inotify_add_watch``)
and the event loop's ``add_reader``; where it is not available the source
polls at its period only.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import os
import stat
import struct
from typing import Any

from agent import logging as agent_logging
from agent import pods as podutil
from agent.pods import ManifestProblem, Op, PodSink, PodUpdate
from apiserver_min.api.helpers import json_copy

from .decode import MAX_MANIFEST_BYTES, ManifestError, decode_document, make_static

__all__ = ["FileSource"]

log = agent_logging.get_logger("sources")

# Editors and copy tools write in several steps; while a file is still open for
# writing (created or modified, not yet closed) wait this long after the first
# event so one change is read once, complete. A write already closed, a rename
# into place or a removal is read at once: the settle time was most of the
# agent's own share of a static pod's start latency (tests/bench/bench_static_pods.py).
_SETTLE_SECONDS = 0.05


class FileSource:
    """Reads static pod manifests from a directory or file and feeds the pod config merge (a :class:`PodSink`)."""

    def __init__(self, path: str, node_name: str, period: float, config: PodSink) -> None:
        self.path = path
        self.node_name = node_name
        # A period of zero or less would spin; re-read every second at most then.
        self.period = period if period > 0 else 1.0
        self.config = config
        self._cache: dict[str, tuple[bytes, list[dict], list[ManifestProblem]]] = {}
        self._logged: set[tuple[str, str]] = set()
        self._path_state = ""  # last logged state of the path itself ("" = fine)
        # Off only for the scale benchmark's hollow nodes (tests/bench/hollow.py): a
        # thousand agents in one process would take every inotify instance of the user
        # (fs.inotify.max_user_instances, 128 by default); they poll instead.
        self.inotify = True
        self._wake: asyncio.Event | None = None
        self._watches: dict[int, str] = {}  # inotify wd -> "parent" | "dir"
        self._writing: set[str] = set()  # names created/modified and not closed since the last read

    # --- reading ----------------------------------------------------------------------

    def read_once(self) -> tuple[list[dict], list[ManifestProblem]]:
        """The usable static pods under the path now, and the problems of the rest."""
        path = self.path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._note_path_state("missing", "Manifest path does not exist, no static pods from it")
            self._cache.clear()
            return [], []
        except OSError as exc:
            self._cache.clear()
            return [], [self._problem(path, f"cannot read the manifest path: {exc.strerror or exc}")]
        self._note_path_state("", "")
        if stat.S_ISDIR(st.st_mode):
            pods, problems = self._read_dir(path)
        elif stat.S_ISREG(st.st_mode):
            self._drop_cache_except({path})
            pods, problems = self._read_file(path)
        else:
            self._cache.clear()
            return [], [self._problem(path, "the manifest path is neither a directory nor a regular file")]
        return pods, problems

    def _read_dir(self, directory: str) -> tuple[list[dict], list[ManifestProblem]]:
        try:
            entries = sorted(e for e in os.listdir(directory) if not e.startswith("."))
        except OSError as exc:
            self._cache.clear()
            return [], [self._problem(directory, f"cannot list the manifest directory: {exc.strerror or exc}")]
        pods: list[dict] = []
        problems: list[ManifestProblem] = []
        owners: dict[str, str] = {}  # pod full name -> file that defined it first
        present: set[str] = set()
        for entry in entries:
            full = os.path.join(directory, entry)
            try:
                st = os.stat(full)
            except FileNotFoundError:  # removed while we read, or a dangling symlink
                continue
            except OSError as exc:
                problems.append(self._problem(full, f"cannot read: {exc.strerror or exc}"))
                continue
            if stat.S_ISDIR(st.st_mode):
                log.v(2).info("Skipping a directory in the manifest path, not recursing", path=full)
                continue
            if not stat.S_ISREG(st.st_mode):
                problems.append(self._problem(full, "not a regular file"))
                continue
            present.add(full)
            file_pods, file_problems = self._read_file(full)
            problems.extend(file_problems)
            for pod in file_pods:
                name = podutil.full_name(pod)
                first = owners.get(name)
                if first is not None:
                    problems.append(
                        self._problem(
                            full, f"duplicate pod name {name!r}: already defined in {first}, ignoring this one"
                        )
                    )
                    continue
                owners[name] = full
                pods.append(pod)
        self._drop_cache_except(present)
        return pods, problems

    def _read_file(self, path: str) -> tuple[list[dict], list[ManifestProblem]]:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_MANIFEST_BYTES + 1)
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            return [], [self._problem(path, f"cannot read: {exc.strerror or exc}")]
        cached = self._cache.get(path)
        if cached is not None and cached[0] == data:
            return [json_copy(p) for p in cached[1]], list(cached[2])
        pods, problems = self._decode(data, path)
        self._cache[path] = (data, pods, problems)
        return [json_copy(p) for p in pods], list(problems)

    def _decode(self, data: bytes, path: str) -> tuple[list[dict], list[ManifestProblem]]:
        try:
            kind, raw = decode_document(data, path)
        except ManifestError as exc:
            return [], [self._problem(path, exc.message)]
        pods: list[dict] = []
        problems: list[ManifestProblem] = []
        for i, item in enumerate(raw):
            where = f"items[{i}]: " if kind != "Pod" else ""
            try:
                pods.append(make_static(item, node_name=self.node_name, source=podutil.SOURCE_FILE, location=path))
            except ManifestError as exc:
                problems.append(self._problem(path, where + exc.message))
            except Exception as exc:  # a bug in defaulting/validation must not cost the other files
                log.error("Unexpected failure while checking a manifest", err=exc, path=path)
                problems.append(self._problem(path, f"{where}internal error while checking the pod: {exc!r}"))
        return pods, problems

    def _drop_cache_except(self, keep: set[str]) -> None:
        for p in [p for p in self._cache if p not in keep]:
            del self._cache[p]

    @staticmethod
    def _problem(location: str, message: str) -> ManifestProblem:
        return ManifestProblem(podutil.SOURCE_FILE, location, message)

    def _note_path_state(self, state: str, message: str) -> None:
        if state != self._path_state:
            self._path_state = state
            if message:
                log.info(message, path=self.path)

    # --- running ----------------------------------------------------------------------

    async def sync(self) -> None:
        """Read the path once (off the loop: YAML of a large manifest takes a while)
        and hand the result to the merge."""
        pods, problems = await asyncio.to_thread(self.read_once)
        current = {(p.location, p.message) for p in problems}
        for p in problems:
            if (p.location, p.message) not in self._logged:
                log.error("Could not process manifest file", path=p.location, err=p.message)
        self._logged = current
        self.config.report_problems(podutil.SOURCE_FILE, problems)
        self.config.push(PodUpdate.make(Op.SET, podutil.SOURCE_FILE, pods))

    async def run(self) -> None:
        """Forever: read, then wait for an inotify event or the period, and read again."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        notify: _Inotify | None = None
        try:
            if self.inotify:
                notify = _Inotify()
                loop.add_reader(notify.fd, self._on_events, notify)
        except OSError as exc:
            if notify is not None:
                notify.close()
                notify = None
            log.warning(
                "Cannot watch the manifest path with inotify, polling only",
                err=exc,
                path=self.path,
                period_s=self.period,
            )
        try:
            while True:
                if notify is not None:
                    self._add_watches(notify)
                self._wake.clear()
                self._writing.clear()
                await self.sync()
                try:
                    async with asyncio.timeout(self.period):
                        await self._wake.wait()
                except TimeoutError:
                    continue
                if self._writing:
                    await asyncio.sleep(_SETTLE_SECONDS)
        finally:
            if notify is not None:
                loop.remove_reader(notify.fd)
                notify.close()
            self._watches.clear()

    def _add_watches(self, notify: "_Inotify") -> None:
        """Watch the path's directory (the path appearing, disappearing or, for a
        single file, changing) and the path itself when it is a directory. Adding a
        watch that exists is a no-op, so this runs before every read."""
        path = os.path.abspath(self.path)
        parent = os.path.dirname(path) or "/"
        wd = notify.add_watch(parent, _DIR_EVENTS)
        if wd is not None and self._watches.get(wd) != "dir":
            self._watches[wd] = "parent"
        if os.path.isdir(path):
            wd = notify.add_watch(path, _DIR_EVENTS | _SELF_EVENTS | _IN_ONLYDIR)
            if wd is not None:
                self._watches[wd] = "dir"

    def _on_events(self, notify: "_Inotify") -> None:
        base = os.path.basename(os.path.abspath(self.path))
        relevant = False
        try:
            events = notify.read_events()
        except OSError as exc:
            log.error("Reading inotify events failed", err=exc)
            events = []
            relevant = True
            self._writing.add("")  # unknown: settle as for a write
        for wd, mask, name in events:
            if mask & _IN_Q_OVERFLOW:
                relevant = True
                self._writing.add("")
                continue
            role = self._watches.get(wd)
            if mask & _IN_IGNORED:
                self._watches.pop(wd, None)
                relevant = True
            elif (role == "parent" and name == base) or (role == "dir" and not name.startswith(".")):
                relevant = True  # dot-files are never manifests
                if mask & (_IN_CREATE | _IN_MODIFY):
                    self._writing.add(name)
                if mask & (_IN_CLOSE_WRITE | _IN_DELETE | _IN_MOVED_FROM):
                    self._writing.discard(name)
        if relevant and self._wake is not None:
            self._wake.set()


# --- inotify through ctypes ---------------------------------------------------------------------

_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_DIR_EVENTS = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_SELF_EVENTS = _IN_DELETE_SELF | _IN_MOVE_SELF
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        raise OSError(errno.ENOSYS, "no C library found for inotify")
    libc = ctypes.CDLL(name, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise OSError(errno.ENOSYS, "the C library has no inotify")
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_init1.restype = ctypes.c_int
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_add_watch.restype = ctypes.c_int
    return libc


class _Inotify:
    """A non-blocking inotify descriptor: add watches, read parsed events."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd = fd

    def add_watch(self, path: str, mask: int) -> int | None:
        """The watch descriptor, or None when the path is not there (yet) or not watchable."""
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            if err not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                log.warning("Cannot add an inotify watch", path=path, err=os.strerror(err))
            return None
        return wd

    def read_events(self) -> list[tuple[int, int, str]]:
        out: list[tuple[int, int, str]] = []
        while True:
            try:
                buf = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return out
            if not buf:
                return out
            offset = 0
            while offset + _EVENT_HEADER.size <= len(buf):
                wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(buf, offset)
                offset += _EVENT_HEADER.size
                raw = buf[offset : offset + length]
                offset += length
                out.append((wd, mask, os.fsdecode(raw.split(b"\0", 1)[0])))

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
