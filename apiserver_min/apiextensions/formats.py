"""The string formats a custom object's values are checked against (upstream's
default format registry): a string field whose schema names one of these formats
must be of that form; formats not named here (``int32``, ``int64``, ``float``,
``double`` and any other word) are not checked, as upstream.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import ipaddress
import re
from collections.abc import Callable
from email.utils import parseaddr
from urllib.parse import urlsplit

_UUID = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_UUID3 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_UUID4 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_UUID5 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
# A label of letters (any script), digits and symbols, hyphens inside; at least two
# labels, the last of letters only, or a single label.
_ALNUM = r"[^\W_]"
_HOSTNAME = re.compile(
    rf"^(?:{_ALNUM}(?:-?{_ALNUM}{{0,62}})?|(?:{_ALNUM}(?:(?:{_ALNUM}|-){{0,61}}{_ALNUM})?\.)+[^\W\d_]{{2,63}})$"
)
_SSN = re.compile(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$")
_HEXCOLOR = re.compile(r"^#?(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_BYTE255 = r"\s*(?:0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*"
_RGBCOLOR = re.compile(rf"^rgb\({_BYTE255},{_BYTE255},{_BYTE255}\)$")
_CREDITCARD = re.compile(
    r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(?:222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720)[0-9]{12}"
    r"|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11}"
    r"|6[27][0-9]{14})$"
)
_MAC_COLON = re.compile(r"^[0-9a-fA-F]{2}(?:([:-])[0-9a-fA-F]{2})+$")
_MAC_DOT = re.compile(r"^[0-9a-fA-F]{4}(?:\.[0-9a-fA-F]{4})+$")
_GO_DURATION = re.compile(r"^[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")
_DURATION_PART = re.compile(r"(\d+)\s*([A-Za-zµ]+)")
_DURATION_UNITS = frozenset(
    "ns nanosecond nanoseconds us µs microsecond microseconds mcs ms millisecond milliseconds s sec second seconds "
    "m min minute minutes h hr hour hours d day days w wk week weeks".split()
)


def _date_time(value: str) -> bool:
    if not re.match(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}", value):
        return False
    try:
        _dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


def _date(value: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return False
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _byte(value: str) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _ip(value: str, sep: str) -> bool:
    """An IP address holding ``sep`` (``.`` for ipv4, ``:`` for ipv6: upstream counts an
    IPv4-mapped IPv6 address as both)."""
    if sep not in value or "%" in value:
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _cidr(value: str) -> bool:
    if "/" not in value:
        return False
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return True


def _mac(value: str) -> bool:
    """48-bit, 64-bit or 20-octet addresses, in colon, hyphen or dotted form."""
    if _MAC_COLON.match(value):
        return (len(value) + 1) // 3 in (6, 8, 20)
    if _MAC_DOT.match(value):
        return (len(value) + 1) // 5 * 2 in (6, 8, 20)
    return False


def _email(value: str) -> bool:
    _name, addr = parseaddr(value)
    if not addr or "@" not in addr:
        return False
    local, _, domain = addr.rpartition("@")
    return bool(local) and bool(domain) and " " not in addr


def _hostname(value: str) -> bool:
    return len(value) <= 255 and bool(_HOSTNAME.match(value))


def _uri(value: str) -> bool:
    """An absolute URI or an absolute path (upstream parses it as a request URI)."""
    if not value or any(c.isspace() for c in value):
        return False
    if value.startswith("/"):
        return True
    parts = urlsplit(value)
    return bool(parts.scheme) and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme) is not None


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _creditcard(value: str) -> bool:
    digits = value.replace("-", "").replace(" ", "")
    return bool(_CREDITCARD.match(digits)) and _luhn(digits)


def _isbn10(value: str) -> bool:
    s = value.replace("-", "").replace(" ", "")
    if not re.fullmatch(r"\d{9}[\dX]", s):
        return False
    total = sum((10 - i) * int(c) for i, c in enumerate(s[:9])) + (10 if s[9] == "X" else int(s[9]))
    return total % 11 == 0


def _isbn13(value: str) -> bool:
    s = value.replace("-", "").replace(" ", "")
    if not re.fullmatch(r"\d{13}", s):
        return False
    total = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(s[:12]))
    return (10 - total % 10) % 10 == int(s[12])


def _duration(value: str) -> bool:
    """Go's duration syntax (``1h30m``), or numbers with unit words (``3 days``)."""
    if _GO_DURATION.match(value):
        return True
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s+", "", value):
        return False
    return all(unit in _DURATION_UNITS for _n, unit in parts)


_CHECKS: dict[str, Callable[[str], bool]] = {
    "date-time": _date_time,
    "datetime": _date_time,
    "date": _date,
    "byte": _byte,
    "password": lambda value: True,
    "uuid": lambda value: bool(_UUID.match(value)),
    "uuid3": lambda value: bool(_UUID3.match(value)),
    "uuid4": lambda value: bool(_UUID4.match(value)),
    "uuid5": lambda value: bool(_UUID5.match(value)),
    "email": _email,
    "hostname": _hostname,
    "ipv4": lambda value: _ip(value, "."),
    "ipv6": lambda value: _ip(value, ":"),
    "cidr": _cidr,
    "mac": _mac,
    "uri": _uri,
    "isbn": lambda value: _isbn10(value) or _isbn13(value),
    "isbn10": _isbn10,
    "isbn13": _isbn13,
    "creditcard": _creditcard,
    "ssn": lambda value: bool(_SSN.match(value)),
    "hexcolor": lambda value: bool(_HEXCOLOR.match(value)),
    "rgbcolor": lambda value: bool(_RGBCOLOR.match(value)),
    "duration": _duration,
}
KNOWN = frozenset(_CHECKS)


def valid(fmt: str, value: str) -> bool:
    """Whether ``value`` is of format ``fmt`` (true for formats not checked)."""
    check = _CHECKS.get(fmt)
    return check is None or check(value)
