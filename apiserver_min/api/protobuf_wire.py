"""The protobuf wire layer: value kinds, varints, compiled struct plans and the
table-driven reference codec of structs and values.

The layers, bottom up (each imports only the ones below it):

* this module: what a struct looks like on the wire (``_Plan``: an encode list
  and a decode table compiled once per struct from its schema declaration),
  the reference encoder and decoder of messages and values, and the reading of
  the ``runtime.Unknown`` envelope;
* :mod:`.protobuf_codegen`: per-struct encoders and decoders generated as Python
  source from the same plans, calling this module's helpers for rare values;
* :mod:`.protobuf`: the public API (objects, envelopes, lists, watch frames),
  which runs the C codec (``_pbfast.c``) when it was built, or the generated
  one, and this module's reference where either gives up.

The wire format itself is described in :mod:`.protobuf`.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import functools
import struct as _struct
import threading
from typing import Any, NamedTuple

import orjson

from . import names
from .duration import format_duration, parse_duration_ns
from .schema import (
    Boolean,
    Bytes,
    Duration,
    Integer,
    IntOrString,
    List,
    Map,
    MicroTime,
    Number,
    Opaque,
    Quantity,
    String,
    Struct,
    Time,
    Type,
)
from .schemas import schema_for
from .timeutil import TimestampError, parse_rfc3339_ns

MAGIC = names.PROTOBUF_MAGIC
MEDIA_TYPES = names.PROTOBUF_MEDIA_TYPES


class ProtobufError(ValueError):
    """Bytes that are not a valid encoding of the expected message, or an object
    that cannot be encoded. ``path`` is the JSON path of the field at fault
    (``spec.containers[0].name``), ``reason`` what is wrong with it."""

    def __init__(self, reason: str, path: str = "") -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"{path}: {reason}" if path else reason)

    def within(self, step: str) -> "ProtobufError":
        """The same error one level up (``step`` is a field name or ``[i]``)."""
        if not self.path:
            path = step
        elif self.path.startswith("["):
            path = step + self.path
        else:
            path = f"{step}.{self.path}"
        return ProtobufError(self.reason, path)


is_protobuf = names.is_protobuf_media


# --- varints ----------------------------------------------------------------------------------

_SMALL = [bytes((i,)) for i in range(128)]
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def uvarint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _svarint(n: int) -> bytes:
    """An int32/int64 as upstream writes it: negative numbers sign-extended to 64 bits."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    return uvarint(n + (1 << 64) if n < 0 else n)


def _varint_rest(buf: bytes, pos: int, first: int) -> tuple[int, int]:
    """The rest of a varint whose first byte (``first`` >= 0x80) was already read."""
    result = first & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError("varint longer than 10 bytes")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _varint_rest(buf, pos + 1, b)


# --- value kinds --------------------------------------------------------------------------------

(K_STR, K_I32, K_I64, K_BOOL, K_NUM, K_BYTES, K_TIME, K_MICRO, K_DUR, K_QTY, K_IOS, K_OPAQUE, K_STRUCT, K_WRAPPED) = (
    range(14)
)
_VARINT_KINDS = frozenset({K_I32, K_I64, K_BOOL})
_KIND_NAMES = (
    "string",
    "int32",
    "int64",
    "boolean",
    "number",
    "bytes",
    "time",
    "microtime",
    "duration",
    "quantity",
    "int-or-string",
    "opaque",
    "object",
    "list",
)

# Field modes (encoding).
M_ONE, M_LIST, M_MAP, M_INLINE = range(4)

# Decoding operations: mode, kind and whether a zero value is kept, folded into
# one small int so the hot loop tests the common cases first.
(
    OP_STR,
    OP_STR_KEEP,
    OP_STRUCT,
    OP_STRUCT_KEEP,
    OP_LIST_STR,
    OP_LIST_LD,
    OP_MAP_STR,
    OP_MAP,
    OP_VARINT,
    OP_VARINT_KEEP,
    OP_LD,
    OP_LD_KEEP,
    OP_INLINE,
    OP_PACKED,
    OP_LIST_VARINT,
    OP_FIXED,
    OP_FIXED_KEEP,
    OP_LIST_FIXED,
) = range(18)


def _one_op(kind: int, keep: bool) -> int:
    if kind == K_STR:
        return OP_STR_KEEP if keep else OP_STR
    if kind == K_STRUCT:
        return OP_STRUCT_KEEP if keep else OP_STRUCT
    if kind in _VARINT_KINDS:
        return OP_VARINT_KEEP if keep else OP_VARINT
    if kind == K_NUM:
        return OP_FIXED_KEEP if keep else OP_FIXED
    return OP_LD_KEEP if keep else OP_LD


