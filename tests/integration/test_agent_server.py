"""The agent's HTTPS server over real TLS on loopback: /pods, /healthz, /containerLogs, errors, auth seam."""

from __future__ import annotations

import asyncio
import datetime as _dt
import ipaddress
import os
import socket
import ssl
import stat
import time
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.config import from_argv
from agent.metrics import AgentMetrics, Counter, Gauge, Histogram, Registry
from agent.pods import ManifestProblem
from agent.runtime.manager import ContainerInfo, RuntimePod, SandboxInfo
from agent.server import (
    AgentServer,
    ListenError,
    LogTarget,
    RuntimeStreaming,
    UserInfo,
    configz_document,
    ensure_serving_cert,
)
from agent.server import auth as serverauth
from agent.server.certinfo import read_certificate
from agent.server.stats import StatsProvider, read_cgroup_usage
from cri import api_pb2 as pb
from cri.client import CriClient
from cri.fake import ExecResult, FakeRuntime
from tests.helpers import FakeCgroups

NODE = "node-a"


def rec(second: int, text: str, stream: str = "stdout", tag: str = "F") -> bytes:
    return f"2024-05-01T12:00:{second:02d}.5Z {stream} {tag} {text}\n".encode()


def pod(name: str, containers: list[str], *, waiting: dict[str, str] | None = None) -> dict:
    statuses = []
    for c in containers:
        reason = (waiting or {}).get(c)
        state = {"waiting": {"reason": reason}} if reason else {"running": {"startedAt": "2024-05-01T12:00:00Z"}}
        statuses.append({"name": c, "state": state, "restartCount": 1})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
        "status": {"phase": "Running", "containerStatuses": statuses},
    }


