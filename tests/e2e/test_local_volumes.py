"""Local volumes end to end: a claim of the default class ``local-path`` on a one-node
cluster (orch-apiserver, the session's containerd, a joined agent, kubectl). The pod's
file outlives the pod; deleting the claim removes the directory through the
provisioner's helper pod on the node."""

from __future__ import annotations

import os
import stat
import uuid

import pytest

from tests.apiserver_fixtures import ApiServerProcess
from tests.components import free_port
from tests.e2e.harness import NODE, Cluster, new_cgroup_root

CLAIM = """
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
"""

POD = """
apiVersion: v1
kind: Pod
metadata: {name: POD}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: orch.local/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, "SCRIPT; exec sleep 3600"]
    volumeMounts: [{name: d, mountPath: /data}]
  volumes:
  - {name: d, persistentVolumeClaim: {claimName: data}}
"""


@pytest.fixture(scope="module")
def cluster(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("volumes")
    cg = new_cgroup_root("orch-vol")
    (work / "manifests").mkdir()
    with ApiServerProcess(
        str(work / "api"),
        free_port(),
        extra_args=["--enable-bootstrap-token-auth", f"--local-path-dir={work}/storage"],
    ) as api:
        c = Cluster(work, api, containerd, cg)
        c.start_agent(c.agent_argv(c.token()))
        c.wait(lambda: c.node_ready() == "True", 30, "node Ready")
        yield c
        c.stop_agent()
        c.cleanup()


def apply(cluster: Cluster, manifest: str) -> None:
    path = cluster.work / f"m-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(manifest)
    cluster.kubectl("apply", "-f", str(path))


def running(cluster: Cluster, name: str) -> dict | None:
    pod = cluster.get("pod", name)
    return pod if pod and pod["status"].get("phase") == "Running" else None


def test_claim_data_outlives_the_pod_and_goes_with_the_claim(cluster):
    apply(cluster, CLAIM)
    apply(cluster, POD.replace("POD", "writer").replace("SCRIPT", "echo persisted > /data/f"))
    cluster.wait(lambda: running(cluster, "writer"), 90, "writer Running")
    assert "local-path (default)" in cluster.kubectl("get", "storageclass").stdout
    assert "Bound" in cluster.kubectl("get", "pvc", "data").stdout
    claim = cluster.get("pvc", "data")
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "local-path"
    pv = cluster.get("pv", claim["spec"]["volumeName"])
    path = pv["spec"]["hostPath"]["path"]
    assert path == f"{cluster.work}/storage/pvc-{claim['metadata']['uid']}_default_data"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777
    cluster.wait(lambda: os.path.exists(f"{path}/f"), 20, "file written")

    cluster.kubectl("delete", "pod", "writer", "--grace-period=1", timeout=60)
    apply(cluster, POD.replace("POD", "reader").replace("SCRIPT", "cat /data/f"))
    cluster.wait(lambda: running(cluster, "reader"), 60, "reader Running")
    cluster.wait(lambda: "persisted" in cluster.kubectl("logs", "reader", check=False).stdout, 20, "file read back")

    cluster.kubectl("delete", "pod", "reader", "--grace-period=1", timeout=60)
    cluster.kubectl("delete", "pvc", "data", timeout=60)
    cluster.wait(lambda: cluster.get("pv", pv["metadata"]["name"]) is None, 90, "volume deleted")
    assert not os.path.exists(path)
    assert cluster.get("pod", f"helper-pod-delete-{pv['metadata']['name']}", "-n", "orch-system") is None
    assert NODE == pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]


STATEFUL_SET = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: orch.local/busybox:1
        command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1; done"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 32Mi}}
"""


def test_stateful_set_claims_keep_a_pods_data_when_it_is_deleted(cluster):
    """A StatefulSet of 2 with a claim template: each pod gets its own provisioned claim;
    a file written in db-0 is there in the db-0 that replaces it."""
    apply(cluster, STATEFUL_SET)
    first = cluster.wait(lambda: running(cluster, "db-1") and running(cluster, "db-0"), 120, "db-0 and db-1 Running")
    cluster.kubectl("rollout", "status", "statefulset/db", "--timeout=30s")
    for i in (0, 1):
        claim = cluster.get("pvc", f"data-db-{i}")
        assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "local-path", claim
    cluster.kubectl("exec", "db-0", "--", "sh", "-c", "hostname > /data/who")
    cluster.kubectl("delete", "pod", "db-0", timeout=60)
    again = cluster.wait(
        lambda: (p := running(cluster, "db-0")) and p["metadata"]["uid"] != first["metadata"]["uid"] and p,
        90,
        "a new db-0 Running",
    )
    volume = next(v for v in again["spec"]["volumes"] if v["name"] == "data")
    assert volume["persistentVolumeClaim"]["claimName"] == "data-db-0"
    assert cluster.kubectl("exec", "db-0", "--", "cat", "/data/who").stdout == "db-0\n"
    # db-1 has a claim (and a directory) of its own
    assert cluster.kubectl("exec", "db-1", "--", "ls", "/data").stdout == ""

    cluster.kubectl("delete", "statefulset", "db")
    # The agent must see the pods go before the module stops it.
    cluster.wait(lambda: not (cluster.get("pods", "-l", "app=db") or {"items": [1]})["items"], 60, "db pods gone")
