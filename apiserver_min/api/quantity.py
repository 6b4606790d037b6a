"""Resource quantities (``100Mi``, ``250m``, ``1e3``) with upstream semantics.

Manifests written for upstream clusters carry quantities in requests, limits,
capacity and quota. Clients diff what they sent against what the server
returns, and the node agent compares requests with capacity, so two things
must match upstream exactly: the value a string denotes (including the quiet
rounding of sub-nano amounts and the cap on binary-suffixed values) and the
canonical string the server writes back. Floats cannot do either, so values
are held as an exact integer count of nano-units, which is also upstream's
finest precision: every parsed value is rounded to it, so no information is
lost by storing it that way.

Deliberate departures from upstream, all for inputs no real manifest uses:

* ``"."``, ``"-"`` and ``"+"`` are rejected; upstream reads them as zero.
* The canonical form is always produced; upstream echoes some non-canonical
  inputs verbatim (``"+1k"``, ``"01k"``, ``"1E3"``, ``"1e+3"``).
* Magnitudes of 10**1000 and above, and literals with more than 1000
  significant digits, are rejected instead of being carried as huge integers.
* A binary value of 1024Ei or more is written with the ``Ei`` suffix;
  upstream has no larger suffix and drops the exponent.
"""

from __future__ import annotations

import decimal
import enum
import math
from fractions import Fraction
from typing import Union

__all__ = [
    "Format",
    "Quantity",
    "QuantityError",
    "parse_quantity",
    "MAX_BINARY_SI",
]

# Every value is an integer number of these; upstream's Nano scale.
_NANO = 10**9

# Upstream caps parsed binary-suffixed magnitudes (silently) at int64's max.
MAX_BINARY_SI = (1 << 63) - 1

_MAX_SIGNIFICANT_DIGITS = 1000
_MAX_INTEGER_DIGITS = 1000
_INT32_MAX = (1 << 31) - 1

_DIGITS = frozenset("0123456789")


class Format(str, enum.Enum):
    """The suffix family a quantity was written in and is written back in."""

    DECIMAL_SI = "DecimalSI"  # 12M = 12 * 10**6
    BINARY_SI = "BinarySI"  # 12Mi = 12 * 2**20
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6

    def __str__(self) -> str:
        return self.value


