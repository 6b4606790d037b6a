"""Content negotiation: which representation a client gets, and Table rendering.

The Accept header is read in order (q=0 entries skipped); the first media type
the server can produce wins. Tables are served for ``as=Table`` with group
``meta.orch.io`` and, because kubectl hard-codes it, ``meta.k8s.io``; the reply
names the group that was asked for, as kubectl only prints a Table whose
``apiVersion`` it recognises.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo

TABLE_GROUPS = (names.META_GROUP, names.UPSTREAM_META_GROUP)
TABLE_VERSIONS = ("v1", "v1beta1")


@dataclasses.dataclass(frozen=True)
class Target:
    form: str  # json | yaml | table
    group: str = ""
    version: str = ""

    @property
    def content_type(self) -> str:
        return names.MEDIA_YAML if self.form == "yaml" else names.MEDIA_JSON


JSON = Target("json")
YAML = Target("yaml")


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


def negotiate(header: str | None, *, table_ok: bool = True, yaml_ok: bool = True) -> Target:
    if not header:
        return JSON
    return _negotiate(header, table_ok, yaml_ok)


@functools.lru_cache(maxsize=256)  # clients send the same few Accept headers over and over
def _negotiate(header: str, table_ok: bool, yaml_ok: bool) -> Target:
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
    accepted = ["application/json", "application/yaml"] if yaml_ok else ["application/json"]
    if table_ok:
        accepted.append(f"application/json;as=Table;v=v1;g={names.META_GROUP}")
    raise st.not_acceptable(f"only the following media types are accepted: {', '.join(accepted)}")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return value


def table_rows(kind: KindInfo, objs: Iterable[dict], include: str, target: Target,
               wide: bool = True) -> list[dict]:
    cols = kind.table_columns()
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": [_cell(_safe(c.cell, obj)) for c in cols]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": f"{target.group}/{target.version}",
                             "metadata": obj.get("metadata") or {}}
        rows.append(row)
    return rows


def _safe(fn, obj: dict) -> Any:
    try:
        return fn(obj)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return "<unknown>"


def table(kind: KindInfo, objs: list[dict], target: Target, include: str, *,
          resource_version: str = "", continue_token: str = "", remaining: int | None = None,
          with_columns: bool = True) -> dict:
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
