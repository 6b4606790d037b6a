"""Node registration and status, the node lease and the API event sink, against an
in-memory API with the client's interface (create/get/update/patch/delete, 404/409,
status sub-resource, resourceVersion preconditions)."""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid

import pytest

from agent.config import from_argv
from agent.events import EventRecorder
from agent.eventsink import COMBINED_PREFIX, ApiEventSink, TokenBucket
from agent.status.lease import LeaseManager, lease_path
from agent.status.nodestatus import (
    HostFiles,
    NodeStatusManager,
    go_arch,
    merge_patch,
    node_addresses,
    node_images,
    os_image,
    resource_list,
    resource_quantity,
    status_changed,
)
from apiserver_min.api import names
from apiserver_min.api.timeutil import parse_rfc3339
from cri import api_pb2 as pb
from tests.helpers import FakeCgroups

# --- a fake API ----------------------------------------------------------------------------


class FakeApiError(Exception):
    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        self.body = {"kind": "Status", "code": status, "reason": reason, "message": message}


def _apply_merge(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _apply_merge(out.get(k), v)
    return out


class FakeApi:
    """Objects by path; ``<obj>/status`` writes only the status, as the real server."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.rv = itertools.count(100)
        self.calls: list[tuple] = []
        self.fail: list[Exception] = []  # raised by the next calls, in order
        self.before_write = None  # hook(method, path) run before a write

    def _maybe_fail(self) -> None:
        if self.fail:
            raise self.fail.pop(0)

    def _split(self, path: str) -> tuple[str, bool]:
        return (path[: -len("/status")], True) if path.endswith("/status") else (path, False)

    async def get(self, path, *, params=None, rate_limited=True):
        self.calls.append(("get", path, params))
        self._maybe_fail()
        if path not in self.objects:
            raise FakeApiError(404, "NotFound", path)
        return copy.deepcopy(self.objects[path])

    async def create(self, path, body, *, params=None, rate_limited=True):
        self.calls.append(("create", path, rate_limited))
        self._maybe_fail()
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        key = f"{path}/{md['name']}"
        if key in self.objects:
            raise FakeApiError(409, "AlreadyExists", key)
        md["uid"] = str(uuid.uuid4())
        md["resourceVersion"] = str(next(self.rv))
        if "/namespaces/" in path:
            md["namespace"] = path.split("/namespaces/")[1].split("/")[0]
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def _write(self, key: str, new: dict, status_only: bool) -> dict:
        old = self.objects[key]
        given = (new.get("metadata") or {}).get("resourceVersion")
        if given and given != old["metadata"]["resourceVersion"]:
            raise FakeApiError(409, "Conflict", key)
        if status_only:
            out = copy.deepcopy(old)
            out["status"] = new.get("status", {})
        else:
            out = new
            out.setdefault("metadata", {})["uid"] = old["metadata"]["uid"]
        out["metadata"]["resourceVersion"] = str(next(self.rv))
        self.objects[key] = out
        return copy.deepcopy(out)

    async def update(self, path, body, *, rate_limited=True):
        self.calls.append(("update", path, rate_limited))
        self._maybe_fail()
        if self.before_write:
            self.before_write("update", path)
        key, status_only = self._split(path)
        if key not in self.objects:
            raise FakeApiError(404, "NotFound", key)
        return self._write(key, copy.deepcopy(body), status_only)

    async def patch(self, path, body, *, patch_type="merge", rate_limited=True):
        assert patch_type == "merge"
        self.calls.append(("patch", path, rate_limited, copy.deepcopy(body)))
        self._maybe_fail()
        if self.before_write:
            self.before_write("patch", path)
        key, status_only = self._split(path)
        if key not in self.objects:
            raise FakeApiError(404, "NotFound", key)
        merged = _apply_merge(self.objects[key], body)
        if "resourceVersion" not in (body.get("metadata") or {}):
            merged["metadata"]["resourceVersion"] = self.objects[key]["metadata"]["resourceVersion"]
        return self._write(key, merged, status_only)

    async def delete(self, path, *, body=None, params=None):
        self.calls.append(("delete", path))
        return self.objects.pop(path)

    def count(self, method: str, path: str | None = None) -> int:
        return sum(1 for c in self.calls if c[0] == method and (path is None or c[1] == path))


class Runtime:
    def __init__(self, ready=True) -> None:
        self.ready = ready
        self.images = [
            pb.Image(
                id="sha256:small",
                repo_tags=["orch.local/pause:1"],
                repo_digests=["orch.local/pause@sha256:aa"],
                size=1000,
            ),
            pb.Image(
                id="sha256:big",
                repo_tags=["orch.local/busybox:1", "orch.local/busybox:latest"],
                repo_digests=[],
                size=5000,
            ),
        ]

    def runtime_ready(self):
        return self.ready

    async def version(self):
        return "containerd://1.6.20"

    async def list_images(self):
        return list(self.images)


NODE = "node-a"
NODE_PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
def host_files(tmp_path):
    (tmp_path / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    (tmp_path / "boot_id").write_text("11111111-2222-3333-4444-555555555555\n")
    (tmp_path / "os-release").write_text('NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    return HostFiles(
        machine_id=(str(tmp_path / "machine-id"),),
        product_uuid=str(tmp_path / "no-such-uuid"),
        boot_id=str(tmp_path / "boot_id"),
        os_release=str(tmp_path / "os-release"),
    )


def make_manager(api, host_files, *flags, runtime=None, cgroups=None, events=None, **kw):
    cfg = from_argv([f"--hostname-override={NODE}", *flags])
    runtime = runtime or Runtime()
    mgr = NodeStatusManager(
        cfg,
        api,
        node_name=NODE,
        cgroups=cgroups or FakeCgroups(),
        runtime_ready=runtime.runtime_ready,
        runtime_version=runtime.version,
        list_images=runtime.list_images,
        events=events or EventRecorder(NODE),
        version="v1.27.0-orch",
        host_ip="10.1.2.3",
        host_files=host_files,
        detect_ip=lambda v6: "192.0.2.99",
        **kw,
    )
    return mgr, runtime


def cond(node, type_):
    return next(c for c in node["status"]["conditions"] if c["type"] == type_)


def node_events(recorder):
    return [(e.reason, e.message) for e in recorder.for_object(NODE)]


# --- pure helpers ----------------------------------------------------------------------------


def test_go_arch_and_os_image(tmp_path):
    assert go_arch("x86_64") == "amd64"
    assert go_arch("aarch64") == "arm64"
    assert go_arch("riscv64") == "riscv64"
    f = tmp_path / "os"
    f.write_text("ID=x\nPRETTY_NAME='Some OS 1'\n")
    assert os_image(str(f)) == "Some OS 1"
    f.write_text("ID=x\n")
    assert os_image(str(f)) == "Linux"
    assert os_image(str(tmp_path / "missing")) == "Linux"


def test_host_files_system_info(host_files):
    info = host_files.system_info()
    assert info["machineID"] == "0123456789abcdef0123456789abcdef"
    assert info["systemUUID"] == info["machineID"]  # no DMI: the machine id
    assert info["bootID"] == "11111111-2222-3333-4444-555555555555"
    assert info["osImage"] == "Debian GNU/Linux 12 (bookworm)"
    assert info["operatingSystem"] == "linux" and info["architecture"] == go_arch()
    assert info["kernelVersion"]


def test_quantities():
    assert resource_quantity("cpu", 2000) == "2"
    assert resource_quantity("cpu", 1500) == "1500m"
    assert resource_quantity("memory", 16323588 * 1024) == "16323588Ki"
    assert resource_quantity("hugepages-2Mi", 4 * 2**20) == "4Mi"
    assert resource_quantity("pods", 110) == "110"
    assert resource_quantity("memory", -5) == "0"
    assert resource_list({"cpu": 1000, "pid": 99, "memory": 2**30, "example.com/x": 3}) == {"cpu": "1", "memory": "1Gi"}


def test_node_images_order_caps_and_names():
    imgs = [
        pb.Image(id="a", repo_tags=["t/a:1"], repo_digests=["t/a@sha256:1"], size=10),
        pb.Image(id="b", repo_tags=[f"t/b:{i}" for i in range(7)], size=30),
        pb.Image(id="c", size=20),  # nameless: left out
        {"id": "d", "repoTags": ["t/d:1"], "size": 30},
    ]
    out = node_images(imgs, -1)
    assert [i["sizeBytes"] for i in out] == [30, 30, 10]
    assert out[0]["names"] == ["t/d:1"]  # equal sizes: descending id
    assert len(out[1]["names"]) == 5
    assert out[2]["names"] == ["t/a@sha256:1", "t/a:1"]  # digests, then tags
    assert len(node_images(imgs, 1)) == 1
    assert node_images(imgs, 0) == []


def test_merge_patch_and_status_changed():
    old = {"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]}
    new = {"b": {"c": 2, "d": 4, "e": 5}, "l": [1], "f": {}}
    p = merge_patch(old, new)
    assert p == {"a": None, "b": {"d": 4, "e": 5}, "l": [1], "f": {}}
    s1 = {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]}
    s2 = {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}]}
    assert not status_changed(s1, s2)
    s2["conditions"][0]["status"] = "False"
    assert status_changed(s1, s2)


def test_node_addresses():
    detect = lambda v6: "fd00::9" if v6 else "192.0.2.9"  # noqa: E731 - a one-line stand-in
    assert node_addresses("", "10.0.0.1", "h", detect) == [
        {"type": "InternalIP", "address": "10.0.0.1"},
        {"type": "Hostname", "address": "h"},
    ]
    assert node_addresses("", "", "h", detect)[0]["address"] == "192.0.2.9"
    assert node_addresses("::", "10.0.0.1", "h", detect)[0]["address"] == "fd00::9"
    both = node_addresses("10.0.0.5, fd00::5", "10.0.0.1", "h", detect)
    assert [a["address"] for a in both] == ["10.0.0.5", "fd00::5", "h"]
    with pytest.raises(ValueError, match="--node-ip"):
        node_addresses("not-an-ip", "", "h", detect)


# --- registration ----------------------------------------------------------------------------


async def test_register_creates_the_node(host_files):
    api = FakeApi()
    mgr, _ = make_manager(
        api,
        host_files,
        "--node-labels=node.orch.io/role=edge,example.com/x=1",
        "--register-with-taints=dedicated=edge:NoSchedule,special:NoExecute",
        "--provider-id=fake://node-a",
        "--port=10300",
    )
    node = await mgr.register()
    assert mgr.registered and mgr.node_uid == node["metadata"]["uid"]
    stored = api.objects[NODE_PATH]
    labels = stored["metadata"]["labels"]
    assert labels[names.LABEL_HOSTNAME] == NODE
    assert labels[names.LABEL_OS] == "linux" and labels[names.LABEL_ARCH] == go_arch()
    assert labels["node.orch.io/role"] == "edge" and labels["example.com/x"] == "1"
    assert stored["metadata"]["annotations"][names.ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH] == "true"
    assert stored["spec"]["taints"] == [
        {"key": "dedicated", "value": "edge", "effect": "NoSchedule"},
        {"key": "special", "effect": "NoExecute"},
    ]
    assert stored["spec"]["providerID"] == "fake://node-a"
    st = stored["status"]
    assert st["capacity"] == {
        "cpu": "4",
        "memory": "8Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "hugepages-2Mi": "0",
    }
    assert st["allocatable"]["cpu"] == "3900m" and st["allocatable"]["memory"] == "8092Mi"
    assert st["addresses"] == [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "Hostname", "address": NODE}]
    info = st["nodeInfo"]
    assert info[names.NODE_INFO_AGENT_VERSION_FIELD] == "v1.27.0-orch"
    assert info[names.NODE_INFO_PROXY_VERSION_FIELD] == "v1.27.0-orch"
    assert info["containerRuntimeVersion"] == "containerd://1.6.20"
    assert info["bootID"] == "11111111-2222-3333-4444-555555555555"
    assert st["daemonEndpoints"] == {names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": 10300}}
    assert [i["sizeBytes"] for i in st["images"]] == [5000, 1000]
    assert [c["type"] for c in st["conditions"]] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    ready = cond(stored, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "True",
        names.NODE_REASON_READY,
        "orch-agent is posting ready status",
    )
    mem = cond(stored, "MemoryPressure")
    assert (mem["status"], mem["reason"]) == ("False", names.NODE_REASON_SUFFICIENT_MEMORY)
    assert cond(stored, "DiskPressure")["reason"] == names.NODE_REASON_NO_DISK_PRESSURE
    assert cond(stored, "PIDPressure")["reason"] == names.NODE_REASON_SUFFICIENT_PID
    parse_rfc3339(ready["lastHeartbeatTime"])
    reasons = [r for r, _ in node_events(mgr.events)]
    assert reasons == ["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"]


async def test_register_retries_with_backoff(host_files):
    api = FakeApi()
    api.fail = [OSError("connection refused"), FakeApiError(503, "ServiceUnavailable")]
    mgr, _ = make_manager(api, host_files)
    await asyncio.wait_for(mgr.register(), 5)
    assert api.count("create") == 3 and NODE_PATH in api.objects


async def test_existing_node_is_taken_over(host_files):
    api = FakeApi()
    api.objects[NODE_PATH] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "uid": "old-uid",
            "resourceVersion": "5",
            "labels": {names.LABEL_HOSTNAME: "someone-else", names.LABEL_OS: "linux", "user/label": "kept"},
        },
        "spec": {"taints": [{"key": "theirs", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "1", "hugepages-1Gi": "2Gi", "example.com/dongle": "4"},
            "allocatable": {"cpu": "1", "hugepages-1Gi": "2Gi", "example.com/dongle": "4"},
        },
    }
    mgr, _ = make_manager(
        api,
        host_files,
        "--node-labels=node.orch.io/role=edge",
        "--provider-id=fake://node-a",
        "--register-with-taints=mine:NoSchedule",
    )
    node = await mgr.register()
    assert node["metadata"]["uid"] == "old-uid"
    stored = api.objects[NODE_PATH]
    labels = stored["metadata"]["labels"]
    assert labels[names.LABEL_HOSTNAME] == NODE and labels["node.orch.io/role"] == "edge"
    assert labels[names.LABEL_ARCH] == go_arch() and labels["user/label"] == "kept"
    assert stored["spec"]["providerID"] == "fake://node-a"
    assert stored["spec"]["taints"] == [{"key": "theirs", "effect": "NoSchedule"}]  # not reconciled
    assert "hugepages-1Gi" not in stored["status"]["capacity"]
    assert "hugepages-1Gi" not in stored["status"]["allocatable"]
    # The first status keeps the extended resource someone else reports.
    assert await mgr.sync_once()
    st = api.objects[NODE_PATH]["status"]
    assert st["capacity"]["example.com/dongle"] == "4" and st["allocatable"]["example.com/dongle"] == "4"
    assert st["capacity"]["cpu"] == "4"


async def test_provider_id_of_existing_node_is_not_replaced(host_files):
    api = FakeApi()
    api.objects[NODE_PATH] = {
        "metadata": {"name": NODE, "uid": "u", "resourceVersion": "1", "labels": {}},
        "spec": {"providerID": "other://x"},
    }
    mgr, _ = make_manager(api, host_files, "--provider-id=fake://node-a")
    await mgr.register()
    assert api.objects[NODE_PATH]["spec"]["providerID"] == "other://x"


# --- status updates ----------------------------------------------------------------------------


async def test_status_posted_only_when_changed_or_due(host_files):
    api = FakeApi()
    mgr, runtime = make_manager(api, host_files)
    await mgr.register()
    assert not await mgr.sync_once()  # the registration posted this status: heartbeat only
    assert api.count("patch", NODE_PATH + "/status") == 0
    mgr.last_report -= mgr.report_frequency + 1  # the report frequency elapsed
    assert await mgr.sync_once()
    call = [c for c in api.calls if c[0] == "patch"][-1]
    assert call[2] is False  # heartbeats bypass the rate limit
    assert call[3]["metadata"]["resourceVersion"]
    assert set(call[3]["status"]) <= {"conditions"}  # at most the heartbeats moved
    runtime.images.append(pb.Image(id="new", repo_tags=["x:1"], size=1))
    assert await mgr.sync_once()
    assert len(api.objects[NODE_PATH]["status"]["images"]) == 3


async def test_ready_transition_and_events(host_files):
    api = FakeApi()
    runtime = Runtime(ready=False)
    mgr, _ = make_manager(api, host_files, runtime=runtime)
    await mgr.register()
    ready = cond(api.objects[NODE_PATH], "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        names.NODE_REASON_NOT_READY,
        "container runtime is down",
    )
    first_transition = ready["lastTransitionTime"]
    runtime.ready = (False, "container runtime network not ready: NetworkReady=false")
    await mgr.sync_once()
    assert cond(api.objects[NODE_PATH], "Ready")["message"] == "container runtime network not ready: NetworkReady=false"
    assert cond(api.objects[NODE_PATH], "Ready")["lastTransitionTime"] == first_transition
    runtime.ready = True
    assert await mgr.sync_once()
    ready = cond(api.objects[NODE_PATH], "Ready")
    assert ready["status"] == "True" and ready["reason"] == names.NODE_REASON_READY
    assert ("NodeReady", f"Node {NODE} status is now: NodeReady") in node_events(mgr.events)
    runtime.ready = False
    await mgr.sync_once()
    assert "NodeNotReady" in [r for r, _ in node_events(mgr.events)]


async def test_pressure_and_missing_capacity(host_files):
    api = FakeApi()
    pressure = {}
    cg = FakeCgroups(
        capacity={"cpu": 1000, "memory": 2**30, "pods": 10}, allocatable={"cpu": 1000, "memory": 2**30, "pods": 10}
    )
    mgr, _ = make_manager(api, host_files, cgroups=cg, pressure=lambda: pressure)
    await mgr.register()
    ready = cond(api.objects[NODE_PATH], "Ready")
    assert ready["status"] == "False"
    assert ready["message"] == "missing node capacity for resources: ephemeral-storage"
    pressure["MemoryPressure"] = True
    await mgr.sync_once()
    mem = cond(api.objects[NODE_PATH], "MemoryPressure")
    assert (mem["status"], mem["reason"]) == ("True", names.NODE_REASON_INSUFFICIENT_MEMORY)
    assert "NodeHasInsufficientMemory" in [r for r, _ in node_events(mgr.events)]


async def test_conflict_is_retried_and_foreign_conditions_kept(host_files):
    api = FakeApi()
    mgr, runtime = make_manager(api, host_files)
    await mgr.register()
    api.objects[NODE_PATH]["status"]["conditions"].append(
        {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}
    )
    state = {"n": 0}

    def concurrent(method, path):
        # Another writer moves the node between our read and the first patch.
        if path.endswith("/status") and state["n"] == 0:
            state["n"] += 1
            api.objects[NODE_PATH]["metadata"]["resourceVersion"] = str(next(api.rv))

    api.before_write = concurrent
    runtime.ready = False
    assert await mgr.sync_once()
    gets = [c for c in api.calls if c[0] == "get" and c[1] == NODE_PATH]
    assert gets[-2][2] == {"resourceVersion": "0"} and gets[-1][2] is None
    conds = {c["type"]: c for c in api.objects[NODE_PATH]["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False" and "NetworkUnavailable" in conds
    assert [r for r, _ in node_events(mgr.events)].count("NodeNotReady") == 1


async def test_deleted_node_is_registered_again(host_files):
    api = FakeApi()
    mgr, _ = make_manager(api, host_files)
    await mgr.register()
    first_uid = mgr.node_uid
    del api.objects[NODE_PATH]
    assert await mgr.sync_once()
    assert NODE_PATH in api.objects and mgr.registrations == 2
    assert mgr.node_uid == api.objects[NODE_PATH]["metadata"]["uid"] != first_uid


async def test_without_register_node_nothing_is_created(host_files):
    api = FakeApi()
    mgr, _ = make_manager(api, host_files, "--register-node=false")
    assert await mgr.register() == {} and mgr.node_uid == ""
    assert not await mgr.sync_once()
    assert api.count("create") == 0
    api.objects[NODE_PATH] = {"metadata": {"name": NODE, "uid": "u", "resourceVersion": "1"}}
    assert (await mgr.register())["metadata"]["uid"] == "u"
    assert await mgr.sync_once()
    assert mgr.node_uid == "u"
    assert cond(api.objects[NODE_PATH], "Ready")["status"] == "True"


async def test_run_posts_starting_and_turns_ready_without_waiting_a_period(host_files):
    api = FakeApi()
    runtime = Runtime(ready=False)
    mgr, _ = make_manager(api, host_files, "--node-status-update-frequency=1h", runtime=runtime)
    task = asyncio.create_task(mgr.run())
    try:
        for _ in range(200):
            if NODE_PATH in api.objects:
                break
            await asyncio.sleep(0.01)
        assert cond(api.objects[NODE_PATH], "Ready")["status"] == "False"
        runtime.ready = True
        for _ in range(500):
            if cond(api.objects[NODE_PATH], "Ready")["status"] == "True":
                break
            await asyncio.sleep(0.01)
        assert cond(api.objects[NODE_PATH], "Ready")["status"] == "True"
        mgr.poke()
        before = len(api.calls)
        for _ in range(200):
            if len(api.calls) > before:
                break
            await asyncio.sleep(0.01)
        assert len(api.calls) > before
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert ("Starting", "Starting orch-agent.") in node_events(mgr.events)


# --- the lease -----------------------------------------------------------------------------------

LEASE = lease_path(NODE)


async def test_lease_created_then_renewed_with_one_update():
    api = FakeApi()
    uid = {"v": "node-uid-1"}
    lm = LeaseManager(api, node_name=NODE, node_uid=lambda: uid["v"])
    assert lm.renew_interval == 10.0
    await lm.sync()
    lease = api.objects[LEASE]
    assert lease["metadata"]["namespace"] == names.NS_NODE_LEASE
    assert lease["apiVersion"] == f"{names.COORDINATION_GROUP}/v1"
    spec = lease["spec"]
    assert spec["holderIdentity"] == NODE and spec["leaseDurationSeconds"] == 40
    assert len(spec["renewTime"].split(".")[1]) == len("000000Z")
    parse_rfc3339(spec["renewTime"])
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1"}
    ]
    first = spec["renewTime"]
    calls = len(api.calls)
    await asyncio.sleep(0.002)
    await lm.sync()
    assert [c[0] for c in api.calls[calls:]] == ["update"]
    assert api.calls[-1][2] is False  # not rate limited
    assert api.objects[LEASE]["spec"]["renewTime"] > first
    uid["v"] = "node-uid-2"  # the node was registered again
    await lm.sync()
    assert [r["uid"] for r in api.objects[LEASE]["metadata"]["ownerReferences"]] == ["node-uid-2"]


async def test_lease_conflict_and_deletion_fall_back_to_reading():
    api = FakeApi()
    lm = LeaseManager(api, node_name=NODE, duration_seconds=20, node_uid=lambda: "")
    await lm.sync()
    assert "ownerReferences" not in api.objects[LEASE]["metadata"]
    api.objects[LEASE]["metadata"]["resourceVersion"] = "999"  # someone else wrote it
    await lm.sync()
    assert api.objects[LEASE]["spec"]["leaseDurationSeconds"] == 20
    assert lm.lease["metadata"]["resourceVersion"] == api.objects[LEASE]["metadata"]["resourceVersion"]
    del api.objects[LEASE]
    await lm.sync()
    assert LEASE in api.objects
    assert api.count("create") == 2


async def test_lease_backs_off_on_errors():
    api = FakeApi()
    api.fail = [OSError("down"), OSError("down")]
    lm = LeaseManager(api, node_name=NODE, node_uid=lambda: "u")
    await asyncio.wait_for(lm.sync(), 5)
    assert LEASE in api.objects and api.count("get") == 3


async def test_lease_run_renews_until_cancelled():
    api = FakeApi()
    lm = LeaseManager(api, node_name=NODE, node_uid=lambda: "u", renew_interval=0.01)
    task = asyncio.create_task(lm.run())
    for _ in range(300):
        if lm.renewals >= 4:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lm.renewals >= 4 and api.count("update") >= 3


def test_lease_duration_must_be_positive():
    with pytest.raises(ValueError, match="nodeLeaseDurationSeconds"):
        LeaseManager(FakeApi(), node_name=NODE, duration_seconds=0, node_uid=lambda: "")


# --- the event sink ------------------------------------------------------------------------------

POD = {"metadata": {"name": "web", "namespace": "shop", "uid": "pod-uid", "resourceVersion": "7"}}


def events_in(api, ns):
    prefix = f"/api/v1/namespaces/{ns}/events/"
    return [o for k, o in api.objects.items() if k.startswith(prefix)]


async def run_sink(sink):
    task = asyncio.create_task(sink.run())
    await asyncio.wait_for(sink.drain(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_sink_posts_pod_and_node_events_and_aggregates_repeats():
    api = FakeApi()
    rec = EventRecorder(NODE)
    sink = ApiEventSink(api, node_name=NODE, qps=100, burst=100, retry_delay=0)
    rec.sinks.append(sink)
    rec(POD, "Warning", "BackOff", "Back-off restarting failed container")
    rec(POD, "Warning", "BackOff", "Back-off restarting failed container")
    rec(None, "Normal", "Starting", "Starting orch-agent.")
    await run_sink(sink)
    [ev] = events_in(api, "shop")
    assert ev["involvedObject"] == {
        "kind": "Pod",
        "namespace": "shop",
        "name": "web",
        "uid": "pod-uid",
        "apiVersion": "v1",
        "resourceVersion": "7",
    }
    assert ev["source"] == {"component": "orch-agent", "host": NODE}
    assert (ev["type"], ev["reason"], ev["count"]) == ("Warning", "BackOff", 2)
    assert ev["metadata"]["name"].startswith("web.")
    parse_rfc3339(ev["firstTimestamp"])
    assert ev["lastTimestamp"] >= ev["firstTimestamp"]
    [node_ev] = events_in(api, "default")
    assert node_ev["involvedObject"] == {"kind": "Node", "name": NODE, "uid": NODE}
    assert node_ev["count"] == 1
    assert sink.created == 2 and sink.patched == 1
    patch = next(c for c in api.calls if c[0] == "patch")
    assert set(patch[3]) == {"count", "lastTimestamp", "message"} and patch[2] is False


async def test_sink_combines_similar_events():
    api = FakeApi()
    rec = EventRecorder(NODE)
    sink = ApiEventSink(api, node_name=NODE, qps=100, burst=100)
    rec.sinks.append(sink)
    for i in range(12):
        rec(POD, "Normal", "Pulled", f"image {i} pulled")
    await run_sink(sink)
    evs = events_in(api, "shop")
    plain = [e for e in evs if not e["message"].startswith(COMBINED_PREFIX)]
    combined = [e for e in evs if e["message"].startswith(COMBINED_PREFIX)]
    assert len(plain) == 9
    assert len(combined) == 1 and combined[0]["count"] == 3
    assert combined[0]["message"] == COMBINED_PREFIX + "image 11 pulled"


async def test_sink_rate_limit_drops_and_counts():
    now = [0.0]
    api = FakeApi()
    rec = EventRecorder(NODE)
    sink = ApiEventSink(api, node_name=NODE, qps=1, burst=3, clock=lambda: now[0])
    rec.sinks.append(sink)
    for i in range(5):
        rec(POD, "Normal", "Created", f"container {i}")
    assert sink.dropped == 2
    now[0] = 2.0  # two tokens back
    for i in range(3):
        rec(POD, "Normal", "Started", f"container {i}")
    assert sink.dropped == 3
    await run_sink(sink)
    assert len(events_in(api, "shop")) == 5


def test_token_bucket_defaults():
    b = TokenBucket(0, 0, clock=lambda: 0.0)
    assert (b.qps, b.burst) == (5.0, 10)
    assert sum(b.try_take() for _ in range(20)) == 10


async def test_sink_queue_full_drops():
    api = FakeApi()
    sink = ApiEventSink(api, node_name=NODE, qps=100, burst=100, queue_size=2)
    rec = EventRecorder(NODE)
    rec.sinks.append(sink)
    for i in range(4):
        rec(None, "Normal", "R", f"m{i}")
    assert sink.dropped == 2


async def test_sink_recreates_expired_event_and_handles_errors():
    api = FakeApi()
    rec = EventRecorder(NODE)
    sink = ApiEventSink(api, node_name=NODE, qps=100, burst=100, retry_delay=0)
    rec.sinks.append(sink)
    rec(POD, "Normal", "Pulling", "pulling image")
    await run_sink(sink)
    [ev] = events_in(api, "shop")
    api.objects.clear()  # the event expired
    rec(POD, "Normal", "Pulling", "pulling image")
    await run_sink(sink)
    [again] = events_in(api, "shop")
    assert again["count"] == 2 and again["firstTimestamp"] == ev["firstTimestamp"]
    # A refusal is final, a transport error is retried.
    api.fail = [FakeApiError(403, "Forbidden")]
    rec(POD, "Normal", "Other", "refused")
    api_calls = len(api.calls)
    await run_sink(sink)
    assert sink.failed == 1 and len(api.calls) == api_calls + 1
    api.fail = [OSError("reset"), OSError("reset")]
    rec(POD, "Normal", "Other", "eventually")
    await run_sink(sink)
    assert any(e["message"] == "eventually" for e in events_in(api, "shop"))


def test_report_frequency_follows_an_explicit_update_frequency(host_files):
    mgr, _ = make_manager(FakeApi(), host_files)
    assert (mgr.update_frequency, mgr.report_frequency) == (10.0, 300.0)
    mgr, _ = make_manager(FakeApi(), host_files, "--node-status-update-frequency=20s")
    assert (mgr.update_frequency, mgr.report_frequency) == (20.0, 20.0)


async def test_device_plugin_resources_in_capacity_and_allocatable(host_files):
    """Capacity counts every device, allocatable the healthy ones; a resource whose plugin
    is gone for good drops to 0 in both."""
    api = FakeApi()
    plugins = {"now": ({"example.com/widget": 3}, {"example.com/widget": 2}, {"example.com/gone"})}
    mgr, _ = make_manager(api, host_files, extended_resources=lambda: plugins["now"])
    await mgr.register()
    st = api.objects[NODE_PATH]["status"]
    assert (st["capacity"]["example.com/widget"], st["allocatable"]["example.com/widget"]) == ("3", "2")
    assert (st["capacity"]["example.com/gone"], st["allocatable"]["example.com/gone"]) == ("0", "0")
    assert st["allocatable"]["cpu"] == "3900m"
