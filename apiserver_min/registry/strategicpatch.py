"""Strategic merge patch (``application/strategic-merge-patch+json``) for built-in kinds.

A strategic merge patch is a JSON merge patch (RFC 7386) that knows, from the
kind's schema, which lists are merged by key instead of replaced. The merge
keys and strategies come only from the schema declarations
(:mod:`apiserver_min.api.schemas`): ``List.patch_strategy`` /
``List.patch_merge_key`` on list fields and ``Field.patch_strategy`` on struct
and map fields (``retainKeys`` on a deployment's strategy, ``replace`` on a
disruption budget's selector).

The semantics are upstream's server-side ones (v1.27 ``StrategicMergeMapPatch``):

* maps merge key by key; ``null`` deletes a key;
* lists whose strategy includes ``merge`` merge items by their merge key (lists
  of scalars merge as sets); every other list is replaced whole;
* ``$patch: replace`` in a map replaces the map; ``$patch: delete`` deletes it;
  in a merged list ``{"$patch": "replace"}`` replaces the list with the other
  items and ``{"$patch": "delete", <key>: v}`` deletes the item with that key;
* ``$setElementOrder/<list>`` gives the order of a merged list's items;
* ``$retainKeys`` clears every key of the map not listed;
* ``$deleteFromPrimitiveList/<list>`` removes values from a merged scalar list.

Two deliberate differences from upstream: ``$patch: merge`` (the default,
spelled out) is accepted where upstream answers an error, and values new to the
object are stored without ``null`` members or leftover directives (upstream
drops those when it decodes the result into its typed structs; we store JSON,
so they are removed here). Values the schema leaves opaque, and fields it does
not declare, are patched with plain JSON merge semantics, the way upstream
patches unstructured data.

Errors: :class:`PatchError` (400) for a malformed patch, :class:`PatchApplyError`
(422) for a patch that cannot apply to this object; both name the field path.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api.schema import List, Map, Opaque, Struct, Type
from .patch import PatchApplyError, PatchError, merge_patch

__all__ = ["strategic_merge_patch", "PatchError", "PatchApplyError"]

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ELEMENT_ORDER = "$setElementOrder/"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"
_DIRECTIVE_VALUES = ("replace", "delete", "merge")


def strategic_merge_patch(original: dict, patch: dict, schema: Struct | None) -> dict:
    """``patch`` applied to ``original`` under the kind's top-level ``schema``.

    Neither argument is modified; the result shares nothing with them.
    ``schema`` None patches the whole object with JSON merge semantics.
    """
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    if not isinstance(original, dict):
        raise PatchApplyError("the object to patch is not a JSON object")
    try:
        return _merge_map(copy.deepcopy(original), copy.deepcopy(patch), schema, "")
    except RecursionError:
        raise PatchError("the strategic merge patch is nested too deeply") from None


# --- schema look-ups -------------------------------------------------------------------------


class _Meta:
    """What the schema says about one key of a map being patched."""

    __slots__ = ("type", "strategy", "merge_key")

    def __init__(self, type_: Type | None, strategies: str | None = None, merge_key: str | None = None):
        self.type = type_
        # retainKeys only says the client sends $retainKeys (which acts wherever it is
        # found); upstream allows at most one other strategy beside it.
        rest = [p for p in (strategies or "").split(",") if p and p != "retainKeys"]
        self.strategy = rest[0] if rest else ""
        self.merge_key = merge_key or ""

    @property
    def opaque(self) -> bool:
        """No schema below this point: JSON merge semantics apply."""
        return self.type is None or isinstance(self.type, Opaque)


def _lookup(container: Type | None, key: str) -> _Meta:
    """The patch metadata of ``key`` inside a value of type ``container``."""
    if isinstance(container, Struct):
        f = container.field(key)
        if f is None:
            return _Meta(None)
        t = f.type
        if isinstance(t, List):
            return _Meta(t, t.patch_strategy or f.patch_strategy, t.patch_merge_key)
        return _Meta(t, f.patch_strategy)
    if isinstance(container, Map):
        return _Meta(container.value_type)
    return _Meta(None)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _item_path(path: str, merge_key: str, item: Any) -> str:
    if merge_key and isinstance(item, dict) and merge_key in item:
        return f"{path}[{merge_key}={item[merge_key]!r}]"
    return f"{path}[]"


def _kind(v: Any) -> str:
    if isinstance(v, dict):
        return "map"
    if isinstance(v, list):
        return "list"
    return "scalar"


def _same_scalar(a: Any, b: Any) -> bool:
    """Go's interface equality on decoded JSON: equal values of the same type
    (``1`` and ``1.0``, ``true`` and ``1`` differ)."""
    return type(a) is type(b) and a == b


def _scalar_key(v: Any) -> tuple:
    if isinstance(v, (dict, list)):
        raise PatchError("lists of lists or of mixed values cannot be merged")
    return (type(v).__name__, v)


# --- maps ------------------------------------------------------------------------------------


def _merge_map(original: dict, patch: dict, schema: Type | None, path: str) -> dict:
    """Upstream ``mergeMap``: ``patch`` merged into ``original`` (both owned here)."""
    if DIRECTIVE in patch:
        directive = patch[DIRECTIVE]
        if directive == "replace":
            del patch[DIRECTIVE]
            return _fresh_map(patch, schema, path)
        if directive == "delete":
            return {}
        if directive == "merge":
            del patch[DIRECTIVE]
        else:
            raise PatchError(
                f"{path or 'the patch'}: unknown $patch directive {directive!r} "
                f"(expected one of {', '.join(_DIRECTIVE_VALUES)})"
            )

    _apply_retain_keys(original, patch, path)
    _apply_set_element_order(original, patch, schema, path)

    deletions: list[tuple[str, Any]] = []
    for key, value in patch.items():
        if key.startswith(DELETE_FROM_PRIMITIVE_LIST):
            deletions.append((key, value))
            continue
        if key.startswith("$"):
            raise PatchError(f"{_child(path, key)}: unknown strategic merge patch directive {key!r}")
        _merge_key(original, key, value, schema, path)
    for key, value in deletions:
        _delete_from_primitive_list(original, key, value, schema, path)
    return original


def _merge_key(original: dict, key: str, value: Any, schema: Type | None, path: str) -> None:
    """One key of the patch merged into ``original``."""
    p = _child(path, key)
    if value is None:
        original.pop(key, None)
        return
    meta = _lookup(schema, key)
    if key not in original or _kind(original[key]) != _kind(value):
        original[key] = _fresh(value, meta, p)
        return
    current = original[key]
    if isinstance(value, dict):
        if meta.strategy == "replace":
            original[key] = _fresh(value, meta, p)
        elif meta.opaque or not isinstance(meta.type, (Struct, Map)):
            original[key] = merge_patch(current, value)
        else:
            original[key] = _merge_map(current, value, meta.type, p)
    elif isinstance(value, list):
        if isinstance(meta.type, List) and meta.strategy == "merge":
            original[key] = _merge_list(current, value, meta, p)
        else:
            original[key] = _fresh(value, meta, p)
    else:
        original[key] = value


# --- values new to the object ----------------------------------------------------------------


def _fresh(value: Any, meta: _Meta, path: str) -> Any:
    """A patch value stored where the object has nothing (or something of
    another shape): nulls dropped and directives applied, as if merged into
    an empty value."""
    if isinstance(value, dict):
        if meta.opaque or not isinstance(meta.type, (Struct, Map)):
            return merge_patch(None, value)
        return _fresh_map(value, meta.type, path)
    if isinstance(value, list):
        if not isinstance(meta.type, List):
            return copy.deepcopy(value)
        merges = meta.strategy == "merge"
        item_meta = _Meta(meta.type.item_type)
        out = []
        for item in value:
            if isinstance(item, dict) and DIRECTIVE in item:
                d = item[DIRECTIVE]
                if d in ("replace", "merge") or (d == "delete" and merges):
                    continue  # nothing here to replace, merge with or delete
                if d == "delete":
                    raise PatchError(
                        f"{path}: $patch: delete in a list that is not merged by key "
                        "(only merged lists take item deletions)"
                    )
                raise PatchError(
                    f"{path}: unknown $patch directive {d!r} in a list item "
                    f"(expected one of {', '.join(_DIRECTIVE_VALUES)})"
                )
            out.append(_fresh(item, item_meta, _item_path(path, meta.merge_key, item)))
        return out
    return value


def _fresh_map(value: dict, schema: Type | None, path: str) -> dict:
    return _merge_map({}, value, schema, path)


# --- $retainKeys -----------------------------------------------------------------------------


def _apply_retain_keys(original: dict, patch: dict, path: str) -> None:
    """Upstream ``applyRetainKeysDirective``: clear keys of ``original`` not
    listed; every key the patch sets must be listed."""
    if RETAIN_KEYS not in patch:
        return
    keep = patch.pop(RETAIN_KEYS)
    where = _child(path, RETAIN_KEYS)
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise PatchError(f"{where}: must be a list of field names")
    wanted = set(keep)
    for k, v in patch.items():
        if v is None or k.startswith(DELETE_FROM_PRIMITIVE_LIST) or k.startswith(SET_ELEMENT_ORDER):
            continue
        if k not in wanted:
            raise PatchError(f"{where}: the patch sets {k!r}, which $retainKeys does not list")
    for k in list(original):
        if k not in wanted:
            del original[k]


# --- $deleteFromPrimitiveList ----------------------------------------------------------------


def _delete_from_primitive_list(original: dict, key: str, values: Any, schema: Type | None, path: str) -> None:
    name = key[len(DELETE_FROM_PRIMITIVE_LIST) :]
    where = _child(path, key)
    if not name:
        raise PatchError(f"{where}: names no list")
    if not isinstance(values, list):
        raise PatchError(f"{where}: must be a list of the values to delete")
    for v in values:
        _scalar_key(v)  # scalars only
    if name not in original or original[name] is None:
        return  # nothing to delete from
    current = original[name]
    if not isinstance(current, list):
        raise PatchApplyError(f"{_child(path, name)}: is not a list; $deleteFromPrimitiveList needs one")
    meta = _lookup(schema, name)
    if not (isinstance(meta.type, List) and meta.strategy == "merge"):
        raise PatchError(f"{where}: {_child(path, name)} is not a merged list of scalars")
    drop = {_scalar_key(v) for v in values}
    kept = []
    for item in current:
        if isinstance(item, (dict, list)):
            raise PatchApplyError(
                f"{_child(path, name)}: holds objects, not scalars; "
                "$deleteFromPrimitiveList applies to lists of scalars"
            )
        if _scalar_key(item) not in drop:
            kept.append(item)
    original[name] = kept


# --- merged lists ----------------------------------------------------------------------------


def _element_kind(original: list, patch: list, path: str) -> str:
    """``map`` or ``scalar``: all items of both lists must be one or the other."""
    kinds_patch = {_kind(v) for v in patch}
    kinds_orig = {_kind(v) for v in original}
    if "list" in kinds_patch:
        raise PatchError(f"{path}: lists of lists cannot be merged")
    if len(kinds_patch) > 1:
        raise PatchError(f"{path}: the patch list mixes objects and scalars")
    if "list" in kinds_orig or len(kinds_orig) > 1 or (kinds_orig and kinds_patch and kinds_orig != kinds_patch):
        raise PatchApplyError(f"{path}: the patch list's items and the object's items are not of one type")
    return (kinds_patch or kinds_orig).pop()


def _merge_list(original: list, patch: list, meta: _Meta, path: str) -> list:
    """Upstream ``mergeSlice`` for a list with the merge strategy."""
    if not original and not patch:
        return original
    kind = _element_kind(original, patch, path)
    key = meta.merge_key
    if kind == "scalar":
        merged = _dedupe(original + patch)
        order_by = patch
    else:
        if not key:
            raise PatchApplyError(f"{path}: cannot merge a list of objects without a merge key")
        assert isinstance(meta.type, List)
        original, patch = _special_items(original, patch, key, path)
        merged = _merge_items(original, patch, meta.type.item_type, key, path)
        order_by = patch
    patch_items, server_only = _partition(merged, order_by, key)
    return _normalize_order(patch_items, server_only, order_by, original, key, path)


def _dedupe(values: list) -> list:
    seen: set = set()
    out = []
    for v in values:
        k = _scalar_key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


def _special_items(original: list, patch: list, key: str, path: str) -> tuple[list, list]:
    """Upstream ``mergeSliceWithSpecialElements``: apply ``$patch`` items.

    Returns the (possibly shortened or replaced) original and the patch items
    left to merge."""
    plain = []
    replace = False
    for item in patch:
        if DIRECTIVE not in item:
            plain.append(item)
            continue
        d = item[DIRECTIVE]
        if d == "delete":
            if key not in item:
                raise PatchError(f"{path}: a $patch: delete item must carry the merge key {key!r}")
            original = [o for o in original if not (key in o and _same_scalar(o[key], item[key]))]
        elif d == "replace":
            replace = True
        elif d == "merge":
            pass  # the default for this list, spelled out
        else:
            raise PatchError(
                f"{path}: unknown $patch directive {d!r} in a list item "
                f"(expected one of {', '.join(_DIRECTIVE_VALUES)})"
            )
    if replace:
        return [], plain
    return original, plain


def _merge_items(original: list, patch: list, item_type: Type, key: str, path: str) -> list:
    """Upstream ``mergeSliceWithoutSpecialElements``: items with a known key
    merge into the object's item, others are appended."""
    item_meta = _Meta(item_type)
    original = list(original)  # the caller orders by the list as it was before appends
    for item in patch:
        if key not in item:
            raise PatchError(f"{path}: an item of the patch list lacks the merge key {key!r}: {item!r}")
        ipath = _item_path(path, key, item)
        for i, o in enumerate(original):
            if key in o and _same_scalar(o[key], item[key]):
                original[i] = _merge_map(o, item, item_type if isinstance(item_type, (Struct, Map)) else None, ipath)
                break
        else:
            original.append(_fresh(item, item_meta, ipath))
    return original


