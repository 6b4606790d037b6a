"""The C protobuf decoder (``apiserver_min/api/_pbfast.c``) against the reference.

The C decoder must give the reference's result on every input it accepts and
raise on the rest (the public ``decode``/``decode_message`` then run the
reference, whose error names the field). These tests compare the two directly
on every declared kind, on mutated bytes and on hand-made edge cases.
"""

from __future__ import annotations

import math
import os
import random
import struct

import pytest

from apiserver_min.api import names
from apiserver_min.api import protobuf as pb
from apiserver_min.api.schema import (
    Boolean,
    Bytes,
    Duration,
    Field,
    Integer,
    List,
    Map,
    Number,
    Opaque,
    String,
    Struct,
    Time,
)
from apiserver_min.api.schemas import KIND_SCHEMAS, schema_for
from tests.unit.test_protobuf import _bench_pod, _declared, _outcome, agreement_on_mutations, mutations, sample

fast = pb._fast

pytestmark = pytest.mark.skipif(
    fast is None and os.environ.get("ORCH_PROTOBUF_PURE", "") not in ("", "0"),
    reason="ORCH_PROTOBUF_PURE set: the C decoder is switched off",
)


def test_the_c_decoder_is_built_and_used():
    # tests/run.sh installs the project with its C extension; a missing build
    # would silently fall back to the slower Python decoder.
    assert fast is not None, "apiserver_min.api._pbfast was not built (C compiler or Python headers missing?)"
    assert fast.KINDS == tuple(range(pb.K_WRAPPED + 1))
    assert fast.OPS == tuple(range(pb.OP_LIST_FIXED + 1))


def c_decode(data: bytes, schema) -> dict:
    """The C decoder alone (no fallback)."""
    return fast.decode(pb._cplan(pb._plan(schema)), data, {})


@pytest.mark.parametrize("key", [k for k, _ in _declared()], ids=lambda k: f"{k[0] or 'core'}/{k[1]}/{k[2]}")
def test_c_decoder_matches_the_reference_on_every_kind(key):
    if fast is None:
        pytest.skip("no C decoder")
    schema = KIND_SCHEMAS[key]
    obj = sample(schema)
    raw = pb.reference_encode_message(obj, schema)
    assert c_decode(raw, schema) == pb.reference_decode_message(raw, schema) == obj
    # A message repeated (fields merge), the empty message, and the whole object path.
    assert c_decode(raw + raw, schema) == pb.reference_decode_message(raw + raw, schema)
    assert c_decode(b"", schema) == pb.reference_decode_message(b"", schema)
    group, version, kind = key
    av = f"{group}/{version}" if group else version
    whole = {"apiVersion": av, "kind": kind, **obj}
    data = pb.encode(whole)
    plans = {(av, kind): pb._fast_plan(schema)}
    if plans[(av, kind)] is not None:
        assert fast.decode_object(data, plans) == whole
    assert pb.decode(data) == whole


@pytest.mark.parametrize("kind", ["Pod", "Node", "Service", "Event"])
def test_c_decoder_on_mutated_bytes_agrees_with_the_reference(kind):
    if fast is None:
        pytest.skip("no C decoder")
    rnd = random.Random(kind)
    schema = schema_for("", "v1", kind)
    obj = _bench_pod() if kind == "Pod" else sample(schema)
    obj = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    raw = pb.reference_encode_message(obj, schema)
    assert agreement_on_mutations(c_decode, schema, raw, rnd, 1200) > 40  # the comparison really ran


def test_enveloped_mutations_agree_with_the_reference_path():
    if fast is None:
        pytest.skip("no C decoder")
    rnd = random.Random(7)
    whole = pb.encode(_bench_pod())

    def reference(data: bytes) -> dict:
        u = pb.decode_unknown(data)
        if u.content_encoding or (u.content_type and not pb.is_protobuf(u.content_type)) or not u.kind:
            raise pb.ProtobufError("envelope")
        schema = pb.schema_of(u.api_version, u.kind)
        if schema is None:
            raise pb.ProtobufError("kind")
        return pb.reference_decode_message(u.raw, schema, {"apiVersion": u.api_version, "kind": u.kind})

    ok = 0
    for data in mutations(whole, rnd, 800):
        ref = _outcome(reference, data)
        got = _outcome(pb.decode, data)
        assert got[0] == ref[0], data.hex()
        if ref[0] == "ok":
            assert got == ref
            ok += 1
    assert ok > 20