_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
# Powers of 1024 -> suffix, and powers of ten -> suffix, for writing.
_BINARY_BY_POWER = {exp // 10: sfx for sfx, exp in _BINARY_SUFFIXES.items()}
_BINARY_BY_POWER[0] = ""
_MAX_BINARY_POWER = max(_BINARY_BY_POWER)
_DECIMAL_BY_EXPONENT = {exp: sfx for sfx, exp in _DECIMAL_SUFFIXES.items()}
_MAX_DECIMAL_SI_EXPONENT = max(_DECIMAL_BY_EXPONENT)


class QuantityError(ValueError):
    """A value that is not a valid quantity; the message names it and why."""

    def __init__(self, value: object, reason: str) -> None:
        shown = f'"{value}"' if isinstance(value, str) else repr(value)
        super().__init__(f"invalid quantity {shown}: {reason}")
        self.value = value
        self.reason = reason


def _round_away(numerator: int, denominator: int) -> int:
    """numerator / denominator, rounding any remainder away from zero."""
    q, r = divmod(abs(numerator), denominator)
    if r:
        q += 1
    return q if numerator >= 0 else -q


def _suffix_hint(suffix: str) -> str:
    known = [*_BINARY_SUFFIXES, *(s for s in _DECIMAL_SUFFIXES if s)]
    candidates = [k for k in known if k.lower() == suffix.lower()]
    if not candidates and len(suffix) > 1 and suffix[-1] in "bB":
        # "MiB", "GB": a byte unit is implied, the suffix is the prefix alone.
        stem = suffix[:-1]
        candidates = [k for k in known if k == stem] or [k for k in known if k.lower() == stem.lower()]
    if suffix == "K":
        candidates = ["k", "Ki"]
    if not candidates:
        return ""
    options = " or ".join(f'"{c}"' for c in candidates)
    return f" (suffixes are case-sensitive and take no unit: did you mean {options}?)"


class Quantity:
    """An exact, immutable resource quantity.

    Equality, ordering and hashing compare values only, so ``1Ki == 1024``;
    the format matters only for the canonical string.
    """

    __slots__ = ("_nanos", "_format")

    _nanos: int
    _format: Format

    def __init__(
        self,
        value: Union[int, Fraction, decimal.Decimal] = 0,
        format: Format = Format.DECIMAL_SI,
    ) -> None:
        """Build from an exact number, rounding its magnitude up to a nano.

        Like upstream's NewQuantity, no binary cap is applied here.
        """
        if isinstance(value, bool) or not isinstance(value, (int, Fraction, decimal.Decimal)):
            raise TypeError(f"Quantity value must be int, Fraction or Decimal, not {type(value).__name__}")
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise QuantityError(str(value), "not a finite number")
            value = Fraction(value)
        frac = Fraction(value) * _NANO
        nanos = _round_away(frac.numerator, frac.denominator)
        object.__setattr__(self, "_nanos", nanos)
        object.__setattr__(self, "_format", Format(format))

    @classmethod
    def _from_nanos(cls, nanos: int, fmt: Format) -> "Quantity":
        q = object.__new__(cls)
        object.__setattr__(q, "_nanos", nanos)
        object.__setattr__(q, "_format", fmt)
        return q

    # -- parsing -----------------------------------------------------------

    @classmethod
    def parse(cls, s: str) -> "Quantity":
        """Parse a quantity string such as ``"100Mi"``, ``"0.5"`` or ``"1e3"``."""
        if not isinstance(s, str):
            raise TypeError(f"Quantity.parse expects a str, not {type(s).__name__}")
        if s == "":
            raise QuantityError(s, "empty")
        if s != s.strip():
            raise QuantityError(s, "leading or trailing whitespace")

        i, n = 0, len(s)
        negative = False
        if s[0] in "+-":
            negative = s[0] == "-"
            i = 1
        start = i
        while i < n and s[i] in _DIGITS:
            i += 1
        whole = s[start:i]
        fraction = ""
        if i < n and s[i] == ".":
            i += 1
            frac_start = i
            while i < n and s[i] in _DIGITS:
                i += 1
            fraction = s[frac_start:i]
        suffix = s[i:]
        if not whole and not fraction:
            if suffix and suffix[0] in "+-":
                raise QuantityError(s, "more than one sign")
            where = f' before "{suffix}"' if suffix else ""
            raise QuantityError(s, f"missing a number{where}")

        fmt, base, exponent = cls._interpret_suffix(s, suffix)

        digits = (whole + fraction).lstrip("0")
        magnitude = 0
        if digits:
            stripped = digits.rstrip("0")
            scale = len(digits) - len(stripped) - len(fraction)
            digits = stripped
            if len(digits) > _MAX_SIGNIFICANT_DIGITS:
                raise QuantityError(s, f"more than {_MAX_SIGNIFICANT_DIGITS} significant digits")
            if base == 10:
                scale += exponent
            if len(digits) + scale > _MAX_INTEGER_DIGITS:
                raise QuantityError(s, f"magnitude of 10**{_MAX_INTEGER_DIGITS} or more")
            magnitude = cls._nanos_rounded_up(digits, scale, exponent if base == 2 else 0)

        if fmt is Format.BINARY_SI:
            if magnitude > MAX_BINARY_SI * _NANO:
                magnitude = MAX_BINARY_SI * _NANO
            if 0 < magnitude < _NANO:
                # Upstream: a binary value below one unit is written decimal.
                fmt = Format.DECIMAL_SI
        return cls._from_nanos(-magnitude if negative else magnitude, fmt)

    @staticmethod
    def _interpret_suffix(s: str, suffix: str) -> tuple[Format, int, int]:
        if suffix in _DECIMAL_SUFFIXES:
            return Format.DECIMAL_SI, 10, _DECIMAL_SUFFIXES[suffix]
        if suffix in _BINARY_SUFFIXES:
            return Format.BINARY_SI, 2, _BINARY_SUFFIXES[suffix]
        if suffix[0] == ".":
            raise QuantityError(s, "more than one decimal point")
        if suffix == "e" or (suffix[0] in "eE" and len(suffix) > 1 and suffix[1] in "+-0123456789"):
            body = suffix[2:] if suffix[1:2] in ("+", "-") else suffix[1:]
            if not body or not set(body) <= _DIGITS:
                raise QuantityError(s, f'invalid exponent "{suffix}"')
            body = body.lstrip("0") or "0"
            if len(body) > 10 or int(body) > _INT32_MAX:
                raise QuantityError(s, f'exponent "{suffix}" out of range')
            exponent = int(body)
            return Format.DECIMAL_EXPONENT, 10, -exponent if suffix[1] == "-" else exponent
        raise QuantityError(s, f'unknown suffix "{suffix}"{_suffix_hint(suffix)}')

    @staticmethod
    def _nanos_rounded_up(digits: str, scale: int, binary_exponent: int) -> int:
        """ceil(int(digits) * 10**scale * 2**binary_exponent * 10**9).

        ``digits`` has no leading or trailing zeros, so whenever digits are
        cut off below a nano, what is cut off is non-zero.
        """
        shift = scale + 9
        if binary_exponent == 0:
            if shift >= 0:
                return int(digits) * 10**shift
            cut = -shift
            if cut >= len(digits):
                return 1
            return int(digits[:-cut]) + 1
        mantissa = int(digits) << binary_exponent
        if shift >= 0:
            return mantissa * 10**shift
        cut = -shift
        # 2**60 < 10**19: past this many places the value is below one nano.
        if cut >= len(digits) + 19:
            return 1
        return -(-mantissa // 10**cut)

    # -- accessors ---------------------------------------------------------

    @property
    def format(self) -> Format:
        return self._format

    def as_fraction(self) -> Fraction:
        """The exact value."""
        return Fraction(self._nanos, _NANO)

    def value(self) -> int:
        """The value in units, a remainder rounded away from zero (upstream Value)."""
        return _round_away(self._nanos, _NANO)

    def milli_value(self) -> int:
        """The value in thousandths, rounded away from zero (upstream MilliValue)."""
        return _round_away(self._nanos, _NANO // 1000)

    def nano_value(self) -> int:
        """The value in billionths; always exact."""
        return self._nanos

    def is_zero(self) -> bool:
        return self._nanos == 0

    def sign(self) -> int:
        return (self._nanos > 0) - (self._nanos < 0)

    def __bool__(self) -> bool:
        return self._nanos != 0

    # -- canonical form ----------------------------------------------------

    def canonical(self) -> str:
        """Upstream's canonical string: same family, largest exact suffix."""
        nanos = self._nanos
        if nanos == 0:
            return "0"
        fmt = self._format
        if fmt is Format.BINARY_SI:
            if abs(nanos) >= 1024 * _NANO and nanos % _NANO == 0:
                units = nanos // _NANO
                power = 0
                while power < _MAX_BINARY_POWER and units % 1024 == 0:
                    units //= 1024
                    power += 1
                return f"{units}{_BINARY_BY_POWER[power]}"
            # Small or fractional binary values are shown exactly, in decimal.
            fmt = Format.DECIMAL_SI

        mantissa, exponent = nanos, -9
        while mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        down = exponent % 3
        mantissa *= 10**down
        exponent -= down
        if fmt is Format.DECIMAL_SI and exponent <= _MAX_DECIMAL_SI_EXPONENT:
            return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"
        # DecimalExponent, or DecimalSI past "E" (upstream falls back the same way).
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    # -- arithmetic and comparison ------------------------------------------

    def _result_format(self, other: "Quantity") -> Format:
        # Upstream: a zero receiver adopts the other operand's format.
        return other._format if self._nanos == 0 else self._format

    def __add__(self, other: object) -> "Quantity":
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity._from_nanos(self._nanos + other._nanos, self._result_format(other))

    def __sub__(self, other: object) -> "Quantity":
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity._from_nanos(self._nanos - other._nanos, self._result_format(other))

    def __neg__(self) -> "Quantity":
        return Quantity._from_nanos(-self._nanos, self._format)

    def __pos__(self) -> "Quantity":
        return self

    def __abs__(self) -> "Quantity":
        return self if self._nanos >= 0 else -self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos == other._nanos

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos < other._nanos

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos <= other._nanos

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos > other._nanos

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos >= other._nanos

    def __hash__(self) -> int:
        return hash(self._nanos)

    # -- immutability ------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Quantity is immutable")

    def __reduce__(self):
        return (Quantity, (self.as_fraction(), self._format))

    def __copy__(self) -> "Quantity":
        return self

    def __deepcopy__(self, memo: dict) -> "Quantity":
        return self


def parse_quantity(value: object) -> Quantity:
    """Accept a quantity as it arrives in decoded JSON or YAML.

    Strings are trimmed first (as upstream's JSON decoding does); numbers are
    read from their shortest decimal spelling, which is the literal a JSON
    encoder wrote, so ``0.1`` means exactly one tenth.
    """
    if isinstance(value, Quantity):
        return value
    if isinstance(value, str):
        return Quantity.parse(value.strip())
    if isinstance(value, bool):
        raise QuantityError(value, "expected a string or a number, got a boolean")
    if isinstance(value, int):
        if value.bit_length() > _MAX_INTEGER_DIGITS * 10 // 3:
            # Too big to be valid, and possibly too big for str() or repr().
            raise QuantityError(
                f"<{value.bit_length()}-bit integer>",
                f"magnitude of 10**{_MAX_INTEGER_DIGITS} or more",
            )
        return Quantity.parse(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, "not a finite number")
        return Quantity.parse(repr(value))
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise QuantityError(str(value), "not a finite number")
        return Quantity.parse(str(value))
    kind = "null" if value is None else type(value).__name__
    raise QuantityError(value, f"expected a string or a number, got {kind}")
