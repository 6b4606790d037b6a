"""A PATCH body of one of the three patch types, applied to an object as a PATCH
request applies it (the HTTP handlers and the in-process client share this)."""

from __future__ import annotations

from typing import Any

from ..api import names
from ..api import status as st
from ..api.schema import Struct
from .patch import PatchApplyError, PatchError, json_patch, merge_patch
from .strategicpatch import strategic_merge_patch

PATCH_TYPES = (names.MEDIA_JSON_PATCH, names.MEDIA_MERGE_PATCH, names.MEDIA_STRATEGIC_MERGE_PATCH)


def apply_patch(patch_type: str, current: Any, doc: Any, schema: Struct | None = None) -> Any:
    """A merge, strategic merge (under the kind's ``schema``) or JSON patch applied to
    ``current``: 400 for a malformed patch, 422 for one that cannot apply to it."""
    try:
        if patch_type == names.MEDIA_STRATEGIC_MERGE_PATCH:
            return strategic_merge_patch(current, doc, schema)
        return merge_patch(current, doc) if patch_type == names.MEDIA_MERGE_PATCH else json_patch(current, doc)
    except PatchError as exc:
        raise st.bad_request(str(exc)) from None
    except PatchApplyError as exc:
        raise st.ApiError(422, "Invalid", f"the patch cannot be applied: {exc}") from None


def patch_object(patch_type: str, old: dict, doc: Any, schema: Struct | None = None) -> dict:
    """The stored object ``old`` patched: it must stay an object (422), and a
    ``resourceVersion`` is a precondition only when the patch itself set one."""
    old_rv = (old.get("metadata") or {}).get("resourceVersion")
    new = apply_patch(patch_type, old, doc, schema)
    if not isinstance(new, dict):
        raise st.ApiError(422, "Invalid", "the patched document is not an object")
    nmd = new.get("metadata")
    if isinstance(nmd, dict) and nmd.get("resourceVersion") == old_rv:
        nmd.pop("resourceVersion", None)
    return new
