"""``pods/log``: the API server reads a container's log from its node agent.

``GET /api/v1/namespaces/NS/pods/NAME/log?container=C&follow=...`` (what
``kubectl logs`` sends) becomes ``GET https://ADDRESS:PORT/containerLogs/NS/NAME/C``
on the agent of the pod's node, with upstream's query parameters (follow,
previous, timestamps, sinceSeconds, sinceTime, tailLines, limitBytes), and the
agent's answer is streamed through as it arrives (``follow`` keeps it open).

Where the agent is: the Node's ``status.addresses`` (InternalIP first, then
Hostname, InternalDNS, ExternalIP, ExternalDNS) and
``status.daemonEndpoints.kubeletEndpoint.Port`` (the schema keeps upstream's
field name; 10250 when unset).

How the server talks to agents. It presents a client certificate signed by the
cluster CA, made on first use and kept at ``DATA_DIR/pki/agent-client.{crt,key}``:
CN ``orch-apiserver-agent-client``, O ``system:masters``, so an agent that asks
this server to authorize its callers (webhook mode) is told yes, as upstream
clusters grant the API server's kubelet-client identity everything on nodes. The
agent's serving certificate is verified (chain and address) when it was issued
by the cluster CA (or the node-agent serving signer); a certificate from anyone
else - the self-signed one an agent makes for itself - is accepted unverified,
which is upstream's default without ``--kubelet-certificate-authority``.

Errors. A pod without a node has an empty log (upstream). Bad options are 400
or 422 as upstream's conversion and validation answer them; the agent's non-2xx
answers come back with the agent's status code as a Status (400 carries the
agent's text, as "container ... is waiting to start"); an agent that cannot be
reached is a 500 naming the URL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import os
import ssl
import time
import traceback
import urllib.parse
import weakref
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping, TypeVar

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from ..api.timeutil import format_rfc3339, parse_rfc3339
from ..pki import cert_pem, key_pem, new_key, sign_leaf, write_private, write_public
from ..registry.rest import RequestContext

if TYPE_CHECKING:
    from .context import ServerContext

log = logging.getLogger("orch-apiserver.podlogs")

CLIENT_CERT_FILE = "agent-client.crt"
CLIENT_KEY_FILE = "agent-client.key"
ADDRESS_PREFERENCE = ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS")
CONNECT_TIMEOUT = 10.0
LIVENESS_CHECK = 5.0  # seconds between checks that a following client is still there
MAX_ERROR_BODY = 64 * 1024
# OpenSSL verify codes that mean "issued by a CA we trust, but not valid here".
_CHAINED_BUT_INVALID = {10, 62, 64}  # expired, hostname mismatch, IP address mismatch
# An agent whose serving certificate is not from a CA we trust (its own self-signed one, say)
# is reached unverified, and that finding is kept this long: each request then does not pay a
# failed handshake first, whose exception (with its frames, the connection and its TLS
# buffers) would live until the next full garbage collection.
VERIFY_AGAIN = 300.0
_UNVERIFIED_MAX = 16384  # agents remembered at once (expired ones are dropped first)

T = TypeVar("T")

_GENERIC_MESSAGES = {
    401: ("Unauthorized", "the server has asked for the client to provide credentials"),
    403: ("Forbidden", "the server does not allow access to the requested resource"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    406: ("NotAcceptable", "the server was unable to respond with a content type that the client supports"),
    409: ("Conflict", "the server reported a conflict"),
    415: ("UnsupportedMediaType", "the server was unable to respond with a content type that the client supports"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be processing the request",
    ),
}


# --- options ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PodLogOptions:
    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: str | None = None  # RFC 3339, seconds
    tail_lines: int | None = None
    limit_bytes: int | None = None

    def agent_query(self) -> dict[str, str]:
        """The agent's query, built as upstream's LogLocation builds it."""
        q: dict[str, str] = {}
        if self.follow:
            q["follow"] = "true"
        if self.previous:
            q["previous"] = "true"
        if self.timestamps:
            q["timestamps"] = "true"
        if self.since_seconds is not None:
            q["sinceSeconds"] = str(self.since_seconds)
        if self.since_time is not None:
            q["sinceTime"] = self.since_time
        if self.tail_lines is not None:
            q["tailLines"] = str(self.tail_lines)
        if self.limit_bytes is not None:
            q["limitBytes"] = str(self.limit_bytes)
        return q


def _go_bool(query: Mapping[str, str], name: str) -> bool:
    v = query.get(name)
    if v is None or v == "":
        return False
    if v in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if v in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise st.bad_request(f'invalid {name} "{v}": strconv.ParseBool: parsing "{v}": invalid syntax')


def _go_int(query: Mapping[str, str], name: str) -> int | None:
    v = query.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v, 10)
    except ValueError:
        raise st.bad_request(f'invalid {name} "{v}": strconv.ParseInt: parsing "{v}": invalid syntax') from None


def parse_log_options(query: Mapping[str, str], pod_name: str) -> PodLogOptions:
    """The query as upstream's PodLogOptions: 400 for values that do not convert, 422
    (kind PodLogOptions) for ones that fail validation."""
    since_time = query.get("sinceTime") or None
    if since_time is not None:
        try:
            since_time = format_rfc3339(parse_rfc3339(since_time))
        except (ValueError, TypeError) as exc:
            raise st.bad_request(f'invalid sinceTime "{query.get("sinceTime")}": {exc}') from None
    opts = PodLogOptions(
        container=query.get("container", ""),
        follow=_go_bool(query, "follow"),
        previous=_go_bool(query, "previous"),
        timestamps=_go_bool(query, "timestamps"),
        since_seconds=_go_int(query, "sinceSeconds"),
        since_time=since_time,
        tail_lines=_go_int(query, "tailLines"),
        limit_bytes=_go_int(query, "limitBytes"),
    )
    causes = []
    if opts.tail_lines is not None and opts.tail_lines < 0:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "tailLines",
                "message": f"Invalid value: {opts.tail_lines}: must be greater than or equal to 0",
            }
        )
    if opts.limit_bytes is not None and opts.limit_bytes < 1:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "limitBytes",
                "message": f"Invalid value: {opts.limit_bytes}: must be greater than 0",
            }
        )
    if opts.since_seconds is not None and opts.since_time is not None:
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "field": "",
                "message": "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            }
        )
    if opts.since_seconds is not None and opts.since_seconds < 1:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "sinceSeconds",
                "message": f"Invalid value: {opts.since_seconds}: must be greater than 0",
            }
        )
    if causes:
        raise st.invalid("PodLogOptions", pod_name, causes)
    return opts


def choose_container(pod: Mapping, requested: str) -> str:
    """Upstream's validateContainer: the named container must exist; with no name, the
    pod's only container, else 400 listing every container."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    all_names = [
        c.get("name", "")
        for part in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(part) or []
        if isinstance(c, dict)
    ]
    if requested:
        if requested not in all_names:
            raise st.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    if len(containers) == 1:
        return containers[0].get("name", "")
    if not containers:
        raise st.bad_request(f"a container name must be specified for pod {name}")
    raise st.bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(all_names)}]")


