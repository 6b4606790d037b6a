"""Secrets and ConfigMaps: their keys, ``stringData``, immutability and the Secret types'
required keys, as upstream validates them.

A Secret's ``stringData`` is write-only: its values are merged into ``data`` (base64,
overriding keys of the same name) before anything else looks at the object, so it is
never stored and never returned, as upstream.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..api import names
from ..api import validation as v
from ..api.podvalidation import is_config_map_key
from .strategy import Strategy

MAX_SECRET_BYTES = 1024 * 1024  # a Secret's data, all keys together
MAX_CONFIGMAP_BYTES = 1024 * 1024  # a ConfigMap's data and binaryData together

# Keys each Secret type requires (upstream's v1 validation), by the type's name without
# its domain: types are accepted in the project's spelling (orch.io/tls) and in the one
# kubectl writes (kubernetes.io/tls, from `kubectl create secret tls|docker-registry`).
REQUIRED_KEYS = {
    "dockercfg": (names.SECRET_KEY_DOCKERCFG,),
    "dockerconfigjson": (names.SECRET_KEY_DOCKER_CONFIG_JSON,),
    "tls": ("tls.crt", "tls.key"),
    "ssh-auth": ("ssh-privatekey",),
}
TYPE_DOMAINS = names.SECRET_TYPE_DOMAINS


def secret_type(value: Any) -> str:
    """A Secret's type without its domain ("tls"), or "" for Opaque and other types."""
    for prefix in TYPE_DOMAINS:
        if isinstance(value, str) and value.startswith(prefix):
            return value[len(prefix) :]
    return ""


IMMUTABLE_DETAIL = "field is immutable when `immutable` is set"


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def merge_string_data(obj: dict) -> None:
    """``stringData`` into ``data`` (base64); ``stringData`` removed."""
    string_data = obj.pop("stringData", None)
    if not isinstance(string_data, dict) or not string_data:
        return
    data = obj.get("data")
    if not isinstance(data, dict):
        data = obj["data"] = {}
    for key, value in string_data.items():
        if isinstance(value, str):
            data[key] = base64.b64encode(value.encode()).decode()


def _key_errors(keys: Any, path: str) -> list[v.FieldError]:
    return [v.FieldError.invalid(f"{path}[{key}]", key, m) for key in keys for m in is_config_map_key(str(key))]


def _decoded_size(data: dict) -> int:
    total = 0
    for value in data.values():
        if isinstance(value, str):
            try:
                total += len(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                total += len(value)
    return total


def _immutable_errors(new: dict, old: dict, fields: tuple[str, ...]) -> list[v.FieldError]:
    if old.get("immutable") is not True:
        return []
    errs = []
    if new.get("immutable") is not True:
        errs.append(v.FieldError.forbidden("immutable", IMMUTABLE_DETAIL))
    for field in fields:
        if _dict(new.get(field)) != _dict(old.get(field)):
            errs.append(v.FieldError.forbidden(field, IMMUTABLE_DETAIL))
    return errs


class SecretStrategy(Strategy):
    def prepare_for_create(self, obj: dict) -> None:
        merge_string_data(obj)
        super().prepare_for_create(obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        merge_string_data(new)
        super().prepare_for_update(new, old)

    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        data = _dict(obj.get("data"))
        errs += _key_errors(data, "data")
        if _decoded_size(data) > MAX_SECRET_BYTES:
            errs.append(v.FieldError.too_long("data", "", MAX_SECRET_BYTES))
        stype = secret_type(obj.get("type"))
        for key in REQUIRED_KEYS.get(stype, ()):
            if key not in data:
                errs.append(v.FieldError.required(f"data[{key}]", ""))
        if stype == "basic-auth" and "username" not in data and "password" not in data:
            errs.append(v.FieldError.required("data[username]", ""))
            errs.append(v.FieldError.required("data[password]", ""))
        return errs

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        if (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
            errs.append(v.FieldError.invalid("type", new.get("type"), "field is immutable"))
        return errs + _immutable_errors(new, old, ("data",))


class ConfigMapStrategy(Strategy):
    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        data, binary = _dict(obj.get("data")), _dict(obj.get("binaryData"))
        errs += _key_errors(data, "data") + _key_errors(binary, "binaryData")
        for key in set(data) & set(binary):
            errs.append(v.FieldError.invalid(f"data[{key}]", key, "duplicate of key present in binaryData"))
        size = sum(len(str(x).encode()) for x in data.values()) + _decoded_size(binary)
        if size > MAX_CONFIGMAP_BYTES:
            errs.append(v.FieldError.too_long("", "", MAX_CONFIGMAP_BYTES))
        return errs

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        return super().validate_update(new, old) + _immutable_errors(new, old, ("data", "binaryData"))
