"""Bearer tokens that are looked up, not verified: the static token file and
bootstrap tokens.

Static token file (``--token-auth-file``): CSV lines ``token,user,uid[,groups]``,
the groups column a quoted comma list. Read once at start; a malformed line stops
the server with the file and line named. Lookups hash the presented token, so the
time a lookup takes does not depend on how much of a stored token it shares.

Bootstrap tokens (``--enable-bootstrap-token-auth``): ``<id>.<secret>`` where the
id is 6 and the secret 16 characters of ``[a-z0-9]``, backed by the Secret
``bootstrap-token-<id>`` of type ``bootstrap.orch.io/token`` in ``orch-system``.
The user is ``system:bootstrap:<id>`` in ``system:bootstrappers`` plus the
secret's ``auth-extra-groups``. As upstream, a token whose secret is missing,
deleted, of the wrong type, expired, not marked for authentication or with a bad
group list simply does not authenticate (the bearer chain then answers 401).
"""

from __future__ import annotations

import base64
import binascii
import csv
import datetime as _dt
import hashlib
import hmac
import io
import logging
import re
from typing import TYPE_CHECKING, Callable

from ..api import names
from ..api.timeutil import TimestampError, parse_rfc3339
from ..api.user import UserInfo
from .authenticator import AuthConfigError, TokenResult, always_valid

if TYPE_CHECKING:
    from ..registry.lookup import ObjectLookup

log = logging.getLogger("orch-apiserver.authn")


# --- static token file ---------------------------------------------------------------------------


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class StaticTokens:
    """Tokens from a CSV file, by the SHA-256 of the token."""

    name = "token-file"

    def __init__(self, users: dict[bytes, UserInfo], source: str = ""):
        self.users = users
        self.source = source

    @classmethod
    def from_file(cls, path: str) -> "StaticTokens":
        try:
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"token file {path}: cannot read: {exc}") from None
        return cls(parse_token_csv(text, path), path)

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        user = self.users.get(_digest(token))
        return TokenResult(user, still_valid=always_valid) if user is not None else None


def parse_token_csv(text: str, source: str = "token file") -> dict[bytes, UserInfo]:
    """Upstream's format: at least three columns (token, user name, uid), an optional
    fourth of comma-separated groups (quote it when there are several). Blank lines
    are skipped; an empty token is skipped with a warning; a repeated token warns
    and the later line wins."""
    users: dict[bytes, UserInfo] = {}
    reader = csv.reader(io.StringIO(text), strict=True)
    line = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise AuthConfigError(f"token file {source}, line {reader.line_num}: malformed CSV: {exc}") from None
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < 3:
            raise AuthConfigError(
                f"token file {source}, line {line}: needs at least 3 columns (token, user name, "
                f"user uid), found {len(row)}"
            )
        if len(row) > 4:
            raise AuthConfigError(
                f"token file {source}, line {line}: has {len(row)} columns; put several groups "
                'in one quoted fourth column ("group1,group2")'
            )
        token, user, uid = row[0], row[1], row[2]
        if not token:
            log.warning("token file %s, line %d: empty token, line ignored", source, line)
            continue
        if any(c.isspace() for c in token) or not token.isprintable():
            raise AuthConfigError(
                f"token file {source}, line {line}: the token contains whitespace or control "
                "characters, which an Authorization header cannot carry"
            )
        if not user:
            raise AuthConfigError(f"token file {source}, line {line}: the user name (column 2) is empty")
        groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) == 4 else ()
        key = _digest(token)
        if key in users:
            log.warning("token file %s, line %d: duplicate token; this line replaces the earlier one", source, line)
        users[key] = UserInfo(user, uid=uid, groups=groups)
    return users


# --- bootstrap tokens ----------------------------------------------------------------------------

BOOTSTRAP_TOKEN_RE = re.compile(r"\A([a-z0-9]{6})\.([a-z0-9]{16})\Z")
BOOTSTRAP_GROUP_RE = re.compile(r"\A" + re.escape(names.GROUP_BOOTSTRAPPERS_PREFIX) + r"[a-z0-9:-]{0,255}[a-z0-9]\Z")
# Keys of the bootstrap-token secret's data (the seed's table).
KEY_TOKEN_ID = "token-id"
KEY_TOKEN_SECRET = "token-secret"
KEY_EXPIRATION = "expiration"
KEY_USAGE_AUTHENTICATION = "usage-bootstrap-authentication"
KEY_USAGE_SIGNING = "usage-bootstrap-signing"
KEY_EXTRA_GROUPS = "auth-extra-groups"


