"""The workload controllers on a real node: orch-apiserver, an orch-agent joined to it on
the session's containerd, and kubectl. One cluster for the module; its tests run in
order and build on each other (the Deployment of the first is rolled, then drained).

The CronJob and the Jobs are created with the cluster, so that their waits (the next
minute, the failing Job's back-off) overlap the other tests: the last test checks the
CronJob's first Job came within 70 s."""

from __future__ import annotations

import datetime as _dt
import threading
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from tests.apiserver_fixtures import ApiServerProcess
from tests.components import free_port
from tests.e2e.harness import NODE, Cluster, new_cgroup_root

IMAGE = "orch.local/busybox:1"
# PID 1 of a container ignores SIGTERM unless it handles it: these stop at once.
SERVE = "trap 'exit 0' TERM; while :; do sleep 1; done"

DAEMON_SET = f"""
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{{name: c, image: "{IMAGE}", command: [sh, -c, "{SERVE}"]}}]
"""

JOBS = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: fails}}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: "{IMAGE}", command: [sh, -c, "exit 3"]}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: works}}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: "{IMAGE}", command: [sh, -c, "echo done"]}}]
"""

BUDGET = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
"""


def unset_dropped(value):
    """``value`` without null and empty-object members: kubectl sends what it read back
    through typed structs (``creationTimestamp: null``, ``resources: {}``), which mean unset."""
    if isinstance(value, dict):
        out = {k: unset_dropped(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [unset_dropped(v) for v in value]
    return value


def _time(text: str) -> _dt.datetime:
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc)


@pytest.fixture(scope="module")
def cluster(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("deploy-cluster")
    (work / "manifests").mkdir()
    with ApiServerProcess(str(work / "api"), free_port(), extra_args=["--enable-bootstrap-token-auth"]) as api:
        c = Cluster(work, api, containerd, new_cgroup_root("orch-deploy"))
        c.start_agent(c.agent_argv(c.token()))
        c.wait(lambda: c.node_ready() == "True", 30, "node Ready")
        c.kubectl("create", "cronjob", "tick", f"--image={IMAGE}", "--schedule=*/1 * * * *", "--", "true")
        apply(c, JOBS)
        yield c
        # The agent must see every pod go before it stops (sleeping containers would stay).
        c.kubectl("delete", "cronjobs,jobs,daemonsets,deployments,poddisruptionbudgets", "--all", check=False)
        c.kubectl("uncordon", NODE, check=False)
        c.wait(lambda: not (c.get("pods") or {"items": [1]})["items"], 90, "every pod gone")
        c.stop_agent()
        c.cleanup()


def apply(cluster: Cluster, manifest: str) -> None:
    path = cluster.work / f"m-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(manifest)
    cluster.kubectl("apply", "-f", str(path))


def is_ready(p: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])


def running(cluster: Cluster, n: int, selector: str = "app=web"):
    pods = cluster.get("pods", "-l", selector)
    items = [p for p in (pods or {}).get("items", []) if not p["metadata"].get("deletionTimestamp")]
    ok = len(items) == n and all(p["status"].get("phase") == "Running" and is_ready(p) for p in items)
    return items if ok else None


class _Watch:
    """A watch of the ``app=web`` objects of one kind in a thread (the Python client on the
    admin orchconfig), from the resourceVersion of a first list; ``_note`` keeps the figures."""

    def __init__(self, list_fn, listed) -> None:
        self.stopped, self.error = False, None
        self.watch = k8s_watch.Watch()
        self.thread = threading.Thread(target=self._run, args=(list_fn, listed.metadata.resource_version), daemon=True)
        self.thread.start()

    def _run(self, list_fn, rv: str) -> None:
        stream = self.watch.stream(
            list_fn, "default", label_selector="app=web", resource_version=rv, timeout_seconds=180
        )
        try:
            for ev in stream:
                self._note(ev)
        except Exception as exc:  # the connection went away: fine only after stop()
            if not self.stopped:
                self.error = exc

    def _note(self, ev: dict) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped = True
        self.watch.stop()  # takes effect at the next event; the thread is a daemon


class PodWatch(_Watch):
    """The fewest ready and the most live (not terminating) ``app=web`` pods seen at any moment."""

    def __init__(self, cluster: Cluster):
        api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=cluster.kubeconfig))
        listed = api.list_namespaced_pod("default", label_selector="app=web")
        self.pods = {p.metadata.name: p for p in listed.items}
        self.min_ready, self.max_live, self.events = 10**6, 0, 0
        super().__init__(api.list_namespaced_pod, listed)

    def _note(self, ev: dict) -> None:
        pod = ev["object"]
        self.events += 1
        if ev["type"] == "DELETED":
            self.pods.pop(pod.metadata.name, None)
        else:
            self.pods[pod.metadata.name] = pod
        live = [p for p in self.pods.values() if p.metadata.deletion_timestamp is None]
        ready = [p for p in live if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        self.min_ready = min(self.min_ready, len(ready))
        self.max_live = max(self.max_live, len(live))


class ReplicaSetWatch(_Watch):
    """The largest sum of the ``app=web`` ReplicaSets' ``spec.replicas`` seen at any moment,
    which is what maxSurge bounds (upstream's deployment controller counts replicas, not
    pods: a pod the ReplicaSet controller has not yet deleted may briefly sit beside a new one)."""

    def __init__(self, cluster: Cluster):
        api = k8s.AppsV1Api(k8s_config.new_client_from_config(config_file=cluster.kubeconfig))
        listed = api.list_namespaced_replica_set("default", label_selector="app=web")
        self.sets = {r.metadata.name: r.spec.replicas or 0 for r in listed.items}
        self.max_replicas = sum(self.sets.values())
        super().__init__(api.list_namespaced_replica_set, listed)

    def _note(self, ev: dict) -> None:
        rs = ev["object"]
        if ev["type"] == "DELETED":
            self.sets.pop(rs.metadata.name, None)
        else:
            self.sets[rs.metadata.name] = rs.spec.replicas or 0
        self.max_replicas = max(self.max_replicas, sum(self.sets.values()))


def test_deployment_runs_and_scales_on_containerd(cluster):
    cluster.kubectl("create", "deployment", "web", f"--image={IMAGE}", "--replicas=2", "--", "sh", "-c", SERVE)
    pods = cluster.wait(lambda: running(cluster, 2), 60, "2 pods Running")
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    cluster.kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    cluster.kubectl("scale", "deployment/web", "--replicas=3")
    cluster.wait(lambda: running(cluster, 3), 60, "3 pods Running")
    d = cluster.wait(
        lambda: (d := cluster.get("deployment", "web")) and d["status"].get("availableReplicas") == 3 and d,
        20,
        "3 available",
    )
    assert d["status"]["readyReplicas"] == 3
    assert "3/3" in cluster.kubectl("get", "deployment", "web").stdout


def test_set_env_rolls_out_within_max_unavailable_and_undo_restores(cluster):
    """maxSurge 1, maxUnavailable 1 over 3 replicas: a watch of the pods never sees fewer
    than 2 ready nor more than 4 live while ``kubectl set env`` rolls out and
    ``kubectl rollout undo`` rolls back."""
    cluster.kubectl(
        "patch",
        "deployment/web",
        "--type=merge",
        "-p",
        '{"spec":{"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":1}}}}',
    )
    before = cluster.get("deployment", "web")["spec"]["template"]
    watch = PodWatch(cluster)
    sets = ReplicaSetWatch(cluster)
    try:
        cluster.kubectl("set", "env", "deployment/web", "GREETING=hello")
        cluster.kubectl("rollout", "status", "deployment/web", "--timeout=90s", timeout=100)
        pods = cluster.wait(lambda: running(cluster, 3), 30, "3 new pods Running")
        for p in pods:
            assert {"name": "GREETING", "value": "hello"} in p["spec"]["containers"][0]["env"]
        history = cluster.kubectl("rollout", "history", "deployment/web").stdout
        assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"], history

        cluster.kubectl("rollout", "undo", "deployment/web")
        cluster.kubectl("rollout", "status", "deployment/web", "--timeout=90s", timeout=100)
        pods = cluster.wait(lambda: running(cluster, 3), 30, "3 restored pods Running")
    finally:
        watch.stop()
        sets.stop()
    assert unset_dropped(cluster.get("deployment", "web")["spec"]["template"]) == unset_dropped(before)
    assert all("env" not in p["spec"]["containers"][0] for p in pods)
    assert watch.events > 0 and watch.error is None, watch.error
    assert watch.min_ready >= 2, f"only {watch.min_ready} ready at one point (maxUnavailable 1 of 3)"
    assert sets.error is None, sets.error
    assert sets.max_replicas <= 4, f"{sets.max_replicas} replicas at one point (maxSurge 1 over 3)"
    # Pods may briefly outnumber replicas by the one an old ReplicaSet has yet to delete.
    assert watch.max_live <= 5, f"{watch.max_live} pods at one point (maxSurge 1 over 3, one deletion pending)"


def test_jobs_complete_and_stop_at_the_backoff_limit(cluster):
    cluster.kubectl("wait", "--for=condition=Complete", "job/works", "--timeout=60s", timeout=70)
    job = cluster.get("job", "works")
    assert job["status"]["succeeded"] == 3 and not job["status"].get("failed")

    cluster.kubectl("wait", "--for=condition=Failed", "job/fails", "--timeout=60s", timeout=70)
    job = cluster.get("job", "fails")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded", failed
    # backoffLimit 1: the first failure is retried once, and no pod runs after the second.
    pods = cluster.get("pods", "-l", "job-name=fails")["items"]
    assert len(pods) == 2 and job["status"]["failed"] == 2, [p["status"].get("phase") for p in pods]
    assert all(p["status"]["phase"] == "Failed" for p in pods)
    assert not job["status"].get("active")


def test_daemonset_runs_a_pod_on_the_node(cluster):
    apply(cluster, DAEMON_SET)
    pods = cluster.wait(lambda: running(cluster, 1, "app=agent"), 60, "the daemon pod Running")
    assert pods[0]["spec"]["nodeName"] == NODE
    out = cluster.kubectl("rollout", "status", "daemonset/agent", "--timeout=30s").stdout
    assert 'daemon set "agent" successfully rolled out' in out


def test_drain_evicts_within_the_budget_then_waits_and_uncordon_brings_pods_back(cluster):
    apply(cluster, BUDGET)
    cluster.wait(
        lambda: (b := cluster.get("pdb", "web")) and b.get("status", {}).get("disruptionsAllowed") == 1,
        20,
        "the budget allowing one disruption",
    )
    res = cluster.kubectl("drain", NODE, "--ignore-daemonsets", "--timeout=8s", check=False, timeout=60)
    assert res.returncode != 0, res.stdout
    said = res.stdout + res.stderr
    evicted = [line for line in said.splitlines() if line.startswith("pod/web-") and line.endswith(" evicted")]
    assert len(evicted) == 1, said
    assert "Cannot evict pod as it would violate the pod's disruption budget." in res.stderr
    pods = [p for p in cluster.get("pods", "-l", "app=web")["items"] if not p["metadata"].get("deletionTimestamp")]
    assert sorted(p["status"]["phase"] for p in pods) == ["Pending", "Running", "Running"], pods
    assert cluster.get("node", NODE)["spec"].get("unschedulable") is True
    assert running(cluster, 1, "app=agent")  # --ignore-daemonsets left it

    cluster.kubectl("uncordon", NODE)
    cluster.wait(lambda: running(cluster, 3), 60, "3 pods Running again")


def test_cronjob_every_minute_creates_a_job_within_70_seconds(cluster):
    cron = cluster.get("cronjob", "tick")
    created = _time(cron["metadata"]["creationTimestamp"])
    deadline = max(0.0, (created + _dt.timedelta(seconds=70) - _dt.datetime.now(_dt.timezone.utc)).total_seconds())

    def first_job():
        jobs = (cluster.get("jobs") or {}).get("items", [])
        return [j for j in jobs if any(o["name"] == "tick" for o in j["metadata"].get("ownerReferences", []))]

    jobs = cluster.wait(first_job, deadline + 1, "a Job of the CronJob")
    first = min(_time(j["metadata"]["creationTimestamp"]) for j in jobs)
    assert (first - created).total_seconds() <= 70, (created, first)
    cron = cluster.get("cronjob", "tick")
    assert cron["status"].get("lastScheduleTime")
