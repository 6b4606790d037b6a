"""The admission chain: mutating plugins, then validating plugins.

A plugin sees the request's attributes (operation, kind, namespace, name, the
new and old objects, the user, dry-run) and either passes, changes the object
(mutating phase only) or raises an ApiError. The security and admission work
adds plugins here; this module fixes the shape they plug into.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from ..api.kinds import KindInfo
from ..api.user import UserInfo

if TYPE_CHECKING:
    pass


@dataclasses.dataclass
class RequestRecord:
    """What admission plugins hand back besides their decision, for one request:
    warnings for the client (the response's ``Warning`` headers) and audit
    annotations (``key -> value``, for the request's audit event)."""

    warnings: list[str] = dataclasses.field(default_factory=list)
    audit_annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    # When the request's own deadline passes (``--request-timeout`` or ``?timeout=``), in
    # the event loop's clock; None when it has none. Calls out of the server (webhooks)
    # take no longer than what is left of it.
    deadline: float | None = None


# The record of the request being served (set by the HTTP layer around each request;
# None for writes no client is waiting on, such as the bundled controllers' own).
_RECORD: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("orch_admission_record", default=None)


def begin_request() -> tuple[RequestRecord, contextvars.Token]:
    """Start collecting plugins' warnings and audit annotations for this request
    (this task and what it awaits); ``end_request(token)`` when it is answered."""
    record = RequestRecord()
    return record, _RECORD.set(record)


def end_request(token: contextvars.Token) -> None:
    _RECORD.reset(token)


def time_left() -> float | None:
    """The seconds left before the deadline of the request being served (None: it has
    none, as writes no client waits on)."""
    record = _RECORD.get()
    if record is None or record.deadline is None:
        return None
    return record.deadline - asyncio.get_running_loop().time()


def warn(text: str) -> None:
    """A warning for the client of the request being served (a ``Warning`` header of
    its response); for strategies' warnings (upstream's WarningsOnCreate)."""
    record = _RECORD.get()
    if record is not None:
        record.warnings.append(text)


@dataclasses.dataclass
class Attributes:
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    kind: KindInfo
    namespace: str
    name: str
    subresource: str
    obj: dict | None
    old: dict | None
    user: UserInfo
    dry_run: bool
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def warn(self, text: str) -> None:
        """A warning for the client, sent as a ``Warning`` header of the response."""
        record = _RECORD.get()
        if record is not None:
            record.warnings.append(text)

    def annotate(self, key: str, value: str) -> None:
        """An audit annotation of this request."""
        record = _RECORD.get()
        if record is not None:
            record.audit_annotations[key] = value


class Plugin(Protocol):
    """An admission plugin. It may also declare ``resources``: the (group, resource)
    pairs it acts on (absent or None: every resource), so the chain does not call
    it for others; ``operations``: the operations its mutating phase acts on
    (absent or None: every operation; upstream's ``Handles``); and ``complete``:
    True when what its mutating phase writes is complete, already defaulted and
    nothing the strategy's preparation derives anything from (as upstream's
    built-in plugins write it). After any other mutating plugin (a webhook, say) the
    store prepares and defaults the object again, as upstream defaults what
    webhooks return; validation always follows the mutating phase. A ``complete``
    plugin whose ``admit`` returns True says it changed the object in a way that needs
    that preparation this time (the webhook plugin, when a webhook patched it)."""

    name: str

    async def admit(self, attrs: Attributes) -> bool | None:
        """Mutating phase: may change ``attrs.obj``."""

    async def validate(self, attrs: Attributes) -> None:
        """Validating phase: may only reject."""


async def _noop_phase(self: Any, attrs: Attributes) -> None:
    return None


def _is_noop(method: Any) -> bool:
    """Whether a plugin phase is the empty ``return None`` most plugins give the phase
    they do not use: calling it would still create and run a coroutine per write."""
    code = getattr(getattr(method, "__func__", method), "__code__", None)
    ref = _noop_phase.__code__
    return (
        code is not None
        and code.co_code == ref.co_code
        and not code.co_names
        and all(c is None or isinstance(c, str) for c in code.co_consts)
    )


class Chain:
    """Runs every plugin's mutating phase, then every validating phase. The generic
    store runs them as two steps around the strategy (mutate, then prepare, default
    and validate, then the validating phase), as upstream does. Which plugins
    can act on a kind is worked out once per (group, resource) and plugin list
    (``plugins`` may be changed after construction; the next run sees it)."""

    def __init__(self, plugins: list[Plugin]):
        self.plugins = plugins
        self._plans: dict[tuple[str, str], tuple[tuple, list, list]] = {}
        self._admitters: dict[tuple[str, str, str], tuple[list, bool]] = {}

    def _plan(self, kind: KindInfo) -> tuple[list, list]:
        key = (kind.group, kind.resource)
        current = tuple(self.plugins)
        plan = self._plans.get(key)
        if plan is None or plan[0] != current:
            relevant = [p for p in current if getattr(p, "resources", None) is None or key in p.resources]  # type: ignore[attr-defined]
            plan = (
                current,
                [
                    (p.admit, getattr(p, "operations", None), getattr(p, "complete", None) is True)
                    for p in relevant
                    if not _is_noop(p.admit)
                ],
                [p.validate for p in relevant if not _is_noop(p.validate)],
            )
            self._plans[key] = plan
            self._admitters = {k: v for k, v in self._admitters.items() if k[:2] != key}
        return plan[1], plan[2]

    async def admit(self, attrs: Attributes) -> bool:
        """The mutating phase: the ``admit`` of every plugin that handles this kind and
        operation. True when one that is not ``complete`` ran: the caller prepares
        and defaults the object again."""
        kind = attrs.kind
        admitters, _ = self._plan(kind)
        key = (kind.group, kind.resource, attrs.operation)
        chosen = self._admitters.get(key)
        if chosen is None:
            handling = [(a, complete) for a, ops, complete in admitters if ops is None or attrs.operation in ops]
            chosen = self._admitters[key] = ([a for a, _ in handling], not all(c for _, c in handling))
        again = chosen[1]
        for admit in chosen[0]:
            if await admit(attrs) is True:
                again = True
        return again

    async def validate(self, attrs: Attributes) -> None:
        """The validating phase: every plugin's ``validate``, on the final object."""
        for validate in self._plan(attrs.kind)[1]:
            await validate(attrs)

    async def run(self, attrs: Attributes) -> None:
        """Both phases back to back, for requests no strategy validates between them
        (DELETE, CONNECT, sub-resource reviews such as TokenRequest)."""
        await self.admit(attrs)
        await self.validate(attrs)


# --- the configured chain (--enable-admission-plugins / --disable-admission-plugins) -------
