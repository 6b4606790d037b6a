"""The watch cache: current state, recent history and watcher fan-out in memory.

One storage watch covers the whole key space, so the cache's revision is the
store's revision: every write the server makes lands under the prefix and
arrives here in revision order. That makes "consistent" reads cheap — ask the
backend for its current revision, wait until the cache has seen it, serve
from memory.

Each resource keeps its current objects as stored bytes plus the few parsed
things selectors need (labels, selectable fields), never the whole parsed
object, so ten thousand pods cost little more than their bytes. Watchers get
events through bounded queues; a watcher that falls behind is closed rather
than allowed to slow the writers, and its client re-watches from its last
version.

A JSON watch stream, once its initial and past events are out, attaches a
*sink*: the fan-out then writes each event's shared frame straight to the
connection, synchronously, instead of queueing it and waking the watcher's
task. With a thousand watchers that task wake-up (its future, timer and write
coroutine) cost as much as the TLS write itself (measured: 44 -> 22 us of
server CPU per delivery); the write is one chunk to the transport, and the
transport's own buffer is the queue, bounded in bytes.

A watcher whose field selector pins ``metadata.name`` or ``spec.nodeName`` with ``=``
(every node agent's watch of its Node and of its pods) is indexed by that value, as
upstream's cacher triggers do: an event is offered to the watchers of its object's
value (and of its previous value, so a watcher sees an object leave its selection),
not to every watcher. Without the index, N agents made each node status update and
each pod event cost N selector evaluations: O(N²) server CPU in the node count.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import logging
import sys
import time
from typing import Callable

import orjson

from ..api import names
from ..api.codec import splice_rv
from ..api.kinds import KindInfo
from ..api.selectors import FieldSelector, LabelSelector
from .interface import Backend, CompactedError, Event, KeyValue, StorageError, UnavailableError

log = logging.getLogger("orch-apiserver.watchcache")

HISTORY_SECONDS = 300.0  # the spec's 5 minutes of watch history
HISTORY_MAX_EVENTS = 200_000  # per resource, a memory bound on top of the time window
WATCHER_QUEUE = 2048
# At most this many notes of own writes wait for their storage events (see note_write).
WRITTEN_MAX = 10_000
# A direct (sink) watcher whose connection holds more unsent bytes than this is
# closed: about as many 2 KB events as WATCHER_QUEUE holds.
WATCHER_BUFFER_BYTES = 4 << 20
FELL_BEHIND = "the watcher fell too far behind; watch again from the last resourceVersion"

Sink = Callable[[bytes], bool]


def chunked_transport_sink(transport: asyncio.WriteTransport, limit: int = WATCHER_BUFFER_BYTES) -> Sink:
    """A sink writing each frame as one HTTP/1.1 chunk to ``transport`` (the
    response must be prepared, with chunked encoding and no compression).
    Returns False once the transport is closing or holds more than ``limit``
    unsent bytes: the client does not keep up, and the watcher is dropped."""
    write, size, closing = transport.write, transport.get_write_buffer_size, transport.is_closing

    def sink(frame: bytes) -> bool:
        if closing():
            return False
        write(b"%x\r\n%s\r\n" % (len(frame), frame))
        return size() <= limit

    return sink


@dataclasses.dataclass(slots=True)
class Entry:
    key: str
    raw: bytes  # stored bytes, without metadata.resourceVersion
    rv: int
    namespace: str
    name: str
    labels: dict
    fields: dict
    uid: str = ""
    owners: tuple = ()  # ((uid, apiVersion, kind, name), ...) from metadata.ownerReferences
    finalizers: tuple = ()
    deleting: bool = False
    controller: str = ""  # the uid of the owner reference with controller: true, if any
    _view: dict | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def bytes_with_rv(self) -> bytes:
        return splice_rv(self.raw, self.rv)

    def mentions(self, field: str) -> bool:
        """False when the stored object has no member named ``field`` anywhere: a cheap
        test before decoding it (stored JSON spells every member name literally). True
        may be a false alarm (the name appears as a value)."""
        return b'"%s"' % field.encode() in self.raw

    def object(self) -> dict:
        """The object, decoded anew: the caller's to change."""
        obj = orjson.loads(self.raw)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def view(self) -> dict:
        """The object, decoded once per entry and shared by every reader: never to be
        changed (use :meth:`object` for a copy to edit). An update makes a new entry,
        so a view is never stale."""
        if self._view is None:
            self._view = self.object()
        return self._view


