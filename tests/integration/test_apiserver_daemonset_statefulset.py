"""The DaemonSet and StatefulSet controllers in a real orch-apiserver: Nodes are
created as admin (with labels and taints), no agent runs, and a pod's readiness is
written through pods/status as admin."""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
import uuid

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, KUBECTL, ApiServerProcess, Kubectl
from tests.components import free_port
from tests.helpers import wait_for

MERGE = {"Content-Type": names.MEDIA_MERGE_PATCH}
APPS = "/apis/apps/v1"
TIMEOUT = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    # No agent renews these nodes: keep the node lifecycle controller from marking them
    # unreachable during the tests.
    s = ApiServerProcess(
        tmp_path_factory.mktemp("workloads"),
        free_port(),
        extra_args=["--node-monitor-grace-period=600s", "--node-startup-grace-period=600s"],
    )
    with s:
        yield s


@pytest.fixture
def ns(server):
    name = f"wl-{uuid.uuid4().hex[:6]}"
    server.json("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=201)
    return name


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_node(server, name, labels, taints=None):
    ts = now()
    server.json(
        "POST",
        "/api/v1/nodes",
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints or []},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "NodeReady",
                        "message": "ready",
                        "lastHeartbeatTime": ts,
                        "lastTransitionTime": ts,
                    }
                ],
            },
        },
        expect=201,
    )


def pods_of(server, ns, selector):
    _, doc = server.json("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}", expect=200)
    return doc["items"]


def set_ready(server, ns, name, ready=True):
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now()}],
    }
    server.json("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": status}, MERGE, expect=200)


def finish_terminating(server, ns, pods):
    """What the node agent does for a deleted pod: it stops it and removes it for good."""
    for p in pods:
        if p["metadata"].get("deletionTimestamp"):
            server.json(
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": p["metadata"]["uid"]}},
                expect=(200, 404, 409),
            )


def node_of(pod) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return terms[0]["matchFields"][0]["values"][0]


def container(image="busybox:1"):
    return [{"name": "c", "image": image}]


# --- DaemonSet ------------------------------------------------------------------------------


