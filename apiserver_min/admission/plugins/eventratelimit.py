"""EventRateLimit: limits the rate at which core Events are written, by token buckets.

The configuration (in the admission configuration file, required)::

    apiVersion: eventratelimit.admission.orch.io/v1alpha1
    kind: Configuration
    limits:
    - {type: Namespace, qps: 50, burst: 100, cacheSize: 2000}
    - {type: User, qps: 10, burst: 50}

Each limit keeps token buckets (``burst`` tokens, refilled at ``qps`` a second): one
for the whole server (``Server``), or one per namespace, per user, or per event
source and involved object (``SourceAndObject``), the most recently used
``cacheSize`` of them (default 4096). As upstream (v1.27): creates and updates of
``events`` in the core group, dry runs excepted; every limit is asked, and any
refusal makes the request 429 Too Many Requests naming each limit reached."""

from __future__ import annotations

import collections
import time
from typing import Any, Callable

from ...api import names
from ...api import status as st
from ...api.validation import FieldError
from ..chain import Attributes
from ..config import strict_fields

CONFIG_KIND = "Configuration"
CONFIG_API_VERSION = f"{names.EVENT_RATE_LIMIT_CONFIG_GROUP}/v1alpha1"
LIMIT_TYPES = ("Server", "Namespace", "User", "SourceAndObject")
DEFAULT_CACHE_SIZE = 4096


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` a second; starts full."""

    __slots__ = ("qps", "burst", "tokens", "last", "clock")

    def __init__(self, qps: float, burst: int, clock: Callable[[], float]):
        self.qps, self.burst, self.clock = qps, burst, clock
        self.tokens = float(burst)
        self.last = clock()

    def try_accept(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Limit:
    """One configured limit: its buckets by key (least recently used dropped first)."""

    def __init__(self, limit_type: str, qps: int, burst: int, cache_size: int, clock: Callable[[], float]):
        self.type, self.qps, self.burst, self.clock = limit_type, qps, burst, clock
        self.cache_size = cache_size
        self.buckets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()

    def accept(self, key: str) -> bool:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket(self.qps, self.burst, self.clock)
            while len(self.buckets) > max(self.cache_size, 1):
                self.buckets.popitem(last=False)
        else:
            self.buckets.move_to_end(key)
        return bucket.try_accept()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_configuration(doc: dict | None) -> list[tuple[str, int, int, int]]:
    """The limits (type, qps, burst, cacheSize) of the plugin's configuration;
    ValueError with upstream's field errors when it is unusable."""
    if doc is None:
        raise ValueError(
            f"EventRateLimit needs a configuration ({CONFIG_API_VERSION} {CONFIG_KIND} with limits) "
            "in the admission configuration file"
        )
    if doc.get("kind") != CONFIG_KIND or doc.get("apiVersion") != CONFIG_API_VERSION:
        raise ValueError(
            f"expected kind {CONFIG_KIND} with apiVersion {CONFIG_API_VERSION}, "
            f"got kind {doc.get('kind')!r}, apiVersion {doc.get('apiVersion')!r}"
        )
    strict_fields(doc, ("apiVersion", "kind", "limits"), "EventRateLimit configuration")
    limits = doc.get("limits")
    errs: list[FieldError] = []
    if not isinstance(limits, list) or not limits:
        raise ValueError(FieldError.invalid("limits", limits or [], "must not be empty").message())
    out: list[tuple[str, int, int, int]] = []
    for i, item in enumerate(limits):
        path = f"limits[{i}]"
        if not isinstance(item, dict):
            errs.append(FieldError.type_invalid(path, item, "must be an object"))
            continue
        strict_fields(item, ("type", "qps", "burst", "cacheSize"), f"EventRateLimit configuration {path}")
        limit_type = item.get("type", "")
        if limit_type not in LIMIT_TYPES:
            errs.append(FieldError.not_supported(f"{path}.type", limit_type, LIMIT_TYPES))
        qps, burst, cache_size = _int(item.get("qps", 0)), _int(item.get("burst", 0)), _int(item.get("cacheSize", 0))
        for field, value in (("burst", burst), ("qps", qps)):
            if value is None:
                errs.append(FieldError.type_invalid(f"{path}.{field}", item.get(field), "must be an integer"))
            elif value <= 0:
                errs.append(FieldError.invalid(f"{path}.{field}", value, "must be positive"))
        if cache_size is None:
            errs.append(FieldError.type_invalid(f"{path}.cacheSize", item.get("cacheSize"), "must be an integer"))
        elif limit_type != "Server" and cache_size < 0:
            errs.append(FieldError.invalid(f"{path}.cacheSize", cache_size, "must not be negative"))
        if qps is not None and burst is not None and cache_size is not None:
            if limit_type != "Server" and cache_size == 0:
                cache_size = DEFAULT_CACHE_SIZE
            out.append((str(limit_type), qps, burst, cache_size))
    if errs:
        text = errs[0].message() if len(errs) == 1 else "[" + ", ".join(e.message() for e in errs) + "]"
        raise ValueError(text)
    return out


def _source_and_object_key(event: dict) -> str:
    source = event.get("source") if isinstance(event.get("source"), dict) else {}
    involved = event.get("involvedObject") if isinstance(event.get("involvedObject"), dict) else {}
    assert isinstance(source, dict) and isinstance(involved, dict)
    parts = [source.get("component"), source.get("host")]
    parts += [involved.get(f) for f in ("kind", "namespace", "name", "uid", "apiVersion")]
    return "".join(str(p or "") for p in parts)


class EventRateLimit:
    name = "EventRateLimit"
    resources = frozenset({("", "events")})

    def __init__(self, limits: list[tuple[str, int, int, int]], clock: Callable[[], float] = time.monotonic):
        self.limits = [Limit(t, qps, burst, size, clock) for t, qps, burst, size in limits]

    @classmethod
    def from_config(cls, server: Any, doc: dict | None) -> "EventRateLimit":
        return cls(parse_configuration(doc))

    async def admit(self, attrs: Attributes) -> None:
        return None

    @staticmethod
    def _key(limit_type: str, attrs: Attributes) -> str:
        if limit_type == "Namespace":
            return attrs.namespace
        if limit_type == "User":
            return attrs.user.name
        if limit_type == "SourceAndObject":
            return _source_and_object_key(attrs.obj) if isinstance(attrs.obj, dict) else ""
        return ""

    async def validate(self, attrs: Attributes) -> None:
        if attrs.operation not in ("CREATE", "UPDATE") or attrs.kind.kind != "Event" or attrs.dry_run:
            return
        refused = []
        for limit in self.limits:
            key = self._key(limit.type, attrs)
            if not limit.accept(key):
                refused.append(f"limit reached on type {limit.type} for key {key}")
        if refused:
            text = refused[0] if len(refused) == 1 else "[" + ", ".join(refused) + "]"
            # No Retry-After, as upstream: a client that retried by itself would only add to the burst.
            raise st.ApiError(429, "TooManyRequests", f"Too many requests: {text}")
