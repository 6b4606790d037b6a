"""The agent's API client: connection configs, rate limit, retries, watch parsing,
the informer, TLS-bootstrap helpers and join's discovery checks.

HTTP tests run against a small aiohttp server on 127.0.0.1 that speaks real TLS
with a test CA (the client never talks plain HTTP), scripted per test.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import ssl
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from agent import join
from agent.certificates import bootstrap as bs
from agent.certificates import rotation as certrotation
from agent.client import rest
from agent.client.config import Connection, OrchconfigError, load_orchconfig, write_orchconfig
from agent.client.informer import Informer
from agent.client.rest import ApiClient, ApiConnectionError, ApiError, TokenBucket, iter_watch_lines
from apiserver_min import pki
from apiserver_min.api import bootstraptoken as bt
from apiserver_min.api import names

# --- certificates ---------------------------------------------------------------------------


@dataclass
class Pki:
    ca_pem: bytes
    ca: x509.Certificate
    ca_key: object
    server_cert: Path
    server_key: Path
    clients: dict = field(default_factory=dict)  # cn -> (cert pem, key pem)

    def client(self, cn: str) -> tuple[bytes, bytes]:
        if cn not in self.clients:
            key = pki.new_key()
            cert = pki.sign_leaf(self.ca, self.ca_key, key.public_key(), cn, ["test"], client=True)
            self.clients[cn] = (pki.cert_pem(cert), pki.key_pem(key))
        return self.clients[cn]


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, ca_key = pki.make_ca("test-ca")
    key = pki.new_key()
    cert = pki.sign_leaf(ca, ca_key, key.public_key(), "server", server=True, dns=["localhost"], ips=["127.0.0.1"])
    (d / "srv.crt").write_bytes(pki.cert_pem(cert))
    (d / "srv.key").write_bytes(pki.key_pem(key))
    return Pki(pki.cert_pem(ca), ca, ca_key, d / "srv.crt", d / "srv.key")


class FakeServer:
    """An HTTPS aiohttp app; records (method, path, query, headers, client CN) per request."""

    def __init__(self, tls: Pki, app: web.Application):
        self.tls = tls
        self.app = app
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.seen: list[dict] = []

        @web.middleware
        async def record(request, handler):
            peer = request.transport.get_extra_info("peercert") if request.transport else None
            cn = ""
            for rdn in (peer or {}).get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
            body = await request.read()
            self.seen.append(
                {
                    "method": request.method,
                    "path": request.path,
                    "query": dict(request.query),
                    "headers": dict(request.headers),
                    "cn": cn,
                    "body": body,
                }
            )
            return await handler(request)

        app.middlewares.append(record)

    async def __aenter__(self) -> "FakeServer":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.tls.server_cert), str(self.tls.server_key))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cadata=self.tls.ca_pem.decode())
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    def conn(self, *, cn: str | None = None, token: str | None = None) -> Connection:
        cert = key = None
        if cn:
            cert, key = self.tls.client(cn)
        return Connection(server=self.url, ca_data=self.tls.ca_pem, cert_data=cert, key_data=key, token=token)


def status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def fast(client: ApiClient) -> ApiClient:
    client.backoff_base = 0.001
    client.backoff_cap = 0.01
    return client


# --- connection configs ----------------------------------------------------------------------


def kubeconfig(cluster: dict, user: dict, *, current: str | None = "ctx", extra_contexts: int = 0) -> dict:
    contexts = [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]
    contexts += [{"name": f"other{i}", "context": {"cluster": "c", "user": "u"}} for i in range(extra_contexts)]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": contexts,
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_yaml(path: Path, doc) -> str:
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return str(path)


def test_load_data_variant(tmp_path, tls):
    cert, key = tls.client("alice")
    path = write_yaml(
        tmp_path / "a.conf",
        kubeconfig(
            {"server": "https://10.0.0.1:6443/", "certificate-authority-data": b64(tls.ca_pem)},
            {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
        ),
    )
    conn = load_orchconfig(path)
    assert conn.server == "https://10.0.0.1:6443"
    assert conn.ca_data == tls.ca_pem and conn.cert_data == cert and conn.key_data == key
    assert conn.token is None and conn.cert_file == "" and conn.has_client_certificate


def test_load_file_variant_resolves_relative_paths_and_token_file(tmp_path, tls):
    cert, key = tls.client("bob")
    sub = tmp_path / "creds"
    sub.mkdir()
    (sub / "ca.crt").write_bytes(tls.ca_pem)
    (sub / "c.pem").write_bytes(cert)
    (sub / "k.pem").write_bytes(key)
    (sub / "token").write_text("abcdef.0123456789abcdef\n")
    path = write_yaml(
        tmp_path / "b.conf",
        kubeconfig(
            {"server": "https://h:1", "certificate-authority": "creds/ca.crt", "tls-server-name": "api"},
            {"client-certificate": "creds/c.pem", "client-key": str(sub / "k.pem"), "tokenFile": "creds/token"},
            current=None,
        ),
    )  # one context: used without current-context
    conn = load_orchconfig(path)
    assert conn.cert_file == str(sub / "c.pem") and conn.key_file == str(sub / "k.pem")
    assert conn.cert_data == cert and conn.token == "abcdef.0123456789abcdef" and conn.server_name == "api"


@pytest.mark.parametrize(
    "cluster,user,extra,expect",
    [
        ({"server": "https://h:1"}, {}, 0, "no certificate-authority or certificate-authority-data"),
        ({"server": "http://h:1", "certificate-authority-data": "x"}, {}, 0, "server: must be an https:// URL"),
        ({"certificate-authority-data": "x"}, {}, 0, "clusters[0].cluster.server: required"),
        (
            {"server": "https://h:1", "certificate-authority-data": "!!"},
            {},
            0,
            "certificate-authority-data: invalid base64",
        ),
        (
            {"server": "https://h:1", "certificate-authority-data": b64(b"nope")},
            {},
            0,
            "certificate-authority-data: does not contain a PEM certificate",
        ),
        (
            {"server": "https://h:1", "insecure-skip-tls-verify": True},
            {},
            0,
            "insecure-skip-tls-verify: is not supported",
        ),
        (
            {"server": "https://h:1", "certificate-authority": "missing.crt"},
            {},
            0,
            "certificate-authority: cannot read",
        ),
        (None, {"client-certificate-data": "CERT"}, 0, "client-key(-data) is missing"),
        (None, {"client-key-data": "KEY"}, 0, "client-certificate(-data) is missing"),
        (
            None,
            {"client-certificate-data": b64(b"x"), "client-key-data": b64(b"y")},
            0,
            "client-certificate-data: does not contain a PEM certificate",
        ),
        (None, {}, 1, "current-context: not set"),
    ],
)
def test_load_errors_name_file_and_field(tmp_path, tls, cluster, user, extra, expect):
    if cluster is None:
        cluster = {"server": "https://h:1", "certificate-authority-data": b64(tls.ca_pem)}
    if user.get("client-certificate-data") == "CERT":
        user = {"client-certificate-data": b64(tls.client("x")[0])}
    if user.get("client-key-data") == "KEY":
        user = {"client-key-data": b64(tls.client("x")[1])}
    path = write_yaml(
        tmp_path / "bad.conf", kubeconfig(cluster, user, current=None if extra else "ctx", extra_contexts=extra)
    )
    with pytest.raises(OrchconfigError) as ei:
        load_orchconfig(path)
    assert str(ei.value).startswith(path) and expect in str(ei.value), str(ei.value)


def test_load_errors_file_level(tmp_path):
    with pytest.raises(OrchconfigError, match="cannot read the connection config"):
        load_orchconfig(str(tmp_path / "none"))
    with pytest.raises(OrchconfigError, match="line 2: invalid YAML"):
        load_orchconfig(write_yaml(tmp_path / "y", "a: [\n"))
    with pytest.raises(OrchconfigError, match="not a connection config"):
        load_orchconfig(write_yaml(tmp_path / "l", "- 1\n"))
    with pytest.raises(OrchconfigError, match="contexts: no entry named 'nope'"):
        load_orchconfig(write_yaml(tmp_path / "n", kubeconfig({}, {}, current="nope")))


def test_write_orchconfig_is_private_and_round_trips(tmp_path, tls):
    cert, key = tls.client("carol")
    (tmp_path / "pair.pem").write_bytes(cert + key)
    out = tmp_path / "sub" / "agent.orchconfig"
    write_orchconfig(
        str(out),
        server="https://1.2.3.4:6443",
        ca_data=tls.ca_pem,
        cert_file=str(tmp_path / "pair.pem"),
        key_file=str(tmp_path / "pair.pem"),
    )
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = yaml.safe_load(out.read_text())
    assert doc["users"][0]["name"] == "default-auth" and doc["kind"] == "Config"
    conn = load_orchconfig(str(out))
    assert conn.server == "https://1.2.3.4:6443" and conn.ca_data == tls.ca_pem
    assert conn.cert_file == conn.key_file == str(tmp_path / "pair.pem") and conn.has_client_certificate
    write_orchconfig(
        str(out),
        server="https://h:1",
        ca_data=tls.ca_pem,
        token="abcdef.0123456789abcdef",
        user="system:bootstrap:abcdef",
    )
    conn = load_orchconfig(str(out))
    assert conn.token == "abcdef.0123456789abcdef" and not conn.has_client_certificate


# --- the token bucket -------------------------------------------------------------------------


def test_token_bucket_burst_then_rate():
    now = [100.0]
    b = TokenBucket(qps=2, burst=3, clock=lambda: now[0])
    assert [b.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.reserve() == pytest.approx(0.5)  # the 4th waits one token at 2/s
    assert b.reserve() == pytest.approx(1.0)  # reservations queue up in order
    now[0] += 10  # long idle: refills to burst only
    assert [b.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.reserve() == pytest.approx(0.5)
    with pytest.raises(ValueError):
        TokenBucket(0, 1)


async def test_token_bucket_cancelled_waiter_refunds():
    b = TokenBucket(qps=1, burst=1)
    await b.acquire()
    waiter = asyncio.create_task(b.acquire())
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert b.tokens > -1.0  # the cancelled reservation was given back


# --- requests, errors and retries ---------------------------------------------------------------


def scripted(responses: list, *, path: str = "/api/v1/things") -> web.Application:
    """Answers ``responses`` in order (status, body dict, headers), then 200 {"ok": n}."""
    app = web.Application()
    calls = {"n": 0}

    async def handler(request):
        i = calls["n"]
        calls["n"] += 1
        if i < len(responses):
            code, body, headers = responses[i]
            return web.json_response(body, status=code, headers=headers)
        return web.json_response({"ok": i, "ct": request.headers.get("Content-Type", "")})

    app.router.add_route("*", path, handler)
    return app


async def test_retries_429_with_retry_after_and_5xx_for_get(tls):
    app = scripted(
        [
            (429, status(429, "TooManyRequests", "slow down"), {"Retry-After": "0"}),
            (500, status(500, "InternalError", "boom"), {}),
            (503, {"not": "a status"}, {}),
        ]
    )
    async with FakeServer(tls, app) as srv:
        client = fast(ApiClient(srv.conn(cn="node"), user_agent="ua/1"))
        try:
            assert (await client.get("/api/v1/things"))["ok"] == 3
        finally:
            await client.close()
    assert len(srv.seen) == 4
    assert all(s["cn"] == "node" and s["headers"]["User-Agent"] == "ua/1" for s in srv.seen)


async def test_post_not_retried_on_5xx_but_on_429(tls):
    app = scripted([(500, status(500, "InternalError", "boom"), {})] * 2)
    async with FakeServer(tls, app) as srv:
        client = fast(ApiClient(srv.conn()))
        try:
            with pytest.raises(ApiError) as ei:
                await client.create("/api/v1/things", {"a": 1})
            assert (ei.value.status, ei.value.reason, ei.value.message) == (500, "InternalError", "boom")
            assert len(srv.seen) == 1
            # retry=True makes the caller's POST retryable: 500, then 200.
            assert (await client.request("POST", "/api/v1/things", body={"a": 1}, retry=True))["ok"] == 2
        finally:
            await client.close()
    app = scripted([(429, status(429, "TooManyRequests", "x"), {"Retry-After": "0"})])
    async with FakeServer(tls, app) as srv:
        client = fast(ApiClient(srv.conn()))
        try:
            assert (await client.create("/api/v1/things", {"a": 1}))["ok"] == 1
        finally:
            await client.close()
    assert len(srv.seen) == 2 and srv.seen[0]["body"] == b'{"a":1}'


async def test_retries_give_up_and_errors_carry_status(tls):
    app = scripted([(503, status(503, "ServiceUnavailable", "later"), {})] * 10)
    async with FakeServer(tls, app) as srv:
        client = fast(ApiClient(srv.conn(), max_retries=2))
        try:
            with pytest.raises(ApiError) as ei:
                await client.get("/api/v1/things")
            assert ei.value.status == 503 and len(srv.seen) == 3
            with pytest.raises(ApiError) as ei:
                await client.get("/api/v1/things", params={"x": "1"})
            assert ei.value.status == 503
        finally:
            await client.close()


async def test_connection_refused_is_retried_then_reported(tls):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    conn = Connection(server=f"https://127.0.0.1:{port}", ca_data=tls.ca_pem, cert_data=None, key_data=None, token=None)
    client = fast(ApiClient(conn, max_retries=3))
    try:
        with pytest.raises(ApiConnectionError) as ei:
            await client.create("/api/v1/things", {})  # unsent: retried even for POST
        assert client.requests == 4 and f"127.0.0.1:{port}" in str(ei.value)
        assert isinstance(ei.value, OSError)
    finally:
        await client.close()


async def test_wrong_ca_is_a_clear_error_without_retries(tls):
    other_ca, _ = pki.make_ca("other")
    async with FakeServer(tls, scripted([])) as srv:
        conn = Connection(server=srv.url, ca_data=pki.cert_pem(other_ca), cert_data=None, key_data=None, token=None)
        client = fast(ApiClient(conn))
        try:
            with pytest.raises(ApiConnectionError, match="does not verify with the cluster CA"):
                await client.get("/api/v1/things")
            assert client.requests == 1
        finally:
            await client.close()


async def test_token_patch_types_and_protobuf(tls):
    async with FakeServer(tls, scripted([])) as srv:
        client = ApiClient(srv.conn(token="abc.def"), content_type=names.MEDIA_PROTOBUF)
        try:
            assert client.content_type == names.MEDIA_PROTOBUF
            for kind, media in (
                ("merge", names.MEDIA_MERGE_PATCH),
                ("json", names.MEDIA_JSON_PATCH),
                ("strategic", names.MEDIA_STRATEGIC_MERGE_PATCH),
            ):
                reply = await client.patch("/api/v1/things", {"a": 1}, patch_type=kind)
                assert reply["ct"] == media
            await client.update("/api/v1/things", {"b": 2})
            await client.delete("/api/v1/things", body={"gracePeriodSeconds": 0})
            with pytest.raises(ValueError, match="unknown patch type"):
                await client.patch("/api/v1/things", {}, patch_type="xml")
        finally:
            await client.close()
    assert all(s["headers"]["Authorization"] == "Bearer abc.def" for s in srv.seen)
    assert srv.seen[3]["headers"]["Content-Type"] == names.MEDIA_JSON
    assert [s["method"] for s in srv.seen] == ["PATCH"] * 3 + ["PUT", "DELETE"]
    with pytest.raises(ValueError, match="unsupported content type"):
        ApiClient(srv.conn(), content_type="text/plain")


async def test_rate_limited_false_skips_the_bucket(tls):
    class Counting:
        calls = 0

        async def acquire(self):
            Counting.calls += 1

    async with FakeServer(tls, scripted([])) as srv:
        client = ApiClient(srv.conn(), qps=1, burst=1)
        client.limiter = Counting()
        try:
            await client.get("/api/v1/things")
            await client.create("/api/v1/things", {}, rate_limited=False)
            await client.update("/api/v1/things", {}, rate_limited=False)
            await client.patch("/api/v1/things", {}, rate_limited=False)
        finally:
            await client.close()
    assert Counting.calls == 1
    assert ApiClient(srv.conn(), qps=-1).limiter is None


async def test_one_kept_alive_pool_for_requests_and_watches(tls):
    """Every TCP connection is a TLS handshake for the API server: a burst of requests
    under the token bucket shares REQUEST_CONNECTIONS connections, heartbeats go beside
    them, and a finished watch's connection serves the next request."""
    app = web.Application()
    ports: list[tuple[str, int]] = []
    resumed: list[bool] = []

    async def handler(request):
        ports.append((request.query.get("what", ""), request.transport.get_extra_info("peername")[1]))
        resumed.append(request.transport.get_extra_info("ssl_object").session_reused)
        if request.query.get("watch") == "true":
            resp = web.StreamResponse()
            resp.content_type = "application/json"
            await resp.prepare(request)
            await resp.write(b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}\n')
            await resp.write_eof()
            return resp
        await asyncio.sleep(0.05)
        return web.json_response({})

    app.router.add_get("/api/v1/things", handler)
    async with FakeServer(tls, app) as srv:
        client = ApiClient(srv.conn(cn="system:node:n1"), qps=1000, burst=1000)
        try:
            await client.get("/api/v1/things", params={"what": "first"})
            await asyncio.gather(*(client.get("/api/v1/things", params={"what": "burst"}) for _ in range(8)))
            burst = {p for what, p in ports if what == "burst"}
            assert len(burst) == rest.REQUEST_CONNECTIONS
            # A heartbeat does not wait for a slot: it opens its own connection.
            slow = [asyncio.create_task(client.get("/api/v1/things", params={"what": "x"})) for _ in range(2)]
            await asyncio.sleep(0.01)
            await client.get("/api/v1/things", params={"what": "beat"}, rate_limited=False)
            await asyncio.gather(*slow)
            async for _ in client.watch("/api/v1/things", params={"what": "watch"}):
                pass
            await client.get("/api/v1/things", params={"what": "after"})
        finally:
            await client.close()
    watch_port = next(p for what, p in ports if what == "watch")
    assert watch_port in {p for what, p in ports if what != "watch"}  # the watch reused a pooled connection
    assert len({p for _, p in ports}) == rest.REQUEST_CONNECTIONS + 1
    assert rest.KEEPALIVE_TIMEOUT > 10  # longer than the node status and lease periods
    # Every connection after the first resumed the TLS session of an earlier one (no
    # certificate signature and client-certificate check for the server).
    first = {p: r for (_, p), r in reversed(list(zip(ports, resumed)))}
    assert sorted(first.values()) == [False] + [True] * (len(first) - 1)
    assert {seen["cn"] for seen in srv.seen} == {"system:node:n1"}  # the server still knows who asks