class Node:
    """What the agent would hand the server: pods, log files, health, problems."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pods = [pod("web", ["app", "sidecar"]), pod("starting", ["app"], waiting={"app": "ContainerCreating"})]
        self.problems: list[ManifestProblem] = []
        self.health: str | None = None
        self.running = True
        self.logs = root / "logs"
        (self.logs / "app").mkdir(parents=True)
        self.current = self.logs / "app" / "1.log"
        self.previous = self.logs / "app" / "0.log"
        self.current.write_bytes(rec(1, "hello") + rec(2, "oops", "stderr") + rec(3, "long ", tag="P") + rec(4, "line"))
        self.previous.write_bytes(rec(0, "from the previous instance"))
        self.located: list[tuple] = []

    def locate_log(self, namespace: str, name: str, container: str, previous: bool) -> LogTarget | None:
        self.located.append((namespace, name, container, previous))
        if (namespace, name) == ("default", "web"):
            if container == "app":
                return LogTarget(str(self.previous if previous else self.current), lambda: self.running)
            if container == "sidecar" and not previous:
                return LogTarget(str(self.logs / "sidecar-missing.log"), lambda: False)
        return None


@pytest.fixture
async def agent(tmp_path):
    node = Node(tmp_path)
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=NODE,
        pods=lambda: node.pods,
        locate_log=node.locate_log,
        healthz=lambda: node.health,
        problems=lambda: node.problems,
        follow_poll_interval=0.01,
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    await asyncio.wait_for(started, 10)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "pki" / "orch-agent.crt"))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        yield node, server, session, f"https://127.0.0.1:{server.port}"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def get(session, url, **kw) -> tuple[int, str, str]:
    async with session.get(url, **kw) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def test_pods_and_manifest_problems(agent):
    node, server, session, base = agent
    async with session.get(f"{base}/pods") as r:
        assert r.status == 200 and r.content_type == "application/json"
        body = await r.json()
    assert body == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": node.pods}
    node.problems = [
        ManifestProblem("file", "/etc/orch/manifests/bad.yaml", "spec.containers: Required value", since=1714564800.0)
    ]
    async with session.get(f"{base}/pods") as r:
        body = await r.json()
    assert body["problems"] == [
        {
            "source": "file",
            "location": "/etc/orch/manifests/bad.yaml",
            "message": "spec.containers: Required value",
            "since": "2024-05-01T12:00:00Z",
        }
    ]
    async with session.get(f"{base}/manifestProblems") as r:
        assert (await r.json())["problems"] == body["problems"]


async def test_healthz(agent):
    node, server, session, base = agent
    assert await get(session, f"{base}/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    assert (await get(session, f"{base}/healthz?verbose"))[2] == "[+]ping ok\nhealthz check passed\n"
    node.health = "[-]syncloop failed: the sync loop has not run for 5m0s"
    status, _, text = await get(session, f"{base}/healthz")
    assert status == 500
    assert text == "[-]syncloop failed: the sync loop has not run for 5m0s\nhealthz check failed\n"


async def test_container_logs_with_options(agent):
    node, server, session, base = agent
    url = f"{base}/containerLogs/default/web/app"
    status, ctype, text = await get(session, url)
    assert (status, ctype) == (200, "text/plain; charset=utf-8")
    assert text == "hello\noops\nlong line\n"
    assert (await get(session, url, params={"tailLines": "1", "timestamps": "true"}))[
        2
    ] == "2024-05-01T12:00:03.500000000Z long line\n"
    assert (await get(session, url, params={"sinceTime": "2024-05-01T12:00:02Z"}))[2] == "oops\nlong line\n"
    assert (await get(session, url, params={"limitBytes": "8"}))[2] == "hello\noo"
    assert (await get(session, url, params={"previous": "true"}))[2] == "from the previous instance\n"
    assert node.located[-1] == ("default", "web", "app", True)


async def test_container_logs_errors(agent):
    node, server, session, base = agent
    status, ctype, text = await get(session, f"{base}/containerLogs/default/web/app?tailLines=abc")
    assert (status, ctype) == (400, "text/plain; charset=utf-8")
    assert text == 'invalid tailLines "abc": must be an integer\n'
    status, _, text = await get(
        session, f"{base}/containerLogs/default/web/app?sinceSeconds=5&sinceTime=2024-05-01T12:00:00Z"
    )
    assert status == 400 and "at most one" in text
    assert await get(session, f"{base}/containerLogs/default/nope/app") == (
        404,
        "text/plain; charset=utf-8",
        'pod "nope" does not exist in namespace "default"\n',
    )
    assert (await get(session, f"{base}/containerLogs/other/web/app"))[0] == 404
    assert (await get(session, f"{base}/containerLogs/default/web/db"))[1:] == (
        "text/plain; charset=utf-8",
        'container "db" not found in pod "web"\n',
    )
    status, _, text = await get(session, f"{base}/containerLogs/default/web/sidecar?previous=1")
    assert (status, text) == (400, 'previous terminated container "sidecar" in pod "web" not found\n')
    status, _, text = await get(session, f"{base}/containerLogs/default/starting/app")
    assert (status, text) == (400, 'container "app" in pod "starting" is waiting to start: ContainerCreating\n')
    status, _, text = await get(session, f"{base}/containerLogs/default/web/sidecar")
    assert status == 400 and text.startswith('failed to open log file "') and "sidecar-missing.log" in text


async def test_unknown_paths_and_methods(agent):
    node, server, session, base = agent
    assert await get(session, f"{base}/nothing/here") == (404, "text/plain; charset=utf-8", "404 page not found\n")
    assert (await get(session, f"{base}/containerLogs/default/web"))[0] == 404
    async with session.post(f"{base}/pods", data=b"{}") as r:
        assert r.status == 405
        assert await r.text() == "405: Method Not Allowed\n"
        assert "GET" in r.headers["Allow"]


async def test_follow_streams_while_the_file_grows(agent):
    node, server, session, base = agent
    async with session.get(
        f"{base}/containerLogs/default/web/app",
        params={"follow": "true", "tailLines": "1"},
        timeout=aiohttp.ClientTimeout(total=20),
    ) as r:
        assert r.status == 200
        seen = b""
        while b"long line\n" not in seen:
            seen += await asyncio.wait_for(r.content.readline(), 5)
        assert seen == b"long line\n"
        with open(node.current, "ab") as f:
            f.write(rec(5, "appended while following"))
        assert await asyncio.wait_for(r.content.readline(), 5) == b"appended while following\n"
        with open(node.current, "ab") as f:
            f.write(rec(6, "last before exit"))
        node.running = False
        rest = await asyncio.wait_for(r.content.read(), 5)  # ends once stopped and drained
        assert rest == b"last before exit\n"


async def test_follow_stream_of_a_client_that_leaves_is_dropped(agent):
    node, server, session, base = agent
    checks = 0
    real_locate = node.locate_log

    def counting_locate(*args):
        target = real_locate(*args)

        def is_running():
            nonlocal checks
            checks += 1
            return True  # the container never stops: only the client's leaving ends the stream

        return LogTarget(target.path, is_running)

    server._locate_log = counting_locate
    async with session.get(f"{base}/containerLogs/default/web/app?follow=true") as r:
        assert (await asyncio.wait_for(r.content.readline(), 5)) == b"hello\n"
        await asyncio.sleep(0.05)
        assert checks > 0  # following, polling the container
    # Once the client is gone the server stops following: the polling ends.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        before = checks
        await asyncio.sleep(0.2)
        if checks == before:
            break
        assert loop.time() < deadline, "the follow went on after the client left"
    # The server keeps serving others after the client went away mid-follow.
    assert (await get(session, f"{base}/healthz"))[0] == 200


async def test_shutdown_ends_follow_streams_cleanly(tmp_path):
    node = Node(tmp_path)
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=NODE,
        pods=lambda: node.pods,
        locate_log=node.locate_log,
        follow_poll_interval=0.01,
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    await asyncio.wait_for(started, 10)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as session:
        async with session.get(f"https://127.0.0.1:{server.port}/containerLogs/default/web/app?follow=1") as r:
            assert await asyncio.wait_for(r.content.readline(), 5) == b"hello\n"
            task.cancel()  # the container is still running: only the shutdown ends the stream
            assert await asyncio.wait_for(r.content.read(), 5) == b"oops\nlong line\n"
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


async def test_authentication_and_authorization_seam(tmp_path):
    node = Node(tmp_path)
    decisions: list[tuple] = []

    def authenticate(request):
        token = request.headers.get("Authorization", "")
        return UserInfo("alice", ("devs",)) if token == "Bearer good" else None

    async def authorize(attrs):
        decisions.append((attrs.user.name, attrs.verb, attrs.resource, attrs.subresource, attrs.name))
        return (attrs.user.name == "alice" and attrs.verb == "get", "only reads")

    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=NODE,
        pods=lambda: node.pods,
        locate_log=node.locate_log,
        authenticate=authenticate,
        authorize=authorize,
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    try:
        await asyncio.wait_for(started, 10)
        base = f"https://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as session:
            assert await get(session, f"{base}/pods") == (401, "text/plain; charset=utf-8", "Unauthorized\n")
            assert await get(session, f"{base}/unknown") == (401, "text/plain; charset=utf-8", "Unauthorized\n")
            good = {"Authorization": "Bearer good"}
            assert (await get(session, f"{base}/pods", headers=good))[0] == 200
            async with session.delete(f"{base}/pods", headers=good) as r:
                assert r.status == 403
                assert await r.text() == "Forbidden (user=alice, verb=delete, resource=nodes, subresource=proxy)\n"
        assert decisions == [("alice", "get", "nodes", "proxy", NODE), ("alice", "delete", "nodes", "proxy", NODE)]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_bind_failure_is_reported_clearly(tmp_path):
    node = Node(tmp_path)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        server = AgentServer(
            address="127.0.0.1",
            port=blocker.getsockname()[1],
            cert_dir=str(tmp_path / "pki"),
            node_name=NODE,
            pods=lambda: [],
            locate_log=node.locate_log,
        )
        started = asyncio.get_running_loop().create_future()
        with pytest.raises(ListenError) as info:
            await server.serve(started)
        assert started.exception() is info.value
        assert str(info.value) == (
            f"cannot listen on 127.0.0.1:{blocker.getsockname()[1]} (--address, --port): address already in use"
        )
    finally:
        blocker.close()


async def test_explicit_certificate_files_and_half_given_pair(tmp_path):
    node = Node(tmp_path)
    cert, key = ensure_serving_cert(str(tmp_path / "elsewhere"), "custom-name", [])
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "unused"),
        tls_cert_file=cert,
        tls_private_key_file=key,
        node_name=NODE,
        pods=lambda: [],
        locate_log=node.locate_log,
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    try:
        await asyncio.wait_for(started, 10)
        ctx = ssl.create_default_context(cafile=cert)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            assert (await get(session, f"https://localhost:{server.port}/healthz"))[0] == 200
        assert not (tmp_path / "unused").exists()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    half = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        tls_cert_file=cert,
        node_name=NODE,
        pods=lambda: [],
        locate_log=node.locate_log,
    )
    with pytest.raises(ListenError, match="--tls-cert-file and --tls-private-key-file must be given together"):
        await half.serve()


def test_serving_cert_is_made_once_and_reused(tmp_path):
    cert_dir = tmp_path / "pki"
    cert, key = ensure_serving_cert(str(cert_dir), NODE, ["10.0.0.7", "node-a.example", "0.0.0.0"])
    assert (Path(cert).name, Path(key).name) == ("orch-agent.crt", "orch-agent.key")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    leaf = x509.load_pem_x509_certificates(Path(cert).read_bytes())[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {NODE, "localhost", "node-a.example"}
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("10.0.0.7"),
    }
    assert leaf.not_valid_after_utc - _dt.datetime.now(_dt.timezone.utc) > _dt.timedelta(days=300)
    before = (Path(cert).read_bytes(), Path(key).read_bytes())

    # Valid and naming everything: reused as is (a looser key mode is fixed).
    os.chmod(key, 0o644)
    assert ensure_serving_cert(str(cert_dir), NODE, ["10.0.0.7"]) == (cert, key)
    assert (Path(cert).read_bytes(), Path(key).read_bytes()) == before
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600

    # A new address: made again.
    ensure_serving_cert(str(cert_dir), NODE, ["10.0.0.8"])
    assert Path(cert).read_bytes() != before[0]

    # A key that is not the certificate's: made again.
    other = ec.generate_private_key(ec.SECP256R1())
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    Path(key).write_bytes(pem)
    ensure_serving_cert(str(cert_dir), NODE, ["10.0.0.8"])
    assert Path(key).read_bytes() != pem
    assert read_certificate(cert).ips == {"127.0.0.1", "10.0.0.8"}

    # Unreadable files: made again.
    Path(cert).write_text("garbage")
    ensure_serving_cert(str(cert_dir), NODE, [])
    assert x509.load_pem_x509_certificates(Path(cert).read_bytes())

    with pytest.raises(ValueError, match="node name is empty"):
        ensure_serving_cert(str(cert_dir), "", [])


# --- authentication and authorization over real TLS (agent.server.auth) --------------------------


def make_ca(cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = _dt.datetime.now(_dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=1))
        .not_valid_after(now + _dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_client(tmp: Path, ca, cn: str, orgs: tuple[str, ...]) -> tuple[str, str]:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )
    now = _dt.datetime.now(_dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=1))
        .not_valid_after(now + _dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = tmp / f"{cn}.crt", tmp / f"{cn}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


class FakeReviews:
    """The API server's TokenReview and SubjectAccessReview, answered in process."""

    def __init__(self) -> None:
        self.tokens = {"good-token": {"username": "bob", "uid": "u-1", "groups": ["viewers"]}}
        self.allowed = {("alice", "get", "stats"), ("bob", "get", "proxy"), ("alice", "get", "log")}
        self.sent: list[tuple[str, dict]] = []
        self.fail = False

    async def __call__(self, path: str, body: dict) -> dict:
        self.sent.append((path, body))
        if self.fail:
            raise ConnectionError("API server unreachable")
        if path == serverauth.TOKEN_REVIEW_PATH:
            user = self.tokens.get(body["spec"]["token"])
            return {
                "status": {"authenticated": True, "user": user}
                if user
                else {"authenticated": False, "error": "token not found"}
            }
        attrs = body["spec"]["resourceAttributes"]
        ok = (body["spec"]["user"], attrs["verb"], attrs["subresource"]) in self.allowed
        return {"status": {"allowed": ok, "reason": "" if ok else "no RBAC policy matched"}}