def agent_location(node: Mapping) -> tuple[str, int]:
    """(address, port) of a node's agent; 400 naming the node when it publishes no address."""
    status = node.get("status") or {}
    addresses = [a for a in status.get("addresses") or [] if isinstance(a, dict) and a.get("address")]
    for wanted in ADDRESS_PREFERENCE:
        for a in addresses:
            if a.get("type") == wanted:
                port = ((status.get("daemonEndpoints") or {}).get(names.NODE_DAEMON_ENDPOINT_AGENT_FIELD) or {}).get(
                    "Port"
                )
                if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
                    port = names.AGENT_DEFAULT_PORT
                return a["address"], port
    node_name = (node.get("metadata") or {}).get("name", "")
    raise st.bad_request(
        f"node {node_name} has no address the API server can reach its agent at (status.addresses is empty)"
    )


def agent_error(code: int, body: bytes, pod_name: str) -> st.ApiError:
    """The agent's non-2xx answer as upstream's generic response checker reports it."""
    text = body.decode("utf-8", "replace").strip()
    if code == 400:
        return st.ApiError(400, "BadRequest", text or "the server rejected our request for an unknown reason")
    if code == 500:
        return st.ApiError(
            500, "InternalError", f"Internal error occurred: {text}", details={"causes": [{"message": text}]}
        )
    reason, message = _GENERIC_MESSAGES.get(
        code, ("", f"the server responded with the status code {code} but did not return more information")
    )
    if code == 403 and text:
        message = text
    return st.ApiError(
        code,
        reason,
        f"{message} ( pods/log {pod_name})",
        details={
            "name": pod_name,
            "kind": "pods/log",
            "causes": [{"reason": "UnexpectedServerResponse", "message": text}],
        }
        if text
        else {"name": pod_name, "kind": "pods/log"},
    )


