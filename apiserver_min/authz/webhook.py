"""The ``Webhook`` authorization mode (``--authorization-webhook-*``).

Each question is POSTed to a backend as a SubjectAccessReview
(``authorization.orch.io/v1``, or ``v1beta1`` with ``--authorization-webhook-version``):
the user, uid, groups and extra, and the resource attributes (namespace, verb, group,
version, resource, subresource, name) or the non-resource ones (path, verb). The
backend answers ``status.allowed`` (allow), ``status.denied`` (deny) or neither (no
opinion: the next authorizer decides), with a ``reason`` that a 403 shows. An answer
with both is a denial with an error.

Answers are cached by the review's spec: "allowed" for
``--authorization-webhook-cache-authorized-ttl`` (5m), anything else for
``--authorization-webhook-cache-unauthorized-ttl`` (30s). A backend that cannot be
reached or answers 429 or 5xx is asked again with upstream's back-off (five tries);
one that still fails gives no opinion with an error, as upstream: the next
authorizers are asked, and a request nobody allows is then a 500 naming the error
(upstream fails open to the rest of the chain, never to "allowed"). Failures are not
cached.

The request path asks the backend (the request's own authorization, impersonation,
create-on-update, RBAC's escalate and bind checks, the admission plugins' checks, the
access reviews), and so do the bundled controllers' in-process client. Two checks
are synchronous and see the cached answers only: CEL's ``authorizer`` in admission
policies and match conditions, and the CSR auto-approver's; a question the backend
has not answered yet is no opinion there, with a reason saying so.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import orjson

from ..api import names
from ..api.orchconfig import Target, WebhookConfigError, load_target
from ..api.user import UserInfo
from ..webhookclient.client import RETRY_INITIAL_SECONDS, CallError, JsonWebhook
from .authorizer import AuthzAttributes, Decision, RulesResult

log = logging.getLogger("orch-apiserver.authz.webhook")

VERSIONS = ("v1", "v1beta1")
DEFAULT_AUTHORIZED_TTL = 300.0
DEFAULT_UNAUTHORIZED_TTL = 30.0
CACHE_SIZE = 8192
# Questions whose requester-chosen attributes are this long are not cached (a flood
# of distinct huge names would otherwise fill the cache), as upstream.
MAX_CACHED_ATTRIBUTE_BYTES = 10000
NOT_ASKED_REASON = "webhook: no cached answer for an in-process check (the backend is asked on the request path)"


def load_config(path: str) -> Target:
    """The backend of ``--authorization-webhook-config-file``; ValueError naming the file."""
    return load_target(path, f"--authorization-webhook-config-file {path}")


def review_spec(attrs: AuthzAttributes, version: str) -> dict[str, Any]:
    """The spec of the SubjectAccessReview for ATTRS (v1beta1 names the groups ``group``)."""
    user: UserInfo = attrs.user
    spec: dict[str, Any] = {}
    if attrs.resource_request:
        ra = {
            "namespace": attrs.namespace,
            "verb": attrs.verb,
            "group": attrs.api_group,
            "version": attrs.api_version,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "name": attrs.name,
        }
        spec["resourceAttributes"] = {k: v for k, v in ra.items() if v}
    else:
        spec["nonResourceAttributes"] = {k: v for k, v in (("path", attrs.path), ("verb", attrs.verb)) if v}
    if user.name:
        spec["user"] = user.name
    if user.groups:
        spec["groups" if version == "v1" else "group"] = list(user.groups)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    if user.uid:
        spec["uid"] = user.uid
    return spec


def _attribute_bytes(attrs: AuthzAttributes) -> int:
    return sum(
        len(v)
        for v in (
            attrs.namespace,
            attrs.verb,
            attrs.api_group,
            attrs.api_version,
            attrs.resource,
            attrs.subresource,
            attrs.name,
            attrs.path,
        )
    )


def verdict(status: dict) -> tuple[Decision, str, str]:
    """(decision, reason, error) of a review's status."""
    allowed, denied = status.get("allowed") is True, status.get("denied") is True
    raw_reason = status.get("reason")
    reason = raw_reason if isinstance(raw_reason, str) else ""
    if allowed and denied:
        return Decision.DENY, reason, "webhook subject access review returned both allow and deny response"
    if denied:
        return Decision.DENY, reason, ""
    if allowed:
        return Decision.ALLOW, reason, ""
    return Decision.NO_OPINION, reason, ""


class WebhookAuthorizer:
    """Asks the backend (see the module doc)."""

    name = "Webhook"

    def __init__(
        self,
        backend: Target,
        version: str = "v1",
        authorized_ttl: float = DEFAULT_AUTHORIZED_TTL,
        unauthorized_ttl: float = DEFAULT_UNAUTHORIZED_TTL,
        monotonic: Callable[[], float] = time.monotonic,
        retry_backoff: float = RETRY_INITIAL_SECONDS,
    ):
        if version not in VERSIONS:
            raise WebhookConfigError(
                f"unsupported webhook authorizer version {version!r}, supported versions are "
                f'"{VERSIONS[0]}", "{VERSIONS[1]}"'
            )
        self.version = version
        self.api_version = f"{names.AUTHORIZATION_GROUP}/{version}"
        self.authorized_ttl = authorized_ttl
        self.unauthorized_ttl = unauthorized_ttl
        self.monotonic = monotonic
        self.client = JsonWebhook(backend, retry_backoff)
        # serialized spec -> (until, status)
        self._cache: dict[bytes, tuple[float, dict]] = {}

    @property
    def calls(self) -> int:
        return self.client.calls

    async def close(self) -> None:
        await self.client.close()

    def _cached(self, key: bytes) -> dict | None:
        hit = self._cache.get(key)
        if hit is None:
            return None
        if self.monotonic() >= hit[0]:
            del self._cache[key]
            return None
        return hit[1]

    def _remember(self, key: bytes, status: dict) -> None:
        ttl = self.authorized_ttl if status.get("allowed") is True else self.unauthorized_ttl
        if ttl <= 0:
            return
        if len(self._cache) >= CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = (self.monotonic() + ttl, status)

    async def decide(self, attrs: AuthzAttributes) -> tuple[Decision, str, str]:
        """(decision, reason, error): the backend's answer, from the cache when fresh."""
        spec = review_spec(attrs, self.version)
        key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        status = self._cached(key)
        if status is None:
            doc = {"apiVersion": self.api_version, "kind": "SubjectAccessReview", "metadata": {}, "spec": spec}
            try:
                answer = await self.client.post(doc)
                status = answer.get("status") or {}
                if not isinstance(status, dict):
                    raise CallError("status is not an object")
            except CallError as exc:
                log.error("Failed to make webhook authorizer request: %s", exc)
                return Decision.NO_OPINION, "", str(exc)
            if _attribute_bytes(attrs) < MAX_CACHED_ATTRIBUTE_BYTES:
                self._remember(key, status)
        return verdict(status)

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        """The synchronous checks: the cached answer, or no opinion (see the module doc)."""
        status = self._cached(orjson.dumps(review_spec(attrs, self.version), option=orjson.OPT_SORT_KEYS))
        if status is None:
            return Decision.NO_OPINION, NOT_ASKED_REASON
        decision, reason, _ = verdict(status)
        return decision, reason

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        return RulesResult(incomplete=True, errors=["webhook authorizer does not support user rule resolution"])