async def test_x509_token_webhook_and_subject_access_review(tmp_path):
    node = Node(tmp_path)
    ca = make_ca("test-client-ca")
    other_ca = make_ca("someone-else")
    alice = make_client(tmp_path, ca, "alice", ("devs", "ops"))
    mallory = make_client(tmp_path, other_ca, "mallory", ())
    reviews = FakeReviews()
    authn = serverauth.Authenticator(
        x509_auth=serverauth.X509Authenticator(),
        token_auth=serverauth.TokenWebhookAuthenticator(reviews, ttl=60),
        anonymous=False,
    )
    authz = serverauth.WebhookAuthorizer(reviews, authorized_ttl=60, unauthorized_ttl=60)
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=NODE,
        pods=lambda: node.pods,
        locate_log=node.locate_log,
        authenticate=authn,
        authorize=authz,
        client_ca=ca[0].public_bytes(serialization.Encoding.PEM),
        stats=_stats_of({"node": {"nodeName": NODE}, "pods": []}),
        log_dir=str(tmp_path),
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    try:
        await asyncio.wait_for(started, 10)
        base = f"https://127.0.0.1:{server.port}"

        def ctx(pair=None):
            c = ssl.create_default_context(cafile=str(tmp_path / "pki" / "orch-agent.crt"))
            if pair:
                c.load_cert_chain(*pair)
            return c

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx())) as plain:
            # No credentials and no anonymous access.
            assert await get(plain, f"{base}/pods") == (401, "text/plain; charset=utf-8", "Unauthorized\n")
            # A token the server does not know is a 401 (never anonymous), a known one is bob.
            assert (await get(plain, f"{base}/pods", headers={"Authorization": "Bearer nope"}))[0] == 401
            assert (await get(plain, f"{base}/pods", headers={"Authorization": "Bearer good-token"}))[0] == 200
            assert (await get(plain, f"{base}/pods", headers={"Authorization": "Bearer good-token"}))[0] == 200
            token_reviews = [b for p, b in reviews.sent if p == serverauth.TOKEN_REVIEW_PATH]
            assert [b["spec"]["token"] for b in token_reviews] == ["nope", "good-token"]  # cached for its TTL
            sar = [b for p, b in reviews.sent if p == serverauth.SUBJECT_ACCESS_REVIEW_PATH]
            assert len(sar) == 1 and sar[0] == {
                "apiVersion": "authorization.orch.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": "bob",
                    "groups": ["viewers"],
                    "uid": "u-1",
                    "resourceAttributes": {
                        "namespace": "",
                        "verb": "get",
                        "group": "",
                        "version": "v1",
                        "resource": "nodes",
                        "subresource": "proxy",
                        "name": NODE,
                    },
                },
            }
            status, _, text = await get(plain, f"{base}/stats/summary", headers={"Authorization": "Bearer good-token"})
            assert (status, text) == (403, "Forbidden (user=bob, verb=get, resource=nodes, subresource=stats)\n")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx(alice))) as session:
            # The certificate names the user (CN) and groups (O); its paths map to subresources.
            assert (await get(session, f"{base}/stats/summary"))[0] == 200
            assert (await get(session, f"{base}/logs/"))[0] == 200
            status, _, text = await get(session, f"{base}/pods")
            assert (status, text) == (403, "Forbidden (user=alice, verb=get, resource=nodes, subresource=proxy)\n")
            async with session.post(f"{base}/stats/summary") as r:
                assert r.status == 403 and "verb=create" in await r.text()
            alice_sar = [
                b["spec"]
                for p, b in reviews.sent
                if p == serverauth.SUBJECT_ACCESS_REVIEW_PATH and b["spec"]["user"] == "alice"
            ]
            assert alice_sar[0]["groups"] == ["devs", "ops"]
            assert [s["resourceAttributes"]["subresource"] for s in alice_sar] == ["stats", "log", "proxy", "stats"]
            n = len(reviews.sent)
            assert (await get(session, f"{base}/pods"))[0] == 403  # denials are cached too
            assert len(reviews.sent) == n
            # The API server cannot be asked: authorization error (500), as upstream.
            reviews.fail = True
            status, _, text = await get(session, f"{base}/metrics/resource")
            assert (status, text) == (
                500,
                "Authorization error (user=alice, verb=get, resource=nodes, subresource=metrics)\n",
            )
        # A certificate from another CA does not pass the handshake.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx(mallory))) as session:
            with pytest.raises(aiohttp.ClientError):
                await get(session, f"{base}/healthz")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _stats_of(summary: dict):
    async def stats(only_cpu_and_memory: bool) -> dict:
        return summary

    return stats


