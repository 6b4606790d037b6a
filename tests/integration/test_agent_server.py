"""The agent's HTTPS server over real TLS on loopback: /pods, /healthz, /containerLogs, errors, auth seam."""

from __future__ import annotations

import asyncio
import datetime as _dt
import ipaddress
import os
import socket
import ssl
import stat
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from agent.pods import ManifestProblem
from agent.server import AgentServer, ListenError, LogTarget, UserInfo, ensure_serving_cert

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
        "apiVersion": "v1", "kind": "Pod",
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
    server = AgentServer(address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"), node_name=NODE,
                         pods=lambda: node.pods, locate_log=node.locate_log,
                         healthz=lambda: node.health, problems=lambda: node.problems,
                         follow_poll_interval=0.01)
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
    node.problems = [ManifestProblem("file", "/etc/orch/manifests/bad.yaml", "spec.containers: Required value",
                                     since=1714564800.0)]
    async with session.get(f"{base}/pods") as r:
        body = await r.json()
    assert body["problems"] == [{"source": "file", "location": "/etc/orch/manifests/bad.yaml",
                                 "message": "spec.containers: Required value",
                                 "since": "2024-05-01T12:00:00Z"}]
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
    assert (await get(session, url, params={"tailLines": "1", "timestamps": "true"}))[2] == \
        "2024-05-01T12:00:03.500000000Z long line\n"
    assert (await get(session, url, params={"sinceTime": "2024-05-01T12:00:02Z"}))[2] == "oops\nlong line\n"
    assert (await get(session, url, params={"limitBytes": "8"}))[2] == "hello\noo"
    assert (await get(session, url, params={"previous": "true"}))[2] == "from the previous instance\n"
    assert node.located[-1] == ("default", "web", "app", True)


async def test_container_logs_errors(agent):
    node, server, session, base = agent
    status, ctype, text = await get(session, f"{base}/containerLogs/default/web/app?tailLines=abc")
    assert (status, ctype) == (400, "text/plain; charset=utf-8")
    assert text == 'invalid tailLines "abc": must be an integer\n'
    status, _, text = await get(session, f"{base}/containerLogs/default/web/app?sinceSeconds=5&sinceTime=2024-05-01T12:00:00Z")
    assert status == 400 and "at most one" in text
    assert await get(session, f"{base}/containerLogs/default/nope/app") == \
        (404, "text/plain; charset=utf-8", 'pod "nope" does not exist in namespace "default"\n')
    assert (await get(session, f"{base}/containerLogs/other/web/app"))[0] == 404
    assert (await get(session, f"{base}/containerLogs/default/web/db"))[1:] == \
        ("text/plain; charset=utf-8", 'container "db" not found in pod "web"\n')
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
    async with session.get(f"{base}/containerLogs/default/web/app",
                           params={"follow": "true", "tailLines": "1"},
                           timeout=aiohttp.ClientTimeout(total=20)) as r:
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
    server = AgentServer(address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"), node_name=NODE,
                         pods=lambda: node.pods, locate_log=node.locate_log, follow_poll_interval=0.01)
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

    async def authorize(user, verb, resource, subresource):
        decisions.append((user.name, verb, resource, subresource))
        return (user.name == "alice" and verb == "get", "only reads")

    server = AgentServer(address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"), node_name=NODE,
                         pods=lambda: node.pods, locate_log=node.locate_log,
                         authenticate=authenticate, authorize=authorize)
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
                assert await r.text() == \
                    "Forbidden (user=alice, verb=delete, resource=nodes, subresource=proxy)\n"
        assert decisions == [("alice", "get", "nodes", "proxy"), ("alice", "delete", "nodes", "proxy")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_bind_failure_is_reported_clearly(tmp_path):
    node = Node(tmp_path)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        server = AgentServer(address="127.0.0.1", port=blocker.getsockname()[1], cert_dir=str(tmp_path / "pki"),
                             node_name=NODE, pods=lambda: [], locate_log=node.locate_log)
        started = asyncio.get_running_loop().create_future()
        with pytest.raises(ListenError) as info:
            await server.serve(started)
        assert started.exception() is info.value
        assert str(info.value) == (f"cannot listen on 127.0.0.1:{blocker.getsockname()[1]} (--address, --port): "
                                   "address already in use")
    finally:
        blocker.close()


async def test_explicit_certificate_files_and_half_given_pair(tmp_path):
    node = Node(tmp_path)
    cert, key = ensure_serving_cert(str(tmp_path / "elsewhere"), "custom-name", [])
    server = AgentServer(address="127.0.0.1", port=0, cert_dir=str(tmp_path / "unused"), tls_cert_file=cert,
                         tls_private_key_file=key, node_name=NODE, pods=lambda: [], locate_log=node.locate_log)
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

    half = AgentServer(address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"), tls_cert_file=cert,
                       node_name=NODE, pods=lambda: [], locate_log=node.locate_log)
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
    assert set(san.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("127.0.0.1"),
                                                             ipaddress.ip_address("10.0.0.7")}
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

    # Unreadable files: made again.
    Path(cert).write_text("garbage")
    ensure_serving_cert(str(cert_dir), NODE, [])
    assert x509.load_pem_x509_certificates(Path(cert).read_bytes())

    with pytest.raises(ValueError, match="node name is empty"):
        ensure_serving_cert(str(cert_dir), "", [])