# --- edge cases, each against the reference -------------------------------------------------------


def _varint(n: int) -> bytes:
    return pb.uvarint(n)


def _ld(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _vi(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _same(data: bytes, schema) -> None:
    ref = _outcome(pb.reference_decode_message, data, schema)
    got = _outcome(c_decode, data, schema)
    if ref[0] == "error":
        assert got[0] == "error", (data.hex(), got)
    else:
        assert got[0] == "error" or got == ref, (data.hex(), got, ref)
    assert _outcome(pb.decode_message, data, schema) == ref


POD = schema_for("", "v1", "Pod")
NODE = schema_for("", "v1", "Node")


def _spec(payload: bytes) -> bytes:
    return _ld(2, payload)  # Pod.spec


@pytest.mark.parametrize("value", [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1])
def test_integers_wrap_as_upstream(value):
    if fast is None:
        pytest.skip("no C decoder")
    # PodSpec.terminationGracePeriodSeconds (4, int64 pointer), PodSpec.priority (25, int32 pointer),
    # PodSpec.hostNetwork (11, bool).
    for field in (4, 25, 11):
        data = _spec(_vi(field, value))
        _same(data, POD)
        assert c_decode(data, POD) == pb.reference_decode_message(data, POD)


def test_varints_beyond_64_bits_go_to_the_reference():
    if fast is None:
        pytest.skip("no C decoder")
    data = _spec(b"\x20" + b"\xff" * 9 + b"\x7f")  # 10-byte varint with high bits
    _same(data, POD)
    with pytest.raises(fast.Fallback):
        c_decode(data, POD)


@pytest.mark.parametrize(
    "seconds,nanos",
    [
        (0, 0),
        (1, 0),
        (-1, 0),
        (1704164645, 123456789),
        (-62135596800, 0),
        (253402300799, 999999999),
        (253402300800, 0),
        (-62135596801, 0),
        (5, -1),
        (5, -1000),
        (5, -1001),
        (5, 2**31 + 5),
    ],
)
def test_times_and_micro_times(seconds, nanos):
    if fast is None:
        pytest.skip("no C decoder")
    ts = _vi(1, seconds & (2**64 - 1)) + _vi(2, nanos & (2**64 - 1))
    # ObjectMeta.creationTimestamp (8, Time); Event: eventTime (MicroTime) lives in events.orch.io.
    _same(_ld(1, _ld(8, ts)), POD)
    ev = schema_for("events.orch.io", "v1", "Event")
    _same(_ld(2, ts), ev)  # Event.eventTime (2, MicroTime)
    if -62135596800 <= seconds <= 253402300799:
        assert c_decode(_ld(1, _ld(8, ts)), POD) == pb.reference_decode_message(_ld(1, _ld(8, ts)), POD)


# No declared kind has a double today; the decoder supports them (and maps of
# them, wrapped lists, durations, bytes and raw JSON, a struct inlined into
# another and recursion), so a synthetic struct exercises those paths.
_INNER = Struct("test.Inner", [Field("s", String(), 1), Field("n", Integer(bits=32), 2)])
_REC = Struct("test.Rec", [])
SYNTH = Struct(
    "test.Synthetic",
    [
        Field("d", Number(), 1, pointer=True),
        Field("z", Number(), 2),
        Field("ds", List(Number()), 3),
        Field("dm", Map(Number()), 4),
        Field("wrapped", Map(List(String(), wrapper="ExtraValue")), 5),
        Field("dur", Duration(), 6, pointer=True),
        Field("raw", Bytes(), 7),
        Field("opaque", Opaque(), 8),
        Field("", _INNER, 9, inline=True),
        Field("rec", _REC, 10, pointer=True),
        Field("bools", List(Boolean()), 11),
        Field("ints", Map(Integer(bits=64)), 12),
        Field("times", List(Time()), 13),
    ],
)
_REC.__init__("test.Rec", [Field("name", String(), 1), Field("child", _REC, 2, pointer=True)])


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, 3.0, -7.0, 1e15, 1e16, math.inf, -math.inf, math.nan])
def test_doubles(value):
    if fast is None:
        pytest.skip("no C decoder")
    d = struct.pack("<d", value)
    for data in (b"\x09" + d, b"\x11" + d, b"\x19" + d + b"\x19" + d, _ld(4, _ld(1, b"k") + b"\x11" + d)):
        ref = pb.reference_decode_message(data, SYNTH)
        assert repr(c_decode(data, SYNTH)) == repr(ref)


