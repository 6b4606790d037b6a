"""Specialised protobuf encoders and decoders, generated per struct as Python source.

Used where the C codec (``_pbfast.c``, built with the package when a compiler
is there) is not: it is about five times slower than the C codec and five
times faster than the table-driven reference.

Why: the table-driven codec in :mod:`apiserver_min.api.protobuf_wire` pays a generic
dispatch per wire field (a tag look-up, an op switch, tuple unpacking), about
0.3 us a field; a 2 KB pod has ~200 fields. Here each struct's plan (the same
``_Plan`` the table-driven codec uses, so the wire facts come from one place) is
turned once into straight-line source: field tags and JSON names are
constants, nested structs call each other's generated functions directly, and
the decoder first walks the fields in field-number order -- the order every
upstream encoder writes -- testing each expected tag once, before dropping to
a dispatch loop for whatever is left (out-of-order, repeated or unknown
fields).

Only the common path is specialised. Rare value kinds (durations, bytes,
packed lists, non-string map values, ...) call the table-driven helpers, and
every error is left to the table-driven codec: when a generated function
raises anything, the caller runs the reference codec on the same input, which
either raises its error naming the field or (should the two ever disagree)
returns the reference result. So the generated code only has to be right on
the inputs it accepts, which the tests check against the reference on every
declared kind and on mutated bytes.

Functions are compiled lazily, per struct, on first use (a stub stands in
until then), so importing this module costs nothing and only the kinds
actually served are ever compiled.
"""

from __future__ import annotations

import struct as _struct
from typing import Any, Callable

from . import protobuf_wire as _wire
from .protobuf_wire import (
    K_BOOL,
    K_I32,
    K_I64,
    K_NUM,
    K_STR,
    K_STRUCT,
    M_INLINE,
    M_LIST,
    M_ONE,
    OP_FIXED,
    OP_FIXED_KEEP,
    OP_INLINE,
    OP_LD,
    OP_LD_KEEP,
    OP_LIST_FIXED,
    OP_LIST_LD,
    OP_LIST_STR,
    OP_LIST_VARINT,
    OP_MAP,
    OP_MAP_STR,
    OP_PACKED,
    OP_STR,
    OP_STR_KEEP,
    OP_STRUCT,
    OP_STRUCT_KEEP,
    OP_VARINT,
    OP_VARINT_KEEP,
    ProtobufError,
    _Plan,
)

__all__ = ["decoder", "encoder"]


class _Reject(Exception):
    """Raised by generated encoders for a value the fast path does not take
    (wrong type, out of range): the caller re-runs the reference encoder,
    which raises the error naming the field."""


def _packed(buf: bytes, pos: int, e: int, out: dict, name: str, kind: int) -> None:
    lst = out.get(name)
    if lst is None:
        out[name] = lst = []
    p = pos
    while p < e:
        v, p = _wire._read_varint(buf, p)
        lst.append(_wire._fix_int(v, kind))
    if p != e:
        raise ProtobufError("truncated packed list")


def _fixed(buf: bytes, pos: int) -> Any:
    (v,) = _struct.unpack_from("<d", buf, pos)
    if v.is_integer() and abs(v) < 1e15:
        v = int(v)
    return v


# One namespace for every generated function: they find each other as globals
# (``_d12``/``_e12``), which CPython resolves with a cached dictionary look-up.
_NS: dict[str, Any] = {
    "vr": _wire._varint_rest,
    "skip": _wire._skip,
    "ld": _wire._decode_ld,
    "entry": _wire._decode_entry,
    "fix": _wire._fix_int,
    "packed": _packed,
    "fixed": _fixed,
    "PE": ProtobufError,
    "Reject": _Reject,
    "SM": _wire._SMALL,
    "uv": _wire.uvarint,
    "payload": _wire._payload,
    "dict": dict,
    "list": list,
    "str": str,
    "int": int,
    "sorted": sorted,
    "type": type,
}
_IDS: dict[int, int] = {}  # id(plan) -> index in the function names
_PLANS: list[_Plan] = []  # keeps the plans (and so their ids) alive
_DECODERS: dict[int, Callable] = {}
_ENCODERS: dict[int, Callable] = {}


