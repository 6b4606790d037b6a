"""The pod workers and the runtime manager against the fake CRI runtime.

Two layers:

* :func:`compute_pod_actions` as a pure function on hand-made
  :class:`RuntimePod` values (ordering of init containers, restart policies,
  spec-hash changes, liveness failures, dead sandboxes);
* the whole :class:`PodPipeline` (pod config merge -> workers -> runtime
  manager -> real CRI client -> in-process :class:`FakeRuntime`): start order,
  crash back-off, terminal phases, termination with preStop hooks, adoption
  by a restarted agent, orphan housekeeping, admission and runtime restarts.

The pipeline's periods are shrunk (tick, relist, housekeeping, back-off) and
every wait polls for a condition with a timeout; timing assertions are lower
bounds only, never "it happened within N ms".
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from agent import workers as workers_mod
from agent.cm import AdmitResult
from agent.events import EventRecorder
from agent.nodeshutdown import mark_terminated
from agent.pods import Op, PodUpdate
from agent.prober import ProbeManager
from agent.prober import hooks as prober_hooks
from agent.runtime.backoff import Backoff
from agent.runtime.container import container_hash
from agent.runtime.context import NodeContext
from agent.runtime.images import ImageManager
from agent.runtime.manager import ContainerInfo, RuntimeManager, RuntimePod, SandboxInfo, compute_pod_actions
from agent.runtime.volumes import VolumeManager
from agent.services import NOT_SYNCED, ServiceCache
from agent.sources.merge import PodConfig
from agent.workers import PodPipeline
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from cri import api_pb2 as pb
from cri.client import CriClient
from cri.fake import ContainerBehavior, ExecResult, FakeRuntime
from tests.helpers import FakeCgroups

IMAGE = "orch.local/busybox:1"
NODE = "node-1"
POLL = 0.02


# --- pods -----------------------------------------------------------------------------


def container(name: str, **extra: Any) -> dict:
    return {"name": name, "image": IMAGE, "command": ["sleep", "3600"], **extra}


def make_pod(
    name: str,
    containers: list[dict],
    *,
    init: list[dict] | None = None,
    policy: str = "Always",
    grace: int = 30,
    uid: str | None = None,
    namespace: str = "default",
) -> dict:
    spec: dict = {"containers": containers, "restartPolicy": policy, "terminationGracePeriodSeconds": grace}
    if init:
        spec["initContainers"] = init
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": spec,
    }
    apply_defaults("", "v1", "Pod", pod)
    return pod


# --- compute_pod_actions on hand-made runtime state -------------------------------------------

_NS = 1_000_000_000


def sandbox_info(ready: bool = True, attempt: int = 0, sid: str = "sb0") -> SandboxInfo:
    return SandboxInfo(sid, ready, created_at=attempt * _NS + 1, attempt=attempt)


def info(
    spec: dict,
    state: str,
    *,
    exit_code: int = 0,
    cid: str | None = None,
    created: int = 1,
    restart_count: int = 0,
    hash_: str | None = None,
    sandbox: str = "sb0",
) -> ContainerInfo:
    return ContainerInfo(
        id=cid or f"{spec['name']}-{restart_count}",
        name=spec["name"],
        sandbox_id=sandbox,
        state=state,
        created_at=created * _NS,
        exit_code=exit_code,
        restart_count=restart_count,
        hash=container_hash(spec) if hash_ is None else hash_,
    )


def runtime_pod(sandboxes: list[SandboxInfo], containers: list[ContainerInfo]) -> RuntimePod:
    return RuntimePod(
        "uid-p",
        "p",
        "default",
        sandboxes=sandboxes,
        containers=sorted(containers, key=lambda c: c.created_at, reverse=True),
    )


def names_of(containers: list[dict]) -> list[str]:
    return [c["name"] for c in containers]


def test_new_pod_creates_sandbox_and_starts_every_container():
    pod = make_pod("p", [container("a"), container("b")])
    actions = compute_pod_actions(pod, RuntimePod("uid-p"))
    assert actions.create_sandbox and actions.attempt == 0
    assert not actions.kill_pod and actions.next_init is None
    assert names_of(actions.start) == ["a", "b"]


def test_new_pod_with_init_containers_starts_only_the_first_init():
    pod = make_pod("p", [container("app")], init=[container("i1"), container("i2")])
    actions = compute_pod_actions(pod, RuntimePod("uid-p"))
    assert actions.create_sandbox
    assert actions.next_init["name"] == "i1"
    assert actions.start == []


def test_init_containers_run_in_order_each_to_completion():
    i1, i2, app = container("i1"), container("i2"), container("app")
    pod = make_pod("p", [app], init=[i1, i2])
    sb = [sandbox_info()]

    running = compute_pod_actions(pod, runtime_pod(sb, [info(i1, "running")]))
    assert running.idle, "the second init container must wait for the first"

    done_one = compute_pod_actions(pod, runtime_pod(sb, [info(i1, "exited", exit_code=0)]))
    assert done_one.next_init["name"] == "i2" and done_one.start == []
    assert not done_one.create_sandbox and done_one.sandbox_id == "sb0"

    both = compute_pod_actions(pod, runtime_pod(sb, [info(i1, "exited", created=1), info(i2, "exited", created=2)]))
    assert both.next_init is None and names_of(both.start) == ["app"]


def test_failed_init_container_with_never_fails_the_pod():
    i1, app = container("i1"), container("app")
    pod = make_pod("p", [app], init=[i1], policy="Never")
    actions = compute_pod_actions(pod, runtime_pod([sandbox_info()], [info(i1, "exited", exit_code=1)]))
    assert actions.init_failed
    assert actions.next_init is None and actions.start == [] and not actions.create_sandbox


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
def test_failed_init_container_restarts_unless_never(policy):
    i1, i2, app = container("i1"), container("i2"), container("app")
    pod = make_pod("p", [app], init=[i1, i2], policy=policy)
    actions = compute_pod_actions(pod, runtime_pod([sandbox_info()], [info(i1, "exited", exit_code=2)]))
    assert not actions.init_failed
    assert actions.next_init["name"] == "i1"
    assert "i1" in actions.restart_reasons
    assert actions.start == []


@pytest.mark.parametrize(
    "policy, exit_code, restarts",
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 1, True),
        ("Never", 0, False),
        ("Never", 1, False),
    ],
)
def test_exited_app_container_follows_the_restart_policy(policy, exit_code, restarts):
    a, b = container("a"), container("b")
    pod = make_pod("p", [a, b], policy=policy)
    rp = runtime_pod([sandbox_info()], [info(a, "exited", exit_code=exit_code), info(b, "running")])
    actions = compute_pod_actions(pod, rp)
    assert names_of(actions.start) == (["a"] if restarts else [])
    assert not actions.kill and not actions.create_sandbox


def test_running_containers_with_their_spec_are_left_alone():
    a = container("a")
    pod = make_pod("p", [a])
    assert compute_pod_actions(pod, runtime_pod([sandbox_info()], [info(a, "running")])).idle


@pytest.mark.parametrize("policy, restarts", [("Always", True), ("Never", False)])
def test_changed_spec_hash_kills_and_restarts(policy, restarts):
    old = container("a")
    new = container("a", command=["sleep", "7200"])
    pod = make_pod("p", [new], policy=policy)
    running = info(old, "running", cid="old-id")
    actions = compute_pod_actions(pod, runtime_pod([sandbox_info()], [running]))
    assert list(actions.kill) == ["old-id"]
    assert "definition changed" in actions.kill["old-id"][1]
    assert names_of(actions.start) == (["a"] if restarts else [])


def test_liveness_failure_kills_and_restarts():
    a, b = container("a"), container("b")
    pod = make_pod("p", [a, b])
    rp = runtime_pod([sandbox_info()], [info(a, "running", cid="a-id"), info(b, "running", cid="b-id")])
    asked = []

    def liveness(name, cid):
        asked.append((name, cid))
        return "Container a failed liveness probe, will be restarted" if name == "a" else None

    actions = compute_pod_actions(pod, rp, liveness_failure=liveness)
    assert set(asked) == {("a", "a-id"), ("b", "b-id")}
    assert list(actions.kill) == ["a-id"]
    assert names_of(actions.start) == ["a"]
    assert actions.restart_reasons["a"].startswith("Container a failed liveness probe")


def test_dead_sandbox_with_never_after_containers_ran_is_not_recreated():
    a = container("a")
    pod = make_pod("p", [a], policy="Never")
    exited = compute_pod_actions(pod, runtime_pod([sandbox_info(ready=False)], [info(a, "exited", exit_code=0)]))
    assert not exited.create_sandbox and not exited.kill_pod and exited.start == []
    # A container still reported running in the dead sandbox is killed, nothing new is made.
    still = compute_pod_actions(pod, runtime_pod([sandbox_info(ready=False)], [info(a, "running")]))
    assert still.kill_pod and not still.create_sandbox and still.start == []


def test_dead_sandbox_is_recreated_with_every_container():
    a, b = container("a"), container("b")
    pod = make_pod("p", [a, b], policy="Always")
    rp = runtime_pod([sandbox_info(ready=False, attempt=2)], [info(a, "exited", exit_code=137), info(b, "running")])
    actions = compute_pod_actions(pod, rp)
    assert actions.kill_pod and actions.create_sandbox and actions.attempt == 3
    # Both run again in the new sandbox, including b, which kill_pod stops first.
    assert names_of(actions.start) == ["a", "b"]


def test_dead_sandbox_of_a_completed_onfailure_pod_is_not_recreated():
    i1, a = container("i1"), container("a")
    pod = make_pod("p", [a], init=[i1], policy="OnFailure")
    rp = runtime_pod(
        [sandbox_info(ready=False)],
        [info(i1, "exited", exit_code=0, created=1), info(a, "exited", exit_code=0, created=2)],
    )
    actions = compute_pod_actions(pod, rp)
    assert not actions.create_sandbox
    assert actions.next_init is None and actions.start == []


def test_dead_sandbox_of_onfailure_pod_restarts_only_failed_containers():
    a, b = container("a"), container("b")
    pod = make_pod("p", [a, b], policy="OnFailure")
    rp = runtime_pod([sandbox_info(ready=False)], [info(a, "exited", exit_code=0), info(b, "exited", exit_code=1)])
    actions = compute_pod_actions(pod, rp)
    assert actions.create_sandbox and names_of(actions.start) == ["b"]


# --- the pipeline against the fake runtime ------------------------------------------------------


@dataclasses.dataclass
class Agent:
    """One agent process's pod side: its own CRI client, runtime manager, config and pipeline."""

    cri: CriClient
    runtime: RuntimeManager
    config: PodConfig
    pipeline: PodPipeline
    events: EventRecorder
    statuses: list[tuple[str, dict]]
    terminated: list[str]
    task: asyncio.Task | None = None
    probes: ProbeManager | None = None

    def push(self, *pods: dict, source: str = "file") -> None:
        self.config.push(PodUpdate(Op.SET, source, tuple(pods)))

    def start(self) -> None:
        self.task = asyncio.create_task(self.pipeline.run(), name="test-pipeline")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None
        if self.probes is not None:
            await self.probes.close()
        await self.cri.close()

    def status(self, pod: dict) -> dict:
        state = self.pipeline.pods.get(pod["metadata"]["uid"])
        return (state.status or {}) if state is not None else {}

    def container_status(self, pod: dict, name: str, *, init: bool = False) -> dict:
        key = "initContainerStatuses" if init else "containerStatuses"
        for s in self.status(pod).get(key) or []:
            if s["name"] == name:
                return s
        return {}

    def reported(self, pod: dict) -> list[dict]:
        uid = pod["metadata"]["uid"]
        return [status for u, status in self.statuses if u == uid]


