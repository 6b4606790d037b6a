"""``pods/exec``, ``pods/attach`` and ``pods/portforward``: WebSocket streams relayed to the node agent.

kubectl (1.30 and later) opens ``GET .../pods/NAME/exec?command=..&stdin=..&stdout=..&stderr=..
&tty=..&container=..`` as a WebSocket offering ``v5.channel.k8s.io`` (port-forward:
``SPDY/3.1+portforward.k8s.io``, SPDY frames tunnelled in WebSocket messages). This
server checks the request as upstream's connect handler does, opens a WebSocket
to the agent of the pod's node (``/exec/NS/POD/CONTAINER?command=..&input=1&output=1
&error=1&tty=1``, ``/attach/...``, ``/portForward/NS/POD``) with its client
certificate, offering the protocols of the client's offer it understands, accepts
the client's WebSocket with the protocol the agent chose, and copies messages both
ways unchanged (the agent speaks the channel protocol to the runtime, see
``agent/streaming.py``).

Authorization: the request was authorized with its HTTP verb (``get`` for the
WebSocket GET, ``create`` for POST); as upstream does since the move to WebSocket,
a GET must also be allowed ``create`` on the sub-resource (a ``get``-only role must
not open a shell).

Errors before the upgrade are Status answers (kubectl prints them): the pod is
missing (404), the container is not in the pod, the pod is not on a node or has
completed, no stream was asked for (400); the agent's refusal carries the agent's
text (``container not found ("c")``). SPDY clients (POST with ``Upgrade: SPDY/3.1``:
kubectl before 1.30) get exec and attach through :mod:`.podexec_spdy`; port forwarding
over SPDY is refused with a message saying so (400).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import urllib.parse
from typing import TYPE_CHECKING, Sequence

import aiohttp
from aiohttp import WSMsgType, web

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from ..registry.rest import RequestContext
from . import podexec_spdy
from .podlogs import (
    CONNECT_TIMEOUT,
    MAX_ERROR_BODY,
    _go_bool,
    _host_for_url,
    agent_client,
    agent_location,
    choose_container,
)

if TYPE_CHECKING:
    from .context import ServerContext

log = logging.getLogger("orch-apiserver.podexec")

PORT_FORWARD_PROTOCOL = "SPDY/3.1+portforward.k8s.io"
# Protocols relayed to the agent, per sub-resource.
STREAM_PROTOCOLS = {
    "exec": (names.STREAM_PROTOCOL_V5, names.STREAM_PROTOCOL_V4),
    "attach": (names.STREAM_PROTOCOL_V5, names.STREAM_PROTOCOL_V4),
    "portforward": (PORT_FORWARD_PROTOCOL,),
}
AGENT_PATHS = {"exec": "exec", "attach": "attach", "portforward": "portForward"}
MAX_MESSAGE = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """Upstream's PodExecOptions / PodAttachOptions / PodPortForwardOptions."""

    container: str = ""
    command: tuple[str, ...] = ()
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False
    ports: tuple[int, ...] = ()

    def agent_query(self, subresource: str) -> list[tuple[str, str]]:
        """The agent's query, with upstream's parameter names towards the node."""
        if subresource == "portforward":
            return [("port", str(p)) for p in self.ports]
        q: list[tuple[str, str]] = [("command", c) for c in self.command] if subresource == "exec" else []
        for name, on in (("input", self.stdin), ("output", self.stdout), ("error", self.stderr), ("tty", self.tty)):
            if on:
                q.append((name, "1"))
        return q


def parse_stream_options(query, subresource: str, pod_name: str) -> StreamOptions:
    """The query as upstream converts it: bad booleans or ports are 400."""
    if subresource == "portforward":
        ports = []
        for raw in query.getall("ports", []) if hasattr(query, "getall") else []:
            for p in str(raw).split(","):
                try:
                    port = int(p.strip())
                except ValueError:
                    raise st.bad_request(f'invalid port "{p}"') from None
                if not 0 < port < 65536:
                    raise st.bad_request(f"port {port} must be between 1 and 65535, inclusive")
                ports.append(port)
        return StreamOptions(ports=tuple(ports))
    command = tuple(query.getall("command", [])) if hasattr(query, "getall") else ()
    opts = StreamOptions(
        container=query.get("container", ""),
        command=command,
        stdin=_go_bool(query, "stdin"),
        stdout=_go_bool(query, "stdout"),
        stderr=_go_bool(query, "stderr"),
        tty=_go_bool(query, "tty"),
    )
    if not (opts.stdin or opts.stdout or opts.stderr):
        raise st.bad_request("you must specify at least 1 of stdin, stdout, stderr")
    if subresource == "exec" and not opts.command:
        raise st.bad_request(f"you must specify a command to exec in pod {pod_name}")
    return opts


