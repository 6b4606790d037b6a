"""The embedded storage backend: one SQLite file in WAL mode.

Layout
------
``log``      one row per write; ``id`` *is* the global revision. A delete
             appends a tombstone (``value IS NULL``). ``prev`` points at the
             row this write replaced (NULL for a create), which gives watch
             events their ``prev`` and lets compaction find superseded rows
             without scanning by key.
``current``  key -> id of its live row (deleted keys are absent). Newest reads
             are a key-ordered scan of this table joined to ``log`` by primary
             key: 10k keys in ~28 ms against ~56 ms for the correlated
             ``MAX(id)`` subquery (which also slows down as history grows).
``commits``  (last revision of a commit, commit time), times never
             decreasing: what time-based compaction reads to keep
             ``retention_seconds`` of history.
``meta``     the compacted revision.

Everything runs in the event loop thread (an executor halves throughput).
Writes issued during one loop iteration are applied and committed in one
transaction (group commit); each caller's future resolves after COMMIT with
its own revision. ``synchronous=NORMAL`` with WAL: a COMMIT has reached the
operating system when it returns, so it survives kill -9 of this process (not
a power cut). The file is opened in exclusive locking mode: the revision
counter lives in this process, so a second writer must not exist.
"""

from __future__ import annotations

import _sqlite3
import asyncio
import builtins
import collections
import ctypes
import logging
import os
import sqlite3
import time
from typing import AsyncIterator, Callable