@pytest.fixture(autouse=True)
def fast_periods(monkeypatch):
    monkeypatch.setattr(workers_mod, "HOUSEKEEPING_PERIOD", 0.1)
    monkeypatch.setattr(workers_mod, "RELIST_PERIOD", 0.05)
    monkeypatch.setattr(workers_mod, "RUNTIME_RETRY", 0.1)


@pytest.fixture
async def fake():
    async with FakeRuntime() as runtime:
        yield runtime


@pytest.fixture
def ctx(tmp_path) -> NodeContext:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.0.0.2\nsearch example.test\n")
    return NodeContext(
        node_name=NODE,
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "logs"),
        resolv_conf=str(resolv),
        host_ip="192.168.1.5",
        node_allocatable_cpu_millis=4000,
        node_allocatable_memory=8 << 30,
    )


@pytest.fixture
async def make_agent(fake, ctx):
    agents: list[Agent] = []

    def build(
        *,
        cgroups: Any = None,
        backoff: Backoff | None = None,
        probes: bool = False,
        sources: tuple[str, ...] = ("file",),
        keep_terminated_pod_volumes: bool = False,
    ) -> Agent:
        cri = CriClient(fake.endpoint, request_timeout=5, max_reconnect_backoff=0.1)
        events = EventRecorder(NODE)
        statuses: list[tuple[str, dict]] = []
        terminated: list[str] = []
        holder: dict[str, PodPipeline] = {}
        probe_manager = None
        if probes:
            probe_manager = ProbeManager(cri, lambda uid: holder["p"].wake(uid), time_scale=0.05)
        runtime = RuntimeManager(
            cri,
            ctx,
            images=ImageManager(cri),
            volumes=VolumeManager(ctx),
            cgroups=cgroups,
            probes=probe_manager,
            events=events,
            backoff=backoff or Backoff(0.2, 1.0),
            hooks=prober_hooks,
        )
        config = PodConfig(NODE)
        pipeline = PodPipeline(
            config=config,
            runtime=runtime,
            probes=probe_manager,
            cgroups=cgroups,
            events=events,
            sources=sources,
            sync_frequency=1.0,
            host_ip="192.168.1.5",
            tick=0.05,
            on_status=lambda pod, st: statuses.append((pod["metadata"]["uid"], st)),
            on_terminated=lambda pod: terminated.append(pod["metadata"]["uid"]),
            keep_terminated_pod_volumes=keep_terminated_pod_volumes,
        )
        holder["p"] = pipeline
        agent = Agent(cri, runtime, config, pipeline, events, statuses, terminated, probes=probe_manager)
        agents.append(agent)
        return agent

    yield build
    for agent in agents:
        await agent.stop()


