"""The pod manager: desired pods from the pod flow, mirror pods kept in step with static pods."""

from __future__ import annotations

import asyncio

import pytest

from agent.client.rest import ApiError
from agent.mirrorclient import MirrorClient
from agent.podmanager import PodManager
from agent.pods import SOURCE_API, SOURCE_FILE, Op, PodUpdate
from agent.status.manager import StatusManager
from apiserver_min.api import names


def static_pod(name: str, hash_: str, ns: str = "default") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}-{hash_}",
            "annotations": {names.ANNOTATION_CONFIG_SOURCE: SOURCE_FILE, names.ANNOTATION_CONFIG_HASH: hash_},
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def api_pod(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": {"containers": []}}


class FakeApi:
    """The API server's pods, as far as mirror pods and status go; records every call."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}  # full name -> pod
        self.calls: list[tuple[str, str]] = []
        self.counter = 0
        self.fail_next_create = False

    async def get(self, path, *, params=None, rate_limited=True) -> dict:
        raise NotImplementedError

    async def create(self, path, body, *, params=None, rate_limited=True) -> dict:
        key = f"{body['metadata']['name']}_{body['metadata']['namespace']}"
        self.calls.append(("create", key))
        if self.fail_next_create:
            self.fail_next_create = False
            raise ApiError(500, "InternalError", "boom")
        if key in self.pods:
            raise ApiError(409, "AlreadyExists", "exists")
        self.counter += 1
        obj = {**body, "metadata": {**body["metadata"], "uid": f"m{self.counter}", "resourceVersion": "1"}}
        self.pods[key] = obj
        return obj

    async def patch(self, path, body, *, patch_type="merge", rate_limited=True, params=None) -> dict:
        self.calls.append(("patch", path))
        return {}

    async def delete(self, path, *, body=None, params=None, rate_limited=True) -> dict:
        ns, name = path.split("/")[4], path.split("/")[6]
        key = f"{name}_{ns}"
        self.calls.append(("delete", key))
        if key not in self.pods:
            raise ApiError(404, "NotFound", "gone")
        return self.pods.pop(key)

    def mirrors(self) -> dict[str, dict]:
        return dict(self.pods)


async def settle(pm: PodManager, api: FakeApi, rounds: int = 5) -> None:
    """Let the manager work, feeding it the API's mirror pods as the watch would."""
    for _ in range(rounds):
        await asyncio.sleep(0.01)
        pm.set_mirror_pods(api.mirrors())


@pytest.fixture
async def running():
    api = FakeApi()
    pm = PodManager(MirrorClient(api, "node-1", lambda: "node-uid"))
    task = asyncio.create_task(pm.run())
    yield pm, api
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_desired_pods_follow_the_updates():
    pm = PodManager()
    a, s = api_pod("a"), static_pod("s", "h1")
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_API, [a]))
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [s]))
    assert {p["metadata"]["uid"] for p in pm.pods()} == {"uid-a", "uid-s-h1"}
    assert pm.static_pods() == [s]
    pm.apply(PodUpdate.make(Op.REMOVE, SOURCE_API, [a]))
    assert pm.get("uid-a") is None and pm.get("uid-s-h1") is s


async def test_mirror_pods_are_created_only_for_static_pods(running):
    pm, api = running
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_API, [api_pod("a")]))
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [static_pod("s", "h1")]))
    await settle(pm, api)
    assert set(api.pods) == {"s_default"}
    mirror = api.pods["s_default"]
    assert mirror["metadata"]["annotations"][names.ANNOTATION_CONFIG_MIRROR] == "h1"
    assert mirror["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert mirror["spec"]["nodeName"] == "node-1"
    assert pm.mirror_of(static_pod("s", "h1")) is not None


async def test_no_mirror_pod_is_written_before_the_api_source_reported(running):
    pm, api = running
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [static_pod("s", "h1")]))
    await asyncio.sleep(0.05)
    assert api.calls == []
    pm.set_mirror_pods({})
    await asyncio.sleep(0.02)
    assert api.calls == [("create", "s_default")]


async def test_a_deleted_mirror_pod_is_recreated_from_the_watch(running):
    pm, api = running
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [static_pod("s", "h1")]))
    await settle(pm, api)
    del api.pods["s_default"]  # someone deleted it
    await settle(pm, api)
    assert "s_default" in api.pods
    assert [c for c in api.calls if c[0] == "create"] == [("create", "s_default")] * 2


async def test_a_changed_static_pod_replaces_its_mirror_pod(running):
    pm, api = running
    old, new = static_pod("s", "h1"), static_pod("s", "h2")
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [old]))
    await settle(pm, api)
    first = api.pods["s_default"]["metadata"]["uid"]
    pm.apply(PodUpdate.make(Op.REMOVE, SOURCE_FILE, [old]))
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [new]))
    await settle(pm, api)
    mirror = api.pods["s_default"]
    assert mirror["metadata"]["uid"] != first
    assert mirror["metadata"]["annotations"][names.ANNOTATION_CONFIG_MIRROR] == "h2"
    assert pm.mirror_of(new) is not None and pm.mirror_of(old) is None


async def test_removed_static_pods_and_orphans_lose_their_mirror_pods(running):
    pm, api = running
    api.pods["orphan_default"] = {
        "metadata": {"name": "orphan", "namespace": "default", "uid": "o1", "resourceVersion": "1"},
    }
    s = static_pod("s", "h1")
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [s]))
    await settle(pm, api)
    assert set(api.pods) == {"s_default"}
    pm.apply(PodUpdate.make(Op.REMOVE, SOURCE_FILE, [s]))
    await settle(pm, api)
    assert api.pods == {}


async def test_a_failed_create_is_retried(running, monkeypatch):
    monkeypatch.setattr("agent.podmanager.MIRROR_RETRY", 0.02)
    pm, api = running
    api.fail_next_create = True
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [static_pod("s", "h1")]))
    await settle(pm, api, rounds=10)
    assert "s_default" in api.pods


async def test_static_pod_status_goes_to_its_mirror_pod(running):
    pm, api = running
    statuses = StatusManager(api, mirrors=pm)
    pm.on_mirror_created = statuses.resend
    task = asyncio.create_task(statuses.run())
    try:
        s = static_pod("s", "h1")
        pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [s]))
        statuses.set_status(s, {"phase": "Running"})
        await settle(pm, api)
        assert ("patch", "/api/v1/namespaces/default/pods/s/status") in api.calls
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_gracefully_deleted_mirror_pod_is_deleted_at_once_and_recreated(running):
    pm, api = running
    pm.apply(PodUpdate.make(Op.ADD, SOURCE_FILE, [static_pod("s", "h1")]))
    await settle(pm, api)
    first = api.pods["s_default"]
    # kubectl delete: a deletion timestamp, the object stays for its grace period
    meta = {**first["metadata"], "deletionTimestamp": "2024-01-01T00:00:00Z", "resourceVersion": "2"}
    api.pods["s_default"] = {**first, "metadata": meta}
    await settle(pm, api)
    mirror = api.pods["s_default"]
    assert mirror["metadata"]["uid"] != first["metadata"]["uid"]
    assert "deletionTimestamp" not in mirror["metadata"]