def _index(plan: _Plan) -> int:
    """The plan's number; the first time, install lazy stubs for its functions."""
    i = _IDS.get(id(plan))
    if i is not None:
        return i
    i = len(_PLANS)
    _PLANS.append(plan)
    _IDS[id(plan)] = i

    def decode_stub(buf: bytes, pos: int, end: int, out: dict) -> None:
        return _compile_decoder(plan, i)(buf, pos, end, out)

    def encode_stub(obj: dict) -> bytes:
        return _compile_encoder(plan, i)(obj)

    _NS[f"_d{i}"] = decode_stub
    _NS[f"_e{i}"] = encode_stub
    return i


def decoder(plan: _Plan) -> Callable[[bytes, int, int, dict], None]:
    """``f(buf, pos, end, out)``: decodes ``buf[pos:end]`` as the plan's struct into ``out``,
    which must hold none of the struct's JSON fields yet (first occurrences start
    fresh values instead of merging)."""
    f = _DECODERS.get(id(plan))
    if f is None:
        f = _compile_decoder(plan, _index(plan))
    return f


def encoder(plan: _Plan) -> Callable[[dict], bytes]:
    """``f(obj)``: the plan's struct message for a JSON object (raises on anything unusual)."""
    f = _ENCODERS.get(id(plan))
    if f is None:
        f = _compile_encoder(plan, _index(plan))
    return f


def _const(value: Any) -> str:
    """A name in the namespace bound to ``value`` (bytes constants, plans, kinds)."""
    name = f"_c{len(_NS)}"
    _NS[name] = value
    return name


def _exec(src: str, fname: str) -> Callable:
    code = compile(src, f"<protobuf codegen {fname}>", "exec")
    exec(code, _NS)
    return _NS[fname]


# --- decoders ---------------------------------------------------------------------------------

_NEXT = """\
if pos >= end:
    if pos > end:
        raise PE("truncated")
    return
tag = buf[pos]
pos += 1
if tag >= 128:
    tag, pos = vr(buf, pos, tag)
"""

_LEN = """\
n = buf[pos]
pos += 1
if n >= 128:
    n, pos = vr(buf, pos, n)
e = pos + n
if e > end:
    raise PE("truncated")
"""


def _indent(src: str, depth: int) -> str:
    pad = "    " * depth
    return "".join(pad + line + "\n" if line else "\n" for line in src.splitlines())


