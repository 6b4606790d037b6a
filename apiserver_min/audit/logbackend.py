"""The log backend: events as JSON lines in a file (or on stdout), with size-based
rotation into timestamped backups, and the three delivery modes.

- ``blocking``: each event is written before the request goes on; a write failure is
  logged and the request continues.
- ``blocking-strict``: as blocking, but a failure to write the RequestReceived event
  fails the request.
- ``batch``: events are buffered and written by a background task in batches of up to
  ``max_size`` events, at the latest ``max_wait`` seconds after the first of a batch;
  a full buffer drops events (counted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import logging
import os
import sys
import time
from typing import IO, Any

import orjson

log = logging.getLogger("orch-apiserver.audit")

MODES = ("batch", "blocking", "blocking-strict")
# The backups' time stamp, as upstream's rotation writes it: name-2006-01-02T15-04-05.000.ext
_BACKUP_STAMP = "%Y-%m-%dT%H-%M-%S"


class AuditWriteError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class LogOptions:
    path: str  # "-" for standard output
    max_age_days: int = 0  # 0: backups are not removed for their age
    max_backups: int = 0  # 0: every backup is kept
    max_size_mb: int = 0  # 0: no rotation
    mode: str = "blocking"
    batch_buffer_size: int = 10000
    batch_max_size: int = 1
    batch_max_wait: float = 0.0


def _backup_name(path: str, when: _dt.datetime) -> str:
    directory, base = os.path.split(path)
    stem, ext = os.path.splitext(base)
    stamp = when.strftime(_BACKUP_STAMP) + f".{when.microsecond // 1000:03d}"
    return os.path.join(directory, f"{stem}-{stamp}{ext}")


class RotatingFile:
    """A file that moves itself aside (``name-TIMESTAMP.ext``) before growing past
    ``max_bytes``, and prunes backups beyond ``max_backups`` or older than ``max_age``."""

    def __init__(self, path: str, max_bytes: int, max_backups: int, max_age_days: int):
        self.path = path
        self.max_bytes = max_bytes
        self.max_backups = max_backups
        self.max_age = max_age_days * 86400.0
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._f: IO[bytes] = open(path, "ab")  # noqa: SIM115 - held open for the server's life, closed in close()
        self._size = self._f.tell()

    def write(self, data: bytes) -> None:
        if self.max_bytes and self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        self._f.write(data)
        self._f.flush()
        self._size += len(data)

    def _rotate(self) -> None:
        self._f.close()
        target = _backup_name(self.path, _dt.datetime.now(_dt.UTC))
        n = 1
        while os.path.exists(target):  # two rotations within a millisecond
            stem, ext = os.path.splitext(target)
            target = f"{stem}.{n}{ext}"
            n += 1
        os.rename(self.path, target)
        self._f = open(self.path, "ab")  # noqa: SIM115 - replaces the handle closed above
        self._size = 0
        self._prune()

    def backups(self) -> list[str]:
        directory, base = os.path.split(os.path.abspath(self.path))
        stem, ext = os.path.splitext(base)
        found = [
            os.path.join(directory, n)
            for n in os.listdir(directory)
            if n.startswith(stem + "-") and n.endswith(ext) and n != base
        ]
        return sorted(found)  # the time stamp sorts oldest first

    def _prune(self) -> None:
        backups = self.backups()
        doomed = set()
        if self.max_backups and len(backups) > self.max_backups:
            doomed.update(backups[: len(backups) - self.max_backups])
        if self.max_age:
            cutoff = time.time() - self.max_age
            doomed.update(b for b in backups if os.path.getmtime(b) < cutoff)
        for b in doomed:
            try:
                os.remove(b)
            except OSError as exc:
                log.warning("cannot remove the old audit log %s: %s", b, exc)

    def close(self) -> None:
        self._f.close()


class _Stdout:
    def write(self, data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def close(self) -> None:
        sys.stdout.buffer.flush()


class LogBackend:
    name = "log"

    def __init__(self, opts: LogOptions):
        self.opts = opts
        self._out: RotatingFile | _Stdout = (
            _Stdout()
            if opts.path == "-"
            else RotatingFile(opts.path, opts.max_size_mb * 1024 * 1024, opts.max_backups, opts.max_age_days)
        )
        self.dropped = 0
        self._buffer: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    # --- delivery -------------------------------------------------------------------
    def process(self, event: dict[str, Any]) -> None:
        """Hand one event over. In blocking-strict mode a failed RequestReceived write raises."""
        if self.opts.mode == "batch":
            if len(self._buffer) >= self.opts.batch_buffer_size:
                self.dropped += 1
                return
            self._buffer.append(event)
            self._wake.set()
            return
        try:
            self._write([event])
        except OSError as exc:
            self.dropped += 1
            log.error("cannot write the audit event %s: %s", event.get("auditID"), exc)
            if self.opts.mode == "blocking-strict" and event.get("stage") == "RequestReceived":
                raise AuditWriteError(f"the audit log could not be written: {exc}") from None

    def _write(self, events: list[dict[str, Any]]) -> None:
        data = b"".join([orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in events])
        self._out.write(data)

    # --- batch mode -----------------------------------------------------------------
    def start(self) -> None:
        if self.opts.mode == "batch" and self._task is None:
            self._task = asyncio.create_task(self._run(), name="audit-log-batches")

    async def _run(self) -> None:
        while True:
            if not self._buffer:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if len(self._buffer) < self.opts.batch_max_size and self.opts.batch_max_wait > 0 and not self._closing:
                deadline = time.monotonic() + self.opts.batch_max_wait
                while len(self._buffer) < self.opts.batch_max_size and not self._closing:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.clear()
                    try:
                        async with asyncio.timeout(left):
                            await self._wake.wait()
                    except TimeoutError:
                        break
            batch = self._buffer[: self.opts.batch_max_size]
            del self._buffer[: len(batch)]
            try:
                self._write(batch)
            except OSError as exc:
                self.dropped += len(batch)
                log.error("cannot write %d audit events: %s", len(batch), exc)
            await asyncio.sleep(0)

    async def shutdown(self) -> None:
        """Write what is buffered, then close the file."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        self._out.close()
