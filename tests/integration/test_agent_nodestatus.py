"""Node registration, status, lease and events against a real orch-apiserver.

The agent's parts run in the test process with the real API client (admin
credentials from the server's admin.orchconfig); the cgroups and the runtime are
small stand-ins, since what is checked is what the API server stores.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import yaml

from agent.config import from_argv
from agent.events import EventRecorder
from agent.eventsink import ApiEventSink
from agent.status.lease import LeaseManager, lease_path
from agent.status.nodestatus import NodeStatusManager, go_arch
from apiserver_min.api import names
from apiserver_min.api.timeutil import parse_rfc3339
from apiserver_min.pki import Pki, cert_pem, connection_config, key_pem, new_key, sign_leaf
from cri import api_pb2 as pb

rest = pytest.importorskip("agent.client.rest")
client_config = pytest.importorskip("agent.client.config")


class Cgroups:
    def capacity(self):
        return {"cpu": 2000, "memory": 4 * 2**30, "pods": 110, "ephemeral-storage": 50 * 2**30}

    def allocatable(self):
        return {"cpu": 1900, "memory": 4 * 2**30 - 2**28, "pods": 110, "ephemeral-storage": 45 * 2**30}


class Runtime:
    def __init__(self) -> None:
        self.ready = False

    def runtime_ready(self):
        return self.ready

    async def version(self):
        return "containerd://1.6.20"

    async def list_images(self):
        return [pb.Image(id="sha256:1", repo_tags=["orch.local/busybox:1"], size=1234)]


@pytest.fixture
async def client(apiserver):
    c = rest.ApiClient(client_config.load_orchconfig(str(apiserver.kubeconfig)))
    try:
        yield c
    finally:
        await c.close()


def manager(client, node_name, runtime, recorder, *flags):
    cfg = from_argv([f"--hostname-override={node_name}", *flags])
    return NodeStatusManager(
        cfg,
        client,
        node_name=node_name,
        cgroups=Cgroups(),
        runtime_ready=runtime.runtime_ready,
        runtime_version=runtime.version,
        list_images=runtime.list_images,
        events=recorder,
        version="v1.27.0-orch",
        host_ip="",
    )


def conditions(node):
    return {c["type"]: c for c in node["status"]["conditions"]}


async def test_register_update_and_reregister(apiserver, client):
    runtime, recorder = Runtime(), EventRecorder("int-node-a")
    mgr = manager(
        client,
        "int-node-a",
        runtime,
        recorder,
        "--node-labels=node.orch.io/pool=blue",
        "--register-with-taints=dedicated=x:NoSchedule",
        "--provider-id=fake://int-node-a",
    )
    await asyncio.wait_for(mgr.register(), 20)
    _, node = apiserver.json("GET", "/api/v1/nodes/int-node-a", expect=200)
    labels = node["metadata"]["labels"]
    assert labels[names.LABEL_HOSTNAME] == "int-node-a" and labels[names.LABEL_OS] == "linux"
    assert labels[names.LABEL_ARCH] == go_arch() and labels["node.orch.io/pool"] == "blue"
    # The node lifecycle controller may add its not-ready taints beside ours.
    assert {"key": "dedicated", "value": "x", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["spec"]["providerID"] == "fake://int-node-a"
    st = node["status"]
    assert st["capacity"]["cpu"] == "2" and st["allocatable"]["memory"] == "3840Mi"
    types = {a["type"] for a in st["addresses"]}
    assert types == {"InternalIP", "Hostname"}
    assert st["nodeInfo"]["containerRuntimeVersion"] == "containerd://1.6.20"
    assert st["nodeInfo"][names.NODE_INFO_AGENT_VERSION_FIELD] == "v1.27.0-orch"
    assert st["nodeInfo"]["operatingSystem"] == "linux" and st["nodeInfo"]["bootID"]
    assert st["daemonEndpoints"][names.NODE_DAEMON_ENDPOINT_AGENT_FIELD]["Port"] == 10250
    assert st["images"] == [{"names": ["orch.local/busybox:1"], "sizeBytes": 1234}]
    conds = conditions(node)
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == names.NODE_REASON_NOT_READY
    assert conds["MemoryPressure"]["reason"] == names.NODE_REASON_SUFFICIENT_MEMORY

    runtime.ready = True
    assert await mgr.sync_once()
    _, node = apiserver.json("GET", "/api/v1/nodes/int-node-a", expect=200)
    assert conditions(node)["Ready"]["status"] == "True"
    assert conditions(node)["Ready"]["reason"] == names.NODE_REASON_READY
    assert "NodeReady" in [e.reason for e in recorder.for_object("int-node-a")]

    first_uid = node["metadata"]["uid"]
    apiserver.json("DELETE", "/api/v1/nodes/int-node-a", expect=200)
    assert await mgr.sync_once()
    _, node = apiserver.json("GET", "/api/v1/nodes/int-node-a", expect=200)
    assert node["metadata"]["uid"] != first_uid and node["metadata"]["uid"] == mgr.node_uid


async def test_existing_node_taken_over(apiserver, client):
    apiserver.json(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "int-node-b", "labels": {names.LABEL_HOSTNAME: "stale", "keep": "me"}},
        },
        expect=201,
    )
    mgr = manager(client, "int-node-b", Runtime(), EventRecorder("int-node-b"))
    await asyncio.wait_for(mgr.register(), 20)
    _, node = apiserver.json("GET", "/api/v1/nodes/int-node-b", expect=200)
    assert node["metadata"]["labels"][names.LABEL_HOSTNAME] == "int-node-b"
    assert node["metadata"]["labels"]["keep"] == "me"
    assert await mgr.sync_once()
    _, node = apiserver.json("GET", "/api/v1/nodes/int-node-b", expect=200)
    assert conditions(node)["Ready"]["reason"] == names.NODE_REASON_NOT_READY


async def test_lease_created_and_renewed(apiserver, client):
    mgr = manager(client, "int-node-c", Runtime(), EventRecorder("int-node-c"))
    await asyncio.wait_for(mgr.register(), 20)
    lm = LeaseManager(client, node_name="int-node-c", node_uid=lambda: mgr.node_uid)
    await asyncio.wait_for(lm.sync(), 20)
    _, lease = apiserver.json("GET", lease_path("int-node-c"), expect=200)
    assert lease["spec"]["holderIdentity"] == "int-node-c"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["uid"] == mgr.node_uid
    first = parse_rfc3339(lease["spec"]["renewTime"])
    time.sleep(0.01)
    await asyncio.wait_for(lm.sync(), 20)
    _, lease = apiserver.json("GET", lease_path("int-node-c"), expect=200)
    assert parse_rfc3339(lease["spec"]["renewTime"]) > first
    apiserver.json("DELETE", lease_path("int-node-c"), expect=200)
    await asyncio.wait_for(lm.sync(), 20)
    apiserver.json("GET", lease_path("int-node-c"), expect=200)


async def test_events_posted_and_aggregated(apiserver, client):
    recorder = EventRecorder("int-node-d")
    sink = ApiEventSink(client, node_name="int-node-d", qps=50, burst=50, retry_delay=0.1)
    recorder.sinks.append(sink)
    task = asyncio.create_task(sink.run())
    try:
        pod = {"metadata": {"name": "ev-pod", "namespace": "default", "uid": "ev-pod-uid"}}
        recorder(pod, "Warning", "BackOff", "Back-off restarting failed container")
        recorder(pod, "Warning", "BackOff", "Back-off restarting failed container")
        recorder(None, "Normal", "Starting", "Starting orch-agent.")
        await asyncio.wait_for(sink.drain(), 20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sink.failed == 0 and sink.created == 2 and sink.patched == 1
    _, evs = apiserver.json("GET", "/api/v1/namespaces/default/events", expect=200)
    mine = [e for e in evs["items"] if (e.get("source") or {}).get("host") == "int-node-d"]
    backoff = [e for e in mine if e["reason"] == "BackOff"]
    assert len(backoff) == 1 and backoff[0]["count"] == 2
    assert backoff[0]["involvedObject"]["uid"] == "ev-pod-uid"
    node_ev = [e for e in mine if e["reason"] == "Starting"]
    assert node_ev[0]["involvedObject"]["kind"] == "Node"


def node_orchconfig(server, node_name: str) -> str:
    """An orchconfig with a client certificate for ``system:node:<name>`` (group system:nodes)."""
    ca_cert, ca_key = Pki(str(server.data_dir)).load_ca()
    key = new_key()
    cn = names.NODE_USER_PREFIX + node_name
    cert = sign_leaf(ca_cert, ca_key, key.public_key(), cn, [names.GROUP_NODES], client=True)
    path = server.data_dir / f"{node_name}.orchconfig"
    path.write_text(
        yaml.safe_dump(
            connection_config(
                server.url, server.ca_cert.read_bytes(), cn, cert_pem_data=cert_pem(cert), key_pem_data=key_pem(key)
            )
        )
    )
    return str(path)


async def test_everything_with_the_node_identity(apiserver):
    """What the agent really runs as: the Node authorizer and NodeRestriction allow all of it."""
    node_name = "int-node-e"
    c = rest.ApiClient(client_config.load_orchconfig(node_orchconfig(apiserver, node_name)))
    try:
        runtime, recorder = Runtime(), EventRecorder(node_name)
        sink = ApiEventSink(c, node_name=node_name, qps=50, burst=50, retry_delay=0.1)
        recorder.sinks.append(sink)
        mgr = manager(
            c,
            node_name,
            runtime,
            recorder,
            "--node-labels=node.orch.io/pool=green",
            "--register-with-taints=only=here:NoExecute",
        )
        await asyncio.wait_for(mgr.register(), 20)
        runtime.ready = True
        assert await asyncio.wait_for(mgr.sync_once(), 20)
        _, node = apiserver.json("GET", f"/api/v1/nodes/{node_name}", expect=200)
        assert conditions(node)["Ready"]["status"] == "True"
        assert node["metadata"]["labels"]["node.orch.io/pool"] == "green"
        lm = LeaseManager(c, node_name=node_name, node_uid=lambda: mgr.node_uid)
        await asyncio.wait_for(lm.sync(), 20)
        await asyncio.wait_for(lm.sync(), 20)
        assert lm.renewals == 2
        # Taking over the existing Node as the node itself (a restart of the agent).
        again = manager(c, node_name, runtime, EventRecorder(node_name), "--node-labels=node.orch.io/pool=green")
        assert (await asyncio.wait_for(again.register(), 20))["metadata"]["uid"] == mgr.node_uid
        task = asyncio.create_task(sink.run())
        try:
            await asyncio.wait_for(sink.drain(), 20)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert sink.failed == 0 and sink.created >= 4  # the pressure events and NodeReady
    finally:
        await c.close()