def _handler(tag: int, ent: tuple, plan_name: str, in_seq: bool) -> str:
    """Source handling one occurrence of ``tag`` (already read); leaves ``pos`` after it.
    ``in_seq``: list ops append to a local ``lst`` set up by the caller."""
    op, name, kind, sub = ent
    nm = repr(name)
    if op == OP_STR:
        # An empty non-pointer string is skipped without looking further.
        return (
            "n = buf[pos]\npos += 1\nif n:\n    if n >= 128:\n        n, pos = vr(buf, pos, n)\n"
            '    e = pos + n\n    if e > end:\n        raise PE("truncated")\n'
            f"    out[{nm}] = buf[pos:e].decode()\n    pos = e\n"
        )
    if op == OP_STR_KEEP:
        return _LEN + f"out[{nm}] = buf[pos:e].decode()\npos = e\n"
    if op in (OP_STRUCT, OP_STRUCT_KEEP):
        sd = f"_d{_index(sub)}"
        keep = op == OP_STRUCT_KEEP
        # A struct seen again merges into the first: the reference decodes into a
        # dict that already holds fields (generated decoders expect a fresh one).
        return (
            _LEN + f"d = out.get({nm})\nif type(d) is not dict:\n    d = {{}}\n"
            f"if d:\n    refs(buf, pos, e, {_const(sub)}, d)\nelif n:\n    {sd}(buf, pos, e, d)\n"
            + (f"out[{nm}] = d\n" if keep else f"if d:\n    out[{nm}] = d\n")
            + "pos = e\n"
        )
    if op == OP_INLINE:  # here only when out of order: out may hold its fields already
        return _LEN + f"refs(buf, pos, e, {_const(sub)}, out)\npos = e\n"
    if op in (OP_LIST_STR, OP_LIST_LD, OP_LIST_VARINT, OP_LIST_FIXED):
        if op == OP_LIST_STR:
            body = _LEN + "v = buf[pos:e].decode()\npos = e\n"
        elif op == OP_LIST_LD:
            if kind == K_STRUCT:
                body = _LEN + f"v = {{}}\nif n:\n    _d{_index(sub)}(buf, pos, e, v)\npos = e\n"
            else:
                body = _LEN + f"v = ld(buf, pos, e, {kind}, {_const(sub)})\npos = e\n"
        elif op == OP_LIST_VARINT:
            body = "v = buf[pos]\npos += 1\nif v >= 128:\n    v, pos = vr(buf, pos, v)\n"
            body += "v = v != 0\n" if kind == K_BOOL else f"if v >= 0x80000000:\n    v = fix(v, {kind})\n"
        else:
            body = 'if pos + 8 > end:\n    raise PE("truncated")\nv = fixed(buf, pos)\npos += 8\n'
        if in_seq:
            return body + "lst.append(v)\n"
        return body + f"lst = out.get({nm})\nif lst is None:\n    out[{nm}] = [v]\nelse:\n    lst.append(v)\n"
    if op == OP_MAP_STR:
        return (
            _LEN
            + f"""\
m = out.get({nm})
if m is None:
    out[{nm}] = m = {{}}
kl = buf[pos + 1]
if buf[pos] == 10 and kl < 128 and pos + 2 + kl < e and buf[pos + 2 + kl] == 18 \\
        and buf[pos + 3 + kl] < 128 and pos + 4 + kl + buf[pos + 3 + kl] == e:
    m[buf[pos + 2:pos + 2 + kl].decode()] = buf[pos + 4 + kl:e].decode()
else:
    k, v = entry(buf, pos, e, {kind}, {_const(sub)})
    m[k] = v
pos = e
"""
        )
    if op == OP_MAP:
        return (
            _LEN
            + f"""\
m = out.get({nm})
if m is None:
    out[{nm}] = m = {{}}
k, v = entry(buf, pos, e, {kind}, {_const(sub)})
m[k] = v
pos = e
"""
        )
    if op in (OP_LD, OP_LD_KEEP):
        cond = "v is not None" if op == OP_LD_KEEP else f"v is not None and v != {_const(_wire._ZERO_JSON[kind])}"
        return _LEN + f"v = ld(buf, pos, e, {kind}, {_const(sub)})\nif {cond}:\n    out[{nm}] = v\npos = e\n"
    if op == OP_PACKED:
        return _LEN + f"packed(buf, pos, e, out, {nm}, {kind})\npos = e\n"
    if op in (OP_VARINT, OP_VARINT_KEEP):
        src = "v = buf[pos]\npos += 1\nif v >= 128:\n    v, pos = vr(buf, pos, v)\n"
        src += "v = v != 0\n" if kind == K_BOOL else f"if v >= 0x80000000:\n    v = fix(v, {kind})\n"
        return src + (f"out[{nm}] = v\n" if op == OP_VARINT_KEEP else f"if v:\n    out[{nm}] = v\n")
    if op in (OP_FIXED, OP_FIXED_KEEP):
        src = 'if pos + 8 > end:\n    raise PE("truncated")\nv = fixed(buf, pos)\npos += 8\n'
        return src + (f"out[{nm}] = v\n" if op == OP_FIXED_KEEP else f"if v:\n    out[{nm}] = v\n")
    raise AssertionError(f"no code for op {op} of {plan_name}")  # pragma: no cover


_LIST_OPS = (OP_LIST_STR, OP_LIST_LD, OP_LIST_VARINT, OP_LIST_FIXED)

_END = 'if pos >= end:\n    if pos > end:\n        raise PE("truncated")\n    return\n'


def _seq_len(off: int) -> str:
    """Reads the length that follows a tag of ``off`` bytes at ``pos``: the value is ``buf[p:e]``."""
    return (
        f"n = buf[pos + {off}]\nif n < 128:\n    p = pos + {off + 1}\nelse:\n"
        f"    n, p = vr(buf, pos + {off + 1}, n)\n"
        'e = p + n\nif e > end:\n    raise PE("truncated")\n'
    )


# Immutable scalar messages (times, quantities, int-or-strings, durations) recur
# across objects -- a list's items share a few timestamps and resource amounts --
# so their JSON is remembered by their bytes; so are map entries with immutable
# values (labels, resource lists).
_CACHEABLE = frozenset({_wire.K_TIME, _wire.K_MICRO, _wire.K_QTY, _wire.K_IOS, _wire.K_DUR})
_CACHE_MAX = 4096


