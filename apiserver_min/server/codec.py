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

from typing import Any

import orjson
import yaml

from ..api import status as st

_META = b'"metadata":{'
_META_LEN = len(_META)


class DecodeError(ValueError):
    pass


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
    if raw[j:j + 1] == b"}":
        return b"%s\"resourceVersion\":\"%d\"%s" % (raw[:j], rv, raw[j:])
    return b"%s\"resourceVersion\":\"%d\",%s" % (raw[:j], rv, raw[j:])


def decode_stored(raw: bytes, rv: int) -> dict:
    obj = orjson.loads(raw)
    obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
    return obj


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def dumps_pretty(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


class _NoDupLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader: _NoDupLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate field {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_NoDupLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# Timestamps stay strings, as they are in JSON.
_NoDupLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"error decoding JSON body: {exc}") from None


def load_yaml(body: bytes) -> Any:
    try:
        return yaml.load(body.decode("utf-8"), Loader=_NoDupLoader)
    except UnicodeDecodeError:
        raise DecodeError("error decoding YAML body: not UTF-8") from None
    except yaml.YAMLError as exc:
        raise DecodeError(f"error decoding YAML body: {exc}") from None


def dump_yaml(obj: Any) -> bytes:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True).encode()


def decode_body(body: bytes, content_type: str) -> Any:
    """Decode a request body by its media type (JSON or YAML; JSON is YAML too)."""
    if not body.strip():
        raise st.bad_request("the request body is empty; an object was expected")
    try:
        if content_type in ("application/yaml", "application/x-yaml", "text/yaml", "application/apply-patch+yaml"):
            return load_yaml(body)
        return load_json(body)
    except DecodeError as exc:
        raise st.bad_request(str(exc)) from None