def test_synthetic_struct_round_trips_and_mutations():
    if fast is None:
        pytest.skip("no C decoder")
    obj = {
        "d": 2.5,
        "z": 1.25,
        "ds": [1, 2.5],
        "dm": {"a": 1.5},
        "wrapped": {"k": ["x", "y"], "e": []},
        "dur": "1m30s",
        "raw": "AAEC",
        "opaque": {"x": [1, None]},
        "s": "in",
        "n": -3,
        "rec": {"name": "a", "child": {"name": "b", "child": {"name": "c"}}},
        "bools": [True, False],
        "ints": {"a": -5, "b": 2**40},
        "times": ["2024-01-02T03:04:05Z"],
    }
    raw = pb.reference_encode_message(obj, SYNTH)
    assert c_decode(raw, SYNTH) == pb.reference_decode_message(raw, SYNTH)
    assert c_decode(raw + raw, SYNTH) == pb.reference_decode_message(raw + raw, SYNTH)
    rnd = random.Random(11)
    for data in mutations(raw, rnd, 1500):
        _same(data, SYNTH)
    # Recursion deeper than the C limit goes to the reference, which decodes it.
    deep = b""
    for _ in range(100):
        deep = _ld(2, _ld(1, b"n") + deep)
    data = _ld(10, deep)
    with pytest.raises(fast.Fallback):
        c_decode(data, SYNTH)
    assert pb.decode_message(data, SYNTH) == pb.reference_decode_message(data, SYNTH)


def test_strings_utf8_and_non_ascii():
    if fast is None:
        pytest.skip("no C decoder")
    for name in ("plain", "ünïcødé", "日本", "\U0001f600", "", "a\x00b"):
        data = _ld(1, _ld(1, name.encode()))
        assert c_decode(data, POD) == pb.reference_decode_message(data, POD)
    for bad in (b"\xff", b"\xc3", b"a\xed\xa0\x80b", b"\xc0\xaf"):
        _same(_ld(1, _ld(1, bad)), POD)
        with pytest.raises(UnicodeDecodeError):
            c_decode(_ld(1, _ld(1, bad)), POD)


def test_map_entries_in_any_shape():
    if fast is None:
        pytest.skip("no C decoder")
    labels = 11  # ObjectMeta.labels
    for entry in (
        _ld(1, b"k") + _ld(2, b"v"),
        _ld(2, b"v") + _ld(1, b"k"),
        _ld(1, b"k"),
        _ld(2, b"v"),
        b"",
        _ld(1, b"k") + _ld(1, b"k2") + _ld(2, b"v"),
        _ld(1, b"k") + _vi(3, 4) + _ld(2, b"v"),
        _ld(1, b"k") + _vi(2, 4),
    ):
        _same(_ld(1, _ld(labels, entry)), POD)
    # Quantities (resource lists), struct values and int-or-strings through their entries.
    qty = _ld(1, b"cpu") + _ld(2, _ld(1, b"250m"))
    res = _ld(2, qty)  # ResourceRequirements.requests? limits=1, requests=2
    data = _spec(_ld(2, _ld(1, b"c") + _ld(8, res)))
    assert c_decode(data, POD) == pb.reference_decode_message(data, POD)
    for q in (b"", _ld(1, b""), _ld(1, b"1") + _ld(1, b"2"), _vi(2, 1)):
        _same(_spec(_ld(2, _ld(1, b"c") + _ld(8, _ld(2, _ld(1, b"cpu") + _ld(2, q))))), POD)


def test_int_or_string_shapes():
    if fast is None:
        pytest.skip("no C decoder")

    # containers[0].ports? use livenessProbe.httpGet.port (IntOrString)
    def probe_port(ios: bytes) -> bytes:
        http_get = _ld(2, ios)  # HTTPGetAction.port = 2
        handler = _ld(2, http_get)  # ProbeHandler.httpGet = 2 (inline in Probe as field 1)
        probe = _ld(1, handler)
        return _spec(_ld(2, _ld(1, b"c") + _ld(10, probe)))

    for ios in (
        b"",
        _vi(1, 0) + _vi(2, 80),
        _vi(1, 1) + _ld(3, b"http"),
        _vi(1, 1),
        _vi(2, 2**32 - 1),
        _vi(1, 2) + _vi(2, 5),
        _ld(3, b"x") + _vi(1, 1),
        _vi(4, 1),
    ):
        _same(probe_port(ios), POD)


