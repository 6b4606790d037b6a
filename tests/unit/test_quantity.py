"""Quantity parsing, canonical form and arithmetic against upstream's behaviour."""

from __future__ import annotations

import copy
import decimal
import pickle
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver_min.api.quantity import (
    MAX_BINARY_SI,
    Format,
    Quantity,
    QuantityError,
    parse_quantity,
)

Q = Quantity.parse
DSI, BSI, DEX = Format.DECIMAL_SI, Format.BINARY_SI, Format.DECIMAL_EXPONENT
NANO = Fraction(1, 10**9)


def away_from_zero(x: Fraction, unit: Fraction) -> Fraction:
    """x rounded to a multiple of unit, any remainder rounded away from zero."""
    steps = abs(x) / unit
    whole = steps.numerator // steps.denominator
    if whole != steps:
        whole += 1
    return (whole if x >= 0 else -whole) * unit


# -- parsing and canonical form ---------------------------------------------

# input, canonical string, format, exact value
CANONICAL = [
    # the examples the API is usually fed
    ("100Mi", "100Mi", BSI, 100 * 2**20),
    ("0.1", "100m", DSI, Fraction(1, 10)),
    ("1e3", "1e3", DEX, 1000),
    ("1000", "1k", DSI, 1000),
    ("1024", "1024", DSI, 1024),
    ("1.5Gi", "1536Mi", BSI, 1536 * 2**20),
    ("500m", "500m", DSI, Fraction(1, 2)),
    ("0.5", "500m", DSI, Fraction(1, 2)),
    ("1.5e3", "1500", DEX, 1500),
    ("100M", "100M", DSI, 10**8),
    ("2048Ki", "2Mi", BSI, 2 * 2**20),
    ("1Gi", "1Gi", BSI, 2**30),
    ("0", "0", DSI, 0),
    ("-1", "-1", DSI, -1),
    ("1.5", "1500m", DSI, Fraction(3, 2)),
    ("1.5Ki", "1536", BSI, 1536),
    # zeros of every family print as a bare 0
    ("0Ki", "0", BSI, 0),
    ("0m", "0", DSI, 0),
    ("0e3", "0", DEX, 0),
    ("-0", "0", DSI, 0),
    ("0.000", "0", DSI, 0),
    # binary
    ("1Ki", "1Ki", BSI, 1024),
    ("8Ki", "8Ki", BSI, 8192),
    ("1024Mi", "1Gi", BSI, 2**30),
    ("1025Ki", "1025Ki", BSI, 1025 * 1024),
    ("3Ei", "3Ei", BSI, 3 * 2**60),
    ("100.035Ki", "102435840m", BSI, Fraction(10243584, 100)),
    ("0.5Mi", "512Ki", BSI, 2**19),
    ("-1Ki", "-1Ki", BSI, -1024),
    ("-0.5Ki", "-512", BSI, -512),
    (".001Ki", "1024m", BSI, Fraction(1024, 1000)),
    (".000001Ki", "1024u", DSI, Fraction(1024, 10**6)),
    (".000000001Ki", "1024n", DSI, Fraction(1024, 10**9)),
    # decimal SI
    ("5n", "5n", DSI, 5 * NANO),
    ("4u", "4u", DSI, Fraction(4, 10**6)),
    ("50k", "50k", DSI, 50000),
    ("40T", "40T", DSI, 40 * 10**12),
    ("1E", "1E", DSI, 10**18),
    ("12E", "12E", DSI, 12 * 10**18),
    ("1000E", "1e21", DSI, 10**21),  # no suffix past E: exponent form
    ("100.035k", "100035", DSI, 100035),
    ("10.035M", "10035k", DSI, 10035000),
    ("0.0005k", "500m", DSI, Fraction(1, 2)),
    ("9.01", "9010m", DSI, Fraction(901, 100)),
    ("-9.01", "-9010m", DSI, Fraction(-901, 100)),
    ("7.123456M", "7123456", DSI, 7123456),
    ("6.987654321G", "6987654321", DSI, 6987654321),
    ("1.01E", "1010P", DSI, 101 * 10**16),
    ("0.00500", "5m", DSI, Fraction(5, 1000)),
    (".001", "1m", DSI, Fraction(1, 1000)),
    ("1.", "1", DSI, 1),
    ("1.G", "1G", DSI, 10**9),
    ("+1k", "1k", DSI, 1000),
    ("01k", "1k", DSI, 1000),
    ("1080m", "1080m", DSI, Fraction(108, 100)),
    ("1234567M", "1234567M", DSI, 1234567 * 10**6),
    ("18446744073709551616", "18446744073709551616", DSI, 2**64),
    ("1.2345", "1234500u", DSI, Fraction(12345, 10**4)),
    # decimal exponent
    ("1E-3", "1e-3", DEX, Fraction(1, 1000)),
    ("1E6", "1e6", DEX, 10**6),
    ("1e+3", "1e3", DEX, 1000),
    ("1e03", "1e3", DEX, 1000),
    ("1e0", "1", DEX, 1),
    ("1.2e3", "1200", DEX, 1200),
    ("1.3E+6", "1300e3", DEX, 1300000),
    ("1.40e9", "1400e6", DEX, 14 * 10**8),
    ("1e14", "100e12", DEX, 10**14),
    ("0.5e-1", "50e-3", DEX, Fraction(5, 100)),
    ("80e-3", "80e-3", DEX, Fraction(8, 100)),
    ("-1e3", "-1e3", DEX, -1000),
    # sub-nano values round away from zero to a whole nano
    ("3.001n", "4n", DSI, 4 * NANO),
    ("1.1E-9", "2e-9", DEX, 2 * NANO),
    ("0.0000000001", "1n", DSI, NANO),
    ("0.9n", "1n", DSI, NANO),
    ("0.00000012345", "124n", DSI, 124 * NANO),
    ("-0.1n", "-1n", DSI, -NANO),
    ("1e-1000", "1e-9", DEX, NANO),
    (".000000000001Ki", "2n", DSI, 2 * NANO),  # and leaves binary
    # binary values are capped at 2**63-1, as upstream does
    ("9Ei", str(MAX_BINARY_SI), BSI, MAX_BINARY_SI),
    ("8Ei", str(MAX_BINARY_SI), BSI, MAX_BINARY_SI),
    ("9223372036854775807Ki", str(MAX_BINARY_SI), BSI, MAX_BINARY_SI),
    ("-9Ei", f"-{MAX_BINARY_SI}", BSI, -MAX_BINARY_SI),
]


