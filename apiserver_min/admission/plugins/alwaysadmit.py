"""AlwaysAdmit: admits every request (deprecated upstream; kept for configurations that name it)."""

from __future__ import annotations

from ..chain import Attributes


class AlwaysAdmit:
    name = "AlwaysAdmit"
    resources = None

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        return None
