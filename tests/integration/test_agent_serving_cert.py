"""The agent's HTTPS server in a cluster, against a real orch-apiserver:

* ``--rotate-server-certificates``: a serving CSR (``orch.io/node-agent-serving``, the
  node's names as SANs) which an administrator approves (the server does not
  auto-approve serving requests by default, as upstream); the running server
  then presents the issued certificate on new handshakes;
* Webhook authentication and authorization: the API server's own client
  certificate (``pods/log``) is recognised with the cluster CA as client CA and
  allowed by SubjectAccessReview, so ``GET pods/NAME/log`` through the API
  server reads the agent's log; a bootstrap token (TokenReview) and anonymous
  users are refused by SubjectAccessReview.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import socket
import ssl
import uuid
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from agent.certificates import bootstrap as bs
from agent.certificates.rotation import rotate_serving_certificate
from agent.client.config import load_orchconfig, write_orchconfig
from agent.client.rest import ApiClient, ApiError
from agent.config import from_argv
from agent.server import AgentServer, LogTarget
from agent.server import auth as serverauth
from apiserver_min.api import bootstraptoken as bt
from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess
from tests.components import free_port

SECRETS = f"/api/v1/namespaces/{names.NS_SYSTEM}/secrets"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing (run tests/run.sh once to create .venv)")
    proc = ApiServerProcess(
        tmp_path_factory.mktemp("apiserver"), free_port(), extra_args=["--enable-bootstrap-token-auth"]
    )
    with proc:
        yield proc


def admin(server: ApiServerProcess) -> ApiClient:
    return ApiClient(load_orchconfig(str(server.kubeconfig)), qps=-1)


async def new_token(client: ApiClient) -> bt.Token:
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
            },
        },
    )
    return token


async def join_node(server: ApiServerProcess, tmp: Path, node: str) -> tuple[ApiClient, bt.Token]:
    """The node's own client after the TLS bootstrap (skips when the server cannot issue)."""
    a = admin(server)
    try:
        token = await new_token(a)
    finally:
        await a.close()
    boot = tmp / "bootstrap.orchconfig"
    write_orchconfig(str(boot), server=server.url, ca_data=server.ca_cert.read_bytes(), token=str(token))
    cfg = from_argv(
        ["--root-dir", str(tmp), "--orchconfig", str(tmp / "agent.orchconfig"), "--bootstrap-orchconfig", str(boot)]
        + ["--proxy-mode=none"]
    )
    try:
        path = await bs.ensure_client_certificate(cfg, node, timeout=15)
    except bs.BootstrapError as exc:
        pytest.skip(f"the API server does not issue node client certificates ({exc})")
    return ApiClient(load_orchconfig(path), qps=-1), token


async def approve_serving_csr(a: ApiClient, node: str, timeout: float = 20) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for c in (await a.get(bs.CSR_PATH))["items"]:
            if (
                c["spec"]["signerName"] == names.SIGNER_NODE_AGENT_SERVING
                and c["spec"].get("username") == f"{names.NODE_USER_PREFIX}{node}"
                and not (c.get("status") or {}).get("conditions")
            ):
                c.setdefault("status", {})["conditions"] = [
                    {"type": "Approved", "status": "True", "reason": "AdminApproved", "message": "test"}
                ]
                return await a.update(f"{bs.CSR_PATH}/{c['metadata']['name']}/approval", c)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no pending serving CSR of {node} within {timeout}s")


def peer_certificate(port: int) -> x509.Certificate:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


