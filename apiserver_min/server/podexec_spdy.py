"""``pods/exec`` and ``pods/attach`` for SPDY clients (kubectl before 1.30), relayed to
the node agent's WebSocket.

Such a client POSTs with ``Upgrade: SPDY/3.1`` and ``X-Stream-Protocol-Version``
offers; after ``101 Switching Protocols`` naming ``v4.channel.k8s.io`` it opens one
SPDY stream per ``streamType`` (error, then stdin, stdout, stderr, resize as asked),
each answered with a SYN_REPLY. This side speaks the channel protocol to the agent
(``v5.channel.k8s.io`` where it can, so a FIN on stdin half-closes the container's
stdin as upstream's SPDY server does), and translates:

=====================  ====================  =============================
SPDY stream            WebSocket channel     direction
=====================  ====================  =============================
stdin (FIN)            0 (255 close on v5)   client -> container
stdout, stderr         1, 2                  container -> client
error (a Status)       3                     container -> client
resize (JSON sizes)    4                     client -> container
=====================  ====================  =============================

When the agent ends the session, every stream gets its FIN (the client reads the
error stream to its end for the exit status), and the connection closes once the
client has gone or after a short wait. aiohttp does not hand over connections for
protocols it does not know, so after the 101 the connection's transport is given a
small protocol of this module's that reads the frames.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from typing import Any

from aiohttp import WSMsgType, web

from ..api import names
from ..api.spdy import (
    GOAWAY,
    MAX_DATA_FRAME,
    PING,
    SYN_STREAM,
    HeaderReader,
    SpdyFramingError,
    control_frame,
    encode_data,
    encode_syn_reply,
    frame,
    parse_frame_head,
)

__all__ = ["SPDY_STREAM_PROTOCOLS", "negotiate", "expected_streams", "serve_spdy"]

log = logging.getLogger("orch-apiserver.podexec")

# What this server speaks to SPDY clients (kubectl 1.27 to 1.29 offer it first).
SPDY_STREAM_PROTOCOLS = (names.STREAM_PROTOCOL_V4,)
CHANNELS = {"stdin": 0, "stdout": 1, "stderr": 2, "error": 3, "resize": 4}
STREAM_TYPES = {ch: kind for kind, ch in CHANNELS.items()}
CHANNEL_CLOSE = 255
# How long the client has to open its streams, and to go away once the session ended.
STREAM_OPEN_TIMEOUT = 30.0
CLOSE_WAIT = 2.0


def negotiate(offers: list[str]) -> str | None:
    """The first protocol we speak of the client's ``X-Stream-Protocol-Version`` offers
    (one per header, or comma-separated)."""
    for raw in offers:
        for p in raw.split(","):
            if p.strip() in SPDY_STREAM_PROTOCOLS:
                return p.strip()
    return None


def expected_streams(*, stdin: bool, stdout: bool, stderr: bool, tty: bool) -> frozenset[str]:
    """The streams a v4 client opens for these options (no stderr with a TTY)."""
    wanted = {"error"}
    for kind, on in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr and not tty), ("resize", tty)):
        if on:
            wanted.add(kind)
    return frozenset(wanted)


class _Connection(asyncio.Protocol):
    """The upgraded connection's bytes, taken over from aiohttp: a reader, and a write
    gate that follows the transport's flow control."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.reader = asyncio.StreamReader()
        self.writable = asyncio.Event()
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.reader.feed_data(data)

    def eof_received(self) -> bool:
        self.reader.feed_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.reader.feed_eof()
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    async def send(self, data: bytes) -> None:
        if self.transport.is_closing():
            raise ConnectionResetError("the client's connection closed")
        self.transport.write(data)
        await self.writable.wait()

    async def next_frame(self):
        try:
            head = await self.reader.readexactly(8)
            control, type_or_id, flags, length = parse_frame_head(head)
            return frame(control, type_or_id, flags, await self.reader.readexactly(length))
        except asyncio.IncompleteReadError:
            return None