@pytest.mark.parametrize("text,canonical,fmt,value", CANONICAL)
def test_parse_and_canonical(text, canonical, fmt, value):
    q = Q(text)
    assert q.as_fraction() == value
    assert q.format is fmt
    assert q.canonical() == canonical
    assert str(q) == canonical
    assert repr(q) == f"Quantity({canonical!r})"


@pytest.mark.parametrize("text,canonical,fmt,value", CANONICAL)
def test_canonical_reparses_to_same_value_and_string(text, canonical, fmt, value):
    again = Q(canonical)
    assert again == Q(text)
    assert again.canonical() == canonical


@pytest.mark.parametrize("text", [c[0] for c in CANONICAL if c[3] != 0])
def test_negation_prefixes_a_minus(text):
    q = Q(text)
    assert (-q).canonical() == ("-" + q.canonical()).replace("--", "")
    assert (-q).format is q.format


def test_equality_crosses_formats():
    assert Q("1Ki") == Q("1024")
    assert Q("1k") == Q("1e3") == Q("1000") == Q("1000000m")
    assert Q("0.5") == Q("500m") == Q("5e-1")
    assert Q("1Gi") != Q("1G")
    assert hash(Q("1Ki")) == hash(Q("1024"))
    assert len({Q("1k"), Q("1e3"), Q("1000"), Q("1Ki")}) == 2


def test_ordering():
    assert Q("1G") < Q("1Gi")
    assert Q("10000T") > Q("100Gi")
    assert Q("100m") > Q("50m")
    assert Q("-1") < Q("0") <= Q("0Ki") < Q("1n")
    assert Q("1Ki") >= Q("1024") and Q("1Ki") <= Q("1024")
    assert sorted([Q("1Mi"), Q("1M"), Q("1k"), Q("1Ki")]) == [Q("1k"), Q("1Ki"), Q("1M"), Q("1Mi")]
    assert max(Q("1"), Q("999m")) == Q("1")


