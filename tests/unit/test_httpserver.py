"""The API server's HTTP layer under the handlers: aiohttp's low-level server with one
handler (server/httpserver.py), its Expect handling and response-start hook, and the
Audit-ID generator every request uses."""

from __future__ import annotations

import asyncio
import uuid

from aiohttp import web

from apiserver_min.api import names
from apiserver_min.audit.event import audit_id, new_audit_id
from apiserver_min.server import auditing
from apiserver_min.server.httpserver import ApiRequest, expect_continue, make_server


def test_new_audit_ids_are_random_version_4_uuids():
    ids = {new_audit_id() for _ in range(600)}  # over more than one batch
    assert len(ids) == 600
    for text in ids:
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 4 and u.variant == uuid.RFC_4122
    assert audit_id("client-given-1") == "client-given-1"
    assert audit_id("bad id with spaces") != "bad id with spaces"


async def _exchange(port: int, raw: bytes) -> bytes:
    """One request on its own connection (Connection: close): all the server sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_one_handler_serves_every_path_with_the_hook_and_expect():
    seen: list[tuple[str, str, bool]] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        assert isinstance(request, ApiRequest)
        request[auditing.AUDIT_ID_KEY] = "id-1"
        assert request.get("absent") is None and request.get(auditing.AUDIT_ID_KEY) == "id-1"
        if "Expect" in request.headers:
            await expect_continue(request)
        body = await request.read()
        seen.append((request.method, request.path, bool(body)))
        return web.Response(text="ok")

    server = make_server(handler, 1024, access_log=None)
    runner = web.ServerRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        plain = await _exchange(port, b"GET /any/path/at/all HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert plain.startswith(b"HTTP/1.1 200") and f"\r\n{names.AUDIT_ID_HEADER}: id-1\r\n".encode() in plain
        cont = await _exchange(
            port,
            b"POST /apis/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
            b"Connection: close\r\n\r\n{}",
        )
        assert cont.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"), cont[:80]
        odd = await _exchange(
            port,
            b"POST /y HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        assert odd.startswith(b"HTTP/1.1 417"), odd[:80]
        assert seen == [("GET", "/any/path/at/all", False), ("POST", "/apis/x", True)]
    finally:
        await runner.cleanup()
