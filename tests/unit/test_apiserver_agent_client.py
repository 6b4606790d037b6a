"""The API server's client towards node agents (logs, exec, proxy, resource metrics): a
certificate from the cluster CA is verified, one from elsewhere is used unverified and that
finding is kept for a while, one from the cluster CA that is not valid is refused, and a
fallback leaves no connection behind in a reference cycle."""

from __future__ import annotations

import datetime as dt
import gc
import ssl
import types

import aiohttp
import pytest
from aiohttp import web

from apiserver_min.pki import Pki, cert_pem, key_pem, make_ca, new_key, sign_leaf, write_private, write_public
from apiserver_min.server import podlogs
from tests.components import free_port


def _serving(tmp_path, name: str, cert, key) -> ssl.SSLContext:
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    write_public(str(cert_path), cert_pem(cert))
    write_private(str(key_path), key_pem(key))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert_path), str(key_path))
    return ctx


@pytest.fixture
def pki(tmp_path):
    p = Pki(str(tmp_path / "server"))
    p.ensure(["127.0.0.1"])
    return p


class _Server:
    """The parts of the server context the agent client reads."""

    def __init__(self, pki: Pki):
        self.pki = pki
        self.opts = types.SimpleNamespace()


@pytest.fixture
def client(pki):
    return podlogs.AgentClient(_Server(pki))  # type: ignore[arg-type]


class Agent:
    """An HTTPS server on loopback standing in for a node agent; counts its handshakes."""

    def __init__(self, ctx: ssl.SSLContext):
        self.ctx = ctx
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}/metrics/resource"
        self.handshakes = 0
        self.runner: web.AppRunner | None = None

    async def __aenter__(self):
        app = web.Application()

        async def metrics(_request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app.router.add_get("/metrics/resource", metrics)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        self.ctx.set_servername_callback(self._hello)  # once per handshake attempt
        await web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=self.ctx).start()
        return self

    def _hello(self, *_args):
        self.handshakes += 1

    async def __aexit__(self, *exc):
        assert self.runner is not None
        await self.runner.cleanup()


async def _get(client: podlogs.AgentClient, url: str) -> str:
    async with aiohttp.ClientSession() as session:
        resp = await client.open(session, url)
        async with resp:
            return await resp.text()


async def test_a_self_signed_agent_is_reached_unverified_and_the_finding_is_kept(tmp_path, client, monkeypatch):
    ca, ca_key = make_ca("someone-else")
    key = new_key()
    cert = sign_leaf(ca, ca_key, key.public_key(), "node-1", server=True, ips=["127.0.0.1"])
    now = [1000.0]
    monkeypatch.setattr(podlogs.time, "monotonic", lambda: now[0])
    async with Agent(_serving(tmp_path, "agent", cert, key)) as agent:
        assert await _get(client, agent.url) == "ok"
        assert agent.handshakes == 2  # the verified try, then the unverified one
        for _ in range(5):
            assert await _get(client, agent.url) == "ok"
        assert agent.handshakes == 7  # one each: no failed try first
        now[0] += podlogs.VERIFY_AGAIN + 1
        assert await _get(client, agent.url) == "ok"
        assert agent.handshakes == 9  # verified tried again once the finding is old


async def test_an_agent_certificate_from_the_cluster_ca_is_verified(tmp_path, pki, client):
    ca, ca_key = pki.load_ca()
    key = new_key()
    cert = sign_leaf(ca, ca_key, key.public_key(), "node-1", server=True, ips=["127.0.0.1"])
    async with Agent(_serving(tmp_path, "agent", cert, key)) as agent:
        for _ in range(3):
            assert await _get(client, agent.url) == "ok"
        assert agent.handshakes == 3
        assert not client._unverified


async def test_a_cluster_ca_certificate_that_is_not_valid_is_refused(tmp_path, pki, client):
    ca, ca_key = pki.load_ca()
    key = new_key()
    # Issued by the cluster CA for another address: not this agent's.
    cert = sign_leaf(ca, ca_key, key.public_key(), "node-1", server=True, ips=["10.9.9.9"])
    async with Agent(_serving(tmp_path, "agent", cert, key)) as agent:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await _get(client, agent.url)
        assert not client._unverified


async def test_an_expired_cluster_ca_certificate_is_refused(tmp_path, pki, client):
    ca, ca_key = pki.load_ca()
    key = new_key()
    cert = sign_leaf(
        ca, ca_key, key.public_key(), "node-1", server=True, ips=["127.0.0.1"], lifetime=dt.timedelta(minutes=-1)
    )
    async with Agent(_serving(tmp_path, "agent", cert, key)) as agent:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await _get(client, agent.url)


async def test_a_fallback_leaves_no_connection_in_a_reference_cycle(tmp_path, client):
    ca, ca_key = make_ca("someone-else")
    key = new_key()
    cert = sign_leaf(ca, ca_key, key.public_key(), "node-1", server=True, ips=["127.0.0.1"])
    async with Agent(_serving(tmp_path, "agent", cert, key)) as agent:
        gc.collect()
        gc.disable()
        try:
            for _ in range(10):
                client._unverified.clear()  # every round pays the failed verified try
                assert await _get(client, agent.url) == "ok"
            left = sum(isinstance(o, aiohttp.TCPConnector) for o in gc.get_objects())
        finally:
            gc.enable()
        # Before, each failed try kept its session's connector (and the TLS connection) in a
        # cycle through the exception's frames until a full collection: 10 here.
        assert left <= 1


def test_only_the_cluster_ca_verifies_an_agent(pki, client):
    verified, _insecure = client.contexts()
    # Not the system's public CAs: a certificate one of those issued is not "verified" here.
    assert [c["subject"] for c in verified.get_ca_certs()] == [((("commonName", "orch-ca"),),)]
    assert verified.check_hostname and verified.verify_mode == ssl.CERT_REQUIRED


async def test_a_node_that_does_not_answer_leaves_no_session_in_a_reference_cycle(client, pki):
    from apiserver_min.api import names
    from apiserver_min.server import resourcemetrics

    rm = object.__new__(resourcemetrics.ResourceMetrics)
    rm.server = client.server
    rm._failing = set()
    rm.usage = resourcemetrics.UsageStore()
    port = free_port()  # nothing listens there
    node = {
        "metadata": {"name": "gone"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": port}},
        },
    }
    podlogs._clients[client.server] = client
    gc.collect()
    gc.disable()
    try:
        for _ in range(10):
            async with aiohttp.ClientSession() as session:
                assert await rm._scrape(session, node) == ""
        left = sum(isinstance(o, aiohttp.ClientSession) for o in gc.get_objects())
    finally:
        gc.enable()
    assert rm._failing == {"gone"}
    assert left <= 2, left  # 10 before: each round's session held by the failure's frames