def test_packed_and_unpacked_repeated_fields_mix():
    if fast is None:
        pytest.skip("no C decoder")
    # PodSecurityContext.supplementalGroups (4, repeated int64) under PodSpec.securityContext (14).
    unpacked = _vi(4, 5) + _vi(4, 6)
    packed = _ld(4, _varint(7) + _varint(2**64 - 1))
    for sc in (unpacked, packed, packed + unpacked, unpacked + packed, _ld(4, b"\x80")):
        _same(_spec(_ld(14, sc)), POD)
    data = _spec(_ld(14, packed + unpacked))
    assert c_decode(data, POD) == pb.reference_decode_message(data, POD)


def test_wrong_wire_types_unknown_fields_and_groups():
    if fast is None:
        pytest.skip("no C decoder")
    for data in (
        _vi(1, 3),
        _ld(99, b"xyz"),
        _vi(99, 1),
        _varint((99 << 3) | 1) + b"\0" * 8,
        _varint((99 << 3) | 5) + b"\0" * 4,
        _varint((99 << 3) | 3),
        _varint(0) + b"\0",
        _varint((99 << 3) | 1) + b"\0" * 3,
    ):
        _same(data, POD)


def test_deep_nesting_goes_to_the_reference():
    if fast is None:
        pytest.skip("no C decoder")
    # A message nested as deep as the schema allows is fine; the C depth limit
    # only sends recursive structures deeper than it to the reference.
    data = _spec(_ld(2, _ld(1, b"c")))
    assert c_decode(data, POD) == pb.reference_decode_message(data, POD)


def test_lists_of_many_items_and_a_watch_event():
    if fast is None:
        pytest.skip("no C decoder")
    items = []
    for i in range(20):
        p = _bench_pod()
        p.pop("apiVersion"), p.pop("kind")
        p["metadata"]["name"] = f"web-{i}"
        items.append(p)
    lst = {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": items}
    data = pb.encode(lst)
    assert pb.decode(data) == lst
    frame = pb.watch_frame("ADDED", pb.encode(_bench_pod()))
    assert pb.decode_watch_event(frame[4:]) == ("ADDED", _bench_pod())


def test_envelope_variants_take_the_checked_path():
    if fast is None:
        pytest.skip("no C decoder")
    raw = pb.encode_message({"metadata": {"name": "n"}}, schema_for("", "v1", "Namespace"))
    ok = pb.encode_unknown("v1", "Namespace", raw)
    assert pb.decode(ok) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    with pytest.raises(pb.ProtobufError, match="content encoding"):
        pb.decode(pb.encode_unknown("v1", "Namespace", raw, content_encoding="gzip"))
    with pytest.raises(pb.ProtobufError, match="content type"):
        pb.decode(pb.encode_unknown("v1", "Namespace", raw, content_type="application/json"))
    assert (
        pb.decode(pb.encode_unknown("v1", "Namespace", raw, content_type=names.MEDIA_PROTOBUF))["kind"] == "Namespace"
    )
    with pytest.raises(pb.ProtobufError, match="no protobuf encoding"):
        pb.decode(pb.encode_unknown("v9", "Nothing", raw))
    with pytest.raises(pb.ProtobufError, match="prefix"):
        pb.decode(b"k8s\x01" + ok[4:])
    assert fast.decode_object(pb.encode_unknown("v9", "Nothing", raw), pb._FAST_KINDS) is None


# --- the C encoder ---------------------------------------------------------------------------------


def c_encode(obj: dict, schema) -> bytes:
    """The C encoder alone (no fallback)."""
    return fast.encode(pb._cplan(pb._plan(schema)), obj)


@pytest.mark.parametrize("key", [k for k, _ in _declared()], ids=lambda k: f"{k[0] or 'core'}/{k[1]}/{k[2]}")
def test_c_encoder_matches_the_reference_on_every_kind(key):
    if fast is None:
        pytest.skip("no C decoder")
    schema = KIND_SCHEMAS[key]
    obj = sample(schema)
    assert c_encode(obj, schema) == pb.reference_encode_message(obj, schema)
    assert c_encode({}, schema) == pb.reference_encode_message({}, schema)


_ODD_VALUES = [
    None,
    0,
    -1,
    1,
    2**31,
    -(2**31) - 1,
    2**63,
    -(2**63) - 1,
    2**70,
    1.0,
    2.5,
    float("nan"),
    True,
    False,
    "",
    "x",
    "ünï",
    "\ud800",
    "2024-05-06T07:08:09Z",
    "2024-05-06T07:08:09.5+02:00",
    "250m",
    "1h2m",
    "AAEC",
    [],
    [None],
    ["x", 1],
    {},
    {"a": None},
    {"a": 1},
    {1: "x"},
]


def _replace_random(obj, rnd: random.Random):
    """A copy of ``obj`` with one value somewhere replaced by an odd one."""
    import copy

    out = copy.deepcopy(obj)
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + [k])
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append(path + [i])
                walk(v, path + [i])

    walk(out, [])
    path = rnd.choice(paths)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = rnd.choice(_ODD_VALUES)
    return out


