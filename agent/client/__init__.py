"""The node agent's client of the API server.

* :mod:`agent.client.config` reads and writes connection configs ("orchconfig",
  the kubeconfig shape kubectl reads).
* :mod:`agent.client.rest` is the HTTP client: TLS always verified, JSON bodies,
  a token-bucket rate limit, retries with back-off.
* :mod:`agent.client.informer` keeps a local cache of a collection with list +
  watch and calls handlers on changes.

:func:`client_from_config` builds an :class:`ApiClient` from the agent's flags.
"""

from __future__ import annotations

from apiserver_min.api import names

from .config import Connection, OrchconfigError, load_orchconfig, write_orchconfig
from .rest import ApiClient, ApiConnectionError, ApiError

__all__ = [
    "Connection",
    "OrchconfigError",
    "load_orchconfig",
    "write_orchconfig",
    "ApiClient",
    "ApiError",
    "ApiConnectionError",
    "client_from_config",
]


def client_from_config(cfg, path: str | None = None, *, version: str = "") -> ApiClient:
    """An :class:`ApiClient` for ``path`` (default ``cfg.orchconfig``) with the
    agent's ``--orch-api-qps``, ``--orch-api-burst`` and ``--orch-api-content-type``."""
    conn = load_orchconfig(path or cfg.orchconfig)
    return ApiClient(
        conn,
        qps=cfg.orch_api_qps,
        burst=cfg.orch_api_burst,
        user_agent=f"{names.AGENT_NAME}/{version or 'dev'}",
        content_type=cfg.orch_api_content_type,
    )
