"""A one-node cluster end to end: orch-apiserver on SQLite, the session's containerd,
an agent started only with ``join`` and a fresh bootstrap token, and kubectl.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.apiserver_fixtures import ApiServerProcess
from tests.components import REPO_ROOT, free_port
from tests.e2e.harness import NODE, Cluster, new_cgroup_root


@pytest.fixture(scope="module")
def cluster(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("cluster")
    cg = new_cgroup_root()
    (work / "manifests").mkdir()
    (work / "manifests" / "st.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: st}\nspec:\n  terminationGracePeriodSeconds: 1\n"
        "  containers: [{name: c, image: orch.local/busybox:1, imagePullPolicy: Never, "
        "command: [sleep, '3600']}]\n"
    )
    with ApiServerProcess(
        str(work / "api"),
        free_port(),
        extra_args=[
            "--enable-bootstrap-token-auth",
            "--node-monitor-grace-period=6s",
            "--node-monitor-period=1s",
            "--metric-resolution=2s",
            "--horizontal-pod-autoscaler-sync-period=2s",
        ],
    ) as api:
        c = Cluster(work, api, containerd, cg)
        yield c
        c.stop_agent()
        c.cleanup()


def test_join_refuses_wrong_token_and_pin(cluster):
    join = cluster.token()
    server, token, pin = join[3], join[5], join[7]
    wrong_token = token.split(".")[0] + "." + "0" * 16
    r = subprocess.run(
        cluster.agent_argv(
            ["orch-agent", "join", "--server", server, "--token", wrong_token, "--discovery-token-ca-cert-hash", pin]
        ),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert r.returncode != 0
    assert "signature" in (r.stdout + r.stderr)
    r = subprocess.run(
        cluster.agent_argv(
            [
                "orch-agent",
                "join",
                "--server",
                server,
                "--token",
                token,
                "--discovery-token-ca-cert-hash",
                "sha256:" + "0" * 64,
            ]
        ),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert r.returncode != 0
    assert "discovery-token-ca-cert-hash" in (r.stdout + r.stderr)


def test_join_node_ready_runs_api_and_mirror_pods(cluster):
    join = cluster.token()
    t0 = time.monotonic()
    cluster.start_agent(cluster.agent_argv(join))
    # How fast a node joins is a benchmark figure (tests/bench/bench_cluster.py), not an
    # assertion here: on a loaded machine it takes longer than on a quiet one.
    cluster.wait(lambda: cluster.node_ready() == "True", 60, "node Ready after join")
    print(f"node Ready {time.monotonic() - t0:.1f} s after the join started")
    csrs = cluster.get("csr")["items"]
    assert any(
        c["spec"]["username"].startswith("system:bootstrap:")
        and any(x["type"] == "Approved" for x in c["status"].get("conditions", []))
        and c["status"].get("certificate")
        for c in csrs
    )
    lease = cluster.get("lease", NODE, "-n", "orch-node-lease")
    assert lease["spec"]["holderIdentity"] == NODE
    wide = cluster.kubectl("get", "nodes", "-o", "wide").stdout
    assert "containerd://" in wide and "Ready" in wide

    cluster.kubectl(
        "run",
        "web",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo hello-from-web; exec httpd -f -p 8080",
    )
    pod = cluster.wait(
        lambda: (
            (p := cluster.get("pod", "web"))
            and p["status"].get("phase") == "Running"
            and p["status"].get("podIP")
            and p
        ),
        30,
        "web Running",
    )
    assert pod["spec"]["nodeName"] == NODE
    cluster.wait(lambda: "hello-from-web" in cluster.kubectl("logs", "web", check=False).stdout, 10, "kubectl logs")
    t1 = time.monotonic()
    cluster.kubectl("delete", "pod", "web", "--grace-period=3", timeout=60)
    assert time.monotonic() - t1 < 15
    assert cluster.get("pod", "web") is None

    mirror = cluster.wait(lambda: cluster.get("pod", f"st-{NODE}"), 15, "mirror pod")
    assert "orch.io/config.mirror" in mirror["metadata"]["annotations"]
    old_uid = mirror["metadata"]["uid"]
    cluster.kubectl("delete", "pod", f"st-{NODE}", "--wait=false")
    cluster.wait(
        lambda: (m := cluster.get("pod", f"st-{NODE}")) and m["metadata"]["uid"] != old_uid, 20, "mirror pod re-created"
    )


def test_configmap_and_secret_changes_reach_running_pods(cluster):
    """Volumes of a running pod follow their ConfigMap and Secret (the agent watches what its
    pods reference), and the pod's own labels reach its downward API volume."""
    objects = cluster.work / "vol-objects.json"
    objects.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "one"}},
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "sec"},
                        "stringData": {"password": "first"},
                    },
                ],
            }
        )
    )
    cluster.kubectl("create", "--validate=false", "-f", str(objects))  # (validation: the OpenAPI tests)
    manifest = cluster.work / "vols.yaml"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "vols", "labels": {"tier": "a"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "c",
                            "image": "orch.local/busybox:1",
                            "imagePullPolicy": "Never",
                            "command": [
                                "sh",
                                "-c",
                                'while true; do echo "$(cat /cfg/greeting) $(cat /sec/password) '
                                "$(cat /info/labels | tr '\\n' ' ')\"; sleep 0.5; done",
                            ],
                            "volumeMounts": [
                                {"name": "cfg", "mountPath": "/cfg"},
                                {"name": "sec", "mountPath": "/sec"},
                                {"name": "info", "mountPath": "/info"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "cfg", "configMap": {"name": "cfg"}},
                        {"name": "sec", "secret": {"secretName": "sec"}},
                        {
                            "name": "info",
                            "downwardAPI": {
                                "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
                            },
                        },
                    ],
                },
            }
        )
    )
    cluster.kubectl("create", "--validate=false", "-f", str(manifest))
    cluster.wait(
        lambda: (p := cluster.get("pod", "vols")) and p["status"].get("phase") == "Running", 30, "vols Running"
    )

    def last_line() -> str:
        lines = cluster.kubectl("logs", "vols", "--tail=1", check=False).stdout.strip().splitlines()
        return lines[-1] if lines else ""

    cluster.wait(lambda: last_line().startswith("one first") and 'tier="a"' in last_line(), 15, "the initial content")
    cid = cluster.get("pod", "vols")["status"]["containerStatuses"][0]["containerID"]
    cluster.kubectl("patch", "configmap", "cfg", "--type=merge", "-p", '{"data": {"greeting": "two"}}')
    cluster.kubectl("patch", "secret", "sec", "--type=merge", "-p", '{"stringData": {"password": "second"}}')
    cluster.kubectl("label", "pod", "vols", "tier=b", "--overwrite")
    cluster.wait(
        lambda: last_line().startswith("two second") and 'tier="b"' in last_line(),
        20,
        "the updated content in the running container",
    )
    pod = cluster.get("pod", "vols")
    assert pod["status"]["containerStatuses"][0]["containerID"] == cid  # not restarted
    cluster.kubectl("delete", "pod", "vols", "--grace-period=1")
    cluster.kubectl("delete", "-f", str(objects))


