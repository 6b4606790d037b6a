"""The agent's API client, TLS bootstrap, certificate rotation and ``orch-agent join``
against a real orch-apiserver (bootstrap-token authentication on).

The server's CSR approver/signer and bootstrap signer are needed for the bootstrap
and join tests; each test checks the capability it needs at run time (a request
approved and signed, ``cluster-info`` signed for a new token) and skips with the
reason when the server does not have it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from agent import join
from agent.certificates import bootstrap as bs
from agent.certificates import rotation as certrotation
from agent.client.config import load_orchconfig, write_orchconfig
from agent.client.informer import Informer
from agent.client.rest import ApiClient, ApiError
from agent.config import from_argv
from apiserver_min.api import bootstraptoken as bt
from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess
from tests.components import free_port
from tests.helpers import console_script, uniq

AGENT_BIN = console_script("orch-agent")
SECRETS = f"/api/v1/namespaces/{names.NS_SYSTEM}/secrets"
CLUSTER_INFO = join.cluster_info_path()
WHOAMI = f"/apis/{names.AUTHENTICATION_GROUP}/v1/selfsubjectreviews"
SERVER_ARGS = ["--enable-bootstrap-token-auth"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing (run tests/run.sh once to create .venv)")
    proc = ApiServerProcess(tmp_path_factory.mktemp("apiserver"), free_port(), extra_args=SERVER_ARGS)
    with proc:
        yield proc


def admin(server: ApiServerProcess) -> ApiClient:
    return ApiClient(load_orchconfig(str(server.kubeconfig)), qps=-1)


async def new_token(client: ApiClient) -> bt.Token:
    """A bootstrap-token secret made through the API, as an administrator would."""
    token = bt.generate_token()
    exp = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await client.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": names.BOOTSTRAP_TOKEN_SECRET_TYPE,
            "metadata": {"name": f"{names.BOOTSTRAP_TOKEN_SECRET_PREFIX}{token.id}", "namespace": names.NS_SYSTEM},
            "stringData": {
                "token-id": token.id,
                "token-secret": token.secret,
                "expiration": exp,
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
            },
        },
    )
    return token


def agent_cfg(tmp: Path, *extra: str, bootstrap: str = ""):
    argv = ["--root-dir", str(tmp), "--orchconfig", str(tmp / "agent.orchconfig"), "--proxy-mode=none", *extra]
    if bootstrap:
        argv += ["--bootstrap-orchconfig", bootstrap]
    return from_argv(argv)


async def bootstrap_node(server: ApiServerProcess, tmp: Path, node: str) -> str:
    """TLS bootstrap of ``node`` with a fresh token; skips when the server cannot issue."""
    a = admin(server)
    try:
        token = await new_token(a)
    finally:
        await a.close()
    boot = tmp / "bootstrap.orchconfig"
    write_orchconfig(str(boot), server=server.url, ca_data=server.ca_cert.read_bytes(), token=str(token))
    cfg = agent_cfg(tmp, bootstrap=str(boot))
    try:
        return await bs.ensure_client_certificate(cfg, node, timeout=15)
    except bs.BootstrapError as exc:
        if "missing approval" in str(exc) or "missing signing" in str(exc):
            pytest.skip(f"the API server does not auto-approve and sign node client CSRs ({exc})")
        raise


# --- the client ------------------------------------------------------------------------------


async def test_crud_with_the_admin_config(server):
    client = admin(server)
    base = "/api/v1/namespaces/default/configmaps"
    name = uniq("cm")
    try:
        created = await client.create(base, {"metadata": {"name": name, "labels": {"a": "1"}}, "data": {"k": "v"}})
        assert created["metadata"]["uid"]
        with pytest.raises(ApiError) as ei:
            await client.create(base, {"metadata": {"name": name}})
        assert ei.value.status == 409 and ei.value.reason == "AlreadyExists"
        got = await client.get(f"{base}/{name}")
        got["data"]["k"] = "v2"
        updated = await client.update(f"{base}/{name}", got)
        assert updated["data"]["k"] == "v2"
        stale = dict(got, metadata=dict(got["metadata"]))
        with pytest.raises(ApiError) as ei:
            await client.update(f"{base}/{name}", stale)  # old resourceVersion
        assert ei.value.status == 409
        patched = await client.patch(f"{base}/{name}", {"data": {"m": "1"}})
        assert patched["data"] == {"k": "v2", "m": "1"}
        patched = await client.patch(f"{base}/{name}", [{"op": "remove", "path": "/data/m"}], patch_type="json")
        assert patched["data"] == {"k": "v2"}
        try:
            patched = await client.patch(f"{base}/{name}", {"metadata": {"labels": {"b": "2"}}}, patch_type="strategic")
        except ApiError as exc:  # a server without strategic merge patch says so with 415
            assert exc.status == 415 and "strategic" in exc.message
            patched = await client.patch(f"{base}/{name}", {"metadata": {"labels": {"b": "2"}}})
        assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}
        listed = await client.get(base, params={"labelSelector": "b=2"})
        assert [i["metadata"]["name"] for i in listed["items"]] == [name]
        await client.delete(f"{base}/{name}")
        with pytest.raises(ApiError) as ei:
            await client.get(f"{base}/{name}")
        assert ei.value.status == 404 and ei.value.reason == "NotFound" and name in ei.value.message
    finally:
        await client.close()


async def test_informer_cache_follows_writes_across_watch_reconnects(server):
    client = admin(server)
    ns = uniq("inf")
    await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    base = f"/api/v1/namespaces/{ns}/configmaps"
    inf = Informer(client, base, name="configmaps")
    inf.min_watch_timeout = 1  # the server ends each watch after 1-2 s
    events: list[tuple[str, str]] = []
    inf.add_handler(
        on_add=lambda o: events.append(("add", o["metadata"]["name"])),
        on_delete=lambda o: events.append(("delete", o["metadata"]["name"])),
    )
    task = asyncio.create_task(inf.run())
    try:
        await client.create(base, {"metadata": {"name": "before"}})
        assert await inf.wait_synced(10)
        deadline = asyncio.get_running_loop().time() + 15
        i = 0
        while inf.watches < 3 and asyncio.get_running_loop().time() < deadline:
            await client.create(base, {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}})
            if i % 2:
                await client.delete(f"{base}/cm-{i - 1}")
            i += 1
            await asyncio.sleep(0.2)
        assert inf.watches >= 3, "the watch did not end and reconnect"
        want = {o["metadata"]["name"] for o in (await client.get(base))["items"]}
        for _ in range(100):
            if {k.split("/", 1)[1] for k in inf.cache} == want:
                break
            await asyncio.sleep(0.05)
        assert {k.split("/", 1)[1] for k in inf.cache} == want
        assert inf.lists == 1, "reconnects must resume from the last version, not relist"
        assert ("delete", "cm-0") in events and ("add", "cm-1") in events
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_watch_from_compacted_version_is_410_and_informer_relists(tmp_path):
    """After a restart the server keeps no history before it: a watch from an older
    version is 410 Gone, and an informer that was away relists."""
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    proc = ApiServerProcess(tmp_path / "srv", free_port())
    with proc:
        client = admin(proc)
        base = "/api/v1/namespaces/default/configmaps"
        inf = Informer(client, base, params={"labelSelector": "watched=yes"}, name="watched")
        inf.backoff_base, inf.backoff_cap = 0.05, 0.3
        task = asyncio.create_task(inf.run())
        try:
            await client.create(base, {"metadata": {"name": "w1", "labels": {"watched": "yes"}}})
            assert await inf.wait_synced(10)
            for _ in range(100):
                if "default/w1" in inf.cache:
                    break
                await asyncio.sleep(0.05)
            old_rv = inf.resource_version
            # Writes the informer does not see move the server's version past it.
            for i in range(5):
                await client.create(base, {"metadata": {"name": f"other-{i}"}})
            await asyncio.to_thread(proc.stop)
            await asyncio.to_thread(proc.start)
            with pytest.raises(ApiError) as ei:
                async for _ in client.watch(base, params={"resourceVersion": old_rv}):
                    pass
            assert ei.value.status == 410 and ei.value.reason == "Expired"
            await client.create(base, {"metadata": {"name": "w2", "labels": {"watched": "yes"}}})
            for _ in range(200):
                if inf.lists >= 2 and "default/w2" in inf.cache:
                    break
                await asyncio.sleep(0.05)
            assert inf.lists >= 2 and sorted(inf.cache) == ["default/w1", "default/w2"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()


# --- TLS bootstrap and rotation ------------------------------------------------------------


async def test_tls_bootstrap_gives_the_node_its_identity(server, tmp_path):
    node = uniq("node")
    path = await bootstrap_node(server, tmp_path, node)
    assert path == str(tmp_path / "agent.orchconfig")
    doc = yaml.safe_load(Path(path).read_text())
    link = str(tmp_path / "pki" / "orch-agent-client-current.pem")
    assert doc["users"][0]["user"] == {"client-certificate": link, "client-key": link}
    assert os.path.islink(link) and oct(os.stat(link).st_mode & 0o777) == "0o600"
    conn = load_orchconfig(path)
    cert = x509.load_pem_x509_certificate(conn.cert_data)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{node}"
    client = ApiClient(conn)
    try:
        who = await client.create(WHOAMI, {})
        assert who["status"]["userInfo"]["username"] == f"system:node:{node}"
        assert names.GROUP_NODES in who["status"]["userInfo"]["groups"]
        nodes = await client.get("/api/v1/nodes")
        assert nodes["kind"] == "NodeList"
        # The certificate is reused: no second request.
        assert (
            await bs.ensure_client_certificate(
                agent_cfg(tmp_path, bootstrap=str(tmp_path / "bootstrap.orchconfig")), node
            )
            == path
        )
    finally:
        await client.close()
    a = admin(server)
    try:
        csrs = (await a.get(bs.CSR_PATH))["items"]
        mine = [
            c
            for c in csrs
            if x509.load_pem_x509_csr(base64.b64decode(c["spec"]["request"]))
            .subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0]
            .value
            == f"system:node:{node}"
        ]
        assert len(mine) == 1 and mine[0]["metadata"]["name"].startswith("node-csr-")
        assert mine[0]["spec"]["signerName"] == names.SIGNER_NODE_AGENT_CLIENT
        assert mine[0]["spec"]["usages"] == ["digital signature", "key encipherment", "client auth"]
    finally:
        await a.close()


async def test_client_certificate_rotation_switches_the_live_client(server, tmp_path):
    node = uniq("node")
    path = await bootstrap_node(server, tmp_path, node)
    cfg = agent_cfg(tmp_path, "--rotate-certificates")
    client = ApiClient(load_orchconfig(path))
    try:
        old = x509.load_pem_x509_certificate(client.conn.cert_data)
        old_file = os.readlink(tmp_path / "pki" / "orch-agent-client-current.pem")
        # The node renews with its own certificate (selfnodeclient), then reloads.
        await certrotation.rotate_client_once(cfg, node, client, timeout=15)
        new = x509.load_pem_x509_certificate(client.conn.cert_data)
        assert new.serial_number != old.serial_number
        assert os.readlink(tmp_path / "pki" / "orch-agent-client-current.pem") != old_file
        assert os.path.exists(old_file)
        who = await client.create(WHOAMI, {})
        assert who["status"]["userInfo"]["username"] == f"system:node:{node}"
    finally:
        await client.close()


async def test_serving_certificate_waits_for_approval(server, tmp_path):
    """Not auto-approved without the server's opt-in flag: an administrator approves."""
    node = uniq("node")
    path = await bootstrap_node(server, tmp_path, node)
    client = ApiClient(load_orchconfig(path))
    a = admin(server)
    task = asyncio.create_task(
        bs.request_serving_certificate(client, node, [node, "127.0.0.1"], str(tmp_path / "pki"), timeout=20)
    )
    try:
        pending = None
        for _ in range(100):
            for c in (await a.get(bs.CSR_PATH))["items"]:
                if (
                    c["spec"]["signerName"] == names.SIGNER_NODE_AGENT_SERVING
                    and c["spec"].get("username") == f"system:node:{node}"
                ):
                    pending = c
            if pending:
                break
            await asyncio.sleep(0.1)
        assert pending is not None, "no serving CSR was created"
        assert pending["spec"]["usages"] == ["digital signature", "key encipherment", "server auth"]
        await asyncio.sleep(0.5)
        name = pending["metadata"]["name"]
        cur = await a.get(f"{bs.CSR_PATH}/{name}")
        assert not (cur.get("status") or {}).get("conditions"), "approved without the opt-in flag"
        cur.setdefault("status", {})["conditions"] = [
            {"type": "Approved", "status": "True", "reason": "AdminApproved", "message": "test"}
        ]
        await a.update(f"{bs.CSR_PATH}/{name}/approval", cur)
        cert_path, key_path = await asyncio.wait_for(task, 20)
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        await a.close()
    assert cert_path == key_path == str(tmp_path / "pki" / "orch-agent-server-current.pem")
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [node]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


