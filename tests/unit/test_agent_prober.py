"""agent.prober: probes (exec, httpGet, tcpSocket, grpc), lifecycle hooks and the
probe manager, against cri.fake.FakeRuntime and real local servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time

import grpc
import grpc.aio
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from agent.prober import ContainerRef, ProbeFailure, ProbeManager, Result, run_handler, run_probe
from agent.prober import manager as manager_module
from agent.prober.probes import (
    MAX_BODY_BYTES,
    decode_health_check_response,
    encode_health_check_request,
    resolve_port,
)
from apiserver_min import pki
from cri import api_pb2 as pb
from cri.client import CriClient
from cri.fake import ExecResult, FakeRuntime

UA = "orch-probe/1.27"
POD_IP = "127.0.0.1"


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture
async def fake():
    async with FakeRuntime() as runtime:
        yield runtime


@pytest.fixture
async def cri(fake):
    async with CriClient(fake.endpoint, request_timeout=5) as client:
        yield client


class Containers:
    """Starts fake containers (one sandbox per pod name)."""

    def __init__(self, cri: CriClient):
        self.cri = cri
        self.sandboxes: dict[str, tuple[str, pb.PodSandboxConfig]] = {}
        self.attempts: dict[tuple[str, str], int] = {}

    async def start(self, pod: str = "web", name: str = "app") -> str:
        if pod not in self.sandboxes:
            config = pb.PodSandboxConfig(
                metadata=pb.PodSandboxMetadata(name=pod, uid=f"uid-{pod}", namespace="default"), hostname=pod
            )
            self.sandboxes[pod] = (await self.cri.run_pod_sandbox(config), config)
        sandbox_id, config = self.sandboxes[pod]
        attempt = self.attempts.get((pod, name), 0)
        self.attempts[(pod, name)] = attempt + 1
        container = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=attempt),
            image=pb.ImageSpec(image="orch.local/busybox:1"),
            command=["sleep", "3600"],
        )
        container_id = await self.cri.create_container(sandbox_id, container, config)
        await self.cri.start_container(container_id)
        return container_id


@pytest.fixture
def containers(cri):
    return Containers(cri)


def make_pod(
    *containers: dict, uid: str = "uid-web", name: str = "web", restart_policy: str = "Always", deleting: bool = False
) -> dict:
    meta = {"name": name, "namespace": "default", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": list(containers), "restartPolicy": restart_policy}}


def running(container_id: str, started_at: float | None = None) -> ContainerRef:
    return ContainerRef(container_id, True, time.time() if started_at is None else started_at)


async def eventually(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


async def serve(app: web.Application, ssl_context: ssl.SSLContext | None = None):
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock, ssl_context=ssl_context)
    await site.start()
    return runner, sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class HttpServer:
    def __init__(self):
        self.requests: list[web.Request] = []
        self.port = 0
        self.release = asyncio.Event()  # lets /slow answer at teardown
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self.app = app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        path = request.path
        if path == "/ok":
            return web.Response(text="all good")
        if path == "/fail":
            return web.Response(status=503, text="secret details")
        if path == "/headers":
            return web.json_response({k: request.headers.getall(k) for k in request.headers})
        if path == "/query":
            return web.Response(text=request.query_string)
        if path == "/same-host":
            raise web.HTTPFound("/ok")
        if path == "/other-host":
            raise web.HTTPFound(f"http://localhost:{self.port}/ok")
        if path == "/loop":
            raise web.HTTPFound("/loop")
        if path == "/slow":
            await self.release.wait()
            return web.Response(text="late")
        if path == "/big":
            return web.Response(body=b"x" * (MAX_BODY_BYTES * 3))
        return web.Response(status=404)


@pytest.fixture
async def http_server():
    server = HttpServer()
    runner, server.port = await serve(server.app)
    yield server
    server.release.set()
    await runner.cleanup()


@pytest.fixture
async def https_server(tmp_path):
    ca_cert, ca_key = pki.make_ca("probe-test-ca")
    key = pki.new_key()
    # A name that does not match 127.0.0.1, from a CA nobody trusts: only an
    # unverified client gets through.
    cert = pki.sign_leaf(ca_cert, ca_key, key.public_key(), "example.invalid", server=True, dns=["example.invalid"])
    (tmp_path / "tls.crt").write_bytes(pki.cert_pem(cert))
    (tmp_path / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = HttpServer()
    runner, server.port = await serve(server.app, context)
    yield server
    server.release.set()
    await runner.cleanup()


def http_probe(port, path="/ok", **extra) -> dict:
    return {"httpGet": {"port": port, "path": path, **extra}, "timeoutSeconds": 2}


APP = {"name": "app", "ports": [{"name": "http", "containerPort": 0}]}


# -- exec probes ---------------------------------------------------------------------


async def test_exec_probe_success_and_failure(fake, cri, containers):
    cid = await containers.start()
    fake.on_exec(["check"], ExecResult(exit_code=0, stdout="fine\n"))
    fake.on_exec(["broken"], ExecResult(exit_code=3, stdout="out ", stderr="err"))
    pod = make_pod(APP)
    ok = await run_probe(cri, {"exec": {"command": ["check"]}}, pod, APP, cid, POD_IP, user_agent=UA)
    assert ok == (Result.SUCCESS, "fine\n")
    bad = await run_probe(cri, {"exec": {"command": ["broken"]}}, pod, APP, cid, POD_IP, user_agent=UA)
    assert bad == (Result.FAILURE, "out err")
    request = [r for m, r in fake.calls if m == "ExecSync"][-1]
    assert list(request.cmd) == ["broken"] and request.timeout == 1


async def test_exec_probe_output_is_limited(fake, cri, containers):
    cid = await containers.start()
    fake.on_exec(["chatty"], ExecResult(exit_code=1, stdout="y" * (MAX_BODY_BYTES * 2)))
    result, message = await run_probe(
        cri, {"exec": {"command": ["chatty"]}}, make_pod(APP), APP, cid, POD_IP, user_agent=UA
    )
    assert result is Result.FAILURE and len(message) == MAX_BODY_BYTES


async def test_exec_probe_timeout_enforced_by_runtime(fake, cri, containers):
    cid = await containers.start()
    fake.on_exec(["slow"], ExecResult(duration=10))
    probe = {"exec": {"command": ["slow", "arg"]}, "timeoutSeconds": 1}
    result, message = await run_probe(cri, probe, make_pod(APP), APP, cid, POD_IP, user_agent=UA)
    assert (result, message) == (Result.FAILURE, 'command "slow arg" timed out')


async def test_exec_probe_subsecond_timeout(fake, cri, containers):
    cid = await containers.start()
    fake.on_exec(["slow"], ExecResult(duration=10))
    began = time.monotonic()
    result, message = await run_probe(
        cri, {"exec": {"command": ["slow"]}}, make_pod(APP), APP, cid, POD_IP, user_agent=UA, timeout=0.2
    )
    assert result is Result.FAILURE and "timed out" in message
    assert time.monotonic() - began < 0.9  # the runtime's whole second was not awaited


async def test_exec_probe_on_stopped_container_errors(fake, cri, containers):
    cid = await containers.start()
    fake.exit_container(cid, 0)
    result, message = await run_probe(
        cri, {"exec": {"command": ["true"]}}, make_pod(APP), APP, cid, POD_IP, user_agent=UA
    )
    assert result is Result.UNKNOWN and "CONTAINER_EXITED" in message


async def test_probe_without_handler_errors(cri):
    result, message = await run_probe(cri, {"periodSeconds": 3}, make_pod(APP), APP, "x", POD_IP, user_agent=UA)
    assert result is Result.UNKNOWN
    assert message == "missing probe handler for web_default(uid-web):app"


# -- httpGet probes ----------------------------------------------------------------


async def test_http_probe_success_and_status_failure(cri, http_server):
    pod = make_pod(APP)
    ok = await run_probe(cri, http_probe(http_server.port), pod, APP, "", POD_IP, user_agent=UA)
    assert ok == (Result.SUCCESS, "all good")
    bad = await run_probe(cri, http_probe(http_server.port, "/fail"), pod, APP, "", POD_IP, user_agent=UA)
    assert bad == (Result.FAILURE, "HTTP probe failed with statuscode: 503")
    query = await run_probe(cri, http_probe(http_server.port, "/query?a=1&b=two"), pod, APP, "", POD_IP, user_agent=UA)
    assert query == (Result.SUCCESS, "a=1&b=two")


async def test_http_probe_default_headers(cri, http_server):
    result, body = await run_probe(
        cri, http_probe(http_server.port, "/headers"), make_pod(APP), APP, "", POD_IP, user_agent=UA
    )
    assert result is Result.SUCCESS
    headers = {k.lower(): v for k, v in json.loads(body).items()}
    assert headers["user-agent"] == [UA]
    assert headers["accept"] == ["*/*"]
    assert headers["host"] == [f"127.0.0.1:{http_server.port}"]
    assert "accept-encoding" not in headers  # upstream disables compression
    assert headers["connection"] == ["close"]  # no keep-alive for probes


async def test_http_probe_custom_headers(cri, http_server):
    probe = http_probe(
        http_server.port,
        "/headers",
        httpHeaders=[
            {"name": "Host", "value": "svc.example"},
            {"name": "X-Token", "value": "a"},
            {"name": "X-Token", "value": "b"},
            {"name": "user-agent", "value": "mine/1"},
            {"name": "Accept", "value": ""},
        ],
    )
    result, body = await run_probe(cri, probe, make_pod(APP), APP, "", POD_IP, user_agent=UA)
    assert result is Result.SUCCESS
    headers = {k.lower(): v for k, v in json.loads(body).items()}
    assert headers["host"] == ["svc.example"]
    assert headers["x-token"] == ["a", "b"]
    assert headers["user-agent"] == ["mine/1"]
    assert "accept" not in headers  # an empty Accept removes the header


async def test_http_probe_named_and_string_ports(cri, http_server):
    container = {"name": "app", "ports": [{"name": "web", "containerPort": http_server.port}]}
    pod = make_pod(container)
    assert (await run_probe(cri, http_probe("web"), pod, container, "", POD_IP, user_agent=UA))[0] is Result.SUCCESS
    assert (await run_probe(cri, http_probe(str(http_server.port)), pod, container, "", POD_IP, user_agent=UA))[
        0
    ] is Result.SUCCESS
    result, message = await run_probe(cri, http_probe("metrics"), pod, container, "", POD_IP, user_agent=UA)
    assert (result, message) == (Result.UNKNOWN, "port metrics not found")


def test_resolve_port():
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port("http", container) == 8080
    assert resolve_port(9090, container) == 9090
    assert resolve_port("9091", container) == 9091
    for bad, text in (
        (0, "invalid port number: 0"),
        (70000, "invalid port number: 70000"),
        ("grpc", "port grpc not found"),
        (None, "intOrString had no kind"),
    ):
        with pytest.raises(ValueError, match=text):
            resolve_port(bad, container)


async def test_http_probe_redirects(cri, http_server):
    pod = make_pod(APP)
    same = await run_probe(cri, http_probe(http_server.port, "/same-host"), pod, APP, "", POD_IP, user_agent=UA)
    assert same == (Result.SUCCESS, "all good")
    other = await run_probe(cri, http_probe(http_server.port, "/other-host"), pod, APP, "", POD_IP, user_agent=UA)
    assert other[0] is Result.SUCCESS
    assert other[1].startswith("Probe terminated redirects, Response body: ")
    assert [r.path for r in http_server.requests] == ["/same-host", "/ok", "/other-host"]
    loop = await run_probe(cri, http_probe(http_server.port, "/loop"), pod, APP, "", POD_IP, user_agent=UA)
    assert loop[0] is Result.FAILURE and loop[1].endswith("stopped after 10 redirects")
    assert len(http_server.requests) == 3 + 11


async def test_http_probe_timeout_and_refused(cri, http_server):
    pod = make_pod(APP)
    began = time.monotonic()
    result, message = await run_probe(
        cri, http_probe(http_server.port, "/slow"), pod, APP, "", POD_IP, user_agent=UA, timeout=0.3
    )
    assert result is Result.FAILURE
    assert message == (
        f'Get "http://127.0.0.1:{http_server.port}/slow": context deadline '
        f"exceeded (Client.Timeout exceeded while awaiting headers)"
    )
    assert time.monotonic() - began < 2.5
    port = free_port()
    result, message = await run_probe(cri, http_probe(port), pod, APP, "", POD_IP, user_agent=UA)
    assert (result, message) == (
        Result.FAILURE,
        f'Get "http://127.0.0.1:{port}/ok": dial tcp 127.0.0.1:{port}: connect: connection refused',
    )


async def test_http_probe_body_limit(cri, http_server):
    result, message = await run_probe(
        cri, http_probe(http_server.port, "/big"), make_pod(APP), APP, "", POD_IP, user_agent=UA
    )
    assert result is Result.SUCCESS and message == "x" * MAX_BODY_BYTES


async def test_http_probe_host_field_and_no_pod_ip(cri, http_server):
    probe = http_probe(http_server.port, host="127.0.0.1")
    assert (await run_probe(cri, probe, make_pod(APP), APP, "", "", user_agent=UA))[0] is Result.SUCCESS
    result, message = await run_probe(cri, http_probe(http_server.port), make_pod(APP), APP, "", "", user_agent=UA)
    assert result is Result.UNKNOWN and "no IP" in message


async def test_https_probe_skips_verification(cri, https_server):
    probe = http_probe(https_server.port, scheme="HTTPS")
    result, message = await run_probe(cri, probe, make_pod(APP), APP, "", POD_IP, user_agent=UA)
    assert (result, message) == (Result.SUCCESS, "all good")
    assert https_server.requests[-1].secure


# -- tcpSocket probes --------------------------------------------------------------


async def test_tcp_probe(cri):
    accepted = []

    async def on_connect(reader, writer):
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    container = {"name": "app", "ports": [{"name": "db", "containerPort": port}]}
    try:
        ok = await run_probe(
            cri, {"tcpSocket": {"port": "db"}}, make_pod(container), container, "", POD_IP, user_agent=UA
        )
        assert ok == (Result.SUCCESS, "")
        await eventually(lambda: accepted)
    finally:
        server.close()
        await server.wait_closed()
    closed = free_port()
    result, message = await run_probe(
        cri, {"tcpSocket": {"port": closed}}, make_pod(container), container, "", POD_IP, user_agent=UA
    )
    assert (result, message) == (Result.FAILURE, f"dial tcp 127.0.0.1:{closed}: connect: connection refused")


# -- grpc probes ---------------------------------------------------------------------


def _health_messages():
    """HealthCheckRequest/Response built by the protobuf library, to check the
    hand-written codec against."""
    proto = descriptor_pb2.FileDescriptorProto(name="health_test.proto", package="grpc.health.v1", syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    optional = field.LABEL_OPTIONAL
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=field.TYPE_STRING, label=optional)
    response = proto.message_type.add(name="HealthCheckResponse")
    response.field.add(name="status", number=1, type=field.TYPE_INT32, label=optional)
    response.field.add(name="note", number=7, type=field.TYPE_STRING, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    get = message_factory.GetMessageClass
    return (
        get(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        get(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


def test_health_codec_matches_protobuf():
    Request, Response = _health_messages()
    for service in ("", "svc", "ü" * 200):
        assert Request.FromString(encode_health_check_request(service)).service == service
    for status in (0, 1, 2, 3, 7, -1):
        data = Response(status=status, note="ignored").SerializeToString()
        assert decode_health_check_response(data) == status
    with pytest.raises(ValueError):
        decode_health_check_response(b"\x08")


@pytest.fixture
async def grpc_health():
    Request, Response = _health_messages()
    services = {"": 1, "down": 2, "odd": 9}
    seen: list[str] = []

    async def check(raw: bytes, context) -> bytes:
        service = Request.FromString(raw).service
        seen.append(service)
        if service not in services:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return Response(status=services[service]).SerializeToString()

    handler = grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(check)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield port, seen
    await server.stop(0)


async def test_grpc_probe(cri, grpc_health):
    port, seen = grpc_health

    async def probe(**grpc_fields):
        return await run_probe(
            cri,
            {"grpc": {"port": port, **grpc_fields}, "timeoutSeconds": 5},
            make_pod(APP),
            APP,
            "",
            POD_IP,
            user_agent=UA,
        )

    assert await probe() == (Result.SUCCESS, "service healthy")
    assert await probe(service="down") == (Result.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')
    assert await probe(service="odd") == (Result.FAILURE, 'service unhealthy (responded with "9")')
    assert await probe(service="nope") == (
        Result.FAILURE,
        "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service",
    )
    assert seen == ["", "down", "odd", "nope"]


async def test_grpc_probe_unimplemented_and_unreachable(cri):
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        result, message = await run_probe(
            cri, {"grpc": {"port": port}}, make_pod(APP), APP, "", POD_IP, user_agent=UA, timeout=5
        )
    finally:
        await server.stop(0)
    assert result is Result.FAILURE
    assert message.startswith("error: this server does not implement the grpc health protocol")
    closed = free_port()
    result, message = await run_probe(
        cri, {"grpc": {"port": closed}}, make_pod(APP), APP, "", POD_IP, user_agent=UA, timeout=0.3
    )
    assert (result, message) == (
        Result.FAILURE,
        f'timeout: failed to connect service "127.0.0.1:{closed}" within 300ms: context deadline exceeded',
    )


# -- lifecycle hooks ---------------------------------------------------------------


async def test_exec_hook(fake, cri, containers):
    cid = await containers.start()
    fake.on_exec(["hook-fail"], ExecResult(exit_code=2, stdout="o", stderr="bad"))
    pod = make_pod(APP)
    assert await run_handler(cri, {"exec": {"command": ["true"]}}, pod, APP, cid, POD_IP, timeout=5) is None
    message = await run_handler(cri, {"exec": {"command": ["hook-fail", "x"]}}, pod, APP, cid, POD_IP, timeout=5)
    assert message == (
        'Exec lifecycle hook ([hook-fail x]) for Container "app" in Pod '
        "\"web_default(uid-web)\" failed - error: command 'hook-fail x' exited "
        'with 2: bad, message: "obad"'
    )
    fake.on_exec(["hook-slow"], ExecResult(duration=10))
    message = await run_handler(cri, {"exec": {"command": ["hook-slow"]}}, pod, APP, cid, POD_IP, timeout=0.2)
    assert message is not None and 'command "hook-slow" timed out' in message


async def test_http_hook(cri, http_server):
    pod = make_pod(APP)
    handler = {"httpGet": {"port": http_server.port, "path": "/headers"}}
    assert await run_handler(cri, handler, pod, APP, "", POD_IP, timeout=5) is None
    assert http_server.requests[-1].headers["User-Agent"] == "orch-lifecycle/1.27"
    # Upstream judges a hook by its transport only: an error status still succeeds.
    assert (
        await run_handler(
            cri, {"httpGet": {"port": http_server.port, "path": "/fail"}}, pod, APP, "", POD_IP, timeout=5
        )
        is None
    )
    port = free_port()
    message = await run_handler(cri, {"httpGet": {"port": port, "path": "/stop"}}, pod, APP, "", POD_IP, timeout=5)
    assert message == (
        f'HTTP lifecycle hook (/stop) for Container "app" in Pod '
        f'"web_default(uid-web)" failed - error: '
        f'Get "http://127.0.0.1:{port}/stop": dial tcp 127.0.0.1:{port}: '
        f"connect: connection refused"
    )
    slow = await run_handler(
        cri, {"httpGet": {"port": http_server.port, "path": "/slow"}}, pod, APP, "", POD_IP, timeout=0.2
    )
    assert slow is not None and "context deadline exceeded" in slow


async def test_https_hook_falls_back_to_http(cri, http_server, https_server):
    pod = make_pod(APP)
    secure = {"httpGet": {"port": https_server.port, "path": "/ok", "scheme": "HTTPS"}}
    assert await run_handler(cri, secure, pod, APP, "", POD_IP, timeout=5) is None
    plain = {
        "httpGet": {
            "port": http_server.port,
            "path": "/headers",
            "scheme": "HTTPS",
            "httpHeaders": [{"name": "Authorization", "value": "Bearer x"}],
        }
    }
    assert await run_handler(cri, plain, pod, APP, "", POD_IP, timeout=5) is None
    request = http_server.requests[-1]
    assert request.path == "/headers" and "Authorization" not in request.headers


async def test_invalid_hook(cri):
    message = await run_handler(cri, {"tcpSocket": {"port": 80}}, make_pod(APP), APP, "", POD_IP, timeout=1)
    assert message is not None and message.startswith("Cannot run handler: invalid handler")
    with pytest.raises(ValueError):
        await run_handler(cri, {"exec": {"command": ["true"]}}, make_pod(APP), APP, "", POD_IP, timeout=0)


# -- the manager ---------------------------------------------------------------------

SCALE = 0.02  # one probe second = 20 ms


class Recorder:
    """An exec script: answers from a list of exit codes (the last repeats) and
    notes what the manager said at each call."""

    def __init__(self, codes=(0,), output: str = "", probe=None):
        self.codes = list(codes)
        self.output = output
        self.calls: list[tuple[str, float]] = []  # (container id, time)
        self.probe = probe  # called at each exec; its answers land in .seen
        self.seen: list = []

    def __call__(self, container, cmd):
        index = min(len(self.calls), len(self.codes) - 1)
        self.calls.append((container.id, time.time()))
        if self.probe is not None:
            self.seen.append(self.probe())
        return ExecResult(exit_code=self.codes[index], stdout=self.output)

    @property
    def count(self) -> int:
        return len(self.calls)


def exec_probe(cmd: str, **fields) -> dict:
    # timeoutSeconds 25 -> 0.5 s scaled: well above a local exec call.
    return {"exec": {"command": [cmd]}, "periodSeconds": 1, "timeoutSeconds": 25, **fields}


@pytest.fixture
async def manager(cri):
    changes: list[str] = []
    events: list[tuple] = []
    mgr = ProbeManager(
        cri,
        changes.append,
        time_scale=SCALE,
        on_event=lambda pod, c, kind, reason, msg: events.append((c, kind, reason, msg)),
    )
    mgr.changes = changes
    mgr.events = events
    yield mgr
    await mgr.close()


async def test_liveness_failure_after_threshold_then_new_container(fake, containers, manager):
    live = Recorder(codes=(1,), output="unhealthy")
    fake.on_exec(["live"], live)
    at_change: list[int] = []
    manager.on_change = lambda uid: at_change.append(live.count)
    spec = {"name": "app", "livenessProbe": exec_probe("live", failureThreshold=3, terminationGracePeriodSeconds=7)}
    pod = make_pod(spec)
    cid1 = await containers.start()
    manager.update_pod(pod, POD_IP, {"app": running(cid1)})
    assert manager.liveness_failure("uid-web", "app", cid1) is None
    await eventually(lambda: at_change)
    assert at_change == [3]  # the result flipped at the third consecutive failure
    assert manager.liveness_failure("uid-web", "app", cid1) == ProbeFailure("Liveness", "unhealthy", 7)
    assert manager.is_ready("uid-web", "app")  # no readiness probe: liveness does not matter
    assert ("app", "Warning", "Unhealthy", "Liveness probe failed: unhealthy") in manager.events
    await asyncio.sleep(10 * SCALE)
    assert live.count == 3  # on hold until a new container shows up

    cid2 = await containers.start()
    manager.update_pod(pod, POD_IP, {"app": running(cid2)})
    assert manager.liveness_failure("uid-web", "app", cid2) is None
    assert manager.liveness_failure("uid-web", "app", cid1) is None
    await eventually(lambda: live.count >= 5)
    assert {cid for cid, _ in live.calls[3:]} == {cid2}


async def test_readiness_flips_without_restart(fake, containers, manager):
    ready = Recorder(codes=(1, 0, 0, 0, 1, 1))
    fake.on_exec(["ready"], ready)
    flips: list[tuple[int, bool]] = []
    manager.on_change = lambda uid: flips.append((ready.count, manager.is_ready(uid, "app")))
    spec = {"name": "app", "readinessProbe": exec_probe("ready", successThreshold=2, failureThreshold=2)}
    cid = await containers.start()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid)})
    assert not manager.is_ready("uid-web", "app")  # readiness starts as Failure
    assert manager.is_started("uid-web", "app")
    await eventually(lambda: len(flips) >= 2)
    assert flips == [(3, True), (6, False)]
    await eventually(lambda: ready.count >= 8)  # still probed: readiness never restarts
    assert manager.liveness_failure("uid-web", "app", cid) is None
    assert not manager.is_ready("uid-web", "app")
    assert {c for c, _ in ready.calls} == {cid}


async def test_initial_delay(fake, containers, manager):
    ready = Recorder()
    fake.on_exec(["ready"], ready)
    spec = {"name": "app", "readinessProbe": exec_probe("ready", initialDelaySeconds=15)}
    cid = await containers.start()
    started = time.time()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid, started)})
    await eventually(lambda: manager.is_ready("uid-web", "app"))
    assert ready.calls[0][1] - started >= 15 * SCALE


async def test_initial_delay_counts_from_container_start(fake, containers, manager):
    ready = Recorder()
    fake.on_exec(["ready"], ready)
    spec = {"name": "app", "readinessProbe": exec_probe("ready", initialDelaySeconds=1000)}
    cid = await containers.start()
    # The container started long ago (an agent restart): the delay is over.
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid, time.time() - 3600)})
    await eventually(lambda: manager.is_ready("uid-web", "app"))


async def test_startup_probe_gates_liveness_and_readiness(fake, containers, manager):
    startup = Recorder(codes=(1, 1, 0))
    fake.on_exec(["startup"], startup)
    live = Recorder(probe=lambda: manager.is_started("uid-web", "app"))
    fake.on_exec(["live"], live)
    ready = Recorder(probe=lambda: manager.is_started("uid-web", "app"))
    fake.on_exec(["ready"], ready)
    spec = {
        "name": "app",
        "startupProbe": exec_probe("startup", failureThreshold=5),
        "livenessProbe": exec_probe("live"),
        "readinessProbe": exec_probe("ready"),
    }
    cid = await containers.start()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid)})
    assert not manager.is_started("uid-web", "app")
    assert not manager.is_ready("uid-web", "app")
    await eventually(lambda: manager.is_ready("uid-web", "app"))
    assert startup.count == 3
    assert manager.changes  # startup success and readiness were announced
    await eventually(lambda: live.count >= 3 and ready.count >= 3)
    assert all(live.seen) and all(ready.seen)  # never probed before the start
    assert startup.count == 3  # the startup probe stops once it succeeded
    assert manager.last_message("uid-web", "app", "Startup") == ""


async def test_startup_failure_is_reported(fake, containers, manager):
    startup = Recorder(codes=(1,), output="not yet")
    fake.on_exec(["startup"], startup)
    live = Recorder()
    fake.on_exec(["live"], live)
    spec = {
        "name": "app",
        "startupProbe": exec_probe("startup", failureThreshold=2),
        "livenessProbe": exec_probe("live", terminationGracePeriodSeconds=3),
    }
    cid = await containers.start()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid)})
    await eventually(lambda: manager.liveness_failure("uid-web", "app", cid) is not None)
    assert manager.liveness_failure("uid-web", "app", cid) == ProbeFailure("Startup", "not yet", None)
    assert startup.count == 2 and live.count == 0
    assert manager.changes == ["uid-web"]


async def test_not_running_container_is_not_ready(fake, containers, manager):
    ready = Recorder()
    fake.on_exec(["ready"], ready)
    spec = {"name": "app", "readinessProbe": exec_probe("ready")}
    cid = await containers.start()
    pod = make_pod(spec)
    manager.update_pod(pod, POD_IP, {"app": running(cid)})
    await eventually(lambda: manager.is_ready("uid-web", "app"))
    fake.exit_container(cid, 1)
    manager.update_pod(pod, POD_IP, {"app": ContainerRef(cid, False, time.time())})
    assert not manager.is_ready("uid-web", "app")
    assert not manager.is_started("uid-web", "app")
    worker = manager._pods["uid-web"].workers[("app", "readiness")]
    await asyncio.sleep(5 * SCALE)
    assert not worker.task.done()  # restartPolicy Always: waits for the next container

    never = make_pod(spec, uid="uid-never", name="never", restart_policy="Never")
    cid2 = await containers.start("never")
    manager.update_pod(never, POD_IP, {"app": running(cid2)})
    await eventually(lambda: manager.is_ready("uid-never", "app"))
    manager.update_pod(never, POD_IP, {"app": ContainerRef(cid2, False, time.time())})
    worker = manager._pods["uid-never"].workers[("app", "readiness")]
    await eventually(worker.task.done)  # it will never run again
    assert not manager.is_ready("uid-never", "app")


async def test_workers_start_only_for_running_containers(fake, containers, manager):
    ready = Recorder()
    fake.on_exec(["ready"], ready)
    pod = make_pod({"name": "app", "readinessProbe": exec_probe("ready")})
    manager.update_pod(pod, POD_IP, {})
    manager.update_pod(pod, POD_IP, {"app": ContainerRef("", False, 0)})
    assert manager._pods["uid-web"].workers == {}
    assert not manager.is_ready("uid-web", "app")
    cid = await containers.start()
    manager.update_pod(pod, POD_IP, {"app": running(cid)})
    await eventually(lambda: manager.is_ready("uid-web", "app"))


async def test_remove_pod_stops_workers(fake, containers, manager):
    ready = Recorder()
    fake.on_exec(["ready"], ready)
    spec = {"name": "app", "readinessProbe": exec_probe("ready"), "livenessProbe": exec_probe("ready")}
    cid = await containers.start()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid)})
    await eventually(lambda: ready.count >= 3)
    tasks = [w.task for w in manager._pods["uid-web"].workers.values()]
    manager.remove_pod("uid-web")
    await eventually(lambda: all(t.done() for t in tasks))
    count = ready.count
    await asyncio.sleep(5 * SCALE)
    assert ready.count == count
    assert not manager.is_ready("uid-web", "app")
    assert manager.last_message("uid-web", "app", "readiness") == ""


async def test_update_triggers_readiness_probe(fake, containers, manager):
    ready = Recorder(codes=(1,))
    fake.on_exec(["ready"], ready)
    spec = {"name": "app", "readinessProbe": exec_probe("ready", periodSeconds=5000)}
    cid = await containers.start()
    pod = make_pod(spec)
    manager.update_pod(pod, POD_IP, {"app": running(cid)})
    await eventually(lambda: ready.count == 1)
    await asyncio.sleep(5 * SCALE)
    assert ready.count == 1  # the period is long ...
    manager.update_pod(pod, POD_IP, {"app": running(cid)})
    await eventually(lambda: ready.count == 2)  # ... but a sync of an unready pod probes again


async def test_first_probe_jitter_after_agent_restart(fake, containers, cri, monkeypatch):
    draws: list[float] = []

    def fake_random():
        draws.append(0.5)
        return 0.5

    monkeypatch.setattr(manager_module.random, "random", fake_random)
    ready = Recorder()
    fake.on_exec(["ready"], ready)
    spec = {"name": "app", "readinessProbe": exec_probe("ready", periodSeconds=20)}
    old = await containers.start("old")
    new = await containers.start("new")
    old_started = time.time() - 60  # running before the agent (re)started
    mgr = ProbeManager(cri, lambda uid: None, time_scale=SCALE)
    try:
        began = time.time()
        mgr.update_pod(make_pod(spec, uid="u-new", name="new"), POD_IP, {"app": running(new)})
        await eventually(lambda: mgr.is_ready("u-new", "app"))
        assert draws == []  # a container started after the agent: no jitter
        mgr.update_pod(make_pod(spec, uid="u-old", name="old"), POD_IP, {"app": running(old, old_started)})
        await eventually(lambda: mgr.is_ready("u-old", "app"))
        assert draws == [0.5]
        first_old = next(t for c, t in ready.calls if c == old)
        assert first_old - began >= 0.5 * 20 * SCALE
    finally:
        await mgr.close()


async def test_deleting_pod_stops_liveness_quietly(fake, containers, manager):
    live = Recorder(codes=(1,))
    fake.on_exec(["live"], live)
    spec = {"name": "app", "livenessProbe": exec_probe("live", failureThreshold=1)}
    cid = await containers.start()
    manager.update_pod(make_pod(spec, deleting=True), POD_IP, {"app": running(cid)})
    worker = manager._pods["uid-web"].workers[("app", "liveness")]
    await eventually(worker.task.done)
    assert live.count == 0
    assert manager.liveness_failure("uid-web", "app", cid) is None


async def test_http_probe_through_manager_and_messages(containers, manager, http_server):
    spec = {
        "name": "app",
        "ports": [{"name": "http", "containerPort": http_server.port}],
        "readinessProbe": {"httpGet": {"port": "http", "path": "/ok"}, "periodSeconds": 1, "timeoutSeconds": 50},
    }
    cid = await containers.start()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid)})
    await eventually(lambda: manager.is_ready("uid-web", "app"))
    assert manager.last_message("uid-web", "app", "Readiness") == "all good"
    assert manager.changes[0] == "uid-web"
    assert http_server.requests[0].headers["User-Agent"] == "orch-probe/1.27"


async def test_errored_probes_are_ignored(fake, containers, manager):
    spec = {"name": "app", "readinessProbe": {"httpGet": {"port": "missing"}, "periodSeconds": 1}}
    cid = await containers.start()
    manager.update_pod(make_pod(spec), POD_IP, {"app": running(cid)})
    await eventually(lambda: len(manager.events) >= 2)
    assert manager.events[0] == ("app", "Warning", "Unhealthy", "Readiness probe errored: port missing not found")
    assert manager.changes == [] and not manager.is_ready("uid-web", "app")


def test_probe_timing_defaults_and_bad_values():
    timing = manager_module._probe_timing({}, "x")
    assert (
        timing.initial_delay,
        timing.period,
        timing.timeout,
        timing.success_threshold,
        timing.failure_threshold,
        timing.termination_grace,
    ) == (0, 10, 1, 1, 3, None)
    bad = manager_module._probe_timing({"periodSeconds": 0, "timeoutSeconds": "2", "failureThreshold": 5}, "x")
    assert (bad.period, bad.timeout, bad.failure_threshold) == (10, 1, 5)


async def test_manager_rejects_bad_input(cri):
    with pytest.raises(ValueError):
        ProbeManager(cri, lambda uid: None, time_scale=0)
    mgr = ProbeManager(cri, lambda uid: None)
    with pytest.raises(ValueError, match="metadata.uid"):
        mgr.update_pod({"metadata": {"name": "x"}}, POD_IP, {})
    await mgr.close()
    with pytest.raises(RuntimeError):
        mgr.update_pod(make_pod(APP), POD_IP, {})