async def test_tls_sessions_resume_after_concurrent_handshakes(tls):
    """Handshakes still in progress have no session to offer (asking for one fails):
    concurrent new connections just make full handshakes, later ones resume."""
    app = web.Application()
    resumed: list[bool] = []

    async def handler(request):
        resumed.append(request.transport.get_extra_info("ssl_object").session_reused)
        await asyncio.sleep(0.05)
        return web.json_response({})

    app.router.add_get("/api/v1/things", handler)
    async with FakeServer(tls, app) as srv:
        client = ApiClient(srv.conn(cn="system:node:n1"), qps=-1)
        try:
            await asyncio.gather(*(client.get("/api/v1/things") for _ in range(4)))
            await client.close()  # the pool goes, the client's TLS context and its sessions stay
            await client.get("/api/v1/things")
        finally:
            await client.close()
    assert len(resumed) == 5 and resumed[-1] is True


async def test_reload_switches_client_certificate(tls):
    async with FakeServer(tls, scripted([])) as srv:
        client = ApiClient(srv.conn(cn="system:node:old"))
        try:
            await client.get("/api/v1/things")
            client.reload(srv.conn(cn="system:node:new"))
            await client.get("/api/v1/things")
        finally:
            await client.close()
    assert [s["cn"] for s in srv.seen] == ["system:node:old", "system:node:new"]


