"""The ``proxy`` sub-resources of services, pods and nodes.

``/api/v1/namespaces/NS/services/[SCHEME:]NAME[:PORT]/proxy/PATH`` (and the
same shape under ``pods/`` and ``nodes/``) forwards the request - any method,
its headers and body, streamed both ways - to:

- services: a ready endpoint of the Service, chosen at random among the ready
  addresses of its Endpoints object and its EndpointSlices (``orch.io/service-name``)
  in the watch cache, on the endpoint port whose name is the service port's
  (PORT may be the service port's name or number; a number no port has is 503).
  As upstream, an address counts only when its ``targetRef`` is a Pod of the
  namespace whose ``status.podIPs`` hold it, so nobody can point a Service at an
  arbitrary address and have the API server call it; none left is 503 "no
  endpoints available";
- pods: the pod's IP (it must be a global unicast address, else 400 "address not
  allowed"), on PORT, or the first declared container port, or none (80);
- nodes: the node's agent (as ``pods/log`` finds it, with the API server's agent
  client certificate) when PORT is empty or the agent's port; any other PORT is
  a plain request to that port of the node's address. Loopback and link-local
  node addresses are refused (400 "address not allowed"), as upstream.

SCHEME is ``http`` (default) or ``https`` (not verified, as upstream's proxy
transport). Path rules: the target path is the rest of the URL after
``/proxy``, as sent (escapes kept), with ``.`` and ``..`` segments resolved and
repeated slashes folded, the trailing slash kept; ``.../proxy`` with nothing
after it is answered with a 301 to ``.../proxy/``. The query string is passed
on as sent. The client's ``Authorization``, ``Impersonate-*`` and hop-by-hop
headers are not forwarded; ``X-Forwarded-For`` gets the client's address; the
``Host`` header is the client's. A target that cannot be reached is 503
"error trying to reach service". Protocol upgrades (WebSocket, SPDY) are
refused with 400: this server does not relay them. Authorization is per HTTP
method on the ``proxy`` sub-resource (GET and HEAD ``get``, POST ``create``, PUT
``update``, PATCH ``patch``, DELETE ``delete``; other methods are 405), with the
resource name as written in the path (``https:web:443``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import ssl
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from ..api import names
from ..api import status as st
from ..api.codec import decode_stored
from ..api.kinds import KindInfo
from ..api.selectors import parse_label_selector
from ..registry.rest import RequestContext
from .podlogs import CONNECT_TIMEOUT, agent_client, agent_location

if TYPE_CHECKING:
    from .context import ServerContext

log = logging.getLogger("orch-apiserver.proxy")

# Hop-by-hop headers (RFC 9110 7.6.1) and what this server consumed itself.
_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
    )
)
_NOT_FORWARDED = _HOP_BY_HOP | {"authorization", "content-length"}
_SCHEMES = ("", "http", "https")


def split_scheme_name_port(ident: str) -> tuple[str, str, str] | None:
    """``name``, ``name:port`` or ``scheme:name:port`` (scheme http or https); None if not one of them."""
    parts = ident.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        return None
    if not name or scheme not in _SCHEMES:
        return None
    return scheme, name, port


def target_path(raw_path: str, resource: str, raw_name: str) -> str | None:
    """The path on the target: what follows ``/RESOURCE/NAME/proxy`` in the raw request
    path, cleaned (``.``/``..`` resolved, slashes folded, trailing slash kept); None
    when nothing follows (the caller redirects to the trailing-slash form)."""
    segs = raw_path.split("/")
    for i in range(2, len(segs)):
        if segs[i] == "proxy" and segs[i - 2] == resource and unquote(segs[i - 1]) == raw_name:
            rest = segs[i + 1 :]
            break
    else:
        return None
    if not rest:
        return None
    out: list[str] = []
    for s in rest:
        if s in ("", "."):
            continue
        if s == "..":
            if out:
                out.pop()
            continue
        out.append(s)
    return "/" + "/".join(out) + ("/" if rest[-1] == "" and out else "")


def _host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip


def _global_unicast(ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return not (
        addr.is_loopback or addr.is_link_local or addr.is_multicast or addr.is_unspecified or addr.is_reserved
    ) and not (addr.version == 4 and str(addr) == "255.255.255.255")


def _proxyable_node_ip(ip: str) -> bool:
    """Upstream's IsProxyableIP: not loopback, link-local unicast or multicast."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return True  # a host name: checked once resolved
    return not (addr.is_loopback or addr.is_link_local or (addr.is_multicast and addr.version == 6))