# --- the node's data: /logs/, /configz, /metrics, /stats/summary, /runningpods/ --------------------


async def serve(server: AgentServer):
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    await asyncio.wait_for(started, 10)
    return task


async def test_node_log_files_listing_serving_and_no_escape(tmp_path):
    node = Node(tmp_path)
    logs = tmp_path / "varlog"
    (logs / "apt").mkdir(parents=True)
    (logs / "syslog").write_text("boot\nready\n")
    (logs / "apt" / "history.log").write_text("installed x\n")
    (logs / "a b&c.log").write_text("odd name\n")
    (tmp_path / "secret").write_text("not for you\n")
    (logs / "escape").symlink_to(tmp_path / "secret")
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=NODE,
        pods=lambda: [],
        locate_log=node.locate_log,
        log_dir=str(logs),
    )
    task = await serve(server)
    base = f"https://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
            status, ctype, text = await get(s, f"{base}/logs/")
            assert (status, ctype) == (200, "text/html; charset=utf-8")
            assert text == (
                '<pre>\n<a href="a%20b%26c.log">a b&amp;c.log</a>\n<a href="apt/">apt/</a>\n'
                '<a href="escape">escape</a>\n<a href="syslog">syslog</a>\n</pre>\n'
            )
            assert await get(s, f"{base}/logs/syslog") == (200, "text/plain; charset=utf-8", "boot\nready\n")
            assert (await get(s, f"{base}/logs/apt/history.log"))[2] == "installed x\n"
            assert (await get(s, f"{base}/logs/a%20b%26c.log"))[2] == "odd name\n"
            async with s.get(f"{base}/logs/apt", allow_redirects=False) as r:
                assert r.status == 301 and r.headers["Location"] == "apt/"
            async with s.get(f"{base}/logs", allow_redirects=False) as r:
                assert r.status == 301 and r.headers["Location"] == "/logs/"
            assert (await get(s, f"{base}/logs/escape"))[0] == 404  # a link out of the directory
            assert (await get(s, f"{base}/logs/..%2Fsecret"))[0] == 404
            assert (await get(s, f"{base}/logs/apt/..%2F..%2Fsecret"))[0] == 404
            assert (await get(s, f"{base}/logs/missing"))[:1] == (404,)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_debugging_handlers_off(tmp_path):
    node = Node(tmp_path)
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=NODE,
        pods=lambda: node.pods,
        locate_log=node.locate_log,
        enable_debugging_handlers=False,
        configz=lambda: {"x": 1},
        running_pods=lambda: asyncio.sleep(0, []),
    )
    task = await serve(server)
    base = f"https://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
            for path in ("/containerLogs/default/web/app", "/logs/", "/runningpods/", "/run/a/b/c", "/exec/a/b/c"):
                assert await get(s, f"{base}{path}") == (
                    405,
                    "text/plain; charset=utf-8",
                    "Debug endpoints are disabled.\n",
                ), path
            assert (await get(s, f"{base}/pods"))[0] == 200
            assert (await get(s, f"{base}/configz"))[0] == 404
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_configz_document_is_the_effective_configuration(tmp_path):
    cfg = from_argv(
        [
            "--root-dir",
            str(tmp_path),
            "--max-pods=42",
            "--sync-frequency=30s",
            "--feature-gates=GracefulNodeShutdown=true",
            "--register-with-taints=a=b:NoSchedule",
            "--eviction-hard=memory.available<100Mi",
            "--anonymous-auth=false",
        ]
    )
    doc = configz_document(cfg)
    assert list(doc) == ["orchagentconfig"]
    c = doc["orchagentconfig"]
    assert (c["kind"], c["apiVersion"]) == ("AgentConfiguration", "agent.config.orch.io/v1beta1")
    assert c["maxPods"] == 42 and c["syncFrequency"] == "30s"
    assert c["featureGates"] == {"GracefulNodeShutdown": True}
    assert c["evictionHard"] == {"memory.available": "100Mi"}
    assert c["authentication"]["anonymous"] == {"enabled": False}
    assert c["authorization"]["mode"] == "AlwaysAllow"
    assert c["authentication"]["webhook"]["cacheTTL"] == "2m0s"
    import json

    json.dumps(doc)  # all plain JSON


