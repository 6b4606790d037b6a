"""The apiextensions family: custom resource definitions.

This server serves none yet; kubectl lists them on its hard-coded upstream path
(an alias of the orch group) before validating a kind that has no PATCH
operation, so the list answers, empty.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from ..api import names
from .rest import RequestContext


class EmptyCustomResourceDefinitionList:
    """``GET .../customresourcedefinitions``: the empty list at the current revision."""

    def __init__(self, current_revision: Callable[[], Awaitable[int]]):
        self.current_revision = current_revision

    async def list(self, ctx: RequestContext) -> dict:
        rv = await self.current_revision()
        return {
            "kind": "CustomResourceDefinitionList",
            "apiVersion": f"{names.APIEXTENSIONS_GROUP}/v1",
            "metadata": {"resourceVersion": str(rv)},
            "items": [],
        }
