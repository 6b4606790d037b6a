"""The calls the agent's parts make on the API server, as protocols.

:class:`agent.client.rest.ApiClient` is the real one; a unit test hands a part
a small fake with the same methods instead.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

__all__ = ["ApiInterface", "InformerInterface", "Handler"]

Handler = Callable[..., None]


class ApiInterface(Protocol):
    """Reads and writes of single objects (pods, their status, mirror pods, ConfigMaps, tokens)."""

    async def get(self, path: str, *, params: Mapping[str, str] | None = None, rate_limited: bool = True) -> dict: ...

    async def create(
        self, path: str, body: Any, *, params: Mapping[str, str] | None = None, rate_limited: bool = True
    ) -> dict: ...

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: str = "merge",
        rate_limited: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> dict: ...

    async def delete(
        self, path: str, *, body: Any = None, params: Mapping[str, str] | None = None, rate_limited: bool = True
    ) -> dict: ...


class InformerInterface(Protocol):
    """A list + watch of one collection into a local cache (:class:`agent.client.informer.Informer`)."""

    cache: dict[str, dict]

    @property
    def synced(self) -> bool: ...

    def add_handler(
        self, on_add: Handler | None = None, on_update: Handler | None = None, on_delete: Handler | None = None
    ) -> None: ...

    async def wait_synced(self, timeout: float | None = None) -> bool: ...

    async def run(self) -> None: ...
