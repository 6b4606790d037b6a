"""SPDY/3.1 framing, as the stream protocols of exec, attach and port forwarding use it.

Both sides use it: the node agent as a client of the runtime's streaming server, the
API server as the server of clients that speak SPDY (kubectl before 1.30). Only the
part of the protocol those streams need is here: control frames (SYN_STREAM,
SYN_REPLY, RST_STREAM, PING, GOAWAY; others are read and skipped by the callers),
DATA frames with FIN, and header blocks.

Header blocks are zlib streams, one per connection and direction, flushed per frame.
A peer compresses them with the SPDY/3 dictionary (the protocol's constant, built
below from its words), so reading them needs it; blocks written here are compressed
without it, which every zlib reader given the dictionary still reads.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

__all__ = [
    "VERSION",
    "SYN_STREAM",
    "SYN_REPLY",
    "RST_STREAM",
    "SETTINGS",
    "PING",
    "GOAWAY",
    "HEADERS",
    "WINDOW_UPDATE",
    "FLAG_FIN",
    "MAX_DATA_FRAME",
    "HEADER_DICTIONARY",
    "SpdyFrame",
    "SpdyFramingError",
    "control_frame",
    "header_block",
    "decode_header_block",
    "encode_syn_stream",
    "encode_syn_reply",
    "encode_data",
    "parse_frame_head",
    "frame",
    "HeaderReader",
]

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
MAX_DATA_FRAME = 32 * 1024
_STREAM_ID_FRAMES = (SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS, WINDOW_UPDATE)
_MAX_HEADERS = 64 * 1024

# The SPDY/3 header dictionary: length-prefixed words, then a run of plain text.
_DICTIONARY_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges "
    "age allow authorization cache-control connection content-base content-encoding content-language "
    "content-length content-location content-md5 content-range content-type date etag expect expires from "
    "host if-match if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after server te trailer "
    "transfer-encoding upgrade user-agent vary via warning www-authenticate method get status"
).split() + ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_DICTIONARY_TEXT = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
HEADER_DICTIONARY = (
    b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICTIONARY_WORDS) + _DICTIONARY_TEXT.encode()
)


class SpdyFramingError(Exception):
    """A frame or header block that cannot be read."""


@dataclasses.dataclass(frozen=True)
class SpdyFrame:
    """One frame: ``control`` frames have a ``type``; data frames have type 0."""

    control: bool
    type: int
    flags: int
    stream_id: int
    payload: bytes

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


def control_frame(ftype: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + payload


def header_block(headers: dict[str, str]) -> bytes:
    """An uncompressed header block (names in lower case, as SPDY wants them)."""
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        n, v = name.lower().encode(), value.encode()
        out.append(struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v)
    return b"".join(out)


def decode_header_block(block: bytes) -> dict[str, str]:
    """An uncompressed header block as a dict (a repeated name keeps its last value)."""
    try:
        (count,), pos, out = struct.unpack_from(">I", block), 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", block, pos)
            name = block[pos + 4 : pos + 4 + n].decode()
            pos += 4 + n
            (v,) = struct.unpack_from(">I", block, pos)
            out[name] = block[pos + 4 : pos + 4 + v].decode()
            pos += 4 + v
    except (struct.error, UnicodeDecodeError) as exc:
        raise SpdyFramingError(f"malformed header block: {exc}") from None
    return out


def _compressed(headers: dict[str, str], compressor) -> bytes:
    return compressor.compress(header_block(headers)) + compressor.flush(zlib.Z_SYNC_FLUSH)


def encode_syn_stream(stream_id: int, headers: dict[str, str], compressor, *, fin: bool = False) -> bytes:
    """SYN_STREAM: stream id, no associated stream, priority 0, the compressed headers
    (``compressor``: the connection's one zlib stream)."""
    body = struct.pack(">IIH", stream_id & 0x7FFFFFFF, 0, 0) + _compressed(headers, compressor)
    return control_frame(SYN_STREAM, FLAG_FIN if fin else 0, body)


def encode_syn_reply(stream_id: int, headers: dict[str, str], compressor, *, fin: bool = False) -> bytes:
    body = struct.pack(">I", stream_id & 0x7FFFFFFF) + _compressed(headers, compressor)
    return control_frame(SYN_REPLY, FLAG_FIN if fin else 0, body)


def encode_data(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data


def parse_frame_head(head: bytes) -> tuple[bool, int, int, int]:
    """(control, type or stream id, flags, payload length) of an 8-byte frame head."""
    first, second = struct.unpack(">II", head)
    control = bool(first & 0x80000000)
    return control, (first & 0xFFFF) if control else (first & 0x7FFFFFFF), second >> 24, second & 0xFFFFFF


def frame(control: bool, type_or_id: int, flags: int, payload: bytes) -> SpdyFrame:
    """The frame of a parsed head and its payload."""
    if control:
        sid = (
            struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            if type_or_id in _STREAM_ID_FRAMES and len(payload) >= 4
            else 0
        )
        return SpdyFrame(True, type_or_id, flags, sid, payload)
    return SpdyFrame(False, 0, flags, type_or_id, payload)


class HeaderReader:
    """The header blocks one peer sends on a connection (one zlib stream, with the SPDY
    dictionary when the peer used it)."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(zdict=HEADER_DICTIONARY)

    def read(self, compressed: bytes) -> dict[str, str]:
        try:
            block = self._inflate.decompress(compressed, _MAX_HEADERS)
        except zlib.error as exc:
            raise SpdyFramingError(f"header block does not inflate: {exc}") from None
        if self._inflate.unconsumed_tail:
            raise SpdyFramingError(f"header block larger than {_MAX_HEADERS} bytes")
        return decode_header_block(block)

    def syn_stream(self, f: SpdyFrame) -> dict[str, str]:
        """The headers of a SYN_STREAM frame (after stream id, associated id, priority)."""
        return self.read(f.payload[10:])
