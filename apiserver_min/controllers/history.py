"""ControllerRevisions: the template history DaemonSets and StatefulSets keep.

A revision (``apps/v1`` ControllerRevision) holds, in ``data``, the patch that puts
its template back on the owner (``{"spec": {"template": {..., "$patch": "replace"}}}``),
and a ``revision`` number, higher for newer. It is named ``<owner>-<hash>`` and
labelled ``controller-revision-hash: <hash>``; the hash is a 32-bit FNV of what the
revision holds, written with the letters generated names use, and the owner's
``status.collisionCount`` mixed in: when a revision of that name exists with other
data, the count goes up and the name changes.

Revisions are owned (controller reference) by their set and adopted or released by
its selector, as pods are. Beyond ``revisionHistoryLimit`` (10 by default) the
oldest revisions no pod uses any more are deleted.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, Mapping

import orjson

from ..api import names
from ..api import status as st
from ..api.helpers import dict_at
from ..api.kinds import KindInfo
from ..client.interface import Client
from .podcontrol import api_version_of, controller_ref

HASH_LABEL = names.LABEL_CONTROLLER_REVISION_HASH
DEFAULT_HISTORY_LIMIT = 10
# The letters of generated names (no vowels, no 0/1/3): a hash spelled with them
# never forms a word and is a valid label value.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# Longest owner name kept in a revision's name, so "<owner>-<hash>" stays a valid name.
MAX_PREFIX = 223
REVISION_API_VERSION = f"{names.APPS_GROUP}/v1"

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1_32(data: bytes, h: int = _FNV_OFFSET) -> int:
    for b in data:
        h = (h * _FNV_PRIME) & 0xFFFFFFFF
        h ^= b
    return h


def fnv1a_32(data: bytes, h: int = _FNV_OFFSET) -> int:
    for b in data:
        h ^= b
        h = (h * _FNV_PRIME) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """Each character replaced by a letter of ``SAFE_ALPHABET`` (by its code)."""
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in text)


def canonical(value: Any) -> bytes:
    """The bytes a revision's content is hashed and compared by: JSON with sorted keys."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def template_hash(template: Mapping, collision_count: int | None) -> str:
    """A DaemonSet's hash: of its pod template, then the collision count (4 bytes
    little-endian, padded to 8), FNV-1a."""
    h = fnv1a_32(canonical(template))
    if collision_count is not None:
        h = fnv1a_32(int(collision_count & 0xFFFFFFFF).to_bytes(4, "little") + b"\0\0\0\0", h)
    return safe_encode(str(h))


def data_hash(data: Any, collision_count: int | None) -> str:
    """A StatefulSet revision's hash: of its data, then the collision count in decimal, FNV-1."""
    h = fnv1_32(canonical(data))
    if collision_count is not None:
        h = fnv1_32(str(collision_count).encode(), h)
    return safe_encode(str(h))


def revision_name(owner_name: str, hash_: str) -> str:
    return f"{owner_name[:MAX_PREFIX]}-{hash_}"


def template_patch(owner: Mapping) -> dict:
    """What a revision of ``owner`` holds: the patch that restores its template."""
    template = copy.deepcopy(dict_at(dict_at(owner, "spec"), "template"))
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def template_of(revision: Mapping) -> dict:
    """The pod template a revision restores."""
    template = copy.deepcopy(dict_at(dict_at(dict_at(revision, "data"), "spec"), "template"))
    template.pop("$patch", None)
    return template


def revision_number(revision: Mapping) -> int:
    n = revision.get("revision")
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def sort_revisions(revisions: Iterable[dict]) -> list[dict]:
    """Oldest first: by revision number, then creation time, then name."""
    return sorted(
        revisions,
        key=lambda r: (
            revision_number(r),
            str(dict_at(r, "metadata").get("creationTimestamp") or ""),
            str(dict_at(r, "metadata").get("name") or ""),
        ),
    )


def next_revision(revisions: Iterable[Mapping]) -> int:
    return max((revision_number(r) for r in revisions), default=0) + 1


