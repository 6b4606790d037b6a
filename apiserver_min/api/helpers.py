"""Small accessors of core objects that the scheduler, the controllers and the registry share."""

from __future__ import annotations

import copy
import datetime as _dt
import os
import time
from typing import Any, Mapping

import orjson

from . import names
from .timeutil import format_rfc3339

_STAMP: list = [0, ""]  # (whole second, its RFC 3339 text): one format per second, not per write


def timestamp() -> str:
    """Now as an RFC 3339 timestamp, formatted once per second."""
    second = int(time.time())
    if second != _STAMP[0]:
        _STAMP[1] = format_rfc3339(_dt.datetime.fromtimestamp(second, _dt.timezone.utc))
        _STAMP[0] = second
    return _STAMP[1]


def new_uid() -> str:
    """A random (version 4) UUID as text, formatted without building a ``uuid.UUID``
    (a third of the cost on the create path)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-shaped value (an object as decoded), through orjson: several
    times faster than ``copy.deepcopy``. What orjson cannot encode (an integer beyond
    64 bits, a key that is not a string) is copied with ``copy.deepcopy``."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:
        return copy.deepcopy(value)


def _dig(obj: Any, *path: str, default: Any = None) -> Any:
    for p in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(p)
        if obj is None:
            return default
    return obj


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def dict_at(obj: Mapping, key: str) -> dict:
    """obj[key] when it is an object, else a new empty dict: a missing or malformed field reads as empty."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_at(obj: Mapping, key: str) -> list:
    """obj[key] when it is a list, else a new empty list: a missing or malformed field reads as empty."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def get_condition(obj: Mapping, ctype: str) -> dict | None:
    for c in _list(_dig(obj, "status", "conditions")):
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def is_mirror_pod(pod: Mapping) -> bool:
    return names.ANNOTATION_CONFIG_MIRROR in (_dig(pod, "metadata", "annotations") or {})


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """Upstream's ToleratesTaint: effect and key must match when set; Exists matches
    any value, Equal (or no operator) the same value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerations_of(pod: Mapping) -> list[dict]:
    return [t for t in _list(_dig(pod, "spec", "tolerations")) if isinstance(t, dict)]


def taints_of(node: Mapping) -> list[dict]:
    return [t for t in _list(_dig(node, "spec", "taints")) if isinstance(t, dict)]


def object_reference(obj: Mapping, kind: str, api_version: str = "v1") -> dict:
    md = obj.get("metadata") or {}
    ref = {"kind": kind, "apiVersion": api_version, "name": md.get("name", "")}
    if md.get("namespace"):
        ref["namespace"] = md["namespace"]
    if kind == "Node":
        ref["uid"] = md.get("name", "")  # upstream refers to nodes by name as uid
    elif md.get("uid"):
        ref["uid"] = md["uid"]
    if md.get("resourceVersion") and kind != "Node":
        ref["resourceVersion"] = str(md["resourceVersion"])
    return ref


def set_pod_condition(pod: dict, condition: Mapping, now: str | None = None) -> bool:
    """Upstream's UpdatePodCondition: the condition of that type is replaced, its
    lastTransitionTime is ``now`` (default: the current time) unless the status stays
    the same; False when nothing changed."""
    conds = pod.setdefault("status", {}).setdefault("conditions", [])
    new = dict(condition)
    new["lastTransitionTime"] = now or timestamp()
    for i, c in enumerate(conds):
        if isinstance(c, dict) and c.get("type") == new.get("type"):
            if c.get("status") == new.get("status") and c.get("lastTransitionTime"):
                new["lastTransitionTime"] = c["lastTransitionTime"]
            equal = all(
                c.get(k) == new.get(k) for k in ("status", "reason", "message", "lastProbeTime", "lastTransitionTime")
            )
            conds[i] = new
            return not equal
    conds.append(new)
    return True