async def until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    """Poll ``predicate`` on the loop until it is truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(POLL)


def fake_containers(fake: FakeRuntime, pod: dict, name: str | None = None) -> list:
    uid = pod["metadata"]["uid"]
    return sorted(
        (
            c
            for c in fake.containers.values()
            if c.config.labels.get(names.CRI_LABEL_POD_UID) == uid and (name is None or c.name == name)
        ),
        key=lambda c: c.created_at,
    )


def fake_sandboxes(fake: FakeRuntime, pod: dict) -> list:
    uid = pod["metadata"]["uid"]
    return sorted(
        (s for s in fake.sandboxes.values() if s.config.labels.get(names.CRI_LABEL_POD_UID) == uid),
        key=lambda s: s.created_at,
    )


def running(fake: FakeRuntime, pod: dict, name: str) -> list:
    return [c for c in fake_containers(fake, pod, name) if c.state == pb.CONTAINER_RUNNING]


def calls(fake: FakeRuntime, method: str) -> list:
    return [request for m, request in fake.calls if m == method]


def record_starts(fake: FakeRuntime) -> list[tuple[float, str, int]]:
    """(monotonic time, container name, attempt) of every successful StartContainer."""
    starts: list[tuple[float, str, int]] = []
    original = fake._rpc_StartContainer

    def start(request):
        response = original(request)
        c = fake.containers[request.container_id]
        starts.append((time.monotonic(), c.name, c.config.metadata.attempt))
        return response

    fake._rpc_StartContainer = start  # _dispatch looks handlers up on the instance
    return starts


# --- start order --------------------------------------------------------------------------------


async def test_pod_starts_sandbox_then_init_containers_in_order_then_apps(fake, make_agent):
    fake.set_behavior(ContainerBehavior(exit_after=0.1, exit_code=0), container="i1")
    fake.set_behavior(ContainerBehavior(exit_after=0.1, exit_code=0), container="i2")
    cgroups = FakeCgroups(runtime=fake)
    agent = make_agent(cgroups=cgroups)
    pod = make_pod("web", [container("app"), container("side")], init=[container("i1"), container("i2")])
    agent.start()
    agent.push(pod)

    await until(
        lambda: (
            agent.status(pod).get("phase") == "Running"
            and all(agent.container_status(pod, n).get("state", {}).get("running") for n in ("app", "side"))
        ),
        "the pod to run",
    )

    order = [
        (m, r.config.metadata.name if m == "CreateContainer" else "")
        for m, r in fake.calls
        if m in ("RunPodSandbox", "CreateContainer")
    ]
    assert order[0] == ("RunPodSandbox", "")
    assert [n for m, n in order[1:]] == ["i1", "i2", "app", "side"]
    assert len(calls(fake, "RunPodSandbox")) == 1
    # The pod cgroup was made before the sandbox.
    assert cgroups.ensured and cgroups.ensured[0] == (pod["metadata"]["uid"], 0)

    (i1,) = fake_containers(fake, pod, "i1")
    (i2,) = fake_containers(fake, pod, "i2")
    (app,) = fake_containers(fake, pod, "app")
    (side,) = fake_containers(fake, pod, "side")
    assert i2.created_at >= i1.finished_at > 0, "i2 was created before i1 completed"
    assert app.created_at >= i2.finished_at and side.created_at >= i2.finished_at
    (sandbox,) = fake_sandboxes(fake, pod)
    assert {c.sandbox_id for c in (i1, i2, app, side)} == {sandbox.id}

    status = agent.status(pod)
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"Initialized": "True", "Ready": "True", "ContainersReady": "True", "PodScheduled": "True"}
    assert status["podIP"] == sandbox.ip and status["hostIP"] == "192.168.1.5"
    for name in ("i1", "i2"):
        s = agent.container_status(pod, name, init=True)
        assert s["state"]["terminated"]["reason"] == "Completed" and s["ready"] is True
    assert agent.container_status(pod, "app")["containerID"] == f"containerd://{app.id}"
    reasons = [e.reason for e in agent.events.for_object(pod["metadata"]["uid"])]
    assert reasons.count("Started") == 4 and reasons.count("Created") == 4


# --- crash loops and terminal phases --------------------------------------------------------------


async def test_crashing_container_restarts_with_growing_backoff(fake, make_agent):
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=1), container="app")
    starts = record_starts(fake)
    backoff = Backoff(0.3, 2.0)
    agent = make_agent(backoff=backoff)
    pod = make_pod("crash", [container("app")])
    agent.start()
    agent.push(pod)

    await until(lambda: len(starts) >= 4, "four starts of the crashing container", timeout=8)
    times = [t for t, name, attempt in starts]
    assert [attempt for _, _, attempt in starts[:4]] == [0, 1, 2, 3]
    # The first restart is immediate; then each waits for the doubled back-off after the exit.
    assert times[2] - times[1] >= 0.3 + 0.05 - 0.02
    assert times[3] - times[2] >= 0.6 + 0.05 - 0.02
    key = (pod["metadata"]["uid"], "app")
    assert backoff.delay(key) >= 1.2

    looping = [
        s
        for s in agent.reported(pod)
        if s["containerStatuses"][0]["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
    ]
    assert looping, "no status showed CrashLoopBackOff"
    cs = looping[-1]["containerStatuses"][0]
    assert "back-off" in cs["state"]["waiting"]["message"]
    assert "restarting failed container=app" in cs["state"]["waiting"]["message"]
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert cs["restartCount"] >= 1 and cs["ready"] is False
    assert looping[-1]["phase"] == "Running"
    backoffs = [e for e in agent.events.for_object(pod["metadata"]["uid"]) if e.reason == "BackOff"]
    assert backoffs and backoffs[0].type == "Warning"
    assert backoffs[0].message.startswith("Back-off restarting failed container app in pod crash_")
    # Old instances are pruned: at most the running/latest one and one dead one.
    await until(lambda: len(fake_containers(fake, pod, "app")) <= 2, "old instances to be pruned")


async def test_never_leaves_a_failed_container_terminated(fake, make_agent):
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=3), container="app")
    agent = make_agent()
    pod = make_pod("once", [container("app")], policy="Never")
    agent.start()
    agent.push(pod)

    await until(lambda: agent.status(pod).get("phase") == "Failed", "phase Failed")
    term = agent.container_status(pod, "app")["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["finishedAt"] and term["startedAt"]
    # The finished pod's sandbox is stopped (not removed) and nothing starts again.
    await until(
        lambda: fake_sandboxes(fake, pod)[0].state == pb.SANDBOX_NOTREADY, "the sandbox of the failed pod to stop"
    )
    await asyncio.sleep(0.3)
    assert len(calls(fake, "CreateContainer")) == 1
    assert len(calls(fake, "RunPodSandbox")) == 1
    assert agent.status(pod)["phase"] == "Failed"
    assert agent.status(pod)["podIP"], "the pod IP is kept after the sandbox stopped"


async def test_onfailure_exit_zero_succeeds(fake, make_agent):
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=0), container="job")
    agent = make_agent()
    pod = make_pod("job", [container("job")], policy="OnFailure")
    agent.start()
    agent.push(pod)

    await until(lambda: agent.status(pod).get("phase") == "Succeeded", "phase Succeeded")
    term = agent.container_status(pod, "job")["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    ready = {c["type"]: c for c in agent.status(pod)["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"
    await until(
        lambda: fake_sandboxes(fake, pod)[0].state == pb.SANDBOX_NOTREADY, "the sandbox of the completed pod to stop"
    )
    await asyncio.sleep(0.3)
    assert len(calls(fake, "CreateContainer")) == 1


@pytest.mark.parametrize("keep", [False, True])
async def test_a_finished_pods_volumes_go_unless_kept(fake, make_agent, ctx, keep):
    """Upstream unmounts the volumes of a finished pod; --keep-terminated-pod-volumes keeps them."""
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=0), container="job")
    agent = make_agent(keep_terminated_pod_volumes=keep)
    pod = make_pod("vols", [container("job")], policy="Never")
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    volumes = os.path.join(ctx.pod_dir(pod["metadata"]["uid"]), "volumes")
    agent.start()
    agent.push(pod)
    await until(lambda: os.path.isdir(volumes), "the pod's volumes")
    await until(lambda: agent.status(pod).get("phase") == "Succeeded", "phase Succeeded")
    await until(
        lambda: fake_sandboxes(fake, pod)[0].state == pb.SANDBOX_NOTREADY, "the sandbox of the completed pod to stop"
    )
    if keep:
        await asyncio.sleep(0.3)
        assert os.path.isdir(volumes)
    else:
        await until(lambda: not os.path.exists(volumes), "the finished pod's volumes to go")
    assert os.path.isdir(ctx.pod_dir(pod["metadata"]["uid"])), "the pod's directory stays until deletion"


async def test_failed_init_container_with_never_fails_the_pod_before_apps(fake, make_agent):
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=2), container="setup")
    agent = make_agent()
    pod = make_pod("init-fail", [container("app")], init=[container("setup")], policy="Never")
    agent.start()
    agent.push(pod)

    await until(lambda: agent.status(pod).get("phase") == "Failed", "phase Failed")
    assert agent.container_status(pod, "setup", init=True)["state"]["terminated"]["exitCode"] == 2
    app = agent.container_status(pod, "app")
    assert app["state"]["waiting"]["reason"] == "PodInitializing"
    await asyncio.sleep(0.3)
    assert [r.config.metadata.name for r in calls(fake, "CreateContainer")] == ["setup"]


async def test_dead_sandbox_is_recreated_with_its_containers(fake, make_agent):
    agent = make_agent()
    pod = make_pod("phoenix", [container("app")])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "the app container to run")
    (first,) = fake_sandboxes(fake, pod)
    fake.kill_sandbox(first.id)  # the pause process died; the app still "runs"

    await until(
        lambda: (
            len(fake_sandboxes(fake, pod)) == 2
            and running(fake, pod, "app")
            and running(fake, pod, "app")[0].sandbox_id != first.id
        ),
        "a new sandbox with the app running in it",
    )
    new = fake_sandboxes(fake, pod)[-1]
    assert new.metadata.attempt == 1
    old_app = [c for c in fake_containers(fake, pod, "app") if c.sandbox_id == first.id]
    assert all(c.state == pb.CONTAINER_EXITED for c in old_app)
    reasons = [e.reason for e in agent.events.for_object(pod["metadata"]["uid"])]
    assert "SandboxChanged" in reasons


async def test_changed_spec_restarts_the_container(fake, make_agent):
    agent = make_agent()
    pod = make_pod("upd", [container("app"), container("keep")])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app") and running(fake, pod, "keep"), "both running")
    (app_before,) = running(fake, pod, "app")
    (keep_before,) = running(fake, pod, "keep")

    changed = make_pod("upd", [container("app", command=["sleep", "7200"]), container("keep")])
    agent.push(changed)
    await until(
        lambda: running(fake, pod, "app") and running(fake, pod, "app")[0].id != app_before.id,
        "the changed container to be replaced",
    )
    assert list(running(fake, pod, "app")[0].config.command) == ["sleep", "7200"]
    assert running(fake, pod, "app")[0].config.metadata.attempt == 1
    assert running(fake, pod, "keep")[0].id == keep_before.id, "an unchanged container was restarted"
    assert len(calls(fake, "RunPodSandbox")) == 1


async def test_liveness_failure_restarts_the_container(fake, make_agent):
    sick: set[str] = set()  # container IDs whose liveness check fails
    fake.on_exec(["check"], lambda c, cmd: ExecResult(exit_code=1 if c.id in sick else 0))
    agent = make_agent(probes=True)
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": 1}
    pod = make_pod("live", [container("app", livenessProbe=probe)])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "the app to run")
    await until(lambda: calls(fake, "ExecSync"), "the liveness probe to run")
    (first,) = running(fake, pod, "app")
    sick.add(first.id)

    await until(
        lambda: running(fake, pod, "app") and running(fake, pod, "app")[0].id != first.id,
        "a new app container after the liveness failure",
    )
    assert fake.containers[first.id].state == pb.CONTAINER_EXITED
    await until(lambda: agent.container_status(pod, "app").get("restartCount") == 1, "restartCount 1")
    reasons = [e.reason for e in agent.events.for_object(pod["metadata"]["uid"])]
    assert "Killing" in reasons


# --- termination -----------------------------------------------------------------------------------


async def test_removed_pod_runs_prestop_then_stops_and_removes_everything(fake, make_agent, ctx):
    hooks: list[tuple[float, str, list[str]]] = []

    def pre_stop(c, cmd):
        hooks.append((time.monotonic(), c.id, list(cmd)))
        return ExecResult(exit_code=0)

    fake.on_exec(["/bin/sh", "-c", "echo bye"], pre_stop)
    cgroups = FakeCgroups(runtime=fake)
    agent = make_agent(cgroups=cgroups)
    lifecycle = {"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo bye"]}}}
    pod = make_pod("gone", [container("app", lifecycle=lifecycle), container("plain")], grace=5)
    other = make_pod("stays", [container("app")])
    agent.start()
    agent.push(pod, other)
    await until(
        lambda: running(fake, pod, "app") and running(fake, pod, "plain") and running(fake, other, "app"),
        "both pods to run",
    )
    (app,) = running(fake, pod, "app")
    uid = pod["metadata"]["uid"]
    log_dir = Path(ctx.pod_log_dir("default", "gone", uid))
    assert log_dir.is_dir()

    agent.push(other)  # the file source no longer lists "gone"
    await until(
        lambda: not fake_sandboxes(fake, pod) and uid not in agent.pipeline.pods, "the pod's sandbox to be removed"
    )
    assert not fake_containers(fake, pod)
    assert [(cid, cmd) for _, cid, cmd in hooks] == [(app.id, ["/bin/sh", "-c", "echo bye"])]
    order = [
        (m, getattr(r, "container_id", "") or getattr(r, "pod_sandbox_id", ""))
        for m, r in fake.calls
        if m in ("ExecSync", "StopContainer", "StopPodSandbox", "RemovePodSandbox")
    ]
    assert order.index(("ExecSync", app.id)) < order.index(("StopContainer", app.id))
    stop_requests = [r for r in calls(fake, "StopContainer") if r.container_id == app.id]
    assert stop_requests and 2 <= stop_requests[0].timeout <= 5
    assert agent.terminated == [uid]
    assert uid in cgroups.removed
    assert not log_dir.exists()
    assert not Path(ctx.pod_dir(uid)).exists()
    # The other pod is untouched.
    assert running(fake, other, "app") and len(fake_sandboxes(fake, other)) == 1


# --- a restarted agent ----------------------------------------------------------------------------


async def test_restarted_agent_adopts_running_containers(fake, make_agent):
    first = make_agent()
    pod = make_pod("adopt", [container("a"), container("b")], init=[container("init")])
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=0), container="init")
    first.start()
    first.push(pod)
    await until(
        lambda: first.status(pod).get("phase") == "Running" and running(fake, pod, "a") and running(fake, pod, "b"),
        "the pod to run",
    )
    await first.stop()
    ids = {c.name: c.id for c in fake_containers(fake, pod)}
    sandbox_ids = [s.id for s in fake_sandboxes(fake, pod)]
    counts = dict(fake.call_counts)

    # A new agent process: the file source is read before the sync loop runs.
    second = make_agent()
    second.push(pod)
    second.start()
    await until(lambda: second.status(pod).get("phase") == "Running", "the adopted pod's status")
    await until(
        lambda: fake.call_counts["ListPodSandbox"] >= counts["ListPodSandbox"] + 8,
        "several relists and housekeeping rounds",
    )

    assert {c.name: c.id for c in fake_containers(fake, pod)} == ids
    assert [s.id for s in fake_sandboxes(fake, pod)] == sandbox_ids
    assert all(c.state == pb.CONTAINER_RUNNING for c in fake_containers(fake, pod) if c.name != "init")
    for method in (
        "CreateContainer",
        "StartContainer",
        "RunPodSandbox",
        "StopContainer",
        "StopPodSandbox",
        "RemoveContainer",
    ):
        assert fake.call_counts[method] == counts.get(method, 0), f"{method} called after restart"
    assert second.container_status(pod, "a")["containerID"] == f"containerd://{ids['a']}"
    assert second.container_status(pod, "init", init=True)["state"]["terminated"]["exitCode"] == 0


async def test_restarted_agent_does_not_rerun_a_completed_pod(fake, make_agent):
    fake.set_behavior(ContainerBehavior(exit_after=0.05, exit_code=0), container="job")
    first = make_agent()
    pod = make_pod("done", [container("job")], policy="OnFailure")
    first.start()
    first.push(pod)
    await until(lambda: first.status(pod).get("phase") == "Succeeded", "phase Succeeded")
    await until(lambda: fake_sandboxes(fake, pod)[0].state == pb.SANDBOX_NOTREADY, "sandbox stopped")
    await first.stop()
    counts = dict(fake.call_counts)

    second = make_agent()
    second.push(pod)
    second.start()
    await until(lambda: second.status(pod).get("phase") == "Succeeded", "the completed pod's status")
    await asyncio.sleep(0.3)
    assert fake.call_counts["RunPodSandbox"] == counts["RunPodSandbox"]
    assert fake.call_counts["CreateContainer"] == counts["CreateContainer"]


async def test_housekeeping_removes_orphans_but_never_unmanaged_containers(fake, make_agent):
    hooks: list[str] = []
    fake.on_exec(["/bin/sh", "-c", "drain"], lambda c, cmd: (hooks.append(c.id), ExecResult())[1])
    first = make_agent()
    lifecycle = {"preStop": {"exec": {"command": ["/bin/sh", "-c", "drain"]}}}
    orphan = make_pod("orphan", [container("app", lifecycle=lifecycle)], grace=3)
    first.start()
    first.push(orphan)
    await until(lambda: running(fake, orphan, "app"), "the soon-orphaned pod to run")
    await first.stop()
    (app,) = running(fake, orphan, "app")

    # Something else on the node: our pod labels, but not the managed label.
    async with CriClient(fake.endpoint, request_timeout=5) as cri:
        labels = {
            names.CRI_LABEL_POD_UID: "foreign-uid",
            names.CRI_LABEL_POD_NAME: "foreign",
            names.CRI_LABEL_POD_NAMESPACE: "default",
        }
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="foreign", uid="foreign-uid", namespace="default"), labels=labels
        )
        foreign_sandbox = await cri.run_pod_sandbox(config)
        cconfig = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image=IMAGE), labels=labels
        )
        foreign_container = await cri.create_container(foreign_sandbox, cconfig, config)
        await cri.start_container(foreign_container)

    second = make_agent(sources=("file",))
    second.start()
    # Until the file source has been seen, nothing is an orphan.
    await until(lambda: second.pipeline._last_relist, "the first relist")
    await asyncio.sleep(0.4)
    assert fake.containers[app.id].state == pb.CONTAINER_RUNNING

    second.push()  # the file source: no pods
    await until(lambda: not fake_sandboxes(fake, orphan), "the orphan's sandbox to be removed")
    assert app.id not in fake.containers
    assert hooks == [app.id], "the orphan's recorded preStop hook did not run"
    await asyncio.sleep(0.3)
    assert fake.sandboxes[foreign_sandbox].state == pb.SANDBOX_READY
    assert fake.containers[foreign_container].state == pb.CONTAINER_RUNNING
    stopped = {r.container_id for r in calls(fake, "StopContainer")} | {
        r.container_id for r in calls(fake, "RemoveContainer")
    }
    assert foreign_container not in stopped
    assert foreign_sandbox not in {r.pod_sandbox_id for r in calls(fake, "StopPodSandbox")}


# --- the runtime read once per relist period ---------------------------------------------------


async def test_idle_pods_cost_relists_only_and_a_change_is_read_again(fake, make_agent):
    """Periodic resyncs reuse the pod's runtime view while the relist shows it unchanged,
    housekeeping takes the runtime's pods from the relist, and the QoS tiers are rewritten
    only when the set of pods changes; a container exit is read and acted on."""
    cgroups = FakeCgroups(runtime=fake)
    agent = make_agent(cgroups=cgroups)
    relists = 0
    relist = agent.runtime.relist

    async def counted():
        nonlocal relists
        relists += 1
        return await relist()

    agent.runtime.relist = counted  # type: ignore[method-assign]
    pod = make_pod("idle", [container("app")])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "the container to run")
    await until(lambda: agent.status(pod).get("containerStatuses", [{}])[0].get("ready"), "the ready status")
    await asyncio.sleep(0.3)  # the wake-ups of the start are over
    state = agent.pipeline.pods[pod["metadata"]["uid"]]
    before = dict(fake.call_counts)
    syncs, relists_before, qos = state.syncs, relists, cgroups.qos_updates

    await asyncio.sleep(1.3)  # sync_frequency is 1 s here: a periodic resync at least
    assert state.syncs > syncs
    delta = {m: n - before.get(m, 0) for m, n in fake.call_counts.items() if n != before.get(m, 0)}
    listed = relists - relists_before
    assert set(delta) <= {"ListPodSandbox", "ListContainers"}, delta
    assert abs(delta.get("ListPodSandbox", 0) - listed) <= 1, (delta, listed)
    assert cgroups.qos_updates == qos, "the QoS tiers were rewritten with the same pods"

    (app,) = running(fake, pod, "app")
    fake.exit_container(app.id, exit_code=3)
    await until(lambda: running(fake, pod, "app"), "the restarted container")
    await until(
        lambda: (
            agent.container_status(pod, "app").get("restartCount") == 1
            and agent.container_status(pod, "app")["lastState"]["terminated"]["exitCode"] == 3
        ),
        "the restart in the status",
    )

    agent.push()  # the pod goes: the tiers are sized for no pods
    await until(lambda: not fake_sandboxes(fake, pod), "the pod to be removed")
    await until(lambda: cgroups.qos_updates > qos, "the QoS tiers to be rewritten")


async def test_runtime_view_reads_statuses_only_for_what_changed(fake, make_agent):
    """ContainerStatus is asked again only when the lists show a container in a new state,
    PodSandboxStatus once per sandbox; both are forgotten with what the relist no longer shows."""
    agent = make_agent()
    pod = make_pod("view", [container("app")])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "the container to run")
    uid = pod["metadata"]["uid"]
    runtime = agent.runtime
    await runtime.runtime_pod(uid)
    before = dict(fake.call_counts)
    rp = await runtime.runtime_pod(uid)
    assert rp.sandboxes[0].ip and rp.latest("app").running
    assert fake.call_counts["ContainerStatus"] == before["ContainerStatus"]
    assert fake.call_counts["PodSandboxStatus"] == before["PodSandboxStatus"]

    (app,) = running(fake, pod, "app")
    assert agent.task is not None
    agent.task.cancel()  # the pipeline stops: nothing restarts the container now
    await asyncio.gather(agent.task, return_exceptions=True)
    fake.exit_container(app.id, exit_code=2)
    rp = await runtime.runtime_pod(uid)
    assert rp.latest("app").state == "exited" and rp.latest("app").exit_code == 2
    assert fake.call_counts["ContainerStatus"] == before["ContainerStatus"] + 1
    assert fake.call_counts["PodSandboxStatus"] == before["PodSandboxStatus"]

    await runtime.kill_pod(pod, rp, grace=0)
    await runtime.remove_pod(await runtime.runtime_pod(uid))
    await runtime.relist()
    assert app.id not in runtime._status_cache and not runtime._sandbox_ips


# --- admission and runtime trouble ----------------------------------------------------------------


async def test_refused_pod_is_failed_with_the_reason_and_gets_no_sandbox(fake, make_agent):
    message = "Node didn't have enough resource: cpu, requested: 8000, used: 0, capacity: 4000"
    cgroups = FakeCgroups(runtime=fake, refuse={"big": AdmitResult(False, "OutOfcpu", message)})
    agent = make_agent(cgroups=cgroups)
    big = make_pod("big", [container("app")])
    small = make_pod("small", [container("app")])
    agent.start()
    agent.push(big, small)

    await until(lambda: running(fake, small, "app"), "the admitted pod to run")
    status = agent.status(big)
    assert status["phase"] == "Failed"
    assert status["reason"] == "OutOfcpu" and status["message"] == names.POD_REJECTED_MESSAGE_PREFIX + message
    assert agent.reported(big) and agent.reported(big)[-1]["reason"] == "OutOfcpu"
    await asyncio.sleep(0.2)
    assert not fake_sandboxes(fake, big)
    assert all(r.config.metadata.name == "small" for r in calls(fake, "RunPodSandbox"))
    assert cgroups.admitted == ["small"]
    events = agent.events.for_object(big["metadata"]["uid"])
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "OutOfcpu", message)]

    # Removing the refused pod forgets it without touching the runtime.
    agent.push(small)
    await until(lambda: big["metadata"]["uid"] not in agent.pipeline.pods, "the refused pod to go")
    assert big["metadata"]["uid"] in agent.terminated


async def test_pipeline_carries_on_after_a_runtime_restart(fake, make_agent):
    agent = make_agent()
    pod = make_pod("survivor", [container("app")])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "the app to run")
    await until(lambda: agent.pipeline.runtime_ready, "the runtime to be ready")
    (before,) = running(fake, pod, "app")

    await fake.down()
    await until(lambda: not agent.pipeline.runtime_ready, "the pipeline to notice the runtime is down")
    fake.exit_container(before.id, 1)  # crashes while nobody can see it
    await asyncio.sleep(0.2)
    await fake.up()

    await until(lambda: agent.pipeline.runtime_ready, "the runtime to be ready again")
    await until(
        lambda: running(fake, pod, "app") and running(fake, pod, "app")[0].id != before.id,
        "the crashed container to be restarted after the runtime came back",
    )
    late = make_pod("late", [container("app")])
    agent.push(pod, late)
    await until(lambda: running(fake, late, "app"), "a pod added after the restart to run")
    assert not agent.task.done()


async def test_failed_sandbox_creation_is_reported_and_retried(fake, make_agent):
    fake.fail_next("RunPodSandbox", details="failed to setup network for sandbox: cni boom")
    agent = make_agent()
    pod = make_pod("netfail", [container("app")])
    agent.start()
    agent.push(pod)

    await until(lambda: agent.status(pod).get("phase") == "Running", "the pod to run after the retry")
    assert len(calls(fake, "RunPodSandbox")) == 2
    failed = [s for s in agent.reported(pod) if s.get("reason") == "FailedCreatePodSandBox"]
    assert failed and "cni boom" in failed[0]["message"] and failed[0]["phase"] == "Pending"
    assert failed[0]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    assert "reason" not in agent.status(pod), "the sandbox error outlived the sandbox"
    events = agent.events.for_object(pod["metadata"]["uid"])
    assert any(e.reason == "FailedCreatePodSandBox" and "cni boom" in e.message for e in events)


async def test_image_pull_failure_waits_then_runs_once_pullable(fake, make_agent):
    image = "registry.test/app:2"
    agent = make_agent()
    agent.runtime.images.backoff = Backoff(0.1, 0.5)
    pod = make_pod("pull", [{"name": "app", "image": image}])
    agent.start()
    agent.push(pod)

    await until(
        lambda: (
            agent.container_status(pod, "app").get("state", {}).get("waiting", {}).get("reason")
            in ("ErrImagePull", "ImagePullBackOff")
        ),
        "an image pull error",
    )
    waiting = agent.container_status(pod, "app")["state"]["waiting"]
    assert image in waiting["message"]
    assert agent.status(pod)["phase"] == "Pending"
    assert not calls(fake, "CreateContainer")

    fake.allow_pull(image)
    await until(lambda: running(fake, pod, "app"), "the container to run once the image pulls", timeout=6)
    await until(
        lambda: agent.container_status(pod, "app").get("state", {}).get("running"), "the running state in the status"
    )
    assert agent.container_status(pod, "app")["imageID"].startswith("registry.test/app@sha256:")


# --- service environment variables ----------------------------------------------------------------


def _service(name: str, namespace: str, ip: str, ports: list[dict]) -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterIP": ip, "ports": ports}}


async def test_containers_get_service_variables_once_services_are_listed(fake, make_agent):
    agent = make_agent(sources=("api",))
    services = ServiceCache(None)  # type: ignore[arg-type]  # fed by hand below, never run
    agent.runtime.service_env = services.env_for
    c = container(
        "app",
        env=[
            {"name": "WEB_SERVICE_PORT", "value": "override"},
            {"name": "ORCH_URL", "value": "https://$(ORCH_SERVICE_HOST):$(ORCH_SERVICE_PORT)"},
        ],
    )
    pod = make_pod("svc-env", [c], namespace="shop")
    agent.start()
    agent.push(pod, source="api")
    # Never listed yet: the container waits, with upstream's reason.
    await until(
        lambda: agent.container_status(pod, "app").get("state", {}).get("waiting", {}).get("message") == NOT_SYNCED,
        "the container to wait for the services",
    )
    assert fake_containers(fake, pod, "app") == []

    for svc in (
        _service("orch", "default", "10.96.0.1", [{"name": "https", "port": 443, "protocol": "TCP"}]),
        _service("web", "shop", "10.96.0.20", [{"name": "http-alt", "port": 8080, "protocol": "TCP"}]),
        _service("headless", "shop", "None", [{"port": 80}]),
        _service("elsewhere", "other", "10.96.0.30", [{"port": 80}]),
    ):
        services.informer.cache[f"{svc['metadata']['namespace']}/{svc['metadata']['name']}"] = svc
    services.informer._synced.set()
    agent.pipeline.wake(pod["metadata"]["uid"])
    await until(lambda: running(fake, pod, "app"), "the container to run", timeout=15)
    (app,) = running(fake, pod, "app")
    env = {kv.key: kv.value for kv in app.config.envs}
    assert env["ORCH_SERVICE_HOST"] == "10.96.0.1" and env["ORCH_SERVICE_PORT_HTTPS"] == "443"
    assert env["ORCH_URL"] == "https://10.96.0.1:443"
    assert env["WEB_SERVICE_HOST"] == "10.96.0.20"
    assert env["WEB_SERVICE_PORT"] == "override"  # the container's own variable wins
    assert env["WEB_SERVICE_PORT_HTTP_ALT"] == "8080"
    assert env["WEB_PORT_8080_TCP_ADDR"] == "10.96.0.20"
    assert not any(k.startswith(("HEADLESS_", "ELSEWHERE_")) for k in env)


# --- the node stops a pod (graceful shutdown, eviction) ---------------------------------------------


async def test_killed_pod_stops_gets_its_final_status_and_is_not_restarted(fake, make_agent):
    agent = make_agent()
    pod = make_pod("victim", [container("app")], grace=7)
    other = make_pod("other", [container("app")])
    agent.start()
    agent.push(pod, other)
    await until(lambda: running(fake, pod, "app") and running(fake, other, "app"), "both pods to run")
    assert sorted(p["metadata"]["name"] for p in agent.pipeline.active_pods()) == ["other", "victim"]

    def final(status: dict) -> None:
        status.update(phase="Failed", reason="Terminated", message="stopped by the node")

    done = agent.pipeline.kill_pod(pod["metadata"]["uid"], grace=2, update_status=final, reason="test")
    assert done is not None
    await asyncio.wait_for(done, 5)
    stop = [r for r in calls(fake, "StopContainer") if r.container_id == fake_containers(fake, pod, "app")[0].id]
    assert stop and stop[0].timeout == 2
    status = agent.status(pod)
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "Terminated", "stopped by the node")
    assert status["containerStatuses"][0]["state"].get("terminated"), status
    assert agent.reported(pod)[-1]["reason"] == "Terminated"
    assert [p["metadata"]["name"] for p in agent.pipeline.active_pods()] == ["other"]
    assert agent.pipeline.kill_pod(pod["metadata"]["uid"], grace=2, update_status=final, reason="test") is None
    # Resyncs leave it stopped (restartPolicy Always notwithstanding); the other pod runs on.
    await asyncio.sleep(0.5)
    assert not running(fake, pod, "app") and len(fake_containers(fake, pod, "app")) == 1
    assert agent.status(pod)["phase"] == "Failed" and running(fake, other, "app")
    # Admission handlers refuse new pods with their reason.
    agent.pipeline.admit_handlers.append(lambda p: ("NodeShutdown", "Pod was rejected as the node is shutting down."))
    late = make_pod("late", [container("app")])
    agent.push(pod, other, late)
    await until(lambda: agent.status(late).get("reason") == "NodeShutdown", "the late pod to be refused")
    assert not fake_sandboxes(fake, late)
    # Removing the stopped pod removes its remains.
    agent.push(other)
    await until(lambda: not fake_sandboxes(fake, pod), "the stopped pod's sandbox to be removed")


async def test_a_pod_stopped_for_a_shutdown_stays_stopped_after_an_agent_restart(fake, make_agent):
    first = make_agent()
    stopped = make_pod("stopped", [container("app")], grace=1)
    caught = make_pod("caught", [container("app")], grace=1)  # the agent died before stopping it
    first.start()
    first.push(stopped, caught)
    await until(lambda: running(fake, stopped, "app") and running(fake, caught, "app"), "both pods to run")
    mark = functools.partial(mark_terminated, disruption_condition=True)
    await asyncio.wait_for(
        first.pipeline.kill_pod(stopped["metadata"]["uid"], grace=1, update_status=mark, reason="t"), 5
    )
    await first.stop()
    # What the API server holds: both Failed / Terminated (restartPolicy Always); the runtime
    # still has the stopped pod's sandbox and the other pod running.
    stopped = dict(stopped, status=first.status(stopped))
    caught_status: dict = {"phase": "Running"}
    mark_terminated(caught_status, disruption_condition=True)
    caught = dict(caught, status=caught_status)
    assert fake_sandboxes(fake, stopped) and running(fake, caught, "app")
    counts = dict(fake.call_counts)

    second = make_agent()
    second.push(stopped, caught)
    second.start()
    await until(lambda: not running(fake, caught, "app"), "the leftover container to be stopped")
    await until(lambda: second.reported(stopped) and second.reported(caught), "both statuses reported")
    await asyncio.sleep(0.3)
    for method in ("RunPodSandbox", "CreateContainer", "StartContainer"):
        assert fake.call_counts[method] == counts.get(method, 0), f"{method} called after the restart"
    for p in (stopped, caught):
        status = second.status(p)
        assert (status["phase"], status["reason"], status["message"]) == (
            "Failed",
            names.SHUTDOWN_POD_REASON,
            names.SHUTDOWN_POD_MESSAGE,
        ), status
        assert any(c["type"] == names.POD_CONDITION_DISRUPTION_TARGET for c in status["conditions"])
        assert "terminated" in status["containerStatuses"][0]["state"]
    assert second.pipeline.active_pods() == []