def offered_protocols(header: str | None) -> list[str]:
    return [p.strip() for p in (header or "").split(",") if p.strip()]


def relayable(offered: Sequence[str], subresource: str) -> list[str]:
    """The client's offer (in its order) that this server can relay to the agent."""
    supported = STREAM_PROTOCOLS[subresource]
    return [p for p in offered if p in supported]


def _is_upgrade(request: web.Request, protocol: str) -> bool:
    return (
        "upgrade" in request.headers.get("Connection", "").lower()
        and protocol in request.headers.get("Upgrade", "").lower()
    )


async def serve_pod_stream(
    server: "ServerContext", request: web.Request, ctx: RequestContext, kind: KindInfo
) -> web.StreamResponse:
    """``pods/exec``, ``pods/attach``, ``pods/portforward``: check, then relay to the agent."""
    sub = ctx.subresource
    if request.method == "GET" and ctx.authorize_as is not None:
        # Compound authorization: opening a stream is creating something.
        await ctx.authorize_as("create")
    pod = await server.store.get_object(kind, ctx.namespace, ctx.name)
    opts = parse_stream_options(request.query, sub, ctx.name)
    container = "" if sub == "portforward" else choose_container(pod, opts.container)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise st.bad_request(f"pod {ctx.name} does not have a host assigned")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise st.bad_request(
            f"cannot {'port-forward to' if sub == 'portforward' else 'exec into or attach to'} "
            f"a completed pod; current phase is {phase}"
        )
    spdy_protocol = ""
    if _is_upgrade(request, "spdy/"):
        if sub == "portforward":
            raise st.bad_request(
                f"port forwarding over SPDY is not served by {names.APISERVER_NAME}; use a client that "
                f"speaks WebSocket ({PORT_FORWARD_PROTOCOL}: kubectl 1.30 or later)"
            )
        offers = request.headers.getall(names.HEADER_STREAM_PROTOCOL_VERSION, [])
        spdy_protocol = podexec_spdy.negotiate(offers) or ""
        if not spdy_protocol:
            raise st.bad_request(
                f"unable to upgrade: unable to negotiate protocol: client supports {', '.join(offers) or 'none'}, "
                f"server supports {', '.join(podexec_spdy.SPDY_STREAM_PROTOCOLS)}"
            )
        wanted = list(STREAM_PROTOCOLS[sub])
    elif _is_upgrade(request, "websocket"):
        wanted = relayable(offered_protocols(request.headers.get("Sec-WebSocket-Protocol")), sub)
    else:
        raise st.bad_request("Upgrade request required")
    if not wanted:
        raise st.bad_request(
            f"none of the offered WebSocket subprotocols is supported for pods/{sub} "
            f"(supported: {', '.join(STREAM_PROTOCOLS[sub])})"
        )

    nodes = server.registry.by_resource("", "v1", "nodes")
    node = await server.store.get_object(nodes, "", node_name)
    address, port = agent_location(node)
    parts = [ctx.namespace, ctx.name] + ([container] if container else [])
    path = f"/{AGENT_PATHS[sub]}/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    query = urllib.parse.urlencode(opts.agent_query(sub))
    url = f"https://{_host_for_url(address)}:{port}{path}" + (f"?{query}" if query else "")

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, connect=CONNECT_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        agent_ws = await _connect_agent(server, session, url, wanted, ctx.name, sub)
        async with agent_ws:
            if spdy_protocol:
                expected = podexec_spdy.expected_streams(
                    stdin=opts.stdin, stdout=opts.stdout, stderr=opts.stderr, tty=opts.tty
                )
                return await podexec_spdy.serve_spdy(request, agent_ws, protocol=spdy_protocol, expected=expected)
            client_ws = web.WebSocketResponse(
                protocols=(agent_ws.protocol,) if agent_ws.protocol else (), max_msg_size=MAX_MESSAGE
            )
            await client_ws.prepare(request)
            await relay(client_ws, agent_ws)
            return client_ws