def test_daemonset_one_pod_per_eligible_node_and_rolling_update(server, ns):
    zone = uuid.uuid4().hex[:6]
    sel = {"ds-zone": zone}
    make_node(server, f"{zone}-a", {**sel, "disk": "ssd"})
    make_node(server, f"{zone}-b", {**sel, "disk": "ssd"})
    make_node(server, f"{zone}-c", {**sel, "disk": "hdd"})  # not selected
    make_node(server, f"{zone}-d", {**sel, "disk": "ssd"}, [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    ds = {
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {**sel, "disk": "ssd"}, "containers": container()},
            },
        },
    }
    _, created = server.json("POST", f"{APPS}/namespaces/{ns}/daemonsets", ds, expect=201)
    assert created["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert created["metadata"]["annotations"][names.ANNOTATION_DS_TEMPLATE_GENERATION] == "1"

    pods = wait_for(lambda: (p := pods_of(server, ns, "app=agent")) and len(p) == 2 and p, TIMEOUT, "two daemon pods")
    assert sorted(node_of(p) for p in pods) == [f"{zone}-a", f"{zone}-b"]

    # The scheduler places each on the node its affinity names.
    def all_bound():
        pods = pods_of(server, ns, "app=agent")
        return all(q["spec"].get("nodeName") for q in pods) and pods

    bound = wait_for(all_bound, TIMEOUT, "daemon pods bound")
    assert all(q["spec"]["nodeName"] == node_of(q) for q in bound)
    p0 = pods[0]
    keys = {(t["key"], t["effect"]) for t in p0["spec"]["tolerations"]}
    assert (names.TAINT_NOT_READY, "NoExecute") in keys and (names.TAINT_UNSCHEDULABLE, "NoSchedule") in keys
    assert all("tolerationSeconds" not in t for t in p0["spec"]["tolerations"])
    assert p0["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    hash1 = p0["metadata"]["labels"][names.LABEL_CONTROLLER_REVISION_HASH]
    assert p0["metadata"]["labels"][names.LABEL_POD_TEMPLATE_GENERATION] == "1"
    _, revs = server.json("GET", f"{APPS}/namespaces/{ns}/controllerrevisions", expect=200)
    assert [r["metadata"]["name"] for r in revs["items"]] == [f"agent-{hash1}"]
    assert revs["items"][0]["revision"] == 1

    # A new eligible node gets its pod.
    make_node(server, f"{zone}-e", {**sel, "disk": "ssd"})
    pods = wait_for(lambda: (p := pods_of(server, ns, "app=agent")) and len(p) == 3 and p, TIMEOUT, "three pods")
    for p in pods:
        set_ready(server, ns, p["metadata"]["name"])

    def status():
        _, d = server.json("GET", f"{APPS}/namespaces/{ns}/daemonsets/agent", expect=200)
        return d["status"]

    st = wait_for(lambda: (s := status()).get("numberReady") == 3 and s, TIMEOUT, "ready status")
    assert st["desiredNumberScheduled"] == 3 and st["currentNumberScheduled"] == 3
    assert st["updatedNumberScheduled"] == 3 and st["numberMisscheduled"] == 0
    assert st["numberAvailable"] == 3 and "numberUnavailable" not in st
    assert st["observedGeneration"] == 1

    # A template change rolls through one node at a time (maxUnavailable 1).
    patch = {"spec": {"template": {"spec": {"containers": container("busybox:2")}}}}
    server.json("PATCH", f"{APPS}/namespaces/{ns}/daemonsets/agent", patch, MERGE, expect=200)
    seen_unavailable = set()
    deadline_pods: list = []

    def progressed():
        pods = pods_of(server, ns, "app=agent")
        old = [p for p in pods if p["spec"]["containers"][0]["image"] == "busybox:1"]
        new = [p for p in pods if p["spec"]["containers"][0]["image"] == "busybox:2"]
        live_old = [p for p in old if not p["metadata"].get("deletionTimestamp")]
        seen_unavailable.add(3 - len(live_old) - sum(1 for p in new if p["status"].get("phase") == "Running"))
        for p in new:
            if p["status"].get("phase") != "Running":
                set_ready(server, ns, p["metadata"]["name"])
        deadline_pods[:] = new
        finish_terminating(server, ns, old)
        return len(new) == 3 and not old

    wait_for(progressed, 40, "the rolling update", interval=0.2)
    assert max(seen_unavailable) <= 1
    st = wait_for(
        lambda: (s := status()).get("updatedNumberScheduled") == 3 and s.get("numberReady") == 3 and s, TIMEOUT
    )
    hash2 = deadline_pods[0]["metadata"]["labels"][names.LABEL_CONTROLLER_REVISION_HASH]
    assert hash2 != hash1
    assert deadline_pods[0]["metadata"]["labels"][names.LABEL_POD_TEMPLATE_GENERATION] == "2"
    _, revs = server.json("GET", f"{APPS}/namespaces/{ns}/controllerrevisions", expect=200)
    assert sorted((r["revision"], r["metadata"]["name"]) for r in revs["items"]) == [
        (1, f"agent-{hash1}"),
        (2, f"agent-{hash2}"),
    ]

    # A NoSchedule taint keeps the pod there (misscheduled); a node no longer selected loses it.
    taint = {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}}
    server.json("PATCH", f"/api/v1/nodes/{zone}-a", taint, MERGE, expect=200)
    st = wait_for(lambda: (s := status()).get("numberMisscheduled") == 1 and s, TIMEOUT, "one misscheduled")
    assert st["desiredNumberScheduled"] == 2 and st["currentNumberScheduled"] == 2
    server.json("PATCH", f"/api/v1/nodes/{zone}-b", {"metadata": {"labels": {"disk": "hdd"}}}, MERGE, expect=200)

    def left():
        pods = pods_of(server, ns, "app=agent")
        finish_terminating(server, ns, pods)
        return sorted(node_of(p) for p in pods)

    wait_for(lambda: left() == [f"{zone}-a", f"{zone}-e"], TIMEOUT, "the pod on the unselected node deleted")


def test_daemonset_validation(server, ns):
    bad = {
        "metadata": {"name": "bad"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": container()}},
        },
    }
    code, doc = server.json("POST", f"{APPS}/namespaces/{ns}/daemonsets", bad)
    assert code == 422, doc
    assert doc["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    assert "`selector` does not match template `labels`" in doc["message"]


# --- StatefulSet ---------------------------------------------------------------------------


def sts_body(replicas=3, **spec):
    return {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": container()}},
            **spec,
        },
    }


def names_of(server, ns, live_only=True):
    return sorted(
        p["metadata"]["name"]
        for p in pods_of(server, ns, "app=web")
        if not (live_only and p["metadata"].get("deletionTimestamp"))
    )


def test_statefulset_ordered_create_scale_down_and_partitioned_update(server, ns):
    claims = [
        {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    ]
    _, created = server.json(
        "POST", f"{APPS}/namespaces/{ns}/statefulsets", sts_body(volumeClaimTemplates=claims), expect=201
    )
    assert created["spec"]["podManagementPolicy"] == "OrderedReady"
    assert created["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}

    wait_for(lambda: names_of(server, ns) == ["web-0"], TIMEOUT, "web-0")
    _, pod = server.json("GET", f"/api/v1/namespaces/{ns}/pods/web-0", expect=200)
    assert pod["spec"]["hostname"] == "web-0" and pod["spec"]["subdomain"] == "web"
    assert pod["metadata"]["labels"][names.LABEL_STATEFULSET_POD_NAME] == "web-0"
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}} in pod["spec"]["volumes"]
    _, pvc = server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data-web-0", expect=200)
    assert pvc["metadata"]["labels"] == {"app": "web"}
    # web-1 waits for web-0 to be Running and Ready.
    time.sleep(1.0)
    assert names_of(server, ns) == ["web-0"]
    set_ready(server, ns, "web-0")
    wait_for(lambda: names_of(server, ns) == ["web-0", "web-1"], TIMEOUT, "web-1")
    set_ready(server, ns, "web-1")
    wait_for(lambda: names_of(server, ns) == ["web-0", "web-1", "web-2"], TIMEOUT, "web-2")
    set_ready(server, ns, "web-2")

    def status():
        _, d = server.json("GET", f"{APPS}/namespaces/{ns}/statefulsets/web", expect=200)
        return d["status"]

    st = wait_for(lambda: (s := status()).get("readyReplicas") == 3 and s, TIMEOUT, "3 ready")
    rev1 = st["currentRevision"]
    assert st["updateRevision"] == rev1 and st["currentReplicas"] == 3 and st["updatedReplicas"] == 3
    assert st["availableReplicas"] == 3 and st["replicas"] == 3 and st["collisionCount"] == 0

    # Scale down to 2: web-2 goes, its claim stays (whenScaled: Retain).
    server.json("PATCH", f"{APPS}/namespaces/{ns}/statefulsets/web", {"spec": {"replicas": 2}}, MERGE, expect=200)

    def scaled_down():
        finish_terminating(server, ns, pods_of(server, ns, "app=web"))
        return names_of(server, ns, live_only=False) == ["web-0", "web-1"]

    wait_for(scaled_down, TIMEOUT, "web-2 deleted")
    server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data-web-2", expect=200)
    server.json("PATCH", f"{APPS}/namespaces/{ns}/statefulsets/web", {"spec": {"replicas": 3}}, MERGE, expect=200)
    wait_for(lambda: names_of(server, ns) == ["web-0", "web-1", "web-2"], TIMEOUT, "web-2 again")
    set_ready(server, ns, "web-2")

    # Rolling update with partition 1: web-2 then web-1 are replaced, web-0 is kept.
    patch = {
        "spec": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
            "template": {"spec": {"containers": container("busybox:2")}},
        }
    }
    server.json("PATCH", f"{APPS}/namespaces/{ns}/statefulsets/web", patch, MERGE, expect=200)
    order = []

    def image(name):
        code, p = server.json("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if code != 200 or p["metadata"].get("deletionTimestamp"):
            return None, None
        return p["spec"]["containers"][0]["image"], p

    def rolled():
        finish_terminating(server, ns, pods_of(server, ns, "app=web"))
        for name in ("web-2", "web-1"):
            img, p = image(name)
            if img == "busybox:2" and p["status"].get("phase") != "Running":
                order.append(name)
                set_ready(server, ns, name)
        done = [image(name) for name in ("web-2", "web-1")]
        return all(img == "busybox:2" and p["status"].get("phase") == "Running" for img, p in done)

    wait_for(rolled, 40, "web-2 and web-1 updated", interval=0.2)
    assert order == ["web-2", "web-1"]
    assert image("web-0")[0] == "busybox:1"
    st = wait_for(lambda: (s := status()).get("updatedReplicas") == 2 and s.get("readyReplicas") == 3 and s, TIMEOUT)
    assert st["currentRevision"] == rev1 and st["updateRevision"] != rev1 and st["currentReplicas"] == 1


def test_statefulset_refuses_alpha_fields_and_immutable_spec(server, ns):
    body = sts_body(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 2}})
    code, doc = server.json("POST", f"{APPS}/namespaces/{ns}/statefulsets", body)
    assert code == 422, doc
    assert doc["details"]["causes"][0]["field"] == "spec.updateStrategy.rollingUpdate.maxUnavailable"
    server.json("POST", f"{APPS}/namespaces/{ns}/statefulsets", sts_body(replicas=0), expect=201)
    code, doc = server.json(
        "PATCH", f"{APPS}/namespaces/{ns}/statefulsets/web", {"spec": {"serviceName": "other"}}, MERGE
    )
    assert code == 422, doc
    assert "updates to statefulset spec for fields other than 'replicas'" in doc["message"]


