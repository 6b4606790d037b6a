"""Field sets and the structured merge of server-side apply, driven by the kind schemas.

A *field set* is kept in the very shape upstream serialises as ``fieldsV1``: a
tree of dicts whose keys are path elements -- ``f:<name>`` (a struct field or map
key), ``k:{"name":"c"}`` (an item of a map-typed list, by its list-map keys),
``v:<json>`` (an item of a set-typed list) -- and whose member nodes are either
leaves (``{}``) or carry a ``"."`` key. Keeping that shape means decoding stored
``managedFields`` and encoding new ones cost nothing; the set operations below
work on it directly and always return normalised trees (no empty non-member
nodes), so two equal sets are equal dicts.

Merge semantics come only from the schema declarations (``api/schema.py``):
atomic values (scalars, atomic lists/maps/structs, opaque JSON) are one leaf;
granular structs and maps are walked by key; ``set`` lists by item value; ``map``
lists by their keys, a missing key field taking its declared default. Fields a
struct does not declare are carried along by the merge but owned by nobody
(field validation reports them). A kind without a schema is unstructured: every
object key is a field and every list atomic.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import orjson

from ..api.schema import List, Map, Struct, Type

__all__ = [
    "FieldPathError",
    "MISSING",
    "union",
    "difference",
    "intersection",
    "is_empty",
    "remove_top",
    "field_set",
    "compare",
    "merge",
    "prune",
    "zero_object",
    "iter_paths",
    "format_path",
    "validate_tree",
]


class FieldPathError(ValueError):
    """A value that cannot be placed in a field set (a list-map item without its key,
    duplicate items in a list applied as a map or set); ``path`` names where."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '.'}: {message}")
        self.path = path
        self.message = message


MISSING: Any = object()
DOT = "."

# Walk modes of one value under its schema type.
LEAF, STRUCT, USTRUCT, MAP, LISTMAP, LISTSET = range(6)


# --- set algebra on fieldsV1 trees --------------------------------------------------------


def _member(node: dict) -> bool:
    return not node or DOT in node


def _make(member: bool, children: dict) -> dict | None:
    """A normalised node: None when it holds nothing."""
    if children:
        # Copy: ``children`` may be (part of) an input tree, which must not change.
        return {DOT: {}, **children} if member else children
    return {} if member else None


def union(a: dict, b: dict) -> dict:
    """The union of two children trees (either may be empty)."""
    if not a:
        return b
    if not b:
        return a
    out: dict = {}
    for k, av in a.items():
        if k == DOT:
            continue
        bv = b.get(k)
        if bv is None:
            out[k] = av
        else:
            node = _make(_member(av) or _member(bv), union(_kids(av), _kids(bv)))
            out[k] = node if node is not None else {}
    for k, bv in b.items():
        if k != DOT and k not in a:
            out[k] = bv
    return out


def _kids(node: dict) -> dict:
    if DOT in node:
        return {k: v for k, v in node.items() if k != DOT}
    return node


def difference(a: dict, b: dict) -> dict:
    """Members of ``a`` that are not members of ``b`` (children trees)."""
    if not a or not b:
        return a
    out: dict = {}
    for k, av in a.items():
        if k == DOT:
            continue
        bv = b.get(k)
        if bv is None:
            out[k] = av
            continue
        node = _make(_member(av) and not _member(bv), difference(_kids(av), _kids(bv)))
        if node is not None:
            out[k] = node
    return out


def intersection(a: dict, b: dict) -> dict:
    if not a or not b:
        return {}
    out: dict = {}
    for k, av in a.items():
        if k == DOT:
            continue
        bv = b.get(k)
        if bv is None:
            continue
        node = _make(_member(av) and _member(bv), intersection(_kids(av), _kids(bv)))
        if node is not None:
            out[k] = node
    return out


def is_empty(a: dict) -> bool:
    return not a


def remove_top(a: dict, keys: tuple[str, ...]) -> dict:
    """``a`` without the whole subtrees under the top-level path elements ``keys``."""
    if not any(k in a for k in keys):
        return a
    return {k: v for k, v in a.items() if k not in keys}