@pytest.mark.parametrize("kind", ["Pod", "Node", "Service", "Event", "ConfigMap"])
def test_c_encoder_on_odd_values_agrees_with_the_reference(kind):
    if fast is None:
        pytest.skip("no C decoder")
    rnd = random.Random(kind)
    schema = schema_for("", "v1", kind)
    base = _bench_pod() if kind == "Pod" else sample(schema)
    base = {k: v for k, v in base.items() if k not in ("apiVersion", "kind")}
    agree = 0
    for _ in range(600):
        obj = _replace_random(base, rnd)
        ref = _outcome(pb.reference_encode_message, obj, schema)
        got = _outcome(c_encode, obj, schema)
        if ref[0] == "error":
            assert got[0] == "error", obj
        elif got[0] == "ok":
            assert got == ref, obj
            agree += 1
        public = _outcome(pb.encode_message, obj, schema)
        assert public == ref or (public[0] == ref[0] == "error")
    assert agree > 100


def test_c_encoder_on_the_synthetic_struct():
    if fast is None:
        pytest.skip("no C decoder")
    obj = {
        "d": 2.5,
        "z": 1.25,
        "ds": [1, 2.5],
        "dm": {"b": 1.5, "a": 2},
        "wrapped": {"k": ["x", "y"], "e": []},
        "dur": "1m30s",
        "raw": "AAEC",
        "opaque": {"x": [1, None]},
        "s": "in",
        "n": -3,
        "rec": {"name": "a", "child": {"name": "b", "child": {"name": "c"}}},
        "bools": [True, False],
        "ints": {"a": -5, "b": 2**40},
        "times": ["2024-01-02T03:04:05Z"],
    }
    assert c_encode(obj, SYNTH) == pb.reference_encode_message(obj, SYNTH)
    rnd = random.Random(5)
    for _ in range(800):
        odd = _replace_random(obj, rnd)
        ref = _outcome(pb.reference_encode_message, odd, SYNTH)
        got = _outcome(c_encode, odd, SYNTH)
        assert got[0] == "error" or got == ref, odd
        if ref[0] == "error":
            assert got[0] == "error"
    deep: dict = {"name": "n"}
    for _ in range(100):
        deep = {"name": "n", "child": deep}
    with pytest.raises(fast.Fallback):
        c_encode({"rec": deep}, SYNTH)
    assert pb.encode_message({"rec": deep}, SYNTH) == pb.reference_encode_message({"rec": deep}, SYNTH)


def test_long_bodies_get_multi_byte_lengths():
    if fast is None:
        pytest.skip("no C decoder")
    schema = schema_for("", "v1", "ConfigMap")
    for n in (0, 1, 126, 127, 128, 129, 16383, 16384, 70000, 2_100_000):
        obj = {"metadata": {"name": "c"}, "data": {"k": "x" * n}, "binaryData": {"b": "AAEC"}}
        raw = c_encode(obj, schema)
        assert raw == pb.reference_encode_message(obj, schema)
        assert pb.decode_message(raw, schema) == obj