class ReadyPods:
    """Stands in for node agents: every pod of the namespace turns Running and Ready, and
    deleted pods are removed for good."""

    def __init__(self, server, ns):
        self.server, self.ns = server, ns
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.2):
            try:
                pods = pods_of(self.server, self.ns, "")
                finish_terminating(self.server, self.ns, pods)
                for p in pods:
                    if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") != "Running":
                        set_ready(self.server, self.ns, p["metadata"]["name"])
            except Exception:  # noqa: BLE001 - the next round tries again
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def test_kubectl_rollout_status(server, ns, tmp_path):
    if not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    kubectl = Kubectl(server, tmp_path)
    zone = uuid.uuid4().hex[:6]
    make_node(server, f"{zone}-a", {"rollout-zone": zone})
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"rollout-zone": zone}, "containers": container()},
            },
        },
    }
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", **sts_body(replicas=2)}
    sts["metadata"]["namespace"] = ns
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [ds, sts]}), check=True)
    with ReadyPods(server, ns):
        out = kubectl("rollout", "status", "daemonset/agent", "-n", ns, "--timeout=30s", timeout=40, check=True)
        assert 'daemon set "agent" successfully rolled out' in out.stdout
        kubectl("set", "image", "daemonset/agent", "c=busybox:2", "-n", ns, check=True)
        kubectl("rollout", "status", "daemonset/agent", "-n", ns, "--timeout=30s", timeout=40, check=True)
        kubectl("rollout", "undo", "daemonset/agent", "-n", ns, check=True)
        out = kubectl("rollout", "status", "daemonset/agent", "-n", ns, "--timeout=30s", timeout=40, check=True)
        assert 'daemon set "agent" successfully rolled out' in out.stdout
        wait_for(
            lambda: [p["spec"]["containers"][0]["image"] for p in pods_of(server, ns, "app=agent")] == ["busybox:1"],
            TIMEOUT,
            "the daemon pod back at busybox:1",
        )
        out = kubectl("rollout", "history", "daemonset/agent", "-n", ns, check=True)
        assert out.stdout.split()[-4:] == ["2", "<none>", "3", "<none>"], out.stdout
        out = kubectl("rollout", "status", "statefulset/web", "-n", ns, "--timeout=30s", timeout=40, check=True)
        assert "partitioned roll out complete: 2 new pods have been updated..." in out.stdout
        kubectl("set", "image", "statefulset/web", "c=busybox:2", "-n", ns, check=True)
        out = kubectl("rollout", "status", "statefulset/web", "-n", ns, "--timeout=30s", timeout=40, check=True)
        assert "partitioned roll out complete: 2 new pods have been updated..." in out.stdout
        out = kubectl("rollout", "history", "statefulset/web", "-n", ns, check=True)
        assert out.stdout.split()[-4:] == ["1", "<none>", "2", "<none>"], out.stdout
        # Back to the first template: its revision becomes the newest (3), with the pods.
        kubectl("rollout", "undo", "statefulset/web", "-n", ns, check=True)
        kubectl("rollout", "status", "statefulset/web", "-n", ns, "--timeout=30s", timeout=40, check=True)
        wait_for(
            lambda: {p["spec"]["containers"][0]["image"] for p in pods_of(server, ns, "app=web")} == {"busybox:1"},
            TIMEOUT,
            "the pods back at busybox:1",
        )
    out = kubectl("rollout", "history", "statefulset/web", "-n", ns, check=True)
    assert out.stdout.split()[-4:] == ["2", "<none>", "3", "<none>"], out.stdout


