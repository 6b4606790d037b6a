"""The authenticator chain of the server and the facade the server wires from its flags."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from ..api import status as st
from ..api.tlsverify import ClientCertificateVerifier
from ..api.user import UserInfo
from ..registry.lookup import ObjectLookup
from . import serviceaccount, tokens
from .authenticator import (
    ANONYMOUS,
    AuthConfigError,
    Authenticator,
    TokenResult,
    Unauthorized,
    with_authenticated_group,
)
from .bearer import AudienceAgnostic, BearerTokenAuthenticator
from .requestheader import RequestHeaderAuthenticator, RequestHeaderConfig, published_data
from .webhook import WebhookTokenAuthenticator, load_backend
from .x509 import X509Authenticator

if TYPE_CHECKING:
    from .oidc import OIDCAuthenticator, OIDCConfig

log = logging.getLogger("orch-apiserver.authn")


class AuthenticationChain:
    """All request authenticators, the authenticated-group adder and anonymous."""

    def __init__(self, authenticators: list[Authenticator], bearer: BearerTokenAuthenticator, anonymous: bool = True):
        self.authenticators = authenticators
        self.bearer = bearer
        self.anonymous = anonymous

    async def authenticate(self, request: Any) -> UserInfo:
        """The user of a request (ANONYMOUS when allowed and nothing was presented);
        Unauthorized otherwise."""
        errors: list[str] = []
        for a in self.authenticators:
            try:
                user = await a.authenticate(request)
            except Unauthorized as exc:
                errors.append(str(exc))
                continue
            if user is not None:
                return with_authenticated_group(user)
        if errors:
            raise Unauthorized("; ".join(errors))
        if self.anonymous:
            return ANONYMOUS
        raise Unauthorized("no credentials and anonymous requests are disabled (--anonymous-auth=false)")

    async def review_token(self, token: str, audiences: tuple[str, ...] = ()) -> TokenResult:
        """TokenReview: the bearer chain alone, for the asked audiences (default:
        this API's); Unauthorized when the token is not good for any of them."""
        res = await self.bearer.authenticate_token(token, tuple(audiences))
        return dataclasses.replace(res, user=with_authenticated_group(res.user))


class Authentication:
    """Everything authentication adds to the server: the request chain, the token
    authenticators (also asked by TokenReview) and the TokenRequest signer.

    The order is upstream's: the front proxy's headers, client certificates, then
    bearer tokens (static file, bootstrap, service account, OpenID Connect, webhook),
    anonymous last.

    Built from the flags when the server is built: the token file and key files
    are read now, so a bad one stops the start with a message naming it, and the
    service-account signing key is generated on first start when none was given."""

    def __init__(self, opts: Any, lookup: ObjectLookup, client_ca: str):
        self.lookup = lookup
        token_authenticators: list[Any] = []
        if opts.token_auth_file:
            token_authenticators.append(
                AudienceAgnostic(tokens.StaticTokens.from_file(opts.token_auth_file), opts.api_audiences)
            )
        if opts.enable_bootstrap_token_auth:
            token_authenticators.append(AudienceAgnostic(tokens.BootstrapTokens(self.lookup), opts.api_audiences))
        keys = serviceaccount.load_keys(opts)
        self.service_accounts = serviceaccount.ServiceAccountTokenAuthenticator(
            keys.verification_keys, opts.service_account_issuers, self.lookup if opts.service_account_lookup else None
        )
        token_authenticators.append(self.service_accounts)
        self.oidc: OIDCAuthenticator | None = None
        if opts.oidc_issuer_url:
            from .oidc import OIDCAuthenticator  # its JOSE library (0.6 MB) for the servers that use it

            self.oidc = OIDCAuthenticator(oidc_config(opts))
            token_authenticators.append(AudienceAgnostic(self.oidc, opts.api_audiences))
        self.token_webhook: WebhookTokenAuthenticator | None = None
        if opts.authentication_token_webhook_config_file:
            self.token_webhook = WebhookTokenAuthenticator(
                load_backend(opts.authentication_token_webhook_config_file),
                opts.authentication_token_webhook_version,
                opts.authentication_token_webhook_cache_ttl,
            )
            token_authenticators.append(self.token_webhook)
        self.bearer = BearerTokenAuthenticator(token_authenticators, opts.api_audiences)
        # --client-ca-file, else the cluster CA (created after this, at start: read lazily).
        self.client_ca = client_ca
        self.client_certificates = ClientCertificateVerifier(client_ca)
        request_authenticators: list[Authenticator] = []
        self.request_header: RequestHeaderAuthenticator | None = None
        if opts.requestheader_client_ca_file:
            self.request_header = RequestHeaderAuthenticator(requestheader_config(opts))
            request_authenticators.append(self.request_header)
        self.x509 = X509Authenticator(self.client_certificates)
        request_authenticators += [self.x509, self.bearer]
        self.chain = AuthenticationChain(request_authenticators, self.bearer, anonymous=opts.anonymous_auth)
        # The signer of TokenRequest (None: no signing key, the sub-resource answers 404).
        self.issuer = (
            serviceaccount.TokenIssuer(keys.signing_key, opts.service_account_issuers[0])
            if keys.signing_key is not None
            else None
        )

    async def start(self) -> None:
        """Fetch what the authenticators need from elsewhere (the OIDC issuer's keys)."""
        if self.oidc is not None:
            await self.oidc.start()

    async def stop(self) -> None:
        if self.token_webhook is not None:
            await self.token_webhook.close()

    def connection_user(self, request: Any) -> UserInfo | None:
        """The user :meth:`authenticate` would answer, when it is known without asking:
        client certificates are the first authenticator (no front proxy's headers come
        before them) and the request's connection presented a certificate whose outcome
        still holds. None: ask :meth:`authenticate`."""
        if self.request_header is not None:
            return None
        return self.x509.connection_user(request)

    async def authenticate(self, request: Any) -> UserInfo | None:
        """What the request path needs: the user (None for anonymous, which the
        authorizer treats as system:anonymous) or a 401 ApiError for bad credentials."""
        try:
            user = await self.chain.authenticate(request)
        except Unauthorized as exc:
            peer = request.remote if hasattr(request, "remote") else ""
            log.info("unable to authenticate the request from %s: %s", peer, exc)
            raise st.unauthorized("Unauthorized") from None
        return None if user is ANONYMOUS else user

    def published_configmap_data(self) -> dict[str, str]:
        """What the extension-apiserver-authentication ConfigMap holds (read at start)."""

        def read(path: str) -> str:
            try:
                with open(path, encoding="utf-8") as fh:
                    return fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise AuthConfigError(f"{path}: cannot read: {exc}") from None

        rh = self.request_header
        return published_data(
            read(self.client_ca), rh.config if rh is not None else None, read(rh.config.client_ca_file) if rh else ""
        )

    def strip_proxy_headers(self, request: Any) -> Any:
        """The request without the front proxy's user headers, whoever sent them."""
        return self.request_header.strip(request) if self.request_header is not None else request


def oidc_config(opts: Any) -> OIDCConfig:
    from .oidc import OIDCConfig

    return OIDCConfig(
        issuer_url=opts.oidc_issuer_url,
        client_id=opts.oidc_client_id,
        username_claim=opts.oidc_username_claim,
        username_prefix=opts.oidc_username_prefix or None,
        groups_claim=opts.oidc_groups_claim,
        groups_prefix=opts.oidc_groups_prefix,
        required_claims=tuple(opts.oidc_required_claims),
        ca_file=opts.oidc_ca_file,
        signing_algs=tuple(opts.oidc_signing_algs),
    )


def requestheader_config(opts: Any) -> RequestHeaderConfig:
    if not opts.requestheader_username_headers:
        raise AuthConfigError("--requestheader-username-headers must name at least one header")
    return RequestHeaderConfig(
        client_ca_file=opts.requestheader_client_ca_file,
        allowed_names=tuple(opts.requestheader_allowed_names),
        username_headers=tuple(opts.requestheader_username_headers),
        group_headers=tuple(opts.requestheader_group_headers),
        extra_headers_prefixes=tuple(opts.requestheader_extra_headers_prefix),
    )
