"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

Both act on plain decoded JSON; errors raise :class:`PatchError` with a message
naming the operation and path that failed, which the handler turns into a 422
(for a patch that cannot apply) or 400 (for a malformed patch document).
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch document is malformed (400)."""


class PatchApplyError(ValueError):
    """The patch is well-formed but cannot be applied to this object (422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(path: Any, op_index: int) -> list[str]:
    if not isinstance(path, str):
        raise PatchError(f"json patch operation {op_index}: 'path' must be a string")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"json patch operation {op_index}: path {path!r} must start with '/'")
    return [_unescape(t) for t in path[1:].split("/")]


def _index(container: list, token: str, path: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchApplyError(f"invalid array index {token!r} in path {path!r}")
    i = int(token)
    limit = len(container) + (1 if allow_end else 0)
    if i >= limit:
        raise PatchApplyError(f"array index {i} out of bounds in path {path!r}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchApplyError(f"path {path!r} does not exist (missing {t!r})")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, path, False)]
        else:
            raise PatchApplyError(f"path {path!r} does not exist (cannot descend into a scalar)")
    return cur


def _get(doc: Any, tokens: list[str], path: str) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchApplyError(f"path {path!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, False)]
    raise PatchApplyError(f"path {path!r} does not exist")


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, True), value)
    else:
        raise PatchApplyError(f"cannot add at {path!r}: parent is not an object or array")
    return doc


def _remove(doc: Any, tokens: list[str], path: str) -> tuple[Any, Any]:
    if not tokens:
        raise PatchApplyError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchApplyError(f"cannot remove {path!r}: it does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, False))
    raise PatchApplyError(f"cannot remove {path!r}: parent is not an object or array")


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values (RFC 6902 4.6): unlike Python's ==, true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a json patch must be a JSON array of operations")
    doc = copy.deepcopy(doc)
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"json patch operation {i} is not an object")
        kind = op.get("op")
        path = op.get("path")
        tokens = _split(path, i)  # a string path, or a PatchError
        assert isinstance(path, str)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"json patch operation {i} ({kind}) has no 'value'")
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]), path)
        elif kind == "remove":
            doc, _ = _remove(doc, tokens, path)
        elif kind == "replace":
            _get(doc, tokens, path)  # must exist
            if not tokens:
                doc = copy.deepcopy(op["value"])
            else:
                doc, _ = _remove(doc, tokens, path)
                doc = _add(doc, tokens, copy.deepcopy(op["value"]), path)
        elif kind in ("move", "copy"):
            src = op.get("from")
            if not isinstance(src, str):
                raise PatchError(f"json patch operation {i} ({kind}) has no 'from'")
            src_tokens = _split(src, i)
            if kind == "move" and src_tokens == tokens[: len(src_tokens)] and len(tokens) > len(src_tokens):
                raise PatchApplyError(f"cannot move {src!r} into its own child {path!r}")
            if kind == "move":
                doc, value = _remove(doc, src_tokens, src)
            else:
                value = copy.deepcopy(_get(doc, src_tokens, src))
            doc = _add(doc, tokens, value, path)
        elif kind == "test":
            if not _json_equal(_get(doc, tokens, path), op["value"]):
                raise PatchApplyError(f"test operation at {path!r} failed: value differs")
        else:
            raise PatchError(f"json patch operation {i}: unknown op {kind!r}")
    return doc
