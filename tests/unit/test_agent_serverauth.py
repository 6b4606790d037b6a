"""agent.server.auth: request attributes, the authenticator union, the review caches."""

from __future__ import annotations

import asyncio

import pytest

from agent.server import auth as sa
from agent.server.auth import ANONYMOUS, UserInfo

ALICE = UserInfo("alice", ("devs",))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Req:
    """The two things authenticators read of a request."""

    def __init__(self, headers=None, path="/pods") -> None:
        self.headers = headers or {}
        self.path = path
        self.transport = None


@pytest.mark.parametrize(
    "path, sub",
    [
        ("/pods", "proxy"),
        ("/runningpods/", "proxy"),
        ("/configz", "proxy"),
        ("/healthz", "proxy"),
        ("/containerLogs/ns/p/c", "proxy"),
        ("/exec/ns/p/c", "proxy"),
        ("/run/ns/p/c", "proxy"),
        ("/stats", "stats"),
        ("/stats/summary", "stats"),
        ("/statsx", "proxy"),
        ("/metrics", "metrics"),
        ("/metrics/resource", "metrics"),
        ("/metricsfoo", "proxy"),
        ("/logs", "log"),
        ("/logs/", "log"),
        ("/logs/syslog", "log"),
        ("/spec", "spec"),
        ("/spec/", "spec"),
    ],
)
def test_path_to_subresource(path, sub):
    attrs = sa.request_attributes(ALICE, "GET", path, "node-1")
    assert (attrs.resource, attrs.subresource, attrs.name, attrs.api_version, attrs.api_group, attrs.namespace) == (
        "nodes",
        sub,
        "node-1",
        "v1",
        "",
        "",
    )


