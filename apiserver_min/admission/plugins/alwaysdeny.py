"""AlwaysDeny: refuses every write (deprecated upstream; meant for tests)."""

from __future__ import annotations

from ...api import status as st
from ..chain import Attributes

MESSAGE = "admission control is denying all modifications"


class AlwaysDeny:
    name = "AlwaysDeny"
    resources = None

    async def admit(self, attrs: Attributes) -> None:
        raise st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, MESSAGE)

    async def validate(self, attrs: Attributes) -> None:
        raise st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, MESSAGE)