def test_comparison_with_other_types():
    assert Q("1") != 1
    assert (Q("1") == "1") is False
    with pytest.raises(TypeError):
        Q("1") < 2  # noqa: B015 - the comparison is what must raise; its value is unused
    with pytest.raises(TypeError):
        Q("1") + 1


# -- values -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value,milli",
    [
        ("1", 1, 1000),
        ("1.5", 2, 1500),
        ("-1.5", -2, -1500),
        ("100m", 1, 100),
        ("1n", 1, 1),
        ("-1n", -1, -1),
        ("1.0001m", 1, 2),
        ("0", 0, 0),
        ("1Ki", 1024, 1024000),
        ("1.5Gi", 1610612736, 1610612736000),
        ("9.01", 10, 9010),
        ("-9.01", -10, -9010),
        ("1e21", 10**21, 10**24),  # no int64 overflow here
    ],
)
def test_value_and_milli_value_round_away_from_zero(text, value, milli):
    q = Q(text)
    assert q.value() == value
    assert q.milli_value() == milli


def test_accessors():
    q = Q("-1500m")
    assert q.nano_value() == -1_500_000_000
    assert q.sign() == -1 and Q("0").sign() == 0 and Q("1n").sign() == 1
    assert Q("0Mi").is_zero() and not q.is_zero()
    assert bool(q) and not Q("0")
    assert abs(q) == Q("1.5") and +q is q


# -- construction from numbers ----------------------------------------------


def test_constructor_from_exact_numbers():
    assert Quantity(1024, BSI).canonical() == "1Ki"
    assert Quantity(1000).canonical() == "1k"
    assert Quantity(Fraction(1, 3)).canonical() == "333333334n"
    assert Quantity(Fraction(-1, 3)).canonical() == "-333333334n"
    assert Quantity(decimal.Decimal("1.5")).canonical() == "1500m"
    assert Quantity(Fraction(1, 2), BSI).canonical() == "500m"
    assert Quantity(2**70, BSI).canonical() == "1024Ei"  # not capped, not truncated
    assert Quantity().canonical() == "0"
    with pytest.raises(TypeError):
        Quantity(1.5)  # floats are not exact; use parse_quantity
    with pytest.raises(TypeError):
        Quantity(True)
    with pytest.raises(QuantityError):
        Quantity(decimal.Decimal("NaN"))


@pytest.mark.parametrize(
    "value,canonical",
    [
        (1, "1"),
        (1000, "1k"),
        (-3, "-3"),
        (0, "0"),
        (0.1, "100m"),
        (1.5, "1500m"),
        (-0.0, "0"),
        (1e20, "100e18"),  # a JSON 1e+20 reads as the exponent form
        (2.5e-3, "2500u"),
        (1e-12, "1e-9"),
        (decimal.Decimal("2.50"), "2500m"),
        ("  250m ", "250m"),  # JSON decoding trims, like upstream's UnmarshalJSON
        ("1Gi", "1Gi"),
    ],
)
def test_parse_quantity_accepts_json_values(value, canonical):
    assert parse_quantity(value).canonical() == canonical


def test_parse_quantity_rejects_huge_integers_without_printing_them():
    with pytest.raises(QuantityError) as info:
        parse_quantity(10**6000)
    assert str(info.value) == 'invalid quantity "<19932-bit integer>": magnitude of 10**1000 or more'
    with pytest.raises(QuantityError, match="magnitude"):
        parse_quantity(10**1000)
    assert parse_quantity(10**999 - 1).as_fraction() == 10**999 - 1


def test_parse_quantity_passes_quantities_through():
    q = Q("1Gi")
    assert parse_quantity(q) is q


@pytest.mark.parametrize(
    "value,message",
    [
        (True, "invalid quantity True: expected a string or a number, got a boolean"),
        (None, "invalid quantity None: expected a string or a number, got null"),
        ([1], "invalid quantity [1]: expected a string or a number, got list"),
        (float("nan"), "invalid quantity nan: not a finite number"),
        (float("inf"), "invalid quantity inf: not a finite number"),
        ("", 'invalid quantity "": empty'),
        ("12Zi", 'invalid quantity "12Zi": unknown suffix "Zi"'),
    ],
)
def test_parse_quantity_rejects(value, message):
    with pytest.raises(QuantityError) as info:
        parse_quantity(value)
    assert str(info.value) == message


def test_parse_rejects_non_strings():
    with pytest.raises(TypeError):
        Quantity.parse(5)  # type: ignore[arg-type]