def test_statefulset_parallel_with_claims_deleted_on_scale_down(server, ns):
    claims = [
        {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    ]
    body = sts_body(
        podManagementPolicy="Parallel",
        volumeClaimTemplates=claims,
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"},
    )
    make_node(server, f"claims-{uuid.uuid4().hex[:6]}", {})
    server.json("POST", f"{APPS}/namespaces/{ns}/statefulsets", body, expect=201)
    # Parallel: all three at once, none waiting for another.
    wait_for(lambda: names_of(server, ns) == ["web-0", "web-1", "web-2"], TIMEOUT, "three pods at once")
    # Each pod's claim, made from the template before the pod.
    wait_for(
        lambda: (
            sorted(
                c["metadata"]["name"]
                for c in server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", expect=200)[1]["items"]
            )
            == ["data-web-0", "data-web-1", "data-web-2"]
        ),
        TIMEOUT,
        "three claims",
    )
    server.json("PATCH", f"{APPS}/namespaces/{ns}/statefulsets/web", {"spec": {"replicas": 1}}, MERGE, expect=200)

    def claims_left():
        finish_terminating(server, ns, pods_of(server, ns, "app=web"))
        _, doc = server.json("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", expect=200)
        return sorted(c["metadata"]["name"] for c in doc["items"] if not c["metadata"].get("deletionTimestamp"))

    wait_for(lambda: claims_left() == ["data-web-0"], TIMEOUT, "the scaled-down pods' claims deleted")
    assert names_of(server, ns) == ["web-0"]


def test_daemonset_replaces_a_failed_pod(server, ns):
    zone = uuid.uuid4().hex[:6]
    make_node(server, f"{zone}-a", {"fail-zone": zone})
    ds = {
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"fail-zone": zone}, "containers": container()},
            },
        },
    }
    server.json("POST", f"{APPS}/namespaces/{ns}/daemonsets", ds, expect=201)
    (pod,) = wait_for(lambda: pods_of(server, ns, "app=agent"), TIMEOUT, "the daemon pod")
    server.json(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status",
        {"status": {"phase": "Failed"}},
        MERGE,
        expect=200,
    )

    def replaced():
        pods = pods_of(server, ns, "app=agent")
        finish_terminating(server, ns, pods)
        return [p for p in pods if p["metadata"]["uid"] != pod["metadata"]["uid"]]

    (new,) = wait_for(replaced, TIMEOUT, "a new daemon pod")
    # OnDelete: a template change leaves the pod alone until it is deleted.
    patch = {"spec": {"template": {"spec": {"containers": container("busybox:2")}}}}
    server.json("PATCH", f"{APPS}/namespaces/{ns}/daemonsets/agent", patch, MERGE, expect=200)
    wait_for(
        lambda: (
            server.json("GET", f"{APPS}/namespaces/{ns}/daemonsets/agent")[1]["status"].get("observedGeneration") == 2
        ),
        TIMEOUT,
        "the change observed",
    )
    time.sleep(0.5)
    assert [p["metadata"]["uid"] for p in pods_of(server, ns, "app=agent")] == [new["metadata"]["uid"]]
    server.json(
        "DELETE", f"/api/v1/namespaces/{ns}/pods/{new['metadata']['name']}", {"gracePeriodSeconds": 0}, expect=200
    )
    wait_for(
        lambda: [p["spec"]["containers"][0]["image"] for p in pods_of(server, ns, "app=agent")] == ["busybox:2"],
        TIMEOUT,
        "the pod made again from the new template",
    )
    _, events = server.json("GET", f"/api/v1/namespaces/{ns}/events", expect=200)
    reasons = {e["reason"] for e in events["items"] if e["involvedObject"]["kind"] == "DaemonSet"}
    assert {"SuccessfulCreate", "FailedDaemonPod", "SuccessfulDelete"} <= reasons


