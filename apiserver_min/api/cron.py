"""Cron schedules as CronJobs write them: the five-field standard form and the
``@`` descriptors, with the parse errors upstream's validation reports.

Fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or ``jan``..``dec``),
day of week (0-6 or ``sun``..``sat``). Each field is a comma-separated list of ``*`` or
``?``, a value, or a range ``a-b``, any of them with a step ``/n`` (``a/n`` runs from ``a``
to the field's maximum). When both day fields are restricted a day matching either
one fires; when either is ``*`` both must match. Descriptors: ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly`` and
``@every <duration>``. A ``TZ=<zone>`` or ``CRON_TZ=<zone>`` prefix is parsed (a stored
CronJob may carry one), though validation refuses it on new objects in favour of
``spec.timeZone``.

Next times are computed in the schedule's zone on wall-clock time, as upstream does:
a wall time skipped by a daylight-saving jump does not happen that day, and a wall
time repeated when clocks go back happens twice.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import zoneinfo
from typing import NamedTuple

from .duration import DurationError, parse_duration

__all__ = ["CronError", "Schedule", "parse_schedule", "load_zone", "ZoneError"]

UTC = _dt.timezone.utc
_STAR = 1 << 63  # the field was "*" or "?" (matters for the day fields)
_SEARCH_YEARS = 5  # no match within this many years: the schedule never fires


class CronError(ValueError):
    """A schedule that does not parse; the message is upstream's."""


class ZoneError(ValueError):
    """An unknown time zone name."""


class _Bounds(NamedTuple):
    lo: int
    hi: int
    names: dict[str, int]


_MINUTE = _Bounds(0, 59, {})
_HOUR = _Bounds(0, 23, {})
_DOM = _Bounds(1, 31, {})
_MONTH = _Bounds(1, 12, {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())})
_DOW = _Bounds(0, 6, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())})
_FIELDS = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW)
_ZONE_PART = re.compile(r"^[A-Za-z\.\-_0-9+]{1,14}$")


