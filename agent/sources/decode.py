"""Manifest decoding and the identity of static pods.

Both static sources (a manifest path, a manifest URL) read the same documents:
a Pod, or a ``PodList`` / ``List`` of pods, as YAML or JSON, ``apiVersion: v1``.
Decoding is strict where a silent guess would run the wrong pod: duplicate
keys, a document that is not an object, another kind or version, and values
JSON cannot carry are all errors that name the manifest.

A static pod has no API server to name it, so it is given an identity as
upstream does: its name gets ``-<node name>`` appended, the namespace defaults
to ``default``, ``spec.nodeName`` is this node, and its UID is an MD5 over the
(defaulted) pod and where it came from, so the same manifest gives the same UID
after an agent restart while a changed manifest gives a new one (the old pod is
then removed and the new one added).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

import orjson
import yaml

from agent import pods as podutil
from apiserver_min.api import names
from apiserver_min.api.validation import FieldError

__all__ = ["ManifestError", "decode_manifest", "decode_document", "make_static", "static_uid", "MAX_MANIFEST_BYTES"]

# Upstream's maxConfigLength: larger manifests (files or URL bodies) are refused.
MAX_MANIFEST_BYTES = 10 << 20

_LIST_KINDS = ("PodList", "List")
_MAX_VALUES = 1_000_000

# Upstream tolerates every NoExecute taint for pods from files, so node problems never evict them.
_STATIC_TOLERATION = {"operator": "Exists", "effect": "NoExecute"}


class ManifestError(ValueError):
    """A manifest that cannot be used; ``location`` is the file path or URL."""

    def __init__(self, location: str, message: str) -> None:
        super().__init__(f"{location}: {message}")
        self.location = location
        self.message = message


# --- decoding ------------------------------------------------------------------------------


def decode_manifest(data: bytes, location: str) -> list[dict]:
    """The pods of one manifest document, each with ``apiVersion: v1`` and ``kind: Pod``.

    Raises :class:`ManifestError` naming ``location`` when the document cannot be
    read, is not a Pod/PodList/List of ``v1``, or holds something that is not a pod.
    """
    return decode_document(data, location)[1]


def decode_document(data: bytes, location: str) -> tuple[str, list[dict]]:
    """As :func:`decode_manifest`, also returning the document's kind, so that
    errors about one pod of a list can say which item it was."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(location, f"manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    if not data.strip():
        raise ManifestError(location, "manifest is empty")
    doc = _parse(data, location)
    if not isinstance(doc, dict):
        raise ManifestError(location, f"expected a Pod, PodList or List object, got {_json_type(doc)}")
    doc = _plain(doc, "", location, [_MAX_VALUES])
    kind = _check_type_meta(doc, location, "")
    if kind == "Pod":
        return kind, [doc]
    items = doc.get("items")
    if items is None:
        return kind, []
    if not isinstance(items, list):
        raise ManifestError(location, f"items: expected a list of pods, got {_json_type(items)}")
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"items[{i}]"
        if not isinstance(item, dict):
            raise ManifestError(location, f"{where}: expected a Pod object, got {_json_type(item)}")
        if kind == "PodList":
            # PodList items are pods by type; their own apiVersion/kind may be left out.
            item.setdefault("apiVersion", "v1")
            item.setdefault("kind", "Pod")
        item_kind = _check_type_meta(item, location, where + ".")
        if item_kind != "Pod":
            raise ManifestError(location, f"{where}: kind {item_kind!r} is not a Pod")
        out.append(item)
    return kind, out


def _parse(data: bytes, location: str) -> Any:
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ManifestError(location, "error decoding JSON: not UTF-8") from None
        try:
            return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        except _DuplicateKey as exc:
            raise ManifestError(location, f"error decoding JSON: duplicate field {exc.key!r}") from None
        except ValueError as exc:
            raise ManifestError(location, f"error decoding JSON: {exc}") from None
    from apiserver_min.api.codec import DecodeError, load_yaml  # with the first YAML manifest, as defaulting

    try:
        return load_yaml(data)
    except DecodeError as exc:
        cause = exc.__context__
        if isinstance(cause, yaml.MarkedYAMLError):
            text = _yaml_message(cause)
        else:
            text = " ".join(str(exc).replace("error decoding YAML body: ", "", 1).split())
        if "expected a single document" in text:
            text += " (put several pods in one manifest as a PodList)"
        raise ManifestError(location, f"error decoding YAML: {text}") from None


