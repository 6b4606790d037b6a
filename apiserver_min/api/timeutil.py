"""RFC 3339 timestamps in the exact spellings upstream's API objects use.

Object metadata and status carry three timestamp shapes: whole seconds
(``metav1.Time``), always six fractional digits (``metav1.MicroTime``, used
by leases and events), and Go's RFC3339Nano with trailing zeros trimmed.
Clients compare these strings byte for byte and upstream always writes UTC
with ``Z``, so formatting must not drift (``datetime.isoformat`` writes
``+00:00``, drops zero microseconds and does not pad years below 1000).
Reading follows Go's strict RFC 3339 parser: upper-case ``T`` and ``Z``,
two-digit fields, no leap second, any number of fractional digits.

Parsed values are aware UTC datetimes, truncated to the microsecond Python
can hold; ``parse_rfc3339_ns`` keeps the full nanoseconds for callers that
must re-emit them.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import re
from typing import Union

__all__ = [
    "TimestampError",
    "EPOCH",
    "parse_rfc3339",
    "parse_rfc3339_ns",
    "format_rfc3339",
    "format_rfc3339_micro",
    "format_rfc3339_nano",
    "now",
]

UTC = _dt.timezone.utc
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_NANO = 10**9

# Deliberately looser than RFC 3339 so that near misses get a precise reason.
_SHAPE = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})"
    r"(?P<sep>.)"
    r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})"
    r"(?P<frac>\.\d*)?"
    r"(?P<zone>.*)",
    re.ASCII | re.DOTALL,
)
_OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})", re.ASCII)
_FORM = "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"


class TimestampError(ValueError):
    """A value that is not a valid RFC 3339 timestamp; the message names it and why."""

    def __init__(self, value: object, reason: str) -> None:
        shown = f'"{value}"' if isinstance(value, str) else repr(value)
        super().__init__(f"invalid RFC 3339 timestamp {shown}: {reason}")
        self.value = value
        self.reason = reason


def _parse(s: object) -> tuple[_dt.datetime, int]:
    """The UTC instant truncated to whole seconds, and its nanoseconds."""
    if not isinstance(s, str):
        raise TimestampError(s, "expected a string")
    if s == "":
        raise TimestampError(s, "empty")
    m = _SHAPE.fullmatch(s)
    if m is None:
        raise TimestampError(s, _FORM)
    if m["sep"] != "T":
        raise TimestampError(s, f'date and time must be separated by "T", not {m["sep"]!r}')
    frac = m["frac"]
    if frac == ".":
        raise TimestampError(s, "decimal point without fractional digits")

    year, month, day = int(m["year"]), int(m["month"]), int(m["day"])
    hour, minute, second = int(m["hour"]), int(m["minute"]), int(m["second"])
    if year < _dt.MINYEAR:
        raise TimestampError(s, f"year {year} is out of range")
    if not 1 <= month <= 12:
        raise TimestampError(s, f"month {month} is out of range")
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        raise TimestampError(s, f"day {day} is out of range for {year:04d}-{month:02d}")
    if hour > 23:
        raise TimestampError(s, f"hour {hour} is out of range")
    if minute > 59:
        raise TimestampError(s, f"minute {minute} is out of range")
    if second > 59:
        raise TimestampError(s, f"second {second} is out of range")
    # Digits past nanoseconds are dropped, as Go does.
    nanos = int(frac[1:10].ljust(9, "0")) if frac else 0

    zone = m["zone"]
    if zone == "Z":
        offset = 0
    elif zone == "":
        raise TimestampError(s, "missing time zone (Z or \u00b1HH:MM)")
    elif zone == "z":
        raise TimestampError(s, 'time zone must be upper-case "Z"')
    else:
        om = _OFFSET.fullmatch(zone)
        if om is None:
            raise TimestampError(s, f'invalid time zone "{zone}", expected Z or \u00b1HH:MM')
        off_h, off_m = int(om[2]), int(om[3])
        if off_h > 23 or off_m > 59:
            raise TimestampError(s, f'time zone offset "{zone}" is out of range')
        offset = (off_h * 60 + off_m) * (-1 if om[1] == "-" else 1)

    try:
        utc = _dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC)
        utc -= _dt.timedelta(minutes=offset)
    except OverflowError:
        raise TimestampError(s, "out of range once converted to UTC") from None
    return utc, nanos


def parse_rfc3339(s: str) -> _dt.datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime (microseconds, truncated)."""
    utc, nanos = _parse(s)
    return utc.replace(microsecond=nanos // 1000)


def parse_rfc3339_ns(s: str) -> int:
    """Parse an RFC 3339 timestamp into exact nanoseconds since the Unix epoch."""
    utc, nanos = _parse(s)
    delta = utc - EPOCH
    return (delta.days * 86400 + delta.seconds) * _NANO + nanos


def _utc(dt: object) -> _dt.datetime:
    if not isinstance(dt, _dt.datetime):
        raise TypeError(f"expected a datetime, not {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise TimestampError(dt, "naive datetime: attach a time zone (e.g. tzinfo=timezone.utc)")
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise TimestampError(dt, "out of range once converted to UTC") from None


def _seconds(utc: _dt.datetime) -> str:
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"


def format_rfc3339(dt: _dt.datetime) -> str:
    """``2026-11-23T09:20:19Z``: UTC, whole seconds (fraction truncated), as metav1.Time."""
    return _seconds(_utc(dt)) + "Z"


def format_rfc3339_micro(dt: _dt.datetime) -> str:
    """``2026-11-23T09:20:19.123456Z``: always six digits, as metav1.MicroTime."""
    utc = _utc(dt)
    return f"{_seconds(utc)}.{utc.microsecond:06d}Z"


def format_rfc3339_nano(value: Union[_dt.datetime, int]) -> str:
    """Go's RFC3339Nano in UTC, trailing zeros trimmed.

    Takes an aware datetime or an int of nanoseconds since the Unix epoch.
    """
    if isinstance(value, _dt.datetime):
        utc = _utc(value)
        nanos = utc.microsecond * 1000
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds, nanos = divmod(value, _NANO)
        try:
            utc = EPOCH + _dt.timedelta(seconds=seconds)
        except OverflowError:
            raise TimestampError(value, "nanoseconds since the epoch out of range") from None
    else:
        raise TypeError(f"format_rfc3339_nano expects a datetime or int nanoseconds, not {type(value).__name__}")
    digits = f"{nanos:09d}".rstrip("0")
    return f"{_seconds(utc)}.{digits}Z" if digits else f"{_seconds(utc)}Z"


def now() -> _dt.datetime:
    """The current time as an aware UTC datetime."""
    return _dt.datetime.now(UTC)