def validate_tree(node: Any, where: str = "fieldsV1") -> None:
    """Raise ValueError unless ``node`` is a well-formed fieldsV1 tree."""
    if not isinstance(node, dict):
        raise ValueError(f"{where}: must be an object")
    for k, v in node.items():
        if k == DOT:
            if v != {}:
                raise ValueError(f"{where}: the '.' entry must be an empty object")
            continue
        if not isinstance(k, str) or k[:2] not in ("f:", "k:", "v:", "i:"):
            raise ValueError(f"{where}: invalid path element {k!r}")
        if k[0] in "kv":
            try:
                decoded = json.loads(k[2:])
            except ValueError:
                raise ValueError(f"{where}: invalid path element {k!r}") from None
            if k[0] == "k" and not isinstance(decoded, dict):
                raise ValueError(f"{where}: invalid key element {k!r}")
        elif k[0] == "i" and not k[2:].lstrip("-").isdigit():
            raise ValueError(f"{where}: invalid index element {k!r}")
        validate_tree(v, where)


# --- paths ----------------------------------------------------------------------------------


def _value_text(v: Any) -> str:
    """Upstream's value.ToString: strings quoted, numbers and booleans bare."""
    return json.dumps(v, ensure_ascii=False) if not isinstance(v, (dict, list)) else json.dumps(v, sort_keys=True)


def format_element(key: str) -> str:
    kind, rest = key[:2], key[2:]
    if kind == "f:":
        return "." + rest
    if kind == "k:":
        try:
            fields = json.loads(rest)
            return "[" + ",".join(f"{n}={_value_text(fields[n])}" for n in sorted(fields)) + "]"
        except (ValueError, TypeError, AttributeError):
            return "[" + rest + "]"
    if kind == "v:":
        try:
            return f"[={_value_text(json.loads(rest))}]"
        except ValueError:
            return f"[={rest}]"
    return f"[{rest}]"


def format_path(elements: tuple[str, ...]) -> str:
    """``(f:spec, k:{"name":"a"}, f:image)`` -> ``.spec[name="a"].image``."""
    return "".join(format_element(e) for e in elements)


