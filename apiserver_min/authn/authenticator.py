"""Authentication: who is asking. The chain every request passes before authorization.

Request authenticators (client certificate, bearer token) are asked in order; the
first that recognises the request decides. A credential that is presented but bad
(an unknown, expired, forged or revoked bearer token) makes the request 401 even
when anonymous requests are allowed, as upstream's fail-on-error union does. A
request with no credential at all becomes ``system:anonymous`` /
``system:unauthenticated`` when ``--anonymous-auth`` is on, else 401. Every
authenticated user is put in ``system:authenticated``.

Bearer tokens go through a second, inner chain of token authenticators (static
token file, bootstrap tokens, service-account JWTs), which ``TokenReview`` also
uses directly with the audiences the review asks about.

Lookups of API objects (bootstrap-token secrets, service accounts, pods) go to
the watch cache first; a miss is confirmed against storage so that an object
created a moment ago is seen and one deleted a moment ago is not.

Successful bearer-token results are cached briefly (upstream caches token
successes for 10 s), keyed by the SHA-256 of the token and the audiences, so a
client that sends the same token on every request pays for one full check. Unlike
a plain TTL cache, every hit also runs the result's own cheap re-check (the
watch-cache entries it rests on are unchanged, the token has not expired), so
deleting a bootstrap-token secret, a service account or a bound pod ends its
tokens as soon as the watch cache sees it. Failures are never cached. Client
certificates are verified here, not in the TLS handshake (tlsverify.py), and map
to users by their subject, remembered per certificate.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..api import names
from ..api.user import UserInfo

if TYPE_CHECKING:
    pass

log = logging.getLogger("orch-apiserver.authn")

ANONYMOUS = UserInfo(names.USER_ANONYMOUS, groups=(names.GROUP_UNAUTHENTICATED,))


class Unauthorized(Exception):
    """A credential was presented and is not valid. The message is for logs and
    TokenReview's status.error; clients of the 401 only see "Unauthorized"."""


class AuthConfigError(ValueError):
    """Authentication set-up that cannot work (a bad token file or key file); the
    message names the file and, where it helps, the line."""


@dataclasses.dataclass(frozen=True)
class TokenResult:
    user: UserInfo
    audiences: tuple[str, ...] = ()
    # For the bearer success cache: a cheap re-check that the result still holds (the
    # objects it rests on are unchanged in the watch cache, the token has not expired).
    # None: the result must not be cached (e.g. it rests on a storage read).
    still_valid: Callable[[], bool] | None = dataclasses.field(default=None, compare=False, repr=False)


def always_valid() -> bool:
    """still_valid of results that cannot go stale (the static token file is read once)."""
    return True


# Upstream's token success cache TTL; the per-hit re-check keeps revocation immediate,
# the TTL bounds how long a result is reused at all.
TOKEN_CACHE_TTL_SECONDS = 10.0
TOKEN_CACHE_SIZE = 4096
X509_CACHE_SIZE = 1024


class Authenticator(Protocol):
    """Looks at one request. None: nothing here for me (try the next one);
    raises Unauthorized for a credential it owns that is bad."""

    name: str

    async def authenticate(self, request: Any) -> UserInfo | None: ...


class TokenAuthenticator(Protocol):
    """Looks at one bearer token, for the given target audiences (never empty).
    None: not my kind of token; raises Unauthorized for one of mine that is bad."""

    name: str

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None: ...


def with_authenticated_group(user: UserInfo) -> UserInfo:
    """Upstream's AuthenticatedGroupAdder: add system:authenticated unless the user
    already carries it or system:unauthenticated."""
    if names.GROUP_AUTHENTICATED in user.groups or names.GROUP_UNAUTHENTICATED in user.groups:
        return user
    # The constructor, not dataclasses.replace: this runs on every authenticated request.
    return UserInfo(user.name, user.uid, tuple(user.groups) + (names.GROUP_AUTHENTICATED,), user.extra)


# --- client certificates ------------------------------------------------------------------------

# --- bearer tokens ------------------------------------------------------------------------------

# --- the chain ----------------------------------------------------------------------------------

# --- the reviews: TokenReview and SelfSubjectReview ----------------------------------------------

# --- the facade the server wires -----------------------------------------------------------------