from .interface import (
    CompactedError,
    ConflictError,
    Event,
    FutureRevisionError,
    KeyExistsError,
    KeyNotFoundError,
    KeyValue,
    ListResult,
    StorageError,
    StorageFullError,
    UnavailableError,
)

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    id      INTEGER PRIMARY KEY,
    key     TEXT    NOT NULL,
    created INTEGER NOT NULL,
    prev    INTEGER,
    value   BLOB
);
CREATE INDEX IF NOT EXISTS log_key_id ON log (key, id);
CREATE TABLE IF NOT EXISTS current (
    key TEXT PRIMARY KEY,
    id  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS commits (
    rev INTEGER PRIMARY KEY,
    ts  REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS commits_ts ON commits (ts);
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Op kinds in the pending write queue.
_CREATE, _UPDATE, _DELETE = 0, 1, 2

_WATCH_PAGE = 1000  # rows per history read while a watcher catches up
_COMPACT_STEP = 5000  # revisions per compaction transaction (keeps each short)


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``
    (None: no upper bound). Code point order equals SQLite's BINARY order on
    UTF-8 text."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code < 0x10FFFF:
            code += 1
            if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be stored in UTF-8
                code = 0xE000
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def _range_clause(prefix: str, column: str = "key") -> tuple[str, list]:
    end = prefix_end(prefix)
    if end is None:
        return f"{column} >= ?", [prefix]
    return f"{column} >= ? AND {column} < ?", [prefix, end]


# A gauge of SQLite's own heap (page cache, schemas, prepared statements) in this process.
MEMORY_METRIC = "orch_storage_sqlite_memory_bytes"


def _memory_used_reader() -> Callable[[], int] | None:
    """SQLite's ``sqlite3_memory_used()`` from the library the ``sqlite3`` module runs on
    (looked up through that module's extension, so a static build counts too); None when it
    cannot be found or the library keeps no memory statistics (built with memstatus off)."""
    try:
        lib = ctypes.CDLL(getattr(_sqlite3, "__file__", None))
        used, option_used = lib.sqlite3_memory_used, lib.sqlite3_compileoption_used
    except (OSError, AttributeError, TypeError):
        return None
    used.restype, used.argtypes = ctypes.c_int64, []
    option_used.restype, option_used.argtypes = ctypes.c_int, [ctypes.c_char_p]
    if option_used(b"DEFAULT_MEMSTATUS=0"):
        return None
    return used


class _Watcher:
    __slots__ = ("prefix", "queue", "maxsize", "waiter", "overflowed", "error")

    def __init__(self, prefix: str, maxsize: int):
        self.prefix = prefix
        self.queue: collections.deque[Event] = collections.deque()
        self.maxsize = maxsize
        self.waiter: asyncio.Future | None = None
        self.overflowed = False
        self.error: BaseException | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class SqliteBackend:
    """The storage contract on one SQLite file (see module docstring)."""

    name = "sqlite"

    def __init__(
        self,
        path: str,
        *,
        compaction_interval: float = 60.0,
        retention_seconds: float = 300.0,
        watch_queue_size: int = 10000,
    ):
        self.path = str(path)
        self.compaction_interval = compaction_interval
        self.retention_seconds = retention_seconds
        self.watch_queue_size = watch_queue_size
        self._db: sqlite3.Connection | None = None
        self._rev = 0
        self._compacted = 0
        self._last_commit_time = 0.0
        self._pending: list[tuple] = []
        self._flush_scheduled = False
        self._watchers: set[_Watcher] = set()
        self._compactor: asyncio.Task | None = None
        self._compact_lock = asyncio.Lock()
        self._closed = False
        self.watch_overflows = 0  # slow watchers sent back to the log (a metric)
        self._memory_used = _memory_used_reader()

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        if self._db is not None:
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise UnavailableError(f"sqlite: cannot open {self.path}: {exc}") from exc
        try:
            db.execute("PRAGMA busy_timeout = 0")
            db.execute("PRAGMA locking_mode = EXCLUSIVE")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise UnavailableError(f"sqlite: {self.path}: cannot use WAL (journal_mode={mode})")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA cache_size = -65536")  # 64 MiB page cache
            db.execute("PRAGMA temp_store = MEMORY")
            # The schema write takes the exclusive lock and keeps it.
            db.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('compacted', 0)")
            db.execute("COMMIT")
            (compacted,) = db.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()
            (max_id,) = db.execute("SELECT MAX(id) FROM log").fetchone()
            (last_ts,) = db.execute("SELECT MAX(ts) FROM commits").fetchone()
        except sqlite3.OperationalError as exc:
            db.close()
            raise UnavailableError(f"sqlite: {self.path}: {exc}") from exc
        except BaseException:
            db.close()
            raise
        self._db = db
        self._compacted = compacted
        self._last_commit_time = last_ts or 0.0
        # Compaction may have removed the newest row (a tombstone): the
        # compacted revision is then the floor of the counter.
        self._rev = max(max_id or 0, compacted)
        self._closed = False
        if self.compaction_interval > 0:
            self._compactor = asyncio.get_running_loop().create_task(
                self._compaction_loop(), name=f"sqlite-compaction:{self.path}"
            )

    async def close(self) -> None:
        if self._db is None:
            return
        if self._compactor is not None:
            self._compactor.cancel()
            try:
                await self._compactor
            except (asyncio.CancelledError, Exception):
                pass
            self._compactor = None
        if self._pending:
            self._flush()
        self._closed = True
        for watcher in list(self._watchers):
            watcher.error = UnavailableError("storage closed")
            watcher.wake()
        self._watchers.clear()
        db, self._db = self._db, None
        db.close()

    def _conn(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            raise UnavailableError("sqlite storage is not open")
        return db

    def render_metrics(self) -> list[str]:
        """Prometheus lines: the bytes SQLite holds in this process (its page cache up to
        the cache size, schemas, statements); nothing where the library cannot say."""
        if self._memory_used is None:
            return []
        return [
            f"# HELP {MEMORY_METRIC} Bytes of memory SQLite holds in this process "
            "(page cache, schemas, prepared statements).",
            f"# TYPE {MEMORY_METRIC} gauge",
            f"{MEMORY_METRIC} {self._memory_used()}",
        ]

    # -- revisions -----------------------------------------------------------

    async def current_revision(self) -> int:
        self._conn()
        return self._rev

    async def compacted_revision(self) -> int:
        self._conn()
        return self._compacted

    def _check_read_revision(self, revision: int) -> None:
        if revision > self._rev:
            raise FutureRevisionError(revision, self._rev)
        if revision < self._compacted:
            raise CompactedError(revision, self._compacted)

    # -- writes (group commit) -------------------------------------------------

    def _submit(self, op: tuple) -> asyncio.Future:
        self._conn()
        future = asyncio.get_running_loop().create_future()
        self._pending.append((*op, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return future

    async def create(self, key: str, value: bytes) -> int:
        return await self._submit((_CREATE, key, bytes(value), 0))

    async def update(self, key: str, value: bytes, expected_mod_revision: int) -> int:
        return await self._submit((_UPDATE, key, bytes(value), expected_mod_revision))

    async def delete(self, key: str, expected_mod_revision: int = 0) -> tuple[int, KeyValue]:
        return await self._submit((_DELETE, key, None, expected_mod_revision))

    def _flush(self) -> None:
        """Apply every pending write in one transaction, then resolve futures
        and feed watchers. Runs as a loop callback: nothing interleaves."""
        self._flush_scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        db = self._db
        if db is None:
            for op in batch:
                if not op[-1].done():
                    op[-1].set_exception(UnavailableError("sqlite storage is closed"))
            return

        base = self._rev
        try:
            # State of every touched key: key -> (id, created, value) or None.
            keys = list({op[1] for op in batch})
            state: dict[str, tuple[int, int, bytes] | None] = dict.fromkeys(keys)
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for key, rid, created, value in db.execute(
                    "SELECT c.key, l.id, l.created, l.value FROM current c "
                    f"JOIN log l ON l.id = c.id WHERE c.key IN ({marks})",
                    chunk,
                ):
                    state[key] = (rid, created, value)

            rev = base
            rows: list[tuple] = []
            results: list = []  # per op: ("ok", result, Event) or ("err", exc)
            for kind, key, value, expected, _future in batch:
                cur = state[key]
                if kind == _CREATE:
                    if cur is not None:
                        results.append(("err", KeyExistsError(key)))
                        continue
                    rev += 1
                    rows.append((rev, key, rev, None, value))
                    state[key] = (rev, rev, value)
                    results.append(("ok", rev, ("PUT", key, value, rev, rev, None)))
                elif kind == _UPDATE:
                    if cur is None:
                        results.append(("err", KeyNotFoundError(key)))
                        continue
                    if expected and cur[0] != expected:
                        results.append(("err", ConflictError(key, expected, cur[0])))
                        continue
                    rev += 1
                    rows.append((rev, key, cur[1], cur[0], value))
                    state[key] = (rev, cur[1], value)
                    results.append(("ok", rev, ("PUT", key, value, rev, cur[1], cur)))
                else:
                    if cur is None:
                        results.append(("err", KeyNotFoundError(key)))
                        continue
                    if expected and cur[0] != expected:
                        results.append(("err", ConflictError(key, expected, cur[0])))
                        continue
                    rev += 1
                    rows.append((rev, key, 0, cur[0], None))
                    state[key] = None
                    prev = KeyValue(key, cur[2], cur[0], cur[1])
                    results.append(("ok", (rev, prev), ("DELETE", key, b"", rev, 0, cur)))

            if rows:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany("INSERT INTO log (id, key, created, prev, value) VALUES (?, ?, ?, ?, ?)", rows)
                    touched = {row[1] for row in rows}
                    live: list[tuple[str, int]] = []
                    dead: list[tuple[str]] = []
                    for k in touched:
                        kept = state[k]
                        if kept is None:
                            dead.append((k,))
                        else:
                            live.append((k, kept[0]))
                    if live:
                        db.executemany(
                            "INSERT INTO current (key, id) VALUES (?, ?) "
                            "ON CONFLICT (key) DO UPDATE SET id = excluded.id",
                            live,
                        )
                    if dead:
                        db.executemany("DELETE FROM current WHERE key = ?", dead)
                    now = max(time.time(), self._last_commit_time)
                    db.execute("INSERT INTO commits (rev, ts) VALUES (?, ?)", (rev, now))
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                self._rev = rev
                self._last_commit_time = now
        except Exception as exc:
            error: StorageError
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                # Nothing was committed and the file stays sound: the caller is
                # told, the operator too (once per batch, without a traceback).
                error = StorageFullError(f"sqlite: {self.path}: {exc} (no space left for the database)")
                log.error("%s: %d writes refused", error, len(batch))
            else:
                log.exception("sqlite group commit of %d writes failed", len(batch))
                error = exc if isinstance(exc, StorageError) else UnavailableError(f"sqlite: {exc}")
            for op in batch:
                if not op[-1].done():
                    op[-1].set_exception(error)
            return

        events: list[Event] = []
        want_events = bool(self._watchers)
        for op, result in zip(batch, results):
            future = op[-1]
            if result[0] == "err":
                if not future.done():
                    future.set_exception(result[1])
                continue
            if not future.done():
                future.set_result(result[1])
            if want_events:
                etype, key, value, mod, created, prev = result[2]
                events.append(
                    Event(
                        etype,
                        KeyValue(key, value, mod, created),
                        KeyValue(key, prev[2], prev[0], prev[1]) if prev is not None else None,
                    )
                )
        if events:
            self._fan_out(events)

    def _fan_out(self, events: list[Event]) -> None:
        for watcher in list(self._watchers):
            prefix = watcher.prefix
            matched = [e for e in events if e.kv.key.startswith(prefix)] if prefix else events
            if not matched:
                continue
            if len(watcher.queue) + len(matched) > watcher.maxsize:
                # A slow consumer: drop its queue and let it re-read the log
                # from where it is (see watch()); writers never wait for it.
                watcher.overflowed = True
                watcher.queue.clear()
                self.watch_overflows += 1
                self._watchers.discard(watcher)
            else:
                watcher.queue.extend(matched)
            watcher.wake()

    # -- reads -------------------------------------------------------------------

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        db = self._conn()
        if revision and revision != self._rev:
            self._check_read_revision(revision)
            row = db.execute(
                "SELECT value, id, created FROM log WHERE key = ? AND id <= ? ORDER BY id DESC LIMIT 1", (key, revision)
            ).fetchone()
        else:
            row = db.execute(
                "SELECT l.value, l.id, l.created FROM current c JOIN log l ON l.id = c.id WHERE c.key = ?", (key,)
            ).fetchone()
        if row is None or row[0] is None:
            return None
        return KeyValue(key, row[0], row[1], row[2])

    async def list(self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0) -> ListResult:
        db = self._conn()
        if revision and revision != self._rev:
            self._check_read_revision(revision)
            at = revision
        else:
            at = self._rev
            revision = 0
        where, args = _range_clause(prefix, "c.key" if not revision else "l.key")
        if start_after and start_after >= prefix:
            where += " AND " + ("c.key" if not revision else "l.key") + " > ?"
            args.append(start_after)
        fetch = limit + 1 if limit > 0 else -1
        if not revision:
            sql = (
                "SELECT c.key, l.value, l.id, l.created FROM current c "
                f"JOIN log l ON l.id = c.id WHERE {where} ORDER BY c.key LIMIT ?"
            )
            rows = db.execute(sql, (*args, fetch)).fetchall()
        else:
            sql = (
                "SELECT l.key, l.value, l.id, l.created FROM log l "
                f"WHERE {where} AND l.id <= ? AND l.id = "
                "(SELECT MAX(x.id) FROM log x WHERE x.key = l.key AND x.id <= ?) "
                "AND l.value IS NOT NULL ORDER BY l.key LIMIT ?"
            )
            rows = db.execute(sql, (*args, at, at, fetch)).fetchall()
        more = limit > 0 and len(rows) > limit
        if more:
            del rows[limit:]
        items = [KeyValue(*row) for row in rows]
        remaining = 0
        if more:
            last = items[-1].key
            if not revision:
                where2, args2 = _range_clause(prefix)
                (remaining,) = db.execute(
                    f"SELECT COUNT(*) FROM current WHERE {where2} AND key > ?", (*args2, last)
                ).fetchone()
            else:
                where2, args2 = _range_clause(prefix, "l.key")
                (remaining,) = db.execute(
                    f"SELECT COUNT(*) FROM log l WHERE {where2} AND l.key > ? AND l.id <= ? "
                    "AND l.id = (SELECT MAX(x.id) FROM log x WHERE x.key = l.key AND x.id <= ?) "
                    "AND l.value IS NOT NULL",
                    (*args2, last, at, at),
                ).fetchone()
        return ListResult(items, at, more, remaining)

    async def count(self, prefix: str) -> int:
        db = self._conn()
        where, args = _range_clause(prefix)
        (n,) = db.execute(f"SELECT COUNT(*) FROM current WHERE {where}", args).fetchone()
        return n

    # -- watch -----------------------------------------------------------------

    async def request_progress(self) -> None:
        # Queued behind every event already fanned out, so the revision is a true bound.
        for watcher in list(self._watchers):
            if not watcher.overflowed:
                watcher.queue.append(Event("PROGRESS", KeyValue("", b"", self._rev, 0), None))
                watcher.wake()

    def watch(self, prefix: str, after_revision: int, prev: bool = True) -> AsyncIterator[Event]:
        # The previous values are at hand here (one join, or in memory): given either way.
        return self._watch(prefix, after_revision)

    def _history_page(self, prefix: str, after: int) -> builtins.list[Event]:  # `list` is a method here
        where, args = _range_clause(prefix, "l.key")
        rows = (
            self._conn()
            .execute(
                "SELECT l.id, l.key, l.value, l.created, p.id, p.value, p.created "
                "FROM log l LEFT JOIN log p ON p.id = l.prev "
                f"WHERE l.id > ? AND {where} ORDER BY l.id LIMIT ?",
                (after, *args, _WATCH_PAGE),
            )
            .fetchall()
        )
        events = []
        for rid, key, value, created, pid, pvalue, pcreated in rows:
            prev = KeyValue(key, pvalue, pid, pcreated) if pid is not None else None
            if value is None:
                events.append(Event("DELETE", KeyValue(key, b"", rid, 0), prev))
            else:
                events.append(Event("PUT", KeyValue(key, value, rid, created), prev))
        return events

    async def _watch(self, prefix: str, after: int) -> AsyncIterator[Event]:
        watcher = _Watcher(prefix, self.watch_queue_size)
        try:
            while True:
                # Catch up from the log. Reading the last page and registering
                # for live events happen in one synchronous step, so no commit
                # can fall between them: no gap, no duplicate.
                while True:
                    if self._closed or self._db is None:
                        raise UnavailableError("storage closed")
                    if after < self._compacted:
                        raise CompactedError(after, self._compacted)
                    page = self._history_page(prefix, after)
                    if len(page) < _WATCH_PAGE:
                        watcher.overflowed = False
                        watcher.queue.clear()
                        self._watchers.add(watcher)
                        after = max(after, self._rev)
                        for event in page:
                            yield event
                        break
                    for event in page:
                        after = event.kv.mod_revision
                        yield event
                # Live: events arrive from _fan_out after each commit.
                while True:
                    if watcher.queue:
                        event = watcher.queue.popleft()
                        if event.type == "PROGRESS":
                            # Everything through ``after`` (or later) is delivered.
                            after = max(after, event.kv.mod_revision)
                            yield Event("PROGRESS", KeyValue("", b"", after, 0), None)
                            continue
                        if event.kv.mod_revision <= after:
                            continue  # watching from a revision in the future
                        after = event.kv.mod_revision
                        yield event
                        continue
                    if watcher.error is not None:
                        raise watcher.error
                    if watcher.overflowed:
                        # Resume from the last event handed out; it is in the log.
                        break
                    watcher.waiter = asyncio.get_running_loop().create_future()
                    try:
                        await watcher.waiter
                    finally:
                        watcher.waiter = None
        finally:
            self._watchers.discard(watcher)

    # -- compaction ------------------------------------------------------------

    async def compact(self, revision: int) -> None:
        self._conn()
        if revision > self._rev:
            raise FutureRevisionError(revision, self._rev)
        async with self._compact_lock:
            while self._compacted < revision:
                if self._db is None:
                    raise UnavailableError("sqlite storage is closed")
                self._compact_step(min(revision, self._compacted + _COMPACT_STEP))
                await asyncio.sleep(0)

    def _compact_step(self, new: int) -> None:
        db = self._conn()
        old = self._compacted
        db.execute("BEGIN IMMEDIATE")
        try:
            # Every row superseded at or below `new` is the `prev` of a later
            # row at or below `new`; tombstones at or below `new` go too.
            db.execute(
                "DELETE FROM log WHERE id IN (SELECT prev FROM log WHERE id > ? AND id <= ? AND prev IS NOT NULL)",
                (old, new),
            )
            db.execute("DELETE FROM log WHERE id > ? AND id <= ? AND value IS NULL", (old, new))
            db.execute("DELETE FROM commits WHERE rev <= ?", (new,))
            db.execute("UPDATE meta SET value = ? WHERE name = 'compacted'", (new,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self._compacted = new

    def _retention_revision(self) -> int:
        """The newest revision committed more than retention_seconds ago."""
        cutoff = time.time() - self.retention_seconds
        row = (
            self._conn()
            .execute("SELECT rev FROM commits WHERE ts < ? ORDER BY ts DESC, rev DESC LIMIT 1", (cutoff,))
            .fetchone()
        )
        return row[0] if row else 0

    async def compact_expired(self) -> int:
        """One pass of time-based compaction; returns the compacted revision."""
        target = self._retention_revision()
        if target > self._compacted:
            await self.compact(target)
        return self._compacted

    async def _compaction_loop(self) -> None:
        while True:
            await asyncio.sleep(self.compaction_interval)
            try:
                await self.compact_expired()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sqlite compaction failed")