async def serve_spdy(
    request: web.Request, agent_ws: Any, *, protocol: str, expected: frozenset[str]
) -> web.StreamResponse:
    """Upgrade the client's request to SPDY and relay its streams to ``agent_ws`` (an
    open WebSocket to the agent) until the session ends."""
    response = web.StreamResponse(
        status=101,
        headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1", names.HEADER_STREAM_PROTOCOL_VERSION: protocol},
    )
    response.force_close()
    await response.prepare(request)
    transport = request.transport
    if transport is None:
        return response
    conn = _Connection(transport)
    transport.set_protocol(conn)
    try:
        await _relay(conn, agent_ws, expected)
    finally:
        transport.close()
    return response


async def _relay(conn: _Connection, agent_ws: Any, expected: frozenset[str]) -> None:
    compressor = zlib.compressobj()
    headers = HeaderReader()
    streams: dict[str, int] = {}  # streamType -> stream id
    kinds: dict[int, str] = {}
    ready = asyncio.Event()
    v5 = agent_ws.protocol == names.STREAM_PROTOCOL_V5

    async def from_client() -> None:
        while (f := await conn.next_frame()) is not None:
            if f.control:
                if f.type == SYN_STREAM:
                    kind = headers.syn_stream(f).get(names.STREAM_TYPE_HEADER.lower(), "")
                    await conn.send(encode_syn_reply(f.stream_id, {}, compressor))
                    if kind in CHANNELS:
                        streams[kind], kinds[f.stream_id] = f.stream_id, kind
                    if expected <= streams.keys():
                        ready.set()
                elif f.type == PING:
                    await conn.send(control_frame(PING, 0, f.payload))
                elif f.type == GOAWAY:
                    return
                continue
            kind = kinds.get(f.stream_id)
            if kind not in ("stdin", "resize"):
                continue
            if f.payload:
                await agent_ws.send_bytes(bytes([CHANNELS[kind]]) + f.payload)
            if f.fin and kind == "stdin" and v5:
                await agent_ws.send_bytes(bytes([CHANNEL_CLOSE, CHANNELS["stdin"]]))

    async def to_client() -> None:
        async with asyncio.timeout(STREAM_OPEN_TIMEOUT):
            await ready.wait()
        async for msg in agent_ws:
            if msg.type != WSMsgType.BINARY or len(msg.data) < 2:
                continue  # an empty message only says the agent's streams are open
            sid = streams.get(STREAM_TYPES.get(msg.data[0], ""))
            if sid is None:
                continue
            data = msg.data[1:]
            for i in range(0, len(data), MAX_DATA_FRAME):
                await conn.send(encode_data(sid, data[i : i + MAX_DATA_FRAME]))
        for sid in streams.values():
            await conn.send(encode_data(sid, b"", fin=True))

    inbound = asyncio.create_task(from_client(), name="spdy-from-client")
    outbound = asyncio.create_task(to_client(), name="spdy-to-client")
    try:
        done, _ = await asyncio.wait({inbound, outbound}, return_when=asyncio.FIRST_COMPLETED)
        if outbound in done and not outbound.exception():
            # The session ended: let the client read the last frames and go.
            await asyncio.wait({inbound}, timeout=CLOSE_WAIT)
    finally:
        for t in (inbound, outbound):
            t.cancel()
        results = await asyncio.gather(inbound, outbound, return_exceptions=True)
    for r in results:
        if isinstance(r, asyncio.TimeoutError):
            log.info("a SPDY stream client did not open its streams within %ss", STREAM_OPEN_TIMEOUT)
        elif isinstance(r, SpdyFramingError):
            log.info("a SPDY stream client sent what cannot be read: %s", r)
        elif isinstance(r, Exception) and not isinstance(r, (ConnectionError, asyncio.CancelledError)):
            log.debug("SPDY stream relay ended with %r", r)
