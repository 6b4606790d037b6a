"""``exec`` and ``attach`` streams: a WebSocket client onto the runtime's streaming server.

Why a relay and not a redirect: the runtime's streaming server (containerd's CRI
server) listens on the node's loopback, so a client elsewhere cannot follow a
redirect there; upstream's node agent proxies too.

Why SPDY towards the runtime: the clients (kubectl >= 1.30 through the API server)
speak WebSocket ``v5.channel.k8s.io``, whose close message (channel 255) half-closes
stdin, so ``echo data | kubectl exec -i POD -- cat`` ends. The runtime's WebSocket
server only speaks v4 and older, which cannot half-close a stream; its SPDY server
can (a DATA frame with FIN). So, as upstream's API server does with its stream
translator, WebSocket channels become SPDY streams here:

====================  =========================  ===========================
WebSocket channel     SPDY stream (streamType)   direction
====================  =========================  ===========================
0                     stdin                      client -> container
1                     stdout                     container -> client
2                     stderr                     container -> client
3                     error (a Status in JSON)   container -> client
4                     resize (JSON sizes)        client -> container
255 (v5 only)         FIN on the named stream    client -> container
====================  =========================  ===========================

Every WebSocket message is binary: one channel byte, then the data. As upstream's
WebSocket stream server does, an empty message on the lowest output channel tells
the client the streams are open. The runtime writes the command's end on the error
stream (``{"status":"Success"}`` or ``reason: NonZeroExitCode`` with the exit code in
``details.causes``), then closes the connection; the relay then closes the WebSocket
normally (1000).

The SPDY/3.1 client here is the small part of the protocol the runtime's stream
server needs: the HTTP upgrade (``Upgrade: SPDY/3.1``, ``X-Stream-Protocol-Version``),
SYN_STREAM with a zlib-compressed header block, DATA frames with FIN, and PING
echoes. Header blocks sent are compressed without the SPDY dictionary (a zlib
reader given a dictionary still reads a stream that does not use it); header
blocks received are never needed and skipped.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import zlib
from typing import Iterable, Sequence

import orjson
from aiohttp import WSMsgType, web

from agent import logging as agent_logging
from apiserver_min.api import names
from apiserver_min.api.spdy import (
    GOAWAY,
    PING,
    RST_STREAM,
    SpdyFrame,
    control_frame,
    decode_header_block,
    encode_data,
    encode_syn_stream,
    frame,
    parse_frame_head,
)
from apiserver_min.api.spdy import MAX_DATA_FRAME as MAX_DATA_FRAME

__all__ = [
    "CHANNEL_STDIN",
    "CHANNEL_STDOUT",
    "CHANNEL_STDERR",
    "CHANNEL_ERROR",
    "CHANNEL_RESIZE",
    "CHANNEL_CLOSE",
    "WEBSOCKET_PROTOCOLS",
    "SpdyError",
    "SpdyClient",
    "SpdyFrame",
    "negotiate",
    "offered_protocols",
    "is_websocket_request",
    "failure_status",
    "serve_websocket",
    "relay_websocket_to_spdy",
    "encode_syn_stream",
    "encode_data",
    "read_frame",
    "decode_header_block",
    "PORT_FORWARD_TUNNEL_PROTOCOL",
    "serve_port_forward_tunnel",
]

log = agent_logging.get_logger("streaming")

CHANNEL_STDIN, CHANNEL_STDOUT, CHANNEL_STDERR, CHANNEL_ERROR, CHANNEL_RESIZE = 0, 1, 2, 3, 4
CHANNEL_CLOSE = 255
# What this side accepts from its WebSocket clients, best first.
WEBSOCKET_PROTOCOLS = (names.STREAM_PROTOCOL_V5, names.STREAM_PROTOCOL_V4)
# What is asked of the runtime's SPDY server.
SPDY_PROTOCOLS = (names.STREAM_PROTOCOL_V4,)
# Port forwarding: kubectl tunnels its SPDY connection through WebSocket binary messages.
PORT_FORWARD_TUNNEL_PROTOCOL = "SPDY/3.1+portforward.k8s.io"
PORT_FORWARD_SPDY_PROTOCOL = "portforward.k8s.io"
CONNECT_TIMEOUT = 10.0
MAX_MESSAGE = 4 * 1024 * 1024
_MAX_HTTP_HEAD = 64 * 1024

_STREAM_TYPES = {
    CHANNEL_STDIN: "stdin",
    CHANNEL_STDOUT: "stdout",
    CHANNEL_STDERR: "stderr",
    CHANNEL_ERROR: "error",
    CHANNEL_RESIZE: "resize",
}


class SpdyError(Exception):
    """The runtime's streaming server could not be used: ``status`` is the HTTP status
    to report (its own answer when it refused the upgrade, else 500)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# --- negotiation -------------------------------------------------------------------------


