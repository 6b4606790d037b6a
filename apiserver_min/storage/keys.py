"""Storage keys of objects: ``/<resource>/<namespace>/<name>`` (``/<group>/<resource>/...`` outside core)."""

from __future__ import annotations

from ..api.kinds import KindInfo


def key_prefix(kind: KindInfo) -> str:
    return f"/{kind.resource}/" if not kind.group else f"/{kind.group}/{kind.resource}/"


def object_key(kind: KindInfo, namespace: str, name: str) -> str:
    if kind.namespaced:
        return f"{key_prefix(kind)}{namespace}/{name}"
    return f"{key_prefix(kind)}{name}"


def scope_prefix(kind: KindInfo, namespace: str | None) -> str:
    if kind.namespaced and namespace:
        return f"{key_prefix(kind)}{namespace}/"
    return key_prefix(kind)