async def _resolve_checked(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        addrs = [host]
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, None)
        except OSError as exc:
            raise st.bad_request(f"failed to resolve host {host}: {exc}") from None
        addrs = [str(i[4][0]) for i in infos]
    for a in addrs:
        if not _proxyable_node_ip(a):
            raise st.bad_request("address not allowed")


def _pod_ips(pod: Mapping) -> list[str]:
    status = pod.get("status") or {}
    ips = [p.get("ip") for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")]
    if not ips and status.get("podIP"):
        ips = [status["podIP"]]
    return ips


class Target:
    def __init__(self, scheme: str, host: str, port: int | str | None, *, agent: bool = False) -> None:
        self.scheme = scheme or "http"
        self.host = host
        self.port = port
        self.agent = agent  # the node agent: its TLS with the API server's client certificate

    def url(self, path: str, query: str) -> str:
        hostport = _host(self.host) + (f":{self.port}" if self.port not in (None, "") else "")
        return f"{self.scheme}://{hostport}{path}" + (f"?{query}" if query else "")


class ProxyREST:
    """``services/proxy``, ``pods/proxy`` and ``nodes/proxy`` (``registry.rest.Connecter``)."""

    def __init__(self, server: "ServerContext", kind: KindInfo) -> None:
        self.server = server
        self.kind = kind
        self._insecure: ssl.SSLContext | None = None

    # --- where to ---------------------------------------------------------------------
    async def _get(self, resource: str, namespace: str, name: str) -> dict:
        kind = self.server.registry.by_resource("", "v1", resource)
        assert kind is not None
        return await self.server.store.get_object(kind, namespace, name)

    async def _list(self, group: str, resource: str, namespace: str, selector: str = "") -> list[dict]:
        kind = self.server.registry.by_resource(group, "v1", resource)
        if kind is None:
            return []
        labels = parse_label_selector(selector) if selector else None
        res = await self.server.store.list(kind, namespace, labels, None, "0", None, 0, None)
        return [decode_stored(raw, rev) for raw, rev in res.items]

    async def locate(self, ctx: RequestContext) -> Target:
        resource = self.kind.resource
        parsed = split_scheme_name_port(ctx.name)
        if parsed is None:
            raise st.bad_request(f'invalid {self.kind.singular_name} request "{ctx.name}"')
        scheme, name, port = parsed
        if resource == "services":
            return await self._service(ctx.namespace, scheme, name, port)
        if resource == "pods":
            return await self._pod(ctx.namespace, scheme, name, port)
        return await self._node(scheme, name, port)

    async def _pod(self, namespace: str, scheme: str, name: str, port: str) -> Target:
        pod = await self._get("pods", namespace, name)
        if not port:
            for c in (pod.get("spec") or {}).get("containers") or []:
                ports = c.get("ports") or [] if isinstance(c, dict) else []
                if ports and isinstance(ports[0], dict) and ports[0].get("containerPort"):
                    port = str(ports[0]["containerPort"])
                    break
        ips = _pod_ips(pod)
        if not ips or not _global_unicast(ips[0]):
            raise st.bad_request("address not allowed")
        return Target(scheme, ips[0], port)

    async def _node(self, scheme: str, name: str, port: str) -> Target:
        node = await self._get("nodes", "", name)
        address, agent_port = agent_location(node)
        await _resolve_checked(address)
        if not port or port == str(agent_port):
            return Target("https", address, agent_port, agent=True)
        return Target(scheme, address, port)

    async def _service(self, namespace: str, scheme: str, name: str, port: str) -> Target:
        svc = await self._get("services", namespace, name)
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            raise st.bad_request(f'service "{name}" is of type ExternalName: it has no endpoints to proxy to')
        if port.isdigit():
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and str(p.get("port")) == str(int(port)):
                    port = p.get("name") or ""
                    break
            else:
                raise st.ApiError(503, "ServiceUnavailable", f'no service port {int(port)} found for service "{name}"')
        candidates = await self._ready_addresses(namespace, name, port)
        if not candidates:
            raise st.ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')
        random.shuffle(candidates)
        pods: dict[str, list[str]] = {}
        for ip, ep_port, ref in candidates:
            if not isinstance(ref, dict) or ref.get("kind", "Pod") != "Pod" or not ref.get("name"):
                log.debug("endpoint %s of service %s/%s has no pod reference; skipped", ip, namespace, name)
                continue
            if (ref.get("namespace") or namespace) != namespace:
                continue
            pod_name = ref["name"]
            if pod_name not in pods:
                try:
                    pods[pod_name] = _pod_ips(await self._get("pods", namespace, pod_name))
                except st.ApiError:
                    pods[pod_name] = []
            if ip in pods[pod_name]:
                return Target(scheme, ip, ep_port)
            log.debug("endpoint %s of service %s/%s is not an IP of pod %s; skipped", ip, namespace, name, pod_name)
        raise st.ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')

    async def _ready_addresses(self, namespace: str, name: str, port_name: str) -> list[tuple[str, int, Any]]:
        out: list[tuple[str, int, Any]] = []
        try:
            eps = await self._get("endpoints", namespace, name)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
            eps = {}
        for subset in eps.get("subsets") or []:
            for p in subset.get("ports") or []:
                if (p.get("name") or "") == port_name and isinstance(p.get("port"), int):
                    for a in subset.get("addresses") or []:
                        if a.get("ip"):
                            out.append((a["ip"], p["port"], a.get("targetRef")))
        selector = f"{names.LABEL_SERVICE_NAME}={name}"
        for sl in await self._list(names.DISCOVERY_GROUP, "endpointslices", namespace, selector):
            ports = [
                p
                for p in sl.get("ports") or []
                if (p.get("name") or "") == port_name and isinstance(p.get("port"), int)
            ]
            if not ports:
                continue
            for ep in sl.get("endpoints") or []:
                ready = (ep.get("conditions") or {}).get("ready")
                if ready is False or not ep.get("addresses"):
                    continue
                out.append((ep["addresses"][0], ports[0]["port"], ep.get("targetRef")))
        return out

    # --- the request ------------------------------------------------------------------
    async def connect(self, ctx: RequestContext, request: web.Request) -> web.StreamResponse:
        if "upgrade" in request.headers.get("Connection", "").lower() or request.headers.get("Upgrade"):
            raise st.bad_request(
                f"upgrade requests ({request.headers.get('Upgrade', 'Connection: upgrade')}) through "
                f"{self.kind.resource}/proxy are not supported by this server"
            )
        path = target_path(request.rel_url.raw_path, self.kind.resource, ctx.name)
        if path is None:
            query = request.rel_url.raw_query_string
            location = request.rel_url.raw_path + "/" + (f"?{query}" if query else "")
            return web.Response(status=301, headers={"Location": location})
        target = await self.locate(ctx)
        url = target.url(path, request.rel_url.raw_query_string)
        headers = self._forward_headers(request)
        body: AsyncIterator[bytes] | None = None
        if request.can_read_body:
            body = _stream(request)
            if request.content_length is not None:
                headers["Content-Length"] = str(request.content_length)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, connect=CONNECT_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            try:
                upstream = await self._send(session, request.method, url, headers, body, target)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                raise st.ApiError(
                    503, "ServiceUnavailable", f"error trying to reach service: {exc or type(exc).__name__}"
                ) from None
            async with upstream:
                out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for k, v in upstream.headers.items():
                    if k.lower() not in _HOP_BY_HOP:
                        out.headers.add(k, v)
                await out.prepare(request)
                if request.method != "HEAD":
                    try:
                        async for chunk in upstream.content.iter_any():
                            await out.write(chunk)
                    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionResetError) as exc:
                        log.debug("proxied response for %s ended early: %s", request.path, exc)
                        return out
                await out.write_eof()
                return out

    def _forward_headers(self, request: web.Request) -> dict[str, str]:
        listed = {h.strip().lower() for h in request.headers.get("Connection", "").split(",") if h.strip()}
        headers: dict[str, str] = {}
        for k, v in request.headers.items():
            low = k.lower()
            if low in _NOT_FORWARDED or low in listed or low.startswith("impersonate-"):
                continue
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        peer = request.remote or ""
        if peer:
            prior = request.headers.get("X-Forwarded-For")
            headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
        return headers

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        headers: dict[str, str],
        body: AsyncIterator[bytes] | None,
        target: Target,
    ) -> aiohttp.ClientResponse:
        kw: dict[str, Any] = {"headers": headers, "data": body, "allow_redirects": False, "skip_auto_headers": ()}
        if target.agent:
            # A body is consumed by the first try: no second one (the next request goes unverified).
            return await agent_client(self.server).call(
                url, lambda ctx: session.request(method, url, ssl=ctx, **kw), can_retry=body is None
            )
        if target.scheme == "https":
            return await session.request(method, url, ssl=self._insecure_context(), **kw)
        return await session.request(method, url, **kw)

    def _insecure_context(self) -> ssl.SSLContext:
        if self._insecure is None:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self._insecure = ctx
        return self._insecure


async def _stream(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_any():
        yield chunk
