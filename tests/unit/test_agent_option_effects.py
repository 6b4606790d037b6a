"""Options that act through small pieces of the agent: TLS settings, the master service
namespace, the volume-stats period, protectKernelDefaults and standalone --pod-cidr."""

from __future__ import annotations

import asyncio
import os
import ssl
import types

import aiohttp
import pytest

from agent.config import from_argv
from agent.kerneltunables import EXPECTED, differences
from agent.node import NodeAgent
from agent.process import StartError, check_kernel_defaults
from agent.runtime.env import service_environment
from agent.server.server import AgentServer
from agent.server.stats import StatsProvider
from agent.server.tlsconfig import TLSOptionError, apply_tls_options
from cri.client import CriClient
from cri.fake import FakeRuntime


def _server_ctx() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)


def test_tls_defaults_are_tls12_and_up():
    ctx = _server_ctx()
    apply_tls_options(ctx, (), "")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_tls_min_version_and_cipher_suites_restrict_the_context():
    ctx = _server_ctx()
    apply_tls_options(ctx, ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"], "VersionTLS12")
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-RSA-AES128-GCM-SHA256"}
    ctx = _server_ctx()
    apply_tls_options(ctx, (), "VersionTLS13")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


def test_only_tls13_suites_leave_only_tls13():
    ctx = _server_ctx()
    apply_tls_options(ctx, ["TLS_AES_256_GCM_SHA384"], "")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


def test_unknown_or_unavailable_suites_fail_clearly():
    with pytest.raises(TLSOptionError, match="unknown cipher suite"):
        apply_tls_options(_server_ctx(), ["TLS_NOPE"], "")
    try:
        apply_tls_options(_server_ctx(), ["TLS_RSA_WITH_RC4_128_SHA"], "")
    except TLSOptionError as exc:  # OpenSSL 3 has no RC4: the message says so
        assert "offers none of TLS_RSA_WITH_RC4_128_SHA" in str(exc)


def _svc(ns: str, name: str, ip: str) -> dict:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {"clusterIP": ip, "ports": [{"port": 443, "protocol": "TCP"}]},
    }


def test_master_service_namespace_chooses_whose_orch_service_every_pod_gets():
    services = [_svc("default", "orch", "10.0.0.1"), _svc("infra", "orch", "10.0.0.9")]
    assert service_environment(services, "app", False)["ORCH_SERVICE_HOST"] == "10.0.0.1"
    env = service_environment(services, "app", False, "infra")
    assert env["ORCH_SERVICE_HOST"] == "10.0.0.9"


def test_volume_stats_are_measured_once_per_period(tmp_path, monkeypatch):
    vol = tmp_path / "pods" / "u1" / "volumes" / "orch.io~empty-dir" / "data"
    vol.mkdir(parents=True)
    (vol / "f").write_bytes(b"x" * 8192)
    clock = [100.0]
    monkeypatch.setattr("agent.server.stats.time.monotonic", lambda: clock[0])
    stats = StatsProvider(node_name="n", root_dir=str(tmp_path), volume_stats_period=60.0)
    first = stats._volumes("u1")
    assert first and first[0]["name"] == "data"
    (vol / "g").write_bytes(b"y" * 65536)
    assert stats._volumes("u1") == first  # within the period: the earlier figures
    clock[0] += 61
    assert stats._volumes("u1")[0]["usedBytes"] > first[0]["usedBytes"]
    off = StatsProvider(node_name="n", root_dir=str(tmp_path), volume_stats_period=0)
    assert off._volumes("u1") == []


def _proc_sys(tmp_path, overrides: dict[str, int]) -> str:
    for key, value in EXPECTED.items():
        path = tmp_path / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{overrides.get(key, value)}\n")
    return str(tmp_path)


