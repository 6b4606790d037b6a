"""AlwaysPullImages: every container of a new pod (or of an update bringing a new
image) pulls its image, so a pod cannot use an image another tenant pulled to the
node without the credentials to pull it itself."""

from __future__ import annotations

from typing import Iterator

from ...api import status as st
from ...api.validation import FieldError
from ..chain import Attributes

ALWAYS = "Always"


def containers_with_path(spec: dict) -> Iterator[tuple[dict, str]]:
    """Init containers, containers, ephemeral containers, with their field paths."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, dict):
                    yield c, f"spec.{key}[{i}]"


def _spec(obj: dict | None) -> dict:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


class AlwaysPullImages:
    name = "AlwaysPullImages"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE", "UPDATE"})
    complete = True  # a pull policy, nothing the pod strategy derives from

    @staticmethod
    def _ignore(attrs: Attributes) -> bool:
        if attrs.subresource or attrs.operation not in ("CREATE", "UPDATE"):
            return True
        if attrs.operation == "UPDATE":
            # An update that brings no image the old pod did not have is left alone.
            old_images = {c.get("image") for c, _ in containers_with_path(_spec(attrs.old))}
            return all(c.get("image") in old_images for c, _ in containers_with_path(_spec(attrs.obj)))
        return False

    async def admit(self, attrs: Attributes) -> None:
        if self._ignore(attrs):
            return
        for c, _ in containers_with_path(_spec(attrs.obj)):
            c["imagePullPolicy"] = ALWAYS

    async def validate(self, attrs: Attributes) -> None:
        if self._ignore(attrs):
            return
        errors = [
            FieldError.not_supported(f"{path}.imagePullPolicy", c.get("imagePullPolicy"), [ALWAYS]).message()
            for c, path in containers_with_path(_spec(attrs.obj))
            if c.get("imagePullPolicy") != ALWAYS
        ]
        if not errors:
            return
        one = [st.forbidden("pods", attrs.name, "", e) for e in errors]
        if len(one) == 1:
            raise one[0]
        raise st.ApiError(403, "Forbidden", "[" + ", ".join(e.message for e in one) + "]")