def _list_op(kind: int) -> int:
    if kind == K_STR:
        return OP_LIST_STR
    if kind in _VARINT_KINDS:
        return OP_LIST_VARINT
    if kind == K_NUM:
        return OP_LIST_FIXED
    return OP_LIST_LD


def _wire_type(kind: int) -> int:
    if kind in _VARINT_KINDS:
        return 0
    return 1 if kind == K_NUM else 2


class _Plan:
    """A struct compiled for the wire.

    ``enc``: per field in number order ``(json_name, mode, kind, sub, tag, absent)``
    where ``absent`` is what upstream writes for a missing non-pointer value
    (None: nothing). ``dec``: tag -> ``(json_name, mode, kind, sub, keep)``;
    ``keep`` is False where a zero value is left out of the JSON.
    """

    __slots__ = ("struct", "enc", "dec", "numbers", "empty")

    def __init__(self, struct: Struct) -> None:
        self.struct = struct
        self.enc: list[tuple] = []
        self.dec: dict[int, tuple] = {}
        self.numbers: dict[int, str] = {}
        self.empty: bytes | None = None  # this struct's encoding with every field absent


_PLANS: dict[int, tuple[Struct, _Plan]] = {}


def _plan(struct: Struct) -> _Plan:
    hit = _PLANS.get(id(struct))
    if hit is not None:
        return hit[1]
    plan = _Plan(struct)
    _PLANS[id(struct)] = (struct, plan)  # registered first: a recursive struct finds itself
    try:
        _compile(plan)
    except Exception:
        del _PLANS[id(struct)]
        raise
    return plan


def _value_kind(t: Type, where: str) -> tuple[int, Any]:
    if isinstance(t, String):
        return K_STR, None
    if isinstance(t, Integer):
        return (K_I32 if t.bits == 32 else K_I64), None
    if isinstance(t, Boolean):
        return K_BOOL, None
    if isinstance(t, Number):
        return K_NUM, None
    if isinstance(t, Bytes):
        return K_BYTES, None
    if isinstance(t, Time):
        return K_TIME, None
    if isinstance(t, MicroTime):
        return K_MICRO, None
    if isinstance(t, Duration):
        return K_DUR, None
    if isinstance(t, Quantity):
        return K_QTY, None
    if isinstance(t, IntOrString):
        return K_IOS, None
    if isinstance(t, Opaque):
        return K_OPAQUE, None
    if isinstance(t, Struct):
        return K_STRUCT, _plan(t)
    if isinstance(t, List):
        # A list as a value (map<string, ExtraValue>): a message with the items as field 1.
        ik, isub = _value_kind(t.item_type, where)
        if ik == K_WRAPPED:
            raise ProtobufError(f"{where}: a list of lists has no protobuf shape")
        return K_WRAPPED, (ik, isub)
    raise ProtobufError(f"{where}: {t!r} has no protobuf shape here")


_ZERO_QTY = b"\x0a\x010"
_ZERO_IOS = b"\x08\x00\x10\x00\x1a\x00"
_ZERO_DUR = b"\x08\x00"


