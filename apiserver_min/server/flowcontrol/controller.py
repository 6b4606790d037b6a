"""API priority and fairness: the request filter and the configuration it follows.

Every request (after authentication and impersonation, before authorization) is
classified to a FlowSchema and its priority level (:mod:`.classifier`), takes seats
there (:mod:`.levels`) or waits for them, and is answered 429 with ``Retry-After`` when
its level rejects it or it waited longer than the wait limit. The response names the
matched objects in ``X-Orch-PF-FlowSchema-UID`` / ``X-Orch-PF-PriorityLevel-UID``.

Watches and exec/attach/port-forward (and the other long-running requests) hold their
seats only until their response starts. The configuration is read from the watch cache:
a change to a FlowSchema or PriorityLevelConfiguration is in effect on the next turn
of the event loop. Each FlowSchema's ``Dangling`` condition says whether its priority
level exists (a schema naming a missing level is skipped, as upstream).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextvars
import logging
import time
from typing import Any, Mapping

import orjson

from ...api import names
from ...api import status as st
from ...api.helpers import timestamp
from ...api.kinds import KindInfo, Registry
from ...api.user import UserInfo
from ...client.interface import Client
from ...storage.keys import key_prefix
from .bootstrap import Ensurer
from .classifier import Classifier, Schema, compile_schema
from .levels import Level, Rejected, Request, borrowing_limits, nominal_limits

log = logging.getLogger("orch-apiserver.flowcontrol")

# Upstream's width estimate of a LIST: one seat per 100 objects it handles, 1 to 10 seats.
OBJECTS_PER_SEAT = 100
MIN_SEATS, MAX_SEATS = 1, 10
# How long a request may wait in a queue: a quarter of --request-timeout (60 s by default).
DEFAULT_WAIT_LIMIT = 15.0
RETRY_AFTER_SECONDS = 1
TOO_MANY_MESSAGE = "Too many requests, please try again later."
BORROWING_PERIOD = 10.0
ENSURE_PERIOD = 60.0
WAIT_BUCKETS = (0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30)
# Upstream's long-running requests: these verbs and sub-resources.
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})


def is_long_running(verb: str, subresource: str, query: Mapping[str, str]) -> bool:
    if verb in LONG_RUNNING_VERBS or subresource in LONG_RUNNING_SUBRESOURCES:
        return True
    return verb == "list" and query.get("watch", "").lower() in ("1", "true")


def list_width(count: int, query: Mapping[str, str]) -> int:
    """Seats for a LIST of a resource with ``count`` objects, as upstream estimates them."""
    limit = count
    try:
        n = int(query.get("limit") or 0)
    except ValueError:
        n = 0
    if 0 < n < count:
        limit = n
    rv = query.get("resourceVersion", "")
    from_cache = rv != "" and not query.get("continue") and not (n > 0 and query.get("resourceVersionMatch"))
    if from_cache:
        objects = count
    elif query.get("fieldSelector") or query.get("labelSelector"):
        objects = count + limit
    else:
        objects = 2 * limit
    return max(MIN_SEATS, min(MAX_SEATS, -(-objects // OBJECTS_PER_SEAT)))


class Ticket:
    """A request's place at its level; :meth:`release` once it no longer runs."""

    __slots__ = ("control", "level", "req", "key", "started", "released", "headers", "long_running")

    def __init__(
        self,
        control: "FlowControl",
        level: Level,
        req: Request | None,
        key: tuple[str, str],
        headers: dict[str, str],
    ):
        self.control = control
        self.level = level
        self.req = req  # None at an exempt level (nothing to account but the count)
        self.key = key
        # Only a queued request's service time feeds its level's estimates.
        self.started = time.monotonic() if req is not None else 0.0
        self.released = False
        self.headers = headers  # shared per (schema, level): never changed
        self.long_running = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.req is None:  # exempt (see FlowControl.admit): only counted
            self.control.metrics.executing[self.key] -= 1
            self.level.executing -= 1
            self.level.executing_seats -= 1
            return
        self.control._finish(self)


