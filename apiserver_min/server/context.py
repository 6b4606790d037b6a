"""What the HTTP layer's parts use of the server they serve in.

``app.ApiServer`` builds every part and hands itself to them; they see it
through this protocol, so that no module of the server imports ``app`` (only
the CLI does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..api.kinds import Registry
    from ..api.user import UserInfo
    from ..authn.union import Authentication
    from ..options import Options
    from ..pki import Pki
    from ..registry.rest import RestTable
    from ..registry.store import Store
    from ..storage.cacher import WatchCache
    from .metrics import Metrics
    from .routing import RequestInfo


class ServerContext(Protocol):
    opts: "Options"
    registry: "Registry"
    store: "Store"
    cache: "WatchCache"
    metrics: "Metrics"
    pki: "Pki"
    client_ca: str
    authn: "Authentication"
    rest: "RestTable"  # the REST objects of collections and sub-resources beyond the generic store

    async def authorize(self, user: "UserInfo | None", info: "RequestInfo", query: Any = None) -> None: ...
