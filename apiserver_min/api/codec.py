"""Object encoding for storage and for responses.

Objects are stored as canonical JSON: ``apiVersion``, ``kind`` and ``metadata``
first, and ``metadata.resourceVersion`` left out, because the version is the
storage revision of the write and is only known once the write is done. Reads
splice ``"resourceVersion":"N"`` in right after ``"metadata":{`` — the first such
byte run is always the real one, since the two strings before it cannot contain
an unescaped quote. Passing stored bytes through this way is what makes a list
of ten thousand objects cheap: nothing is decoded or re-encoded.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import yaml

from . import status as st

# id(dict) -> (that dict, the keys given more than once in it): the duplicate keys of a decoded body.
Duplicates = dict[int, tuple[dict, list[str]]]

_META = b'"metadata":{'
_META_LEN = len(_META)


class DecodeError(ValueError):
    pass


# PyYAML composes and constructs recursively; a document nested beyond Python's stack
# is refused as malformed (upstream's YAML reader has a depth limit of its own).
TOO_DEEP = "the document is nested too deeply"


def encode_for_storage(obj: dict) -> bytes:
    md = dict(obj.get("metadata") or {})
    md.pop("resourceVersion", None)
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""), "metadata": md}
    for k, v in obj.items():
        if k not in out:
            out[k] = v
    # orjson's result can sit in a much larger allocation (16 KiB for a 2 KB pod);
    # these bytes live on in storage and the watch cache, so keep an exact-size copy.
    return bytes(memoryview(orjson.dumps(out)))


def splice_rv(raw: bytes, rv: int) -> bytes:
    i = raw.find(_META)
    if i < 0:  # not an object we stored; leave it alone
        return raw
    j = i + _META_LEN
    if raw[j : j + 1] == b"}":
        return b'%s"resourceVersion":"%d"%s' % (raw[:j], rv, raw[j:])
    return b'%s"resourceVersion":"%d",%s' % (raw[:j], rv, raw[j:])


def decode_stored(raw: bytes, rv: int) -> dict:
    obj = orjson.loads(raw)
    obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
    return obj


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def dumps_pretty(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


# Alias expansion ("billion laughs"): PyYAML builds an alias as a second reference to
# the anchored value, so a few hundred bytes of nested aliases decode at once into a
# tree that is exponentially large once anything walks or encodes it. Upstream's YAML
# reader (go-yaml) counts every node it decodes, and those it decodes through an alias,
# and refuses the document when alias-reached nodes dominate beyond a small allowance;
# the same rule is applied here to the composed document, before anything is built.
_ALIAS_RATIO_RANGE_LOW = 400_000
_ALIAS_RATIO_RANGE_HIGH = 4_000_000
EXCESSIVE_ALIASING = "document contains excessive aliasing"


def _allowed_alias_ratio(decoded: int) -> float:
    """go-yaml's allowance: 99% of the nodes may come from aliases in documents of up to
    400,000 decoded nodes, falling smoothly to 10% at 4,000,000."""
    if decoded <= _ALIAS_RATIO_RANGE_LOW:
        return 0.99
    if decoded >= _ALIAS_RATIO_RANGE_HIGH:
        return 0.10
    return 0.99 - 0.89 * ((decoded - _ALIAS_RATIO_RANGE_LOW) / (_ALIAS_RATIO_RANGE_HIGH - _ALIAS_RATIO_RANGE_LOW))


def _children(node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            yield key_node
            yield value_node
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def check_aliasing(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases expand too far, or into themselves.

    Counts as go-yaml's decoder does, without expanding anything: every node of the
    document in order is one decode, and an alias is one more plus every node of
    what it refers to (each node's expanded size is computed once). The first time
    a node is met (depth first, keys before values: the order the composer built
    it) is its anchor; every later meeting is an alias. Raises a ``ComposerError``."""
    sizes: dict[int, int] = {}  # node -> decodes of one expansion of it (known once walked)
    active: set[int] = {id(root)}  # nodes being walked: an alias to one is a cycle
    decoded = 2  # the document and its root
    aliased = 0

    def excessive() -> bool:
        return aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded)

    stack: list[list] = [[root, _children(root), 1]]
    while stack:
        frame = stack[-1]
        child = next(frame[1], None)
        if child is None:
            stack.pop()
            active.discard(id(frame[0]))
            sizes[id(frame[0])] = frame[2]
            if stack:
                stack[-1][2] += frame[2]
            continue
        cid = id(child)
        if cid in active:
            raise yaml.composer.ComposerError(
                None, None, "an alias refers to an anchor whose value contains it", child.start_mark
            )
        expanded = sizes.get(cid)
        decoded += 1  # the node, or the alias node itself
        if expanded is not None:  # an alias: all of its value is decoded again
            # (within an expansion only alias-reached nodes are counted, so the
            # ratio peaks at its end: one check there stands for one per node)
            decoded += expanded
            aliased += expanded
            frame[2] += 1 + expanded
            if excessive():
                raise yaml.composer.ComposerError(None, None, EXCESSIVE_ALIASING, child.start_mark)
            continue
        if aliased > 100 and excessive():
            raise yaml.composer.ComposerError(None, None, EXCESSIVE_ALIASING, child.start_mark)
        active.add(cid)
        stack.append([child, _children(child), 1])