def test_protect_kernel_defaults_refuses_a_differing_kernel(tmp_path):
    good = _proc_sys(tmp_path / "good", {})
    bad = _proc_sys(tmp_path / "bad", {"kernel/panic": 0})
    assert differences(good) == []
    assert differences(bad) == ["invalid kernel flag: kernel.panic, expected value: 10, actual value: 0"]
    cfg = from_argv([])
    check_kernel_defaults(cfg, bad)  # protectKernelDefaults false: nothing checked
    config = tmp_path / "c.yaml"
    config.write_text(
        "kind: AgentConfiguration\napiVersion: agent.config.orch.io/v1beta1\nprotectKernelDefaults: true\n"
    )
    cfg = from_argv([f"--config={config}"])
    check_kernel_defaults(cfg, good)
    with pytest.raises(StartError, match="kernel.panic, expected value: 10"):
        check_kernel_defaults(cfg, bad)


async def test_standalone_pod_cidr_reaches_the_runtime():
    async with FakeRuntime() as fake:
        async with CriClient(fake.endpoint, request_timeout=5) as client:
            holder = types.SimpleNamespace(cri=client)
            assert await NodeAgent.set_pod_cidr(holder, "10.244.3.0/24", attempts=1)  # type: ignore[arg-type]
            assert fake.pod_cidr == "10.244.3.0/24"


async def test_pod_cidr_gives_up_with_a_log_when_the_runtime_stays_away(tmp_path):
    async with CriClient(f"unix://{os.path.join(tmp_path, 'none.sock')}", request_timeout=1) as client:
        holder = types.SimpleNamespace(cri=client)
        assert not await NodeAgent.set_pod_cidr(holder, "10.244.3.0/24", attempts=2, interval=0.01)  # type: ignore[arg-type]


async def test_the_server_serves_with_the_configured_tls_and_system_log_settings(tmp_path):
    levels: list[int] = []
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name="n1",
        pods=lambda: [],
        locate_log=lambda *a: None,
        tls_cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
        tls_min_version="VersionTLS12",
        enable_system_log_handler=False,
        set_verbosity=levels.append,
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    await asyncio.wait_for(started, 10)
    try:

        async def handshake(cipher: str) -> str | None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(cipher)
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=ctx)
            except (ssl.SSLError, ConnectionError):
                return None
            chosen = writer.get_extra_info("cipher")[0]
            writer.close()
            return chosen

        # The serving key is ECDSA: the allowed ECDSA suite works, another TLS 1.2 suite does not.
        assert await handshake("ECDHE-ECDSA-AES128-GCM-SHA256") == "ECDHE-ECDSA-AES128-GCM-SHA256"
        assert await handshake("ECDHE-ECDSA-AES256-GCM-SHA384") is None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            async with session.get(f"https://127.0.0.1:{server.port}/logs/") as r:
                assert r.status == 404  # enableSystemLogHandler false
            async with session.get(f"https://127.0.0.1:{server.port}/healthz") as r:
                assert r.status == 200
            # enableDebugFlagsHandler: PUT /debug/flags/v sets the verbosity.
            async with session.put(f"https://127.0.0.1:{server.port}/debug/flags/v", data="4") as r:
                assert (r.status, await r.text()) == (200, "successfully set orch-agent verbosity to 4\n")
            async with session.put(f"https://127.0.0.1:{server.port}/debug/flags/v", data="loud") as r:
                assert r.status == 400 and "invalid verbosity 'loud'" in await r.text()
            async with session.get(f"https://127.0.0.1:{server.port}/debug/flags/v") as r:
                assert r.status == 405
            assert levels == [4]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_read_only_port_serves_plain_http_without_debugging_handlers(tmp_path):
    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name="n1",
        pods=lambda: [{"metadata": {"name": "p"}}],
        locate_log=lambda *a: None,
        enable_debugging_handlers=False,
        plain_http=True,
    )
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(started))
    await asyncio.wait_for(started, 10)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{server.port}/pods") as r:
                assert r.status == 200 and (await r.json())["items"] == [{"metadata": {"name": "p"}}]
            async with session.get(f"http://127.0.0.1:{server.port}/containerLogs/ns/p/c") as r:
                assert r.status == 405
        assert not (tmp_path / "pki").exists()  # no serving certificate made
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