# --- join --------------------------------------------------------------------------------------


async def signed_token(server: ApiServerProcess) -> bt.Token:
    """A new token whose signature the server publishes in cluster-info (else skip)."""
    a = admin(server)
    try:
        token = await new_token(a)
        for _ in range(100):
            try:
                cm = await a.get(CLUSTER_INFO)
                if bt.JWS_KEY_PREFIX + token.id in (cm.get("data") or {}):
                    return token
            except ApiError as exc:
                if exc.status != 404:
                    raise
            await asyncio.sleep(0.1)
    finally:
        await a.close()
    pytest.skip("the API server does not publish cluster-info signed for new tokens (no bootstrap signer)")


def run_join(*args: str) -> subprocess.CompletedProcess:
    if not AGENT_BIN.exists():
        pytest.skip(f"{AGENT_BIN} missing")
    return subprocess.run(
        [str(AGENT_BIN), "join", *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


async def test_join_discovery_verifies_and_refuses(server, tmp_path):
    token = await signed_token(server)
    pin = bt.ca_cert_hash(server.ca_cert.read_bytes())
    opts = join.parse_join_args(["--server", server.url, "--token", str(token), "--discovery-token-ca-cert-hash", pin])
    assert await join.discover(opts) == server.ca_cert.read_bytes()

    wrong_secret = bt.Token(token.id, "0123456789abcdef" if token.secret != "0123456789abcdef" else "fedcba9876543210")
    bad_sig = await asyncio.to_thread(
        run_join,
        "--server",
        server.url,
        "--token",
        str(wrong_secret),
        "--discovery-token-ca-cert-hash",
        pin,
        "--root-dir",
        str(tmp_path / "a"),
    )
    assert bad_sig.returncode == 1, bad_sig.stderr
    assert "cluster-info JWS signature does not verify with the given token" in bad_sig.stderr
    wrong_pin = "sha256:" + "0" * 64
    bad_pin = await asyncio.to_thread(
        run_join,
        "--server",
        server.url,
        "--token",
        str(token),
        "--discovery-token-ca-cert-hash",
        wrong_pin,
        "--root-dir",
        str(tmp_path / "b"),
    )
    assert bad_pin.returncode == 1, bad_pin.stderr
    assert f"the cluster CA does not match --discovery-token-ca-cert-hash: got {pin}" in bad_pin.stderr
    # Nothing was written by a refused join.
    assert not (tmp_path / "a" / names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME).exists()
    assert not (tmp_path / "b" / names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME).exists()
    usage = await asyncio.to_thread(run_join, "--server", server.url)
    assert usage.returncode == 2 and "missing required flags: --token, --discovery-token-ca-cert-hash" in usage.stderr


def test_join_install_writes_configs_then_bootstrap_works(server, tmp_path, monkeypatch):
    token = asyncio.run(signed_token(server))
    pin = bt.ca_cert_hash(server.ca_cert.read_bytes())
    env = tmp_path / "orch-agent.env"
    env.write_text('ORCH_AGENT_ARGS="--config=/etc/orch/agent/config.yaml"\n')
    monkeypatch.setattr(join, "systemd_running", lambda: False)
    root = tmp_path / "root"
    node = uniq("joined")
    code = join.main(
        [
            "--server",
            server.url,
            "--token",
            str(token),
            "--discovery-token-ca-cert-hash",
            pin,
            "--install",
            "--env-file",
            str(env),
            "--root-dir",
            str(root),
            "--hostname-override",
            node,
        ],
        run_agent=lambda argv: 0,
    )
    assert code == 0
    boot = root / names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME
    conn = load_orchconfig(str(boot))
    assert conn.server == server.url and conn.token == str(token) and conn.ca_data == server.ca_cert.read_bytes()
    assert oct(boot.stat().st_mode & 0o777) == "0o600"
    line = env.read_text().strip()
    assert line == (
        f'ORCH_AGENT_ARGS="--config=/etc/orch/agent/config.yaml --root-dir {root} '
        f"--hostname-override {node} --bootstrap-orchconfig={boot} "
        f'--orchconfig={root / names.AGENT_ORCHCONFIG_NAME}"'
    )

    # The agent's start with those flags: the TLS bootstrap through the join's config.
    cfg = from_argv(
        [
            "--root-dir",
            str(root),
            "--hostname-override",
            node,
            f"--bootstrap-orchconfig={boot}",
            f"--orchconfig={root / names.AGENT_ORCHCONFIG_NAME}",
        ]
    )
    assert str(cfg.mode) == "api-server"

    async def bootstrap_and_check() -> str:
        path = await bs.ensure_client_certificate(cfg, node, timeout=15)
        client = ApiClient(load_orchconfig(path))
        try:
            who = await client.create(WHOAMI, {})
            await client.get("/api/v1/nodes")
            return who["status"]["userInfo"]["username"]
        finally:
            await client.close()

    try:
        assert asyncio.run(bootstrap_and_check()) == f"system:node:{node}"
    except bs.BootstrapError as exc:
        if "missing approval" in str(exc) or "missing signing" in str(exc):
            pytest.skip(f"the API server does not auto-approve and sign node client CSRs ({exc})")
        raise


def test_join_runs_the_agent_with_both_configs(server, tmp_path, monkeypatch):
    token = asyncio.run(signed_token(server))
    pin = bt.ca_cert_hash(server.ca_cert.read_bytes())
    seen: list[list[str]] = []
    root = tmp_path / "r"
    own = tmp_path / "mine.orchconfig"
    code = join.main(
        [
            "--server",
            server.url,
            f"--token={token}",
            f"--discovery-token-ca-cert-hash={pin}",
            "--root-dir",
            str(root),
            "--orchconfig",
            str(own),
            "--v=2",
        ],
        run_agent=lambda argv: seen.append(list(argv)) or 0,
    )
    assert code == 0 and len(seen) == 1
    argv = seen[0]
    assert argv == [
        "--root-dir",
        str(root),
        "--orchconfig",
        str(own),
        "--v=2",
        f"--bootstrap-orchconfig={root / names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME}",
    ]
    cfg = from_argv(argv)
    assert cfg.orchconfig == str(own) and cfg.bootstrap_orchconfig.endswith(names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME)
    assert load_orchconfig(cfg.bootstrap_orchconfig).token == str(token)


def test_join_help_and_bad_agent_flag():
    if not AGENT_BIN.exists():
        pytest.skip(f"{AGENT_BIN} missing")
    out = subprocess.run([str(AGENT_BIN), "join", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--discovery-token-ca-cert-hash" in out.stdout
    bad = subprocess.run(
        [
            str(AGENT_BIN),
            "join",
            "--server",
            "https://127.0.0.1:1",
            "--token",
            "abcdef.0123456789abcdef",
            "--discovery-token-ca-cert-hash",
            "sha256:" + "a" * 64,
            "--no-such-flag",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "unknown flag: --no-such-flag" in bad.stderr