@dataclasses.dataclass(slots=True)
class CacheEvent:
    type: str  # ADDED | MODIFIED | DELETED
    rv: int
    entry: Entry  # for DELETED the last state, with rv = the deletion's revision
    prev: Entry | None
    at: float
    frame: bytes | None = None  # the JSON watch frame, built once and shared by watchers

    def json_frame(self) -> bytes:
        if self.frame is None:
            self.frame = b'{"type":"%s","object":%s}\n' % (self.type.encode(), self.entry.bytes_with_rv())
        return self.frame


class WatcherClosed(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Watcher:
    """One client's subscription to one resource, filtered by scope and selectors."""

    def __init__(
        self, cache: "ResourceCache", namespace: str | None, labels: LabelSelector | None, fields: FieldSelector | None
    ):
        self.cache = cache
        self.namespace = namespace
        self.labels = labels if labels is not None and not labels.empty else None
        self.fields = fields if fields is not None and not fields.empty else None
        self.events: collections.deque[CacheEvent] = collections.deque()
        self._waiter: asyncio.Future | None = None
        self.closed_reason: str | None = None
        self._sink: Sink | None = None
        self.last_rv = 0  # the revision of the last event handed to the sink
        # (namespace, field, value) when the field selector pins a trigger field with "=":
        # the cache then offers this watcher only the events of objects with that value.
        self.trigger: tuple[str | None, str, str] | None = None
        if self.fields is not None:
            for field in names.WATCH_TRIGGER_FIELDS:
                value = self.fields.exact_match(field)
                if value is not None:
                    self.trigger = (namespace, field, value)
                    break

    @property
    def direct(self) -> bool:
        return self._sink is not None

    def attach_sink(self, sink: Sink) -> list[CacheEvent]:
        """Deliver later events as JSON frames through ``sink``, synchronously
        from the fan-out. Returns the events still queued, in which case nothing
        is attached: the caller sends them and asks again, so that the order of
        events holds. Returns [] once attached (or when closed)."""
        if self.events:
            batch = list(self.events)
            self.events.clear()
            return batch
        if self.closed_reason is None:
            self._sink = sink
        return []

    def matches(self, e: Entry | None) -> bool:
        if e is None:
            return False
        if self.namespace is not None and e.namespace != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(e.labels):
            return False
        if self.fields is not None and not self.fields.matches(e.fields):
            return False
        return True

    def filter(self, ev: CacheEvent) -> CacheEvent | None:
        """The event as this watcher should see it, or None."""
        if self.labels is None and self.fields is None:  # the common case, once per watcher per event
            if self.namespace is not None and ev.entry.namespace != self.namespace:
                return None
            return ev
        cur_ok = ev.type != "DELETED" and self.matches(ev.entry)
        prev = ev.prev if ev.type != "DELETED" else ev.entry
        prev_ok = self.matches(prev) if ev.type != "ADDED" else False
        if ev.type == "DELETED":
            return ev if prev_ok else None
        if cur_ok and prev_ok:
            return ev
        if cur_ok:
            return CacheEvent("ADDED", ev.rv, ev.entry, ev.prev, ev.at)
        if prev_ok:
            # The object left the selection: the watcher sees it go, in its new state.
            return CacheEvent("DELETED", ev.rv, ev.entry, ev.prev, ev.at)
        return None

    def offer(self, ev: CacheEvent) -> None:
        if self.closed_reason is not None:
            return
        out = self.filter(ev)
        if out is None:
            return
        sink = self._sink
        if sink is not None:
            self.last_rv = out.rv
            try:
                ok = sink(out.json_frame())
            except (ConnectionError, RuntimeError, OSError) as exc:
                self.close(f"the connection failed: {exc}")
                return
            if not ok:
                self.close(FELL_BEHIND)
            return
        if len(self.events) >= WATCHER_QUEUE:
            self.close(FELL_BEHIND)
            return
        self.events.append(out)
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def close(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
            self._sink = None
            self.cache.remove_watcher(self)
            self._wake()

    async def next_batch(self, timeout: float | None = None) -> list[CacheEvent]:
        """Every queued event (at least one); TimeoutError when none came in time,
        WatcherClosed once closed and drained.

        A plain future per wait, resolved by ``offer``: no task and no queue per
        event, which is what fan-out to a thousand watchers costs most."""
        while True:
            if self.events:
                batch = list(self.events)
                self.events.clear()
                return batch
            if self.closed_reason is not None:
                raise WatcherClosed(self.closed_reason or "closed")
            if timeout is not None and timeout <= 0:
                raise asyncio.TimeoutError
            loop = asyncio.get_running_loop()
            self._waiter = fut = loop.create_future()
            timer = loop.call_later(timeout, fut.cancel) if timeout is not None else None
            try:
                await fut
            except asyncio.CancelledError:
                if fut.cancelled() and not self.events and self.closed_reason is None:
                    # Our own timer, not a cancellation of the task.
                    current = asyncio.current_task()
                    if current is None or not current.cancelling():
                        raise asyncio.TimeoutError from None
                raise
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()


class ResourceCache:
    def __init__(self, kind: KindInfo, prefix: str):
        self.kind = kind
        self.prefix = prefix
        self.items: dict[str, Entry] = {}
        self.history: collections.deque[CacheEvent] = collections.deque()
        self.history_floor = 0  # events with rv > floor are all in ``history``
        # Watchers by the namespace they watch (None: all namespaces), so an event is
        # offered only to watchers that can see it.
        self.watchers_by_ns: dict[str | None, set[Watcher]] = {}
        # Watchers with a trigger (see Watcher.trigger), by it; and how many use each field.
        self.watchers_by_trigger: dict[tuple[str | None, str, str], set[Watcher]] = {}
        self.trigger_fields: collections.Counter[str] = collections.Counter()
        self._sorted_keys: list[str] | None = None
        # While a cache added at run time lists its prefix, the storage events for it
        # wait here (None once filled): those the list already saw are then dropped.
        self.pending: list[Event] | None = None
        # Keys whose stored value no configured key decrypts, with the reason: not
        # served, and reads and lists that would include them fail (see encryption.py).
        self.undecryptable: dict[str, str] = {}

    def undecryptable_in(self, namespace: str | None) -> str | None:
        """The reason of one undecryptable object in the scope, or None when there is none."""
        if not self.undecryptable:
            return None
        scope = self.prefix if namespace is None else f"{self.prefix}{namespace}/"
        for key, reason in self.undecryptable.items():
            if key.startswith(scope):
                return reason
        return None

    def summarize(self, obj: dict) -> tuple:
        """What an entry keeps of the object besides its bytes (namespace, name, labels,
        selectable fields, uid, owners, finalizers, being deleted), as new values: the
        object may change afterwards without changing the summary.

        The namespace, the labels and the selectable fields' values (but the name) are
        interned: objects share them (the namespace, ``app=web``, ``Running``, the node's
        name), which saves about 300 bytes of each cached pod over its own copies."""
        md = obj.get("metadata") or {}
        owners: tuple[tuple[str, str, str, str], ...] = ()
        controller = ""
        refs = md.get("ownerReferences")
        if refs:
            owners = tuple(
                (r.get("uid", ""), r.get("apiVersion", ""), r.get("kind", ""), r.get("name", ""))
                for r in refs
                if isinstance(r, dict)
            )
            controller = next(
                (str(r.get("uid", "")) for r in refs if isinstance(r, dict) and r.get("controller") is True), ""
            )
        labels = md.get("labels")
        fields = self.kind.selectable_fields(obj)
        intern = sys.intern
        for path, value in fields.items():
            if value and path != "metadata.name" and type(value) is str:
                fields[path] = intern(value)
        namespace = md.get("namespace", "") or ""
        return (
            intern(namespace) if type(namespace) is str else namespace,
            md.get("name", "") or "",
            {intern(k): intern(v) if type(v) is str else v for k, v in labels.items()} if labels else {},
            fields,
            md.get("uid", "") or "",
            owners,
            tuple(md.get("finalizers") or ()),
            bool(md.get("deletionTimestamp")),
            controller,
        )

    def make_entry(self, key: str, raw: bytes, rv: int, summary: tuple | None = None) -> Entry:
        """The entry of stored bytes; ``summary`` (see :meth:`summarize`), when the
        writer of these very bytes made it, saves decoding them."""
        return Entry(key, raw, rv, *(summary if summary is not None else self.summarize(orjson.loads(raw))))

    @property
    def watchers(self) -> list[Watcher]:
        return [w for ws in self.watchers_by_ns.values() for w in ws] + [
            w for ws in self.watchers_by_trigger.values() for w in ws
        ]

    def add_watcher(self, w: Watcher) -> None:
        if w.trigger is not None:
            group = self.watchers_by_trigger.setdefault(w.trigger, set())
            if w not in group:
                group.add(w)
                self.trigger_fields[w.trigger[1]] += 1
            return
        self.watchers_by_ns.setdefault(w.namespace, set()).add(w)

    def remove_watcher(self, w: Watcher) -> None:
        if w.trigger is not None:
            group = self.watchers_by_trigger.get(w.trigger)
            if group is not None and w in group:
                group.discard(w)
                if not group:
                    del self.watchers_by_trigger[w.trigger]
                field = w.trigger[1]
                self.trigger_fields[field] -= 1
                if self.trigger_fields[field] <= 0:
                    del self.trigger_fields[field]
            return
        ws = self.watchers_by_ns.get(w.namespace)
        if ws is not None:
            ws.discard(w)
            if not ws:
                del self.watchers_by_ns[w.namespace]

    def _keys(self) -> list[str]:
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self.items)
        return self._sorted_keys

    def sorted_entries(self, namespace: str | None = None) -> list[Entry]:
        if not self.items:  # most kinds most of the time (controllers ask on every pod event)
            return []
        keys, items = self._keys(), self.items
        if namespace is None:
            return [items[k] for k in keys]
        # A namespace's keys are one contiguous run: <prefix><ns>/ up to <prefix><ns>0.
        lo = bisect.bisect_left(keys, f"{self.prefix}{namespace}/")
        hi = bisect.bisect_left(keys, f"{self.prefix}{namespace}0", lo)
        return [items[k] for k in keys[lo:hi]]

    def apply(self, ev: Event, now: float, summary: tuple | None = None) -> CacheEvent:
        key, rev = ev.kv.key, ev.kv.mod_revision
        prev = self.items.get(key)
        if ev.type == "DELETE":
            if prev is None and ev.prev is not None:
                prev = self.make_entry(key, ev.prev.value, ev.prev.mod_revision)
            if prev is None:
                raise StorageError(f"watch cache: delete of unknown key {key}")
            del self.items[key]
            if self._sorted_keys is not None:
                i = bisect.bisect_left(self._sorted_keys, key)
                if i < len(self._sorted_keys) and self._sorted_keys[i] == key:
                    del self._sorted_keys[i]
            gone = dataclasses.replace(prev, rv=rev)
            cev = CacheEvent("DELETED", rev, gone, prev, now)
        else:
            entry = self.make_entry(key, ev.kv.value, rev, summary)
            if prev is None and self._sorted_keys is not None:
                bisect.insort(self._sorted_keys, key)
            self.items[key] = entry
            cev = CacheEvent("MODIFIED" if prev is not None else "ADDED", rev, entry, prev, now)
        self.history.append(cev)
        self._trim(now)
        by_ns = self.watchers_by_ns
        if by_ns:
            for group in (by_ns.get(None), by_ns.get(cev.entry.namespace) if cev.entry.namespace else None):
                if group:
                    for w in tuple(group):
                        w.offer(cev)
        if self.trigger_fields:
            self._offer_by_trigger(cev)
        return cev

    def _offer_by_trigger(self, cev: CacheEvent) -> None:
        """Offer ``cev`` to the indexed watchers of its object's values (and of the values
        it had before, so a watcher sees the object leave its selection)."""
        by_trigger = self.watchers_by_trigger
        ns = cev.entry.namespace or None
        scopes = (None, ns) if ns is not None else (None,)
        for field in tuple(self.trigger_fields):
            cur = cev.entry.fields.get(field, "")
            old = cev.prev.fields.get(field, "") if cev.prev is not None else cur
            for value in (cur,) if old == cur else (cur, old):
                for scope in scopes:
                    group = by_trigger.get((scope, field, value))
                    if group:
                        for w in tuple(group):
                            w.offer(cev)

    def _trim(self, now: float) -> None:
        h = self.history
        while h and (len(h) > HISTORY_MAX_EVENTS or now - h[0].at > HISTORY_SECONDS):
            self.history_floor = h.popleft().rv

    def events_after(self, rv: int) -> list[CacheEvent]:
        if rv < self.history_floor:
            raise CompactedError(rv, self.history_floor)
        return [e for e in self.history if e.rv > rv]

    def close_watchers(self, reason: str) -> None:
        for w in tuple(self.watchers):
            w.close(reason)


class WatchCache:
    """All resource caches, fed by one storage watch."""

    def __init__(
        self,
        backend: Backend,
        kinds: list[KindInfo],
        key_prefix: Callable[[KindInfo], str],
        decode: Callable[[str, bytes], bytes] | None = None,
    ):
        self.backend = backend
        self.key_prefix = key_prefix
        # Turns a stored value into the object's JSON (decryption at rest), raising
        # StorageError for a value it cannot; None when values are stored as they are.
        self.decode = decode
        self.caches: dict[str, ResourceCache] = {}
        for k in kinds:
            p = key_prefix(k)
            if p in self.caches:
                continue  # another version of a kind already cached: its first declaration is the stored one
            c = ResourceCache(k, p)
            self.caches[p] = c
        self.rv = 0
        self.ready = asyncio.Event()
        self._advanced = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.resyncs = 0  # relists after a failed storage watch (history lost)
        self.rewatches = 0  # watches resumed after the store was away (history kept)
        # In-process consumers (controllers): called with (cache, event) for every change,
        # and with (None, None) after every (re)list.
        self.listeners: list[Callable[[ResourceCache | None, CacheEvent | None], None]] = []
        # Summaries of this process's own writes not yet seen on the storage watch, by key:
        # (revision, summary). The event of that revision then needs no decoding.
        self._written: dict[str, tuple[int, tuple]] = {}

    def note_write(self, key: str, rev: int, obj: dict) -> None:
        """The store wrote ``obj`` (encoded as the stored bytes) under ``key`` at ``rev``:
        its summary is taken now, so changes to ``obj`` afterwards do not reach the cache."""
        if rev <= self.rv:
            return  # the event is already applied
        c = self.cache_for_key(key)
        if c is None or c.pending is not None:
            return
        if len(self._written) >= WRITTEN_MAX:
            self._written.clear()  # events lost to a resync: drop the stale notes
        self._written[key] = (rev, c.summarize(obj))

    def cache_for_key(self, key: str) -> ResourceCache | None:
        # Keys look like <prefix><ns>/<name> or <prefix><name>; prefixes end with '/'. The
        # longest prefix that matches is the longest '/'-ended start of the key that is one:
        # a look-up per '/' of the key, from the end, instead of a scan of every prefix.
        caches = self.caches
        i = key.rfind("/")
        while i > 0:
            c = caches.get(key[: i + 1])
            if c is not None:
                return c
            i = key.rfind("/", 0, i)
        return None

    def cache(self, prefix: str) -> ResourceCache:
        return self.caches[prefix]

    async def add_kind(self, kind: KindInfo) -> ResourceCache:
        """A cache for a kind defined at run time (another version of a kind already
        cached shares its cache): its prefix is listed from storage, and the storage
        events that arrive meanwhile are applied after the list, those it saw dropped."""
        p = self.key_prefix(kind)
        existing = self.caches.get(p)
        if existing is not None:
            return existing
        c = ResourceCache(kind, p)
        c.pending = []
        self.caches[p] = c
        try:
            res = await self.backend.list(p)
        except BaseException:
            self._drop(p)
            raise
        for kv in res.items:
            self._fill(c, kv)
        c.history_floor = res.revision
        pending, c.pending = c.pending, None
        for ev in pending:
            if ev.kv.mod_revision > res.revision:
                self._apply(c, ev)
        return c

    def remove_kind(self, kind: KindInfo) -> None:
        """Forget a kind's cache (its definition is gone): its watchers are closed."""
        p = self.key_prefix(kind)
        c = self._drop(p)
        if c is not None:
            c.close_watchers(f"the resource {kind.qualified_resource} is no longer served")

    def _drop(self, prefix: str) -> ResourceCache | None:
        c = self.caches.pop(prefix, None)
        return c

    def _fill(self, cache: ResourceCache, kv: KeyValue) -> None:
        """Put one listed object into its cache (decoded; an undecryptable one is remembered)."""
        try:
            value = self.decode(kv.key, kv.value) if self.decode is not None else kv.value
        except StorageError as exc:
            cache.undecryptable[kv.key] = str(exc)
            log.error("watch cache: %s; the object is not served", exc)
            return
        try:
            cache.items[kv.key] = cache.make_entry(kv.key, value, kv.mod_revision)
        except orjson.JSONDecodeError:
            log.error("stored object %s is not valid JSON; it is not served", kv.key)

    async def start(self) -> None:
        await self._initial_list()
        self._task = asyncio.create_task(self._run(), name="watch-cache")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for c in self.caches.values():
            c.close_watchers("the server is shutting down")

    async def _initial_list(self) -> None:
        self._written.clear()
        res = await self.backend.list("/")
        for c in self.caches.values():
            c.items.clear()
            c._sorted_keys = None
            c.history.clear()
            c.history_floor = res.revision
            c.undecryptable.clear()
        for kv in res.items:
            cache = self.cache_for_key(kv.key)
            if cache is None:
                continue
            self._fill(cache, kv)
        self.rv = res.revision
        self.ready.set()
        self._signal()
        for listener in self.listeners:
            listener(None, None)

    def _signal(self) -> None:
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def _run(self) -> None:
        backoff = 0.1
        relist = False
        while True:
            try:
                if relist:
                    await self._initial_list()
                    relist = False
                # No previous values: the cache holds them (a DELETE's last state is its entry).
                async for ev in self.backend.watch("/", self.rv, prev=False):
                    self._dispatch(ev)
                    backoff = 0.1
                raise UnavailableError("the storage watch ended")
            except asyncio.CancelledError:
                raise
            except UnavailableError as exc:
                # The store is away (restarting, unreachable) but keeps its history: once it
                # answers, the watch resumes after the cache's revision. Nothing is missed, so
                # the cache's history and its watchers carry on and no relist is needed.
                self.rewatches += 1
                log.warning("storage watch interrupted (%s); watching again after revision %d", exc, self.rv)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception as exc:  # noqa: BLE001 - any other failure means: resynchronise
                log.warning("storage watch failed (%s); relisting", exc)
                self.resyncs += 1
                for c in self.caches.values():
                    c.close_watchers("the watch cache is being resynchronised; watch again")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                relist = True

    def _dispatch(self, ev: Event) -> None:
        if ev.type == "PROGRESS":
            if ev.kv.mod_revision > self.rv:
                self.rv = ev.kv.mod_revision
                self._signal()
            return
        c = self.cache_for_key(ev.kv.key)
        if c is not None:
            if c.pending is not None:
                c.pending.append(ev)
            else:
                self._apply(c, ev)
        if ev.kv.mod_revision > self.rv:
            self.rv = ev.kv.mod_revision
            self._signal()

    def _apply(self, c: ResourceCache, ev: Event) -> None:
        if self.decode is not None:
            ev = self._decoded(c, ev)
            if ev.type == "PUT" and ev.kv.key in c.undecryptable:
                return
        summary = None
        note = self._written.get(ev.kv.key) if self._written else None
        if note is not None and note[0] <= ev.kv.mod_revision:
            del self._written[ev.kv.key]
            if note[0] == ev.kv.mod_revision and ev.type == "PUT":
                summary = note[1]
        try:
            cev = c.apply(ev, time.monotonic(), summary)
        except (orjson.JSONDecodeError, StorageError) as exc:
            log.error("watch cache: skipping event for %s: %s", ev.kv.key, exc)
        else:
            for listener in self.listeners:
                listener(c, cev)
            if cev.prev is not None:
                # The replaced version's decoded view served this event's readers; the
                # history need not keep it (whoever still holds the dict keeps it alive).
                cev.prev._view = None

    def _decoded(self, c: ResourceCache, ev: Event) -> Event:
        """The event with its values decoded; an undecryptable value is remembered, not served."""
        assert self.decode is not None
        key = ev.kv.key
        prev = ev.prev
        if prev is not None:
            try:
                prev = KeyValue(key, self.decode(key, prev.value), prev.mod_revision, prev.create_revision)
            except StorageError:
                prev = None  # the cache's own entry (if any) stands in for it
        if ev.type != "PUT":
            c.undecryptable.pop(key, None)
            return Event(ev.type, ev.kv, prev)
        try:
            kv = KeyValue(key, self.decode(key, ev.kv.value), ev.kv.mod_revision, ev.kv.create_revision)
        except StorageError as exc:
            log.error("watch cache: %s; the object is not served", exc)
            c.undecryptable[key] = str(exc)
            if c.items.pop(key, None) is not None:
                c._sorted_keys = None
            return ev
        c.undecryptable.pop(key, None)
        return Event(ev.type, kv, prev)

    async def wait_for(self, rv: int, timeout: float) -> bool:
        """Wait until the cache has seen revision ``rv``; False on timeout."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.rv < rv:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            waiter = self._advanced
            try:
                async with asyncio.timeout(remaining):
                    await waiter.wait()
            except asyncio.TimeoutError:
                return self.rv >= rv
        return True

    async def sync(self, timeout: float = 3.0) -> int | None:
        """Bring the cache up to the store's current revision (a consistent read).

        Returns the cache revision, or None when the cache could not catch up in
        time (the caller then reads from storage)."""
        current = await self.backend.current_revision()
        if self.rv >= current:
            return self.rv
        # Usually the events are just in flight; if not, revisions passed outside
        # our keys (another tenant of etcd, a compaction marker): ask for progress.
        if await self.wait_for(current, min(0.05, timeout)):
            return self.rv
        await self.backend.request_progress()
        if await self.wait_for(current, timeout):
            return self.rv
        return None

    def watcher_count(self) -> int:
        return sum(len(c.watchers) for c in self.caches.values())

    def object_counts(self) -> dict[str, int]:
        return {c.kind.qualified_resource: len(c.items) for c in self.caches.values()}