# --- the client side towards agents --------------------------------------------------------


class AgentClient:
    """The API server's TLS identity towards node agents, and what it trusts of theirs."""

    def __init__(self, server: "ServerContext"):
        self.server = server
        self.cert_path = os.path.join(server.pki.dir, CLIENT_CERT_FILE)
        self.key_path = os.path.join(server.pki.dir, CLIENT_KEY_FILE)
        self._verified: ssl.SSLContext | None = None
        self._insecure: ssl.SSLContext | None = None
        self._unverified: dict[str, float] = {}  # "host:port" -> when to try verifying again

    def ensure_client_cert(self) -> bool:
        """Create the client certificate when missing (or when its CA changed); True if made."""
        ca_cert, ca_key = self.server.pki.load_ca()
        if os.path.exists(self.cert_path) and os.path.exists(self.key_path):
            with open(self.cert_path, "rb") as f:
                current = x509.load_pem_x509_certificate(f.read())
            if current.issuer == ca_cert.subject:
                try:
                    current.verify_directly_issued_by(ca_cert)
                    return False
                except (ValueError, TypeError, InvalidSignature):
                    pass  # signed by an earlier CA of that name: make a new one
        key = new_key()
        cert = sign_leaf(
            ca_cert, ca_key, key.public_key(), names.APISERVER_AGENT_CLIENT_USER, [names.GROUP_MASTERS], client=True
        )
        write_private(self.key_path, key_pem(key))
        write_public(self.cert_path, cert_pem(cert))
        log.info(
            "created %s (client certificate for node agents, CN %s)", self.cert_path, names.APISERVER_AGENT_CLIENT_USER
        )
        return True

    def _trusted_cas(self) -> list[str]:
        cas = [self.server.pki.ca_cert]
        for signer, cert, _key in getattr(self.server.opts, "cluster_signing_files", ()):
            if signer == names.SIGNER_NODE_AGENT_SERVING and cert not in cas:
                cas.append(cert)
        return [c for c in cas if os.path.exists(c)]

    def contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        """(verifying, insecure) client contexts, both presenting the client certificate."""
        if self._verified is None or self._insecure is None:
            self.ensure_client_cert()
            # The cluster's CAs alone: not the system's public ones (hostname checked, as a
            # client context does by default).
            verified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            bundle = []
            for path in self._trusted_cas():
                with open(path) as f:
                    bundle.append(f.read())
            verified.load_verify_locations(cadata="\n".join(bundle))
            insecure = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            for ctx in (verified, insecure):
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                ctx.load_cert_chain(self.cert_path, self.key_path)
            self._verified, self._insecure = verified, insecure
        return self._verified, self._insecure

    async def call(self, url: str, attempt: Callable[[ssl.SSLContext], Awaitable[T]], *, can_retry: bool = True) -> T:
        """``attempt(context)`` towards the agent at ``url``: with the verifying context when
        the agent's certificate comes from a CA we trust, the unverifying one when it comes
        from anyone else. A certificate from our CA that is not valid (expired, another
        name) is refused. ``can_retry`` False: a failed first try is not repeated (a request
        body already sent), though the finding is kept for the next request."""
        verified, insecure = self.contexts()
        where = urllib.parse.urlsplit(url).netloc
        until = self._unverified.get(where)
        if until is not None and until > time.monotonic():
            return await attempt(insecure)
        try:
            result = await attempt(verified)
        except aiohttp.ClientConnectorCertificateError as exc:
            if getattr(exc.certificate_error, "verify_code", None) in _CHAINED_BUT_INVALID:
                raise
            log.debug(
                "agent at %s has a certificate from outside the cluster CA (%s); not verified",
                url,
                exc.certificate_error,
            )
            self._note_unverified(where)
            if not can_retry:
                raise
            drop_frames(exc)
        else:
            if until is not None:
                self._unverified.pop(where, None)  # verified now (a concurrent call may have been first)
            return result
        return await attempt(insecure)

    def _note_unverified(self, where: str) -> None:
        now = time.monotonic()
        if len(self._unverified) >= _UNVERIFIED_MAX:
            for key in [k for k, t in self._unverified.items() if t <= now] or list(self._unverified):
                del self._unverified[key]
        self._unverified[where] = now + VERIFY_AGAIN

    async def open(self, session: aiohttp.ClientSession, url: str) -> aiohttp.ClientResponse:
        """GET ``url`` (see :meth:`call`)."""
        return await self.call(url, lambda ctx: session.get(url, ssl=ctx))