async def _pod_in_fake(fake: FakeRuntime, cri: CriClient, tmp_path: Path, name: str = "web"):
    """A sandbox and one running container in the fake runtime, as the pipeline would see them."""
    uid = f"uid-{name}"
    sandbox = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="default"),
        hostname=name,
        log_directory=str(tmp_path / "podlogs"),
        labels={
            "io.orch.managed": "true",
            "io.orch.pod.uid": uid,
            "io.orch.pod.name": name,
            "io.orch.pod.namespace": "default",
        },
    )
    sid = await cri.run_pod_sandbox(sandbox)
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="app"),
        image=pb.ImageSpec(image="orch.local/busybox:1"),
        command=["sleep", "3600"],
        log_path="app/0.log",
        labels={"io.orch.managed": "true", "io.orch.pod.uid": uid, "io.orch.container.name": "app"},
    )
    cid = await cri.create_container(sid, config, sandbox)
    await cri.start_container(cid)
    st = (await cri.container_status(cid)).status
    pod = {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "app", "image": "orch.local/busybox:1"}]},
    }
    rp = RuntimePod(
        uid,
        name,
        "default",
        [SandboxInfo(sid, True, 1_700_000_000_000_000_000, 0)],
        [
            ContainerInfo(
                cid,
                "app",
                sid,
                "running",
                st.created_at,
                st.started_at,
                image="orch.local/busybox:1",
                log_path=st.log_path,
            )
        ],
    )

    class State:
        pass

    state = State()
    state.pod, state.rp = pod, rp
    return state