class Queued:
    """A request waiting in its level's queue for seats (FlowControl.admit_now)."""

    __slots__ = ("control", "level", "schema", "req", "key", "headers")

    def __init__(
        self, control: "FlowControl", level: Level, schema: Schema, req: Request, key: tuple[str, str], headers: dict
    ):
        self.control = control
        self.level = level
        self.schema = schema
        self.req = req
        self.key = key
        self.headers = headers

    async def wait(self) -> Ticket:
        """The ticket once seats come; a 429 after the wait limit."""
        control, level, schema, req, key, headers = (
            self.control,
            self.level,
            self.schema,
            self.req,
            self.key,
            self.headers,
        )
        m = control.metrics
        assert req.future is not None
        m.inqueue[key] += 1
        waited_from = time.monotonic()
        try:
            async with asyncio.timeout(control.wait_limit):
                await req.future
        except TimeoutError:
            if req.future.done() and not req.future.cancelled():
                pass  # the seats came as the wait limit passed: they are this request's
            else:
                level.abandon(req)
                m.rejected[(level.name, schema.name, "time-out")] += 1
                m.wait(key, False, time.monotonic() - waited_from)
                exc429 = st.too_many_requests(TOO_MANY_MESSAGE, RETRY_AFTER_SECONDS)
                exc429.headers.update(headers)
                raise exc429 from None
        except asyncio.CancelledError:
            if req.future.done() and not req.future.cancelled():
                control._finish_request(level, req, 0.0)
            else:
                level.abandon(req)
            m.rejected[(level.name, schema.name, "cancelled")] += 1
            raise
        finally:
            m.inqueue[key] -= 1
        m.wait(key, True, time.monotonic() - waited_from)
        m.dispatched[key] += 1
        m.executing[key] += 1
        return Ticket(control, level, req, key, headers)


# The ticket of the request being served, for the response-prepare hook (streams).
CURRENT: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("orch_flowcontrol_ticket", default=None)


