"""The authenticator chain of the server and the facade the server wires from its flags."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ..api import status as st
from ..api.tlsverify import ClientCertificateVerifier
from ..api.user import UserInfo
from ..registry.lookup import ObjectLookup
from . import serviceaccount, tokens
from .authenticator import ANONYMOUS, Authenticator, TokenResult, Unauthorized, with_authenticated_group
from .bearer import AudienceAgnostic, BearerTokenAuthenticator
from .x509 import X509Authenticator

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


async def authenticate_or_401(chain: AuthenticationChain, request: Any) -> UserInfo | None:
    """What the request path needs: the user (None for anonymous, which the
    authorizer treats as system:anonymous) or a 401 Status."""
    try:
        user = await chain.authenticate(request)
    except Unauthorized as exc:
        peer = request.remote if hasattr(request, "remote") else ""
        log.info("unable to authenticate the request from %s: %s", peer, exc)
        raise st.unauthorized("Unauthorized") from None
    return None if user is ANONYMOUS else user


class Authentication:
    """Everything authentication adds to the server: the request chain, the token
    authenticators (also asked by TokenReview) and the TokenRequest signer.

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
        self.bearer = BearerTokenAuthenticator(token_authenticators, opts.api_audiences)
        # --client-ca-file, else the cluster CA (created after this, at start: read lazily).
        self.client_certificates = ClientCertificateVerifier(client_ca)
        self.chain = AuthenticationChain(
            [X509Authenticator(self.client_certificates), self.bearer], self.bearer, anonymous=opts.anonymous_auth
        )
        # The signer of TokenRequest (None: no signing key, the sub-resource answers 404).
        self.issuer = (
            serviceaccount.TokenIssuer(keys.signing_key, opts.service_account_issuers[0])
            if keys.signing_key is not None
            else None
        )

    async def authenticate(self, request: Any) -> UserInfo | None:
        """The request's user, None for anonymous; a 401 ApiError for bad credentials."""
        return await authenticate_or_401(self.chain, request)