async def test_stats_summary_metrics_and_resource_metrics(tmp_path):
    node = Node(tmp_path)
    cgroups = FakeCgroups(tmp_path / "cg")
    async with FakeRuntime() as fake:
        async with CriClient(fake.endpoint, request_timeout=5) as cri:
            state = await _pod_in_fake(fake, cri, tmp_path)
            uid = state.pod["metadata"]["uid"]
            cgroups.write(
                f"orchpods/pod{uid}",
                cpu_ns=10_000_000_000,
                usage=50 << 20,
                inactive_file=10 << 20,
                rss=30 << 20,
                pids=3,
            )
            cgroups.write(
                "orchpods", cpu_ns=20_000_000_000, usage=80 << 20, inactive_file=10 << 20, rss=60 << 20, pids=5
            )
            vol = tmp_path / "root" / "pods" / uid / "volumes" / "orch.io~empty-dir" / "cache"
            vol.mkdir(parents=True)
            (vol / "data").write_bytes(b"x" * 10000)
            stats = StatsProvider(
                node_name=NODE,
                root_dir=str(tmp_path / "root"),
                cri=cri,
                cgroups=cgroups,
                pods=lambda: [(state.pod, state.rp)],
            )
            metrics = AgentMetrics(NODE, pods=lambda: [state])
            server = AgentServer(
                address="127.0.0.1",
                port=0,
                cert_dir=str(tmp_path / "pki"),
                node_name=NODE,
                pods=lambda: node.pods,
                locate_log=node.locate_log,
                stats=stats.summary,
                metrics=metrics.render,
            )
            metrics.pod_worker_duration.observe(0.02, operation_type="sync")
            task = await serve(server)
            base = f"https://127.0.0.1:{server.port}"
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
                    async with s.get(f"{base}/stats/summary") as r:
                        assert r.status == 200 and r.content_type == "application/json"
                        summary = await r.json()
                    n = summary["node"]
                    assert n["nodeName"] == NODE
                    assert n["cpu"]["usageCoreNanoSeconds"] > 0 and "usageNanoCores" in n["cpu"]
                    mem = n["memory"]
                    assert 0 < mem["workingSetBytes"] <= mem["usageBytes"]
                    assert mem["availableBytes"] > 0 and mem["rssBytes"] > 0
                    assert n["fs"]["capacityBytes"] >= n["fs"]["availableBytes"] > 0
                    image_fs = n["runtime"]["imageFs"]
                    assert image_fs["usedBytes"] > 0 and image_fs["capacityBytes"] > 0
                    assert {c["name"] for c in n["systemContainers"]} == {"orch-agent", "pods"}
                    pods_sys = next(c for c in n["systemContainers"] if c["name"] == "pods")
                    assert pods_sys["memory"]["workingSetBytes"] == 70 << 20
                    (p,) = summary["pods"]
                    assert p["podRef"] == {"name": "web", "namespace": "default", "uid": uid}
                    assert p["cpu"]["usageCoreNanoSeconds"] == 10_000_000_000
                    assert p["memory"]["workingSetBytes"] == 40 << 20 and p["memory"]["rssBytes"] == 30 << 20
                    assert p["memory"]["usageBytes"] == 50 << 20
                    assert p["process_stats"] == {"process_count": 3}
                    (c,) = p["containers"]
                    assert c["name"] == "app" and c["memory"]["workingSetBytes"] > 0
                    assert c["cpu"]["usageNanoCores"] == 1_000_000  # the runtime's own rate
                    assert c["rootfs"]["usedBytes"] == 4096
                    (v,) = p["volume"]
                    assert v["name"] == "cache" and v["usedBytes"] >= 10000
                    assert p["ephemeral-storage"]["usedBytes"] >= 10000 + 4096

                    # Rates: the pod used 0.5 s of CPU since the last sample.
                    t0 = time.time()
                    cgroups.write(
                        f"orchpods/pod{uid}",
                        cpu_ns=10_500_000_000,
                        usage=50 << 20,
                        inactive_file=10 << 20,
                        rss=30 << 20,
                        pids=3,
                    )
                    await asyncio.sleep(0.5)
                    async with s.get(f"{base}/stats/summary", params={"only_cpu_and_memory": "true"}) as r:
                        again = await r.json()
                    elapsed = time.time() - t0
                    (p2,) = again["pods"]
                    assert 0.5e9 / (elapsed + 1.0) < p2["cpu"]["usageNanoCores"] <= 0.5e9 / 0.5 * 1.01
                    assert "fs" not in again["node"] and "volume" not in p2

                    status, ctype, text = await get(s, f"{base}/metrics")
                    assert (status, ctype) == (200, "text/plain; version=0.0.4; charset=utf-8")
                    assert "# TYPE orch_agent_pod_worker_duration_seconds histogram" in text
                    assert 'orch_agent_pod_worker_duration_seconds_bucket{operation_type="sync",le="0.025"} 1' in text
                    assert 'orch_agent_pod_worker_duration_seconds_count{operation_type="sync"} 1' in text
                    assert "orch_agent_running_pods 1\n" in text
                    assert 'orch_agent_running_containers{container_state="running"} 1\n' in text
                    assert f'orch_agent_node_name{{node="{NODE}"}} 1\n' in text
                    assert "process_resident_memory_bytes " in text

                    status, _, text = await get(s, f"{base}/metrics/resource")
                    assert status == 200
                    assert 'pod_cpu_usage_seconds_total{namespace="default",pod="web"} 10.5 ' in text
                    assert f'pod_memory_working_set_bytes{{namespace="default",pod="web"}} {40 << 20} ' in text
                    assert 'container_memory_working_set_bytes{container="app",namespace="default",pod="web"} ' in text
                    assert "node_cpu_usage_seconds_total " in text and "scrape_error 0" in text
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