def iter_paths(tree: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The member paths of a tree, parents before children, keys sorted."""
    for k in sorted(tree):
        if k == DOT:
            continue
        node = tree[k]
        p = prefix + (k,)
        if _member(node):
            yield p
        yield from iter_paths(node, p)


# --- schema walking ---------------------------------------------------------------------


def _type_atomic(t: Type | None) -> bool:
    if isinstance(t, (Struct, Map)):
        return t.map_type == "atomic"
    if isinstance(t, List):
        return t.list_type == "atomic"
    return t is not None


_TYPE_MODES: dict[int, tuple[int, type]] = {}


def _container_mode(t: Type | None) -> tuple[int, type]:
    """(walk mode, JSON container type) of a type when it is not atomic."""
    if t is None:
        return USTRUCT, dict
    m = _TYPE_MODES.get(id(t))
    if m is None:
        if isinstance(t, Struct):
            m = (STRUCT, dict)
        elif isinstance(t, Map):
            m = (MAP, dict)
        elif isinstance(t, List):
            m = (LISTMAP if t.list_type == "map" else LISTSET, list)
        else:
            m = (LEAF, type(None))
        _TYPE_MODES[id(t)] = m
    return m


def _mode(t: Type | None, atomic: bool, value: Any) -> int:
    if atomic:
        return LEAF
    m, container = _container_mode(t)
    return m if type(value) is container else LEAF


_STRUCT_FIELDS: dict[int, dict[str, tuple[Type, bool]]] = {}


def _struct_child(t: Struct, name: str) -> tuple[Type | None, bool, bool]:
    """(type, atomic, known) of a struct's field."""
    fields = _STRUCT_FIELDS.get(id(t))
    if fields is None:
        fields = {n: (f.type, f.atomic) for n, f in t.json_fields().items()}
        _STRUCT_FIELDS[id(t)] = fields
    info = fields.get(name)
    if info is None:
        return None, True, False
    return info[0], info[1], True


def _canon(v: Any) -> str:
    """Compact JSON with sorted keys (the path element spelling)."""
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()


_KEY_DEFAULTS: dict[int, dict[str, Any]] = {}


def _key_defaults(t: List) -> dict[str, Any]:
    d = _KEY_DEFAULTS.get(id(t))
    if d is None:
        d = {}
        it = t.item_type
        if isinstance(it, Struct):
            for k in t.map_keys:
                f = it.field(k)
                if f is not None and f.default is not None:
                    d[k] = f.default
        _KEY_DEFAULTS[id(t)] = d
    return d


# One-key list maps (containers, env, volumes by name): the key field and the start of
# its path element, ``k:{"name":``, spelt once per list type.
_ONE_KEY: dict[int, tuple[str, str] | None] = {}


def _one_key(t: List) -> tuple[str, str] | None:
    if id(t) not in _ONE_KEY:
        keys = t.map_keys
        _ONE_KEY[id(t)] = (keys[0], "k:{" + orjson.dumps(keys[0]).decode() + ":") if len(keys) == 1 else None
    return _ONE_KEY[id(t)]


def _item_key(item: Any, t: List, mode: int, where: tuple) -> str:
    if mode == LISTSET:
        if type(item) is str and item.isascii() and item.isprintable() and '"' not in item and "\\" not in item:
            return 'v:"' + item + '"'  # what _canon writes for such a string (nothing escaped)
        return "v:" + _canon(item)
    if not isinstance(item, dict):
        raise FieldPathError(format_path(where), "expected an object as an item of a list of type map")
    one = _ONE_KEY.get(id(t)) if id(t) in _ONE_KEY else _one_key(t)
    if one is not None:
        v = item.get(one[0])
        if v is not None and type(v) is not dict:
            # A scalar (or list) value: its compact JSON is what the sorted dump writes.
            return one[1] + _canon(v) + "}"
    parts: dict[str, Any] = {}
    for k in t.map_keys:
        if k in item and item[k] is not None:
            parts[k] = item[k]
        else:
            d = _key_defaults(t)
            if k not in d:
                raise FieldPathError(
                    format_path(where),
                    f"associative list with keys has an element that omits key "
                    f"field {k!r} (and doesn't have default value)",
                )
            parts[k] = d[k]
    return "k:" + _canon(parts)


def _index_list(items: list, t: List, mode: int, where: tuple, unique: bool) -> tuple[list[str], dict[str, Any]]:
    keys: list[str] = []
    seen: dict[str, Any] = {}
    for item in items:
        k = _item_key(item, t, mode, where)
        if k in seen:
            if unique:
                raise FieldPathError(format_path(where), f"duplicate entries for key {format_element(k)}")
        else:
            seen[k] = item
        keys.append(k)
    return keys, seen


def _children(value: Any, t: Any, mode: int, where: tuple) -> Iterator[tuple[str, Any, Type | None, bool, bool]]:
    """(path element, child value, child type, child atomic, named field) of a container."""
    if mode == STRUCT:
        for k, v in value.items():
            ct, ca, known = _struct_child(t, k)
            if known:
                yield "f:" + k, v, ct, ca, True
    elif mode == USTRUCT:
        for k, v in value.items():
            yield "f:" + k, v, None, False, True
    elif mode == MAP:
        vt = t.value_type
        va = _type_atomic(vt)
        for k, v in value.items():
            yield "f:" + k, v, vt, va, False
    else:
        it = t.item_type
        ia = _type_atomic(it) if mode == LISTMAP else True
        for item in value:
            yield _item_key(item, t, mode, where), item, it, ia, False


def field_set(value: Any, t: Type | None, atomic: bool = False, where: tuple = ()) -> dict:
    """The fields a value sets, as the children tree of the value (upstream ToFieldSet):
    scalars and atomic values are leaves, list items and map entries are members
    themselves, struct fields only when null or empty."""
    mode = _mode(t, atomic, value)
    if mode == LEAF:
        return {}
    out: dict = {}
    for key, v, ct, ca, named in _children(value, t, mode, where):
        cm = _mode(ct, ca, v)
        sub = field_set(v, ct, ca, where + (key,)) if cm != LEAF else {}
        if named:
            if sub:
                out[key] = sub
            elif cm in (LISTMAP, LISTSET) or (cm in (STRUCT, USTRUCT, MAP) and v):
                continue  # an empty granular list, or an object of undeclared fields: nothing owned
            else:
                out[key] = {}
        else:
            if key in out and mode in (LISTMAP, LISTSET):
                raise FieldPathError(format_path(where), f"duplicate entries for key {format_element(key)}")
            out[key] = {DOT: {}, **sub} if sub else {}
    return out


# Per-struct walk tables for the hot walks (compare, every node of an added subtree):
# json name -> (path element, child type, child atomic, child walk mode, the JSON
# container type that mode needs; a value of another type is a leaf).
_WALK_TABLES: dict[int, dict[str, tuple[str, Type | None, bool, int, type]]] = {}
_NO_CONTAINER = type(None)


def _walk_table(t: Struct) -> dict[str, tuple[str, Type | None, bool, int, type]]:
    tab = _WALK_TABLES.get(id(t))
    if tab is None:
        tab = {}
        for n, (ct, ca) in ((n, (f.type, f.atomic)) for n, f in t.json_fields().items()):
            cm, cont = (LEAF, _NO_CONTAINER) if ca else _container_mode(ct)
            tab[n] = ("f:" + n, ct, ca, cm, cont)
        _WALK_TABLES[id(t)] = tab
    return tab


def _child_walk(t: Type | None, atomic: bool) -> tuple[int, type]:
    """(walk mode, container type) of every child of one type (map values, list items)."""
    if atomic:
        return LEAF, _NO_CONTAINER
    return _container_mode(t)


def _all_nodes(value: Any, t: Type | None, atomic: bool, where: tuple) -> dict:
    """Every node under a value as a member (what a compare reports for an added
    or removed subtree)."""
    mode = _mode(t, atomic, value)
    if mode == LEAF:
        return {}
    out: dict = {}
    _nodes(value, t, mode, where, out)
    return out


def _nodes(value: Any, t: Any, mode: int, where: tuple, out: dict) -> None:
    """:func:`_all_nodes` of a container already known to be walked in ``mode``, into
    ``out``: one pass with the child's mode read from the walk table, no
    generator per level. A container child becomes a member node built in place
    (``{".": {}, <children>}``), or a leaf ``{}`` when it has no children."""
    if mode == STRUCT:
        tab = _WALK_TABLES.get(id(t)) or _walk_table(t)
        for k, v in value.items():
            e = tab.get(k)
            if e is None:
                continue  # undeclared: owned by nobody
            cm = e[3]
            if cm != LEAF and v and type(v) is e[4]:
                node: dict = {DOT: {}}
                _nodes(v, e[1], cm, where, node)
                out[e[0]] = node if len(node) > 1 else {}
            else:
                out[e[0]] = {}
    elif mode == USTRUCT:
        for k, v in value.items():
            if v and type(v) is dict:
                node = {DOT: {}}
                _nodes(v, None, USTRUCT, where, node)
                out["f:" + k] = node if len(node) > 1 else {}
            else:
                out["f:" + k] = {}
    elif mode == MAP:
        vt = t.value_type
        cm, cont = _child_walk(vt, _type_atomic(vt))
        if cm == LEAF:
            for k in value:
                out["f:" + k] = {}
        else:
            for k, v in value.items():
                if v and type(v) is cont:
                    node = {DOT: {}}
                    _nodes(v, vt, cm, where, node)
                    out["f:" + k] = node if len(node) > 1 else {}
                else:
                    out["f:" + k] = {}
    else:
        it = t.item_type
        cm, cont = _child_walk(it, _type_atomic(it) if mode == LISTMAP else True)
        for item in value:
            key = _item_key(item, t, mode, where)
            if cm != LEAF and item and type(item) is cont:
                node = {DOT: {}}
                _nodes(item, it, cm, where, node)
                out[key] = node if len(node) > 1 else {}
            else:
                out[key] = {}


def _eq(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 == 1.0."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is not tb:
        if ta in (int, float) and tb in (int, float):
            return a == b
        return False
    if ta is dict:
        if len(a) != len(b):
            return False
        for k, v in a.items():
            if k not in b or not _eq(v, b[k]):
                return False
        return True
    if ta is list:
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    return a == b


def _paired(lhs: Any, rhs: Any, t: Any, mode: int, where: tuple):
    """Children of two containers of the same mode, matched by path element."""
    if mode in (STRUCT, USTRUCT, MAP):
        if mode == MAP:
            vt = t.value_type
            info = lambda k: (vt, _type_atomic(vt), True)  # noqa: E731 - one-line choice per branch
        elif mode == STRUCT:
            info = lambda k: _struct_child(t, k)  # noqa: E731 - one-line choice per branch
        else:
            info = lambda k: (None, False, True)  # noqa: E731 - one-line choice per branch
        for k, lv in lhs.items():
            ct, ca, known = info(k)
            if known:
                yield "f:" + k, lv, rhs.get(k, MISSING), ct, ca
        for k, rv in rhs.items():
            if k not in lhs:
                ct, ca, known = info(k)
                if known:
                    yield "f:" + k, MISSING, rv, ct, ca
        return
    it = t.item_type
    ia = _type_atomic(it) if mode == LISTMAP else True
    _, lobs = _index_list(lhs, t, mode, where, False)
    _, robs = _index_list(rhs, t, mode, where, False)
    for k, lv in lobs.items():
        yield k, lv, robs.get(k, MISSING), it, ia
    for k, rv in robs.items():
        if k not in lobs:
            yield k, MISSING, rv, it, ia


def compare(lhs: Any, rhs: Any, t: Type | None, atomic: bool = False, where: tuple = ()) -> tuple[dict, dict]:
    """(added or modified, removed) children trees between two values of one type
    (upstream Compare: added and removed subtrees list every node)."""
    mode = _mode(t, atomic, lhs)
    changed: dict = {}
    removed: dict = {}
    if mode == LEAF or _mode(t, atomic, rhs) != mode:
        return changed, removed
    if not lhs and mode != LISTMAP and mode != LISTSET:
        # Everything in rhs is new (a create against the zero object): all its nodes.
        _nodes(rhs, t, mode, where, changed)
        return changed, removed
    if mode == STRUCT:
        # The commonest case, with the children's types from the walk table.
        tab = _WALK_TABLES.get(id(t)) or _walk_table(t)  # type: ignore[arg-type]
        for k, lv in lhs.items():
            e = tab.get(k)
            if e is not None:
                _compare_child(e[0], lv, rhs.get(k, MISSING), e[1], e[2], where, changed, removed)
        for k, rv in rhs.items():
            if k not in lhs:
                e = tab.get(k)
                if e is not None:
                    _compare_child(e[0], MISSING, rv, e[1], e[2], where, changed, removed)
        return changed, removed
    for key, lv, rv, ct, ca in _paired(lhs, rhs, t, mode, where):
        _compare_child(key, lv, rv, ct, ca, where, changed, removed)
    return changed, removed


def _compare_child(
    key: str, lv: Any, rv: Any, ct: Type | None, ca: bool, where: tuple, changed: dict, removed: dict
) -> None:
    """One matched pair of children of a compare, recorded into ``changed``/``removed``."""
    if lv is rv:
        return  # shared by the merge: unchanged
    if lv is MISSING:
        sub = _all_nodes(rv, ct, ca, where)
        changed[key] = {DOT: {}, **sub} if sub else sub
    elif rv is MISSING:
        sub = _all_nodes(lv, ct, ca, where)
        removed[key] = {DOT: {}, **sub} if sub else sub
    else:
        cm = _mode(ct, ca, lv)
        if cm != LEAF and _mode(ct, ca, rv) == cm:
            c, r = compare(lv, rv, ct, ca, where + (key,))
            if c:
                changed[key] = c
            if r:
                removed[key] = r
        elif not _eq(lv, rv):
            changed[key] = {}


# --- merge --------------------------------------------------------------------------------


def merge(lhs: Any, rhs: Any, t: Any, atomic: bool = False, where: tuple = ()) -> Any:
    """The applied configuration ``rhs`` merged into the live value ``lhs``. Neither is
    modified; untouched subtrees of ``lhs`` are shared with the result."""
    if lhs is MISSING or lhs is None:
        return rhs
    mode = _mode(t, atomic, rhs)
    if mode == LEAF or _mode(t, atomic, lhs) != mode:
        return rhs
    if mode in (STRUCT, USTRUCT, MAP):
        out = dict(lhs)
        for k, rv in rhs.items():
            if rv is None:
                out.pop(k, None)  # an explicit null clears the field
                continue
            if mode == STRUCT:
                ct, ca, known = _struct_child(t, k)
                if not known:
                    out[k] = rv
                    continue
            elif mode == MAP:
                ct, ca = t.value_type, _type_atomic(t.value_type)
            else:
                ct, ca = None, False
            out[k] = merge(lhs.get(k, MISSING), rv, ct, ca, where + ("f:" + k,))
        return out
    return _merge_list(lhs, rhs, t, mode, where)


def _merge_list(lhs: list, rhs: list, t: List, mode: int, where: tuple) -> list:
    """Upstream's list merge: items matched by key; live items keep their place, the
    applied items keep their relative order, new ones go where the applier put them."""
    it = t.item_type
    ia = _type_atomic(it) if mode == LISTMAP else True
    rkeys, robs = _index_list(rhs, t, mode, where, True)
    lkeys, lobs = _index_list(lhs, t, mode, where, False)
    shared = [k for k in rkeys if k in lobs]
    si = 0
    next_shared = shared[0] if shared else None

    def advance() -> None:
        nonlocal si, next_shared
        si += 1
        next_shared = shared[si] if si < len(shared) else None

    def item(k: str) -> Any:
        return merge(lobs.get(k, MISSING), robs[k], it, ia, where) if mode == LISTMAP else robs[k]

    merged_r: set[str] = set()
    out: list = []
    li = ri = 0
    nl, nr = len(lkeys), len(rkeys)
    while li < nl or ri < nr:
        if li < nl and ri < nr:
            pe = lkeys[li]
            if pe == rkeys[ri]:
                if pe not in merged_r:
                    merged_r.add(pe)
                    out.append(item(pe))
                li += 1
                ri += 1
                advance()
                continue
            if pe in robs and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < nl:
            pe = lkeys[li]
            if pe not in robs:
                out.append(lhs[li])
                li += 1
                continue
            if pe in merged_r:
                li += 1
                continue
        if ri < nr:
            pe = rkeys[ri]
            merged_r.add(pe)
            out.append(item(pe))
            ri += 1
            if next_shared is not None and next_shared == pe:
                advance()
            continue
        li += 1  # a live item also in rhs whose turn never came: it was merged above
    return out


# --- prune --------------------------------------------------------------------------------


def prune(value: Any, last: dict, owned: dict, t: Any, atomic: bool = False, where: tuple = ()) -> Any:
    """``value`` without what the applier applied before (``last``) and nobody owns now
    (``owned``: every manager's set, the applier's new one included). A struct
    field is owned when anything under it is (upstream EnsureNamedFieldsAreMembers);
    a removed node takes its whole subtree along; granular maps and lists left
    empty are dropped, as the typed object would omit them."""
    mode = _mode(t, atomic, value)
    if mode == LEAF or not last:
        return value
    if mode in (STRUCT, USTRUCT, MAP):
        named = mode != MAP
        out: dict | None = None
        for key, child_last in last.items():
            if key == DOT or not key.startswith("f:"):
                continue
            name = key[2:]
            if name not in value:
                continue
            child_owned = owned.get(key) if owned else None
            if (named or _member(child_last)) and not (child_owned is not None and (named or _member(child_owned))):
                if out is None:
                    out = dict(value)
                del out[name]
                continue
            if len(child_last) > (DOT in child_last):
                if mode == STRUCT:
                    ct, ca, _ = _struct_child(t, name)
                elif mode == MAP:
                    ct, ca = t.value_type, _type_atomic(t.value_type)
                else:
                    ct, ca = None, False
                v = value[name]
                nv = prune(v, child_last, child_owned or {}, ct, ca, where)
                if nv is not v:
                    if out is None:
                        out = dict(value)
                    if not nv and isinstance(nv, (list, dict)) and _mode(ct, ca, v) in (MAP, LISTMAP, LISTSET):
                        del out[name]
                    else:
                        out[name] = nv
        return out if out is not None else value
    it = t.item_type
    ia = _type_atomic(it) if mode == LISTMAP else True
    keys, _ = _index_list(value, t, mode, where, False)
    changed = False
    result: list = []
    for key, item in zip(keys, value):
        child_last = last.get(key)
        if child_last is None:
            result.append(item)
            continue
        child_owned = owned.get(key) if owned else None
        if _member(child_last) and not (child_owned is not None and _member(child_owned)):
            changed = True
            continue
        if mode == LISTMAP and len(child_last) > (DOT in child_last):
            ni = prune(item, child_last, child_owned or {}, it, ia, where)
            if ni is not item:
                changed = True
            result.append(ni)
        else:
            result.append(item)
    return result if changed else value


# --- the zero object ----------------------------------------------------------------------

_ZERO: dict[int, dict] = {}


def zero_object(s: Struct) -> dict:
    """What the typed zero value of a kind serialises to: non-pointer struct fields
    are present (empty), everything else absent. A create compares against it, so
    that ``spec`` of a new object is not itself "added" while ``metadata.labels`` is.
    The result is cached and shared: never modify it."""
    z = _ZERO.get(id(s))
    if z is None:
        z = _zero(s, frozenset())
        _ZERO[id(s)] = z
    return z  # shared: callers only read it


def _zero(s: Struct, active: frozenset[int]) -> dict:
    out: dict = {}
    for name, f in s.json_fields().items():
        if isinstance(f.type, Struct) and not f.pointer and id(f.type) not in active:
            out[name] = _zero(f.type, active | {id(s)})
    return out