def drop_frames(exc: BaseException) -> None:
    """Clear the local variables of the frames an exception (and its causes) went through:
    they would keep what the failed attempt held (its connection) in a reference cycle."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__


_clients: "weakref.WeakKeyDictionary[ServerContext, AgentClient]" = weakref.WeakKeyDictionary()


def agent_client(server: "ServerContext") -> AgentClient:
    client = _clients.get(server)
    if client is None:
        client = _clients[server] = AgentClient(server)
    return client


def _host_for_url(address: str) -> str:
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]"
    except ValueError:
        pass
    return address


async def serve_pod_log(
    server: "ServerContext", request: web.Request, ctx: RequestContext, kind: KindInfo
) -> web.StreamResponse:
    """The ``pods/log`` sub-resource: validate, find the agent, stream its answer."""
    pod = await server.store.get_object(kind, ctx.namespace, ctx.name)
    opts = parse_log_options(request.query, ctx.name)
    container = choose_container(pod, opts.container)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return web.Response(body=b"", content_type="text/plain")
    nodes = server.registry.by_resource("", "v1", "nodes")
    node = await server.store.get_object(nodes, "", node_name)
    address, port = agent_location(node)
    path = "/containerLogs/" + "/".join(urllib.parse.quote(p, safe="") for p in (ctx.namespace, ctx.name, container))
    query = urllib.parse.urlencode(opts.agent_query())
    url = f"https://{_host_for_url(address)}:{port}{path}" + (f"?{query}" if query else "")
    client = agent_client(server)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, connect=CONNECT_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        try:
            upstream = await client.open(session, url)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise st.ApiError(500, "", f'Get "{url}": {exc or type(exc).__name__}') from None
        async with upstream:
            if not 200 <= upstream.status <= 206:
                body = await upstream.content.read(MAX_ERROR_BODY)
                raise agent_error(upstream.status, body, ctx.name)
            out = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            await out.prepare(request)
            await _pump(request, upstream, out)
            return out


async def _pump(request: web.Request, upstream: aiohttp.ClientResponse, out: web.StreamResponse) -> None:
    """Copy the agent's body to the client as it comes; stop when either side ends."""
    try:
        while True:
            try:
                async with asyncio.timeout(LIVENESS_CHECK):
                    chunk = await upstream.content.readany()
            except asyncio.TimeoutError:
                transport = request.transport
                if transport is None or transport.is_closing():
                    return  # the client went away during a quiet follow
                continue
            if not chunk:
                break
            await out.write(chunk)
        await out.write_eof()
    except (ConnectionResetError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
        log.debug("log stream for %s ended early: %s", request.path, exc)


class PodLogREST:
    """The ``pods/log`` sub-resource as a REST object (``registry.rest.Connecter``)."""

    def __init__(self, server: "ServerContext", kind: KindInfo):
        self.server = server
        self.kind = kind

    async def connect(self, ctx: RequestContext, request: web.Request) -> web.StreamResponse:
        return await serve_pod_log(self.server, request, ctx, self.kind)