def test_kubectl_logs_follow_tail_and_previous(cluster):
    """pods/log through the API server and the agent: -f streams, --tail cuts, --previous reads
    the last terminated instance of a restarted container."""
    cluster.kubectl(
        "run",
        "talker",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Always",
        "--",
        "sh",
        "-c",
        'i=0; while [ $i -lt 3 ]; do i=$((i+1)); echo "line $i of $(hostname)-$(cat /proc/uptime | '
        "cut -d' ' -f1)\"; sleep 0.3; done; exit 3",
    )
    # The first instance exits 3 and is restarted: its output is the previous log.
    pod = cluster.wait(
        lambda: (
            (p := cluster.get("pod", "talker"))
            and (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1
            and p
        ),
        40,
        "a restart",
    )
    previous = cluster.kubectl("logs", "talker", "--previous").stdout.splitlines()
    assert [line.split(" of ")[0] for line in previous] == ["line 1", "line 2", "line 3"], previous
    tail = cluster.kubectl("logs", "talker", "--previous", "--tail=1").stdout.splitlines()
    assert tail == previous[-1:]
    # -f keeps the stream open and delivers lines as they are written.
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", cluster.kubeconfig, "logs", "-f", "talker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(cluster.work)},
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("line "), (first, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        proc.kill()
        proc.wait(10)
    assert pod["spec"]["nodeName"] == NODE
    cluster.kubectl("delete", "pod", "talker", "--grace-period=1")


def test_service_endpoints_and_variables_follow_real_pods(cluster):
    """A Service selecting a pod on containerd: its Endpoints and EndpointSlice list the pod's
    real IP once it runs, the container got the service variables, and the pod's deletion
    empties them."""
    cluster.kubectl("create", "service", "clusterip", "echo", "--tcp=80:8080")
    svc = cluster.get("service", "echo")
    cluster_ip = svc["spec"]["clusterIP"]
    orch_ip = cluster.get("service", "orch")["spec"]["clusterIP"]
    cluster.kubectl(
        "run",
        "echo",
        "--labels=app=echo",
        "--image=orch.local/busybox:1",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "env | sort; exec httpd -f -p 8080",
    )
    pod = cluster.wait(
        lambda: (
            (p := cluster.get("pod", "echo"))
            and p["status"].get("podIP")
            and p["status"].get("phase") == "Running"
            and p
        ),
        30,
        "echo Running",
    )
    ip = pod["status"]["podIP"]

    def endpoint_ips() -> list[str]:
        ep = cluster.get("endpoints", "echo") or {}
        return [
            f"{a['ip']}:{p['port']}"
            for ss in ep.get("subsets") or []
            for a in ss.get("addresses") or []
            for p in ss["ports"]
        ]

    cluster.wait(lambda: endpoint_ips() == [f"{ip}:8080"], 10, "the pod in the Endpoints")
    slices = cluster.get("endpointslices", "-l", "orch.io/service-name=echo")["items"]
    [ep] = [e for s in slices for e in s.get("endpoints") or []]
    assert ep["addresses"] == [ip] and ep["conditions"]["ready"] is True and ep["nodeName"] == NODE
    env = cluster.wait(lambda: cluster.kubectl("logs", "echo", check=False).stdout, 10, "the pod's environment")
    assert f"ECHO_SERVICE_HOST={cluster_ip}" in env and "ECHO_SERVICE_PORT_80_8080=80" in env, env
    assert f"ORCH_SERVICE_HOST={orch_ip}" in env and f"ECHO_PORT=tcp://{cluster_ip}:80" in env, env
    cluster.kubectl("delete", "pod", "echo", "--grace-period=1", timeout=60)
    cluster.wait(lambda: endpoint_ips() == [], 10, "the Endpoints emptied")
    cluster.kubectl("delete", "service", "echo")


def test_stopped_agent_turns_node_unknown_and_back(cluster):
    assert cluster.node_ready() == "True"
    mirror = cluster.wait(
        lambda: (m := cluster.get("pod", f"st-{NODE}")) and m["status"].get("containerStatuses") and m,
        20,
        "status on the re-created mirror pod",
    )
    cid = next(s["containerID"] for s in mirror["status"]["containerStatuses"])
    argv = list(cluster.agent.args)
    cluster.stop_agent()
    cluster.wait(lambda: cluster.node_ready() == "Unknown", 50, "node Unknown")
    taints = [t["key"] for t in cluster.get("node", NODE)["spec"].get("taints", [])]
    assert "node.orch.io/unreachable" in taints
    cluster.start_agent(argv)
    cluster.wait(lambda: cluster.node_ready() == "True", 30, "node Ready again")
    mirror = cluster.wait(
        lambda: (m := cluster.get("pod", f"st-{NODE}")) and m["status"].get("containerStatuses") and m,
        20,
        "mirror status",
    )
    assert next(s["containerID"] for s in mirror["status"]["containerStatuses"]) == cid


def test_kubectl_top_node_and_pod(cluster):
    """The resource metrics API from the agent's /metrics/resource: kubectl top (which asks
    for metrics.k8s.io) prints the node's and the static pod's usage."""
    assert cluster.node_ready() == "True"
    pod = f"st-{NODE}"

    stderr = [""]

    def top(*args: str) -> str:
        r = cluster.kubectl("top", *args, check=False)
        stderr[0] = r.stderr
        return r.stdout if r.returncode == 0 else ""

    def wait_top(*args: str) -> str:
        try:
            return cluster.wait(lambda: top(*args), 30, f"kubectl top {' '.join(args)}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nkubectl said: {stderr[0]}") from None

    out = wait_top("node", NODE)
    header, row = out.splitlines()[:2]
    assert header.split()[:2] == ["NAME", "CPU(cores)"] and "MEMORY(bytes)" in header.split(), header
    cells = row.split()
    assert cells[0] == NODE and cells[1].endswith("m") and cells[2].endswith("%") and cells[3].endswith("Mi"), row
    out = wait_top("pod", pod)
    assert out.splitlines()[1].split()[0] == pod
    containers = cluster.kubectl("top", "pod", pod, "--containers").stdout
    assert containers.splitlines()[1].split()[:2] == [pod, "c"]
    # The API itself, in both group spellings.
    metrics = json.loads(cluster.kubectl("get", "--raw", f"/apis/metrics.orch.io/v1beta1/nodes/{NODE}").stdout)
    assert metrics["kind"] == "NodeMetrics" and metrics["apiVersion"] == "metrics.orch.io/v1beta1"
    assert set(metrics["usage"]) == {"cpu", "memory"} and metrics["window"].endswith("s")
    listed = json.loads(cluster.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods").stdout)
    assert listed["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert pod in [p["metadata"]["name"] for p in listed["items"]]


BURN = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: burn}
spec:
  selector: {matchLabels: {app: burn}}
  template:
    metadata: {labels: {app: burn}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: orch.local/busybox:1
        command: [sh, -c, "while [ -e /ctl/burn ]; do :; done; exec sleep 3600"]
        resources: {requests: {cpu: 100m}, limits: {cpu: 200m}}
        volumeMounts: [{name: ctl, mountPath: /ctl}]
      volumes: [{name: ctl, hostPath: {path: CTL}}]
"""


def test_horizontal_pod_autoscaler_scales_a_busy_deployment_up_and_down(cluster):
    """kubectl autoscale on a Deployment whose pods keep their CPU busy (limited to 200m
    against a 100m request) while a file on the node exists: the controller reads the
    pods' usage from the agent through the resource metrics API and scales the
    Deployment up; once the file is gone the pods idle and (with a scale-down
    stabilization window of 0) it scales back down to its minimum."""
    assert cluster.node_ready() == "True"
    ctl = cluster.work / "burn-ctl"
    ctl.mkdir()
    (ctl / "burn").touch()
    manifest = cluster.work / "burn.yaml"
    manifest.write_text(BURN.replace("CTL", str(ctl)))
    cluster.kubectl("apply", "-f", str(manifest))
    cluster.kubectl("autoscale", "deployment", "burn", "--cpu-percent=50", "--min=1", "--max=3")
    cluster.kubectl(
        "patch",
        "hpa",
        "burn",
        "--type=merge",
        "-p",
        '{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0}}}}',
    )
    try:
        cluster.wait(lambda: (d := cluster.get("deployment", "burn")) and d["spec"]["replicas"] >= 2, 120, "a scale-up")
        hpa = cluster.get("hpa", "burn")
        conditions = {c["type"]: c for c in hpa["status"]["conditions"]}
        assert conditions["ScalingActive"]["reason"] == "ValidMetricFound", conditions
        events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=burn").stdout
        assert "SuccessfulRescale" in events and "cpu resource utilization (percentage of request) above target" in (
            events
        ), events
        table = cluster.kubectl("get", "hpa", "burn").stdout.splitlines()
        row = table[1].split()
        assert row[1] == "Deployment/burn" and row[2].endswith("%/50%"), table

        (ctl / "burn").unlink()
        cluster.wait(
            lambda: (d := cluster.get("deployment", "burn")) and d["spec"]["replicas"] == 1, 120, "a scale-down to 1"
        )
        events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=burn").stdout
        assert "New size: 1; reason: All metrics below target" in events, events
        assert cluster.get("hpa", "burn")["status"]["desiredReplicas"] == 1
    finally:
        cluster.kubectl("delete", "hpa", "burn", check=False)
        cluster.kubectl("delete", "deployment", "burn", "--wait=false", check=False)
        # The agent must see the pods go (their volumes unmounted) before the module stops it.
        cluster.wait(
            lambda: not (cluster.get("pods", "-l", "app=burn") or {"items": [1]})["items"], 60, "the burn pods gone"
        )
