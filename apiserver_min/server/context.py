"""What the HTTP layer's parts use of the server they serve in.

``app.ApiServer`` builds every part and hands itself to them; they see it
through this protocol, so that no module of the server imports ``app`` (only
the CLI does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aiohttp import web

    from ..api.kinds import KindInfo, Registry
    from ..api.user import UserInfo
    from ..authn.union import Authentication
    from ..options import Options
    from ..pki import Pki
    from ..registry.store import Store
    from ..storage.cacher import WatchCache
    from .metrics import Metrics
    from .routing import RequestInfo


class BodyHandling(Protocol):
    """Reading, decoding and answering request bodies (``handlers.ResourceHandlers``)."""

    async def _read_body(self, request: "web.Request") -> bytes: ...

    async def _decode_object(
        self,
        request: "web.Request",
        kind: "KindInfo",
        expect_kind: str | None = None,
        expect_api_version: str | None = None,
    ) -> dict: ...

    def _validate_fields(self, request: "web.Request", decoded: Any, kind_name: str, api_version: str) -> dict: ...

    def _with_warnings(self, request: "web.Request", resp: "web.Response") -> "web.Response": ...

    def _respond_obj(
        self,
        request: "web.Request",
        obj: Any,
        code: int,
        target: Any,
        kind: "KindInfo | None" = None,
        include: str = "Metadata",
    ) -> "web.Response": ...


class ServerContext(Protocol):
    opts: "Options"
    registry: "Registry"
    store: "Store"
    cache: "WatchCache"
    metrics: "Metrics"
    pki: "Pki"
    client_ca: str
    authn: "Authentication"
    handlers: BodyHandling
    token_requests: Any  # tokenrequest.TokenRequests

    def authorize(self, user: "UserInfo | None", info: "RequestInfo", query: Any = None) -> None: ...
