"""MutatingAdmissionWebhook and ValidatingAdmissionWebhook: their factories (the
plugins themselves live in ``admission/webhook/``)."""

from __future__ import annotations

from typing import Any

from ..config import AdmissionConfig
from ..webhook.client import WebhookClients
from ..webhook.credentials import CredentialResolver, parse_webhook_admission_config
from ..webhook.dispatcher import MutatingWebhookPlugin, ValidatingWebhookPlugin
from ..webhook.metrics import WebhookMetrics
from ..webhook.source import ClusterLookup, WebhookSource
from . import equivalentresources

MUTATING = "MutatingAdmissionWebhook"
VALIDATING = "ValidatingAdmissionWebhook"


def _metrics(server: Any) -> WebhookMetrics:
    """The server's webhook metrics (rendered on /metrics), shared by both plugins."""
    found = getattr(server, "admission_webhook_metrics", None)
    if not isinstance(found, WebhookMetrics):
        found = WebhookMetrics()
        server.admission_webhook_metrics = found
    return found


def _parts(server: Any, config: AdmissionConfig, name: str, resource: str) -> tuple:
    try:
        path = parse_webhook_admission_config(config.for_plugin(name))
    except ValueError as exc:
        raise config.error(name, str(exc)) from None
    credentials = CredentialResolver.from_file(path) if path else CredentialResolver()
    lookup = ClusterLookup(server.cache, server.registry, server.store)
    source = WebhookSource(server.cache, server.registry, resource, equivalentresources.for_server(server))

    def authorizer() -> Any:
        """The server's authorizer, which match conditions' checks ask (looked up on use)."""
        return getattr(server, "authorizer", None)

    return source, lookup, WebhookClients(lookup, credentials), _metrics(server), authorizer


def mutating(server: Any, config: AdmissionConfig) -> MutatingWebhookPlugin:
    return MutatingWebhookPlugin(*_parts(server, config, MUTATING, "mutatingwebhookconfigurations"))


def validating(server: Any, config: AdmissionConfig) -> ValidatingWebhookPlugin:
    return ValidatingWebhookPlugin(*_parts(server, config, VALIDATING, "validatingwebhookconfigurations"))