# --- watch ------------------------------------------------------------------------------------


async def _chunks(parts):
    for p in parts:
        yield p


async def test_iter_watch_lines_reassembles_split_and_joined_documents():
    big = "x" * 300_000
    parts = [
        b'{"type":"ADDED","object":{"a":1}}\n{"type":"MOD',
        b'IFIED","object":{"b":"' + big.encode(),
        b'"}}\n\n',
        b'{"type":"DELETED","object":{}}',
    ]
    out = [ev async for ev in iter_watch_lines(_chunks(parts))]
    assert [e["type"] for e in out] == ["ADDED", "MODIFIED", "DELETED"] and len(out[1]["object"]["b"]) == 300_000
    with pytest.raises(ApiConnectionError, match="malformed watch event"):
        [ev async for ev in iter_watch_lines(_chunks([b"{nope}\n"]))]
    with pytest.raises(ApiConnectionError, match="needs type and object"):
        [ev async for ev in iter_watch_lines(_chunks([b'{"type":"ADDED"}\n']))]


def obj(name: str, rv: int, ns: str = "default", **extra) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)}, **extra}


class FakeCollection:
    """A scripted list + watch API for one collection."""

    def __init__(self):
        self.lists: list[dict] = []  # replies to successive lists
        self.watches: list[list] = []  # per watch: list of events, or ("status", code) to answer
        self.watch_params: list[dict] = []
        self.list_params: list[dict] = []
        self.hang = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self.handle)
        return app

    async def handle(self, request):
        if request.query.get("watch") == "true":
            self.watch_params.append(dict(request.query))
            script = self.watches.pop(0) if self.watches else None
            if isinstance(script, tuple):
                return web.json_response(status(script[1], "Expired", "gone"), status=script[1])
            resp = web.StreamResponse()
            resp.content_type = "application/json"
            await resp.prepare(request)
            if script is None:
                await self.hang.wait()
                return resp
            for ev in script:
                await resp.write(bytes(ev) if isinstance(ev, bytes) else (__import__("json").dumps(ev) + "\n").encode())
            await resp.write_eof()
            return resp
        self.list_params.append(dict(request.query))
        reply = self.lists.pop(0)
        return web.json_response(reply)


