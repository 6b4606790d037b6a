"""Upstream's protobuf wire format for every declared kind, derived from the schemas.

Why hand-written: the kinds are declared once (``apiserver_min.api.schemas``)
with upstream's field numbers, pointer-ness and inline embedding, so the wire
format follows from those declarations; there is no generated code to keep in
step. Each struct is compiled once into an encode list and a decode table
(keyed by the whole tag, so the hot loop is one dict look-up per field).

What the bytes look like (upstream v1.27, gogo-generated marshallers):

* an object is ``magic 6b 38 73 00`` + ``runtime.Unknown{typeMeta{apiVersion=1,
  kind=2}=1, raw=2, contentEncoding=3, contentType=4}``; ``raw`` is the kind's
  message, which has no TypeMeta of its own;
* fields are written in field-number order; a non-pointer scalar or struct is
  always written, even when zero or empty (``0a 00`` for an empty name), a
  pointer only when set; list items one field each (repeated scalars are not
  packed; packed input is read too); map entries ``{key=1, value=2}`` sorted
  by key;
* metav1.Time is ``{seconds=1, nanos=2}`` with nanos 0 and the empty message
  for the zero time; MicroTime keeps microseconds; Duration is ``{duration=1}``
  in nanoseconds; Quantity ``{string=1}``; IntOrString ``{type=1, intVal=2,
  strVal=3}``; RawExtension and FieldsV1 ``{raw=1}`` holding JSON;
* a list is ``<Kind>List{metadata=1 ListMeta, items=2}``; an error is
  ``meta.v1.Status``;
* a watch stream is a sequence of frames, each a 4-byte big-endian length and
  a ``meta.v1.WatchEvent{type=1, object=2 RawExtension{raw=1}}`` message whose
  raw is the enveloped object (upstream's stream serializer writes the event
  itself without magic or envelope).

Decoding maps back to the JSON the server stores: zero values of non-pointer,
non-required fields are left out (upstream's ``omitempty``: the two forms are
the same object), pointer fields keep their presence, required fields keep
their zero value. Unknown field numbers are skipped by wire type; a known
field with the wrong wire type, a truncated message, bad UTF-8 or a deprecated
group is a :class:`ProtobufError` naming the field.

The code is in three layers, each importing only those below it:
:mod:`.protobuf_wire` (plans compiled from the schemas, varints, and the
table-driven reference codec of messages and values), :mod:`.protobuf_codegen`
(per-struct encoders and decoders generated from the same plans) and this
module (the public API, and the C codec ``_pbfast.c`` loaded when it was built).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, AsyncIterator, Callable, Iterator

from . import protobuf_codegen as _codegen

# The wire layer's names used here; the public ones (and MAX_EMBEDDED_DEPTH) are re-exported.
from .protobuf_wire import (
    _RAW_PLAN,
    _ZERO_JSON,
    K_WRAPPED,
    MAGIC,
    MAX_EMBEDDED_DEPTH,  # noqa: F401 - re-exported: the public codec's limit
    MEDIA_TYPES,
    OP_LIST_FIXED,
    ProtobufError,
    Unknown,
    _decode_entry,
    _decode_ld,
    _empty_bytes,
    _encode_struct,
    _fixed_plan,
    _open_envelope,
    _payload,
    _Plan,
    _plan,
    _read_varint,
    _skip,
    _time_seconds_nanos,
    is_protobuf,
    reference_decode_message,
    reference_decode_unknown,
    reference_encode_message,
    schema_of,
    uvarint,
)
from .schema import LIST_META, Struct

__all__ = [
    "MAGIC",
    "MEDIA_TYPES",
    "ProtobufError",
    "Unknown",
    "is_protobuf",
    "schema_of",
    "encode",
    "decode",
    "encode_message",
    "decode_message",
    "encode_unknown",
    "decode_unknown",
    "encode_list",
    "encode_unknown_parts",
    "ListEncoder",
    "watch_frame",
    "decode_watch_event",
    "iter_frames",
    "FrameReader",
    "uvarint",
    "reference_encode_message",
    "reference_decode_message",
]

MAX_FRAME = 64 << 20  # a watch frame larger than this is a broken stream, not an object


# --- encoding -------------------------------------------------------------------------------------


def encode_message(obj: dict, schema: Struct) -> bytes:
    """The kind's message (no magic, no envelope) for a JSON object.

    Runs the struct's generated encoder (:mod:`.protobuf_codegen`); anything it
    does not take is re-encoded by the table-driven reference, which raises the
    error naming the field."""
    if not isinstance(obj, dict):
        raise ProtobufError(f"expected an object, got {type(obj).__name__}")
    plan = _plan(schema)
    try:
        if _fast is not None:
            return _fast.encode(_cplan(plan), obj)
        return _codegen.encoder(plan)(obj)
    except Exception:
        return _encode_struct(plan, obj)


def encode_unknown(
    api_version: str, kind: str, raw: bytes, content_encoding: str = "", content_type: str = ""
) -> bytes:
    """The magic and ``runtime.Unknown`` around ``raw`` (all four fields written, as upstream)."""
    return encode_unknown_parts(api_version, kind, [raw], content_encoding, content_type)


def encode_unknown_parts(
    api_version: str, kind: str, raw_parts: list[bytes], content_encoding: str = "", content_type: str = ""
) -> bytes:
    """:func:`encode_unknown` of the concatenation of ``raw_parts``, copied once."""
    av, k = api_version.encode(), kind.encode()
    tm = b"\x0a" + uvarint(len(av)) + av + b"\x12" + uvarint(len(k)) + k
    ce, ct = content_encoding.encode(), content_type.encode()
    raw_len = sum(map(len, raw_parts))
    head = (MAGIC, b"\x0a", uvarint(len(tm)), tm, b"\x12", uvarint(raw_len))
    tail = (b"\x1a", uvarint(len(ce)), ce, b"\x22", uvarint(len(ct)), ct)
    return b"".join((*head, *raw_parts, *tail))


def encode(obj: dict, schema: Struct | None = None) -> bytes:
    """A JSON object with ``apiVersion`` and ``kind`` as enveloped protobuf bytes."""
    if not isinstance(obj, dict):
        raise ProtobufError(f"expected an object, got {type(obj).__name__}")
    av, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(av, str) or not isinstance(kind, str) or not av or not kind:
        raise ProtobufError("an object needs apiVersion and kind to be encoded in protobuf")
    if schema is None:
        schema = schema_of(av, kind)
        if schema is None:
            raise ProtobufError(f"no protobuf encoding is declared for {kind} in {av}")
    return encode_unknown(av, kind, encode_message(obj, schema))


class ListEncoder:
    """A ``<Kind>List`` encoded item by item (no list dict is built), so that a caller
    can pause between items: :meth:`add` each item, then :meth:`finish`. The bytes are
    those of :func:`encode` of the whole list."""

    def __init__(self, api_version: str, list_kind: str, metadata: dict, item_schema: Struct):
        self.api_version, self.list_kind = api_version, list_kind
        md = encode_message(metadata, LIST_META)
        self.parts: list[bytes] = [b"\x0a", uvarint(len(md)), md]
        self.count = 0
        self._plan = plan = _plan(item_schema)
        self._fast: Callable[[dict], bytes]
        if _fast is not None:
            cp, c_encode = _cplan(plan), _fast.encode
            self._fast = lambda item: c_encode(cp, item)
        else:
            self._fast = _codegen.encoder(plan)

    def add(self, item: dict) -> int:
        """Encodes one item; returns its size in bytes."""
        try:
            b = self._fast(item)
        except Exception:
            try:
                b = _encode_struct(self._plan, item)
            except ProtobufError as exc:
                raise exc.within(f"[{self.count}]").within("items") from None
        self.parts += [b"\x12", uvarint(len(b)), b]
        self.count += 1
        return len(b)

    def finish(self) -> bytes:
        return encode_unknown_parts(self.api_version, self.list_kind, self.parts)


def encode_list(
    api_version: str, list_kind: str, metadata: dict, items: Iterator[dict] | list[dict], item_schema: Struct
) -> bytes:
    """``<Kind>List`` enveloped, items encoded one by one (no list dict is built)."""
    enc = ListEncoder(api_version, list_kind, metadata, item_schema)
    for item in items:
        enc.add(item)
    return enc.finish()


def decode_message(data: bytes, schema: Struct, into: dict | None = None) -> dict:
    """A kind's message (no magic, no envelope) as a JSON object (``into`` if given).

    Runs the struct's generated decoder (:mod:`.protobuf_codegen`); when it
    raises, ``into`` is restored and the table-driven reference decodes the
    bytes again, raising its error naming the field."""
    out = {} if into is None else into
    buf = bytes(data) if not isinstance(data, bytes) else data
    plan = _plan(schema)
    saved = None
    if out:
        if not out.keys().isdisjoint(schema.json_fields()):
            return reference_decode_message(buf, schema, out)  # merging into given fields
        saved = dict(out)
    try:
        if _fast is not None:
            return _fast.decode(_cplan(plan), buf, out)
        _codegen.decoder(plan)(buf, 0, len(buf), out)
        return out
    except Exception:
        out.clear()
        if saved:
            out.update(saved)
    return reference_decode_message(buf, schema, out)


def decode_unknown(data: bytes) -> Unknown:
    """The envelope of enveloped protobuf bytes; a wrong prefix is an error."""
    if _fast is not None:
        buf = bytes(data) if not isinstance(data, bytes) else data
        if buf[:4] == MAGIC:
            try:
                return Unknown(*_fast.unknown(buf))
            except Exception:
                pass  # the reference below reports what is wrong
        data = buf
    return reference_decode_unknown(data)


def decode(data: bytes, schema: Struct | None = None) -> dict:
    """Enveloped protobuf bytes as a JSON object with ``apiVersion`` and ``kind``.

    The schema is the envelope's kind unless given. Bytes in another content
    encoding or type inside the envelope are refused.
    """
    fast_failed = False
    if _fast is not None and type(data) is bytes:
        # The usual case in C: envelope and message; anything unusual falls through
        # to the code below, whose reference decoder decodes the same bytes again
        # and names any error (not the C decoder a second time: objects embedded in
        # objects would be retried at every level).
        try:
            if schema is None:
                obj = _fast.decode_object(data, _FAST_KINDS)
                if obj is not None:
                    return obj
            av, kind, raw, ce, ct = _fast.unknown(data)
            if not ce and not ct and kind:
                cp = _FAST_KINDS.get((av, kind)) if schema is None else _fast_plan(schema)
                if cp is None and schema is None:
                    cp = _fast_kind(av, kind)
                if cp is not None:
                    return _fast.decode(cp, raw, {"apiVersion": av, "kind": kind})
        except Exception:
            fast_failed = True
    return _decode_enveloped(data, schema, reference=fast_failed)


def _decode_enveloped(data: bytes, schema: Struct | None, *, reference: bool) -> dict:
    """:func:`decode` without its C fast path; ``reference``: the table-driven codec only."""
    u = decode_unknown(data)
    schema, into = _open_envelope(u, schema)
    if reference:
        return reference_decode_message(u.raw, schema, into)
    return decode_message(u.raw, schema, into)


# --- watch streams ------------------------------------------------------------------------------


def watch_frame(event_type: str, enveloped_object: bytes) -> bytes:
    """One watch frame: 4-byte big-endian length + ``WatchEvent{type, object{raw}}``."""
    t = event_type.encode()
    obj = b"\x0a" + uvarint(len(enveloped_object)) + enveloped_object
    msg = b"".join((b"\x0a", uvarint(len(t)), t, b"\x12", uvarint(len(obj)), obj))
    return len(msg).to_bytes(4, "big") + msg


def decode_watch_event(msg: bytes) -> tuple[str, dict]:
    """A ``WatchEvent`` message (one frame without its length) as ``(type, object)``."""
    buf = bytes(msg) if not isinstance(msg, bytes) else msg
    ev_type = ""
    raw = b""
    pos, end = 0, len(buf)
    try:
        while pos < end:
            tag, pos = _read_varint(buf, pos)
            if tag == 0x0A:
                n, pos = _read_varint(buf, pos)
                ev_type = buf[pos : pos + n].decode()
                pos += n
            elif tag == 0x12:
                n, pos = _read_varint(buf, pos)
                e = pos + n
                p = pos
                while p < e:
                    t, p = _read_varint(buf, p)
                    if t == 0x0A:
                        m, p = _read_varint(buf, p)
                        raw = buf[p : p + m]
                        p += m
                    else:
                        p = _skip(buf, p, e, t, _RAW_PLAN)
                pos = e
            else:
                pos = _skip(buf, pos, end, tag, _WATCH_EVENT_PLAN)
        if pos != end:
            raise ProtobufError("watch event: truncated")
    except IndexError:
        raise ProtobufError("watch event: truncated") from None
    except UnicodeDecodeError:
        raise ProtobufError("watch event: invalid UTF-8 in the type") from None
    if not ev_type:
        raise ProtobufError("watch event without a type")
    if not raw:
        raise ProtobufError(f"watch event {ev_type} without an object")
    return ev_type, decode(raw)


_WATCH_EVENT_PLAN = _fixed_plan("WatchEvent", {1: "type", 2: "object"})


class FrameReader:
    """Splits a byte stream into length-prefixed frames (chunks may split or join frames)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    def feed(self, chunk: bytes) -> list[bytes]:
        """The frames completed by ``chunk``."""
        self._buf += chunk
        out = []
        buf = self._buf
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if n > self.max_frame:
                raise ProtobufError(f"watch frame of {n} bytes exceeds the limit of {self.max_frame}")
            if len(buf) < 4 + n:
                break
            out.append(bytes(buf[4 : 4 + n]))
            del buf[: 4 + n]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame."""
        return len(self._buf)


async def iter_frames(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, dict]]:
    """Decoded ``(type, object)`` watch events from a protobuf watch byte stream."""
    reader = FrameReader()
    async for chunk in chunks:
        for frame in reader.feed(chunk):
            yield decode_watch_event(frame)
    if reader.pending:
        raise ProtobufError(f"watch stream ended inside a frame ({reader.pending} bytes left)")


# --- the C codec ----------------------------------------------------------------------------------


def _load_fast() -> Any:
    """The C codec (``_pbfast.c``) when it was built and agrees with this module's
    kind and op numbers; None otherwise (or with ``ORCH_PROTOBUF_PURE=1``), and the
    generated Python decoders are used."""
    if os.environ.get("ORCH_PROTOBUF_PURE", "") not in ("", "0"):
        return None
    try:
        import apiserver_min.api._pbfast as _pbfast  # type: ignore  # optional: built where a compiler exists
    except ImportError:
        return None
    if _pbfast.KINDS != tuple(range(K_WRAPPED + 1)) or _pbfast.OPS != tuple(range(OP_LIST_FIXED + 1)):
        logging.getLogger(__name__).warning("protobuf C decoder disagrees with this module's tables; not used")
        return None
    _pbfast.init(
        _decode_ld, _decode_entry, tuple(_ZERO_JSON[k] for k in range(K_WRAPPED + 1)), _payload, _time_seconds_nanos
    )
    return _pbfast


_fast = _load_fast()
_CPLANS: dict[int, Any] = {}
_SCHEMA_PLANS: dict[int, Any] = {}  # id(schema) -> compiled plan or _NO_FAST
_FAST_KINDS: dict[tuple[str, str], Any] = {}  # (apiVersion, kind) -> compiled plan; declared kinds only
_NO_FAST = object()


def _fast_plan(schema: Struct) -> Any:
    """The compiled plan of a kind's schema for :func:`decode`'s fast path, or None
    where the envelope's apiVersion/kind would collide with the struct's own fields."""
    cp = _SCHEMA_PLANS.get(id(schema))
    if cp is None:
        fields = schema.json_fields()
        cp = _NO_FAST if "apiVersion" in fields or "kind" in fields else _cplan(_plan(schema))
        _SCHEMA_PLANS[id(schema)] = cp
    return None if cp is _NO_FAST else cp


def _fast_kind(av: str, kind: str) -> Any:
    schema = schema_of(av, kind)
    if schema is None:
        return None  # not remembered: the key comes from the client
    cp = _FAST_KINDS[(av, kind)] = _fast_plan(schema)
    return cp


def _cplan(plan: _Plan) -> Any:
    """The plan's decode table and encode list compiled for the C codec (built once per plan;
    registered before its entries so recursive structs find themselves)."""
    cp = _CPLANS.get(id(plan))
    if cp is None:
        cp = _CPLANS[id(plan)] = _fast.Plan()
        ents = []
        for tag, (op, name, kind, sub) in plan.dec.items():
            csub = _cplan(sub) if isinstance(sub, _Plan) else None
            ents.append((tag, op, sys.intern(name), kind, sub, csub))
        cp.set(ents, tuple(plan.numbers))
        encs = []
        for name, mode, kind, sub, tag, absent in plan.enc:
            if absent is True:
                empty = _empty_bytes(sub)
                absent = tag + uvarint(len(empty)) + empty
            csub = _cplan(sub) if isinstance(sub, _Plan) else None
            encs.append((sys.intern(name or ""), mode, kind, sub, tag, absent, csub))
        cp.set_enc(encs)
    return cp
