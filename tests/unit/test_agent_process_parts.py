"""Pieces of the agent process: supervisor order and bounds, health responses, the swap
probe, sd_notify, test hooks and the log formats."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import tempfile

import pytest

from agent import logging as agent_logging
from agent.config import from_argv
from agent.process import (
    HealthChecks,
    Notifier,
    StartError,
    Supervisor,
    SyncLoopMonitor,
    TaskSpec,
    TestHooks,
    _health_response,
    check_swap,
    swap_devices,
)
from apiserver_min.api import names


async def test_supervisor_starts_in_order_and_stops_in_reverse():
    events = []

    def task(name):
        async def run():
            events.append(f"start {name}")
            try:
                await asyncio.Event().wait()
            finally:
                events.append(f"stop {name}")

        return TaskSpec(name, run)

    sup = Supervisor(stop_timeout=5)
    for n in ("a", "b", "c"):
        sup.add(task(n))
    with pytest.raises(ValueError, match="duplicate task name"):
        sup.add(task("a"))
    sup.start()
    await asyncio.sleep(0.01)
    assert await sup.stop() is True
    assert events == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]
    assert sup.stop_order == ["c", "b", "a"]


async def test_supervisor_stop_is_bounded():
    release = asyncio.Event()

    async def stubborn():
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue  # ignores cancellation until released

    sup = Supervisor(stop_timeout=0.2)
    sup.add(TaskSpec("stubborn", stubborn))
    sup.start()
    await asyncio.sleep(0.01)
    task = next(t for t in asyncio.all_tasks() if t.get_name() == "stubborn")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await sup.stop() is False
    assert loop.time() - t0 < 1.0
    release.set()
    task.cancel()
    await asyncio.wait({task}, timeout=2)
    assert task.done()


async def test_a_failing_critical_task_ends_the_supervision():
    async def boom():
        raise RuntimeError("kaput")

    async def quiet():
        return None

    sup = Supervisor()
    sup.add(TaskSpec("optional", quiet, critical=False))
    sup.add(TaskSpec("boom", boom))
    sup.start()
    await asyncio.wait_for(sup.ended.wait(), 2)
    assert sup.failure == "task boom failed: kaput"
    await sup.stop()


def test_health_responses():
    checks = HealthChecks()
    state = {"err": None}
    checks.add("syncloop", lambda: state["err"])
    assert _health_response(checks, "GET", "/healthz", "") == ("200 OK", "ok")
    assert _health_response(checks, "GET", "/healthz/", "verbose") == (
        "200 OK",
        "[+]ping ok\n[+]syncloop ok\nhealthz check passed\n",
    )
    state["err"] = "stalled"
    assert _health_response(checks, "GET", "/healthz", "") == (
        "500 Internal Server Error",
        "[+]ping ok\n[-]syncloop failed: stalled\nhealthz check failed\n",
    )
    assert _health_response(checks, "GET", "/healthz/ping", "") == ("200 OK", "ok")
    assert _health_response(checks, "GET", "/healthz/syncloop", "")[0] == "500 Internal Server Error"
    assert _health_response(checks, "GET", "/metrics", "")[0] == "404 Not Found"
    assert _health_response(checks, "POST", "/healthz", "")[0] == "405 Method Not Allowed"
    checks.add("broken", lambda: 1 / 0)
    assert "[-]broken failed: check raised ZeroDivisionError" in _health_response(checks, "GET", "/healthz", "")[1]


async def test_sync_loop_monitor():
    m = SyncLoopMonitor(threshold=0.05)
    assert m.check() is None  # healthy before the first iteration
    m.beat()
    assert m.check() is None and m.first.is_set()
    await asyncio.sleep(0.08)
    assert m.check().startswith("sync loop took longer than expected")


def test_swap_probe(tmp_path):
    swaps = tmp_path / "swaps"
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n")
    assert swap_devices(str(swaps)) == []
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n/dev/sda2  partition\t8388604\t0\t-2\n")
    assert swap_devices(str(swaps)) == ["/dev/sda2  partition\t8388604\t0\t-2"]
    assert swap_devices(str(tmp_path / "absent")) == []
    with pytest.raises(StartError, match=r"--fail-swap-on=false .* active swap: /dev/sda2 partition 8388604 0 -2"):
        check_swap(from_argv([]), lambda: swap_devices(str(swaps)))
    check_swap(from_argv(["--fail-swap-on=false"]), lambda: ["/dev/sda2"])


def test_notifier_sends_datagrams_and_cleans_the_environment():
    d = tempfile.mkdtemp(prefix="orch-n-", dir="/tmp")
    path = os.path.join(d, "s")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    try:
        env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid()), "X": "1"}
        n = Notifier(env)
        assert env == {"X": "1"}
        assert n.enabled and n.watchdog_usec == 200000
        assert n.notify("READY=1", "STATUS=Running (ünïcode)")
        assert server.recv(100).decode() == "READY=1\nSTATUS=Running (ünïcode)"
        n.close()
        # A watchdog meant for another process is not ours.
        assert Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1", "WATCHDOG_PID": "1"}).watchdog_usec == 0
        assert Notifier({}).notify("READY=1") is False
    finally:
        server.close()
        os.unlink(path)
        os.rmdir(d)


def test_notifier_abstract_socket():
    name = f"@orch-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0" + name[1:])
    try:
        n = Notifier({"NOTIFY_SOCKET": name})
        assert n.notify("STOPPING=1")
        assert server.recv(100) == b"STOPPING=1"
        n.close()
    finally:
        server.close()


def test_test_hooks_from_environ():
    h = TestHooks.from_environ({})
    assert h == TestHooks("/proc/swaps", "", None)
    h = TestHooks.from_environ(
        {
            names.ENV_AGENT_TEST_PROC_SWAPS: "/tmp/s",
            names.ENV_AGENT_TEST_STALL_FILE: "/tmp/stall",
            names.ENV_AGENT_TEST_SYNC_LOOP_THRESHOLD: "1.5s",
        }
    )
    assert h == TestHooks("/tmp/s", "/tmp/stall", 1.5)
    with pytest.raises(StartError, match=names.ENV_AGENT_TEST_SYNC_LOOP_THRESHOLD):
        TestHooks.from_environ({names.ENV_AGENT_TEST_SYNC_LOOP_THRESHOLD: "soon"})


# --- logging ------------------------------------------------------------------------------


@pytest.fixture
def streams():
    out, err = io.StringIO(), io.StringIO()
    yield out, err
    agent_logging.reset()


def test_text_format_levels_and_fields(streams):
    out, err = streams
    agent_logging.configure(verbosity=2, stdout=out, stderr=err)
    log = agent_logging.get_logger("process")
    log.info("Starting", version="v0.1.0", n=3, ok=True, missing=None)
    log.v(2).info("Shown")
    log.v(3).info("Hidden")
    log.warning("Careful", path="/x")
    log.error("Failed", err=OSError("disk on fire"), attempt=2)
    lines = err.getvalue().splitlines()
    assert out.getvalue() == ""
    assert len(lines) == 4
    assert lines[0].startswith("I") and lines[0].endswith('] "Starting" version="v0.1.0" n=3 ok=true missing=<nil>')
    assert " test_agent_process_parts.py:" in lines[0]
    assert lines[1].endswith('] "Shown"')
    assert lines[2].startswith("W") and lines[2].endswith('"Careful" path="/x"')
    assert lines[3].startswith("E") and lines[3].endswith('"Failed" err="disk on fire" attempt=2')
    assert f" {os.getpid()} " in lines[0]


def test_json_format_and_split_stream(streams):
    out, err = streams
    agent_logging.configure(fmt="json", verbosity=4, split_stream=True, stdout=out, stderr=err)
    log = agent_logging.get_logger("process")
    log.v(4).info("Sync", took_ms=3)
    log.error("Bad", err="nope")
    info = [json.loads(x) for x in out.getvalue().splitlines()]
    errors = [json.loads(x) for x in err.getvalue().splitlines()]
    assert info[0]["msg"] == "Sync" and info[0]["v"] == 4 and info[0]["took_ms"] == 3
    assert info[0]["caller"].startswith("test_agent_process_parts.py:")
    assert errors == [{"ts": errors[0]["ts"], "caller": errors[0]["caller"], "msg": "Bad", "err": "nope"}]


def test_vmodule(streams):
    out, err = streams
    agent_logging.configure(verbosity=0, vmodule=[("proc*", 5)], stdout=out, stderr=err)
    assert agent_logging.get_logger("process").v(5).enabled
    assert not agent_logging.get_logger("process").v(6).enabled
    assert not agent_logging.get_logger("sources").v(1).enabled