def _index(items: list, value: Any, key: str) -> int:
    """Position of ``value`` in ``items`` (by merge key for objects), or -1."""
    if key:
        want = value.get(key) if isinstance(value, dict) else None
        for i, it in enumerate(items):
            if isinstance(it, dict) and key in it and _same_scalar(it[key], want):
                return i
        return -1
    for i, it in enumerate(items):
        if not isinstance(it, (dict, list)) and _same_scalar(it, value):
            return i
    return -1


def _partition(merged: list, by: list, key: str) -> tuple[list, list]:
    """Items of ``merged`` present in ``by`` and the rest (the server-only items)."""
    inside: list = []
    outside: list = []
    for v in merged:
        (inside if _index(by, v, key) >= 0 else outside).append(v)
    return inside, outside


def _sort_by(items: list, order: list, key: str) -> list:
    """``items`` stably sorted by their position in ``order`` (unknown ones last;
    items carrying ``$patch: delete`` stay at the end, as upstream keeps them)."""
    keep = [it for it in items if not (isinstance(it, dict) and it.get(DIRECTIVE) == "delete")]
    dels = [it for it in items if isinstance(it, dict) and it.get(DIRECTIVE) == "delete"]
    n = len(order)

    def pos(it: Any) -> int:
        i = _index(order, it, key)
        return i if i >= 0 else n

    return sorted(keep, key=pos) + dels