async def test_watch_error_event_raises_api_error_410(tls):
    fc = FakeCollection()
    fc.watches = [
        [
            {"type": "ADDED", "object": obj("a", 5)},
            {"type": "ERROR", "object": status(410, "Expired", "too old resource version: 1 (7)")},
        ],
        ("status", 410),
    ]
    async with FakeServer(tls, fc.app()) as srv:
        client = ApiClient(srv.conn())
        try:
            seen = []
            with pytest.raises(ApiError) as ei:
                async for t, o in client.watch("/api/v1/pods", params={"resourceVersion": "1"}):
                    seen.append((t, o["metadata"]["name"]))
            assert seen == [("ADDED", "a")] and ei.value.status == 410 and "too old" in ei.value.message
            with pytest.raises(ApiError) as ei:
                async for _ in client.watch("/api/v1/pods", params={"resourceVersion": "1"}):
                    pass
            assert ei.value.status == 410
        finally:
            fc.hang.set()
            await client.close()
    assert fc.watch_params[0]["watch"] == "true" and fc.watch_params[0]["resourceVersion"] == "1"


async def test_informer_lists_watches_reconnects_and_relists_on_410(tls):
    fc = FakeCollection()
    fc.lists = [
        {"metadata": {"resourceVersion": "10", "continue": "page2"}, "items": [obj("a", 3)]},
        {"metadata": {"resourceVersion": "10"}, "items": [obj("b", 4)]},
        # after 410: a relist; b is gone, d is new, a changed, c as it was
        {"metadata": {"resourceVersion": "40"}, "items": [obj("a", 30), obj("c", 17), obj("d", 35)]},
    ]
    fc.watches = [
        [
            {"type": "ADDED", "object": obj("c", 11)},
            {"type": "MODIFIED", "object": obj("a", 12)},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
        ],  # ends normally
        [{"type": "DELETED", "object": obj("c", 16)}, {"type": "ADDED", "object": obj("c", 17)}],
        ("status", 410),
    ]
    events = []
    async with FakeServer(tls, fc.app()) as srv:
        client = ApiClient(srv.conn())
        inf = Informer(client, "/api/v1/pods", params={"fieldSelector": "spec.nodeName=n1"}, name="pods")
        inf.page_size = 1
        inf.add_handler(
            on_add=lambda o: events.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: events.append(
                ("update", new["metadata"]["name"], old["metadata"]["resourceVersion"])
            ),
            on_delete=lambda o: events.append(("delete", o["metadata"]["name"])),
        )

        async def failing(o):
            raise RuntimeError("handler bug")  # logged, does not stop the informer

        inf.add_handler(on_add=failing)
        task = asyncio.create_task(inf.run())
        try:
            assert await inf.wait_synced(5)
            for _ in range(200):
                if len(fc.watch_params) >= 4:
                    break
                await asyncio.sleep(0.02)
            assert sorted(inf.cache) == ["default/a", "default/c", "default/d"]
            assert inf.cache["default/a"]["metadata"]["resourceVersion"] == "30"
            assert inf.resource_version == "40" and inf.lists == 2
        finally:
            task.cancel()
            fc.hang.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.close()
    assert fc.list_params[0]["limit"] == "1" and fc.list_params[1]["continue"] == "page2"
    assert all(p["fieldSelector"] == "spec.nodeName=n1" for p in fc.list_params + fc.watch_params)
    assert [p["resourceVersion"] for p in fc.watch_params] == ["10", "15", "17", "40"]
    assert all(p["allowWatchBookmarks"] == "true" and 300 <= int(p["timeoutSeconds"]) <= 600 for p in fc.watch_params)
    assert events == [
        ("add", "a"),
        ("add", "b"),
        ("add", "c"),
        ("update", "a", "3"),
        ("delete", "c"),
        ("add", "c"),
        ("update", "a", "12"),
        ("add", "d"),
        ("delete", "b"),
    ]


