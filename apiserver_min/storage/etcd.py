"""The distributed storage backend: etcd v3 over gRPC.

aetcd's high-level client lacks ``limit``/``revision`` on ranges, so this
module speaks etcd's gRPC API directly through aetcd's generated stubs on a
``grpc.aio`` channel.

Keys: every key of the API is stored as ``prefix + key`` (plain
concatenation, no separator added), so several servers or tests can share one
etcd; keys handed back have the prefix stripped.

Compaction is global in etcd. etcd 3.4 does not report the compacted revision
on ranges, so the backend tracks it: ``compact()`` records the revision in
the meta key ``COMPACTED_KEY`` (outside every prefix, because it concerns all
of them), and every ErrCompacted answer (ranges: "at least r + 1"; watches:
the exact ``compact_revision``) raises the known value.

Progress: the watch cache learns that revisions passed outside its keys by
asking for progress. etcd before 3.4.31 / 3.5.13 answers a *requested*
progress notification out of band: it can overtake events still queued for
the stream and name a revision whose events have not arrived yet (upstream
etcd issues 15220 and 17507), and a cache trusting it serves stale
"consistent" lists. Against those versions ``request_progress`` writes a
marker key inside each open watch's range instead; its event arrives in
order, after every earlier event, and the watch turns it into the PROGRESS
event. Marker keys (``PROGRESS_MARK`` appended to the watched prefix) are
never handed out by ``list`` or ``watch``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import AsyncIterator

import grpc
from aetcd.rpc import kv_pb2, rpc_pb2, rpc_pb2_grpc

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

COMPACTED_KEY = b"/orch-meta/compacted-revision"

_ERR_COMPACTED = "required revision has been compacted"
_ERR_FUTURE = "required revision is a future revision"
# Refused before being proposed to raft: safe to retry any request.
_ERR_TOO_MANY = "too many requests"
# The backend's space quota is used up (an alarm stays raised until defragmented).
_ERR_NO_SPACE = "database space exceeded"
# The cluster cannot serve right now (the request may or may not have applied).
_ERR_UNAVAILABLE = (
    "no leader",
    "leader changed",
    "request timed out",
    "timed out due to previous",
    "not capable",
    "stopped",
)
_RETRY_DELAYS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)

_CMP_EQUAL = rpc_pb2.Compare.EQUAL
_CMP_GREATER = rpc_pb2.Compare.GREATER
_TARGET_CREATE = rpc_pb2.Compare.CREATE
_TARGET_MOD = rpc_pb2.Compare.MOD
_EV_DELETE = kv_pb2.Event.DELETE

_IPV4_HOSTPORT = re.compile(r"^\d{1,3}(\.\d{1,3}){3}:\d+$")

# Appended to a watched prefix: the key written to push an in-order progress
# event through that watch (NUL cannot occur in an API object's key).
PROGRESS_MARK = b"\x00orch-watch-progress"
# The first releases whose requested progress notifications are ordered with
# the watch's events (by minor version; later minors are all fixed).
_ORDERED_PROGRESS_SINCE = {(3, 4): (3, 4, 31), (3, 5): (3, 5, 13)}
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def progress_is_ordered(version: str) -> bool:
    """Whether etcd ``version`` (as its Status call reports it) sends requested
    progress notifications in order with the events of the watch stream."""
    m = _VERSION.match(version.strip())
    if not m:
        return False
    major, minor, patch = (int(x) for x in m.groups())
    fixed = _ORDERED_PROGRESS_SINCE.get((major, minor))
    if fixed is not None:
        return (major, minor, patch) >= fixed
    return (major, minor) > (3, 5)


def _prefix_end(key: bytes) -> bytes:
    """etcd's range_end for "every key starting with key"."""
    end = bytearray(key)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # every key >= key


