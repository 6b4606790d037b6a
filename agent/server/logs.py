"""Container logs: reading the runtime's CRI log files, and rotating them.

The runtime (containerd) writes each container's output to the CRI log path
``/var/log/pods/<namespace>_<name>_<uid>/<container>/<restartCount>.log``, one
record per line::

    2016-10-06T00:17:09.669794202Z stdout F a whole line
    2016-10-06T00:17:09.669794203Z stderr P the first part of a long line
    2016-10-06T00:17:09.669794204Z stderr F and its end

``P`` marks a partial chunk (the runtime splits long lines); the chunks of one
stream up to and including the next ``F`` chunk of that stream form one line.

Reading (:func:`read_log`) serves ``/containerLogs`` on the agent's server:
upstream's ``tailLines``, ``sinceSeconds``/``sinceTime``, ``limitBytes``,
``timestamps`` and ``follow`` options. Following survives rotation: when a new
file appears at the path, the old one is drained and the new one followed.

Rotation (:class:`LogRotator`) is the agent's job, not the runtime's: upstream
renames a live file past ``--container-log-max-size`` to
``<file>.<YYYYMMDD-HHMMSS>``, asks the runtime to reopen it (CRI
``ReopenContainerLog``), gzips older rotations and keeps at most
``--container-log-max-files`` files per container, the live one included.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as _dt
import functools
import glob
import os
import re
import shutil
import time
from typing import Awaitable, Callable, Iterable, Iterator, Mapping

from agent import logging as agent_logging
from apiserver_min.api import timeutil

__all__ = [
    "LogOptions",
    "LogLine",
    "parse_line",
    "read_log",
    "tail_offset",
    "format_timestamp",
    "LogRotator",
    "parse_bool",
]

log = agent_logging.get_logger("logs")

STDOUT = "stdout"
STDERR = "stderr"
_STREAMS = {b"stdout": STDOUT, b"stderr": STDERR}
_TAG_PARTIAL = b"P"
_TAG_FULL = b"F"

_BLOCK = 64 * 1024  # read size, forwards and backwards
_MAX_JOIN = 1 << 20  # a joined line longer than this is written out in pieces
_INT64_MAX = (1 << 63) - 1
_NANO = 10**9


# --- options ---------------------------------------------------------------------


def parse_bool(value: str | None) -> bool:
    """Upstream's query-parameter booleans: absent is false; "0"/"false" are false;
    anything else (an empty value too, as in ``?follow``) is true."""
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")


_INT_RE = re.compile(r"[+-]?[0-9]+")


def _query_int(query: Mapping[str, str], key: str) -> int | None:
    value = query.get(key)
    if value is None or value == "":
        return None
    if not _INT_RE.fullmatch(value):
        raise ValueError(f'invalid {key} "{value}": must be an integer')
    number = int(value)
    if not -_INT64_MAX - 1 <= number <= _INT64_MAX:
        raise ValueError(f'invalid {key} "{value}": out of range for a 64-bit integer')
    return number


@dataclasses.dataclass(frozen=True)
class LogOptions:
    """What to read from a container log; the shape of upstream's PodLogOptions
    once the request is decoded (``since_ns`` is absolute, ``stream`` is the
    runtime's stream name or None for both)."""

    follow: bool = False
    tail_lines: int | None = None
    timestamps: bool = False
    since_ns: int | None = None
    limit_bytes: int | None = None
    stream: str | None = None

    def __post_init__(self) -> None:
        if self.tail_lines is not None and self.tail_lines < 0:
            raise ValueError(f"invalid tailLines {self.tail_lines}: must be greater than or equal to 0")
        if self.limit_bytes is not None and self.limit_bytes < 1:
            raise ValueError(f"invalid limitBytes {self.limit_bytes}: must be greater than 0")
        if self.stream not in (None, STDOUT, STDERR):
            raise ValueError(f'invalid stream "{self.stream}": must be "stdout", "stderr" or None')

    @classmethod
    def from_query(cls, query: Mapping[str, str], now_ns: int) -> "LogOptions":
        """Decode the query of ``/containerLogs`` (upstream's parameter names).

        ``tail`` is upstream's older spelling of ``tailLines`` (``tail=all`` = no
        limit) and wins when both are given. ``sinceSeconds`` counts back from
        ``now_ns``. Raises ValueError naming the parameter and the reason.
        """
        tail_lines = _query_int(query, "tailLines")
        legacy_tail = query.get("tail")
        if legacy_tail:
            tail_lines = None if legacy_tail == "all" else _query_int({"tail": legacy_tail}, "tail")
        if tail_lines is not None and tail_lines < 0:
            raise ValueError(f"invalid tailLines {tail_lines}: must be greater than or equal to 0")

        since_seconds = _query_int(query, "sinceSeconds")
        since_time = query.get("sinceTime") or None
        if since_seconds is not None and since_time is not None:
            raise ValueError("sinceSeconds and sinceTime: at most one of them may be specified")
        since_ns: int | None = None
        if since_seconds is not None:
            if since_seconds < 1:
                raise ValueError(f"invalid sinceSeconds {since_seconds}: must be greater than 0")
            since_ns = now_ns - since_seconds * _NANO
        elif since_time is not None:
            try:
                since_ns = timeutil.parse_rfc3339_ns(since_time)
            except ValueError as exc:
                raise ValueError(f"invalid sinceTime: {exc}") from None

        limit_bytes = _query_int(query, "limitBytes")
        if limit_bytes is not None and limit_bytes < 1:
            raise ValueError(f"invalid limitBytes {limit_bytes}: must be greater than 0")

        stream: str | None = None
        raw_stream = query.get("stream")
        if raw_stream:
            lowered = raw_stream.lower()
            if lowered in (STDOUT, STDERR):
                stream = lowered
            elif lowered != "all":
                raise ValueError(f'invalid stream "{raw_stream}": must be one of All, Stdout, Stderr')

        return cls(
            follow=parse_bool(query.get("follow")),
            tail_lines=tail_lines,
            timestamps=parse_bool(query.get("timestamps")),
            since_ns=since_ns,
            limit_bytes=limit_bytes,
            stream=stream,
        )


# --- parsing ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class LogLine:
    ts_ns: int  # nanoseconds since the Unix epoch
    stream: str  # "stdout" or "stderr"
    partial: bool  # a "P" chunk: the line continues in the next chunk of the stream
    text: bytes  # without the line's newline


_TS_RE = re.compile(rb"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})")


@functools.lru_cache(maxsize=1024)
def _whole_seconds_ns(seconds: bytes, zone: bytes) -> int | None:
    """The instant of ``YYYY-MM-DDTHH:MM:SS<zone>`` in nanoseconds; lines of one
    second share it, hence the cache (the strict parse costs ~10 us)."""
    try:
        return timeutil.parse_rfc3339_ns((seconds + zone).decode("ascii"))
    except ValueError:
        return None


def _parse_ts(raw: bytes) -> int | None:
    m = _TS_RE.fullmatch(raw)
    if m is None:
        return None
    base = _whole_seconds_ns(m[1], m[3])
    if base is None:
        return None
    frac = m[2]
    # Digits past nanoseconds are dropped, as upstream's lenient parser does.
    return base + (int(frac[:9].ljust(9, b"0")) if frac else 0)


def parse_line(line: bytes) -> LogLine | None:
    """One CRI log record (with or without its newline); None when malformed
    (bad timestamp, unknown stream or tag, missing fields) so that readers can
    skip it as upstream does."""
    if line.endswith(b"\n"):
        line = line[:-1]
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    stream = _STREAMS.get(parts[1])
    if stream is None:
        return None
    # Tags may carry more after a ':'; only the first says partial or full.
    tag = parts[2].split(b":", 1)[0]
    if tag != _TAG_PARTIAL and tag != _TAG_FULL:
        return None
    ts = _parse_ts(parts[0])
    if ts is None:
        return None
    return LogLine(ts, stream, tag == _TAG_PARTIAL, parts[3] if len(parts) == 4 else b"")


def _stream_and_partial(line: bytes) -> tuple[str, bool] | None:
    """The cheap part of :func:`parse_line` that the backwards tail scan needs."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    stream = _STREAMS.get(parts[1])
    tag = parts[2].rstrip(b"\n").split(b":", 1)[0]
    if stream is None or (tag != _TAG_PARTIAL and tag != _TAG_FULL):
        return None
    return stream, tag == _TAG_PARTIAL


@functools.lru_cache(maxsize=256)
def _seconds_text(seconds: int) -> str:
    t = timeutil.EPOCH + _dt.timedelta(seconds=seconds)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"


def format_timestamp(ts_ns: int) -> str:
    """Upstream's output format for ``timestamps=true``: RFC3339Nano with all
    nine fractional digits kept (fixed width), in UTC."""
    seconds, nanos = divmod(ts_ns, _NANO)
    return f"{_seconds_text(seconds)}.{nanos:09d}Z"


# --- tail ------------------------------------------------------------------------


def _reverse_lines(fd: int, end: int, block: int = _BLOCK) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its newline) of the complete lines before ``end``, last
    first, reading ``block`` bytes at a time from the end. A trailing line
    without its newline is not yielded (the runtime is still writing it)."""
    pos = end
    carry = b""  # bytes [pos, pos + len(carry)): not yet yielded
    seen_newline = False
    while True:
        if pos > 0:
            size = min(block, pos)
            pos -= size
            chunk = os.pread(fd, size, pos)
            if len(chunk) < size:  # truncated under us: nothing sensible to tail
                return
            carry = chunk + carry
        if not seen_newline:
            i = carry.rfind(b"\n")
            if i < 0:
                if pos == 0:
                    return
                continue
            carry = carry[: i + 1]
            seen_newline = True
        j = len(carry)
        while True:
            i = carry.rfind(b"\n", 0, j - 1)
            if i < 0:
                break
            yield pos + i + 1, carry[i + 1 : j]
            j = i + 1
        carry = carry[:j]
        if pos == 0:
            if carry:
                yield 0, carry
            return


def tail_offset(
    fd: int, tail_lines: int, stream: str | None = None, *, end: int | None = None, block: int = _BLOCK
) -> int:
    """Where to start reading so that the last ``tail_lines`` complete lines (of
    ``stream``, or of both) are read, scanning backwards in blocks.

    A line is complete at its ``F`` chunk. Partial chunks of a counted line that
    come before interleaved records of the other stream are included, so the
    offset may let a reader see a few records more than needed: the reader
    keeps only the last ``tail_lines`` lines it assembles. Partial chunks after
    a stream's last ``F`` (a line still being written) are not counted and are
    read only when they lie past the offset: finding them all could mean
    scanning the whole file for a stream that is quiet.
    """
    if end is None:
        end = os.fstat(fd).st_size
    start = None
    counted = 0
    open_streams: set[str] = set()  # counted lines whose first chunk is not found yet
    full_seen: set[str] = set()
    trailing: set[str] = set()  # partial chunks after a stream's last F (line being written)
    for offset, line in _reverse_lines(fd, end, block):
        if start is None:
            start = offset + len(line)  # the end of the last complete line
        if counted >= tail_lines and not open_streams and not (trailing - full_seen):
            break
        parsed = _stream_and_partial(line)
        if parsed is None:
            continue
        s, partial = parsed
        if stream is not None and s != stream:
            continue
        if partial:
            if s not in full_seen:
                trailing.add(s)
                start = offset
            elif s in open_streams:
                start = offset
            continue
        full_seen.add(s)
        if counted < tail_lines:
            counted += 1
            open_streams.add(s)
            start = offset
        else:
            open_streams.discard(s)
    return start if start is not None else 0


# --- reading ---------------------------------------------------------------------


class _Pending:
    """The partial chunks of one stream waiting for their F chunk."""

    __slots__ = ("ts", "chunks", "size", "started", "skip")

    def __init__(self, ts: int, skip: bool) -> None:
        self.ts = ts
        self.chunks: list[bytes] = []
        self.size = 0
        self.started = False  # its beginning (and timestamp) is already written
        self.skip = skip  # before sinceTime: the whole line is dropped


class _Emitter:
    """Turns records into output lines: joins partial chunks per stream,
    filters by stream and time, prefixes timestamps, caps the bytes written.
    With a tail, lines are held (the last N only) until :meth:`release`."""

    def __init__(self, opts: LogOptions, write: Callable[[bytes], Awaitable[None]]) -> None:
        self.opts = opts
        self._write = write
        self.written = 0
        self.done = False
        self.held: collections.deque[bytes] | None = (
            collections.deque(maxlen=opts.tail_lines) if opts.tail_lines is not None else None
        )
        self.pending: dict[str, _Pending] = {}
        self.malformed = 0

    def _prefix(self, ts: int) -> bytes:
        return (format_timestamp(ts) + " ").encode("ascii") if self.opts.timestamps else b""

    def _too_old(self, ts: int) -> bool:
        return self.opts.since_ns is not None and ts < self.opts.since_ns

    async def record(self, raw: bytes) -> None:
        rec = parse_line(raw)
        if rec is None:
            if raw.strip():
                self.malformed += 1
            return
        if self.opts.stream is not None and rec.stream != self.opts.stream:
            return
        pending = self.pending.get(rec.stream)
        if rec.partial:
            if pending is None:
                pending = self.pending[rec.stream] = _Pending(rec.ts_ns, self._too_old(rec.ts_ns))
            pending.chunks.append(rec.text)
            pending.size += len(rec.text)
            if pending.size >= _MAX_JOIN:  # a runaway line: write what we have, keep joining
                await self._flush_pending(pending)
            return
        if pending is not None:
            del self.pending[rec.stream]
            if pending.skip:
                return
            pending.chunks.append(rec.text)
            head = b"" if pending.started else self._prefix(pending.ts)
            await self._out(head + b"".join(pending.chunks) + b"\n")
            return
        if self._too_old(rec.ts_ns):
            return
        await self._out(self._prefix(rec.ts_ns) + rec.text + b"\n")

    async def _flush_pending(self, pending: _Pending) -> None:
        if not pending.skip and pending.chunks:
            head = b"" if pending.started else self._prefix(pending.ts)
            await self._out(head + b"".join(pending.chunks))
            pending.started = True
        pending.chunks = []
        pending.size = 0

    async def _out(self, data: bytes) -> None:
        if self.held is not None:
            self.held.append(data)
        else:
            await self._emit(data)

    async def _emit(self, data: bytes) -> None:
        if self.done:
            return
        limit = self.opts.limit_bytes
        if limit is not None:
            remaining = limit - self.written
            if len(data) >= remaining:
                data = data[:remaining]
                self.done = True
        if data:
            await self._write(data)
            self.written += len(data)

    async def release(self) -> None:
        """Write the lines held for the tail; from now on lines go straight out."""
        held, self.held = self.held, None
        if held:
            for data in held:
                await self._emit(data)
                if self.done:
                    return

    async def finish(self) -> None:
        """End of reading: anything held for the tail, then unfinished lines as
        they are (upstream writes partial chunks as it reads them). Unfinished
        lines do not count for the tail: it counts complete lines."""
        await self.release()
        for stream in list(self.pending):
            await self._flush_pending(self.pending.pop(stream))


def _check_reopened(path: str, f) -> object:
    """After EOF while following: has the runtime started a new file at ``path``?

    Returns a new open file, ``_TRUNCATED`` when the same file shrank below our
    position (rewritten in place), or None (keep waiting on the current file;
    also while the path is missing between the rename and the reopen).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    current = os.fstat(f.fileno())
    if (st.st_dev, st.st_ino) == (current.st_dev, current.st_ino):
        return _TRUNCATED if st.st_size < f.tell() else None
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


_TRUNCATED = object()


async def read_log(
    path: str,
    opts: LogOptions,
    write: Callable[[bytes], Awaitable[None]],
    *,
    is_running: Callable[[], bool] = lambda: False,
    poll_interval: float = 0.2,
) -> None:
    """Write the container log at ``path`` through ``write`` as ``opts`` asks.

    Opening errors (a missing file) propagate as OSError before anything is
    written. With ``follow``, reading goes on until ``is_running()`` turns false
    and the file is drained (or ``limit_bytes`` is reached); when a rotation
    puts a new file at ``path``, the rest of the old one is read first, then the
    new one from its start.
    """
    f = open(path, "rb")
    try:
        em = _Emitter(opts, write)
        if opts.tail_lines is not None:
            f.seek(await asyncio.to_thread(tail_offset, f.fileno(), opts.tail_lines, opts.stream))
        carry = b""

        async def feed(data: bytes) -> None:
            nonlocal carry
            lines = (carry + data).split(b"\n")
            carry = lines.pop()
            for raw in lines:
                await em.record(raw)
                if em.done:
                    return

        stopping = False
        while not em.done:
            chunk = f.read(_BLOCK)
            if chunk:
                await feed(chunk)
                await asyncio.sleep(0)  # filtered-out lines write nothing: let others run
                continue
            # At the end of what is written so far.
            if not opts.follow or stopping:
                if carry:  # an unterminated last record, as upstream prints it
                    await em.record(carry)
                    carry = b""
                await em.finish()
                break
            await em.release()
            if em.done:
                break
            reopened = _check_reopened(path, f)
            if reopened is _TRUNCATED:
                f.seek(0)
                carry = b""
                continue
            if reopened is not None:
                await feed(f.read())  # what the runtime wrote before it switched files
                if carry:
                    await em.record(carry)
                    carry = b""
                f.close()
                f = reopened
                log.v(4).info("Following the reopened container log", path=path)
                continue
            if not is_running():
                stopping = True  # one more read for what was written before it stopped
                continue
            await asyncio.sleep(poll_interval)
        if em.malformed:
            log.v(2).info("Skipped malformed lines in container log", path=path, count=em.malformed)
    finally:
        f.close()


# --- rotation --------------------------------------------------------------------

_ROTATED_SUFFIX = re.compile(r"\.[0-9]{8}-[0-9]{6}(\.gz|\.tmp)?")
_GZ = ".gz"
_TMP = ".tmp"
_STAMP = "%Y%m%d-%H%M%S"


class LogRotator:
    """Keeps each running container's log below ``max_size`` and its files
    (the live one included) at ``max_files`` at most.

    A rotation renames the live file to ``<file>.<YYYYMMDD-HHMMSS>`` (local
    time, as upstream) and asks the runtime to reopen the path; if that fails
    the rename is undone so the next pass tries again. Older rotations are
    gzipped (``.gz``, through a ``.tmp`` file), the newest stays plain so a
    reader that was following can still drain it.
    """

    def __init__(self, cri, *, max_size: int, max_files: int, clock: Callable[[], float] = time.time) -> None:
        if max_files < 2:
            raise ValueError(f"invalid --container-log-max-files {max_files}: must be at least 2")
        if max_size <= 0:
            raise ValueError(f"invalid --container-log-max-size {max_size}: must be greater than 0")
        self._cri = cri
        self.max_size = max_size
        self.max_files = max_files
        self._clock = clock

    async def rotate(self, containers: Iterable[tuple[str, str]]) -> None:
        """One pass over (container id, log path) of running containers. A
        failure is logged and does not stop the others (upstream does the same).

        The file work of the whole pass (sizes, pruning, compression) is done in one
        trip to a thread; only the containers whose log must be rotated or is missing
        come back for the runtime's reopen."""
        containers = list(containers)
        if not containers:
            return
        for container_id, path, outcome in await asyncio.to_thread(self._survey, containers):
            try:
                if isinstance(outcome, Exception):
                    raise outcome
                if outcome is None:  # missing: the runtime recreates it, then it is looked at alone
                    await self._rotate_one(container_id, path)
                else:
                    await self._rotate_latest(container_id, path, outcome)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("Failed to rotate container log", err=exc, containerID=container_id, path=path)

    def _survey(self, containers: list[tuple[str, str]]) -> list[tuple[str, str, list[str] | Exception | None]]:
        """In a thread: tidy each log's rotations; (id, path, what is left to do) for the logs
        to rotate (the rotations kept), missing ones (None) and failures (the exception)."""
        out: list[tuple[str, str, list[str] | Exception | None]] = []
        for container_id, path in containers:
            try:
                try:
                    size = os.stat(path).st_size
                except FileNotFoundError:
                    out.append((container_id, path, None))
                    continue
                rotating = size >= self.max_size
                rotated = self._tidy(path, rotating)
                if rotating:
                    out.append((container_id, path, rotated))
            except Exception as exc:  # noqa: BLE001 - reported per container by rotate()
                out.append((container_id, path, exc))
        return out

    async def _rotate_one(self, container_id: str, path: str) -> None:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            # An earlier reopen may have failed after the rename, or someone
            # removed the file: the runtime recreates it on reopen.
            await self._cri.reopen_container_log(container_id)
            size = os.stat(path).st_size
        rotating = size >= self.max_size
        rotated = await asyncio.to_thread(self._tidy, path, rotating)
        if rotating:
            await self._rotate_latest(container_id, path, rotated)

    def _tidy(self, path: str, rotating: bool) -> list[str]:
        """Remove leftovers and excess rotations, compress, return what is left
        (oldest first). Runs in a thread: gzip of 10Mi takes a while."""
        logs = sorted(p for p in glob.glob(glob.escape(path) + ".*") if _ROTATED_SUFFIX.fullmatch(p[len(path) :]))
        kept = []
        for p in logs:
            # A .tmp is an interrupted compression; a plain file next to its .gz
            # was compressed but not yet removed.
            if p.endswith(_TMP) or (not p.endswith(_GZ) and p + _GZ in logs):
                _remove(p)
            else:
                kept.append(p)
        # The live file plus the one a rotation is about to add count too.
        keep = self.max_files - (2 if rotating else 1)
        excess = len(kept) - keep
        for p in kept[: max(0, excess)]:  # oldest first, so a reader of newer ones is not cut short
            _remove(p)
        kept = kept[max(0, excess) :]
        for i, p in enumerate(kept):
            newest = i == len(kept) - 1
            if p.endswith(_GZ) or (newest and not rotating):
                continue
            kept[i] = _compress(p)
        return kept

    async def _rotate_latest(self, container_id: str, path: str, rotated: list[str]) -> None:
        stamp = int(self._clock())
        if rotated:
            # Names must sort in rotation order: never stamp at or before the
            # newest rotation (two rotations within a second, a clock set back).
            newest = rotated[-1].removesuffix(_GZ)[len(path) + 1 :]
            try:
                stamp = max(stamp, int(time.mktime(time.strptime(newest, _STAMP))) + 1)
            except (ValueError, OverflowError):
                pass
        target = f"{path}.{time.strftime(_STAMP, time.localtime(stamp))}"
        while os.path.exists(target) or os.path.exists(target + _GZ):
            stamp += 1
            target = f"{path}.{time.strftime(_STAMP, time.localtime(stamp))}"
        os.rename(path, target)
        try:
            await self._cri.reopen_container_log(container_id)
        except BaseException:
            try:
                os.rename(target, path)
            except OSError as exc:
                log.error("Failed to rename the rotated log back", err=exc, rotated=target, path=path)
            raise
        log.v(2).info("Rotated container log", containerID=container_id, path=path, rotated=target)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _compress(path: str) -> str:
    """gzip ``path`` to ``path.gz`` through ``path.tmp``, then remove ``path``."""
    import gzip  # loaded by the first rotation

    tmp = path + _TMP
    try:
        with (
            open(path, "rb") as src,
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6) as dst,
        ):
            shutil.copyfileobj(src, dst, _BLOCK)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path + _GZ)
    finally:
        _remove(tmp)
    _remove(path)
    return path + _GZ
