"""The node shutdown manager against a logind stand-in on a private D-Bus daemon.

Real D-Bus (``dbus-daemon``, Debian ``dbus``) with unix fd passing; the pods and
their stopping are stand-ins here (the e2e test stops real containers). One bus
for the module.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from agent.nodeshutdown import Logind, LogindError, ShutdownManager
from agent.nodeshutdown import manager as manager_mod
from agent.options import ShutdownGracePeriodByPodPriority as Budget
from apiserver_min.api import names
from tests.logind_standin import PrivateLogind, dbus_daemon

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="needs dbus-daemon (Debian package dbus)")


@pytest.fixture(scope="module")
def logind(tmp_path_factory):
    with PrivateLogind(tmp_path_factory.mktemp("logind"), delay_usec=5_000_000) as bus:
        yield bus


def _pod(name: str, priority: int, grace: int = 30) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"priority": priority, "terminationGracePeriodSeconds": grace, "containers": []},
    }


async def _until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_client_reads_delay_takes_and_releases_the_lock(logind):
    client = Logind(logind.address)
    await client.connect()
    try:
        assert await client.inhibit_delay_max() == 5.0
        before = len(logind.records("release"))
        lock = await client.inhibit_shutdown()
        assert os.fstat(lock)  # a real descriptor crossed the bus
        rec = logind.records("inhibit")[-1]
        assert (rec["what"], rec["who"], rec["why"], rec["mode"]) == (
            "shutdown",
            names.SHUTDOWN_INHIBIT_WHO,
            names.SHUTDOWN_INHIBIT_WHY,
            "delay",
        )
        Logind.release(lock)
        await _until(lambda: len(logind.records("release")) == before + 1)
    finally:
        client.close()


async def test_connect_failure_is_a_clear_error(tmp_path):
    client = Logind(f"unix:path={tmp_path}/nothing", timeout=2)
    with pytest.raises(LogindError, match="cannot connect to the system bus"):
        await client.connect()


async def test_shutdown_stops_pods_by_priority_then_releases_and_cancel_retakes(logind, tmp_path, monkeypatch):
    monkeypatch.setenv(names.ENV_DBUS_SYSTEM_BUS_ADDRESS, logind.address)
    pods = [_pod("critical", names.SYSTEM_CRITICAL_PRIORITY), _pod("low", 0), _pod("mid", 1000, grace=0)]
    stopped: list[tuple[str, int, dict]] = []
    changes: list[bool] = []

    async def kill(pod, grace, update):
        status: dict = {"phase": "Running"}
        update(status)
        stopped.append((pod["metadata"]["name"], grace, status))

    budgets = [Budget(0, 3), Budget(1000, 2), Budget(names.SYSTEM_CRITICAL_PRIORITY, 1)]
    mgr = ShutdownManager(budgets, pods=lambda: list(pods), kill=kill, dropin_dir=str(logind.dropin_dir))
    mgr.node_changed = lambda: changes.append(mgr.shutting_down)
    task = asyncio.create_task(mgr.run())
    try:
        # 6 s wanted > 5 s: the drop-in is written and logind told to reload.
        await _until(lambda: mgr.lock is not None)
        dropin = logind.dropin_dir / names.SHUTDOWN_LOGIND_DROPIN_FILE
        assert "InhibitDelayMaxSec=6" in dropin.read_text()
        assert logind.records("killunit")[-1]["unit"] == names.LOGIND_SERVICE_UNIT
        assert logind.records("reloaded")[-1]["delay_usec"] == 6_000_000
        held = logind.held_locks()
        assert mgr.admit(_pod("new", 0)) == ("", "")

        releases = len(logind.records("release"))
        logind.prepare_for_shutdown(True)
        await _until(lambda: len(logind.records("release")) == releases + 1)
        assert [name for name, _, _ in stopped] == ["low", "mid", "critical"]
        assert [grace for _, grace, _ in stopped] == [3, 0, 1]  # budget, own shorter grace, budget
        status = stopped[0][2]
        assert (status["phase"], status["reason"], status["message"]) == (
            "Failed",
            names.SHUTDOWN_POD_REASON,
            names.SHUTDOWN_POD_MESSAGE,
        )
        assert status["conditions"][0]["type"] == names.POD_CONDITION_DISRUPTION_TARGET
        assert status["conditions"][0]["reason"] == names.POD_REASON_TERMINATION_BY_AGENT
        assert mgr.lock is None and logind.held_locks() == held - 1
        assert mgr.not_ready_message() == names.SHUTDOWN_NOT_READY_MESSAGE
        assert mgr.admit(_pod("new", 0)) == (names.SHUTDOWN_NOT_ADMITTED_REASON, names.SHUTDOWN_NOT_ADMITTED_MESSAGE)
        assert changes == [True]

        logind.prepare_for_shutdown(False)
        await _until(lambda: mgr.lock is not None)
        assert mgr.not_ready_message() == "" and changes == [True, False]
        assert logind.held_locks() == held
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Stopping the agent gives the lock back.
    await _until(lambda: logind.held_locks() == held - 1)


async def test_too_short_delay_that_cannot_be_raised_is_refused(logind, tmp_path):
    """A drop-in directory that cannot be written: the start fails with upstream's message and is retried."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    mgr = ShutdownManager([Budget(0, 60)], pods=list, kill=lambda *a: asyncio.sleep(0), dropin_dir=str(blocker / "sub"))
    mgr._logind_factory = lambda: Logind(logind.address)
    with pytest.raises(LogindError, match="unable to override inhibit delay by shutdown manager"):
        await mgr._session()
    assert mgr.lock is None


async def test_a_lost_bus_is_reconnected_and_the_lock_taken_again(tmp_path, monkeypatch):
    monkeypatch.setattr(manager_mod, "RECONNECT_PERIOD", 0.1)
    first = PrivateLogind(tmp_path).__enter__()
    second = None
    try:
        monkeypatch.setenv(names.ENV_DBUS_SYSTEM_BUS_ADDRESS, first.address)
        mgr = ShutdownManager([Budget(0, 2)], pods=list, kill=lambda *a: asyncio.sleep(0))
        task = asyncio.create_task(mgr.run())
        try:
            await _until(lambda: first.held_locks() == 1)
            # The system bus restarts (here: another one comes up and the first goes away).
            second = PrivateLogind(tmp_path).__enter__()
            monkeypatch.setenv(names.ENV_DBUS_SYSTEM_BUS_ADDRESS, second.address)
            first.__exit__()
            await _until(lambda: second.held_locks() == 1)
            assert mgr.lock is not None
        finally:
            task.cancel()
            async with asyncio.timeout(10):  # a cancelled manager stops (it once ran on)
                await asyncio.gather(task, return_exceptions=True)
    finally:
        first.__exit__()
        if second is not None:
            second.__exit__()