class _Metrics:
    def __init__(self) -> None:
        self.dispatched: collections.Counter = collections.Counter()
        self.executing: collections.Counter = collections.Counter()
        self.inqueue: collections.Counter = collections.Counter()
        self.rejected: collections.Counter = collections.Counter()
        self.waits: dict[tuple[str, str, str], list] = {}

    def histogram(self, key: tuple[str, str], execute: bool) -> list:
        """[bucket counts, count, sum] of the wait histogram of a (level, schema)."""
        k = (key[0], key[1], "true" if execute else "false")
        h = self.waits.get(k)
        if h is None:
            h = self.waits[k] = [[0] * len(WAIT_BUCKETS), 0, 0.0]
        return h

    def wait(self, key: tuple[str, str], execute: bool, seconds: float) -> None:
        h = self.histogram(key, execute)
        i = bisect.bisect_left(WAIT_BUCKETS, seconds)
        if i < len(WAIT_BUCKETS):
            h[0][i] += 1
        h[1] += 1
        h[2] += seconds


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class FlowControl:
    def __init__(
        self,
        cache: Any,
        registry: Registry,
        client: Client,
        server_limit: int,
        wait_limit: float = DEFAULT_WAIT_LIMIT,
    ):
        self.cache = cache
        self.registry = registry
        self.client = client
        self.server_limit = max(1, server_limit)
        self.wait_limit = wait_limit
        self.ensurer = Ensurer(client, registry)
        self.fs_kind: KindInfo = self.ensurer.fs_kind
        self.pl_kind: KindInfo = self.ensurer.pl_kind
        self._prefixes = {key_prefix(self.fs_kind), key_prefix(self.pl_kind)}
        self.classifier = Classifier([])
        self.levels: dict[str, Level] = {}
        self.metrics = _Metrics()
        self._rebuild_pending = False
        self._status_wanted: dict[str, dict] = {}
        self._status_event = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._list_prefixes: dict[int, str] = {}
        # (schema name, level name) -> (schema, level, metrics key, response headers, wait histogram)
        self._routes: dict[tuple[str, str], tuple[Schema, Level, tuple[str, str], dict[str, str], list]] = {}
        self.configured = False
        cache.listeners.append(self._on_event)

    # --- configuration ------------------------------------------------------------------------
    def _on_event(self, cache: Any, ev: Any) -> None:
        if cache is not None and cache.prefix not in self._prefixes:
            return
        if not self._rebuild_pending:
            self._rebuild_pending = True
            try:
                asyncio.get_running_loop().call_soon(self.rebuild)
            except RuntimeError:  # no loop yet: the start rebuilds
                self._rebuild_pending = False

    def _objects(self, kind: KindInfo) -> list[dict]:
        c = self.cache.caches.get(key_prefix(kind))
        if c is None:
            return []
        out = []
        for entry in list(c.items.values()):
            try:
                out.append(orjson.loads(entry.raw))
            except orjson.JSONDecodeError:
                log.warning("flow control: cannot read %s", entry.key)
        return out

    def rebuild(self) -> None:
        """Compile the stored configuration and put it in effect (queued requests stay)."""
        self._rebuild_pending = False
        new_levels: dict[str, Level] = {}
        for obj in self._objects(self.pl_kind):
            md = obj.get("metadata") or {}
            name, uid, spec = str(md.get("name", "")), str(md.get("uid", "")), obj.get("spec") or {}
            level = self.levels.get(name)
            if level is None:
                level = Level(name, uid, spec)
            else:
                level.configure(uid, spec)
            new_levels[name] = level
        for name, gone in self.levels.items():
            if name not in new_levels:
                gone.release_all()
        nominal_limits(list(new_levels.values()), self.server_limit)
        schemas: list[Schema] = []
        wanted: dict[str, dict] = {}
        for obj in self._objects(self.fs_kind):
            schema = compile_schema(obj)
            dangling = schema.level not in new_levels
            wanted[schema.name] = _dangling_condition(schema.level, dangling, obj)
            if not dangling:
                schemas.append(schema)
        self.levels = new_levels
        self.classifier = Classifier(schemas)
        self._routes = {}
        self.configured = bool(new_levels)
        self._status_wanted = wanted
        self._status_event.set()

    async def start(self) -> None:
        """Create or reconcile the bootstrap objects, read the configuration, and start
        the loops (borrowing, periodic reconciliation, status)."""
        try:
            for change in await self.ensurer.ensure():
                log.info("flow control: %s", change)
        except st.ApiError as exc:
            log.error("flow control: cannot write the bootstrap configuration: %s", exc.message)
        await self.cache.sync(timeout=5.0)
        self.rebuild()
        self._tasks = [
            asyncio.create_task(self._borrowing_loop(), name="apf-borrowing"),
            asyncio.create_task(self._ensure_loop(), name="apf-bootstrap-ensure"),
            asyncio.create_task(self._status_loop(), name="apf-status"),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _borrowing_loop(self) -> None:
        while True:
            await asyncio.sleep(BORROWING_PERIOD)
            now = time.monotonic()
            levels = list(self.levels.values())
            for lv in levels:
                lv.close_period(now)
            borrowing_limits(levels, self.server_limit)
            for lv in levels:
                if lv.waiting:
                    lv.dispatch()

    async def _ensure_loop(self) -> None:
        while True:
            await asyncio.sleep(ENSURE_PERIOD)
            try:
                for change in await self.ensurer.ensure():
                    log.info("flow control: %s", change)
            except st.ApiError as exc:
                log.warning("flow control: bootstrap reconciliation failed: %s", exc.message)

    async def _status_loop(self) -> None:
        while True:
            await self._status_event.wait()
            self._status_event.clear()
            for name, cond in list(self._status_wanted.items()):
                try:
                    await self._write_condition(name, cond)
                except st.ApiError as exc:
                    if exc.code != 404:
                        log.warning("flow control: status of FlowSchema %s: %s", name, exc.message)

    async def _write_condition(self, name: str, cond: dict) -> None:
        if cond.get("_current"):
            return

        def mutate(obj: dict) -> dict:
            status = obj.setdefault("status", {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "Dangling"]
            conds.append({k: v for k, v in cond.items() if not k.startswith("_")})
            status["conditions"] = conds
            return obj

        await self.client.update(self.fs_kind, "", name, mutate, subresource="status")

    # --- requests -----------------------------------------------------------------------------
    def width(self, verb: str, kind: KindInfo | None, query: Mapping[str, str]) -> int:
        if verb != "list" or kind is None:
            return 1
        prefix = self._list_prefixes.get(id(kind))
        if prefix is None:
            prefix = self._list_prefixes[id(kind)] = key_prefix(kind)
        c = self.cache.caches.get(prefix)
        return list_width(len(c.items) if c is not None else 0, query)

    def admit_now(
        self,
        user: UserInfo | None,
        is_resource: bool,
        verb: str,
        group: str,
        resource: str,
        subresource: str,
        namespace: str,
        path: str,
        kind: KindInfo | None,
        query: Mapping[str, str],
    ) -> "Ticket | Queued | None":
        """Classify and take seats: the ticket of a request that has its seats at once
        (an exempt level, or seats free), a :class:`Queued` whose ``wait()`` gives the
        ticket once seats come (no coroutine for the common case), or None when no
        configuration applies (none read yet, or no schema matches). Raises a 429
        ApiError when the request is rejected."""
        res = f"{resource}/{subresource}" if subresource else resource
        schema, distinguisher = self.classifier.classify(user, is_resource, verb, group, res, namespace, path)
        if schema is None:
            return None
        level = self.levels.get(schema.level)
        if level is None:
            return None
        m = self.metrics
        route = self._routes.get((schema.name, level.name))
        if route is None or route[0] is not schema or route[1] is not level:
            # Per (schema, level) object pair: a rebuild makes new schemas, so a stale entry never matches.
            key = (level.name, schema.name)
            headers = {names.APF_FLOWSCHEMA_UID_HEADER: schema.uid, names.APF_PRIORITY_LEVEL_UID_HEADER: level.uid}
            route = self._routes[(schema.name, level.name)] = (schema, level, key, headers, m.histogram(key, True))
        key, headers = route[2], route[3]
        if level.exempt:
            # Exempt: counted, never queued or rejected (one seat, whatever its width).
            level.executing += 1
            level.executing_seats += 1
            hist = route[4]
            hist[0][0] += 1  # waited 0 s: the first bucket
            hist[1] += 1
            m.dispatched[key] += 1
            m.executing[key] += 1
            return Ticket(self, level, None, key, headers)
        try:
            req = level.admit(self.width(verb, kind, query), schema.name, distinguisher)
        except Rejected as exc:
            m.rejected[(level.name, schema.name, exc.reason)] += 1
            m.wait(key, False, 0.0)
            rejected = st.too_many_requests(TOO_MANY_MESSAGE, RETRY_AFTER_SECONDS)
            rejected.headers.update(headers)
            raise rejected from None
        if req.future is not None:
            return Queued(self, level, schema, req, key, headers)
        m.wait(key, True, 0.0)
        m.dispatched[key] += 1
        m.executing[key] += 1
        return Ticket(self, level, req, key, headers)

    def _finish(self, ticket: Ticket) -> None:
        self.metrics.executing[ticket.key] -= 1
        assert ticket.req is not None  # exempt tickets finish in Ticket.release
        self._finish_request(ticket.level, ticket.req, time.monotonic() - ticket.started)

    def _finish_request(self, level: Level, req: Request, seconds: float) -> None:
        if level.exempt:
            level.executing -= 1
            level.executing_seats -= req.width
            return
        level.finish(req, seconds)

    # --- metrics ------------------------------------------------------------------------------
    def render_metrics(self) -> list[str]:
        m = self.metrics
        out: list[str] = []

        def gauge_or_counter(name: str, typ: str, help_text: str, data: Mapping, labels: tuple[str, ...]) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {typ}")
            for key, n in sorted(data.items()):
                lbl = ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(zip(labels, key)))
                out.append(f"{name}{{{lbl}}} {n}")

        pl_fs = ("priority_level", "flow_schema")
        gauge_or_counter(
            "apiserver_flowcontrol_current_inqueue_requests",
            "gauge",
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            m.inqueue,
            pl_fs,
        )
        gauge_or_counter(
            "apiserver_flowcontrol_current_executing_requests",
            "gauge",
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage "
            "in the API Priority and Fairness subsystem",
            m.executing,
            pl_fs,
        )
        gauge_or_counter(
            "apiserver_flowcontrol_dispatched_requests_total",
            "counter",
            "Number of requests executed by API Priority and Fairness subsystem",
            m.dispatched,
            pl_fs,
        )
        gauge_or_counter(
            "apiserver_flowcontrol_rejected_requests_total",
            "counter",
            "Number of requests rejected by API Priority and Fairness subsystem",
            m.rejected,
            pl_fs + ("reason",),
        )
        out.append(
            "# HELP apiserver_flowcontrol_request_wait_duration_seconds Length of time a request spent waiting in its queue"
        )
        out.append("# TYPE apiserver_flowcontrol_request_wait_duration_seconds histogram")
        for (pl, fs, execute), (buckets, count, total) in sorted(m.waits.items()):
            lbl = f'execute="{execute}",flow_schema="{_esc(fs)}",priority_level="{_esc(pl)}"'
            acc = 0
            for b, n in zip(WAIT_BUCKETS, buckets):
                acc += n
                out.append(f'apiserver_flowcontrol_request_wait_duration_seconds_bucket{{{lbl},le="{b}"}} {acc}')
            out.append(f'apiserver_flowcontrol_request_wait_duration_seconds_bucket{{{lbl},le="+Inf"}} {count}')
            out.append(f"apiserver_flowcontrol_request_wait_duration_seconds_sum{{{lbl}}} {total}")
            out.append(f"apiserver_flowcontrol_request_wait_duration_seconds_count{{{lbl}}} {count}")
        levels = sorted(self.levels.values(), key=lambda lv: lv.name)
        for metric, help_text, attr in (
            (
                "apiserver_flowcontrol_nominal_limit_seats",
                "Nominal number of execution seats of a priority level",
                "nominal_limit",
            ),
            (
                "apiserver_flowcontrol_current_limit_seats",
                "Current derived number of execution seats of a priority level",
                "current_limit",
            ),
            (
                "apiserver_flowcontrol_request_concurrency_in_use",
                "Seats in use by requests executing at a priority level",
                "executing_seats",
            ),
        ):
            out.append(f"# HELP {metric} {help_text}")
            out.append(f"# TYPE {metric} gauge")
            for lv in levels:
                if not lv.exempt:
                    out.append(f'{metric}{{priority_level="{_esc(lv.name)}"}} {getattr(lv, attr)}')
        return out


def _dangling_condition(level: str, dangling: bool, obj: dict) -> dict[str, Any]:
    cond: dict[str, Any]
    if dangling:
        cond = {
            "type": "Dangling",
            "status": "True",
            "reason": "NotFound",
            "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" '
            "but there is no such object",
        }
    else:
        cond = {
            "type": "Dangling",
            "status": "False",
            "reason": "Found",
            "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" '
            "and it exists",
        }
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Dangling":
            if all(c.get(k) == v for k, v in cond.items()):
                cond["_current"] = True
            break
    cond["lastTransitionTime"] = timestamp()
    return cond


def response_starting(response: Any) -> None:
    """As a response's headers go out (server/httpserver.py): the matched objects'
    headers, and a long-running request (watch, exec, ...) gives its seats back now that
    it has started."""
    ticket = CURRENT.get()
    if ticket is None:
        return
    headers = response.headers
    for k, v in ticket.headers.items():
        if k not in headers:
            headers[k] = v
    if ticket.long_running:
        ticket.release()