async def test_serving_certificate_rotation_and_webhook_auth_with_the_apiserver(apiserver, tmp_path):
    node = f"node-{uuid.uuid4().hex[:6]}"
    client, token = await join_node(apiserver, tmp_path, node)
    a = admin(apiserver)
    log_file = tmp_path / "app.log"
    log_file.write_bytes(b"2024-05-01T12:00:01.5Z stdout F hello through the API server\n")
    cluster_ca = apiserver.ca_cert.read_bytes()
    review = serverauth.api_review(lambda: client)
    authn = serverauth.Authenticator(
        x509_auth=serverauth.X509Authenticator(),
        token_auth=serverauth.TokenWebhookAuthenticator(review, ttl=60),
        anonymous=True,
    )
    authz = serverauth.WebhookAuthorizer(review, authorized_ttl=60, unauthorized_ttl=5)
    pod_name = f"web-{uuid.uuid4().hex[:4]}"

    def locate(namespace, name, container, previous):
        if (namespace, name, container, previous) == ("default", pod_name, "app", False):
            return LogTarget(str(log_file), lambda: False)
        return None

    server = AgentServer(
        address="127.0.0.1",
        port=0,
        cert_dir=str(tmp_path / "pki"),
        node_name=node,
        pods=lambda: [],
        locate_log=locate,
        authenticate=authn,
        authorize=authz,
        client_ca=cluster_ca,
    )
    started = asyncio.get_running_loop().create_future()
    serve = asyncio.create_task(server.serve(started))
    rotation = None
    try:
        await asyncio.wait_for(started, 10)
        first = await asyncio.to_thread(peer_certificate, server.port)
        assert first.issuer != x509.load_pem_x509_certificate(cluster_ca).subject  # self-signed at first

        rotation = asyncio.create_task(
            rotate_serving_certificate(
                client, node, lambda: [node, "127.0.0.1"], str(tmp_path / "pki"), server.reload_certificate
            )
        )
        approved = await approve_serving_csr(a, node)
        request = x509.load_pem_x509_csr(base64.b64decode(approved["spec"]["request"]))
        san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == [node]
        assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        assert approved["spec"]["usages"] == ["digital signature", "key encipherment", "server auth"]

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while server.serving_cert_expiry == first.not_valid_after_utc.timestamp() or server._issued is None:
            assert loop.time() < deadline, "the issued serving certificate was not loaded"
            await asyncio.sleep(0.1)
        # The running server presents the issued certificate on a new handshake,
        # verifiable with the cluster CA for the node's address.
        verify = ssl.create_default_context(cadata=cluster_ca.decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=verify)) as s:
            async with s.get(f"https://127.0.0.1:{server.port}/healthz") as r:
                # anonymous: authenticated, then refused by the cluster's RBAC
                assert r.status == 403
                assert await r.text() == (
                    "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=proxy)\n"
                )
            async with s.get(
                f"https://127.0.0.1:{server.port}/stats/summary", headers={"Authorization": f"Bearer {token}"}
            ) as r:
                assert r.status == 403
                assert (await r.text()).startswith(f"Forbidden (user={names.BOOTSTRAP_USER_PREFIX}{token.id}, ")
            async with s.get(
                f"https://127.0.0.1:{server.port}/pods", headers={"Authorization": "Bearer not-a-token"}
            ) as r:
                assert r.status == 401
        served = await asyncio.to_thread(peer_certificate, server.port)
        assert served.issuer == x509.load_pem_x509_certificate(cluster_ca).subject
        assert served.subject.rfc4514_string() == f"CN={names.NODE_USER_PREFIX}{node},O={names.GROUP_NODES}"

        # The API server reads a pod's log from this agent with its own client certificate.
        node_obj = await client.create(
            "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
        )
        for _ in range(10):  # a bundled controller may write the new Node first: read it again
            node_obj["status"] = {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node}],
                "daemonEndpoints": {names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": server.port}},
            }
            try:
                await client.update(f"/api/v1/nodes/{node}/status", node_obj)
                break
            except ApiError as exc:
                if exc.status != 409:
                    raise
                node_obj = await client.get(f"/api/v1/nodes/{node}")
        await a.create(
            "/api/v1/namespaces/default/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "orch.local/busybox:1"}]},
            },
        )
        reply = await a.request("GET", f"/api/v1/namespaces/default/pods/{pod_name}/log")
        assert reply == {"text": "hello through the API server\n"}  # the client wraps plain text
        sars = [k for k in authz.cache._data if k[0] == names.APISERVER_AGENT_CLIENT_USER]
        assert sars and sars[0][1] == (names.GROUP_MASTERS,)
    finally:
        for t in (rotation, serve):
            if t is not None:
                t.cancel()
        await asyncio.gather(*(t for t in (rotation, serve) if t is not None), return_exceptions=True)
        try:
            await a.delete(f"/api/v1/namespaces/default/pods/{pod_name}", params={"gracePeriodSeconds": "0"})
        except Exception:  # noqa: BLE001 - cleanup only
            pass
        await client.close()
        await a.close()