def equal_revision(a: Mapping, b: Mapping) -> bool:
    """The same content: hash labels (when both have one) and data agree."""
    ha = dict_at(dict_at(a, "metadata"), "labels").get(HASH_LABEL)
    hb = dict_at(dict_at(b, "metadata"), "labels").get(HASH_LABEL)
    if ha and hb and ha != hb:
        return False
    return canonical(a.get("data")) == canonical(b.get("data"))


def equal_data(a: Mapping, b: Mapping) -> bool:
    return canonical(a.get("data")) == canonical(b.get("data"))


def new_revision(
    owner: Mapping,
    owner_kind: KindInfo,
    revision: int,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict:
    """A revision of ``owner``'s current template (not yet named: see :func:`create_revision`)."""
    md = dict_at(owner, "metadata")
    rmd: dict[str, Any] = {
        "namespace": md.get("namespace", ""),
        "labels": dict(labels if labels is not None else template_labels(owner)),
        "ownerReferences": [controller_ref(owner, api_version_of(owner_kind), owner_kind.kind)],
    }
    if annotations:
        rmd["annotations"] = dict(annotations)
    return {
        "apiVersion": REVISION_API_VERSION,
        "kind": "ControllerRevision",
        "metadata": rmd,
        "data": template_patch(owner),
        "revision": revision,
    }


def template_labels(owner: Mapping) -> dict:
    labels = dict_at(dict_at(dict_at(owner, "spec"), "template"), "metadata").get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


async def create_revision(
    client: Client,
    kind: KindInfo,
    owner: Mapping,
    revision: dict,
    collision_count: int,
    hash_of: Callable[[dict, int], str],
) -> tuple[dict, int]:
    """Create ``revision`` named ``<owner>-<hash>``; when a revision of that name holds
    other data, count a collision and try the next name. Returns the revision stored
    (an equal one of ours already there is taken as is) and the collision count."""
    owner_md = dict_at(owner, "metadata")
    ns = str(owner_md.get("namespace", ""))
    for _ in range(100):
        hash_ = hash_of(revision, collision_count)
        body = copy.deepcopy(revision)
        body["metadata"]["name"] = revision_name(str(owner_md.get("name", "")), hash_)
        body["metadata"].setdefault("labels", {})[HASH_LABEL] = hash_
        try:
            return await client.create(kind, ns, body), collision_count
        except st.ApiError as exc:
            if exc.code != 409:
                raise
        try:
            existing = await client.get(kind, ns, body["metadata"]["name"])
        except st.ApiError as exc:
            if exc.code == 404:
                continue  # deleted meanwhile: the same name is free again
            raise
        owners = [
            r.get("uid") for r in dict_at(existing, "metadata").get("ownerReferences") or [] if isinstance(r, dict)
        ]
        if equal_data(existing, body) and owner_md.get("uid") in owners:
            return existing, collision_count
        collision_count += 1
    raise st.ApiError(500, "InternalError", f"no free name for a revision of {owner_md.get('name')}")


async def set_revision_number(client: Client, kind: KindInfo, revision: Mapping, number: int) -> dict:
    md = dict_at(revision, "metadata")

    def bump(cur: dict) -> dict:
        cur["revision"] = number
        return cur

    return await client.update(kind, str(md.get("namespace", "")), str(md.get("name", "")), bump)


def history_to_delete(revisions: Iterable[dict], live: set[str], limit: int) -> list[dict]:
    """The revisions beyond ``limit`` (oldest first) among those not named in ``live``
    (the current and update revisions, and those pods still use)."""
    idle = [r for r in sort_revisions(revisions) if dict_at(r, "metadata").get("name") not in live]
    excess = len(idle) - max(0, limit)
    return idle[:excess] if excess > 0 else []


async def delete_revisions(client: Client, kind: KindInfo, revisions: Iterable[Mapping]) -> None:
    for r in revisions:
        md = dict_at(r, "metadata")
        try:
            await client.delete(kind, str(md.get("namespace", "")), str(md.get("name", "")))
        except st.ApiError as exc:
            if exc.code != 404:
                raise


def history_limit(owner: Mapping) -> int:
    limit = dict_at(owner, "spec").get("revisionHistoryLimit")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else DEFAULT_HISTORY_LIMIT