def offered_protocols(header: str | None) -> list[str]:
    """The protocols of a ``Sec-WebSocket-Protocol`` header, in the client's order."""
    return [p.strip() for p in (header or "").split(",") if p.strip()]


def negotiate(offered: Iterable[str], supported: Sequence[str] = WEBSOCKET_PROTOCOLS) -> str | None:
    """The first protocol of the client's offer we support (upstream's stream server
    honours the client's order), or None."""
    for p in offered:
        if p in supported:
            return p
    return None


def is_websocket_request(request: web.Request) -> bool:
    """Whether the request asks to upgrade to WebSocket (upstream's IsWebSocketRequest)."""
    return (
        "upgrade" in request.headers.get("Connection", "").lower()
        and request.headers.get("Upgrade", "").lower() == "websocket"
    )


def failure_status(message: str, reason: str = "InternalError", code: int = 500) -> bytes:
    """A failed ``Status`` as the error channel carries it."""
    return orjson.dumps({"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})


# --- SPDY/3 framing (apiserver_min.api.spdy) ---------------------------------------------


async def read_frame(reader: asyncio.StreamReader) -> SpdyFrame | None:
    """The next frame, or None at a clean end of the connection."""
    try:
        head = await reader.readexactly(8)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise SpdyError(500, "the runtime's stream connection ended inside a frame header") from None
        return None
    control, type_or_id, flags, length = parse_frame_head(head)
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise SpdyError(500, "the runtime's stream connection ended inside a frame") from None
    return frame(control, type_or_id, flags, payload)


# --- the SPDY client ---------------------------------------------------------------------


class SpdyClient:
    """A client connection to a streaming server after the SPDY upgrade."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, protocol: str) -> None:
        self.reader, self.writer, self.protocol = reader, writer, protocol
        self._compressor = zlib.compressobj()
        self._next_id = 1  # a client's streams are odd
        self._closed_out: set[int] = set()

    @classmethod
    async def connect(
        cls, url: str, protocols: Sequence[str] = SPDY_PROTOCOLS, *, timeout: float = CONNECT_TIMEOUT
    ) -> "SpdyClient":
        """Upgrade ``url`` (``http://``, as the runtime serves on loopback) to SPDY/3.1."""
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise SpdyError(500, f"unsupported streaming URL {url!r} from the runtime (want http://HOST:PORT/...)")
        port = u.port or 80
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(u.hostname, port)
        except (OSError, asyncio.TimeoutError) as exc:
            raise SpdyError(
                500, f"cannot reach the runtime's streaming server at {u.netloc}: {exc or type(exc).__name__}"
            ) from None
        host = u.netloc
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {host}",
            "Connection: Upgrade",
            "Upgrade: SPDY/3.1",
            *(f"X-Stream-Protocol-Version: {p}" for p in protocols),
            "Content-Length: 0",
            "",
            "",
        ]
        try:
            writer.write("\r\n".join(lines).encode())
            async with asyncio.timeout(timeout):
                status, headers, body = await _read_http_head(reader)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            writer.close()
            raise SpdyError(
                500,
                f"the runtime's streaming server at {u.netloc} did not answer the upgrade: {exc or type(exc).__name__}",
            ) from None
        if status != 101:
            writer.close()
            text = body.decode("utf-8", "replace").strip() or f"status {status}"
            raise SpdyError(status if 400 <= status < 600 else 500, text)
        chosen = headers.get("x-stream-protocol-version", "")
        if chosen and chosen not in protocols:
            writer.close()
            raise SpdyError(500, f"the runtime chose stream protocol {chosen!r}, not one of {list(protocols)}")
        return cls(reader, writer, chosen or protocols[0])

    async def open_stream(self, headers: dict[str, str]) -> int:
        sid = self._next_id
        self._next_id += 2
        self.writer.write(encode_syn_stream(sid, headers, self._compressor))
        await self.writer.drain()
        return sid

    async def write(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        """Send ``data`` on a stream (in frames of at most 32 KiB); ``fin`` half-closes it."""
        if stream_id in self._closed_out:
            return
        for i in range(0, max(len(data), 1), MAX_DATA_FRAME):
            chunk = data[i : i + MAX_DATA_FRAME]
            last = i + MAX_DATA_FRAME >= len(data)
            self.writer.write(encode_data(stream_id, chunk, fin=fin and last))
        if fin:
            self._closed_out.add(stream_id)
        await self.writer.drain()

    async def next_frame(self) -> SpdyFrame | None:
        """The next data, RST_STREAM or GOAWAY frame; PINGs are answered on the way,
        everything else is skipped. None when the connection ended."""
        while True:
            frame = await read_frame(self.reader)
            if frame is None:
                return None
            if not frame.control or frame.type in (RST_STREAM, GOAWAY):
                return frame
            if frame.type == PING:
                self.writer.write(control_frame(PING, 0, frame.payload))
                await self.writer.drain()

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


async def _read_http_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > _MAX_HTTP_HEAD:
        raise ValueError("answer head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP answer: {lines[0]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = b""
    if status != 101:
        length = headers.get("content-length")
        try:
            if length is not None:
                body = await reader.readexactly(min(int(length), _MAX_HTTP_HEAD))
            else:
                async with asyncio.timeout(2.0):
                    body = await reader.read(_MAX_HTTP_HEAD)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            pass
    return status, headers, body


# --- the relay ---------------------------------------------------------------------------


async def relay_websocket_to_spdy(
    ws: web.WebSocketResponse, spdy: SpdyClient, protocol: str, *, stdin: bool, stdout: bool, stderr: bool, tty: bool
) -> None:
    """Open the streams the runtime expects (error, then stdin/stdout/stderr as asked,
    resize with a TTY), then copy both ways until the runtime ends the session or the
    client goes away. ``protocol`` is the WebSocket protocol negotiated with the client."""
    wanted = [CHANNEL_ERROR] + [
        ch
        for ch, on in (
            (CHANNEL_STDIN, stdin),
            (CHANNEL_STDOUT, stdout),
            (CHANNEL_STDERR, stderr),
            (CHANNEL_RESIZE, tty),
        )
        if on
    ]
    by_channel: dict[int, int] = {}
    for ch in wanted:
        by_channel[ch] = await spdy.open_stream({"streamType": _STREAM_TYPES[ch]})
    by_stream = {sid: ch for ch, sid in by_channel.items()}
    # Upstream's stream server tells the client the streams are open this way.
    first = CHANNEL_STDOUT if stdout else CHANNEL_STDERR if stderr else CHANNEL_ERROR
    await ws.send_bytes(bytes([first]))
    v5 = protocol == names.STREAM_PROTOCOL_V5

    async def to_client() -> None:
        open_outputs = {sid for sid, ch in by_stream.items() if ch in (CHANNEL_STDOUT, CHANNEL_STDERR, CHANNEL_ERROR)}
        while open_outputs:
            frame = await spdy.next_frame()
            if frame is None or (frame.control and frame.type == GOAWAY):
                return
            ch = by_stream.get(frame.stream_id)
            if ch is None:
                continue
            if not frame.control and frame.payload and ch != CHANNEL_STDIN and ch != CHANNEL_RESIZE:
                await ws.send_bytes(bytes([ch]) + frame.payload)
            if frame.control or frame.fin:  # RST_STREAM or the stream's last frame
                open_outputs.discard(frame.stream_id)

    async def from_client() -> None:
        async for msg in ws:
            if msg.type != WSMsgType.BINARY or not msg.data:
                continue  # text frames are the base64 protocols, not offered
            data: bytes = msg.data
            ch = data[0]
            if ch == CHANNEL_CLOSE and v5:
                if len(data) == 2 and data[1] in by_channel:
                    await spdy.write(by_channel[data[1]], b"", fin=True)
                continue
            if ch in (CHANNEL_STDIN, CHANNEL_RESIZE) and ch in by_channel:
                await spdy.write(by_channel[ch], data[1:])

    out = asyncio.create_task(to_client(), name="exec-to-client")
    back = asyncio.create_task(from_client(), name="exec-from-client")
    try:
        done, _ = await asyncio.wait({out, back}, return_when=asyncio.FIRST_COMPLETED)
        if out in done:
            back.cancel()
            exc = out.exception()
            if exc is not None:
                raise exc
    finally:
        for t in (out, back):
            t.cancel()
        await asyncio.gather(out, back, return_exceptions=True)
        spdy.close()


async def serve_websocket(
    request: web.Request, url: str, *, stdin: bool, stdout: bool, stderr: bool, tty: bool
) -> web.StreamResponse:
    """Answer an ``exec``/``attach`` WebSocket request with a relay to the runtime's
    streaming ``url``. Before the upgrade, failures are plain-text HTTP errors (as
    upstream's); after it, a failed Status on the error channel."""
    protocol = negotiate(offered_protocols(request.headers.get("Sec-WebSocket-Protocol")))
    if protocol is None:
        return web.Response(
            status=400,
            content_type="text/plain",
            charset="utf-8",
            text="none of the offered WebSocket subprotocols is supported "
            f"(supported: {', '.join(WEBSOCKET_PROTOCOLS)})\n",
        )
    try:
        spdy = await SpdyClient.connect(url)
    except SpdyError as exc:
        return web.Response(status=exc.status, content_type="text/plain", charset="utf-8", text=f"{exc}\n")
    ws = web.WebSocketResponse(protocols=(protocol,), max_msg_size=MAX_MESSAGE, heartbeat=None)
    try:
        await ws.prepare(request)
    except BaseException:
        spdy.close()
        raise
    try:
        await relay_websocket_to_spdy(ws, spdy, protocol, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)
    except (SpdyError, OSError, ConnectionError) as exc:
        log.info("Stream to the runtime ended with an error", path=request.path, err=str(exc))
        if not ws.closed:
            try:
                await ws.send_bytes(bytes([CHANNEL_ERROR]) + failure_status(f"stream to the runtime failed: {exc}"))
            except (ConnectionError, RuntimeError):
                pass
    finally:
        spdy.close()
        if not ws.closed:
            await ws.close()
    return ws


async def serve_port_forward_tunnel(request: web.Request, url: str) -> web.StreamResponse:
    """``/portForward`` over WebSocket (``SPDY/3.1+portforward.k8s.io``): the client runs
    SPDY inside binary WebSocket messages; the bytes are carried as they are onto a
    SPDY connection to the runtime's ``url`` (upgraded for ``portforward.k8s.io``),
    as upstream's tunnelling handler does. The client and the runtime speak the port
    forwarding protocol (data and error streams per port) end to end."""
    if PORT_FORWARD_TUNNEL_PROTOCOL not in offered_protocols(request.headers.get("Sec-WebSocket-Protocol")):
        return web.Response(
            status=400,
            content_type="text/plain",
            charset="utf-8",
            text=f"port forwarding over WebSocket needs the {PORT_FORWARD_TUNNEL_PROTOCOL} subprotocol\n",
        )
    try:
        spdy = await SpdyClient.connect(url, (PORT_FORWARD_SPDY_PROTOCOL,))
    except SpdyError as exc:
        return web.Response(status=exc.status, content_type="text/plain", charset="utf-8", text=f"{exc}\n")
    ws = web.WebSocketResponse(protocols=(PORT_FORWARD_TUNNEL_PROTOCOL,), max_msg_size=MAX_MESSAGE)
    try:
        await ws.prepare(request)

        async def to_client() -> None:
            while chunk := await spdy.reader.read(MAX_DATA_FRAME):
                await ws.send_bytes(chunk)

        async def from_client() -> None:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    spdy.writer.write(msg.data)
                    await spdy.writer.drain()

        tasks = [
            asyncio.create_task(to_client(), name="portforward-to-client"),
            asyncio.create_task(from_client(), name="portforward-from-client"),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        spdy.close()
        if not ws.closed:
            await ws.close()
    return ws