def load_zone(name: str) -> _dt.tzinfo:
    """An IANA zone by name (``UTC`` included); ZoneError("unknown time zone X") otherwise."""
    if name in ("", "UTC"):
        return UTC
    if name == "Local" or any(p in (".", "..") or p.startswith("-") for p in name.split("/")):
        raise ZoneError(f"unknown time zone {name}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ZoneError(f"unknown time zone {name}") from None


def local_zone() -> _dt.tzinfo:
    """This machine's zone (``TZ``, else ``/etc/localtime``, else UTC): a CronJob without
    ``spec.timeZone`` runs on the controller manager's local time, as upstream's does."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return load_zone(name)
        except ZoneError:
            return UTC
    try:
        with open("/etc/localtime", "rb") as f:
            return zoneinfo.ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        return UTC


def valid_zone_name_parts(name: str) -> bool:
    """Each ``/``-separated part is a plausible zone name part (upstream checks this before loading)."""
    return all(p not in (".", "..") and not p.startswith("-") and _ZONE_PART.match(p) for p in name.split("/"))


def _go_atoi_error(text: str) -> str:
    return f'strconv.Atoi: parsing "{text}": invalid syntax'


def _parse_int(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise CronError(f"failed to parse int from {text}: {_go_atoi_error(text)}")
    n = int(text)
    if n < 0:
        raise CronError(f"negative number ({n}) not allowed: {text}")
    return n


def _int_or_name(text: str, bounds: _Bounds) -> int:
    named = bounds.names.get(text.lower())
    return named if named is not None else _parse_int(text)


def _range(expr: str, bounds: _Bounds) -> int:
    range_and_step = expr.split("/")
    low_high = range_and_step[0].split("-")
    single = len(low_high) == 1
    extra = 0
    if low_high[0] in ("*", "?"):
        start, end, extra = bounds.lo, bounds.hi, _STAR
    else:
        start = _int_or_name(low_high[0], bounds)
        if len(low_high) == 1:
            end = start
        elif len(low_high) == 2:
            end = _int_or_name(low_high[1], bounds)
        else:
            raise CronError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _parse_int(range_and_step[1])
        if single:  # "a/n" is "a-max/n"
            end = bounds.hi
        if step > 1:
            extra = 0
    else:
        raise CronError(f"too many slashes: {expr}")
    if start < bounds.lo:
        raise CronError(f"beginning of range ({start}) below minimum ({bounds.lo}): {expr}")
    if end > bounds.hi:
        raise CronError(f"end of range ({end}) above maximum ({bounds.hi}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise CronError(f"step of range should be a positive number: {expr}")
    bits = 0
    for v in range(start, end + 1, step):
        bits |= 1 << v
    return bits | extra


def _field(text: str, bounds: _Bounds) -> int:
    bits = 0
    for part in text.split(","):
        bits |= _range(part, bounds)
    return bits


_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class Schedule:
    """A parsed schedule; :meth:`next` gives the first firing strictly after a time."""

    def __init__(
        self,
        minute: int = 0,
        hour: int = 0,
        dom: int = 0,
        month: int = 0,
        dow: int = 0,
        *,
        zone: _dt.tzinfo | None = None,
        every: _dt.timedelta | None = None,
    ):
        self.minute, self.hour, self.dom, self.month, self.dow = minute, hour, dom, month, dow
        self.zone = zone  # from a TZ= prefix; None: the zone the caller gives
        self.every = every

    def _day_matches(self, t: _dt.datetime) -> bool:
        dom_match = bool(1 << t.day & self.dom)
        dow_match = bool(1 << ((t.weekday() + 1) % 7) & self.dow)
        if self.dom & _STAR or self.dow & _STAR:
            return dom_match and dow_match
        return dom_match or dow_match

    def next(self, after: _dt.datetime, zone: _dt.tzinfo | None = None) -> _dt.datetime | None:
        """The first time strictly after ``after`` (an aware datetime) at which the schedule
        fires, in ``zone`` (this schedule's own TZ= zone wins; UTC when neither);
        None when it never does within five years."""
        if self.every is not None:
            whole = after.replace(microsecond=0)
            return whole + self.every
        tz = self.zone or zone or UTC
        t = _add(after.replace(microsecond=0), _dt.timedelta(seconds=1), tz)
        if t.second:
            t = _add(t.replace(second=0), _dt.timedelta(minutes=1), tz)
        limit = t.year + _SEARCH_YEARS
        while True:
            if t.year > limit:
                return None
            if not 1 << t.month & self.month:
                t = _wall(tz, t.year + (t.month == 12), t.month % 12 + 1, 1)
                continue
            if not self._day_matches(t):
                t = _next_day(t, tz)
                continue
            if not 1 << t.hour & self.hour:
                t = _add(t.replace(minute=0), _dt.timedelta(hours=1), tz)
                continue
            if not 1 << t.minute & self.minute:
                t = _add(t, _dt.timedelta(minutes=1), tz)
                continue
            return t


def _normal(t: _dt.datetime, tz: _dt.tzinfo) -> _dt.datetime:
    """A real instant for a wall time (one skipped by a DST jump moves forward)."""
    return t.astimezone(UTC).astimezone(tz)


def _add(t: _dt.datetime, d: _dt.timedelta, tz: _dt.tzinfo) -> _dt.datetime:
    """``t`` plus ``d`` of elapsed time."""
    return (t.astimezone(UTC) + d).astimezone(tz)


def _wall(tz: _dt.tzinfo, year: int, month: int, day: int) -> _dt.datetime:
    return _normal(_dt.datetime(year, month, day, tzinfo=tz), tz)


def _next_day(t: _dt.datetime, tz: _dt.tzinfo) -> _dt.datetime:
    d = t.date() + _dt.timedelta(days=1)
    return _wall(tz, d.year, d.month, d.day)


def parse_schedule(spec: str) -> Schedule:
    """A schedule from its text; CronError with upstream's message when it is malformed."""
    if not isinstance(spec, str) or not spec:
        raise CronError("empty spec string")
    zone: _dt.tzinfo | None = None
    if spec.startswith("TZ=") or spec.startswith("CRON_TZ="):
        head, _, rest = spec.partition(" ")
        name = head.split("=", 1)[1]
        try:
            zone = load_zone(name)
        except ZoneError as exc:
            raise CronError(f"provided bad location {name}: {exc}") from None
        spec = rest.strip()
    if spec.startswith("@"):
        if spec.startswith("@every "):
            text = spec[len("@every ") :]
            try:
                every = parse_duration(text)
            except DurationError as exc:
                raise CronError(f"failed to parse duration {spec}: {exc}") from None
            every = _dt.timedelta(seconds=max(1, int(every.total_seconds())))
            return Schedule(zone=zone, every=every)
        expanded = _DESCRIPTORS.get(spec)
        if expanded is None:
            raise CronError(f"unrecognized descriptor: {spec}")
        spec = expanded
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    bits = [_field(text, bounds) for text, bounds in zip(fields, _FIELDS)]
    return Schedule(*bits, zone=zone)