def _yaml_message(err: yaml.MarkedYAMLError) -> str:
    """One line, with line and column, without the source excerpt PyYAML adds."""

    def at(mark: Any) -> str:
        return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""

    parts = []
    if err.context:
        parts.append(f"{err.context}{at(err.context_mark)}")
    if err.problem:
        parts.append(f"{err.problem}{at(err.problem_mark)}")
    return ", ".join(parts) or "invalid YAML"


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _plain(value: Any, path: str, location: str, budget: list[int]) -> Any:
    """The value with only JSON types: scalar keys become strings (as upstream's
    YAML-to-JSON step does), anything JSON cannot hold is an error naming its path.

    ``budget`` counts values down: YAML aliases can make a small file expand to
    billions of values, which would stall the agent."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ManifestError(location, f"the manifest expands to more than {_MAX_VALUES} values (YAML aliases?)")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = _key_string(k, path, location)
            out[key] = _plain(v, f"{path}.{key}" if path else key, location, budget)
        return out
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", location, budget) for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ManifestError(location, f"{path or '<root>'}: {value} is not a JSON number")
        return value
    raise ManifestError(location, f"{path or '<root>'}: a YAML {type(value).__name__} value has no JSON form")


def _key_string(key: Any, path: str, location: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (int, float)):
        return str(key)
    raise ManifestError(location, f"{path or '<root>'}: a {type(key).__name__} cannot be an object key")


def _check_type_meta(obj: dict, location: str, prefix: str) -> str:
    version = obj.get("apiVersion")
    kind = obj.get("kind")
    if version in (None, ""):
        raise ManifestError(location, f'{prefix}apiVersion: Required value: expected "v1"')
    if version != "v1":
        raise ManifestError(location, f'{prefix}apiVersion: Unsupported value: {version!r}: only "v1" is accepted')
    if kind in (None, ""):
        raise ManifestError(location, f"{prefix}kind: Required value: expected Pod, PodList or List")
    if not isinstance(kind, str) or kind not in ("Pod",) + _LIST_KINDS or (prefix and kind != "Pod"):
        allowed = "Pod" if prefix else "Pod, PodList or List"
        raise ManifestError(location, f"{prefix}kind: Unsupported value: {kind!r}: expected {allowed}")
    return kind


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# --- static identity -----------------------------------------------------------------------


def make_static(pod: dict, *, node_name: str, source: str, location: str) -> dict:
    """A copy of ``pod`` defaulted, given its static identity and validated.

    ``source`` is ``file`` or ``http``; ``location`` the file path or the URL, which
    (with the node name for files) goes into the UID as upstream puts it there.
    Raises :class:`ManifestError` listing every validation error with its field path.
    """
    if source not in (podutil.SOURCE_FILE, podutil.SOURCE_HTTP):
        raise ValueError(f"static pods come from {podutil.SOURCE_FILE!r} or {podutil.SOURCE_HTTP!r}, not {source!r}")
    pod = copy.deepcopy(pod)
    meta = pod.get("metadata")
    if meta is None:
        meta = pod["metadata"] = {}
    if not isinstance(meta, dict):
        raise ManifestError(location, _invalid("metadata", meta, "must be an object"))
    name = meta.get("name")
    if name in (None, ""):
        raise ManifestError(
            location, f"invalid pod: {FieldError.required('metadata.name', 'name or generateName is required')}"
        )
    if not isinstance(name, str):
        raise ManifestError(location, _invalid("metadata.name", name, "must be a string"))
    if meta.get("annotations") is not None and not isinstance(meta["annotations"], dict):
        raise ManifestError(location, _invalid("metadata.annotations", meta["annotations"], "must be an object"))
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        if spec is None:
            raise ManifestError(location, f"invalid pod: {FieldError.required('spec')}")
        raise ManifestError(location, _invalid("spec", spec, "must be an object"))
    if spec.get("tolerations") is not None and not isinstance(spec["tolerations"], list):
        raise ManifestError(location, _invalid("spec.tolerations", spec["tolerations"], "must be a list"))
    if pod.get("status") is not None and not isinstance(pod["status"], dict):
        raise ManifestError(location, _invalid("status", pod["status"], "must be an object"))

    # Defaulting and validation (every kind's schema, the pod rules: about 1.2 MB) and the
    # YAML decoder load with the first manifest: a node without static pods never needs them.
    from apiserver_min.api.defaults import apply_defaults
    from apiserver_min.api.podvalidation import validate_pod

    apply_defaults("", "v1", "Pod", pod)

    uid = meta.get("uid")
    if not uid:
        uid = static_uid(pod, node_name=node_name, source=source, location=location)
        meta["uid"] = uid
    meta["name"] = f"{name}-{node_name.lower()}"
    if not meta.get("namespace"):
        meta["namespace"] = names.NS_DEFAULT
    spec["nodeName"] = node_name
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = meta["annotations"] = {}
    annotations[names.ANNOTATION_CONFIG_HASH] = str(uid)
    annotations[names.ANNOTATION_CONFIG_SOURCE] = source
    if source == podutil.SOURCE_FILE:
        # As upstream: only pods from files get it (a URL's pods are evictable).
        _add_or_update_toleration(spec, _STATIC_TOLERATION)
    status = pod.get("status")
    if status is None:
        status = pod["status"] = {}
    status["phase"] = "Pending"

    errors = validate_pod(pod)
    if errors:
        raise ManifestError(location, "invalid pod: " + "; ".join(e.message() for e in errors))
    return pod


def static_uid(pod: dict, *, node_name: str, source: str, location: str) -> str:
    """Upstream's recipe with a JSON hash in place of Go's deep hash: MD5 over the
    pod (keys sorted, so key order in the manifest does not matter), then
    ``host:<node>file:<path>`` for files or ``url:<url>`` for URLs."""
    hasher = hashlib.md5(usedforsecurity=False)
    hasher.update(orjson.dumps(pod, option=orjson.OPT_SORT_KEYS))
    if source == podutil.SOURCE_FILE:
        hasher.update(f"host:{node_name}".encode())
        hasher.update(f"file:{location}".encode())
    else:
        hasher.update(f"url:{location}".encode())
    return hasher.hexdigest()


def _add_or_update_toleration(spec: dict, toleration: dict) -> None:
    """Upstream's AddOrUpdateTolerationInPod: replace a toleration matching on key,
    operator, value and effect, else append."""

    def key(t: dict) -> tuple:
        return (t.get("key") or "", t.get("operator") or "", t.get("value") or "", t.get("effect") or "")

    tolerations = spec.get("tolerations") or []
    out, replaced = [], False
    for t in tolerations:
        if isinstance(t, dict) and key(t) == key(toleration):
            if not replaced:
                out.append(dict(toleration))
            replaced = True
            continue
        out.append(t)
    if not replaced:
        out.append(dict(toleration))
    spec["tolerations"] = out


def _invalid(field: str, value: Any, detail: str) -> str:
    return f"invalid pod: {FieldError.invalid(field, value, detail)}"
