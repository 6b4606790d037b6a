"""The scheduler's fit and score rules, and the node lifecycle controller's pure rules,
on plain dict fixtures."""

from __future__ import annotations

import random

import pytest

from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.controllers import nodelifecycle as nl
from apiserver_min.scheduler import scheduler as sch
from apiserver_min.server import podlogs


def node(
    name,
    cpu="4",
    memory="8Gi",
    pods="110",
    *,
    labels=None,
    taints=None,
    ready="True",
    unschedulable=False,
    storage=None,
    extra=None,
):
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    if storage:
        alloc["ephemeral-storage"] = storage
    alloc.update(extra or {})
    n = {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {},
        "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": []},
    }
    if ready is not None:
        n["status"]["conditions"].append({"type": "Ready", "status": ready})
    if taints:
        n["spec"]["taints"] = taints
    if unschedulable:
        n["spec"]["unschedulable"] = True
    return n


def pod(
    name="p",
    cpu=None,
    memory=None,
    *,
    ns="default",
    selector=None,
    affinity=None,
    tolerations=None,
    ports=None,
    priority=None,
    init=None,
    extra_requests=None,
    preemption=None,
):
    req = {}
    if cpu is not None:
        req["cpu"] = cpu
    if memory is not None:
        req["memory"] = memory
    req.update(extra_requests or {})
    c = {"name": "c", "image": "busybox", "resources": {"requests": req} if req else {}}
    if ports:
        c["ports"] = ports
    spec = {"containers": [c], "schedulerName": "default-scheduler"}
    if init:
        spec["initContainers"] = init
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}}
        }
    if tolerations:
        spec["tolerations"] = tolerations
    if priority is not None:
        spec["priority"] = priority
    if preemption:
        spec["preemptionPolicy"] = preemption
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def states(*nodes, bound=()):
    """NodeState per node; ``bound`` is (node name, pod dict) pairs already placed."""
    out = {n["metadata"]["name"]: sch.NodeState(n) for n in nodes}
    for node_name, p in bound:
        out[node_name].add(sch.PodSummary.of(p))
    return out


def place(p, st_, seed=1):
    return sch.find_node_for_pod(p, st_, random.Random(seed))


# --- resources -------------------------------------------------------------------------