def _unshare(obj: Any, duplicates: Duplicates | None) -> tuple[Any, Duplicates | None]:
    """A tree copy of a document that used aliases: each alias becomes its own copy of
    the value, as upstream's YAML-to-JSON conversion makes it (a shared dict would let
    a write to one place, such as the object's metadata, show up in another). The
    duplicate-key records follow the copies."""
    new_dups: Duplicates = {}

    def copy(v: Any) -> Any:
        if isinstance(v, dict):
            out = {k: copy(x) for k, x in v.items()}
            if duplicates:
                entry = duplicates.get(id(v))
                if entry is not None and entry[0] is v:
                    new_dups[id(out)] = (out, entry[1])
            return out
        if isinstance(v, list):
            return [copy(x) for x in v]
        return v

    return copy(obj), (new_dups if duplicates is not None else None)


class _NoDupLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate mapping keys instead of keeping the last,
    and documents whose aliases expand too far (:func:`check_aliasing`)."""

    limit_aliases = True  # apply check_aliasing (and un-share the decoded aliases)
    aliased = False  # the document defined anchors and was checked: its values may be shared

    def compose_document(self) -> yaml.Node | None:
        self.get_event()  # DOCUMENT-START
        # PyYAML's own compose_document passes index None for the root; the stubs say int.
        node = self.compose_node(None, None)  # type: ignore[arg-type]
        self.get_event()  # DOCUMENT-END
        anchored = bool(self.anchors)
        self.anchors = {}
        if anchored and self.limit_aliases and node is not None:
            self.aliased = True
            check_aliasing(node)
        return node


def _construct_mapping(loader: _NoDupLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = _yaml_key(loader.construct_object(key_node, deep=deep))  # JSON keys are strings
        if key in out:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate field {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_NoDupLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# The integers JSON decoding (orjson) keeps as integers; beyond them a number is a float.
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


def _construct_int(loader: _NoDupLoader, node: yaml.ScalarNode) -> int | float:
    """A YAML integer as JSON decoding would give it: one beyond 64 bits becomes a
    float (as upstream's YAML reader resolves it), so that every decoded body can
    be stored (the storage encoding has no wider integers)."""
    value = yaml.SafeLoader.construct_yaml_int(loader, node)
    if _INT_MIN <= value <= _INT_MAX:
        return value
    try:
        return float(value)
    except OverflowError:
        raise yaml.constructor.ConstructorError(
            None, None, "integer too large for a JSON number", node.start_mark
        ) from None


def _construct_float(loader: _NoDupLoader, node: yaml.ScalarNode) -> float:
    """A YAML float; ``.inf`` and ``.nan`` have no JSON form, so they are refused
    (upstream's YAML-to-JSON conversion fails on them too)."""
    value = yaml.SafeLoader.construct_yaml_float(loader, node)
    if value != value or value in (float("inf"), float("-inf")):
        raise yaml.constructor.ConstructorError(None, None, f"{node.value!r} is not a JSON number", node.start_mark)
    return value


def _construct_binary(loader: _NoDupLoader, node: yaml.ScalarNode) -> str:
    """``!!binary``: the decoded bytes as text (JSON has no bytes; upstream's YAML
    reader also yields a string), refused when they are not UTF-8."""
    data = yaml.SafeLoader.construct_yaml_binary(loader, node)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise yaml.constructor.ConstructorError(
            None, None, "!!binary value is not UTF-8 text", node.start_mark
        ) from None


def _construct_timestamp(loader: _NoDupLoader, node: yaml.ScalarNode) -> str:
    """An explicit ``!!timestamp`` stays the text it was, as implicit ones do."""
    return str(loader.construct_scalar(node))


def _construct_pairs(loader: _NoDupLoader, node: yaml.Node) -> list:
    """``!!omap`` and ``!!pairs``: a list of ``[key, value]`` lists (JSON has no tuples)."""
    if not isinstance(node, yaml.SequenceNode):
        raise yaml.constructor.ConstructorError(None, None, "expected a sequence of pairs", node.start_mark)
    out = []
    for sub in node.value:
        if not isinstance(sub, yaml.MappingNode) or len(sub.value) != 1:
            raise yaml.constructor.ConstructorError(None, None, "expected single-key mappings", sub.start_mark)
        k, v = sub.value[0]
        out.append([_yaml_key(loader.construct_object(k, deep=True)), loader.construct_object(v, deep=True)])
    return out


_NoDupLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_NoDupLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_NoDupLoader.add_constructor("tag:yaml.org,2002:binary", _construct_binary)
_NoDupLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
_NoDupLoader.add_constructor("tag:yaml.org,2002:omap", _construct_pairs)
_NoDupLoader.add_constructor("tag:yaml.org,2002:pairs", _construct_pairs)
# ``!!set``: a mapping to nulls, as upstream's YAML reader gives it (JSON has no sets).
_NoDupLoader.add_constructor("tag:yaml.org,2002:set", _construct_mapping)
# Timestamps stay strings, as they are in JSON.
_NoDupLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _TrackingLoader(_NoDupLoader):
    """A YAML loader for request bodies: a duplicate key keeps its last value (as
    upstream's YAML-to-JSON conversion does) and is recorded, so that field
    validation can warn about it or reject it per ``fieldValidation``."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicates: Duplicates = {}


def _yaml_key(key: Any) -> Any:
    """Keys as upstream's YAML-to-JSON conversion spells them: JSON objects only
    have string keys (``true``, ``null``, ``1`` become text)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (int, float)):
        return str(key)
    raise yaml.constructor.ConstructorError(None, None, f"invalid map key {key!r}: keys must be scalars")


def _construct_tracked_mapping(loader: _TrackingLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    dups: list[str] | None = None
    for key_node, value_node in node.value:  # a repeated key keeps its first place, last value
        key = _yaml_key(loader.construct_object(key_node, deep=deep))
        if key in out:
            if dups is None:
                dups = []
            if key not in dups:
                dups.append(key)
        out[key] = loader.construct_object(value_node, deep=deep)
    if dups:
        loader.duplicates[id(out)] = (out, dups)
    return out


_TrackingLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_tracked_mapping)
_TrackingLoader.add_constructor("tag:yaml.org,2002:set", _construct_tracked_mapping)


@dataclasses.dataclass
class DecodedBody:
    """A request body decoded for field validation.

    ``duplicates`` maps ``id(dict)`` to that dict and its keys given more than
    once (YAML: always known; JSON: None until the slow re-parse). ``colons``
    and ``maybe_escaped`` let the validator prove cheaply that a JSON body had
    no duplicate keys (see ``fieldvalidation``).
    """

    obj: Any
    media: str  # "json" or "yaml"
    body: bytes = b""
    duplicates: Duplicates | None = None
    colons: int = 0
    maybe_escaped: bool = False


def decode_object_body(body: bytes, content_type: str) -> DecodedBody:
    """Decode a write's body (JSON or YAML) keeping what field validation needs;
    400 for an empty or malformed body."""
    if not body.strip():
        raise st.bad_request("the request body is empty; an object was expected")
    if content_type in ("application/yaml", "application/x-yaml", "text/yaml", "application/apply-patch+yaml"):
        try:
            loader = _TrackingLoader(body.decode("utf-8"))
        except UnicodeDecodeError:
            raise st.bad_request("error decoding YAML body: not UTF-8") from None
        try:
            obj = loader.get_single_data()
        except yaml.YAMLError as exc:
            raise st.bad_request(f"error decoding YAML body: {exc}") from None
        except RecursionError:
            raise st.bad_request(f"error decoding YAML body: {TOO_DEEP}") from None
        finally:
            loader.dispose()
        duplicates: Duplicates | None = loader.duplicates
        if loader.aliased:
            obj, duplicates = _unshare(obj, duplicates)
        return DecodedBody(obj, "yaml", body, duplicates)
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise st.bad_request(f"error decoding JSON body: {exc}") from None
    return DecodedBody(obj, "json", body, None, body.count(b":"), b"\\u" in body)


def decode_json_tracking_duplicates(body: bytes) -> DecodedBody:
    """The slow JSON decode that names duplicate keys (the last value wins, as
    in the fast decode). Only used once a cheap count has shown some."""
    dups: Duplicates = {}

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        seen: list[str] | None = None
        for k, v in items:
            if k in out:
                if seen is None:
                    seen = []
                if k not in seen:
                    seen.append(k)
            out[k] = v
        if seen:
            dups[id(out)] = (out, seen)
        return out

    try:
        obj = json.loads(body, object_pairs_hook=pairs, parse_int=_json_int)
    except ValueError as exc:
        raise st.bad_request(f"error decoding JSON body: {exc}") from None
    return DecodedBody(obj, "json", body, dups)


def _json_int(text: str) -> int | float:
    """An integer as orjson decodes it: beyond 64 bits, a float."""
    value = int(text)
    return value if _INT_MIN <= value <= _INT_MAX else float(value)


def load_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"error decoding JSON body: {exc}") from None