def _cached_ld(buf: bytes, p: int, e: int, kind: int, cache: dict) -> Any:
    v = _wire._decode_ld(buf, p, e, kind, None)
    if v is not None:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[buf[p:e]] = v
    return v


def _cached_entry(buf: bytes, p: int, e: int, kind: int, cache: dict) -> tuple[str, Any]:
    kv = _wire._decode_entry(buf, p, e, kind, None)
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[buf[p:e]] = kv
    return kv


# kind -> (the value's wire bytes -> its decoded value); cleared when full.
_LD_CACHES: dict[int, dict[bytes, Any]] = {kind: {} for kind in _CACHEABLE}
_ENTRY_CACHES: dict[int, dict[bytes, Any]] = {kind: {} for kind in _CACHEABLE | {K_STR, K_I32, K_I64, K_BOOL, K_NUM}}
_NS.update(ldc=_cached_ld, entryc=_cached_entry, refs=_wire._decode_struct)


def _ld_value(kind: int, sub: Any) -> str:
    """``v`` = the length-delimited value ``buf[p:e]`` (``n`` bytes) of ``kind`` as JSON."""
    if kind in _CACHEABLE:
        c = _const(_LD_CACHES[kind])
        return f"v = {c}.get(buf[p:e]) if n else None\nif v is None and n:\n    v = ldc(buf, p, e, {kind}, {c})\n"
    return f"v = ld(buf, p, e, {kind}, {_const(sub)})\n"


def _entry_value(kind: int, sub: Any) -> str:
    """``k, v`` = the map entry ``buf[p:e]``."""
    if kind in _ENTRY_CACHES:
        c = _const(_ENTRY_CACHES[kind])
        return f"kv = {c}.get(buf[p:e])\nif kv is None:\n    kv = entryc(buf, p, e, {kind}, {c})\nk, v = kv\n"
    return f"k, v = entry(buf, p, e, {kind}, {_const(sub)})\n"


def _seq_handler(tb: bytes, ent: tuple) -> str:
    """Source for the first occurrence of a field whose tag bytes ``tb`` are at ``pos``
    (fields before it were all lower-numbered): leaves ``pos`` after it; repeated
    fields loop over their consecutive occurrences."""
    op, name, kind, sub = ent
    nm, off = repr(name), len(tb)
    again = " and ".join(f"buf[pos + {j}] == {b}" if j else f"buf[pos] == {b}" for j, b in enumerate(tb))
    if op == OP_STR:
        return (
            f"n = buf[pos + {off}]\nif n == 0:\n    pos += {off + 1}\nelse:\n"
            + _indent(_seq_len(off).split("\n", 1)[1], 1).replace("    if n < 128:", "    if n < 128:", 1)
            + f"    out[{nm}] = buf[p:e].decode()\n    pos = e\n"
            + _END
        )
    if op == OP_STR_KEEP:
        return _seq_len(off) + f"out[{nm}] = buf[p:e].decode()\npos = e\n" + _END
    if op in (OP_STRUCT, OP_STRUCT_KEEP):
        store = f"out[{nm}] = d\n" if op == OP_STRUCT_KEEP else f"if d:\n    out[{nm}] = d\n"
        return _seq_len(off) + f"d = {{}}\nif n:\n    _d{_index(sub)}(buf, p, e, d)\n" + store + "pos = e\n" + _END
    if op == OP_INLINE:
        return _seq_len(off) + f"_d{_index(sub)}(buf, p, e, out)\npos = e\n" + _END
    if op in (OP_LD, OP_LD_KEEP):
        zero = _wire._ZERO_JSON[kind]
        cond = "v is not None" if op == OP_LD_KEEP or zero is None else f"v is not None and v != {_const(zero)}"
        return _seq_len(off) + _ld_value(kind, sub) + f"if {cond}:\n    out[{nm}] = v\npos = e\n" + _END
    if op in (OP_VARINT, OP_VARINT_KEEP):
        src = (
            f"v = buf[pos + {off}]\nif v < 128:\n    pos += {off + 1}\nelse:\n"
            f"    v, pos = vr(buf, pos + {off + 1}, v)\n"
        )
        src += "v = v != 0\n" if kind == K_BOOL else f"if v >= 0x80000000:\n    v = fix(v, {kind})\n"
        return src + (f"out[{nm}] = v\n" if op == OP_VARINT_KEEP else f"if v:\n    out[{nm}] = v\n") + _END
    if op in (OP_FIXED, OP_FIXED_KEEP):
        src = f'p = pos + {off}\nif p + 8 > end:\n    raise PE("truncated")\nv = fixed(buf, p)\npos = p + 8\n'
        return src + (f"out[{nm}] = v\n" if op == OP_FIXED_KEEP else f"if v:\n    out[{nm}] = v\n") + _END
    # Repeated: lists and maps, their consecutive occurrences.
    if op in (OP_MAP_STR, OP_MAP):
        head = f"out[{nm}] = m = {{}}\n"
        item = _seq_len(off)
        item += _entry_value(kind, sub) + "m[k] = v\n"
        item += "pos = e\n"
    else:
        head = f"out[{nm}] = lst = []\n"
        if op == OP_LIST_STR:
            item = _seq_len(off) + "lst.append(buf[p:e].decode())\npos = e\n"
        elif op == OP_LIST_LD and kind == K_STRUCT:
            item = _seq_len(off) + f"v = {{}}\nif n:\n    _d{_index(sub)}(buf, p, e, v)\nlst.append(v)\npos = e\n"
        elif op == OP_LIST_LD:
            item = _seq_len(off) + _ld_value(kind, sub) + "lst.append(v)\npos = e\n"
        elif op == OP_LIST_VARINT:
            item = (
                f"v = buf[pos + {off}]\nif v < 128:\n    pos += {off + 1}\nelse:\n"
                f"    v, pos = vr(buf, pos + {off + 1}, v)\n"
            )
            item += "v = v != 0\n" if kind == K_BOOL else f"if v >= 0x80000000:\n    v = fix(v, {kind})\n"
            item += "lst.append(v)\n"
        else:  # OP_LIST_FIXED
            item = (
                f'p = pos + {off}\nif p + 8 > end:\n    raise PE("truncated")\nlst.append(fixed(buf, p))\npos = p + 8\n'
            )
    return head + "while True:\n" + _indent(item + _END + f"if not ({again}):\n    break\n", 1)