def _normalize_order(
    patch_items: list, server_only: list, patch_order: list, server_order: list, key: str, path: str
) -> list:
    """Upstream ``normalizeElementOrder``: patch items in the patch's order,
    server-only items in the object's order, interleaved so that a server-only
    item stays before a patch item it preceded in the object."""
    if key:
        for lst, err in (
            (patch_items, PatchError),
            (patch_order, PatchError),
            (server_only, PatchApplyError),
            (server_order, PatchApplyError),
        ):
            for it in lst:
                if not isinstance(it, dict) or key not in it:
                    raise err(f"{path}: item {it!r} lacks the merge key {key!r}")
    right = _sort_by(patch_items, patch_order, key)
    left = _sort_by(server_only, server_order, key)
    out: list = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = _index(server_order, left[i], key), _index(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


# --- $setElementOrder ------------------------------------------------------------------------


def _apply_set_element_order(original: dict, patch: dict, schema: Type | None, path: str) -> None:
    """Upstream ``mergePatchIntoOriginal``: for every ``$setElementOrder/<list>``,
    merge ``<list>`` now and order the result by the directive (then by the
    patch list, then by the object's list). The list is removed from ``patch``."""
    for directive in [k for k in patch if k.startswith(SET_ELEMENT_ORDER)]:
        order = patch.pop(directive)
        name = directive[len(SET_ELEMENT_ORDER) :]
        where = _child(path, directive)
        if not name:
            raise PatchError(f"{where}: names no list")
        if not isinstance(order, list):
            raise PatchError(f"{where}: must be a list")
        lpath = _child(path, name)
        in_orig = name in original and original[name] is not None
        in_patch = name in patch and patch[name] is not None
        orig_list: Any = original.get(name) if in_orig else []
        patch_list: Any = patch.get(name) if in_patch else []
        if in_orig and not isinstance(orig_list, list):
            raise PatchApplyError(f"{lpath}: is not a list in the object; {directive} needs one")
        if in_patch and not isinstance(patch_list, list):
            raise PatchError(f"{lpath}: must be a list when {directive} is given")
        meta = _lookup(schema, name)
        merges = isinstance(meta.type, List) and meta.strategy == "merge"
        key = meta.merge_key if merges else ""
        _check_order(patch_list, order, key, where)
        if not in_orig and not in_patch:
            continue
        if not merges:
            # Nothing to order by key: the list is replaced (or kept) as upstream does.
            if in_patch:
                original[name] = _fresh(patch_list, meta, lpath)
                del patch[name]
            continue
        if in_patch:
            merged = _merge_list(list(orig_list), patch_list, meta, lpath)
            del patch[name]
        else:
            merged = orig_list
        if not merged:
            original[name] = merged
            continue
        inside, outside = _partition(merged, order, key)
        original[name] = _normalize_order(inside, outside, order, orig_list, key, lpath)


def _check_order(patch_list: list, order: list, key: str, where: str) -> None:
    """Upstream ``validatePatchWithSetOrderList``: the patch list's items (other
    than deletions and directives) appear in the order list, in its order."""
    if not order or not patch_list:
        return
    if key:
        for it in order:
            if not isinstance(it, dict) or key not in it:
                raise PatchError(f"{where}: item {it!r} lacks the merge key {key!r}")
        items = [it for it in patch_list if isinstance(it, dict) and DIRECTIVE not in it]
    else:
        items = [it for it in patch_list if not isinstance(it, dict)]
    i = j = 0
    while i < len(items) and j < len(order):
        a, b = items[i], order[j]
        if key:
            if key not in a:
                raise PatchError(f"{where}: an item of the patch list lacks the merge key {key!r}: {a!r}")
            equal = _same_scalar(a[key], b[key])
        else:
            equal = not isinstance(b, (dict, list)) and _same_scalar(a, b)
        if equal:
            i += 1
        j += 1
    if i < len(items):
        raise PatchError(f"{where}: the order of the patch list does not match the $setElementOrder list")
