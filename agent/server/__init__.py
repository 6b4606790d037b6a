"""The agent's HTTPS server and what it serves.

* :mod:`.server` - the aiohttp application: ``/healthz``, ``/pods``, ``/runningpods/``,
  ``/configz``, ``/metrics``, logs, exec/attach/port-forward, its serving certificate;
* :mod:`.auth` - who may ask: X.509 and token-webhook authentication, webhook authorization;
* :mod:`.streaming` - the exec/attach/port-forward relay to the CRI streaming server;
* :mod:`.stats` - the summary API (``/stats/summary``) from cgroups and the CRI;
* :mod:`.logs` - reading container logs (``/containerLogs``) and rotating them.
"""

from __future__ import annotations

from .server import (
    ANONYMOUS,
    DEFAULT_LOG_DIR,
    AgentServer,
    ListenError,
    LogTarget,
    RuntimeStreaming,
    StreamingError,
    UserInfo,
    allow_anonymous,
    always_allow,
    configz_document,
    ensure_serving_cert,
)

__all__ = [
    "AgentServer",
    "LogTarget",
    "UserInfo",
    "ANONYMOUS",
    "allow_anonymous",
    "always_allow",
    "ensure_serving_cert",
    "ListenError",
    "StreamingError",
    "RuntimeStreaming",
    "configz_document",
    "DEFAULT_LOG_DIR",
]