async def test_informer_wait_synced_times_out_and_backs_off_on_errors(tls):
    app = scripted([(503, status(503, "ServiceUnavailable", "x"), {})] * 100, path="/api/v1/pods")
    async with FakeServer(tls, app) as srv:
        client = fast(ApiClient(srv.conn(), max_retries=0))
        inf = Informer(client, "/api/v1/pods")
        inf.backoff_base = 0.01
        task = asyncio.create_task(inf.run())
        try:
            assert await inf.wait_synced(0.3) is False and not inf.synced
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
    assert len(srv.seen) >= 2


# --- TLS bootstrap helpers ---------------------------------------------------------------------


def test_csr_subject_usages_and_object():
    key = bs.new_private_key()
    pem = bs.make_csr(key, "node-1", dns=["node-1", "node-1"], ips=["10.0.0.5"])
    csr = x509.load_pem_x509_csr(pem)
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-1"
    assert csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["node-1"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    o = bs.csr_object("node-csr-abc", pem, names.SIGNER_NODE_AGENT_CLIENT, bs.CLIENT_USAGES)
    assert o["apiVersion"] == "certificates.orch.io/v1" and o["kind"] == "CertificateSigningRequest"
    assert o["spec"]["usages"] == ["digital signature", "key encipherment", "client auth"]
    assert o["spec"]["signerName"] == "orch.io/apiserver-client-node-agent"
    assert base64.b64decode(o["spec"]["request"]) == pem
    assert bs.SERVING_USAGES == ("digital signature", "key encipherment", "server auth")


def signed_for(tls: Pki, csr_pem: bytes, lifetime=dt.timedelta(hours=1)) -> bytes:
    csr = x509.load_pem_x509_csr(csr_pem)
    cn = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    return pki.cert_pem(
        pki.sign_leaf(tls.ca, tls.ca_key, csr.public_key(), cn, ["system:nodes"], client=True, lifetime=lifetime)
    )


def test_pair_store_layout_and_reuse(tmp_path, tls):
    store = bs.PairStore(str(tmp_path / "pki"), names.AGENT_CLIENT_CERT_PREFIX)
    assert store.load() is None
    key = store.pending_key()
    assert stat.S_IMODE(os.stat(store.pending_key_path).st_mode) == 0o600
    again = store.pending_key()  # a restart reuses the pending key
    assert again.public_key().public_numbers() == key.public_key().public_numbers()
    cert = signed_for(tls, bs.make_csr(key, "n1"))
    link = store.update(cert, bs.private_key_pem(key))
    assert link == str(tmp_path / "pki" / "orch-agent-client-current.pem") and os.path.islink(link)
    target = os.readlink(link)
    assert os.path.basename(target).startswith("orch-agent-client-20") and os.path.isabs(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    loaded, key_pem = store.load()
    assert loaded.serial_number == x509.load_pem_x509_certificate(cert).serial_number
    assert b"PRIVATE KEY" in key_pem
    # A second pair in the same second gets its own file; the link moves.
    key2 = bs.new_private_key()
    store.update(signed_for(tls, bs.make_csr(key2, "n1")), bs.private_key_pem(key2))
    assert os.readlink(link) != target and os.path.exists(target)
    # A file whose key does not match is not used.
    Path(os.readlink(link)).write_bytes(cert + bs.private_key_pem(key2))
    assert store.load() is None


def test_rotation_deadline_is_70_to_90_percent():
    import random

    key = pki.new_key()
    ca, ca_key = pki.make_ca()
    cert = pki.sign_leaf(ca, ca_key, key.public_key(), "x", client=True, lifetime=dt.timedelta(days=10))
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    rng = random.Random(7)
    fractions = [(certrotation.rotation_deadline(cert, rng) - cert.not_valid_before_utc) / life for _ in range(200)]
    assert all(0.7 <= f <= 0.9 for f in fractions) and max(fractions) - min(fractions) > 0.1


class FakeCsrApi:
    """certificatesigningrequests: create, get, and a watch that plays ``updates``."""

    def __init__(self, tls: Pki, mode: str):
        self.tls, self.mode = tls, mode
        self.created: dict | None = None
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(bs.CSR_PATH, self.create)
        app.router.add_get(bs.CSR_PATH, self.watch)
        app.router.add_get(bs.CSR_PATH + "/{name}", self.get)
        return app

    async def create(self, request):
        body = await request.json()
        body["metadata"]["resourceVersion"] = "5"
        self.created = body
        return web.json_response(body, status=201)

    async def get(self, request):
        return web.json_response(self.created)

    def state(self) -> dict:
        o = dict(self.created)
        o["metadata"] = dict(o["metadata"], resourceVersion="6")
        conds = []
        if self.mode in ("approved", "issued"):
            conds.append({"type": "Approved", "status": "True", "reason": "AutoApproved"})
        if self.mode == "denied":
            conds.append({"type": "Denied", "status": "True", "reason": "NotMyNode", "message": "go away"})
        if self.mode == "failed":
            conds += [
                {"type": "Approved", "status": "True"},
                {"type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": "bad usages"},
            ]
        st = {"conditions": conds}
        if self.mode == "issued":
            pem = base64.b64decode(o["spec"]["request"])
            st["certificate"] = base64.b64encode(signed_for(self.tls, pem)).decode()
        o["status"] = st
        return o

    async def watch(self, request):
        assert request.query["fieldSelector"] == f"metadata.name={self.created['metadata']['name']}"
        resp = web.StreamResponse()
        await resp.prepare(request)
        import json as _json

        await resp.write((_json.dumps({"type": "MODIFIED", "object": self.state()}) + "\n").encode())
        if self.mode == "issued":
            await resp.write_eof()
            return resp
        await self.release.wait()
        return resp


@pytest.mark.parametrize(
    "mode,expect",
    [
        ("pending", "missing approval (no Approved condition"),
        ("approved", "missing signing (it is approved but status.certificate is empty"),
        ("denied", "was denied: reason NotMyNode: go away"),
        ("failed", "was failed: reason SignerValidationFailure: bad usages"),
    ],
)
async def test_request_certificate_reports_what_is_missing(tls, mode, expect):
    api = FakeCsrApi(tls, mode)
    async with FakeServer(tls, api.app()) as srv:
        client = ApiClient(srv.conn(token="abcdef.0123456789abcdef"))
        try:
            with pytest.raises(bs.BootstrapError) as ei:
                await bs.request_certificate(
                    client,
                    bs.make_csr(bs.new_private_key(), "n1"),
                    signer=names.SIGNER_NODE_AGENT_CLIENT,
                    usages=bs.CLIENT_USAGES,
                    timeout=0.5,
                )
        finally:
            api.release.set()
            await client.close()
    assert expect in str(ei.value) and api.created["metadata"]["name"] in str(ei.value)
    assert api.created["metadata"]["name"].startswith("node-csr-")


async def test_ensure_client_certificate_bootstraps_then_reuses(tls, tmp_path):
    from agent.config import from_argv

    api = FakeCsrApi(tls, "issued")
    async with FakeServer(tls, api.app()) as srv:
        boot = tmp_path / "boot.orchconfig"
        write_orchconfig(str(boot), server=srv.url, ca_data=tls.ca_pem, token="abcdef.0123456789abcdef")
        agent_conf = tmp_path / "agent.orchconfig"
        cfg = from_argv(
            ["--root-dir", str(tmp_path), "--orchconfig", str(agent_conf), "--bootstrap-orchconfig", str(boot)]
        )
        assert await bs.ensure_client_certificate(cfg, "node-1", timeout=5) == str(agent_conf)
        conn = load_orchconfig(str(agent_conf))
        link = str(tmp_path / "pki" / "orch-agent-client-current.pem")
        assert conn.cert_file == conn.key_file == link and conn.server == srv.url
        cert = x509.load_pem_x509_certificate(conn.cert_data)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-1"
        assert not os.path.exists(tmp_path / "pki" / "orch-agent-client.key.tmp")
        posts = [s for s in srv.seen if s["method"] == "POST"]
        assert len(posts) == 1 and posts[0]["headers"]["Authorization"] == "Bearer abcdef.0123456789abcdef"
        # Valid config: used as it is. Config gone but pair present: the pair is reused.
        assert await bs.ensure_client_certificate(cfg, "node-1") == str(agent_conf)
        agent_conf.unlink()
        assert await bs.ensure_client_certificate(cfg, "node-1") == str(agent_conf)
        assert len([s for s in srv.seen if s["method"] == "POST"]) == 1
    # Nothing to bootstrap with: a clear error.
    cfg2 = from_argv(["--root-dir", str(tmp_path / "x"), "--orchconfig", str(tmp_path / "none.orchconfig")])
    with pytest.raises(bs.BootstrapError, match="does not exist, and no --bootstrap-orchconfig"):
        await bs.ensure_client_certificate(cfg2, "node-1")


async def test_expired_client_certificate_triggers_bootstrap(tls, tmp_path):
    from agent.config import from_argv

    key = pki.new_key()
    ca_old = pki.sign_leaf(
        tls.ca, tls.ca_key, key.public_key(), "system:node:n", client=True, lifetime=dt.timedelta(seconds=-1)
    )
    (tmp_path / "old.pem").write_bytes(pki.cert_pem(ca_old) + pki.key_pem(key))
    agent_conf = tmp_path / "agent.orchconfig"
    write_orchconfig(
        str(agent_conf),
        server="https://127.0.0.1:1",
        ca_data=tls.ca_pem,
        cert_file=str(tmp_path / "old.pem"),
        key_file=str(tmp_path / "old.pem"),
    )
    cfg = from_argv(["--root-dir", str(tmp_path), "--orchconfig", str(agent_conf)])
    with pytest.raises(bs.BootstrapError, match="client certificate is not valid now"):
        await bs.ensure_client_certificate(cfg, "n")


# --- join ---------------------------------------------------------------------------------------


def test_parse_join_args_splits_agent_flags_and_checks_values():
    tok = "abcdef.0123456789abcdef"
    pin = "sha256:" + "a" * 64
    o = join.parse_join_args(
        [
            "--server",
            "https://h:6443",
            f"--token={tok}",
            "--discovery-token-ca-cert-hash",
            pin.upper().replace("SHA256", "sha256"),
            "--v=2",
            "--root-dir",
            "/r",
            "--install",
        ]
    )
    assert o.server == "https://h:6443" and str(o.token) == tok and o.ca_hashes == [pin] and o.install
    assert o.agent_args == ["--v=2", "--root-dir", "/r"]
    for argv, msg in [
        (["--token", tok, "--discovery-token-ca-cert-hash", pin], "missing required flag: --server"),
        (["--server", "http://h", "--token", tok], "--server must be an https:// URL"),
        (["--server", "https://h", "--token", "short.x", "--discovery-token-ca-cert-hash", pin], "--token:"),
        (
            ["--server", "https://h", "--token", tok, "--discovery-token-ca-cert-hash", "md5:00"],
            "--discovery-token-ca-cert-hash:",
        ),
        (["--server"], "flag needs an argument: --server"),
    ]:
        with pytest.raises(join.JoinError, match=msg.replace("(", r"\(").replace("+", r"\+")):
            join.parse_join_args(argv)
    assert join.parse_join_args(["-h"]).help


def test_verify_cluster_info_signature_and_pin(tls):
    token = bt.parse_token("abcdef.0123456789abcdef")
    content = bt.cluster_info_kubeconfig("https://10.1.1.1:6443", tls.ca_pem)
    cm = {"data": {"kubeconfig": content, "jws-kubeconfig-abcdef": bt.sign_detached(content, token)}}
    good = bt.ca_cert_hash(tls.ca)
    server, ca, _ = join.verify_cluster_info(cm, token, [good])
    assert server == "https://10.1.1.1:6443" and ca == tls.ca_pem
    with pytest.raises(join.DiscoveryError, match="cluster-info JWS signature does not verify with the given token"):
        join.verify_cluster_info(cm, bt.parse_token("abcdef.ffffffffffffffff"), [good])
    forged = dict(cm["data"], kubeconfig=content.replace("10.1.1.1", "10.6.6.6"))
    with pytest.raises(join.DiscoveryError, match="does not verify"):
        join.verify_cluster_info({"data": forged}, token, [good])
    wrong = "sha256:" + "0" * 64
    with pytest.raises(join.DiscoveryError) as ei:
        join.verify_cluster_info(cm, token, [wrong])
    assert str(ei.value) == f"the cluster CA does not match --discovery-token-ca-cert-hash: got {good}"
    with pytest.raises(join.JoinError, match="no signature jws-kubeconfig-abcdef"):
        join.verify_cluster_info({"data": {"kubeconfig": content}}, token, [good])
    # Only HS256: a header naming another algorithm is refused.
    header = bt.b64url(b'{"alg":"none","kid":"abcdef"}')
    with pytest.raises(join.DiscoveryError, match="only HS256"):
        join.verify_cluster_info(
            {"data": {"kubeconfig": content, "jws-kubeconfig-abcdef": f"{header}.."}}, token, [good]
        )


def test_update_env_file_keeps_other_flags(tmp_path):
    env = tmp_path / "orch-agent.env"
    env.write_text(
        '# comment\nOTHER=1\nORCH_AGENT_ARGS="--config=/etc/orch/agent/config.yaml --orchconfig=/old --v=1"\n'
    )
    join.update_env_file(str(env), ["--orchconfig=/new", "--bootstrap-orchconfig=/b", "--v=3"])
    text = env.read_text()
    assert text.splitlines()[:2] == ["# comment", "OTHER=1"]
    assert (
        'ORCH_AGENT_ARGS="--config=/etc/orch/agent/config.yaml --orchconfig=/new --bootstrap-orchconfig=/b --v=3"'
        in text
    )
    with pytest.raises(join.JoinError, match="white space"):
        join.update_env_file(str(env), ["--node-labels=a b"])
    fresh = tmp_path / "new.env"
    join.update_env_file(str(fresh), ["--orchconfig=/x"])
    assert fresh.read_text() == 'ORCH_AGENT_ARGS="--orchconfig=/x"\n'


def test_private_key_pem_is_loadable():
    key = bs.new_private_key()
    assert (
        serialization.load_pem_private_key(bs.private_key_pem(key), None).public_key().public_numbers()
        == key.public_key().public_numbers()
    )


async def test_rotation_loop_renews_at_the_deadline_and_reloads(tls, tmp_path):
    from agent.config import from_argv

    api = FakeCsrApi(tls, "issued")
    async with FakeServer(tls, api.app()) as srv:
        boot = tmp_path / "boot.orchconfig"
        write_orchconfig(str(boot), server=srv.url, ca_data=tls.ca_pem, token="abcdef.0123456789abcdef")
        cfg = from_argv(
            [
                "--root-dir",
                str(tmp_path),
                "--orchconfig",
                str(tmp_path / "agent.orchconfig"),
                "--bootstrap-orchconfig",
                str(boot),
                "--rotate-certificates",
            ]
        )
        client = ApiClient(load_orchconfig(await bs.ensure_client_certificate(cfg, "n1", timeout=5)))
        first = x509.load_pem_x509_certificate(client.conn.cert_data)
        # A clock past the first deadline: renew at once; then the loop sleeps toward the next.
        later = first.not_valid_before_utc + (first.not_valid_after_utc - first.not_valid_before_utc) * 0.95
        slept: list[float] = []

        class Stop(Exception):
            pass

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            raise Stop

        try:
            # A clock that stays late: the new certificate is due at once, so the loop
            # pauses instead of requesting again and again.
            with pytest.raises(Stop):
                await certrotation.rotate_client_certificate(cfg, "n1", client, now=lambda: later, sleep=sleep)
            assert slept == [certrotation.MIN_ROTATION_INTERVAL]
            assert [s["method"] for s in srv.seen].count("POST") == 2
            second_data = client.conn.cert_data
            assert x509.load_pem_x509_certificate(second_data).serial_number != first.serial_number
            # A clock that is late only for the current certificate: renew once, then
            # sleep toward the next deadline.
            slept.clear()
            with pytest.raises(Stop):
                await certrotation.rotate_client_certificate(
                    cfg,
                    "n1",
                    client,
                    sleep=sleep,
                    now=lambda: later if client.conn.cert_data == second_data else dt.datetime.now(dt.timezone.utc),
                )
            third = x509.load_pem_x509_certificate(client.conn.cert_data)
            assert client.conn.cert_file == str(tmp_path / "pki" / "orch-agent-client-current.pem")
            life = (third.not_valid_after_utc - third.not_valid_before_utc).total_seconds()
            elapsed = (dt.datetime.now(dt.timezone.utc) - third.not_valid_before_utc).total_seconds()
            assert 0.7 * life - elapsed - 5 <= slept[0] <= min(3600.0, 0.9 * life - elapsed + 5)
            posts = [s for s in srv.seen if s["method"] == "POST"]
            assert len(posts) == 3
            # renewals are made with the node's certificate, not the bootstrap token
            assert all("Authorization" not in p["headers"] and p["cn"] == "system:node:n1" for p in posts[1:])
        finally:
            await client.close()