def test_daemonset_surge_starts_the_new_pod_before_deleting_the_old(server, ns):
    zone = uuid.uuid4().hex[:6]
    make_node(server, f"{zone}-a", {"surge-zone": zone})
    ds = {
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"surge-zone": zone}, "containers": container()},
            },
        },
    }
    server.json("POST", f"{APPS}/namespaces/{ns}/daemonsets", ds, expect=201)
    (old,) = wait_for(lambda: pods_of(server, ns, "app=agent"), TIMEOUT, "the daemon pod")
    set_ready(server, ns, old["metadata"]["name"])
    wait_for(
        lambda: server.json("GET", f"{APPS}/namespaces/{ns}/daemonsets/agent")[1]["status"].get("numberAvailable"),
        TIMEOUT,
        "available",
    )
    patch = {"spec": {"template": {"spec": {"containers": container("busybox:2")}}}}
    server.json("PATCH", f"{APPS}/namespaces/{ns}/daemonsets/agent", patch, MERGE, expect=200)
    both = wait_for(lambda: (p := pods_of(server, ns, "app=agent")) and len(p) == 2 and p, TIMEOUT, "a surge pod")
    new = next(p for p in both if p["metadata"]["uid"] != old["metadata"]["uid"])
    assert new["spec"]["containers"][0]["image"] == "busybox:2"
    time.sleep(0.5)  # the old pod stays while the new one is not ready
    assert all(not p["metadata"].get("deletionTimestamp") for p in pods_of(server, ns, "app=agent"))
    set_ready(server, ns, new["metadata"]["name"])

    def only_new():
        pods = pods_of(server, ns, "app=agent")
        finish_terminating(server, ns, pods)
        return [p["metadata"]["uid"] for p in pods] == [new["metadata"]["uid"]]

    wait_for(only_new, TIMEOUT, "the old pod deleted once the new one is ready")