def test_pod_requests_sum_containers_max_init_and_overhead():
    p = pod(cpu="250m", memory="64Mi", init=[{"name": "i", "resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}])
    p["spec"]["containers"].append({"name": "d", "resources": {"limits": {"cpu": "500m"}}})
    p["spec"]["overhead"] = {"cpu": "10m"}
    r = sch.pod_requests(p)
    assert r["cpu"] == 1010  # max(250+500, 1000) + 10
    assert r["memory"] == 64 * 1024 * 1024
    cpu, mem = sch.nonzero_requests(p)
    assert cpu == 1010 and mem == 64 * 1024 * 1024 + sch.DEFAULT_MEMORY_REQUEST  # 'd' counts 200Mi


def test_insufficient_resources_reasons_in_upstream_order():
    big = pod(cpu="3", memory="7Gi", extra_requests={"ephemeral-storage": "2Gi", "example.com/gpu": "1"})
    s = states(node("n1", cpu="4", memory="8Gi", storage="1Gi"), bound=[("n1", pod("old", cpu="2", memory="2Gi"))])
    res = place(big, s)
    assert res.node is None
    assert res.message.startswith(
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient ephemeral-storage, "
        "1 Insufficient example.com/gpu, 1 Insufficient memory."
    )


def test_too_many_pods_and_exact_fit():
    s = states(node("n1", cpu="1", memory="1Gi", pods="1"), bound=[("n1", pod("old"))])
    res = place(pod("new"), s)
    assert res.node is None and "1 Too many pods" in res.message
    s = states(node("n1", cpu="1", memory="1Gi", pods="2"), bound=[("n1", pod("old", cpu="500m"))])
    assert place(pod("new", cpu="500m"), s).node == "n1"
    assert place(pod("new", cpu="501m"), s).node is None


def test_terminal_pods_are_the_callers_business_and_best_effort_pods_fit_anywhere():
    s = states(node("n1", cpu="1", memory="1Gi"), bound=[("n1", pod("old", cpu="1", memory="1Gi"))])
    assert place(pod("tiny"), s).node == "n1"  # no requests: only the pod count matters


# --- scoring ---------------------------------------------------------------------------


def test_least_allocated_prefers_the_emptier_node():
    s = states(
        node("busy", cpu="4", memory="8Gi"),
        node("idle", cpu="4", memory="8Gi"),
        bound=[("busy", pod("x", cpu="3", memory="6Gi"))],
    )
    res = place(pod("new", cpu="100m", memory="100Mi"), s)
    assert res.node == "idle"
    assert res.scores["idle"] > res.scores["busy"]
    # Score: mean of cpu and memory free share after placement, 0..100.
    assert res.scores["idle"] == ((4000 - 100) * 100 // 4000 + (8 * 2**30 - 100 * 2**20) * 100 // (8 * 2**30)) // 2


def test_ties_are_broken_at_random():
    s = states(node("a"), node("b"), node("c"))
    picked = {place(pod("p", cpu="1"), s, seed).node for seed in range(40)}
    assert picked == {"a", "b", "c"}


# --- node selector and affinity -------------------------------------------------------


@pytest.mark.parametrize(
    "expr, fits",
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["c"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["c"]}, True),
        ({"key": "missing", "operator": "NotIn", "values": ["c"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "missing", "operator": "Exists"}, False),
        ({"key": "missing", "operator": "DoesNotExist"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "cores", "operator": "Gt", "values": ["8"]}, True),
        ({"key": "cores", "operator": "Gt", "values": ["16"]}, False),
        ({"key": "cores", "operator": "Lt", "values": ["17"]}, True),
        ({"key": "zone", "operator": "Gt", "values": ["1"]}, False),  # label not an integer
        ({"key": "cores", "operator": "Gt", "values": ["x"]}, False),  # malformed term: matches nothing
        ({"key": "zone", "operator": "Bogus", "values": ["a"]}, False),
    ],
)
def test_required_node_affinity_operators(expr, fits):
    s = states(node("n1", labels={"zone": "a", "cores": "16"}))
    res = place(pod(affinity=[{"matchExpressions": [expr]}]), s)
    assert (res.node == "n1") is fits
    if not fits:
        assert res.message.startswith("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.")


def test_affinity_terms_are_ored_expressions_anded_and_match_fields():
    s = states(node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"}))
    terms = [
        {
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]},
                {"key": "zone", "operator": "NotIn", "values": ["a"]},
            ]
        },
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
    ]
    assert place(pod(affinity=terms), s).node == "n2"
    assert place(pod(affinity=[{}]), s).node is None  # an empty term matches nothing
    not_n1 = [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]
    assert place(pod(affinity=not_n1), s).node == "n2"


def test_node_selector_needs_every_label():
    s = states(node("n1", labels={"disk": "ssd"}), node("n2", labels={"disk": "ssd", "gpu": "yes"}))
    assert place(pod(selector={"disk": "ssd", "gpu": "yes"}), s).node == "n2"
    res = place(pod(selector={"disk": "hdd"}), s)
    assert res.message.startswith("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.")


# --- taints and tolerations ------------------------------------------------------------


@pytest.mark.parametrize(
    "toleration, tolerated",
    [
        ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v"}, True),  # no operator = Equal, no effect = any
        ({"key": "k", "operator": "Equal", "value": "w"}, False),
        ({"key": "k", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists: every taint
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerates(toleration, tolerated):
    assert sch.tolerates(toleration, {"key": "k", "value": "v", "effect": "NoSchedule"}) is tolerated


def test_taints_filter_with_upstream_message_and_prefer_no_schedule_ignored():
    s = states(
        node("n1", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
        node("n2", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
        node("n3", taints=[{"key": "gone", "effect": "NoExecute"}]),
    )
    assert place(pod(), s).node == "n1"
    only_tainted = {k: v for k, v in s.items() if k != "n1"}
    res = place(pod(), only_tainted)
    assert res.message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, "
        "1 node(s) had untolerated taint {gone: }. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling.."
    )
    tolerant = pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}])
    assert place(tolerant, only_tainted).node == "n2"


def test_not_ready_nodes_count_as_tainted_until_the_controller_taints_them():
    s = states(node("down", ready="Unknown"), node("new", ready=None), node("sick", ready="False"))
    res = place(pod(), s)
    assert res.node is None
    assert (
        f"1 node(s) had untolerated taint {{{names.TAINT_UNREACHABLE}: }}" in res.message
        and f"2 node(s) had untolerated taint {{{names.TAINT_NOT_READY}: }}" in res.message
    )
    tolerant = pod(tolerations=[{"key": names.TAINT_UNREACHABLE, "operator": "Exists"}])
    assert place(tolerant, s).node == "down"


def test_unschedulable_node_unless_tolerated():
    s = states(node("n1", unschedulable=True))
    res = place(pod(), s)
    assert res.message.startswith("0/1 nodes are available: 1 node(s) were unschedulable.")
    tol = pod(tolerations=[{"key": names.TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}])
    assert place(tol, s).node == "n1"


# --- host ports ------------------------------------------------------------------------


def test_host_port_conflicts():
    used = pod("old", ports=[{"containerPort": 80, "hostPort": 8080}])
    s = states(node("n1"), bound=[("n1", used)])
    res = place(pod("new", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]), s)
    assert res.message.startswith(
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested "
        "pod ports. preemption: 0/1 nodes are available: 1 No preemption victims"
    )
    assert place(pod("udp", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]), s).node == "n1"
    assert place(pod("other", ports=[{"containerPort": 80, "hostPort": 8081}]), s).node == "n1"
    assert sch.ports_conflict([("10.0.0.1", "TCP", 1)], [("10.0.0.2", "TCP", 1)]) is False
    assert sch.ports_conflict([("10.0.0.1", "TCP", 1)], [("0.0.0.0", "TCP", 1)]) is True
    assert sch.ports_conflict([("0.0.0.0", "TCP", 1)], [("10.0.0.2", "TCP", 1)]) is True


# --- the summary message ---------------------------------------------------------------


def test_message_summary_counts_sorted_and_preemption_part():
    s = states(
        node("small", cpu="1"),
        node("u1", taints=[{"key": names.TAINT_UNREACHABLE, "effect": "NoSchedule"}]),
        node("u2", taints=[{"key": names.TAINT_UNREACHABLE, "effect": "NoExecute"}]),
    )
    res = place(pod(cpu="2"), s)
    taint = f"node(s) had untolerated taint {{{names.TAINT_UNREACHABLE}: }}"
    assert res.message == (
        f"0/3 nodes are available: 1 Insufficient cpu, 2 {taint}. preemption: 0/3 nodes are "
        "available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful "
        "for scheduling.."
    )
    never = place(pod(cpu="2", preemption="Never"), s)
    assert never.message.endswith("preemption: not eligible due to preemptionPolicy=Never..")
    assert place(pod(), {}).message == "no nodes available to schedule pods"


def test_preemption_part_when_lower_priority_pods_would_not_make_room():
    s = states(
        node("n1", cpu="2"),
        bound=[("n1", pod("low", cpu="500m", priority=0)), ("n1", pod("high", cpu="1", priority=100))],
    )
    res = place(pod("vip", cpu="1500m", priority=50), s)
    assert res.message.endswith("preemption: 0/1 nodes are available: 1 Insufficient cpu..")
    res = place(pod("vip", cpu="1", priority=50), s)
    assert res.message.endswith(f"preemption: 0/1 nodes are available: 1 {sch.PREEMPTION_NOT_DONE}..")


def test_responsible_for():
    assert sch.responsible_for(pod())
    other = pod()
    other["spec"]["schedulerName"] = "my-scheduler"
    assert not sch.responsible_for(other)
    bound = pod()
    bound["spec"]["nodeName"] = "n1"
    assert not sch.responsible_for(bound)
    unset = pod()
    del unset["spec"]["schedulerName"]
    assert sch.responsible_for(unset)


def test_set_pod_condition_keeps_transition_time_when_status_stays():
    p = pod()
    assert sch.set_pod_condition(
        p, {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m1"}
    )
    first = p["status"]["conditions"][0]["lastTransitionTime"]
    p["status"]["conditions"][0]["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    assert sch.set_pod_condition(
        p, {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m2"}
    )
    assert p["status"]["conditions"][0]["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    assert not sch.set_pod_condition(
        p, {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m2"}
    )
    assert first


# --- node lifecycle rules --------------------------------------------------------------


def test_mark_unknown_sets_monitored_conditions():
    n = node("n1")
    n["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    n["status"]["conditions"][0].update(reason="AgentReady", lastHeartbeatTime="2024-01-01T00:00:10Z")
    n["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    assert nl.mark_unknown(n, "2024-01-02T00:00:00Z")
    conds = {c["type"]: c for c in n["status"]["conditions"]}
    assert conds["Ready"]["status"] == "Unknown" and conds["Ready"]["reason"] == "NodeStatusUnknown"
    assert conds["Ready"]["message"] == "Node agent stopped posting node status."
    assert conds["Ready"]["lastHeartbeatTime"] == "2024-01-01T00:00:10Z"
    assert conds["MemoryPressure"]["status"] == "Unknown"
    assert conds["DiskPressure"]["reason"] == "NodeStatusNeverUpdated"
    assert conds["PIDPressure"]["lastHeartbeatTime"] == "2024-01-01T00:00:00Z"
    assert not nl.mark_unknown(n, "2024-01-03T00:00:00Z")


def test_reconcile_taints_follows_conditions_and_keeps_others():
    n = node("n1", ready="Unknown", taints=[{"key": "mine", "effect": "NoSchedule"}])
    taints = nl.reconcile_taints(n, "T1")
    assert taints == [
        {"key": "mine", "effect": "NoSchedule"},
        {"key": names.TAINT_UNREACHABLE, "effect": "NoSchedule"},
        {"key": names.TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": "T1"},
    ]
    n["spec"]["taints"] = taints
    assert nl.reconcile_taints(n, "T2") is None  # in step: nothing to do, timeAdded kept
    n["status"]["conditions"][0]["status"] = "False"
    swapped = nl.reconcile_taints(n, "T3")
    assert {(t["key"], t["effect"]) for t in swapped} == {
        ("mine", "NoSchedule"),
        (names.TAINT_NOT_READY, "NoSchedule"),
        (names.TAINT_NOT_READY, "NoExecute"),
    }
    n["status"]["conditions"][0]["status"] = "True"
    n["status"]["conditions"].append({"type": "DiskPressure", "status": "True"})
    n["spec"]["unschedulable"] = True
    back = nl.reconcile_taints(n, "T4")
    assert back == [
        {"key": "mine", "effect": "NoSchedule"},
        {"key": names.TAINT_DISK_PRESSURE, "effect": "NoSchedule"},
        {"key": names.TAINT_UNSCHEDULABLE, "effect": "NoSchedule"},
    ]


def test_eviction_delay():
    unreachable = [{"key": names.TAINT_UNREACHABLE, "effect": "NoExecute"}]
    tol = {"key": names.TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    assert nl.eviction_delay(unreachable, [tol]) == 300.0
    assert nl.eviction_delay(unreachable, []) == 0.0
    assert nl.eviction_delay(unreachable, [{**tol, "tolerationSeconds": 0}]) == 0.0
    forever = {k: v for k, v in tol.items() if k != "tolerationSeconds"}
    assert nl.eviction_delay(unreachable, [forever]) is None
    assert nl.eviction_delay([], []) is None
    two = unreachable + [{"key": "x", "effect": "NoExecute"}]
    assert nl.eviction_delay(two, [tol]) == 0.0  # one taint untolerated: at once
    assert nl.eviction_delay(two, [tol, {"key": "x", "operator": "Exists", "tolerationSeconds": 5}]) == 5.0


# --- pods/log request rules ------------------------------------------------------------


def test_log_container_choice():
    p = pod()
    assert podlogs.choose_container(p, "") == "c"
    p["spec"]["containers"].append({"name": "d"})
    p["spec"]["initContainers"] = [{"name": "i"}]
    with pytest.raises(st.ApiError) as exc:
        podlogs.choose_container(p, "")
    assert exc.value.code == 400
    assert exc.value.message == "a container name must be specified for pod p, choose one of: [i c d]"
    assert podlogs.choose_container(p, "i") == "i"
    with pytest.raises(st.ApiError) as exc:
        podlogs.choose_container(p, "zz")
    assert exc.value.message == "container zz is not valid for pod p"


def test_log_options_and_agent_location():
    opts = podlogs.parse_log_options({"follow": "true", "tailLines": "5", "sinceTime": "2024-01-01T00:00:00.5Z"}, "p")
    assert opts.agent_query() == {"follow": "true", "sinceTime": "2024-01-01T00:00:00Z", "tailLines": "5"}
    with pytest.raises(st.ApiError) as exc:
        podlogs.parse_log_options({"tailLines": "-1", "sinceSeconds": "5", "sinceTime": "2024-01-01T00:00:00Z"}, "p")
    assert exc.value.code == 422 and exc.value.reason == "Invalid"
    with pytest.raises(st.ApiError) as exc:
        podlogs.parse_log_options({"follow": "maybe"}, "p")
    assert exc.value.code == 400
    n = node("n1")
    n["status"]["addresses"] = [{"type": "Hostname", "address": "host1"}, {"type": "InternalIP", "address": "10.1.2.3"}]
    assert podlogs.agent_location(n) == ("10.1.2.3", names.AGENT_DEFAULT_PORT)
    n["status"]["daemonEndpoints"] = {names.NODE_DAEMON_ENDPOINT_AGENT_FIELD: {"Port": 12345}}
    assert podlogs.agent_location(n) == ("10.1.2.3", 12345)
    n["status"]["addresses"] = []
    with pytest.raises(st.ApiError):
        podlogs.agent_location(n)


def test_agent_errors_become_status():
    e = podlogs.agent_error(400, b"container c in pod p is waiting to start: ContainerCreating", "p")
    assert (e.code, e.reason, e.message) == (
        400,
        "BadRequest",
        "container c in pod p is waiting to start: ContainerCreating",
    )
    e = podlogs.agent_error(404, b"404 page not found", "p")
    assert (e.code, e.reason) == (404, "NotFound")
    assert e.message == "the server could not find the requested resource ( pods/log p)"
    assert podlogs.agent_error(500, b"boom", "p").message == "Internal error occurred: boom"
    assert podlogs.agent_error(418, b"", "p").code == 418


def test_node_lifecycle_and_scheduler_flags():
    from apiserver_min import options

    o = options.parse([])
    assert (o.node_monitor_period, o.node_monitor_grace_period, o.node_startup_grace_period) == (5.0, 40.0, 60.0)
    assert o.enable_scheduler is True
    o = options.parse(["--node-monitor-grace-period=2s", "--node-monitor-period=500ms", "--enable-scheduler=false"])
    assert (o.node_monitor_period, o.node_monitor_grace_period, o.enable_scheduler) == (0.5, 2.0, False)
    with pytest.raises(options.OptionsError, match="--node-monitor-grace-period"):
        options.parse(["--node-monitor-grace-period=0s"])
    with pytest.raises(options.OptionsError, match="--enable-scheduler"):
        options.parse(["--enable-scheduler=maybe"])
