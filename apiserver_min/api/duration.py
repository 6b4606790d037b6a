"""Go-style durations (``"1h2m3.5s"``, ``"300ms"``), exactly as upstream reads and writes them.

Configuration files and flags borrowed from upstream components spell
timeouts and periods the way Go's ``time.ParseDuration`` reads them, and the
API writes durations back the way ``time.Duration.String`` prints them.
Python has no such format, and ``timedelta`` stops at microseconds, so the
exact value is kept as an integer count of nanoseconds inside Go's int64
range; ``timedelta`` is offered for callers that only need that precision.

Integer parts are exact. Fractional parts are computed the way Go computes
them (float64, at most about 19 significant digits), so that a config value
such as ``"0.3333333333333333333h"`` means the same nanosecond count here as
in a Go component reading the same file; anything ``format_duration`` writes
is reproduced exactly.
"""

from __future__ import annotations

import datetime as _dt
from typing import Union

__all__ = [
    "DurationError",
    "NANOSECOND",
    "MICROSECOND",
    "MILLISECOND",
    "SECOND",
    "MINUTE",
    "HOUR",
    "MIN_DURATION_NS",
    "MAX_DURATION_NS",
    "parse_duration",
    "parse_duration_ns",
    "format_duration",
    "timedelta_to_ns",
    "ns_to_timedelta",
]

NANOSECOND = 1
MICROSECOND = 1000 * NANOSECOND
MILLISECOND = 1000 * MICROSECOND
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

# Go's time.Duration is an int64 count of nanoseconds.
MIN_DURATION_NS = -(1 << 63)
MAX_DURATION_NS = (1 << 63) - 1

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign, what Go prints
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_DIGITS = frozenset("0123456789")
_LIMIT = 1 << 63  # magnitude bound while accumulating; -2**63 is reachable


class DurationError(ValueError):
    """A string that is not a valid Go duration; the message names it and why."""


def _quote(s: str) -> str:
    """Quote like Go's time package: double quotes, control characters escaped."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _invalid(orig: str, reason: str) -> DurationError:
    return DurationError(f"time: invalid duration {_quote(orig)}: {reason}")


def _go_fraction(digits: str) -> tuple[int, float]:
    """Go's leadingFraction: digits as an integer over a float power of ten.

    Accumulation stops (silently) once another digit would overflow int64,
    exactly where Go stops, so long fractions round the same way.
    """
    numerator, denominator = 0, 1.0
    for ch in digits:
        if numerator > (_LIMIT - 1) // 10:
            break
        nxt = numerator * 10 + ord(ch) - 48
        if nxt > _LIMIT:
            break
        numerator = nxt
        denominator *= 10
    return numerator, denominator


def parse_duration_ns(s: str) -> int:
    """Parse a Go duration string into an exact number of nanoseconds."""
    if not isinstance(s, str):
        raise DurationError(f"time: invalid duration {s!r}: expected a string")
    orig = s
    negative = False
    if s and s[0] in "+-":
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        # Go's one unit-less spelling.
        return 0
    if s == "":
        raise _invalid(orig, "empty" if orig == "" else "sign without a number")

    total = 0
    i, n = 0, len(s)
    while i < n:
        if not (s[i] == "." or s[i] in _DIGITS):
            raise _invalid(orig, f"expected a number at {_quote(s[i:])}")
        j = i
        while j < n and s[j] in _DIGITS:
            j += 1
        whole = s[i:j]
        fraction = ""
        if j < n and s[j] == ".":
            j += 1
            k = j
            while j < n and s[j] in _DIGITS:
                j += 1
            fraction = s[k:j]
        if not whole and not fraction:
            raise _invalid(orig, "a decimal point without digits")

        unit_start = j
        while j < n and s[j] != "." and s[j] not in _DIGITS:
            j += 1
        unit = s[unit_start:j]
        if not unit:
            raise DurationError(f"time: missing unit in duration {_quote(orig)}")
        scale = _UNITS.get(unit)
        if scale is None:
            raise DurationError(
                f"time: unknown unit {_quote(unit)} in duration {_quote(orig)}"
                " (valid units are ns, us, \u00b5s, ms, s, m, h)"
            )

        whole = whole.lstrip("0")
        if len(whole) > 19:
            raise _invalid(orig, "out of range for a 64-bit duration")
        value = int(whole or "0") * scale
        if fraction:
            numerator, denominator = _go_fraction(fraction)
            if numerator:
                value += int(float(numerator) * (float(scale) / denominator))
        total += value
        if total > _LIMIT:
            raise _invalid(orig, "out of range for a 64-bit duration")
        i = j

    if negative:
        return -total
    if total > MAX_DURATION_NS:
        raise _invalid(orig, "out of range for a 64-bit duration")
    return total


def ns_to_timedelta(ns: int) -> _dt.timedelta:
    """Nanoseconds to a timedelta, dropping sub-microsecond digits (toward zero)."""
    micros = abs(ns) // MICROSECOND
    return _dt.timedelta(microseconds=-micros if ns < 0 else micros)


def timedelta_to_ns(td: _dt.timedelta) -> int:
    """A timedelta as an exact number of nanoseconds."""
    return ((td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds) * MICROSECOND


def parse_duration(s: str) -> _dt.timedelta:
    """Parse a Go duration string; sub-microsecond digits are dropped toward zero."""
    return ns_to_timedelta(parse_duration_ns(s))


def _fraction(value: int, places: int) -> str:
    """value / 10**places in decimal, trailing zeros and bare point omitted."""
    whole, rest = divmod(value, 10**places)
    digits = f"{rest:0{places}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_duration(d: Union[_dt.timedelta, int]) -> str:
    """Format like Go's ``time.Duration.String`` (``"1h2m3.5s"``, ``"1.5µs"``)."""
    if isinstance(d, _dt.timedelta):
        ns = timedelta_to_ns(d)
    elif isinstance(d, int) and not isinstance(d, bool):
        ns = d
    else:
        raise TypeError(f"format_duration expects a timedelta or int nanoseconds, not {type(d).__name__}")
    if not MIN_DURATION_NS <= ns <= MAX_DURATION_NS:
        raise DurationError(f"time: duration of {ns}ns is out of range for a 64-bit duration")
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < SECOND:
        # Below a second Go switches to the largest sub-second unit.
        if u < MICROSECOND:
            return f"{sign}{u}ns"
        if u < MILLISECOND:
            return f"{sign}{_fraction(u, 3)}\u00b5s"
        return f"{sign}{_fraction(u, 6)}ms"
    seconds, nanos = divmod(u, SECOND)
    out = _fraction((seconds % 60) * SECOND + nanos, 9) + "s"
    minutes = seconds // 60
    if minutes:
        out = f"{minutes % 60}m{out}"
        hours = minutes // 60
        if hours:
            out = f"{hours}h{out}"
    return sign + out
