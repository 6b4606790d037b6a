"""The exec/attach stream relays: protocol negotiation, SPDY framing, the agent's
WebSocket-to-SPDY translation against a small SPDY stream server, and the API
server's WebSocket-to-WebSocket relay."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib

import aiohttp
import pytest
from aiohttp import web
from multidict import MultiDict

from agent.server import streaming
from agent.server.streaming import (
    SpdyClient,
    SpdyError,
    decode_header_block,
    encode_data,
    encode_syn_stream,
    negotiate,
    offered_protocols,
    read_frame,
)
from apiserver_min.api import names, spdy
from apiserver_min.api.spdy import FLAG_FIN, PING, SYN_STREAM
from apiserver_min.api.status import ApiError
from apiserver_min.server import podexec, podexec_spdy

V5, V4 = names.STREAM_PROTOCOL_V5, names.STREAM_PROTOCOL_V4


# --- negotiation and options ---------------------------------------------------------------------


def test_negotiation_follows_the_clients_order():
    assert offered_protocols(f" {V5}, {V4},base64.channel.k8s.io ") == [V5, V4, "base64.channel.k8s.io"]
    assert offered_protocols(None) == []
    assert negotiate([V4, V5]) == V4
    assert negotiate(["channel.k8s.io", V5]) == V5
    assert negotiate(["channel.k8s.io"]) is None
    assert podexec.relayable([V5, "v3.channel.k8s.io", V4], "exec") == [V5, V4]
    assert podexec.relayable([V5], "portforward") == []
    assert podexec.relayable([podexec.PORT_FORWARD_PROTOCOL], "portforward") == [podexec.PORT_FORWARD_PROTOCOL]


def test_stream_options_become_the_agents_query():
    q = MultiDict(
        [
            ("command", "sh"),
            ("command", "-c"),
            ("command", "exit 3"),
            ("stdin", "true"),
            ("stdout", "true"),
            ("stderr", "false"),
            ("tty", "1"),
            ("container", "c"),
        ]
    )
    opts = podexec.parse_stream_options(q, "exec", "p")
    assert (opts.container, opts.command, opts.stdin, opts.stdout, opts.stderr, opts.tty) == (
        "c",
        ("sh", "-c", "exit 3"),
        True,
        True,
        False,
        True,
    )
    assert opts.agent_query("exec") == [
        ("command", "sh"),
        ("command", "-c"),
        ("command", "exit 3"),
        ("input", "1"),
        ("output", "1"),
        ("tty", "1"),
    ]
    assert opts.agent_query("attach") == [("input", "1"), ("output", "1"), ("tty", "1")]
    with pytest.raises(ApiError, match="at least 1 of stdin, stdout, stderr") as e:
        podexec.parse_stream_options(MultiDict([("command", "ls")]), "exec", "p")
    assert e.value.code == 400
    with pytest.raises(ApiError, match="must specify a command"):
        podexec.parse_stream_options(MultiDict([("stdout", "true")]), "exec", "p")
    with pytest.raises(ApiError, match='invalid stdin "maybe"'):
        podexec.parse_stream_options(MultiDict([("stdin", "maybe")]), "attach", "p")
    pf = podexec.parse_stream_options(MultiDict([("ports", "8080,9090"), ("ports", "53")]), "portforward", "p")
    assert pf.agent_query("portforward") == [("port", "8080"), ("port", "9090"), ("port", "53")]
    with pytest.raises(ApiError, match="between 1 and 65535"):
        podexec.parse_stream_options(MultiDict([("ports", "0")]), "portforward", "p")


# --- SPDY framing ---------------------------------------------------------------------------------


def test_syn_stream_and_data_frames_have_the_spdy3_layout():
    comp = zlib.compressobj()
    frame = encode_syn_stream(3, {"streamType": "stdin"}, comp)
    first, second = struct.unpack(">II", frame[:8])
    assert first == 0x80030001  # control, version 3, SYN_STREAM
    assert second & 0xFFFFFF == len(frame) - 8 and second >> 24 == 0
    sid, assoc, prio = struct.unpack(">IIH", frame[8:18])
    assert (sid, assoc, prio) == (3, 0, 0)
    # One zlib stream per connection, flushed per frame: a second block continues it.
    second_frame = encode_syn_stream(5, {"streamType": "stdout"}, comp)
    d = zlib.decompressobj()
    assert decode_header_block(d.decompress(frame[18:])) == {"streamtype": "stdin"}
    assert decode_header_block(d.decompress(second_frame[18:])) == {"streamtype": "stdout"}

    data = encode_data(7, b"abc", fin=True)
    assert data == struct.pack(">II", 7, (FLAG_FIN << 24) | 3) + b"abc"


async def test_read_frame_parses_control_and_data_frames():
    reader = asyncio.StreamReader()
    reader.feed_data(encode_data(5, b"hello") + struct.pack(">HHI", 0x8003, PING, 4) + struct.pack(">I", 2))
    reader.feed_eof()
    f = await read_frame(reader)
    assert (f.control, f.stream_id, f.payload, f.fin) == (False, 5, b"hello", False)
    f = await read_frame(reader)
    assert (f.control, f.type, f.payload) == (True, PING, struct.pack(">I", 2))
    assert await read_frame(reader) is None
    broken = asyncio.StreamReader()
    broken.feed_data(encode_data(5, b"hello")[:10])
    broken.feed_eof()
    with pytest.raises(SpdyError, match="inside a frame"):
        await read_frame(broken)


# --- a small SPDY stream server, as the runtime's ------------------------------------------------


class FakeStreamServer:
    """Answers the SPDY upgrade; for ``cat``: echoes stdin to stdout until stdin's FIN,
    then writes a Success status on the error stream and closes. Sends a PING first
    and records the answer."""

    def __init__(self, refuse: tuple[int, str] | None = None, exit_code: int = 0) -> None:
        self.refuse, self.exit_code = refuse, exit_code
        self.streams: dict[int, str] = {}
        self.pong = asyncio.Event()
        self.request_head = ""

    async def __aenter__(self) -> "FakeStreamServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/exec/token123"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.request_head = (await reader.readuntil(b"\r\n\r\n")).decode()
        if self.refuse:
            code, text = self.refuse
            writer.write(f"HTTP/1.1 {code} Nope\r\nContent-Length: {len(text)}\r\n\r\n{text}".encode())
            writer.close()
            return
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: " + V4.encode() + b"\r\n\r\n"
        )
        writer.write(struct.pack(">HHI", 0x8003, PING, 4) + struct.pack(">I", 2))
        d = zlib.decompressobj()
        by_type: dict[str, int] = {}
        try:
            while True:
                f = await read_frame(reader)
                if f is None:
                    break
                if f.control and f.type == SYN_STREAM:
                    headers = decode_header_block(d.decompress(f.payload[10:]))
                    self.streams[f.stream_id] = headers["streamtype"]
                    by_type[headers["streamtype"]] = f.stream_id
                elif f.control and f.type == PING:
                    self.pong.set()
                elif not f.control and self.streams.get(f.stream_id) == "stdin":
                    if f.payload:
                        writer.write(encode_data(by_type["stdout"], f.payload.upper()))
                    if f.fin:
                        if self.exit_code:
                            status = {
                                "metadata": {},
                                "status": "Failure",
                                "reason": "NonZeroExitCode",
                                "details": {"causes": [{"reason": "ExitCode", "message": str(self.exit_code)}]},
                            }
                        else:
                            status = {"metadata": {}, "status": "Success"}
                        writer.write(encode_data(by_type["error"], json.dumps(status).encode(), fin=True))
                        await writer.drain()
                        break
        finally:
            writer.close()


async def _serve_app(handler, method: str = "GET") -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route(method, "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def _session(url: str, protocols, sends: list[bytes]) -> tuple[list[bytes], object, str | None]:
    got: list[bytes] = []
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url, protocols=protocols) as ws:
            for m in sends:
                await ws.send_bytes(m)
            async for msg in ws:
                got.append(msg.data)
            return got, ws.close_code, ws.protocol


async def test_agent_translates_websocket_channels_to_spdy_streams():
    async with FakeStreamServer(exit_code=3) as fake:

        async def handler(request):
            return await streaming.serve_websocket(request, fake.url, stdin=True, stdout=True, stderr=True, tty=False)

        runner, base = await _serve_app(handler)
        try:
            got, code, proto = await asyncio.wait_for(
                _session(f"{base}/exec", ("v1.channel.k8s.io", V5, V4), [b"\x00abc", b"\x00def", b"\xff\x00"]), 10
            )
        finally:
            await runner.cleanup()
        assert proto == V5 and code == 1000
        assert got[0] == b"\x01"  # streams open: empty message on stdout
        assert b"".join(m[1:] for m in got if m[0] == 1) == b"ABCDEF"
        status = json.loads(next(m[1:] for m in got if m[0] == 3))
        assert status["reason"] == "NonZeroExitCode"
        assert sorted(fake.streams.values()) == ["error", "stderr", "stdin", "stdout"]
        assert min(fake.streams) == 1 and fake.streams[1] == "error"
        assert fake.pong.is_set()
        assert "Upgrade: SPDY/3.1" in fake.request_head and f"X-Stream-Protocol-Version: {V4}" in fake.request_head
        assert fake.request_head.startswith("POST /exec/token123 HTTP/1.1")


async def test_agent_refusals_before_and_protocols():
    async with FakeStreamServer(refuse=(404, "container not found")) as fake:

        async def handler(request):
            return await streaming.serve_websocket(request, fake.url, stdin=False, stdout=True, stderr=False, tty=True)

        runner, base = await _serve_app(handler)
        try:
            async with aiohttp.ClientSession() as s:
                with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                    await s.ws_connect(f"{base}/exec", protocols=(V5,))
                assert e.value.status == 404
                async with s.get(
                    f"{base}/exec",
                    headers={
                        "Connection": "Upgrade",
                        "Upgrade": "websocket",
                        "Sec-WebSocket-Version": "13",
                        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                        "Sec-WebSocket-Protocol": "channel.k8s.io",
                    },
                ) as r:
                    assert r.status == 400 and "none of the offered" in await r.text()
        finally:
            await runner.cleanup()
    with pytest.raises(SpdyError, match="unsupported streaming URL"):
        await SpdyClient.connect("https://127.0.0.1:1/exec/x")


# --- the API server's relay between two WebSockets -----------------------------------------------


async def test_apiserver_relay_copies_both_ways_and_passes_the_close_on():
    async def agent(request):
        ws = web.WebSocketResponse(protocols=(V5,))
        await ws.prepare(request)
        await ws.send_bytes(b"\x01")
        async for msg in ws:
            if msg.data == b"\xff\x00":
                await ws.send_bytes(b"\x03" + json.dumps({"metadata": {}, "status": "Success"}).encode())
                break
            await ws.send_bytes(b"\x01" + msg.data[1:][::-1])
        await ws.close()
        return ws

    agent_runner, agent_base = await _serve_app(agent)

    async def front(request):
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"{agent_base}/exec", protocols=(V5,)) as agent_ws:
                client_ws = web.WebSocketResponse(protocols=(agent_ws.protocol,))
                await client_ws.prepare(request)
                await podexec.relay(client_ws, agent_ws)
                return client_ws

    front_runner, front_base = await _serve_app(front)
    try:
        got, code, proto = await asyncio.wait_for(_session(f"{front_base}/x", (V5,), [b"\x00abc", b"\xff\x00"]), 10)
    finally:
        await front_runner.cleanup()
        await agent_runner.cleanup()
    assert (proto, code) == (V5, 1000)
    assert got[:2] == [b"\x01", b"\x01cba"]
    assert json.loads(got[2][1:]) == {"metadata": {}, "status": "Success"}


# --- the API server's SPDY side (kubectl before 1.30) --------------------------------------------


def test_spdy_negotiation_and_expected_streams():
    assert podexec_spdy.negotiate([V5, "v4.channel.k8s.io", "v3.channel.k8s.io"]) == V4
    assert podexec_spdy.negotiate(["v3.channel.k8s.io,v4.channel.k8s.io"]) == V4
    assert podexec_spdy.negotiate(["v3.channel.k8s.io", "channel.k8s.io"]) is None
    both = podexec_spdy.expected_streams(stdin=True, stdout=True, stderr=True, tty=False)
    assert both == {"error", "stdin", "stdout", "stderr"}
    assert podexec_spdy.expected_streams(stdin=True, stdout=True, stderr=True, tty=True) == {
        "error",
        "stdin",
        "stdout",
        "resize",
    }


async def test_spdy_client_streams_become_agent_channels_and_back():
    """A SPDY client as kubectl 1.27 is one (header blocks compressed with the SPDY
    dictionary): stdin with FIN reaches the agent as data plus the v5 close; the agent's
    output and status come back on the client's streams, each ending with a FIN."""

    async def agent(request):
        ws = web.WebSocketResponse(protocols=(V5,))
        await ws.prepare(request)
        await ws.send_bytes(b"\x01")
        got = b""
        async for msg in ws:
            if msg.data == b"\xff\x00":
                await ws.send_bytes(b"\x01" + got[::-1])
                await ws.send_bytes(b"\x03" + json.dumps({"metadata": {}, "status": "Success"}).encode())
                break
            got += msg.data[1:]
        await ws.close()
        return ws

    agent_runner, agent_base = await _serve_app(agent)

    async def front(request):
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"{agent_base}/exec", protocols=(V5,)) as agent_ws:
                expected = podexec_spdy.expected_streams(stdin=True, stdout=True, stderr=False, tty=False)
                return await podexec_spdy.serve_spdy(request, agent_ws, protocol=V4, expected=expected)

    front_runner, front_base = await _serve_app(front, method="POST")
    host, port = front_base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /x HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 101") and b"v4.channel.k8s.io" in head, head
        comp = zlib.compressobj(zdict=spdy.HEADER_DICTIONARY)
        for sid, kind in ((1, "error"), (3, "stdin"), (5, "stdout")):
            writer.write(encode_syn_stream(sid, {"streamType": kind}, comp))
        writer.write(spdy.control_frame(PING, 0, b"\x00\x00\x00\x01"))
        writer.write(encode_data(3, b"ab") + encode_data(3, b"c", fin=True))
        frames = []
        while True:
            f = await asyncio.wait_for(read_frame(reader), 10)
            if f is None:
                break
            frames.append(f)
    finally:
        writer.close()
        await front_runner.cleanup()
        await agent_runner.cleanup()
    replies = [f.stream_id for f in frames if f.control and f.type == spdy.SYN_REPLY]
    assert replies == [1, 3, 5]
    assert any(f.control and f.type == PING for f in frames)
    data = [(f.stream_id, f.payload, f.fin) for f in frames if not f.control]
    assert (5, b"cba", False) in data
    [(status, _, _)] = [(p, s, fin) for s, p, fin in data if s == 1 and p]
    assert json.loads(status) == {"metadata": {}, "status": "Success"}
    assert {s for s, p, fin in data if fin} == {1, 3, 5}
