"""Shorthands shared by the per-group declarations.

``F`` declares a plain field, ``req`` a required one (upstream's OpenAPI
``required``), ``ptr`` one whose Go field is a pointer (emitted on the wire
only when set), ``inline`` an embedded struct (one message on the wire, its
fields flattened into the parent in JSON). ``struct(pkg)`` returns a
constructor that prefixes upstream's proto package to message names.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ..schema import (
    Boolean,
    Bytes,
    Duration,
    Field,
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
)

STR = String()
BOOL = Boolean()
I32 = Integer(32)
I64 = Integer(64)
NUM = Number()
BYTES = Bytes()
TIME = Time()
MICROTIME = MicroTime()
DURATION = Duration()
QTY = Quantity()
IOS = IntOrString()
OPAQUE = Opaque()
STR_LIST = List(STR)
STR_SET = List(STR, "set")
STR_ATOMIC = List(STR, "atomic")
STR_MAP = Map(STR)
STR_MAP_ATOMIC = Map(STR, "atomic")
RESOURCE_LIST = Map(QTY)


def enum(*values: str) -> String:
    return String(enum=values)


def F(json_name: str, type_, number: int, **kw: Any) -> Field:
    return Field(json_name, type_, number, **kw)


def req(json_name: str, type_, number: int, **kw: Any) -> Field:
    return Field(json_name, type_, number, required=True, **kw)


def ptr(json_name: str, type_, number: int, **kw: Any) -> Field:
    return Field(json_name, type_, number, pointer=True, **kw)


def inline(type_: Struct, number: int) -> Field:
    return Field("", type_, number, inline=True)


def struct(package: str) -> Callable[..., Struct]:
    """``S = struct("k8s.io.api.core.v1")``; ``S("PodSpec", [...], atomic=False)``."""

    def make(name: str, fields: Iterable[Field], atomic: bool = False) -> Struct:
        return Struct(f"{package}.{name}", fields, "atomic" if atomic else "granular")

    return make


def merge_list(item, key: str, *, list_type: str | None = None, keys: tuple[str, ...] = ()) -> List:
    """A list strategic merge patch merges by ``key`` (``+patchStrategy=merge``,
    ``+patchMergeKey=key``); ``list_type``/``keys`` when upstream also marks it."""
    return List(item, list_type, keys, patch_strategy="merge", patch_merge_key=key)


def map_list(item, *keys: str) -> List:
    """``+listType=map`` with ``+listMapKey`` keys, no patch markers."""
    return List(item, "map", keys)


__all__ = [name for name in dir() if not name.startswith("_")]