def _compile(plan: _Plan) -> None:
    s = plan.struct
    for f in sorted(s.fields, key=lambda f: f.number):
        where = f"{s.short_name}.{f.json_name or '<inline>'}"
        inline = f.inline_struct
        plan.numbers[f.number] = f.json_name or (inline.short_name if inline is not None else "")
        t = f.type
        if inline is not None:
            sub = _plan(inline)
            tag = (f.number << 3) | 2
            plan.enc.append((f.json_name, M_INLINE, K_STRUCT, sub, uvarint(tag), None))
            plan.dec[tag] = (OP_INLINE, "", K_STRUCT, sub)
            continue
        if isinstance(t, List):
            kind, sub = _value_kind(t.item_type, where)
            if kind == K_WRAPPED:
                raise ProtobufError(f"{where}: a list of lists has no protobuf shape")
            tag = (f.number << 3) | _wire_type(kind)
            plan.enc.append((f.json_name, M_LIST, kind, sub, uvarint(tag), None))
            plan.dec[tag] = (_list_op(kind), f.json_name, kind, sub)
            if kind in _VARINT_KINDS:  # packed input is accepted too
                plan.dec[(f.number << 3) | 2] = (OP_PACKED, f.json_name, kind, sub)
            continue
        if isinstance(t, Map):
            kind, sub = _value_kind(t.value_type, where)
            tag = (f.number << 3) | 2
            plan.enc.append((f.json_name, M_MAP, kind, sub, uvarint(tag), None))
            plan.dec[tag] = (OP_MAP_STR if kind == K_STR else OP_MAP, f.json_name, kind, sub)
            continue
        kind, sub = _value_kind(t, where)
        tag = (f.number << 3) | _wire_type(kind)
        tb = uvarint(tag)
        absent: Any = None
        if not f.pointer:
            if kind in (K_STR, K_I32, K_I64, K_BOOL, K_TIME, K_MICRO, K_OPAQUE):
                absent = tb + b"\x00"
            elif kind == K_NUM:
                absent = tb + b"\x00" * 8
            elif kind == K_DUR:
                absent = tb + b"\x02" + _ZERO_DUR
            elif kind == K_QTY:
                absent = tb + b"\x03" + _ZERO_QTY
            elif kind == K_IOS:
                absent = tb + b"\x06" + _ZERO_IOS
            elif kind == K_STRUCT:
                absent = True  # the struct's empty encoding, computed on first use
            # K_BYTES: a nil slice is not written.
        plan.enc.append((f.json_name, M_ONE, kind, sub, tb, absent))
        plan.dec[tag] = (_one_op(kind, bool(f.pointer or f.required)), f.json_name, kind, sub)


def _empty_bytes(plan: _Plan) -> bytes:
    if plan.empty is None:
        plan.empty = _encode_struct(plan, {})
    return plan.empty


# --- scalar conversions ---------------------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@functools.lru_cache(maxsize=4096)  # objects share few distinct timestamps
def _time_seconds_nanos(s: str) -> tuple[int, int]:
    try:
        ns = parse_rfc3339_ns(s)
    except TimestampError as exc:
        raise ProtobufError(str(exc)) from None
    return divmod(ns, 1_000_000_000)


@functools.lru_cache(maxsize=4096)
def _format_seconds(seconds: int) -> str:
    t = _EPOCH + _dt.timedelta(seconds=seconds)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def _b64(v: Any) -> bytes:
    if not isinstance(v, str):
        raise ProtobufError(f"expected a base64 string, got {type(v).__name__}")
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtobufError(f"invalid base64 data: {exc}") from None


def _quantity_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtobufError(f"expected a quantity (string or number), got {type(v).__name__}")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


def _int(v: Any, kind: int) -> int:
    if type(v) is not int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ProtobufError(f"expected an integer, got {type(v).__name__}")
    lo, hi = (_I32_MIN, _I32_MAX) if kind == K_I32 else (_I64_MIN, _I64_MAX)
    if not lo <= v <= hi:
        raise ProtobufError(f"integer {v} out of range for {_KIND_NAMES[kind]}")
    return v


# --- encoding -------------------------------------------------------------------------------------