@pytest.mark.parametrize(
    "method, verb",
    [
        ("GET", "get"),
        ("POST", "create"),
        ("PUT", "update"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
        ("HEAD", ""),
        ("OPTIONS", ""),
    ],
)
def test_http_method_to_verb(method, verb):
    assert sa.http_verb(method) == verb


def test_ttl_cache_expires_and_stays_bounded():
    clock = Clock()
    cache = sa.TTLCache(max_entries=3, clock=clock)
    cache.put("a", 1, 10)
    cache.put("b", 2, 0)  # a zero TTL caches nothing
    assert cache.get("a") == (True, 1) and cache.get("b") == (False, None)
    clock.now += 10
    assert cache.get("a") == (False, None)
    for k in "wxyz":
        cache.put(k, k, 100)
    assert len(cache) == 3 and cache.get("w") == (False, None) and cache.get("z") == (True, "z")


async def test_token_webhook_caches_successes_only_for_the_ttl():
    clock = Clock()
    calls = []

    async def review(path, body):
        calls.append(body["spec"]["token"])
        assert path == sa.TOKEN_REVIEW_PATH and body["kind"] == "TokenReview"
        if body["spec"]["token"] == "t1":
            return {
                "status": {
                    "authenticated": True,
                    "user": {"username": "bob", "uid": "9", "groups": ["g"], "extra": {"k": ["v"]}},
                }
            }
        return {"status": {"authenticated": False}}

    auth = sa.TokenWebhookAuthenticator(review, ttl=120, cache=sa.TTLCache(clock=clock))
    user = await auth(Req({"Authorization": "Bearer t1"}))
    assert (user.name, user.groups, user.uid, dict(user.extra)) == ("bob", ("g",), "9", {"k": ("v",)})
    await auth(Req({"Authorization": "bearer t1"}))
    assert calls == ["t1"]
    clock.now += 121
    await auth(Req({"Authorization": "Bearer t1"}))
    assert calls == ["t1", "t1"]
    with pytest.raises(sa.AuthenticationError, match="invalid bearer token"):
        await auth(Req({"Authorization": "Bearer t2"}))
    with pytest.raises(sa.AuthenticationError):
        await auth(Req({"Authorization": "Bearer t2"}))
    assert calls == ["t1", "t1", "t2", "t2"]  # failures are asked again
    assert await auth(Req({})) is None  # no token: not this authenticator's business
    assert await auth(Req({"Authorization": "Basic eDp5"})) is None


async def test_union_anonymous_only_without_credentials():
    async def review(path, body):
        raise ConnectionError("down")

    token = sa.TokenWebhookAuthenticator(review, ttl=60)
    with_anon = sa.Authenticator(x509_auth=sa.X509Authenticator(lambda r: None), token_auth=token, anonymous=True)
    without = sa.Authenticator(token_auth=token, anonymous=False)
    assert await with_anon(Req()) is ANONYMOUS
    assert await without(Req()) is None
    # A token that cannot be checked is a 401 even with anonymous access on.
    assert await with_anon(Req({"Authorization": "Bearer x"})) is None
    # The x509 authenticator answers first.
    cert_user = sa.Authenticator(
        x509_auth=sa.X509Authenticator(lambda r: _subject("carol", ["a", "b"])), token_auth=token, anonymous=True
    )
    assert await cert_user(Req({"Authorization": "Bearer x"})) == UserInfo("carol", ("a", "b"))


def _subject(cn: str, orgs: list[str]):
    """A subject as the ssl module decodes a verified peer certificate."""
    return tuple(((("organizationName", o),) for o in orgs)) + ((("commonName", cn),),)


async def test_webhook_authorizer_ttls_and_shared_inflight_review():
    clock = Clock()
    asked = []
    gate = asyncio.Event()

    async def review(path, body):
        assert path == sa.SUBJECT_ACCESS_REVIEW_PATH
        spec = body["spec"]
        asked.append((spec["user"], spec["resourceAttributes"]["verb"]))
        await gate.wait()
        return {"status": {"allowed": spec["resourceAttributes"]["verb"] == "get", "reason": "policy"}}

    authz = sa.WebhookAuthorizer(review, authorized_ttl=300, unauthorized_ttl=30, cache=sa.TTLCache(clock=clock))
    get_attrs = sa.request_attributes(ALICE, "GET", "/pods", "n")
    post_attrs = sa.request_attributes(ALICE, "POST", "/run/a/b/c", "n")
    first = asyncio.gather(authz(get_attrs), authz(get_attrs), authz(post_attrs))
    await asyncio.sleep(0)
    gate.set()
    assert await first == [(True, "policy"), (True, "policy"), (False, "policy")]
    assert asked == [("alice", "get"), ("alice", "create")]  # one review for the two identical requests
    clock.now += 31
    await authz(get_attrs)
    await authz(post_attrs)
    assert asked[2:] == [("alice", "create")]  # the denial expired, the allowance did not
    clock.now += 300
    await authz(get_attrs)
    assert asked[3:] == [("alice", "get")]


async def test_webhook_authorizer_failure_is_an_authorization_error_and_not_cached():
    n = 0

    async def review(path, body):
        nonlocal n
        n += 1
        if n == 1:
            raise ConnectionError("connection refused")
        return {"status": {"allowed": False, "denied": True, "reason": "denied by policy"}}

    authz = sa.WebhookAuthorizer(review, authorized_ttl=60, unauthorized_ttl=60)
    attrs = sa.request_attributes(ANONYMOUS, "GET", "/metrics", "n")
    with pytest.raises(sa.AuthorizationError, match="connection refused"):
        await authz(attrs)
    assert await authz(attrs) == (False, "denied by policy")
    body = sa.WebhookAuthorizer.review_body(attrs)
    assert body["spec"]["groups"] == ["system:unauthenticated"]
    assert body["spec"]["resourceAttributes"]["subresource"] == "metrics"


async def test_api_review_needs_a_client():
    review = sa.api_review(lambda: None)
    with pytest.raises(ConnectionError, match="no connection to the API server"):
        await review(sa.TOKEN_REVIEW_PATH, {})
