"""The ReplicaSet, ReplicationController and Deployment controllers in a real
orch-apiserver, driven by kubectl. No node agent runs: a pod's readiness is written
through ``pods/status`` as the administrator, as an agent would report it."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import Kubectl, create_namespace, kubectl_binary
from tests.helpers import uniq, wait_for

HASH = names.LABEL_POD_TEMPLATE_HASH
REVISION = names.ANNOTATION_DEPLOYMENT_REVISION
MERGE = {"Content-Type": names.MEDIA_MERGE_PATCH}
IMAGE = "orch.local/busybox:1"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@pytest.fixture(scope="module")
def ns(apiserver):
    name = uniq("wl")
    create_namespace(apiserver, name)
    return name


def pods_path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def apps_path(ns: str, resource: str, name: str = "") -> str:
    return f"/apis/apps/v1/namespaces/{ns}/{resource}" + (f"/{name}" if name else "")


def list_pods(server, ns: str, selector: str) -> list[dict]:
    _, doc = server.json("GET", f"{pods_path(ns)}?labelSelector={selector}", expect=200)
    return doc["items"]


def live(pods: list[dict]) -> list[dict]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def mark_ready(server, pod: dict) -> None:
    body = {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
        }
    }
    md = pod["metadata"]
    server.json("PATCH", f"{pods_path(md['namespace'])}/{md['name']}/status", body, headers=MERGE, expect=(200, 404))


def ready_all(server, ns: str, selector: str, n: int, timeout: float = 15) -> list[dict]:
    """Wait for ``n`` live pods, mark each ready."""
    pods = wait_for(lambda: (p := live(list_pods(server, ns, selector))) and len(p) == n and p, timeout, f"{n} pods")
    for p in pods:
        if not is_ready(p):
            mark_ready(server, p)
    return pods


def get(server, path: str) -> dict:
    return server.json("GET", path, expect=200)[1]


def replica_sets(server, ns: str, selector: str) -> list[dict]:
    return server.json("GET", f"{apps_path(ns, 'replicasets')}?labelSelector={selector}", expect=200)[1]["items"]


def deployment_done(server, ns: str, name: str, want: int) -> dict | None:
    d = get(server, apps_path(ns, "deployments", name))
    s = d.get("status", {})
    ok = (
        s.get("observedGeneration", 0) >= d["metadata"]["generation"]
        and s.get("updatedReplicas", 0) == want
        and s.get("replicas", 0) == want
        and s.get("availableReplicas", 0) == want
    )
    return d if ok else None


def test_deployment_gets_one_replica_set_and_its_pods(apiserver, kubectl, ns):
    kubectl(
        "-n", ns, "create", "deployment", "web", f"--image={IMAGE}", "--replicas=3", "--", "sleep", "3600", check=True
    )
    rss = wait_for(lambda: replica_sets(apiserver, ns, "app=web"), 10, "a replica set")
    assert len(rss) == 1
    rs = rss[0]
    pod_hash = rs["metadata"]["labels"][HASH]
    assert rs["metadata"]["name"] == f"web-{pod_hash}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", HASH: pod_hash}
    assert rs["spec"]["template"]["metadata"]["labels"] == {"app": "web", HASH: pod_hash}
    ann = rs["metadata"]["annotations"]
    # maxSurge 25% of 3 rounds up to 1
    assert ann[REVISION] == "1"
    assert ann[names.ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS] == "3"
    assert ann[names.ANNOTATION_DEPLOYMENT_MAX_REPLICAS] == "4"
    owner = rs["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Deployment", "web", True)

    pods = ready_all(apiserver, ns, "app=web", 3)
    for p in pods:
        assert p["metadata"]["labels"] == {"app": "web", HASH: pod_hash}
        assert p["metadata"]["name"].startswith(f"web-{pod_hash}-")
        ref = p["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"])

    d = wait_for(lambda: deployment_done(apiserver, ns, "web", 3), 15, "deployment complete")
    assert d["metadata"]["annotations"][REVISION] == "1"
    conds = {c["type"]: c for c in d["status"]["conditions"]}
    assert (conds["Available"]["status"], conds["Available"]["reason"]) == ("True", "MinimumReplicasAvailable")
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("True", "NewReplicaSetAvailable")
    assert conds["Progressing"]["message"] == f'ReplicaSet "web-{pod_hash}" has successfully progressed.'
    rs = get(apiserver, apps_path(ns, "replicasets", rs["metadata"]["name"]))
    assert rs["status"] == {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "observedGeneration": 1,
    }
    out = kubectl("-n", ns, "rollout", "status", "deployment/web", "--timeout=20s", check=True)
    assert "successfully rolled out" in out.stdout
    events = get(apiserver, f"/api/v1/namespaces/{ns}/events")["items"]
    reasons = {(e["involvedObject"]["kind"], e["reason"]) for e in events}
    assert ("Deployment", "ScalingReplicaSet") in reasons
    assert ("ReplicaSet", "SuccessfulCreate") in reasons


def test_scale_up_and_down(apiserver, kubectl, ns):
    kubectl("-n", ns, "scale", "deployment/web", "--replicas=5", check=True)
    ready_all(apiserver, ns, "app=web", 5)
    wait_for(lambda: deployment_done(apiserver, ns, "web", 5), 15, "scaled to 5")
    (rs,) = replica_sets(apiserver, ns, "app=web")
    assert rs["metadata"]["annotations"][names.ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS] == "5"
    kubectl("-n", ns, "scale", "deployment/web", "--replicas=1", check=True)
    wait_for(lambda: len(live(list_pods(apiserver, ns, "app=web"))) == 1, 15, "scaled to 1")
    wait_for(lambda: deployment_done(apiserver, ns, "web", 1), 15, "deployment at 1")
    events = get(apiserver, f"/api/v1/namespaces/{ns}/events")["items"]
    messages = [e["message"] for e in events if e["reason"] == "ScalingReplicaSet"]
    assert f"Scaled down replica set {rs['metadata']['name']} to 1 from 5" in messages


class PodWatch:
    """Every pod of a selector as a watch shows it; ``worst`` the fewest ready and the
    most live pods seen at any moment."""

    def __init__(self, server, ns: str, selector: str):
        items = list_pods(server, ns, selector)
        rv = server.json("GET", f"{pods_path(ns)}?labelSelector={selector}", expect=200)[1]["metadata"][
            "resourceVersion"
        ]
        self.pods = {p["metadata"]["name"]: p for p in items}
        self.min_ready = 10**6
        self.max_live = 0
        self.stream = server.watch(
            f"{pods_path(ns)}?watch=true&labelSelector={selector}&resourceVersion={rv}", timeout=60
        )
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                ev = self.stream.next()
            except (OSError, AttributeError, ValueError):
                return  # closed under the reader
            if ev is None:
                return
            name = ev["object"]["metadata"]["name"]
            if ev["type"] == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = ev["object"]
            alive = live(list(self.pods.values()))
            self.min_ready = min(self.min_ready, sum(1 for p in alive if is_ready(p)))
            self.max_live = max(self.max_live, len(alive))

    def close(self) -> None:
        self._stop = True
        sock = self.stream.conn.sock
        if sock is not None:
            # Wakes the reader blocked in recv (closing the TLS socket under it would wait for it).
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        self._thread.join(5)
        self.stream.close()


def test_rolling_update_keeps_availability_and_undo_restores(apiserver, kubectl, ns):
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "roll"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "roll"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "roll"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]},
            },
        },
    }
    apiserver.json("POST", apps_path(ns, "deployments"), body, expect=201)
    ready_all(apiserver, ns, "app=roll", 4)
    wait_for(lambda: deployment_done(apiserver, ns, "roll", 4), 15, "first rollout")

    watch = PodWatch(apiserver, ns, "app=roll")
    try:
        kubectl("-n", ns, "set", "image", "deployment/roll", "c=orch.local/busybox:2", check=True)

        def step():
            for p in live(list_pods(apiserver, ns, "app=roll")):
                if not is_ready(p):
                    mark_ready(apiserver, p)
            return deployment_done(apiserver, ns, "roll", 4)

        wait_for(step, 30, "second rollout", interval=0.2)
        time.sleep(0.3)
    finally:
        watch.close()
    # never fewer than 4 - maxUnavailable ready, never more than 4 + maxSurge pods; both budgets used
    assert watch.min_ready == 3, f"{watch.min_ready} ready at one point (maxUnavailable 1 of 4)"
    assert watch.max_live == 5, f"{watch.max_live} pods at one point (maxSurge 1 over 4)"
    images = {p["spec"]["containers"][0]["image"] for p in live(list_pods(apiserver, ns, "app=roll"))}
    assert images == {"orch.local/busybox:2"}
    rss = replica_sets(apiserver, ns, "app=roll")
    assert sorted((r["metadata"]["annotations"][REVISION], r["spec"]["replicas"]) for r in rss) == [("1", 0), ("2", 4)]

    history = kubectl("-n", ns, "rollout", "history", "deployment/roll", check=True).stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    kubectl("-n", ns, "rollout", "undo", "deployment/roll", check=True)

    def undone():
        for p in live(list_pods(apiserver, ns, "app=roll")):
            if not is_ready(p):
                mark_ready(apiserver, p)
        return deployment_done(apiserver, ns, "roll", 4)

    d = wait_for(undone, 30, "rollback", interval=0.2)
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert HASH not in d["spec"]["template"]["metadata"]["labels"]
    assert d["metadata"]["annotations"][REVISION] == "3"
    assert names.ANNOTATION_DEPLOYMENT_DESIRED_REPLICAS not in d["metadata"]["annotations"]
    rss = replica_sets(apiserver, ns, "app=roll")
    # the first ReplicaSet came back as revision 3, remembering it was 1
    back = next(r for r in rss if r["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE)
    assert back["metadata"]["annotations"][REVISION] == "3"
    assert back["metadata"]["annotations"][names.ANNOTATION_DEPLOYMENT_REVISION_HISTORY] == "1"
    assert back["spec"]["replicas"] == 4
    kubectl("-n", ns, "rollout", "status", "deployment/roll", "--timeout=20s", check=True)


def test_pause_resume_and_restart(apiserver, kubectl, ns):
    kubectl("-n", ns, "create", "deployment", "pz", f"--image={IMAGE}", "--replicas=2", "--", "sleep", "1", check=True)
    ready_all(apiserver, ns, "app=pz", 2)
    wait_for(lambda: deployment_done(apiserver, ns, "pz", 2), 15, "rollout")
    kubectl("-n", ns, "rollout", "pause", "deployment/pz", check=True)
    kubectl("-n", ns, "set", "image", "deployment/pz", "busybox=orch.local/busybox:2", check=True)

    def paused_cond():
        d = get(apiserver, apps_path(ns, "deployments", "pz"))
        c = [c for c in d["status"].get("conditions", []) if c["type"] == "Progressing"]
        return c and c[0]["reason"] == "DeploymentPaused" and d

    d = wait_for(paused_cond, 10, "paused condition")
    assert d["status"]["observedGeneration"] == d["metadata"]["generation"]
    assert len(replica_sets(apiserver, ns, "app=pz")) == 1  # no rollout while paused
    kubectl("-n", ns, "rollout", "resume", "deployment/pz", check=True)
    wait_for(lambda: len(replica_sets(apiserver, ns, "app=pz")) == 2, 10, "rollout after resume")

    def settle():
        for p in live(list_pods(apiserver, ns, "app=pz")):
            if not is_ready(p):
                mark_ready(apiserver, p)
        return deployment_done(apiserver, ns, "pz", 2)

    wait_for(settle, 30, "resumed rollout", interval=0.2)
    kubectl("-n", ns, "rollout", "restart", "deployment/pz", check=True)
    wait_for(lambda: len(replica_sets(apiserver, ns, "app=pz")) == 3, 10, "restart makes a new replica set")
    wait_for(settle, 30, "restarted rollout", interval=0.2)


def test_recreate_stops_old_pods_first(apiserver, ns):
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "rec"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "rec"}},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": {"app": "rec"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE}]},
            },
        },
    }
    apiserver.json("POST", apps_path(ns, "deployments"), body, expect=201)
    ready_all(apiserver, ns, "app=rec", 2)
    wait_for(lambda: deployment_done(apiserver, ns, "rec", 2), 15, "first rollout")
    watch = PodWatch(apiserver, ns, "app=rec")
    try:
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "orch.local/busybox:2"}]}}}}
        apiserver.json("PATCH", apps_path(ns, "deployments", "rec"), patch, headers=MERGE, expect=200)

        def step():
            for p in live(list_pods(apiserver, ns, "app=rec")):
                if not is_ready(p):
                    mark_ready(apiserver, p)
            return deployment_done(apiserver, ns, "rec", 2)

        wait_for(step, 30, "recreate rollout", interval=0.2)
    finally:
        watch.close()
    assert watch.min_ready == 0 and watch.max_live <= 2


def test_replica_set_adopts_orphans_and_releases_relabelled_pods(apiserver, ns):
    orphan = {
        "metadata": {"name": "orphan-1", "labels": {"app": "orph"}},
        "spec": {"containers": [{"name": "c", "image": IMAGE}]},
    }
    apiserver.json("POST", pods_path(ns), orphan, expect=201)
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "orph"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "orph"}},
            "template": {
                "metadata": {"labels": {"app": "orph"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE}]},
            },
        },
    }
    _, created = apiserver.json("POST", apps_path(ns, "replicasets"), rs, expect=201)
    pods = wait_for(
        lambda: (
            (p := live(list_pods(apiserver, ns, "app=orph")))
            and len(p) == 2
            and all(x["metadata"].get("ownerReferences") for x in p)
            and p
        ),
        10,
        "orphan adopted and one more made",
    )
    names_ = {p["metadata"]["name"] for p in pods}
    assert "orphan-1" in names_
    adopted = next(p for p in pods if p["metadata"]["name"] == "orphan-1")
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]

    apiserver.json(
        "PATCH", f"{pods_path(ns)}/orphan-1", {"metadata": {"labels": {"app": "gone"}}}, headers=MERGE, expect=200
    )
    wait_for(
        lambda: not get(apiserver, f"{pods_path(ns)}/orphan-1")["metadata"].get("ownerReferences"),
        10,
        "relabelled pod released",
    )
    wait_for(lambda: len(live(list_pods(apiserver, ns, "app=orph"))) == 2, 10, "replacement pod")


def test_replica_failure_condition_while_creates_fail(apiserver, ns):
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "nosa"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "nosa"}},
            "template": {
                "metadata": {"labels": {"app": "nosa"}},
                "spec": {"serviceAccountName": "later", "containers": [{"name": "c", "image": IMAGE}]},
            },
        },
    }
    apiserver.json("POST", apps_path(ns, "replicasets"), rs, expect=201)

    def failure():
        s = get(apiserver, apps_path(ns, "replicasets", "nosa")).get("status", {})
        return next((c for c in s.get("conditions", []) if c["type"] == "ReplicaFailure"), None)

    cond = wait_for(failure, 10, "ReplicaFailure")
    assert (cond["status"], cond["reason"]) == ("True", "FailedCreate")
    assert "later" in cond["message"]
    events = get(apiserver, f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e["reason"] == "FailedCreate" and e["involvedObject"]["name"] == "nosa" for e in events)
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "later"}}, expect=201)
    wait_for(lambda: len(live(list_pods(apiserver, ns, "app=nosa"))) == 2, 20, "pods once the account exists")
    wait_for(lambda: failure() is None, 10, "ReplicaFailure removed")


def test_replication_controller_keeps_its_pods(apiserver, kubectl, ns):
    rc = {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": "rc1"},
        "spec": {
            "replicas": 2,
            "selector": {"app": "rc1"},
            "template": {
                "metadata": {"labels": {"app": "rc1"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE}]},
            },
        },
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/replicationcontrollers", rc, expect=201)
    pods = ready_all(apiserver, ns, "app=rc1", 2)
    ref = pods[0]["metadata"]["ownerReferences"][0]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("v1", "ReplicationController", "rc1")
    wait_for(
        lambda: (
            get(apiserver, f"/api/v1/namespaces/{ns}/replicationcontrollers/rc1")["status"].get("readyReplicas") == 2
        ),
        10,
        "rc ready",
    )
    kubectl("-n", ns, "scale", "rc/rc1", "--replicas=0", check=True)
    wait_for(lambda: not live(list_pods(apiserver, ns, "app=rc1")), 10, "rc scaled to 0")


def test_deleting_a_deployment_deletes_its_replica_sets_and_pods(apiserver, kubectl, ns):
    kubectl("-n", ns, "create", "deployment", "gc", f"--image={IMAGE}", "--replicas=2", check=True)
    wait_for(lambda: len(list_pods(apiserver, ns, "app=gc")) == 2, 10, "pods")
    kubectl("-n", ns, "delete", "deployment", "gc", "--timeout=20s", check=True)
    wait_for(lambda: not replica_sets(apiserver, ns, "app=gc"), 20, "replica sets collected")
    wait_for(lambda: not list_pods(apiserver, ns, "app=gc"), 20, "pods collected")


def _deployment(name: str, **spec) -> dict:
    base = {
        "replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": IMAGE}]}},
    }
    base.update(spec)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": base}


def test_validation_as_upstream(apiserver, ns):
    bad = _deployment("v0", strategy={"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}})
    status, doc = apiserver.json("POST", apps_path(ns, "deployments"), bad)
    assert status == 422, doc
    assert doc["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "0%": may not be 0 when `maxSurge` is 0',
            "field": "spec.strategy.rollingUpdate.maxUnavailable",
        }
    ]
    mismatch = _deployment("v1", selector={"matchLabels": {"app": "other"}})
    status, doc = apiserver.json("POST", apps_path(ns, "deployments"), mismatch)
    assert status == 422
    assert "spec.template.metadata.labels: Invalid value" in doc["message"]
    assert "`selector` does not match template `labels`" in doc["message"]
    status, doc = apiserver.json("POST", apps_path(ns, "deployments"), _deployment("v2", selector=None))
    assert status == 422 and "spec.selector: Required value" in doc["message"]
    never = _deployment("v3")
    never["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    status, doc = apiserver.json("POST", apps_path(ns, "deployments"), never)
    assert status == 422 and 'spec.template.spec.restartPolicy: Unsupported value: "Never"' in doc["message"]

    apiserver.json("POST", apps_path(ns, "deployments"), _deployment("v4"), expect=201)
    patch = {
        "spec": {
            "selector": {"matchLabels": {"app": "v4", "x": "y"}},
            "template": {"metadata": {"labels": {"app": "v4", "x": "y"}}},
        }
    }
    status, doc = apiserver.json("PATCH", apps_path(ns, "deployments", "v4"), patch, headers=MERGE)
    assert status == 422 and "spec.selector: Invalid value" in doc["message"] and "field is immutable" in doc["message"]

    # status sent to the main resource is ignored; a spec change bumps the generation
    def put():
        d = get(apiserver, apps_path(ns, "deployments", "v4"))
        d["status"] = {"replicas": 99}
        d["spec"]["replicas"] = 2
        status, out = apiserver.json("PUT", apps_path(ns, "deployments", "v4"), d)
        assert status in (200, 409), out
        return out if status == 200 else None  # 409: the controller wrote the status meanwhile

    out = wait_for(put, 10, "an update")
    assert out["metadata"]["generation"] == 2
    # annotations are copied to ReplicaSets: a change of them is a new generation too
    patch = {"metadata": {"annotations": {"team": "a"}}}
    _, out = apiserver.json("PATCH", apps_path(ns, "deployments", "v4"), patch, headers=MERGE, expect=200)
    assert out["metadata"]["generation"] == 3
    assert out.get("status", {}).get("replicas") != 99

    # a status write is checked as upstream checks one (the counters), through the sub-resource
    bad_status = {"status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 3}}
    for resource in ("deployments", "replicasets"):
        name = "v4"
        if resource == "replicasets":
            name = wait_for(lambda: replica_sets(apiserver, ns, "app=v4"), 10, "a replica set")[0]["metadata"]["name"]
        path = apps_path(ns, resource, name) + "/status"
        status, doc = apiserver.json("PATCH", path, bad_status, headers=MERGE)
        assert status == 422, doc
        assert "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas" in doc["message"]
        assert doc["details"]["causes"] == [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 3: cannot be greater than readyReplicas",
                "field": "status.availableReplicas",
            }
        ]


@pytest.mark.parametrize("version", ["1.27", "1.32"])
def test_rollout_undo_to_revision(apiserver, ns, tmp_path, version):
    binary = kubectl_binary(version)
    if not os.path.exists(binary):
        pytest.skip(f"{binary} not installed")
    kc = Kubectl(apiserver, tmp_path, binary)
    name = f"undo{version.replace('.', '')}"
    kc("-n", ns, "create", "deployment", name, f"--image={IMAGE}", "--replicas=1", check=True)
    for tag in ("2", "3"):
        wait_for(lambda: deployment_done_after_ready(apiserver, ns, name, 1), 20, "rollout")
        kc("-n", ns, "set", "image", f"deployment/{name}", f"busybox=orch.local/busybox:{tag}", check=True)
    wait_for(lambda: deployment_done_after_ready(apiserver, ns, name, 1), 20, "third rollout")
    out = kc("-n", ns, "rollout", "history", f"deployment/{name}", "--revision=2", check=True).stdout
    assert "orch.local/busybox:2" in out
    kc("-n", ns, "rollout", "undo", f"deployment/{name}", "--to-revision=1", check=True)
    d = wait_for(lambda: deployment_done_after_ready(apiserver, ns, name, 1), 20, "rolled back")
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert d["metadata"]["annotations"][REVISION] == "4"
    assert len(replica_sets(apiserver, ns, f"app={name}")) == 3  # revision 1's set came back as 4
    bad = kc("-n", ns, "rollout", "undo", f"deployment/{name}", "--to-revision=9")
    assert bad.returncode != 0 and "unable to find specified revision 9" in bad.stderr


def deployment_done_after_ready(server, ns: str, name: str, want: int) -> dict | None:
    for p in live(list_pods(server, ns, f"app={name}")):
        if not is_ready(p):
            mark_ready(server, p)
    return deployment_done(server, ns, name, want)


def test_min_ready_seconds_delays_availability(apiserver, ns):
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "slow"},
        "spec": {
            "replicas": 1,
            "minReadySeconds": 2,
            "selector": {"matchLabels": {"app": "slow"}},
            "template": {
                "metadata": {"labels": {"app": "slow"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE}]},
            },
        },
    }
    apiserver.json("POST", apps_path(ns, "replicasets"), rs, expect=201)
    ready_all(apiserver, ns, "app=slow", 1)
    status = wait_for(
        lambda: (
            (s := get(apiserver, apps_path(ns, "replicasets", "slow")).get("status", {})).get("readyReplicas") and s
        ),
        10,
        "ready",
    )
    assert "availableReplicas" not in status
    t0 = time.monotonic()
    wait_for(
        lambda: get(apiserver, apps_path(ns, "replicasets", "slow"))["status"].get("availableReplicas") == 1,
        10,
        "available after minReadySeconds",
    )
    assert time.monotonic() - t0 < 4  # requeued for the moment it turns available, not a resync


def test_progress_deadline_exceeded(apiserver, kubectl, ns):
    body = _deployment("stuck", progressDeadlineSeconds=1)
    apiserver.json("POST", apps_path(ns, "deployments"), body, expect=201)

    def timed_out():
        d = get(apiserver, apps_path(ns, "deployments", "stuck"))
        c = [c for c in d.get("status", {}).get("conditions", []) if c["type"] == "Progressing"]
        return c and c[0]["reason"] == "ProgressDeadlineExceeded" and c[0]

    cond = wait_for(timed_out, 10, "ProgressDeadlineExceeded")
    assert cond["status"] == "False"
    assert cond["message"].startswith('ReplicaSet "stuck-') and cond["message"].endswith('" has timed out progressing.')
    out = kubectl("-n", ns, "rollout", "status", "deployment/stuck", "--timeout=10s")
    assert out.returncode != 0 and 'deployment "stuck" exceeded its progress deadline' in out.stderr
    # pods turning ready bring it back
    ready_all(apiserver, ns, "app=stuck", 1)
    wait_for(lambda: deployment_done(apiserver, ns, "stuck", 1), 10, "complete after all")
    kubectl("-n", ns, "rollout", "status", "deployment/stuck", "--timeout=10s", check=True)


def test_quota_stops_creates_until_raised(apiserver):
    qns = uniq("wlq")
    create_namespace(apiserver, qns)
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}}}
    apiserver.json("POST", f"/api/v1/namespaces/{qns}/resourcequotas", quota, expect=201)
    wait_for(
        lambda: get(apiserver, f"/api/v1/namespaces/{qns}/resourcequotas/q").get("status", {}).get("hard"),
        10,
        "quota status",
    )
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "q"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "q"}},
            "template": {
                "metadata": {"labels": {"app": "q"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE}]},
            },
        },
    }
    apiserver.json("POST", apps_path(qns, "replicasets"), rs, expect=201)

    def failure():
        s = get(apiserver, apps_path(qns, "replicasets", "q")).get("status", {})
        return next((c for c in s.get("conditions", []) if c["type"] == "ReplicaFailure"), None)

    cond = wait_for(failure, 10, "ReplicaFailure")
    assert cond["reason"] == "FailedCreate" and "exceeded quota" in cond["message"], cond
    assert len(list_pods(apiserver, qns, "app=q")) == 1
    apiserver.json(
        "PATCH", f"/api/v1/namespaces/{qns}/resourcequotas/q", {"spec": {"hard": {"pods": "5"}}}, headers=MERGE
    )
    wait_for(lambda: len(list_pods(apiserver, qns, "app=q")) == 3, 30, "the rest once the quota allows")
    wait_for(lambda: failure() is None, 10, "ReplicaFailure removed")