def secret_data(secret: dict) -> dict[str, str]:
    """A secret's values as text: ``data`` is base64 as stored; ``stringData`` (plain)
    wins where both name a key, as it does when upstream merges them on write."""
    out: dict[str, str] = {}
    data = secret.get("data")
    if isinstance(data, dict):
        for k, v in data.items():
            if not isinstance(v, str):
                continue
            try:
                out[k] = base64.b64decode(v, validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                continue
    string_data = secret.get("stringData")
    if isinstance(string_data, dict):
        out.update({k: v for k, v in string_data.items() if isinstance(v, str)})
    return out


def bootstrap_groups(extra: str) -> tuple[str, ...]:
    """system:bootstrappers plus the extra groups, de-duplicated and sorted like
    upstream; ValueError for an extra group outside system:bootstrappers:."""
    groups = {names.GROUP_BOOTSTRAPPERS}
    if extra:
        for g in extra.split(","):
            if not BOOTSTRAP_GROUP_RE.match(g):
                raise ValueError(
                    f"{g!r} is not a valid bootstrap group name (must match "
                    f"{names.GROUP_BOOTSTRAPPERS_PREFIX}[a-z0-9:-]*[a-z0-9])"
                )
            groups.add(g)
    return tuple(sorted(groups))


def expired(expiration: str, now: _dt.datetime) -> bool:
    """An unparseable expiration counts as expired, as upstream's HasExpired."""
    if not expiration:
        return False
    try:
        return now >= parse_rfc3339(expiration)
    except (TimestampError, ValueError, TypeError):
        log.info("bootstrap token has an unparseable expiration %r; refusing it", expiration)
        return True


class BootstrapTokens:
    """Bootstrap tokens checked against their secrets in orch-system."""

    name = "bootstrap-token"

    def __init__(self, lookup: "ObjectLookup", clock: Callable[[], _dt.datetime] | None = None):
        self.lookup = lookup
        self.clock = clock or (lambda: _dt.datetime.now(_dt.timezone.utc))

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        m = BOOTSTRAP_TOKEN_RE.match(token)
        if m is None:
            return None  # not a bootstrap token: another authenticator may know it
        token_id, token_secret = m.group(1), m.group(2)
        secret_name = names.BOOTSTRAP_TOKEN_SECRET_PREFIX + token_id
        secret = await self.lookup.get("secrets", names.NS_SYSTEM, secret_name)
        user = self.check(secret, token_id, token_secret)
        if user is None or secret is None:
            return None
        return TokenResult(user, still_valid=self._still_valid(secret_name, secret))

    def _still_valid(self, secret_name: str, secret: dict) -> Callable[[], bool] | None:
        """The cached result's re-check: the secret is still the revision that was
        checked (any change - deletion, a new secret, usages, groups - means a full
        check again) and its expiration has not passed. None when the lookup cannot
        tell (no watch cache) or the secret carries no usable resourceVersion."""
        entry_getter = getattr(self.lookup, "entry_getter", None)
        try:
            rv = int((secret.get("metadata") or {}).get("resourceVersion", ""))
        except (TypeError, ValueError):
            return None
        if entry_getter is None:
            return None
        expiration = secret_data(secret).get(KEY_EXPIRATION, "")
        try:
            expires = parse_rfc3339(expiration) if expiration else None
        except (TimestampError, ValueError, TypeError):
            return None
        current, clock = entry_getter("secrets", names.NS_SYSTEM, secret_name), self.clock

        def still_valid() -> bool:
            e = current()
            return e is not None and e.rv == rv and not e.deleting and (expires is None or clock() < expires)

        return still_valid

    def check(self, secret: dict | None, token_id: str, token_secret: str) -> UserInfo | None:
        """The user a token's secret grants, or None (with the reason logged)."""
        where = f"bootstrap token secret {names.NS_SYSTEM}/{names.BOOTSTRAP_TOKEN_SECRET_PREFIX}{token_id}"
        if secret is None:
            log.debug("%s not found", where)
            return None
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            log.info("%s is deleted and awaiting removal", where)
            return None
        if secret.get("type") != names.BOOTSTRAP_TOKEN_SECRET_TYPE:
            log.info("%s has type %r, expected %s", where, secret.get("type"), names.BOOTSTRAP_TOKEN_SECRET_TYPE)
            return None
        data = secret_data(secret)
        # Compare the secret in constant time: the first wrong character must not answer sooner.
        if not hmac.compare_digest(data.get(KEY_TOKEN_SECRET, "").encode(), token_secret.encode()):
            log.info("%s: the presented secret does not match %s", where, KEY_TOKEN_SECRET)
            return None
        if data.get(KEY_TOKEN_ID) != token_id:
            log.info("%s: %s is %r, not %r", where, KEY_TOKEN_ID, data.get(KEY_TOKEN_ID), token_id)
            return None
        if expired(data.get(KEY_EXPIRATION, ""), self.clock()):
            log.info("%s has expired (%s)", where, data.get(KEY_EXPIRATION))
            return None
        if data.get(KEY_USAGE_AUTHENTICATION) != "true":
            log.info("%s is not marked %s=true", where, KEY_USAGE_AUTHENTICATION)
            return None
        try:
            groups = bootstrap_groups(data.get(KEY_EXTRA_GROUPS, ""))
        except ValueError as exc:
            log.info("%s has an invalid %s: %s", where, KEY_EXTRA_GROUPS, exc)
            return None
        return UserInfo(names.BOOTSTRAP_USER_PREFIX + token_id, groups=groups)
