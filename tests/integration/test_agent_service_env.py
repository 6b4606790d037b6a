"""The node agent's Service cache against a real orch-apiserver: it lists and watches every
Service, and renders a pod's service variables from what it holds (the ``orch`` Service
of the default namespace always, the pod's namespace's with enableServiceLinks); a node
may list and watch Services."""

from __future__ import annotations

import asyncio

import pytest

from agent.client.config import load_orchconfig
from agent.client.rest import ApiClient
from agent.services import ServiceCache
from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq


async def _service_with_ip(client: ApiClient, ns: str, name: str, ip: str, port: int) -> str:
    """A ClusterIP Service; the cluster IP the server allocated, or ``ip`` where it allocates none."""
    base = f"/api/v1/namespaces/{ns}/services"
    svc = await client.create(base, {"metadata": {"name": name}, "spec": {"ports": [{"name": "web", "port": port}]}})
    if svc["spec"].get("clusterIP"):
        return svc["spec"]["clusterIP"]
    svc["spec"]["clusterIP"] = ip
    svc["spec"]["clusterIPs"] = [ip]
    updated = await client.update(f"{base}/{name}", svc)
    return updated["spec"]["clusterIP"]


async def _until(predicate, what: str, timeout: float = 5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_service_cache_renders_the_pods_variables(apiserver):
    ns = uniq("links")
    create_namespace(apiserver, ns)
    client = ApiClient(load_orchconfig(str(apiserver.kubeconfig)), qps=-1)
    cache = ServiceCache(client)
    task = cache.start()
    try:
        pod = {"metadata": {"name": "p", "namespace": ns, "uid": "u1"}, "spec": {"containers": []}}
        await cache.informer.wait_synced(10)
        ip = await _service_with_ip(client, ns, "my-web", "10.0.0.77", 8080)
        await _until(lambda: "MY_WEB_SERVICE_HOST" in cache.env_for(pod), "the new Service in the cache")
        env = cache.env_for(pod)
        assert env["MY_WEB_SERVICE_HOST"] == ip
        assert env["MY_WEB_SERVICE_PORT_WEB"] == "8080"
        assert env["MY_WEB_PORT"] == f"tcp://{ip}:8080"
        # Without service links only the default namespace's orch Service is given.
        pod["spec"]["enableServiceLinks"] = False
        assert not any(k.startswith("MY_WEB_") for k in cache.env_for(pod))
        only_orch = cache.env_for(pod)
        assert only_orch["ORCH_SERVICE_PORT_HTTPS"] == "443" and only_orch["ORCH_SERVICE_HOST"]
        assert all(k.startswith(f"{names.DEFAULT_SERVICE_NAME.upper()}_") for k in only_orch)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


@pytest.mark.parametrize("verb", ["list", "watch"])
def test_a_node_may_read_every_service(apiserver, verb):
    review = {
        "apiVersion": f"{names.AUTHORIZATION_GROUP}/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"{names.NODE_USER_PREFIX}node-1",
            "groups": [names.GROUP_NODES, names.GROUP_AUTHENTICATED],
            "resourceAttributes": {"verb": verb, "resource": "services", "version": "v1"},
        },
    }
    _, out = apiserver.json("POST", f"/apis/{names.AUTHORIZATION_GROUP}/v1/subjectaccessreviews", review, expect=201)
    assert out["status"]["allowed"] is True, out