async def test_run_exec_attach_port_forward_through_the_runtime(tmp_path):
    node = Node(tmp_path)
    async with FakeRuntime() as fake:
        async with CriClient(fake.endpoint, request_timeout=5) as cri:
            state = await _pod_in_fake(fake, cri, tmp_path)
            fake.on_exec(["cat", "/etc/hostname"], ExecResult(stdout=b"web\n", stderr=b"warn\n"))
            fake.on_exec(["ls", "/nope"], ExecResult(exit_code=2, stderr=b"ls: /nope: No such file\n"))
            find = lambda ns, name: state if (ns, name) == ("default", "web") else None  # noqa: E731 - a one-line stand-in
            server = AgentServer(
                address="127.0.0.1",
                port=0,
                cert_dir=str(tmp_path / "pki"),
                node_name=NODE,
                pods=lambda: node.pods,
                locate_log=node.locate_log,
                streaming=RuntimeStreaming(cri, find),
            )
            task = await serve(server)
            base = f"https://127.0.0.1:{server.port}"
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
                    async with s.post(f"{base}/run/default/web/app", params={"cmd": "cat /etc/hostname"}) as r:
                        assert (r.status, await r.read()) == (200, b"web\nwarn\n")
                    async with s.post(f"{base}/run/default/web/uid-web/app", params={"cmd": "cat /etc/hostname"}) as r:
                        assert r.status == 200
                    async with s.post(f"{base}/run/default/web/other-uid/app", params={"cmd": "true"}) as r:
                        assert (r.status, await r.text()) == (404, "pod does not exist\n")
                    async with s.post(f"{base}/run/default/web/app", params={"cmd": "ls /nope"}) as r:
                        assert (r.status, await r.text()) == (
                            500,
                            "command 'ls /nope' exited with 2: ls: /nope: No such file\n",
                        )
                    async with s.post(f"{base}/run/default/web/db", params={"cmd": "true"}) as r:
                        assert (r.status, await r.text()) == (404, 'container not found ("db")\n')
                    assert (await get(s, f"{base}/run/default/web/app"))[0] == 405
                    async with s.get(
                        f"{base}/exec/default/web/app",
                        params=[("command", "sh"), ("input", "1"), ("output", "1"), ("tty", "1")],
                        allow_redirects=False,
                    ) as r:
                        assert r.status == 302
                        assert r.headers["Location"].startswith("http://127.0.0.1:10010/exec/")
                    async with s.get(
                        f"{base}/exec/default/web/app", params={"command": "sh"}, allow_redirects=False
                    ) as r:
                        assert (r.status, await r.text()) == (
                            400,
                            "you must specify at least 1 of stdin, stdout, stderr\n",
                        )
                    async with s.post(f"{base}/attach/default/web/app?output=1", allow_redirects=False) as r:
                        assert r.status == 302 and "/attach/" in r.headers["Location"]
                    async with s.get(f"{base}/portForward/default/web?port=8080", allow_redirects=False) as r:
                        assert r.status == 302 and "/portforward/" in r.headers["Location"]
                    async with s.get(f"{base}/portForward/default/nope", allow_redirects=False) as r:
                        assert r.status == 404
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