def _compile_decoder(plan: _Plan, i: int) -> Callable:
    fname = f"_d{i}"
    pname = _const(plan)
    ents = sorted(plan.dec.items(), key=lambda kv: kv[0])
    lines = [f"def {fname}(buf, pos, end, out):", _indent(_END, 1).rstrip("\n")]
    # 1. The fields in wire order, each expected tag tested once where it would be
    # (the tag's bytes compared in place). The caller's ``out`` holds none of them
    # yet, so each first occurrence starts a fresh value.
    for tag, ent in ents:
        if ent[0] == OP_PACKED:
            continue  # upstream writes lists unpacked: packed input goes to the loop below
        tb = _wire.uvarint(tag)
        cond = " and ".join(f"buf[pos + {j}] == {b}" if j else f"buf[pos] == {b}" for j, b in enumerate(tb))
        lines.append(f"    if {cond}:")
        lines.append(_indent(_seq_handler(tb, ent), 2).rstrip("\n"))
    # 2. Whatever is left, in any order (values merge into what is there, as the reference).
    lines.append(
        _indent("tag = buf[pos]\npos += 1\nif tag >= 128:\n    tag, pos = vr(buf, pos, tag)\n", 1).rstrip("\n")
    )
    lines.append("    while True:")
    kw = "if"
    for tag, ent in ents:
        lines.append(f"        {kw} tag == {tag}:")
        lines.append(_indent(_handler(tag, ent, plan.struct.name, False), 3).rstrip("\n"))
        kw = "elif"
    if ents:
        lines.append(f"        else:\n            pos = skip(buf, pos, end, tag, {pname})")
    else:
        lines.append(f"        pos = skip(buf, pos, end, tag, {pname})")
    lines.append(_indent(_NEXT, 2).rstrip("\n"))
    f = _exec("\n".join(lines) + "\n", fname)
    _DECODERS[id(plan)] = f
    return f


# --- encoders ---------------------------------------------------------------------------------


def _len_prefix(var: str) -> str:
    """Appends the varint length of ``var`` (bytes) and ``var`` itself."""
    return f"n = len({var})\nap(SM[n] if n < 128 else uv(n))\nap({var})\n"


