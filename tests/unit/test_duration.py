"""Go duration strings: parsing and printing must agree with Go's time package."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver_min.api.duration import (
    HOUR,
    MAX_DURATION_NS,
    MICROSECOND,
    MILLISECOND,
    MIN_DURATION_NS,
    MINUTE,
    NANOSECOND,
    SECOND,
    DurationError,
    format_duration,
    ns_to_timedelta,
    parse_duration,
    parse_duration_ns,
    timedelta_to_ns,
)

# Go's own parseDurationTests, plus the spellings used in configs here.
PARSE = [
    ("0", 0),
    ("5s", 5 * SECOND),
    ("30s", 30 * SECOND),
    ("1478s", 1478 * SECOND),
    ("-5s", -5 * SECOND),
    ("+5s", 5 * SECOND),
    ("-0", 0),
    ("+0", 0),
    ("5.0s", 5 * SECOND),
    ("5.6s", 5 * SECOND + 600 * MILLISECOND),
    ("5.s", 5 * SECOND),
    (".5s", 500 * MILLISECOND),
    ("1.0s", SECOND),
    ("1.00s", SECOND),
    ("1.004s", SECOND + 4 * MILLISECOND),
    ("1.0040s", SECOND + 4 * MILLISECOND),
    ("100.00100s", 100 * SECOND + MILLISECOND),
    ("10ns", 10 * NANOSECOND),
    ("11us", 11 * MICROSECOND),
    ("12\u00b5s", 12 * MICROSECOND),  # micro sign
    ("12\u03bcs", 12 * MICROSECOND),  # Greek mu
    ("13ms", 13 * MILLISECOND),
    ("14s", 14 * SECOND),
    ("15m", 15 * MINUTE),
    ("16h", 16 * HOUR),
    ("3h30m", 3 * HOUR + 30 * MINUTE),
    ("10.5s4m", 4 * MINUTE + 10 * SECOND + 500 * MILLISECOND),
    ("-2m3.4s", -(2 * MINUTE + 3 * SECOND + 400 * MILLISECOND)),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4 * MILLISECOND + 5 * MICROSECOND + 6),
    ("39h9m14.425s", 39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MILLISECOND),
    ("52763797000ns", 52763797000),
    ("0.3333333333333333333h", 20 * MINUTE),  # Go's float64 rounding, reproduced
    ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", (1 << 63) - 1),
    ("9223372036854775.807us", (1 << 63) - 1),
    ("9223372036s854ms775us807ns", (1 << 63) - 1),
    ("-9223372036854775808ns", -(1 << 63)),
    ("-9223372036854775.808us", -(1 << 63)),
    ("-9223372036s854ms775us808ns", -(1 << 63)),
    ("-2562047h47m16.854775808s", -(1 << 63)),
    ("0.100000000000000000000h", 6 * MINUTE),
    ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
    ("1h2m3.5s", HOUR + 2 * MINUTE + 3 * SECOND + 500 * MILLISECOND),
    ("100ms", 100 * MILLISECOND),
    ("1.5h", HOUR + 30 * MINUTE),
    ("300us", 300 * MICROSECOND),
    ("300\u00b5s", 300 * MICROSECOND),
    ("1s1s", 2 * SECOND),  # Go adds repeated units
    ("000000000000000000000001s", SECOND),
    ("1." + "0" * 40 + "1s", SECOND),  # digits past Go's precision are ignored
]


@pytest.mark.parametrize("text,ns", PARSE)
def test_parse_duration_ns(text, ns):
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("text,ns", PARSE)
def test_parse_duration_gives_timedelta_truncated_toward_zero(text, ns):
    micros = abs(ns) // MICROSECOND
    assert parse_duration(text) == dt.timedelta(microseconds=micros if ns >= 0 else -micros)


def test_parse_duration_examples():
    assert parse_duration("1h2m3.5s") == dt.timedelta(hours=1, minutes=2, seconds=3.5)
    assert parse_duration("-5s") == dt.timedelta(seconds=-5)
    assert parse_duration("10ns") == dt.timedelta(0)
    assert parse_duration("-1500ns") == dt.timedelta(microseconds=-1)


# Go's durationTests for String().
FORMAT = [
    (0, "0s"),
    (1 * NANOSECOND, "1ns"),
    (1100 * NANOSECOND, "1.1\u00b5s"),
    (1500, "1.5\u00b5s"),
    (2200 * MICROSECOND, "2.2ms"),
    (100 * MILLISECOND, "100ms"),
    (3300 * MILLISECOND, "3.3s"),
    (5 * SECOND, "5s"),
    (-5 * SECOND, "-5s"),
    (4 * MINUTE, "4m0s"),
    (5 * MINUTE, "5m0s"),
    (4 * MINUTE + 5001 * MILLISECOND, "4m5.001s"),
    (5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND, "5h6m7.001s"),
    (8 * MINUTE + 1, "8m0.000000001s"),
    (2 * HOUR, "2h0m0s"),
    (HOUR + 2 * MINUTE + 3500 * MILLISECOND, "1h2m3.5s"),
    (999 * NANOSECOND, "999ns"),
    (999_999 * NANOSECOND, "999.999\u00b5s"),
    (SECOND - 1, "999.999999ms"),
    (-1, "-1ns"),
    ((1 << 63) - 1, "2562047h47m16.854775807s"),
    (-(1 << 63), "-2562047h47m16.854775808s"),
]


@pytest.mark.parametrize("ns,text", FORMAT)
def test_format_duration(ns, text):
    assert format_duration(ns) == text
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize(
    "td,text",
    [
        (dt.timedelta(0), "0s"),
        (dt.timedelta(minutes=5), "5m0s"),
        (dt.timedelta(seconds=-5), "-5s"),
        (dt.timedelta(microseconds=1), "1\u00b5s"),
        (dt.timedelta(days=1, microseconds=500), "24h0m0.0005s"),
        (dt.timedelta(hours=1, minutes=2, seconds=3, milliseconds=500), "1h2m3.5s"),
    ],
)
def test_format_duration_accepts_timedelta(td, text):
    assert format_duration(td) == text


@pytest.mark.parametrize(
    "text,message",
    [
        ("", 'time: invalid duration "": empty'),
        ("10", 'time: missing unit in duration "10"'),
        ("1.5", 'time: missing unit in duration "1.5"'),
        ("1h2", 'time: missing unit in duration "1h2"'),
        ("00", 'time: missing unit in duration "00"'),
        ("1x", 'time: unknown unit "x" in duration "1x" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ("3000000d", 'time: unknown unit "d" in duration "3000000d" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ("1H", 'time: unknown unit "H" in duration "1H" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ("1h 2m", 'time: unknown unit "h " in duration "1h 2m" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ("3", 'time: missing unit in duration "3"'),
        ("-", 'time: invalid duration "-": sign without a number'),
        ("+", 'time: invalid duration "+": sign without a number'),
        ("s", 'time: invalid duration "s": expected a number at "s"'),
        (".", 'time: invalid duration ".": a decimal point without digits'),
        ("-.", 'time: invalid duration "-.": a decimal point without digits'),
        (".s", 'time: invalid duration ".s": a decimal point without digits'),
        ("+.s", 'time: invalid duration "+.s": a decimal point without digits'),
        ("1d", 'time: unknown unit "d" in duration "1d" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ("--5s", 'time: invalid duration "--5s": expected a number at "-5s"'),
        (" 5s", 'time: invalid duration " 5s": expected a number at " 5s"'),
        ("5s\n", 'time: unknown unit "s\\x0a" in duration "5s\\x0a" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ('1"s', 'time: unknown unit "\\"s" in duration "1\\"s" (valid units are ns, us, \u00b5s, ms, s, m, h)'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns": out of range for a 64-bit duration'),
        (
            "9223372036854775.808us",
            'time: invalid duration "9223372036854775.808us": out of range for a 64-bit duration',
        ),
        (
            "9223372036854ms775us808ns",
            'time: invalid duration "9223372036854ms775us808ns": out of range for a 64-bit duration',
        ),
        (
            "-9223372036854775809ns",
            'time: invalid duration "-9223372036854775809ns": out of range for a 64-bit duration',
        ),
        ("3000000h", 'time: invalid duration "3000000h": out of range for a 64-bit duration'),
        ("1" + "0" * 30 + "ns", f'time: invalid duration "1{"0" * 30}ns": out of range for a 64-bit duration'),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(DurationError) as info:
        parse_duration_ns(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)
    with pytest.raises(DurationError):
        parse_duration(text)


def test_parse_rejects_non_strings():
    with pytest.raises(DurationError, match="expected a string"):
        parse_duration_ns(5)  # type: ignore[arg-type]


def test_format_rejects_out_of_range_and_wrong_types():
    with pytest.raises(DurationError, match="out of range"):
        format_duration(MAX_DURATION_NS + 1)
    with pytest.raises(DurationError, match="out of range"):
        format_duration(MIN_DURATION_NS - 1)
    with pytest.raises(DurationError, match="out of range"):
        format_duration(dt.timedelta(days=300 * 365))
    with pytest.raises(TypeError):
        format_duration(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_duration(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_duration("5s")  # type: ignore[arg-type]


def test_timedelta_conversions():
    assert timedelta_to_ns(dt.timedelta(days=-1, microseconds=1)) == -86400 * SECOND + MICROSECOND
    assert ns_to_timedelta(-1999) == dt.timedelta(microseconds=-1)
    assert ns_to_timedelta(1999) == dt.timedelta(microseconds=1)


# -- properties -------------------------------------------------------------

durations = st.integers(min_value=MIN_DURATION_NS, max_value=MAX_DURATION_NS)
small_durations = st.integers(min_value=-10 * SECOND, max_value=10 * SECOND)


@settings(max_examples=300)
@given(durations | small_durations)
def test_format_parse_round_trip_exact(ns):
    text = format_duration(ns)
    assert parse_duration_ns(text) == ns
    assert format_duration(parse_duration_ns(text)) == text


@given(st.timedeltas(min_value=dt.timedelta(days=-100_000), max_value=dt.timedelta(days=100_000)))
def test_timedelta_round_trip(td):
    assert parse_duration(format_duration(td)) == td
    assert ns_to_timedelta(timedelta_to_ns(td)) == td


@st.composite
def duration_strings(draw):
    """Sums of unit terms with small integer parts and exactly representable fractions."""
    parts, total = [], 0
    units = {
        "h": HOUR,
        "m": MINUTE,
        "s": SECOND,
        "ms": MILLISECOND,
        "us": MICROSECOND,
        "\u00b5s": MICROSECOND,
        "ns": NANOSECOND,
    }
    for _ in range(draw(st.integers(1, 4))):
        unit = draw(st.sampled_from(sorted(units)))
        whole = draw(st.integers(0, 999))
        # No more digits than the unit has trailing zeros in nanoseconds: the
        # fraction is then exact under Go's float arithmetic as well.
        zeros = len(str(units[unit])) - len(str(units[unit]).rstrip("0"))
        places = draw(st.integers(0, zeros))
        frac = draw(st.integers(0, 10**places - 1)) if places else 0
        parts.append(f"{whole}.{frac:0{places}d}{unit}" if places else f"{whole}{unit}")
        total += whole * units[unit] + (frac * units[unit] // 10**places if places else 0)
    sign = draw(st.sampled_from(["", "+", "-"]))
    return sign + "".join(parts), (-total if sign == "-" else total)


@settings(max_examples=200)
@given(duration_strings())
def test_parse_sums_terms_exactly(case):
    text, expected = case
    assert parse_duration_ns(text) == expected
    assert parse_duration_ns(format_duration(expected)) == expected