def load_yaml(body: bytes, *, limit_aliases: bool = False) -> Any:
    """YAML as JSON-shaped values, duplicate keys refused. ``limit_aliases``: refuse
    alias expansion beyond upstream's budget (:func:`check_aliasing`) and give each
    alias its own copy; request bodies (:func:`decode_body`) always do. Off, aliases
    stay shared references, for a caller with an expansion budget of its own (the
    node agent's manifest decoding)."""
    try:
        loader = _NoDupLoader(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise DecodeError("error decoding YAML body: not UTF-8") from None
    loader.limit_aliases = limit_aliases
    try:
        obj = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise DecodeError(f"error decoding YAML body: {exc}") from None
    except RecursionError:
        raise DecodeError(f"error decoding YAML body: {TOO_DEEP}") from None
    finally:
        loader.dispose()
    return _unshare(obj, None)[0] if loader.aliased else obj


def dump_yaml(obj: Any) -> bytes:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True).encode()


def decode_body(body: bytes, content_type: str) -> Any:
    """Decode a request body by its media type (JSON or YAML; JSON is YAML too)."""
    if not body.strip():
        raise st.bad_request("the request body is empty; an object was expected")
    try:
        if content_type in ("application/yaml", "application/x-yaml", "text/yaml", "application/apply-patch+yaml"):
            return load_yaml(body, limit_aliases=True)
        return load_json(body)
    except DecodeError as exc:
        raise st.bad_request(str(exc)) from None