def _payload(kind: int, sub: Any, v: Any) -> bytes:
    """The encoding of one value: varint bytes, 8 bytes, or a length-delimited body
    (without its length) by kind."""
    if kind == K_STR:
        if type(v) is not str:
            raise ProtobufError(f"expected a string, got {type(v).__name__}")
        return v.encode()
    if kind == K_STRUCT:
        if type(v) is not dict:
            raise ProtobufError(f"expected an object, got {type(v).__name__}")
        return _encode_struct(sub, v)
    if kind == K_I32 or kind == K_I64:
        return _svarint(_int(v, kind))
    if kind == K_BOOL:
        if type(v) is not bool:
            raise ProtobufError(f"expected a boolean, got {type(v).__name__}")
        return b"\x01" if v else b"\x00"
    if kind == K_NUM:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ProtobufError(f"expected a number, got {type(v).__name__}")
        return _struct.pack("<d", v)
    if kind == K_TIME or kind == K_MICRO:
        if type(v) is not str:
            raise ProtobufError(f"expected an RFC 3339 time string, got {type(v).__name__}")
        seconds, nanos = _time_seconds_nanos(v)
        nanos = (nanos // 1000) * 1000 if kind == K_MICRO else 0
        return b"\x08" + _svarint(seconds) + b"\x10" + _svarint(nanos)
    if kind == K_QTY:
        b = _quantity_text(v).encode()
        return b"\x0a" + uvarint(len(b)) + b
    if kind == K_IOS:
        if type(v) is int:
            return b"\x08\x00\x10" + _svarint(_int(v, K_I32)) + b"\x1a\x00"
        if type(v) is str:
            b = v.encode()
            return b"\x08\x01\x10\x00\x1a" + uvarint(len(b)) + b
        raise ProtobufError(f"expected an integer or a string, got {type(v).__name__}")
    if kind == K_BYTES:
        return _b64(v)
    if kind == K_DUR:
        if type(v) is not str:
            raise ProtobufError(f"expected a duration string, got {type(v).__name__}")
        try:
            ns = parse_duration_ns(v)
        except ValueError as exc:
            raise ProtobufError(str(exc)) from None
        return b"\x08" + _svarint(ns)
    if kind == K_OPAQUE:
        b = orjson.dumps(v)
        return b"\x0a" + uvarint(len(b)) + b
    if kind == K_WRAPPED:
        if type(v) is not list:
            raise ProtobufError(f"expected a list, got {type(v).__name__}")
        ik, isub = sub
        itag = _SMALL[(1 << 3) | _wire_type(ik)]
        parts = []
        for item in v:
            p = _payload(ik, isub, item)
            parts.append(itag)
            if _wire_type(ik) == 2:
                parts.append(uvarint(len(p)))
            parts.append(p)
        return b"".join(parts)
    raise ProtobufError(f"unknown value kind {kind}")  # pragma: no cover - plans only hold the above


def _encode_struct(plan: _Plan, obj: dict) -> bytes:
    parts: list[bytes] = []
    ap = parts.append
    for name, mode, kind, sub, tag, absent in plan.enc:
        if mode == M_INLINE:
            b = _encode_struct(sub, obj)
            ap(tag)
            ap(uvarint(len(b)))
            ap(b)
            continue
        v = obj.get(name)
        if v is None:
            if absent is not None:
                if absent is True:
                    b = _empty_bytes(sub)
                    ap(tag)
                    ap(uvarint(len(b)))
                    ap(b)
                else:
                    ap(absent)
            continue
        try:
            if mode == M_ONE:
                if kind == K_STR:
                    if type(v) is not str:
                        raise ProtobufError(f"expected a string, got {type(v).__name__}")
                    b = v.encode()
                    ap(tag)
                    ap(uvarint(len(b)))
                    ap(b)
                elif kind in _VARINT_KINDS:
                    ap(tag)
                    ap(_payload(kind, sub, v))
                elif kind == K_NUM:
                    ap(tag)
                    ap(_payload(kind, sub, v))
                else:
                    b = _payload(kind, sub, v)
                    ap(tag)
                    ap(uvarint(len(b)))
                    ap(b)
            elif mode == M_LIST:
                if type(v) is not list:
                    raise ProtobufError(f"expected a list, got {type(v).__name__}")
                ld = _wire_type(kind) == 2
                for i, item in enumerate(v):
                    if item is None:
                        raise ProtobufError(f"[{i}]: null is not a valid list item")
                    try:
                        b = _payload(kind, sub, item)
                    except ProtobufError as exc:
                        raise exc.within(f"[{i}]") from None
                    ap(tag)
                    if ld:
                        ap(uvarint(len(b)))
                    ap(b)
            else:  # M_MAP
                if type(v) is not dict:
                    raise ProtobufError(f"expected an object, got {type(v).__name__}")
                vtag = _SMALL[(2 << 3) | _wire_type(kind)]
                ld = _wire_type(kind) == 2
                for k in sorted(v):
                    item = v[k]
                    kb = k.encode()
                    entry = [b"\x0a", uvarint(len(kb)), kb]
                    if item is not None:
                        try:
                            b = _payload(kind, sub, item)
                        except ProtobufError as exc:
                            raise exc.within(f"[{k}]") from None
                        entry.append(vtag)
                        if ld:
                            entry.append(uvarint(len(b)))
                        entry.append(b)
                    e = b"".join(entry)
                    ap(tag)
                    ap(uvarint(len(e)))
                    ap(e)
        except ProtobufError as exc:
            raise exc.within(name) from None
    return b"".join(parts)


def reference_encode_message(obj: dict, schema: Struct) -> bytes:
    """:func:`.protobuf.encode_message` by the table-driven codec alone (the reference the
    generated encoders are checked against)."""
    if not isinstance(obj, dict):
        raise ProtobufError(f"expected an object, got {type(obj).__name__}")
    return _encode_struct(_plan(schema), obj)


def schema_of(api_version: str, kind: str) -> Struct | None:
    """The schema of ``kind`` in ``api_version`` (``v1`` or ``group/version``), or None."""
    group, _, version = api_version.rpartition("/")
    return schema_for(group, version, kind)


# --- decoding -------------------------------------------------------------------------------------


def _skip(buf: bytes, pos: int, end: int, tag: int, plan: _Plan) -> int:
    number, wt = tag >> 3, tag & 7
    if number in plan.numbers:
        raise ProtobufError(f"{plan.numbers[number]}: wrong wire type {wt} for field {number}")
    if number == 0:
        raise ProtobufError("field number 0 is invalid")
    if wt == 0:
        _, pos = _read_varint(buf, pos)
    elif wt == 1:
        pos += 8
    elif wt == 2:
        n, pos = _read_varint(buf, pos)
        pos += n
    elif wt == 5:
        pos += 4
    else:
        raise ProtobufError(f"field {number}: wire type {wt} (groups) is not supported")
    if pos > end:
        raise ProtobufError(f"field {number}: truncated")
    return pos


def _fix_int(v: int, kind: int) -> Any:
    if kind == K_I64:
        return v - (1 << 64) if v >= 1 << 63 else v
    if kind == K_I32:
        v &= 0xFFFFFFFF
        return v - (1 << 32) if v >= 1 << 31 else v
    return v != 0


def _decode_ld(buf: bytes, pos: int, e: int, kind: int, sub: Any) -> Any:
    """One length-delimited value (``buf[pos:e]``) of ``kind`` as JSON."""
    if kind == K_STR:
        return buf[pos:e].decode()
    if kind == K_STRUCT:
        d: dict = {}
        _decode_struct(buf, pos, e, sub, d)
        return d
    if kind == K_TIME or kind == K_MICRO:
        if pos == e:
            return None  # the zero time
        seconds = nanos = 0
        while pos < e:
            t, pos = _read_varint(buf, pos)
            if t == 0x08:
                seconds, pos = _read_varint(buf, pos)
            elif t == 0x10:
                nanos, pos = _read_varint(buf, pos)
            else:
                pos = _skip(buf, pos, e, t, _TIMESTAMP_PLAN)
        seconds = _fix_int(seconds, K_I64)
        if kind == K_TIME:
            return _format_seconds(seconds)
        return f"{_format_seconds(seconds)[:-1]}.{(_fix_int(nanos, K_I32) // 1000) % 1_000_000:06d}Z"
    if kind == K_QTY:
        s = "0"
        while pos < e:
            t, pos = _read_varint(buf, pos)
            if t == 0x0A:
                n, pos = _read_varint(buf, pos)
                s = buf[pos : pos + n].decode()
                pos += n
            else:
                pos = _skip(buf, pos, e, t, _QTY_PLAN)
        if pos > e:
            raise ProtobufError("quantity: truncated")
        return s
    if kind == K_IOS:
        typ = ival = 0
        sval = ""
        while pos < e:
            t, pos = _read_varint(buf, pos)
            if t == 0x08:
                typ, pos = _read_varint(buf, pos)
            elif t == 0x10:
                ival, pos = _read_varint(buf, pos)
            elif t == 0x1A:
                n, pos = _read_varint(buf, pos)
                sval = buf[pos : pos + n].decode()
                pos += n
            else:
                pos = _skip(buf, pos, e, t, _IOS_PLAN)
        if pos > e:
            raise ProtobufError("int-or-string: truncated")
        return sval if typ == 1 else _fix_int(ival, K_I32)
    if kind == K_BYTES:
        return base64.b64encode(buf[pos:e]).decode()
    if kind == K_DUR:
        ns = 0
        while pos < e:
            t, pos = _read_varint(buf, pos)
            if t == 0x08:
                ns, pos = _read_varint(buf, pos)
            else:
                pos = _skip(buf, pos, e, t, _DUR_PLAN)
        return format_duration(_fix_int(ns, K_I64))
    if kind == K_OPAQUE:
        raw = b""
        while pos < e:
            t, pos = _read_varint(buf, pos)
            if t == 0x0A:
                n, pos = _read_varint(buf, pos)
                raw = buf[pos : pos + n]
                pos += n
            else:
                pos = _skip(buf, pos, e, t, _RAW_PLAN)
        if pos > e:
            raise ProtobufError("raw: truncated")
        if not raw:
            return None
        if raw[:4] == MAGIC:
            return _decode_embedded(raw)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ProtobufError(f"raw: not JSON ({exc})") from None
    if kind == K_WRAPPED:
        ik, isub = sub
        out: list = []
        _decode_struct(buf, pos, e, _wrapper_plan(ik, isub), {"items": out})
        return out
    raise ProtobufError(f"unknown value kind {kind}")  # pragma: no cover


# Objects embedded in protobuf form in a RawExtension may embed others: bounded, so
# that a small body cannot nest deep enough to exhaust the stack (or, since every
# Objects embedded in protobuf form in a RawExtension may embed others: bounded, so
# that a small body cannot nest deep enough to exhaust the stack (or, since every
# failed fast decode is retried by the reference, to take exponential time).
MAX_EMBEDDED_DEPTH = 8
_embedded = threading.local()


def _decode_embedded(raw: bytes) -> dict:
    depth = getattr(_embedded, "depth", 0)
    if depth >= MAX_EMBEDDED_DEPTH:
        raise ProtobufError(f"raw: objects embedded in protobuf more than {MAX_EMBEDDED_DEPTH} deep")
    _embedded.depth = depth + 1
    try:
        # By the reference alone: embedded objects are rare, and a fast decode that
        # failed deep inside would otherwise be retried once per level.
        u = reference_decode_unknown(raw)
        schema, into = _open_envelope(u, None)
        return reference_decode_message(u.raw, schema, into)
    finally:
        _embedded.depth = depth


def _decode_struct(buf: bytes, pos: int, end: int, plan: _Plan, out: dict) -> None:
    table = plan.dec
    name = ""
    try:
        while pos < end:
            tag = buf[pos]
            pos += 1
            if tag >= 0x80:
                tag, pos = _varint_rest(buf, pos, tag)
            ent = table.get(tag)
            if ent is None:
                pos = _skip(buf, pos, end, tag, plan)
                continue
            op, name, kind, sub = ent
            if tag & 7 == 2:
                n = buf[pos]
                pos += 1
                if op == OP_STR and n == 0:
                    continue  # an empty non-pointer string: the most common field of all
                if n >= 0x80:
                    n, pos = _varint_rest(buf, pos, n)
                e = pos + n
                if e > end:
                    raise ProtobufError("truncated")
                if op == OP_STR:
                    out[name] = buf[pos:e].decode()
                elif op == OP_STRUCT or op == OP_STRUCT_KEEP:
                    d = out.get(name)
                    if type(d) is not dict:
                        d = {}
                    if n:
                        _decode_struct(buf, pos, e, sub, d)
                    if d or op == OP_STRUCT_KEEP:
                        out[name] = d
                elif op == OP_LIST_STR:
                    lst = out.get(name)
                    if lst is None:
                        out[name] = [buf[pos:e].decode()]
                    else:
                        lst.append(buf[pos:e].decode())
                elif op == OP_STR_KEEP:
                    out[name] = buf[pos:e].decode()
                elif op == OP_LIST_LD:
                    v = _decode_ld(buf, pos, e, kind, sub)
                    lst = out.get(name)
                    if lst is None:
                        out[name] = [v]
                    else:
                        lst.append(v)
                elif op == OP_MAP_STR:
                    m = out.get(name)
                    if m is None:
                        out[name] = m = {}
                    # Fast path for the usual entry: 0a <key> 12 <value>, short lengths.
                    kl = buf[pos + 1] if e - pos >= 4 else 0x80
                    if (
                        kl < 0x80
                        and buf[pos] == 0x0A
                        and pos + 2 + kl < e
                        and buf[pos + 2 + kl] == 0x12
                        and buf[pos + 3 + kl] < 0x80
                        and pos + 4 + kl + buf[pos + 3 + kl] == e
                    ):
                        m[buf[pos + 2 : pos + 2 + kl].decode()] = buf[pos + 4 + kl : e].decode()
                    else:
                        k, v = _decode_entry(buf, pos, e, kind, sub)
                        m[k] = v
                elif op == OP_MAP:
                    m = out.get(name)
                    if m is None:
                        out[name] = m = {}
                    k, v = _decode_entry(buf, pos, e, kind, sub)
                    m[k] = v
                elif op == OP_INLINE:
                    _decode_struct(buf, pos, e, sub, out)
                elif op == OP_LD or op == OP_LD_KEEP:
                    v = _decode_ld(buf, pos, e, kind, sub)
                    if v is not None and (op == OP_LD_KEEP or v != _ZERO_JSON[kind]):
                        out[name] = v
                else:  # OP_PACKED
                    lst = out.get(name)
                    if lst is None:
                        out[name] = lst = []
                    p = pos
                    while p < e:
                        v, p = _read_varint(buf, p)
                        lst.append(_fix_int(v, kind))
                    if p != e:
                        raise ProtobufError("truncated packed list")
                pos = e
            elif op == OP_VARINT or op == OP_VARINT_KEEP or op == OP_LIST_VARINT:
                v = buf[pos]
                pos += 1
                if v >= 0x80:
                    v, pos = _varint_rest(buf, pos, v)
                if kind == K_BOOL:
                    v = v != 0
                elif v >= 0x80000000:
                    v = _fix_int(v, kind)
                if op == OP_LIST_VARINT:
                    out.setdefault(name, []).append(v)
                elif v or op == OP_VARINT_KEEP:
                    out[name] = v
            else:  # fixed64: a double
                if pos + 8 > end:
                    raise ProtobufError("truncated")
                (v,) = _struct.unpack_from("<d", buf, pos)
                pos += 8
                if v.is_integer() and abs(v) < 1e15:
                    v = int(v)  # JSON writes integral floats without a fraction
                if op == OP_LIST_FIXED:
                    out.setdefault(name, []).append(v)
                elif v or op == OP_FIXED_KEEP:
                    out[name] = v
        if pos != end:
            raise ProtobufError("truncated")
    except ProtobufError as exc:
        raise exc.within(name) if name else exc from None
    except UnicodeDecodeError:
        raise ProtobufError("invalid UTF-8 in a string", name) from None
    except (IndexError, _struct.error):
        raise ProtobufError("truncated", name) from None


def _decode_entry(buf: bytes, pos: int, e: int, kind: int, sub: Any) -> tuple[str, Any]:
    key = ""
    val: Any = None
    while pos < e:
        t, pos = _read_varint(buf, pos)
        if t == 0x0A:
            n, pos = _read_varint(buf, pos)
            if pos + n > e:
                raise ProtobufError("map key: truncated")
            key = buf[pos : pos + n].decode()
            pos += n
        elif t == 0x12 and _wire_type(kind) == 2:
            n, pos = _read_varint(buf, pos)
            if pos + n > e:
                raise ProtobufError("map value: truncated")
            val = _decode_ld(buf, pos, pos + n, kind, sub)
            pos += n
        elif t == 0x10 and kind in _VARINT_KINDS:
            v, pos = _read_varint(buf, pos)
            val = _fix_int(v, kind)
        elif t == 0x11 and kind == K_NUM:
            (val,) = _struct.unpack_from("<d", buf, pos)
            pos += 8
        else:
            pos = _skip(buf, pos, e, t, _ENTRY_PLAN)
    if pos != e:
        raise ProtobufError("map entry: truncated")
    if val is None:
        val = {} if kind == K_STRUCT else [] if kind == K_WRAPPED else _ZERO_JSON[kind]
    return key, val


# The JSON of each kind's zero value: what a missing map value decodes to, and
# what a non-pointer, non-required field is left out for.
_ZERO_JSON = {
    K_STR: "",
    K_I32: 0,
    K_I64: 0,
    K_BOOL: False,
    K_NUM: 0,
    K_BYTES: "",
    K_QTY: "0",
    K_IOS: 0,
    K_DUR: "0s",
    K_TIME: None,
    K_MICRO: None,
    K_OPAQUE: None,
    K_STRUCT: {},
    K_WRAPPED: [],
}


def _fixed_plan(name: str, numbers: dict[int, str]) -> _Plan:
    p = _Plan(Struct(name, []))
    p.numbers = numbers
    return p


_TIMESTAMP_PLAN = _fixed_plan("Timestamp", {1: "seconds", 2: "nanos"})
_QTY_PLAN = _fixed_plan("Quantity", {1: "string"})
_IOS_PLAN = _fixed_plan("IntOrString", {1: "type", 2: "intVal", 3: "strVal"})
_DUR_PLAN = _fixed_plan("Duration", {1: "duration"})
_RAW_PLAN = _fixed_plan("RawExtension", {1: "raw"})
_ENTRY_PLAN = _fixed_plan("MapEntry", {1: "key", 2: "value"})
_WRAPPERS: dict[tuple[int, int], _Plan] = {}


def _wrapper_plan(kind: int, sub: Any) -> _Plan:
    key = (kind, id(sub))
    p = _WRAPPERS.get(key)
    if p is None:
        p = _fixed_plan("ListWrapper", {1: "items"})
        tag = (1 << 3) | _wire_type(kind)
        p.dec[tag] = (_list_op(kind), "items", kind, sub)
        if kind in _VARINT_KINDS:
            p.dec[(1 << 3) | 2] = (OP_PACKED, "items", kind, sub)
        _WRAPPERS[key] = p
    return p


def reference_decode_message(data: bytes, schema: Struct, into: dict | None = None) -> dict:
    """:func:`.protobuf.decode_message` by the table-driven codec alone (the reference the
    generated decoders are checked against)."""
    out = {} if into is None else into
    buf = bytes(data) if not isinstance(data, bytes) else data
    try:
        _decode_struct(buf, 0, len(buf), _plan(schema), out)
    except (IndexError, _struct.error):
        raise ProtobufError(f"{schema.short_name}: truncated message") from None
    except UnicodeDecodeError:
        raise ProtobufError(f"{schema.short_name}: invalid UTF-8 in a string") from None
    return out


# --- envelopes -----------------------------------------------------------------------------------


class Unknown(NamedTuple):
    """The envelope's fields."""

    api_version: str
    kind: str
    raw: bytes
    content_encoding: str = ""
    content_type: str = ""


def reference_decode_unknown(data: bytes) -> Unknown:
    """The envelope of enveloped protobuf bytes; a wrong prefix is an error (by the
    table-driven reader alone: :func:`.protobuf.decode_unknown` tries the C codec first)."""
    buf = bytes(data) if not isinstance(data, bytes) else data
    if buf[:4] != MAGIC:
        raise ProtobufError(
            f"the body does not start with the protobuf prefix {MAGIC.hex(' ')} (got {buf[:4].hex(' ') or 'nothing'})"
        )
    av = kind = ce = ct = ""
    raw = b""
    pos, end = 4, len(buf)
    try:
        while pos < end:
            tag, pos = _read_varint(buf, pos)
            if tag & 7 != 2:
                pos = _skip(buf, pos, end, tag, _UNKNOWN_PLAN)
                continue
            n, pos = _read_varint(buf, pos)
            e = pos + n
            if e > end:
                raise ProtobufError(f"envelope field {tag >> 3}: truncated")
            number = tag >> 3
            if number == 1:
                p = pos
                while p < e:
                    t, p = _read_varint(buf, p)
                    if t & 7 != 2:
                        p = _skip(buf, p, e, t, _TYPEMETA_PLAN)
                        continue
                    m, p = _read_varint(buf, p)
                    if p + m > e:
                        raise ProtobufError("typeMeta: truncated")
                    if t == 0x0A:
                        av = buf[p : p + m].decode()
                    elif t == 0x12:
                        kind = buf[p : p + m].decode()
                    p += m
            elif number == 2:
                raw = buf[pos:e]
            elif number == 3:
                ce = buf[pos:e].decode()
            elif number == 4:
                ct = buf[pos:e].decode()
            pos = e
    except IndexError:
        raise ProtobufError("envelope: truncated") from None
    except UnicodeDecodeError:
        raise ProtobufError("envelope: invalid UTF-8 in a string") from None
    return Unknown(av, kind, raw, ce, ct)


_UNKNOWN_PLAN = _fixed_plan("Unknown", {1: "typeMeta", 2: "raw", 3: "contentEncoding", 4: "contentType"})
_TYPEMETA_PLAN = _fixed_plan("TypeMeta", {1: "apiVersion", 2: "kind"})


def _open_envelope(u: Unknown, schema: Struct | None) -> tuple[Struct, dict]:
    """The schema of an envelope's message (``schema`` if given) and the object its
    fields decode into (``apiVersion`` and ``kind`` set); an envelope this codec
    does not take is an error."""
    if u.content_encoding:
        raise ProtobufError(f"unsupported content encoding {u.content_encoding!r} in the envelope")
    if u.content_type and not is_protobuf(u.content_type):
        raise ProtobufError(f"unsupported content type {u.content_type!r} in the envelope")
    if not u.kind:
        raise ProtobufError("the envelope names no kind")
    if schema is None:
        schema = schema_of(u.api_version, u.kind)
        if schema is None:
            raise ProtobufError(f"no protobuf encoding is declared for {u.kind} in {u.api_version or 'v1'}")
    into = {"apiVersion": u.api_version, "kind": u.kind}
    return schema, into