def _reraise_if_task_cancelled() -> None:
    """grpc.aio raises CancelledError from calls whose channel was closed
    (close()); only a cancellation of the running task may propagate as one."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise


def _channel_target(endpoints: list[str]) -> str:
    hosts = [re.sub(r"^[a-z]+://", "", e.strip()).rstrip("/") for e in endpoints if e.strip()]
    if not hosts:
        raise ValueError("etcd: no endpoints given")
    if len(hosts) > 1 and all(_IPV4_HOSTPORT.match(h) for h in hosts):
        return "ipv4:" + ",".join(hosts)  # pick_first fails over between them
    return hosts[0]


class EtcdBackend:
    """The storage contract on an etcd v3 cluster (see module docstring)."""

    name = "etcd"

    def __init__(
        self,
        endpoints: list[str],
        prefix: str = "/registry",
        *,
        timeout: float = 10.0,
        compaction_interval: float = 0.0,
    ):
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        self.endpoints = list(endpoints)
        self.prefix = prefix
        self.timeout = timeout
        self.compaction_interval = compaction_interval
        self._pfx = prefix.encode()
        self._plen = len(self._pfx)
        self._channel: grpc.aio.Channel | None = None
        self._kv: rpc_pb2_grpc.KVStub | None = None
        self._watch_stub: rpc_pb2_grpc.WatchStub | None = None
        self._compacted = 0
        self._compactor: asyncio.Task | None = None
        self._watch_calls: dict = {}  # open watch call -> its progress marker key
        self.server_version = ""
        self.progress_ordered = False  # decided from the server's version at start()

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        if self._channel is not None:
            return
        channel = grpc.aio.insecure_channel(
            _channel_target(self.endpoints),
            options=[
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1),
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.keepalive_timeout_ms", 10_000),
            ],
        )
        try:
            async with asyncio.timeout(self.timeout):
                await channel.channel_ready()
        except asyncio.TimeoutError:
            await channel.close()
            raise UnavailableError(
                f"etcd at {', '.join(self.endpoints)} not reachable within {self.timeout:g}s"
            ) from None
        self._channel = channel
        self._kv = rpc_pb2_grpc.KVStub(channel)
        self._watch_stub = rpc_pb2_grpc.WatchStub(channel)
        await self.compacted_revision()
        await self._detect_progress_ordering()
        if self.compaction_interval > 0:
            self._compactor = asyncio.get_running_loop().create_task(self._compaction_loop(), name="etcd-compaction")

    async def close(self) -> None:
        if self._compactor is not None:
            self._compactor.cancel()
            try:
                await self._compactor
            except (asyncio.CancelledError, Exception):
                pass
            self._compactor = None
        channel, self._channel = self._channel, None
        self._kv = self._watch_stub = None
        if channel is not None:
            await channel.close()

    async def _detect_progress_ordering(self) -> None:
        try:
            status = await self._call(rpc_pb2_grpc.MaintenanceStub(self._channel).Status, rpc_pb2.StatusRequest())
        except StorageError as exc:  # e.g. not permitted: assume the unsafe kind
            log.warning("etcd: cannot read the server version (%s); progress by marker writes", exc)
            self.server_version, self.progress_ordered = "", False
            return
        self.server_version = status.version
        self.progress_ordered = progress_is_ordered(status.version)
        if not self.progress_ordered:
            log.info(
                "etcd %s: requested watch progress is not ordered with events; using marker writes instead",
                status.version or "(unknown version)",
            )

    def _stub(self) -> rpc_pb2_grpc.KVStub:
        kv = self._kv
        if kv is None:
            raise UnavailableError("etcd storage is not open")
        return kv

    # -- helpers -----------------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return self._pfx + key.encode()

    def _kv_out(self, kv) -> KeyValue:
        return KeyValue(kv.key[self._plen :].decode(), kv.value, kv.mod_revision, kv.create_revision)

    def _error(self, exc: grpc.aio.AioRpcError, revision: int = 0) -> StorageError:
        code = exc.code()
        details = exc.details() or ""
        if (
            code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            or _ERR_TOO_MANY in details
            or any(m in details for m in _ERR_UNAVAILABLE)
        ):
            return UnavailableError(f"etcd: {code.name}: {details}")
        if _ERR_NO_SPACE in details:
            return StorageFullError(f"etcd: {code.name}: {details}")
        if _ERR_COMPACTED in details:
            self._compacted = max(self._compacted, revision + 1)
            return CompactedError(revision, self._compacted)
        if _ERR_FUTURE in details:
            return FutureRevisionError(revision, 0)  # current filled in by the caller
        if code == grpc.StatusCode.CANCELLED and self._channel is None:
            return UnavailableError("etcd storage closed")
        return StorageError(f"etcd: {code.name}: {details}")

    async def _call(self, method, request, revision: int = 0):
        for delay in (*_RETRY_DELAYS, None):
            try:
                return await method(request, timeout=self.timeout)
            except grpc.aio.AioRpcError as exc:
                if delay is not None and _ERR_TOO_MANY in (exc.details() or ""):
                    await asyncio.sleep(delay)  # overloaded: back off, then retry
                    continue
                error = self._error(exc, revision)
            except grpc.aio.UsageError as exc:  # channel closed under us
                error = UnavailableError(f"etcd: {exc}")
            except asyncio.CancelledError:
                _reraise_if_task_cancelled()
                error = UnavailableError("etcd storage closed")
            break
        if isinstance(error, FutureRevisionError):
            error = FutureRevisionError(revision, await self.current_revision())
        raise error

    async def _range(self, request: rpc_pb2.RangeRequest, revision: int = 0):
        return await self._call(self._stub().Range, request, revision)

    async def _txn(self, request: rpc_pb2.TxnRequest):
        return await self._call(self._stub().Txn, request)

    # -- revisions ---------------------------------------------------------------

    async def current_revision(self) -> int:
        resp = await self._range(rpc_pb2.RangeRequest(key=COMPACTED_KEY, count_only=True))
        return resp.header.revision

    async def compacted_revision(self) -> int:
        resp = await self._range(rpc_pb2.RangeRequest(key=COMPACTED_KEY))
        if resp.kvs:
            try:
                self._compacted = max(self._compacted, int(resp.kvs[0].value))
            except ValueError:
                pass
        return self._compacted

    # -- writes ------------------------------------------------------------------

    async def create(self, key: str, value: bytes) -> int:
        k = self._key(key)
        resp = await self._txn(
            rpc_pb2.TxnRequest(
                compare=[rpc_pb2.Compare(key=k, target=_TARGET_CREATE, result=_CMP_EQUAL, create_revision=0)],
                success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=value))],
            )
        )
        if not resp.succeeded:
            raise KeyExistsError(key)
        return resp.header.revision

    def _precondition(self, k: bytes, expected: int) -> rpc_pb2.Compare:
        if expected:
            return rpc_pb2.Compare(key=k, target=_TARGET_MOD, result=_CMP_EQUAL, mod_revision=expected)
        return rpc_pb2.Compare(key=k, target=_TARGET_CREATE, result=_CMP_GREATER, create_revision=0)

    def _failed(self, key: str, expected: int, resp) -> StorageError:
        kvs = resp.responses[0].response_range.kvs
        if not kvs:
            return KeyNotFoundError(key)
        return ConflictError(key, expected, kvs[0].mod_revision)

    async def update(self, key: str, value: bytes, expected_mod_revision: int) -> int:
        k = self._key(key)
        resp = await self._txn(
            rpc_pb2.TxnRequest(
                compare=[self._precondition(k, expected_mod_revision)],
                success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=value))],
                failure=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=k, keys_only=True))],
            )
        )
        if not resp.succeeded:
            raise self._failed(key, expected_mod_revision, resp)
        return resp.header.revision

    async def delete(self, key: str, expected_mod_revision: int = 0) -> tuple[int, KeyValue]:
        k = self._key(key)
        resp = await self._txn(
            rpc_pb2.TxnRequest(
                compare=[self._precondition(k, expected_mod_revision)],
                success=[rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=k, prev_kv=True))],
                failure=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=k, keys_only=True))],
            )
        )
        if not resp.succeeded:
            raise self._failed(key, expected_mod_revision, resp)
        prev = resp.responses[0].response_delete_range.prev_kvs
        if not prev:  # cannot happen: the compare saw the key in the same txn
            raise KeyNotFoundError(key)
        return resp.header.revision, self._kv_out(prev[0])

    # -- reads ---------------------------------------------------------------------

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        resp = await self._range(rpc_pb2.RangeRequest(key=self._key(key), revision=revision), revision)
        if not resp.kvs:
            return None
        return self._kv_out(resp.kvs[0])

    async def list(self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0) -> ListResult:
        lo = self._key(prefix)
        end = _prefix_end(lo)
        start = lo
        if start_after:
            after = self._key(start_after) + b"\x00"  # the least key > start_after
            if after > start:
                start = after
        resp = await self._range(
            rpc_pb2.RangeRequest(key=start, range_end=end, limit=max(limit, 0), revision=revision), revision
        )
        plen = self._plen
        items = [
            KeyValue(kv.key[plen:].decode(), kv.value, kv.mod_revision, kv.create_revision)
            for kv in resp.kvs
            if not kv.key.endswith(PROGRESS_MARK)
        ]
        more = bool(resp.more)
        return ListResult(items, revision or resp.header.revision, more, resp.count - len(resp.kvs) if more else 0)

    async def count(self, prefix: str) -> int:
        """Keys under ``prefix``; a progress marker of a watch on ``prefix`` or
        below (see the module docstring) counts too: exact for API resources,
        whose prefixes hold no watch of their own."""
        lo = self._key(prefix)
        resp = await self._range(rpc_pb2.RangeRequest(key=lo, range_end=_prefix_end(lo), count_only=True))
        return resp.count

    # -- watch ---------------------------------------------------------------------

    def watch(self, prefix: str, after_revision: int, prev: bool = True) -> AsyncIterator[Event]:
        return self._watch(prefix, after_revision, prev)

    def _event(self, ev) -> Event:
        prev = self._kv_out(ev.prev_kv) if ev.HasField("prev_kv") else None
        if ev.type == _EV_DELETE:
            kv = ev.kv
            return Event("DELETE", KeyValue(kv.key[self._plen :].decode(), b"", kv.mod_revision, 0), prev)
        return Event("PUT", self._kv_out(ev.kv), prev)

    async def _watch(self, prefix: str, after: int, prev: bool) -> AsyncIterator[Event]:
        # etcd accepts start_revision == compacted revision, and the event at
        # that revision may be gone; the contract refuses after < compacted.
        compacted = await self.compacted_revision()
        if after < compacted:
            raise CompactedError(after, compacted)
        stub = self._watch_stub
        if stub is None:
            raise UnavailableError("etcd storage is not open")
        lo = self._key(prefix)
        call = stub.Watch()
        self._watch_calls[call] = lo + PROGRESS_MARK
        try:
            try:
                await call.write(
                    rpc_pb2.WatchRequest(
                        create_request=rpc_pb2.WatchCreateRequest(
                            key=lo,
                            range_end=_prefix_end(lo),
                            start_revision=after + 1,
                            prev_kv=prev,
                            progress_notify=True,
                        )
                    )
                )
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        raise UnavailableError("etcd closed the watch stream")
                    if resp.compact_revision:
                        self._compacted = max(self._compacted, resp.compact_revision)
                        raise CompactedError(after, resp.compact_revision)
                    if resp.canceled:
                        raise StorageError(f"etcd canceled the watch: {resp.cancel_reason}")
                    if resp.created and resp.header.revision < after:
                        # The store is behind what was seen of it (restored from a snapshot,
                        # or its data lost): the revisions after ``after`` will be other
                        # changes, so whoever watches must list again.
                        raise StorageError(
                            f"etcd's revision {resp.header.revision} is behind the {after} already seen "
                            "(restored or lost data): list again"
                        )
                    if not resp.events:
                        # A progress notification (asked for or periodic): every
                        # event up to the header's revision has been sent.
                        if not resp.created and resp.header.revision > after:
                            after = resp.header.revision
                            yield Event("PROGRESS", KeyValue("", b"", after, 0), None)
                        continue
                    for ev in resp.events:
                        if ev.kv.key.endswith(PROGRESS_MARK):
                            # A marker write (request_progress): every event up to
                            # its revision has come through this stream.
                            after = ev.kv.mod_revision
                            yield Event("PROGRESS", KeyValue("", b"", after, 0), None)
                            continue
                        event = self._event(ev)
                        after = event.kv.mod_revision
                        yield event
            except grpc.aio.AioRpcError as exc:
                raise self._error(exc, after) from None
            except grpc.aio.UsageError as exc:
                raise UnavailableError(f"etcd: {exc}") from None
            except asyncio.CancelledError:
                _reraise_if_task_cancelled()
                raise UnavailableError("etcd storage closed") from None
        finally:
            self._watch_calls.pop(call, None)
            call.cancel()

    async def request_progress(self) -> None:
        if not self.progress_ordered:
            # One marker write per open watch range; the events arrive in order.
            markers = set(self._watch_calls.values())
            if markers:
                await asyncio.gather(
                    *(self._call(self._stub().Put, rpc_pb2.PutRequest(key=m, value=b"")) for m in markers)
                )
            return
        for call in list(self._watch_calls):
            try:
                await call.write(rpc_pb2.WatchRequest(progress_request=rpc_pb2.WatchProgressRequest()))
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass  # the stream is closing; its reader reports that

    # -- compaction ------------------------------------------------------------------

    async def compact(self, revision: int) -> None:
        try:
            await self._call(
                self._stub().Compact, rpc_pb2.CompactionRequest(revision=revision, physical=True), revision
            )
        except CompactedError:
            pass  # already compacted at or beyond revision
        self._compacted = max(self._compacted, revision)
        await self._record_compaction(revision)

    async def _record_compaction(self, revision: int) -> None:
        """Raise COMPACTED_KEY to ``revision`` (never lower it; CAS loop)."""
        for _ in range(10):
            resp = await self._range(rpc_pb2.RangeRequest(key=COMPACTED_KEY))
            mod = 0
            if resp.kvs:
                mod = resp.kvs[0].mod_revision
                try:
                    if int(resp.kvs[0].value) >= revision:
                        return
                except ValueError:
                    pass
            txn = await self._txn(
                rpc_pb2.TxnRequest(
                    compare=[
                        rpc_pb2.Compare(key=COMPACTED_KEY, target=_TARGET_MOD, result=_CMP_EQUAL, mod_revision=mod)
                    ],
                    success=[
                        rpc_pb2.RequestOp(
                            request_put=rpc_pb2.PutRequest(key=COMPACTED_KEY, value=str(revision).encode())
                        )
                    ],
                )
            )
            if txn.succeeded:
                return

    async def _compaction_loop(self) -> None:
        """Every interval, compact to the revision seen one interval earlier
        (the history kept is at least one interval long)."""
        previous = 0
        while True:
            await asyncio.sleep(self.compaction_interval)
            try:
                if previous > self._compacted:
                    await self.compact(previous)
                previous = await self.current_revision()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("etcd compaction failed")