# --- pure parts of stats and metrics --------------------------------------------------------------


def test_read_cgroup_usage_v2_and_missing(tmp_path):
    d = tmp_path / "unified" / "orchpods" / "podx"
    d.mkdir(parents=True)
    (d / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (d / "memory.current").write_text("104857600\n")
    (d / "memory.stat").write_text("anon 52428800\nfile 41943040\ninactive_file 20971520\npgfault 9\npgmajfault 2\n")
    (d / "memory.max").write_text("max\n")
    (d / "pids.current").write_text("4\n")
    u = read_cgroup_usage({"unified": str(d)})
    assert (u.cpu_ns, u.usage, u.working_set, u.rss, u.limit, u.pids, u.page_faults, u.major_page_faults) == (
        2_500_000_000,
        100 << 20,
        80 << 20,
        50 << 20,
        None,
        4,
        9,
        2,
    )
    (d / "memory.max").write_text("209715200\n")
    assert read_cgroup_usage({"unified": str(d)}).limit == 200 << 20
    assert read_cgroup_usage({"unified": str(tmp_path / "gone")}) is None
    assert read_cgroup_usage({"memory": str(tmp_path / "gone"), "cpuacct": str(tmp_path)}) is None
    assert read_cgroup_usage({"systemd": str(tmp_path)}) is None


def test_prometheus_text_format():
    r = Registry()
    c = r.register(Counter("orch_agent_things_total", "Things.\nDone.", ("kind",)))
    g = r.register(Gauge("orch_agent_level", "Level", collect=lambda: {(): 2.5}))
    h = r.register(Histogram("orch_agent_latency_seconds", "Latency", buckets=(0.1, 1.0)))
    c.inc(kind='a "quoted"\\one')
    c.inc(2, kind="b")
    h.observe(0.05)
    h.observe(0.5)
    h.observe(3)
    _ = g
    assert r.render() == (
        "# HELP orch_agent_latency_seconds Latency\n# TYPE orch_agent_latency_seconds histogram\n"
        'orch_agent_latency_seconds_bucket{le="0.1"} 1\norch_agent_latency_seconds_bucket{le="1"} 2\n'
        'orch_agent_latency_seconds_bucket{le="+Inf"} 3\norch_agent_latency_seconds_sum 3.55\n'
        "orch_agent_latency_seconds_count 3\n"
        "# HELP orch_agent_level Level\n# TYPE orch_agent_level gauge\norch_agent_level 2.5\n"
        "# HELP orch_agent_things_total Things.\\nDone.\n# TYPE orch_agent_things_total counter\n"
        'orch_agent_things_total{kind="a \\"quoted\\"\\\\one"} 1\norch_agent_things_total{kind="b"} 2\n'
    )
    with pytest.raises(ValueError, match="labels"):
        c.inc(other="x")
    with pytest.raises(ValueError, match="registered twice"):
        r.register(Gauge("orch_agent_level", "again"))
