"""The HTTP server under the API: aiohttp's low-level server, one handler for every path.

The server's dispatch parses each path itself (routing.py), so aiohttp's URL router
(a regular expression, a match-info object and an application signal per request) has
nothing to add; the low-level server hands each request straight to the handler. What
the application layer did that the API needs is kept here:

* ``Expect: 100-continue`` is answered before the handler runs, as aiohttp's default
  expect handler does (another expectation is 417);
* the response-start hook: when a response's headers are about to go out (a finished
  answer after the handler, or a stream the handler prepares), the Audit-ID header and
  the priority-and-fairness headers are added, a long-running request gives its seats
  back and an audited stream records its ResponseStarted stage;
* the request's state (``request[key]``) is a plain dict: :class:`ApiRequest` reads and
  writes it without aiohttp's per-write key-type check (the keys are this package's
  own strings).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from . import auditing, flowcontrol


class ApiRequest(web.BaseRequest):
    """A request as the API server's handlers see it."""

    def get(self, key: Any, default: Any = None) -> Any:
        return self._state.get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._state[key] = value

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        auditing.response_starting(self, response)
        flowcontrol.response_starting(response)


async def expect_continue(request: web.BaseRequest) -> None:
    """Answer an ``Expect`` header before the body is read (only HTTP/1.1 has one)."""
    expect = request.headers.get(hdrs.EXPECT, "")
    if request.version != HttpVersion11:
        return
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the answer's own size starts after the interim one


def make_server(
    handler: Callable[[Any], Awaitable[web.StreamResponse]], client_max_size: int, **kwargs: Any
) -> web.Server:
    """aiohttp's low-level server calling ``handler`` with an :class:`ApiRequest` for
    every request (``kwargs`` go to aiohttp's connection handler, e.g. access_log)."""
    loop = asyncio.get_running_loop()

    def factory(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> ApiRequest:
        return ApiRequest(message, payload, protocol, writer, task, loop, client_max_size=client_max_size)

    return web.Server(handler, request_factory=factory, loop=loop, **kwargs)
