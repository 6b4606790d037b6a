"""Content negotiation: which representation a client gets, and Table rendering.

The Accept header is read in order (q=0 entries skipped); the first media type
the server can produce wins. Protobuf is produced under either spelling
(``application/vnd.orch.protobuf``, and upstream's, which kubectl sends) and
the reply names the spelling asked for; a protobuf Table does not exist
(upstream has none), so such an entry is skipped and, with nothing after it,
answered 406. Tables are served for ``as=Table`` with group
``meta.orch.io`` and, because kubectl hard-codes it, ``meta.k8s.io``; the reply
names the group that was asked for, as kubectl only prints a Table whose
``apiVersion`` it recognises.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable

from ..api import codec, names, protobuf
from ..api import status as st
from ..api.kinds import KindInfo

TABLE_GROUPS = (names.META_GROUP, names.UPSTREAM_META_GROUP)
TABLE_VERSIONS = ("v1", "v1beta1")


PROTOBUF_MEDIA = (names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM)


@dataclasses.dataclass(frozen=True)
class Target:
    form: str  # json | yaml | table | protobuf
    group: str = ""
    version: str = ""
    media: str = ""  # protobuf: the spelling the client asked for

    @property
    def content_type(self) -> str:
        if self.form == "protobuf":
            return self.media or names.MEDIA_PROTOBUF
        return names.MEDIA_YAML if self.form == "yaml" else names.MEDIA_JSON


JSON = Target("json")
YAML = Target("yaml")
PROTOBUF = Target("protobuf", media=names.MEDIA_PROTOBUF)
PROTOBUF_UPSTREAM = Target("protobuf", media=names.MEDIA_PROTOBUF_UPSTREAM)


def parse_accept(header: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for part in header.split(","):
        part = part.strip()
        if not part:
            continue
        pieces = [p.strip() for p in part.split(";")]
        mtype = pieces[0].lower()
        params: dict[str, str] = {}
        for p in pieces[1:]:
            k, _, v = p.partition("=")
            params[k.strip().lower()] = v.strip().strip('"')
        if params.get("q") in ("0", "0.0", "0.00", "0.000"):
            continue
        out.append((mtype, params))
    return out


def negotiate(header: str | None, *, table_ok: bool = True, yaml_ok: bool = True, protobuf_ok: bool = True) -> Target:
    """The representation to answer in. ``protobuf_ok`` is False where the reply
    has no protobuf encoding (a kind without a declared schema)."""
    if not header:
        return JSON
    return _negotiate(header, table_ok, yaml_ok, protobuf_ok)


@functools.lru_cache(maxsize=256)  # clients send the same few Accept headers over and over
def _negotiate(header: str, table_ok: bool, yaml_ok: bool, protobuf_ok: bool = True) -> Target:
    if not header.strip():
        return JSON
    entries = parse_accept(header)
    if not entries:
        return JSON
    for mtype, params in entries:
        as_ = params.get("as")
        if mtype in ("application/json", "*/*", "application/*", "application/json;stream=watch"):
            if as_ is None:
                return JSON
            if as_ == "Table" and table_ok:
                g, v = params.get("g", ""), params.get("v", "")
                if g in TABLE_GROUPS and v in TABLE_VERSIONS:
                    return Target("table", g, v)
            continue
        if mtype in (names.MEDIA_YAML, "application/x-yaml", "text/yaml") and yaml_ok and as_ is None:
            return YAML
        if mtype in PROTOBUF_MEDIA and protobuf_ok and as_ is None:
            return PROTOBUF if mtype == names.MEDIA_PROTOBUF else PROTOBUF_UPSTREAM
    accepted = ["application/json", "application/yaml"] if yaml_ok else ["application/json"]
    if protobuf_ok:
        accepted.append(names.MEDIA_PROTOBUF)
    if table_ok:
        accepted.append(f"application/json;as=Table;v=v1;g={names.META_GROUP}")
    raise st.not_acceptable(f"only the following media types are accepted: {', '.join(accepted)}")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return value


def table_rows(kind: KindInfo, objs: Iterable[dict], include: str, target: Target, wide: bool = True) -> list[dict]:
    cols = kind.table_columns()
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": [_cell(_safe(c.cell, obj)) for c in cols]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"{target.group}/{target.version}",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return rows


def _safe(fn, obj: dict) -> Any:
    try:
        return fn(obj)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return "<unknown>"


def table(
    kind: KindInfo,
    objs: list[dict],
    target: Target,
    include: str,
    *,
    resource_version: str = "",
    continue_token: str = "",
    remaining: int | None = None,
    with_columns: bool = True,
) -> dict:
    md: dict[str, Any] = {}
    if resource_version:
        md["resourceVersion"] = resource_version
    if continue_token:
        md["continue"] = continue_token
    if remaining is not None:
        md["remainingItemCount"] = remaining
    return {
        "kind": "Table",
        "apiVersion": f"{target.group}/{target.version}",
        "metadata": md,
        "columnDefinitions": [c.definition() for c in kind.table_columns()] if with_columns else [],
        "rows": table_rows(kind, objs, include, target),
    }


def validate_include_object(value: str | None) -> str:
    if value in (None, ""):
        return "Metadata"
    if value not in ("None", "Metadata", "Object"):
        raise st.bad_request(f"invalid includeObject {value!r}: must be None, Metadata or Object")
    return value


def protobuf_body(obj: Any) -> bytes | None:
    """``obj`` in enveloped protobuf, or None when it has no protobuf encoding
    (no schema is declared for its kind): the caller answers in JSON instead,
    which every client reads."""

    if not isinstance(obj, dict):
        return None
    av, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(av, str) or not isinstance(kind, str):
        return None
    schema = protobuf.schema_of(av, kind)
    if schema is None:
        return None
    return protobuf.encode(obj, schema)


def error_body(accept: str | None, status: dict) -> tuple[bytes, str]:
    """An error Status in the representation the request asked for: protobuf
    when negotiated, else JSON (also when the Accept header itself is what
    failed)."""

    try:
        target = negotiate(accept, table_ok=False, yaml_ok=False)
    except st.ApiError:
        target = JSON
    if target.form == "protobuf":
        body = protobuf_body(status)
        if body is not None:
            return body, target.content_type
    return codec.dumps(status), names.MEDIA_JSON
