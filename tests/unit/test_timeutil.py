"""RFC 3339 timestamps in the three spellings upstream objects use."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver_min.api.timeutil import (
    EPOCH,
    TimestampError,
    format_rfc3339,
    format_rfc3339_micro,
    format_rfc3339_nano,
    now,
    parse_rfc3339,
    parse_rfc3339_ns,
)

UTC = dt.timezone.utc


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


PARSE = [
    ("2026-11-23T09:20:19Z", utc(2026, 11, 23, 9, 20, 19), 0),
    ("2026-11-23T09:20:19.1Z", utc(2026, 11, 23, 9, 20, 19, 100000), 100_000_000),
    ("2026-11-23T09:20:19.123456Z", utc(2026, 11, 23, 9, 20, 19, 123456), 123_456_000),
    ("2026-11-23T09:20:19.123456789Z", utc(2026, 11, 23, 9, 20, 19, 123456), 123_456_789),
    ("2026-11-23T09:20:19.000000001Z", utc(2026, 11, 23, 9, 20, 19), 1),
    ("2026-11-23T09:20:19.999999999Z", utc(2026, 11, 23, 9, 20, 19, 999999), 999_999_999),
    # digits past nanoseconds are dropped, as Go does
    ("2026-11-23T09:20:19.1234567899999Z", utc(2026, 11, 23, 9, 20, 19, 123456), 123_456_789),
    ("2026-11-23T09:20:19+02:00", utc(2026, 11, 23, 7, 20, 19), 0),
    ("2026-11-23T09:20:19-05:30", utc(2026, 11, 23, 14, 50, 19), 0),
    ("2026-11-23T09:20:19.5+00:00", utc(2026, 11, 23, 9, 20, 19, 500000), 500_000_000),
    ("2026-11-23T09:20:19-00:00", utc(2026, 11, 23, 9, 20, 19), 0),
    ("2026-11-23T23:30:00-01:00", utc(2026, 11, 24, 0, 30), 0),  # crosses midnight
    ("2026-01-01T00:30:00+01:00", utc(2025, 12, 31, 23, 30), 0),  # and the year
    ("2024-02-29T00:00:00Z", utc(2024, 2, 29), 0),  # leap day
    ("0001-01-01T00:00:00Z", utc(1, 1, 1), 0),
    ("9999-12-31T23:59:59.999999999Z", utc(9999, 12, 31, 23, 59, 59, 999999), 999_999_999),
    ("1970-01-01T00:00:00Z", EPOCH, 0),
    ("1969-12-31T23:59:59.5Z", utc(1969, 12, 31, 23, 59, 59, 500000), 500_000_000),
]


@pytest.mark.parametrize("text,expected,nanos", PARSE)
def test_parse_rfc3339(text, expected, nanos):
    got = parse_rfc3339(text)
    assert got == expected
    assert got.tzinfo is UTC
    assert got.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize("text,expected,nanos", PARSE)
def test_parse_rfc3339_ns_keeps_nanoseconds(text, expected, nanos):
    whole = expected.replace(microsecond=0) - EPOCH
    assert parse_rfc3339_ns(text) == (whole.days * 86400 + whole.seconds) * 10**9 + nanos


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty"),
        ("x", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("2026-11-23", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("2026-1-23T09:20:19Z", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("2026-11-23T9:20:19Z", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("26-11-23T09:20:19Z", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("2026-11-23T09:20Z", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("\uff12026-11-23T09:20:19Z", "expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or \u00b1HH:MM"),
        ("2026-11-23t09:20:19Z", "date and time must be separated by \"T\", not 't'"),
        ("2026-11-23 09:20:19Z", "date and time must be separated by \"T\", not ' '"),
        ("2026-11-23T09:20:19", "missing time zone (Z or \u00b1HH:MM)"),
        ("2026-11-23T09:20:19.123", "missing time zone (Z or \u00b1HH:MM)"),
        ("2026-11-23T09:20:19z", 'time zone must be upper-case "Z"'),
        ("2026-11-23T09:20:19 Z", 'invalid time zone " Z", expected Z or \u00b1HH:MM'),
        ("2026-11-23T09:20:19+0200", 'invalid time zone "+0200", expected Z or \u00b1HH:MM'),
        ("2026-11-23T09:20:19+02", 'invalid time zone "+02", expected Z or \u00b1HH:MM'),
        ("2026-11-23T09:20:19UTC", 'invalid time zone "UTC", expected Z or \u00b1HH:MM'),
        ("2026-11-23T09:20:19Z ", 'invalid time zone "Z ", expected Z or \u00b1HH:MM'),
        ("2026-11-23T09:20:19+24:00", 'time zone offset "+24:00" is out of range'),
        ("2026-11-23T09:20:19+02:60", 'time zone offset "+02:60" is out of range'),
        ("2026-11-23T09:20:19.Z", "decimal point without fractional digits"),
        ("2026-13-01T00:00:00Z", "month 13 is out of range"),
        ("2026-00-01T00:00:00Z", "month 0 is out of range"),
        ("2026-11-00T00:00:00Z", "day 0 is out of range for 2026-11"),
        ("2026-11-31T00:00:00Z", "day 31 is out of range for 2026-11"),
        ("2025-02-29T00:00:00Z", "day 29 is out of range for 2025-02"),
        ("2026-11-23T24:00:00Z", "hour 24 is out of range"),
        ("2026-11-23T09:60:00Z", "minute 60 is out of range"),
        ("2026-11-23T09:20:60Z", "second 60 is out of range"),
        ("0000-01-01T00:00:00Z", "year 0 is out of range"),
        ("0001-01-01T00:00:00+01:00", "out of range once converted to UTC"),
        ("9999-12-31T23:59:59-01:00", "out of range once converted to UTC"),
    ],
)
def test_parse_errors_name_input_and_reason(text, reason):
    with pytest.raises(TimestampError) as info:
        parse_rfc3339(text)
    assert str(info.value) == f'invalid RFC 3339 timestamp "{text}": {reason}'
    assert info.value.value == text and info.value.reason == reason
    assert isinstance(info.value, ValueError)
    with pytest.raises(TimestampError):
        parse_rfc3339_ns(text)


@pytest.mark.parametrize("value", [None, 1700000000, b"2026-11-23T09:20:19Z"])
def test_parse_rejects_non_strings(value):
    with pytest.raises(TimestampError, match="expected a string"):
        parse_rfc3339(value)  # type: ignore[arg-type]


# -- formatting -------------------------------------------------------------

FORMAT = [
    # datetime, seconds form, micro form, nano form
    (utc(2026, 11, 23, 9, 20, 19), "2026-11-23T09:20:19Z", "2026-11-23T09:20:19.000000Z", "2026-11-23T09:20:19Z"),
    (
        utc(2026, 11, 23, 9, 20, 19, 123456),
        "2026-11-23T09:20:19Z",
        "2026-11-23T09:20:19.123456Z",
        "2026-11-23T09:20:19.123456Z",
    ),
    (
        utc(2026, 11, 23, 9, 20, 19, 120000),
        "2026-11-23T09:20:19Z",
        "2026-11-23T09:20:19.120000Z",
        "2026-11-23T09:20:19.12Z",
    ),
    (
        utc(2026, 11, 23, 9, 20, 19, 999999),
        "2026-11-23T09:20:19Z",  # truncated, not rounded
        "2026-11-23T09:20:19.999999Z",
        "2026-11-23T09:20:19.999999Z",
    ),
    (
        utc(2026, 11, 23, 9, 20, 19, 1),
        "2026-11-23T09:20:19Z",
        "2026-11-23T09:20:19.000001Z",
        "2026-11-23T09:20:19.000001Z",
    ),
    (
        utc(1, 2, 3, 4, 5, 6),
        "0001-02-03T04:05:06Z",  # years are zero-padded
        "0001-02-03T04:05:06.000000Z",
        "0001-02-03T04:05:06Z",
    ),
    (
        dt.datetime(2026, 11, 23, 11, 20, 19, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "2026-11-23T09:20:19Z",
        "2026-11-23T09:20:19.000000Z",
        "2026-11-23T09:20:19Z",
    ),
    (
        dt.datetime(2026, 11, 22, 23, 50, 19, 5, tzinfo=dt.timezone(dt.timedelta(hours=-9, minutes=-30))),
        "2026-11-23T09:20:19Z",
        "2026-11-23T09:20:19.000005Z",
        "2026-11-23T09:20:19.000005Z",
    ),
]


@pytest.mark.parametrize("value,seconds,micro,nano", FORMAT)
def test_format(value, seconds, micro, nano):
    assert format_rfc3339(value) == seconds
    assert format_rfc3339_micro(value) == micro
    assert format_rfc3339_nano(value) == nano


@pytest.mark.parametrize(
    "ns,text",
    [
        (0, "1970-01-01T00:00:00Z"),
        (1, "1970-01-01T00:00:00.000000001Z"),
        (-1, "1969-12-31T23:59:59.999999999Z"),
        (1_500_000_000, "1970-01-01T00:00:01.5Z"),
        (1_795_425_619_123_456_789, "2026-11-23T09:20:19.123456789Z"),
        (1_795_425_619_100_000_000, "2026-11-23T09:20:19.1Z"),
        (1_795_425_619_000_000_000, "2026-11-23T09:20:19Z"),
    ],
)
def test_format_nano_from_epoch_nanoseconds(ns, text):
    assert format_rfc3339_nano(ns) == text
    assert parse_rfc3339_ns(text) == ns


def test_format_rejects_naive_and_wrong_types():
    naive = dt.datetime(2026, 11, 23, 9, 20, 19)
    for fmt in (format_rfc3339, format_rfc3339_micro, format_rfc3339_nano):
        with pytest.raises(TimestampError, match="naive datetime"):
            fmt(naive)
        with pytest.raises(TypeError):
            fmt("2026-11-23T09:20:19Z")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_rfc3339_nano(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_rfc3339(dt.date(2026, 11, 23))  # type: ignore[arg-type]


def test_format_out_of_range():
    with pytest.raises(TimestampError, match="out of range"):
        format_rfc3339_nano(10**30)
    with pytest.raises(TimestampError, match="out of range"):
        format_rfc3339(dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))))


def test_now_is_aware_utc_and_current():
    before = dt.datetime.now(UTC)
    got = now()
    after = dt.datetime.now(UTC)
    assert got.tzinfo is UTC
    assert before <= got <= after


# -- properties -------------------------------------------------------------

offsets = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m))
)
instants = st.datetimes(min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31), timezones=st.just(UTC))


@settings(max_examples=200)
@given(instants)
def test_micro_and_nano_round_trip(value):
    assert parse_rfc3339(format_rfc3339_micro(value)) == value
    assert parse_rfc3339(format_rfc3339_nano(value)) == value
    assert parse_rfc3339(format_rfc3339(value)) == value.replace(microsecond=0)


@settings(max_examples=200)
@given(instants, offsets)
def test_offsets_denote_the_same_instant(value, tz):
    local = value.astimezone(tz)
    sign = "-" if tz.utcoffset(None) < dt.timedelta(0) else "+"
    minutes = abs(int(tz.utcoffset(None).total_seconds())) // 60
    text = local.replace(tzinfo=None).isoformat(timespec="microseconds")
    assert parse_rfc3339(f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}") == value


@settings(max_examples=200)
@given(st.integers(min_value=-62_000_000_000 * 10**9, max_value=253_000_000_000 * 10**9))
def test_nanosecond_round_trip(ns):
    text = format_rfc3339_nano(ns)
    assert parse_rfc3339_ns(text) == ns
    assert format_rfc3339_nano(parse_rfc3339_ns(text)) == text
    assert not text.endswith("0Z") or "." not in text  # trailing zeros trimmed


@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_timestamp_error(text):
    try:
        parse_rfc3339(text)
    except TimestampError as exc:
        assert text in str(exc) or repr(text)[1:-1] in str(exc)
