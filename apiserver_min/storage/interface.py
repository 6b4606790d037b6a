"""The storage backend contract shared by the SQLite and etcd implementations.

Keys are strings such as ``/registry/pods/default/web``; values are opaque
bytes (the API server stores canonical JSON). Every successful write moves one
global, strictly increasing revision; an object's ``mod_revision`` is the
revision of its last write and is what the API exposes as ``resourceVersion``.
"""

from __future__ import annotations

import dataclasses
from typing import AsyncIterator, Protocol


class StorageError(Exception):
    """Base of every error a backend raises on purpose."""


class KeyExistsError(StorageError):
    def __init__(self, key: str):
        super().__init__(f"key {key!r} already exists")
        self.key = key


class KeyNotFoundError(StorageError):
    def __init__(self, key: str):
        super().__init__(f"key {key!r} not found")
        self.key = key


class ConflictError(StorageError):
    """A compare-and-swap precondition failed: the key changed since ``expected``."""

    def __init__(self, key: str, expected: int, actual: int):
        super().__init__(f"key {key!r} is at revision {actual}, not {expected}")
        self.key, self.expected, self.actual = key, expected, actual


class CompactedError(StorageError):
    """The asked-for revision is older than the retained history."""

    def __init__(self, revision: int, compacted: int):
        super().__init__(f"revision {revision} has been compacted (oldest kept: {compacted + 1})")
        self.revision, self.compacted = revision, compacted


class FutureRevisionError(StorageError):
    """The asked-for revision is newer than anything stored."""

    def __init__(self, revision: int, current: int):
        super().__init__(f"revision {revision} is newer than the current revision {current}")
        self.revision, self.current = revision, current


class TransformError(StorageError):
    """A stored value cannot be turned back into the object (encryption at rest: no
    configured key decrypts it). Reads of that object fail; others are unaffected."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"unable to transform key {key!r}: {reason}")
        self.key = key
        self.reason = reason


class UnavailableError(StorageError):
    """The backend cannot be reached (etcd down, database closed)."""


class StorageFullError(StorageError):
    """The backend has no room for the write: the filesystem holding the SQLite
    database is full, or etcd's space quota is exceeded. Nothing was written;
    writes succeed again once room is made."""


@dataclasses.dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int


@dataclasses.dataclass(frozen=True, slots=True)
class ListResult:
    items: list[KeyValue]
    revision: int  # the snapshot revision the list was read at
    more: bool  # True when ``limit`` cut the result
    remaining: int  # items after the last returned one (0 when not ``more``)


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One change. ``type`` is ``"PUT"`` or ``"DELETE"`` (or ``"PROGRESS"``, see
    :meth:`Backend.request_progress`).

    For a PUT, ``kv`` is the new value and ``prev`` the old one (None on create);
    for a DELETE, ``kv.value`` is empty, ``kv.mod_revision`` is the deletion's
    revision and ``prev`` is the last value before deletion.
    """

    type: str
    kv: KeyValue
    prev: KeyValue | None


class Backend(Protocol):
    name: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def current_revision(self) -> int: ...
    async def compacted_revision(self) -> int: ...

    async def create(self, key: str, value: bytes) -> int:
        """Store a new key; KeyExistsError if present. Returns the new revision."""

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        """The newest value, or the value as of ``revision`` (CompactedError /
        FutureRevisionError outside the kept range)."""

    async def update(self, key: str, value: bytes, expected_mod_revision: int) -> int:
        """Compare-and-swap: replace only if the key's mod_revision equals
        ``expected_mod_revision`` (ConflictError otherwise, KeyNotFoundError
        when absent). ``expected_mod_revision=0`` replaces whatever is there
        (still KeyNotFoundError when absent). Returns the new revision;
        ``create_revision`` is kept."""

    async def delete(self, key: str, expected_mod_revision: int = 0) -> tuple[int, KeyValue]:
        """Delete (conditionally when expected_mod_revision != 0). Returns the
        deletion's revision and the last value."""

    async def list(self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0) -> ListResult:
        """Keys under ``prefix`` in key order, as of ``revision`` (0 = newest),
        strictly after ``start_after``, at most ``limit`` (0 = all).
        ``ListResult.revision`` is the snapshot read (pass it back as
        ``revision`` to page consistently). Older revisions: CompactedError /
        FutureRevisionError as for ``get``."""

    async def count(self, prefix: str) -> int: ...

    def watch(self, prefix: str, after_revision: int, prev: bool = True) -> AsyncIterator[Event]:
        """Every change under ``prefix`` with revision > ``after_revision``, in
        revision order, then live changes, without gaps or duplicates.

        With ``prev=False`` the events need not carry ``prev`` (the watcher keeps
        the old values itself): etcd then does not send every previous value.

        The iterator raises CompactedError when ``after_revision`` is below
        the compacted revision (history gone: re-list), UnavailableError when
        the backend closes or becomes unreachable (restart the watch after the
        last revision seen). A slow consumer never blocks writers. Close the
        iterator (``aclose()``) when done with it."""

    async def compact(self, revision: int) -> None:
        """Drop history at or below ``revision`` (current values stay).

        Afterwards reads at ``revision`` or later and watches with
        ``after_revision >= revision`` still work; older ones raise
        CompactedError. At or below the compacted revision: nothing to do.
        Beyond the current revision: FutureRevisionError."""

    async def request_progress(self) -> None:
        """Ask every open watch to report progress: each yields, after the events
        it has already queued, an Event of type ``"PROGRESS"`` whose
        ``kv.mod_revision`` is a revision through which all its events were
        delivered (``kv.key`` empty). Watches may also report progress unasked.
        This is how a watcher learns that revisions outside its prefix passed."""