async def _connect_agent(
    server: "ServerContext", session: aiohttp.ClientSession, url: str, protocols: list[str], pod_name: str, sub: str
) -> aiohttp.ClientWebSocketResponse:
    """A WebSocket to the agent: verified when its certificate chains to a CA we trust,
    unverified otherwise (as for pods/log). A refusal becomes a Status with the agent's text."""
    try:
        return await agent_client(server).call(
            url,
            lambda ctx: session.ws_connect(
                url, ssl=ctx, protocols=tuple(protocols), max_msg_size=MAX_MESSAGE, autoping=True
            ),
        )
    except aiohttp.WSServerHandshakeError as exc:
        text = await _refusal_text(server, session, url) if exc.status >= 400 else ""
        raise _agent_refusal(exc.status, text, pod_name, sub) from None
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise st.ApiError(500, "InternalError", f"error dialing backend: {url}: {exc or type(exc).__name__}") from None


async def _refusal_text(server: "ServerContext", session: aiohttp.ClientSession, url: str) -> str:
    """The agent's reason for refusing the upgrade: the handshake drops the body, so the
    same request is asked again without the upgrade (the agent answers it the same way)."""
    try:
        resp = await agent_client(server).open(session, url)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
        return ""
    async with resp:
        if resp.status < 400:
            return ""
        return (await resp.content.read(MAX_ERROR_BODY)).decode("utf-8", "replace").strip()


def _agent_refusal(code: int, text: str, pod_name: str, sub: str) -> st.ApiError:
    """As upstream reports a kubelet's refused upgrade: the kubelet's status and text."""
    message = text or f"the node agent answered {code} to the pods/{sub} request"
    if code == 400:
        return st.bad_request(message)
    if code == 404:
        return st.ApiError(404, "NotFound", message, details={"name": pod_name, "kind": "pods"})
    if code in (401, 403):
        return st.ApiError(code, "Forbidden" if code == 403 else "Unauthorized", message)
    return st.ApiError(code if 400 <= code < 600 else 500, "InternalError", message)


async def relay(client_ws: web.WebSocketResponse, agent_ws) -> None:
    """Copy messages both ways until one side closes; then close the other side with the
    same code, so the client sees the agent's normal close after the status message."""

    async def copy(src, dst) -> None:
        async for msg in src:
            if msg.type == WSMsgType.BINARY:
                await dst.send_bytes(msg.data)
            elif msg.type == WSMsgType.TEXT:
                await dst.send_str(msg.data)

    down = asyncio.create_task(copy(agent_ws, client_ws), name="stream-to-client")
    up = asyncio.create_task(copy(client_ws, agent_ws), name="stream-to-agent")
    try:
        done, _ = await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (down, up):
            t.cancel()
        results = await asyncio.gather(down, up, return_exceptions=True)
    for r in results:
        if isinstance(r, Exception) and not isinstance(r, (ConnectionError, asyncio.CancelledError)):
            log.debug("stream relay for %s ended with %r", getattr(client_ws, "protocol", ""), r)
    if down in done:
        code = agent_ws.close_code
        if code is None or not (1000 <= code <= 1003 or 1007 <= code <= 1011 or 3000 <= code <= 4999):
            code = aiohttp.WSCloseCode.OK  # 1005/1006 describe a close, they are never sent
        if not client_ws.closed:
            await client_ws.close(code=code)
    else:
        if not agent_ws.closed:
            await agent_ws.close()


class PodStreamREST:
    """``pods/exec``, ``pods/attach`` and ``pods/portforward`` as a REST object
    (``registry.rest.Connecter``)."""

    def __init__(self, server: "ServerContext", kind: KindInfo):
        self.server = server
        self.kind = kind

    async def connect(self, ctx: RequestContext, request: web.Request) -> web.StreamResponse:
        return await serve_pod_stream(self.server, request, ctx, self.kind)
