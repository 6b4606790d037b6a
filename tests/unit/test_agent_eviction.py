"""The eviction manager's logic: thresholds, signals, ranking, rounds and admission.

The rounds run against a stats stand-in whose node figures the test sets, a
fake clock and a recording ``evict``; one test drives the real pod pipeline
(fake CRI) through an eviction. The memory threshold notifications are checked
with the polled watcher here; the kernel's eventfd thresholds in the benchmark
``tests/bench/bench_eviction.py`` and on real cgroups.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.eviction import (
    EvictionConfig,
    EvictionManager,
    ThresholdError,
    eviction_message,
    evictor,
    memcg,
    parse_thresholds,
)
from agent.eviction.signals import observe, rank_pods
from agent.eviction.thresholds import threshold_quantity
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from tests.unit import test_agent_workers as workers_tests
from tests.unit.test_agent_workers import container, fake_containers, make_pod, running, until

# The pipeline's fixtures (fake CRI runtime, node context, agent builder, short periods).
fake = workers_tests.fake
ctx = workers_tests.ctx
make_agent = workers_tests.make_agent
fast_periods = workers_tests.fast_periods

GiB = 1 << 30
MiB = 1 << 20


def pod(
    name: str,
    *,
    requests: dict | None = None,
    limits: dict | None = None,
    priority: int | None = None,
    source: str = "api",
    volumes: list | None = None,
    tolerations: list | None = None,
) -> dict:
    c: dict[str, Any] = {"name": "app", "image": "i"}
    if requests or limits:
        c["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec: dict[str, Any] = {"containers": [c]}
    if priority is not None:
        spec["priority"] = priority
    if volumes:
        spec["volumes"] = volumes
    if tolerations:
        spec["tolerations"] = tolerations
    p = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }
    if source != "api":
        p["metadata"]["annotations"] = {names.ANNOTATION_CONFIG_SOURCE: source}
    apply_defaults("", "v1", "Pod", p)
    return p


# --- thresholds ---------------------------------------------------------------------------


def test_thresholds_parse_as_upstream():
    ts = parse_thresholds(
        {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "0%"},
        {"nodefs.inodesFree": "10%"},
        {"nodefs.inodesFree": "1m30s"},
        {"memory.available": "50Mi", "nodefs.inodesFree": "1%"},
        ("pods",),
    )
    by = {(t.signal, t.hard): t for t in ts}
    assert set(by) == {
        ("memory.available", True),
        ("nodefs.available", True),
        ("nodefs.inodesFree", False),
        ("allocatableMemory.available", True),
    }  # 0% switches a threshold off
    assert by["nodefs.inodesFree", False].grace_period == 90
    assert threshold_quantity(by["memory.available", True].value, 0).value() == 100 * MiB
    assert threshold_quantity(by["memory.available", True].min_reclaim, 0).value() == 50 * MiB
    # pods enforced: the hard memory threshold also watches the pods' cgroup, with its reclaim.
    assert by["allocatableMemory.available", True].value == by["memory.available", True].value
    assert by["allocatableMemory.available", True].min_reclaim is not None
    # A float32 fraction of the capacity, truncated.
    assert threshold_quantity(by["nodefs.available", True].value, 1000).value() == 100
    assert threshold_quantity(by["nodefs.available", True].value, 12345).value() == 1234


@pytest.mark.parametrize(
    "args, message",
    [
        (({"memory.available": "0"},), "eviction threshold memory.available must be positive"),
        (({}, {"memory.available": "1Gi"}), "grace period must be specified for the soft eviction threshold"),
        (({"cpu.available": "1"},), "unsupported eviction signal cpu.available"),
        (({"nodefs.available": "150%"},), "must be <= 100%"),
        (({}, {}, {}, {"memory.available": "-1Mi"}), "negative eviction minimum reclaim"),
    ],
)
def test_bad_thresholds_are_refused_with_the_option_named(args, message):
    with pytest.raises(ThresholdError) as info:
        parse_thresholds(*args)
    assert message in str(info.value)
    assert str(info.value).startswith("--eviction-")


def test_observations_from_the_summary():
    summary = {
        "node": {
            "memory": {"availableBytes": 3 * GiB, "workingSetBytes": GiB, "usageBytes": 2 * GiB},
            "systemContainers": [{"name": "pods", "memory": {"availableBytes": 100, "workingSetBytes": 50}}],
            "fs": {"availableBytes": 10, "capacityBytes": 100, "inodesFree": 5, "inodes": 50},
            "runtime": {"imageFs": {"availableBytes": 20, "capacityBytes": 200}},
            "rlimit": {"maxpid": 1000, "curproc": 100},
        }
    }
    obs = observe(summary)
    assert (obs["memory.available"].available, obs["memory.available"].capacity) == (3 * GiB, 4 * GiB)
    assert (obs["allocatableMemory.available"].available, obs["allocatableMemory.available"].capacity) == (100, 150)
    assert (obs["nodefs.available"].available, obs["nodefs.inodesFree"].capacity) == (10, 50)
    assert obs["imagefs.available"].capacity == 200 and "imagefs.inodesFree" not in obs
    assert obs["pid.available"].available == 900


# --- ranking ------------------------------------------------------------------------------


def _stats(pods: dict[str, dict]):
    return lambda p: pods.get(p["metadata"]["uid"])


def test_memory_ranking_usage_above_requests_then_priority_then_usage():
    over_low = pod("over-low", requests={"memory": "100Mi"}, priority=0)
    over_high = pod("over-high", requests={"memory": "100Mi"}, priority=10)
    under = pod("under", requests={"memory": "1Gi"}, priority=-5)
    big = pod("big", priority=0)
    nostats = pod("nostats", priority=1000)
    stats = _stats(
        {
            "uid-over-low": {"memory": {"workingSetBytes": 150 * MiB}},
            "uid-over-high": {"memory": {"workingSetBytes": 900 * MiB}},
            "uid-under": {"memory": {"workingSetBytes": 500 * MiB}},
            "uid-big": {"memory": {"workingSetBytes": 400 * MiB}},
        }
    )
    ranked = rank_pods("memory.available", [under, over_high, over_low, nostats, big], stats, False)
    # No stats first; then those above their request by priority, larger usage first; then the rest.
    assert [p["metadata"]["name"] for p in ranked] == ["nostats", "big", "over-low", "over-high", "under"]


def test_disk_ranking_besteffort_before_a_burstable_pod_within_its_request():
    volumes = [{"name": "scratch", "emptyDir": {}}]
    be = pod("be", volumes=volumes)
    burst = pod("burst", requests={"cpu": "10m", "ephemeral-storage": "50Mi"}, volumes=volumes)
    stats = _stats(
        {
            "uid-be": {"containers": [], "volume": [{"name": "scratch", "usedBytes": 1 * MiB}]},
            "uid-burst": {"containers": [], "volume": [{"name": "scratch", "usedBytes": 20 * MiB}]},
        }
    )
    assert [p["metadata"]["name"] for p in rank_pods("nodefs.available", [burst, be], stats, True)] == ["be", "burst"]
    # With a dedicated image file system, nodefs does not count writable layers.
    layers = _stats(
        {
            "uid-be": {"containers": [{"rootfs": {"usedBytes": 100 * MiB}}]},
            "uid-burst": {"containers": [{"logs": {"usedBytes": 60 * MiB}}]},
        }
    )
    assert rank_pods("nodefs.available", [be, burst], layers, True)[0]["metadata"]["name"] == "burst"
    assert rank_pods("nodefs.available", [burst, be], layers, False)[0]["metadata"]["name"] == "be"


def test_pid_ranking_priority_then_processes():
    a, b, c = pod("a", priority=5), pod("b"), pod("c")
    stats = _stats(
        {
            "uid-a": {"process_stats": {"process_count": 90}},
            "uid-b": {"process_stats": {"process_count": 3}},
            "uid-c": {"process_stats": {"process_count": 7}},
        }
    )
    assert [p["metadata"]["name"] for p in rank_pods("pid.available", [a, b, c], stats, False)] == ["c", "b", "a"]


# --- rounds -------------------------------------------------------------------------------


class Stats:
    """Node figures the test sets; per-pod figures for ranking."""

    def __init__(self) -> None:
        self.node: dict[str, Any] = {
            "memory": {"availableBytes": 8 * GiB, "workingSetBytes": 2 * GiB, "usageBytes": 3 * GiB},
            "fs": {"availableBytes": 50 * GiB, "capacityBytes": 100 * GiB, "inodesFree": 900, "inodes": 1000},
            "runtime": {"imageFs": {"availableBytes": 50 * GiB, "capacityBytes": 100 * GiB}},
            "rlimit": {"maxpid": 1000, "curproc": 100},
        }
        self.pods: list[dict] = []
        self.full_reads = 0

    def disk_available(self, n: int) -> None:
        self.node["fs"]["availableBytes"] = n

    async def node_summary(self) -> dict:
        return {"node": self.node, "pods": []}

    async def summary(self) -> dict:
        self.full_reads += 1
        return {"node": self.node, "pods": self.pods}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Harness:
    def __init__(self, thresholds, *, pods: list[dict], transition: float = 60.0, max_grace: int = 0, **kw) -> None:
        self.stats = Stats()
        self.clock = Clock()
        self.active = list(pods)
        self.evicted: list[tuple[str, Any, str, str, list]] = []
        self.events: list[tuple[Any, str, str, str]] = []
        self.changes = 0

        async def evict(p, grace, reason, message, conditions):
            self.evicted.append((p["metadata"]["name"], grace, reason, message, conditions))
            self.active.remove(p)
            return True

        self.manager = EvictionManager(
            EvictionConfig(
                thresholds=tuple(thresholds), pressure_transition_period=transition, max_pod_grace_period=max_grace
            ),
            stats=self.stats,
            active_pods=lambda: list(self.active),
            evict=evict,
            events=lambda p, t, r, m: self.events.append((p, t, r, m)),
            dedicated_image_fs=self._dedicated,
            clock=self.clock,
            **kw,
        )
        self.manager.on_conditions_changed = self._changed

    async def _dedicated(self) -> bool:
        return True

    def _changed(self) -> None:
        self.changes += 1

    def names(self) -> list[str]:
        return [e[0] for e in self.evicted]


async def test_hard_disk_threshold_evicts_besteffort_then_burstable_never_static_and_clears_after_transition():
    volumes = [{"name": "scratch", "emptyDir": {}}]
    static = pod("static", source="file", volumes=volumes)
    be = pod("be", volumes=volumes)
    burst = pod("burst", requests={"cpu": "10m", "ephemeral-storage": "50Mi"}, volumes=volumes)
    h = Harness(parse_thresholds({"nodefs.available": "10%"}), pods=[static, burst, be], transition=30.0)
    h.stats.pods = [
        {"podRef": {"uid": "uid-static"}, "containers": [], "volume": [{"name": "scratch", "usedBytes": 90 * MiB}]},
        {"podRef": {"uid": "uid-be"}, "containers": [], "volume": [{"name": "scratch", "usedBytes": MiB}]},
        {"podRef": {"uid": "uid-burst"}, "containers": [], "volume": [{"name": "scratch", "usedBytes": 20 * MiB}]},
    ]
    assert await h.manager.synchronize() == [] and h.manager.conditions == [] and h.stats.full_reads == 0

    h.stats.disk_available(5 * GiB)  # under 10% of 100 GiB
    evicted = await h.manager.synchronize()
    assert [p["metadata"]["name"] for p in evicted] == ["be"]
    assert h.manager.pressure() == {"DiskPressure": True} and h.changes == 1
    name, grace, reason, message, conditions = h.evicted[0]
    assert (grace, reason) == (1, "Evicted")
    assert message == (
        # 10% is a float32 fraction: a little more than a tenth, as upstream computes it.
        "The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, available: 5Gi. "
    )
    assert conditions[0]["type"] == "DisruptionTarget" and conditions[0]["reason"] == "TerminationByAgent"
    assert conditions[0]["message"] == message
    assert ("Warning", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage") in [e[1:] for e in h.events]
    assert (be, "Warning", "Evicted", message) in h.events

    await h.manager.synchronize()
    assert h.names() == ["be", "burst"]
    # Only the static pod is left: it is never evicted.
    assert await h.manager.synchronize() == [] and h.names() == ["be", "burst"]

    h.stats.disk_available(60 * GiB)
    h.clock.t += 10
    await h.manager.synchronize()
    assert h.manager.conditions == ["DiskPressure"]  # within the transition period
    h.clock.t += 25
    await h.manager.synchronize()
    assert h.manager.conditions == [] and h.changes == 2


async def test_node_level_reclaim_first_and_no_eviction_when_it_suffices():
    be = pod("be")
    calls: list[str] = []

    class ContainerGC:
        async def garbage_collect(self):
            calls.append("containers")

            class R:
                containers = ["c1"]

            return R()

    class ImageGC:
        async def delete_unused_images(self):
            calls.append("images")
            h.stats.node["runtime"]["imageFs"]["availableBytes"] = 40 * GiB
            return 30 * GiB

    h = Harness(
        parse_thresholds({"imagefs.available": "15%"}), pods=[be], container_gc=ContainerGC(), image_gc=ImageGC()
    )
    h.stats.node["runtime"]["imageFs"]["availableBytes"] = 10 * GiB
    assert await h.manager.synchronize() == []
    assert calls == ["containers", "images"] and h.evicted == []
    assert h.manager.conditions == ["DiskPressure"]


async def test_min_reclaim_keeps_a_threshold_met_until_passed():
    a, b = pod("a"), pod("b")
    h = Harness(parse_thresholds({"nodefs.available": "1Gi"}, min_reclaim={"nodefs.available": "2Gi"}), pods=[a, b])
    h.stats.pods = [{"podRef": {"uid": "uid-a"}, "containers": []}, {"podRef": {"uid": "uid-b"}, "containers": []}]
    h.stats.disk_available(GiB // 2)
    await h.manager.synchronize()
    h.stats.disk_available(2 * GiB)  # above the threshold, not above threshold + minimum reclaim
    await h.manager.synchronize()
    assert h.names() == ["a", "b"]


async def test_soft_threshold_waits_its_grace_period_and_gives_the_max_pod_grace():
    p = pod("p")
    p["spec"]["terminationGracePeriodSeconds"] = 60
    h = Harness(parse_thresholds({}, {"memory.available": "1Gi"}, {"memory.available": "30s"}), pods=[p], max_grace=20)
    h.stats.pods = [
        {"podRef": {"uid": "uid-p"}, "containers": [{"name": "app", "memory": {"workingSetBytes": 5 * MiB}}]}
    ]
    h.stats.node["memory"] = {"availableBytes": GiB // 2, "workingSetBytes": 7 * GiB, "usageBytes": 7 * GiB}
    await h.manager.synchronize()
    assert h.manager.conditions == ["MemoryPressure"] and h.evicted == []  # reported at once, acting later
    h.clock.t += 31
    await h.manager.synchronize()
    name, grace, _, message, _ = h.evicted[0]
    assert grace == 20
    assert message == (
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "
        "Container app was using 5Mi, request is 0, has larger consumption of memory. "
    )


async def test_critical_pods_are_not_evicted():
    critical = pod("critical", priority=names.SYSTEM_CRITICAL_PRIORITY)
    mirror = pod("mirror")
    mirror["metadata"]["annotations"] = {names.ANNOTATION_CONFIG_MIRROR: "x"}
    h = Harness(parse_thresholds({"pid.available": "950"}), pods=[critical, mirror])
    h.stats.pods = []
    await h.manager.synchronize()
    assert h.evicted == [] and h.manager.conditions == ["PIDPressure"]


def test_admission_under_pressure():
    h = Harness([], pods=[])
    m = h.manager
    be, burst = pod("be"), pod("burst", requests={"memory": "10Mi"})
    tolerant = pod("tolerant", tolerations=[{"key": names.TAINT_MEMORY_PRESSURE, "operator": "Exists"}])
    static = pod("static", source="file")
    assert m.admit(be) == ("", "")
    m.conditions = ["MemoryPressure"]
    assert m.admit(be) == ("Evicted", "The node had condition: [MemoryPressure]. ")
    assert m.admit(burst) == ("", "") and m.admit(tolerant) == ("", "") and m.admit(static) == ("", "")
    m.conditions = ["MemoryPressure", "DiskPressure"]
    assert m.admit(burst) == ("Evicted", "The node had condition: [MemoryPressure DiskPressure]. ")
    assert m.admit(tolerant)[0] == "Evicted" and m.admit(static) == ("", "")


def test_eviction_message_names_containers_over_their_storage_request():
    p = pod("p", requests={"ephemeral-storage": "1Mi"})
    stats = {"containers": [{"name": "app", "rootfs": {"usedBytes": 3 * MiB}, "logs": {"usedBytes": MiB}}]}
    assert eviction_message("ephemeral-storage", p, stats, [], {}) == (
        "The node was low on resource: ephemeral-storage. "
        "Container app was using 4Mi, request is 1Mi, has larger consumption of ephemeral-storage. "
    )


async def test_memcg_notification_wakes_the_manager(monkeypatch):
    """The polled watcher (cgroup v2) calls back on a crossing; the manager re-arms its
    notifier from the observations (capacity - threshold + inactive file)."""
    monkeypatch.setattr(memcg, "V2_POLL_INTERVAL", 0.01)
    usage = {"now": 100}
    crossed: list[int] = []
    n = memcg.PollingNotifier(lambda: usage["now"], 150, lambda: crossed.append(usage["now"]))
    n.start()
    try:
        await asyncio.sleep(0.05)
        usage["now"] = 200
        await until(lambda: crossed, "a crossing")
        assert crossed == [200]
    finally:
        n.close()

    made: list[tuple[dict, bool, int]] = []

    class Notifier(memcg.CgroupNotifier):
        description = "test"

        def start(self) -> None:
            pass

        def close(self) -> None:
            pass

    def factory(dirs, root, threshold, on_cross):
        made.append((dirs, root, threshold))
        return Notifier()

    monkeypatch.setattr("agent.eviction.manager.new_notifier", factory)
    h = Harness(parse_thresholds({"memory.available": "1Gi"}), pods=[], memcg_dirs=lambda which: {"memory": which})
    h.manager.config = EvictionConfig(thresholds=h.manager.config.thresholds, kernel_memcg_notification=True)
    await h.manager.synchronize()
    # capacity 10 GiB - 1 GiB + inactive file (usage 3 GiB - working set 2 GiB)
    assert made == [({"memory": "/"}, True, 10 * GiB)]


# --- the pod pipeline -----------------------------------------------------------------------


async def test_an_evicted_pod_stops_for_good_and_reports_failed(fake, make_agent):
    agent = make_agent()
    p = make_pod("victim", [container("app")], grace=30)
    other = make_pod("other", [container("app")])
    agent.start()
    agent.push(p, other)
    await until(lambda: running(fake, p, "app") and running(fake, other, "app"), "both pods to run")
    assert {x["metadata"]["name"] for x in agent.pipeline.active_pods()} == {"victim", "other"}
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByAgent", "message": "m"}
    evict = evictor(agent.pipeline.kill_pod, timeout=5)
    assert await evict(p, 1, "Evicted", "m", [condition])
    assert not running(fake, p, "app") and running(fake, other, "app")
    status = agent.status(p)
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "Evicted", "m")
    assert any(c["type"] == "DisruptionTarget" for c in status["conditions"])
    assert agent.reported(p)[-1]["phase"] == "Failed"
    assert [x["metadata"]["name"] for x in agent.pipeline.active_pods()] == ["other"]
    # restartPolicy Always: still nothing runs again.
    await asyncio.sleep(0.3)
    assert len(fake_containers(fake, p, "app")) == 1 and not running(fake, p, "app")
    assert not await evict(p, 1, "Evicted", "again", [])


async def test_admission_checks_run_before_the_resource_fit(fake, make_agent):
    agent = make_agent()
    agent.pipeline.admit_handlers.append(lambda p: ("Evicted", "The node had condition: [DiskPressure]. "))
    p = make_pod("late", [container("app")])
    agent.start()
    agent.push(p)
    await until(lambda: agent.status(p).get("phase") == "Failed", "the pod to be refused")
    assert agent.status(p)["reason"] == "Evicted"


async def test_a_pod_evicted_before_an_agent_restart_stays_stopped(fake, make_agent):
    p = make_pod("gone", [container("app")])
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByAgent", "message": "m"}
    p["status"] = {"phase": "Failed", "reason": "Evicted", "message": "m", "conditions": [condition]}
    agent = make_agent()
    agent.pipeline.admit_handlers.append(lambda pod: ("Evicted", "The node had condition: [DiskPressure]. "))
    agent.start()
    agent.push(p)
    await until(lambda: agent.reported(p), "a status for the pod")
    await asyncio.sleep(0.3)
    assert not fake_containers(fake, p)
    status = agent.status(p)
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "Evicted", "m")
    assert any(c["type"] == "DisruptionTarget" for c in status["conditions"])


async def test_local_storage_limits_evict_without_a_threshold():
    sized = pod("sized", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}])
    capped = pod("capped", limits={"ephemeral-storage": "20Mi"})
    logs = pod("logs", limits={"ephemeral-storage": "1Mi", "cpu": "1"})
    logs["spec"]["containers"].append(
        {"name": "side", "image": "i", "resources": {"limits": {"ephemeral-storage": "1Mi"}}}
    )
    fine = pod("fine", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}])
    free = pod("free")
    h = Harness([], pods=[sized, capped, logs, fine, free])
    h.stats.pods = [
        {"podRef": {"uid": "uid-sized"}, "containers": [], "volume": [{"name": "scratch", "usedBytes": 11 * MiB}]},
        {"podRef": {"uid": "uid-capped"}, "containers": [], "ephemeral-storage": {"usedBytes": 21 * MiB}},
        {
            "podRef": {"uid": "uid-logs"},
            "containers": [{"name": "side", "logs": {"usedBytes": 2 * MiB}, "rootfs": {"usedBytes": 0}}],
            "ephemeral-storage": {"usedBytes": MiB},
        },
        {"podRef": {"uid": "uid-fine"}, "containers": [], "volume": [{"name": "scratch", "usedBytes": MiB}]},
    ]
    evicted = await h.manager.synchronize()
    assert [p["metadata"]["name"] for p in evicted] == ["sized", "capped", "logs"]
    messages = {e[0]: e[3] for e in h.evicted}
    assert messages == {
        "sized": 'Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". ',
        "capped": "Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. ",
        "logs": 'Container side exceeded its local ephemeral storage limit "1Mi". ',
    }
    assert all(e[4] == [] and e[1] == 1 for e in h.evicted)  # no disruption condition for these
    # Without such limits on any pod, the per-pod stats are not even read.
    h2 = Harness([], pods=[free])
    assert await h2.manager.synchronize() == [] and h2.stats.full_reads == 0


async def test_a_notification_brings_quick_follow_up_rounds(monkeypatch):
    """The kernel signals a usage crossing once, possibly a moment before the working set
    reads under the threshold: the rounds that follow come quickly, not a housekeeping later."""
    monkeypatch.setattr("agent.eviction.manager.NOTIFY_FOLLOWUP_INTERVAL", 0.1)
    p = pod("p")
    h = Harness(parse_thresholds({"memory.available": "1Gi"}), pods=[p])
    h.manager.config = EvictionConfig(thresholds=h.manager.config.thresholds, monitoring_interval=600)
    h.stats.pods = [{"podRef": {"uid": "uid-p"}, "containers": []}]
    task = asyncio.create_task(h.manager.run())
    try:
        await until(lambda: h.manager.rounds >= 1, "the first round")
        h.stats.node["memory"]["availableBytes"] = GiB + MiB  # not yet under the threshold
        h.manager.wake("memory eviction threshold crossed")
        await until(lambda: h.manager.rounds >= 2, "the notified round")
        assert h.evicted == []
        h.stats.node["memory"]["availableBytes"] = GiB // 2
        await until(lambda: h.evicted, "an eviction from a follow-up round", timeout=2.0)
        assert h.names() == ["p"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