def _compile_encoder(plan: _Plan, i: int) -> Callable:
    fname = f"_e{i}"
    lines = [f"def {fname}(obj):", "    parts = []", "    ap = parts.append", "    g = obj.get"]
    for name, mode, kind, sub, tag, absent in plan.enc:
        t = _const(tag)
        nm = repr(name)
        if mode == M_INLINE:
            lines.append(_indent(f"b = _e{_index(sub)}(obj)\nap({t})\n" + _len_prefix("b"), 1))
            continue
        src = f"v = g({nm})\nif v is None:\n"
        if absent is None:
            src += "    pass\n"
        elif absent is True:
            empty = _wire._empty_bytes(sub)
            src += f"    ap({_const(tag + _wire.uvarint(len(empty)) + empty)})\n"
        else:
            src += f"    ap({_const(absent)})\n"
        src += "else:\n"
        if mode == M_ONE:
            if kind == K_STR:
                body = f"if type(v) is not str:\n    raise Reject\nb = v.encode()\nap({t})\n" + _len_prefix("b")
            elif kind == K_STRUCT:
                body = f"if type(v) is not dict:\n    raise Reject\nb = _e{_index(sub)}(v)\nap({t})\n" + _len_prefix(
                    "b"
                )
            elif kind == K_BOOL:
                yes, no = _const(tag + b"\x01"), _const(tag + b"\x00")
                body = f"if v is True:\n    ap({yes})\nelif v is False:\n    ap({no})\nelse:\n    raise Reject\n"
            elif kind in (K_I32, K_I64):
                body = (
                    f"ap({t})\nif type(v) is int and 0 <= v < 128:\n    ap(SM[v])\nelse:\n"
                    f"    ap(payload({kind}, None, v))\n"
                )
            elif kind == K_NUM:
                body = f"ap({t})\nap(payload({kind}, None, v))\n"
            else:
                body = f"b = payload({kind}, {_const(sub)}, v)\nap({t})\n" + _len_prefix("b")
        elif mode == M_LIST:
            if kind == K_STR:
                item = f"if type(x) is not str:\n    raise Reject\nb = x.encode()\nap({t})\n" + _len_prefix("b")
            elif kind == K_STRUCT:
                item = f"if type(x) is not dict:\n    raise Reject\nb = _e{_index(sub)}(x)\nap({t})\n" + _len_prefix(
                    "b"
                )
            elif kind in (K_I32, K_I64, K_BOOL, K_NUM):
                item = f"if x is None:\n    raise Reject\nap({t})\nap(payload({kind}, None, x))\n"
            else:
                item = (
                    f"if x is None:\n    raise Reject\nb = payload({kind}, {_const(sub)}, x)\nap({t})\n"
                    + _len_prefix("b")
                )
            body = "if type(v) is not list:\n    raise Reject\nfor x in v:\n" + _indent(item, 1)
        else:  # M_MAP
            wt = _wire._wire_type(kind)
            vtag = _wire._SMALL[(2 << 3) | wt]
            if kind == K_STR:
                val = (
                    "if type(x) is not str:\n    raise Reject\nb = x.encode()\nm = len(b)\n"
                    "eb = b''.join((b'\\x0a', SM[kl] if kl < 128 else uv(kl), kb, b'\\x12', "
                    "SM[m] if m < 128 else uv(m), b))\n"
                )
            else:
                parts = f"b'\\x0a', SM[kl] if kl < 128 else uv(kl), kb, {_const(vtag)}, "
                parts += "uv(len(b)), b" if wt == 2 else "b"
                val = f"b = payload({kind}, {_const(sub)}, x)\neb = b''.join(({parts}))\n"
            item = (
                "x = v[k]\nkb = k.encode()\nkl = len(kb)\nif x is None:\n"
                "    eb = b''.join((b'\\x0a', SM[kl] if kl < 128 else uv(kl), kb))\nelse:\n"
                + _indent(val, 1)
                + f"ap({t})\n"
                + _len_prefix("eb")
            )
            body = "if type(v) is not dict:\n    raise Reject\nfor k in sorted(v):\n" + _indent(item, 1)
        lines.append(_indent(src + _indent(body, 1), 1))
    lines.append("    return b''.join(parts)")
    f = _exec("\n".join(line.rstrip("\n") for line in lines) + "\n", fname)
    _ENCODERS[id(plan)] = f
    return f