# -- errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty"),
        ("12Zi", 'unknown suffix "Zi"'),
        ("1.2.3", "more than one decimal point"),
        ("1.1.M", "more than one decimal point"),
        ("1i", 'unknown suffix "i"'),
        (".5i", 'unknown suffix "i"'),
        ("-3.01i", 'unknown suffix "i"'),
        ("0.1am", 'unknown suffix "am"'),
        ("0.1mi", 'unknown suffix "mi" (suffixes are case-sensitive and take no unit: did you mean "Mi"?)'),
        ("1K", 'unknown suffix "K" (suffixes are case-sensitive and take no unit: did you mean "k" or "Ki"?)'),
        ("1GiB", 'unknown suffix "GiB" (suffixes are case-sensitive and take no unit: did you mean "Gi"?)'),
        ("1MB", 'unknown suffix "MB" (suffixes are case-sensitive and take no unit: did you mean "M"?)'),
        ("1ki", 'unknown suffix "ki" (suffixes are case-sensitive and take no unit: did you mean "Ki"?)'),
        ("1+1.0M", 'unknown suffix "+1.0M"'),
        ("aoeu", 'missing a number before "aoeu"'),
        ("Gi", 'missing a number before "Gi"'),
        (".", "missing a number"),
        ("-", "missing a number"),
        ("+", "missing a number"),
        ("-.Ki", 'missing a number before "Ki"'),
        ("+-1", "more than one sign"),
        ("--1", "more than one sign"),
        ("-3.01e-", 'invalid exponent "e-"'),
        ("1e", 'invalid exponent "e"'),
        ("1E", None),  # exa, not an exponent
        ("1e3.5", 'invalid exponent "e3.5"'),
        ("1e3k", 'invalid exponent "e3k"'),
        ("1E+-3", 'invalid exponent "E+-3"'),
        ("1e99999999999", 'exponent "e99999999999" out of range'),
        ("1e1000", "magnitude of 10**1000 or more"),
        ("1" + "0" * 1000, "magnitude of 10**1000 or more"),
        ("0." + "1" * 1001, "more than 1000 significant digits"),
        (" 1", "leading or trailing whitespace"),
        ("1 ", "leading or trailing whitespace"),
        ("1 Gi", 'unknown suffix " Gi"'),
        ("１", 'missing a number before "１"'),  # full-width digit is not a digit here
    ],
)
def test_parse_errors_name_input_and_reason(text, reason):
    if reason is None:
        Q(text)
        return
    with pytest.raises(QuantityError) as info:
        Q(text)
    assert str(info.value) == f'invalid quantity "{text}": {reason}'
    assert info.value.value == text
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)


def test_tiny_exponents_and_long_fractions_stay_cheap():
    assert Q("1e-2147483647") == Q("1n")
    assert Q("0." + "0" * 5000 + "1") == Q("1n")
    assert Q("1." + "0" * 5000) == Q("1")


# -- arithmetic -------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,total,difference",
    [
        ("1Gi", "512Mi", "1536Mi", "512Mi"),
        ("100m", "0", "100m", "100m"),
        ("0", "100m", "100m", "-100m"),  # a zero left operand adopts the other's format
        ("0", "1Gi", "1Gi", "-1Gi"),
        ("1Ki", "1", "1025", "1023"),
        ("1", "1Ki", "1025", "-1023"),
        ("1e3", "1k", "2e3", "0"),
        ("1k", "1e3", "2k", "0"),
        ("10", "1", "11", "9"),
        ("1n", "1n", "2n", "0"),
        ("7Ei", "7Ei", "14Ei", "0"),  # sums are not capped
        ("1Mi", "1Ki", "1025Ki", "1023Ki"),
    ],
)
def test_add_and_sub_keep_left_format(a, b, total, difference):
    assert (Q(a) + Q(b)).canonical() == total
    assert (Q(a) - Q(b)).canonical() == difference


def test_arithmetic_returns_new_values():
    a, b = Q("1"), Q("2")
    c = a + b
    assert (a, b, c) == (Q("1"), Q("2"), Q("3"))
    assert sum([Q("1Ki"), Q("1Ki")], Quantity(0, BSI)).canonical() == "2Ki"


