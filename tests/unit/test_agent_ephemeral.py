"""Ephemeral containers in the node agent: when they start (once, in the running sandbox),
the process namespace they join, the statuses they get; and the whole pipeline against
the fake runtime (a running pod gains one without anything else restarting)."""

from __future__ import annotations

import asyncio

from agent.runtime.container import build_container_config
from agent.runtime.manager import RuntimePod, compute_pod_actions
from agent.status.podstatus import ephemeral_ran, generate_pod_status
from cri import api_pb2 as pb
from cri.fake import ContainerBehavior
from tests.unit.test_agent_workers import (  # noqa: F401 - fixtures, used by name
    container,
    ctx,
    fake,
    fake_containers,
    fake_sandboxes,
    fast_periods,
    info,
    make_agent,
    make_pod,
    names_of,
    running,
    runtime_pod,
    sandbox_info,
    until,
)


def with_ephemeral(pod: dict, *containers: dict) -> dict:
    pod["spec"]["ephemeralContainers"] = list(containers)
    return pod


def debugger(name: str = "dbg", **extra) -> dict:
    return {"name": name, "image": "orch.local/busybox:1", "command": ["sh"], "stdin": True, "tty": True, **extra}


# --- compute_pod_actions -------------------------------------------------------------------------


def test_started_once_in_the_ready_sandbox_and_never_again():
    app = container("app")
    pod = with_ephemeral(make_pod("p", [app]), debugger())
    sb = [sandbox_info()]
    actions = compute_pod_actions(pod, runtime_pod(sb, [info(app, "running")]))
    assert names_of(actions.start_ephemeral) == ["dbg"] and actions.start == [] and not actions.kill
    assert not actions.idle

    for state, code in (("running", 0), ("exited", 0), ("exited", 1)):
        rp = runtime_pod(sb, [info(app, "running"), info(debugger(), state, exit_code=code)])
        assert compute_pod_actions(pod, rp).idle, state
    # Gone from the runtime (garbage-collected) but reported before: still not again.
    assert compute_pod_actions(pod, runtime_pod(sb, [info(app, "running")]), ephemeral_ran={"dbg"}).idle


def test_not_before_the_sandbox_and_not_in_a_new_one():
    app = container("app")
    pod = with_ephemeral(make_pod("p", [app]), debugger())
    fresh = compute_pod_actions(pod, RuntimePod("uid-p"))
    assert fresh.create_sandbox and fresh.start_ephemeral == []
    dead = compute_pod_actions(
        pod, runtime_pod([sandbox_info(ready=False)], [info(app, "exited"), info(debugger(), "exited")])
    )
    assert dead.create_sandbox and names_of(dead.start) == ["app"] and dead.start_ephemeral == []


def test_started_while_init_containers_still_run():
    init, app = container("i1"), container("app")
    pod = with_ephemeral(make_pod("p", [app], init=[init]), debugger())
    actions = compute_pod_actions(pod, runtime_pod([sandbox_info()], [info(init, "running")]))
    assert names_of(actions.start_ephemeral) == ["dbg"] and actions.next_init is None


# --- the container config ------------------------------------------------------------------------


def test_target_joins_the_targets_process_namespace(ctx):  # noqa: F811 - the fixture
    pod = with_ephemeral(make_pod("p", [container("app")]), debugger(targetContainerName="app"))
    eph = pod["spec"]["ephemeralContainers"][0]
    common = dict(restart_count=0, pod_ip="10.0.0.9", volume_paths={})
    ns = build_container_config(pod, eph, ctx, target_id="cid-app", **common).config.linux.security_context
    assert (ns.namespace_options.pid, ns.namespace_options.target_id) == (pb.TARGET, "cid-app")
    config = build_container_config(pod, eph, ctx, target_id="cid-app", **common).config
    assert config.stdin and config.tty and not config.stdin_once

    plain = build_container_config(pod, eph, ctx, **common).config.linux.security_context.namespace_options
    assert (plain.pid, plain.target_id) == (pb.CONTAINER, "")
    # A pod that shares one process namespace keeps it: the target's processes are there already.
    pod["spec"]["shareProcessNamespace"] = True
    shared = build_container_config(pod, eph, ctx, target_id="cid-app", **common).config
    assert shared.linux.security_context.namespace_options.pid == pb.POD


# --- statuses ------------------------------------------------------------------------------------


def test_statuses_are_their_own_and_change_neither_phase_nor_readiness():
    app = container("app")
    pod = with_ephemeral(make_pod("p", [app]), debugger(), debugger("later"))
    rp = runtime_pod([sandbox_info()], [info(app, "running"), info(debugger(), "exited", exit_code=2, created=2)])
    status = generate_pod_status(pod, rp, now="2026-01-01T00:00:00Z")
    assert status["phase"] == "Running"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    dbg, later = status["ephemeralContainerStatuses"]
    assert dbg["name"] == "dbg" and dbg["state"]["terminated"]["exitCode"] == 2
    assert dbg["ready"] is False and "started" not in dbg and dbg["containerID"] == "containerd://dbg-0"
    assert later["state"] == {"waiting": {"reason": "ContainerCreating"}} and "containerID" not in later
    assert ephemeral_ran(status) == {"dbg"}
    assert "ephemeralContainerStatuses" not in generate_pod_status(make_pod("q", [app]), rp)


# --- the pipeline --------------------------------------------------------------------------------


async def test_a_running_pod_gains_one_without_restarting_anything(fake, make_agent):  # noqa: F811 - fixtures
    agent = make_agent()
    pod = make_pod("dbg", [container("app")])
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "app running")
    (app,) = running(fake, pod, "app")
    fake.set_behavior(ContainerBehavior(exit_after=0.2, exit_code=0), container="dbg")

    agent.push(with_ephemeral(make_pod("dbg", [container("app")]), debugger(targetContainerName="app")))
    (dbg,) = await until(lambda: fake_containers(fake, pod, "dbg"), "the ephemeral container")
    options = dbg.config.linux.security_context.namespace_options
    assert (options.pid, options.target_id) == (pb.TARGET, app.id)
    assert dbg.sandbox_id == app.sandbox_id and len(fake_sandboxes(fake, pod)) == 1
    await until(
        lambda: "terminated" in (agent.status(pod).get("ephemeralContainerStatuses") or [{}])[0].get("state", {}),
        "the ephemeral container reported terminated",
    )
    # It ran once (a few more relists and syncs change nothing); the pod and its app
    # container carried on untouched.
    await asyncio.sleep(0.3)
    assert len(fake_containers(fake, pod, "dbg")) == 1
    assert running(fake, pod, "app")[0].id == app.id
    assert agent.status(pod)["phase"] == "Running"


async def test_a_missing_target_is_a_config_error_not_a_crash(fake, make_agent):  # noqa: F811 - fixtures
    agent = make_agent()
    pod = with_ephemeral(make_pod("nt", [container("app")]), debugger(targetContainerName="ghost"))
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "app running")

    def waiting() -> dict:
        return (agent.status(pod).get("ephemeralContainerStatuses") or [{}])[0].get("state", {}).get("waiting") or {}

    await until(lambda: waiting().get("reason") == "CreateContainerConfigError", "the config error reported")
    assert waiting()["message"] == "cannot find target container ghost"
    assert fake_containers(fake, pod, "dbg") == []