def test_immutable_hashable_copyable():
    q = Q("1.5Gi")
    with pytest.raises(AttributeError):
        q._nanos = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        q.format = DSI  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del q._nanos
    assert copy.copy(q) is q and copy.deepcopy(q) is q
    restored = pickle.loads(pickle.dumps(q))
    assert restored == q and restored.canonical() == "1536Mi" and restored.format is BSI
    assert {q: "x"}[Q("1536Mi")] == "x"


def test_format_enum_spells_upstream_names():
    assert [str(f) for f in Format] == ["DecimalSI", "BinarySI", "DecimalExponent"]
    assert Format("BinarySI") is BSI


# -- properties -------------------------------------------------------------

_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantity_strings(draw) -> str:
    sign = draw(st.sampled_from(["", "-", "+"]))
    whole = draw(st.text("0123456789", max_size=22))
    fraction = draw(st.none() | st.text("0123456789", max_size=14))
    if not whole and not fraction:
        whole = draw(st.text("0123456789", min_size=1, max_size=3))
    number = whole if fraction is None else f"{whole}.{fraction}"
    suffix = draw(
        st.sampled_from(_SUFFIXES)
        | st.builds(
            lambda e, s, x: f"{e}{s}{x}",
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            st.integers(0, 40),
        )
    )
    return f"{sign}{number}{suffix}"


@st.composite
def quantities(draw) -> Quantity:
    return Q(draw(quantity_strings()))


@settings(max_examples=150)
@given(quantity_strings())
def test_canonical_round_trips_and_is_a_fixed_point(text):
    q = Q(text)
    canonical = q.canonical()
    again = Q(canonical)
    assert again == q
    assert again.canonical() == canonical


@settings(max_examples=150)
@given(quantity_strings())
def test_parse_matches_exact_decimal_arithmetic(text):
    body = text.lstrip("+-")
    negative = text.startswith("-")
    suffix = body.lstrip("0123456789.")
    number = body[: len(body) - len(suffix)]
    exact = Fraction(decimal.Decimal(number if number.strip(".") else "0"))
    if suffix in {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}:
        exact *= 2 ** (10 * (["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].index(suffix) + 1))
    elif suffix and suffix[0] in "eE" and len(suffix) > 1:
        exact *= Fraction(10) ** int(suffix[1:])
    else:
        exact *= (
            Fraction(10)
            ** {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}[suffix]
        )
    expected = away_from_zero(exact, NANO)
    if suffix.endswith("i"):
        expected = min(expected, Fraction(MAX_BINARY_SI))
    assert Q(text).as_fraction() == (-expected if negative else expected)


@settings(max_examples=100)
@given(quantities(), quantities())
def test_arithmetic_matches_fraction_arithmetic(a, b):
    fa, fb = a.as_fraction(), b.as_fraction()
    assert (a + b).as_fraction() == fa + fb
    assert (a - b).as_fraction() == fa - fb
    assert (-a).as_fraction() == -fa
    assert (a == b) == (fa == fb)
    assert (a < b) == (fa < fb)
    assert (a <= b) == (fa <= fb)
    assert (a > b) == (fa > fb)
    assert (a >= b) == (fa >= fb)
    if a == b:
        assert hash(a) == hash(b)
    assert a + b - b == a
    total = a + b
    if not (total.format is BSI and abs(total.as_fraction()) > MAX_BINARY_SI):
        assert Q(total.canonical()) == total


@settings(max_examples=100)
@given(quantities())
def test_value_and_milli_value_round_away_from_zero_property(q):
    f = q.as_fraction()
    assert q.value() == away_from_zero(f, Fraction(1))
    assert q.milli_value() == away_from_zero(f, Fraction(1, 1000)) * 1000


@settings(max_examples=100)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_json_floats_read_as_their_decimal_spelling(x):
    exact = Fraction(decimal.Decimal(repr(x)))
    assert parse_quantity(x).as_fraction() == away_from_zero(exact, NANO)


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_json_integers_are_exact(n):
    q = parse_quantity(n)
    assert q.as_fraction() == n
    assert q.value() == n


@given(st.fractions(max_denominator=10**12), st.sampled_from(list(Format)))
def test_constructor_rounds_away_from_zero_to_a_nano(x, fmt):
    q = Quantity(x, fmt)
    assert q.as_fraction() == away_from_zero(x, NANO)
    assert q.format is fmt
